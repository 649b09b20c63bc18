"""Part files: the sorted records of one packing group, from which every shard takes its key range.

Records do not travel through Beam's shuffle: each packing group writes one part file under
`OUTPUT/_tmp/parts/` (sort keys, end offsets, the records' bytes in TFRecord framing, in key
order), the shuffle carries only the file names, and each shard is a merge of one key range of
every part (`key_range`). A runner then never holds the corpus's records in memory.
"""

from __future__ import annotations

import functools
import struct

import google_crc32c
import numpy as np

from pipeline import files

TMP_DIR = "_tmp"  # parts and unfinished shards live here; a finished build removes it


def remove_tmp(folder: str) -> None:
    """`folder`'s _tmp/ (parts, unfinished shards), once nothing reads it."""
    files.remove_tree(f"{folder}/{TMP_DIR}")


def shard_name(split: str, shard: int, num_shards: int) -> str:
    return f"{split}-{shard:05d}-of-{num_shards:05d}.tfrecord"


def tfrecord_framed(record: bytes) -> bytes:
    """A record in TFRecord framing: length, masked CRC-32C of the length, data, masked CRC-32C
    of the data. Parts hold records framed, so a shard is their bytes in order, and the builder
    needs no TensorFlow.

    The checksum is CRC-32C in C (google-crc32c, the implementation Beam's WriteToTFRecord picks
    too), masked as TFRecord masks it (`masked_crc32c`): tests read every shard back with TF's
    reader, which verifies both checksums of every record."""
    return b"".join((_length_header(len(record)), record, struct.pack("<I", masked_crc32c(record))))


def count_framed(data: bytes) -> int:
    """The number of records in `data`, TFRecord-framed as `tfrecord_framed` writes them (a
    shard's bytes): each is its length (8), the length's CRC (4), the record, its CRC (4)."""
    records, at = 0, 0
    while at < len(data):
        at += 16 + int.from_bytes(data[at : at + 8], "little")
        records += 1
    return records


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C: the checksum rotated right by 15 bits plus a constant (so that a
    CRC of data holding CRCs is not trivially a CRC)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@functools.lru_cache(maxsize=1 << 12)
def _length_header(length: int) -> bytes:  # records of a corpus have a few hundred lengths
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", masked_crc32c(packed))


def part_path(output_dir: str, split: str, group: int) -> str:
    """A packing group's part file: the key of the group's first document names it."""
    return f"{output_dir}/{TMP_DIR}/parts/{split}-{group:016x}.part"


def write_part(path: str, keys: np.ndarray, records: list[bytes]) -> None:
    """A part file: the record count, the records' sort keys, their end offsets (int64 each), then
    their bytes, in the order of their keys (equal keys, about one build in 10**9: by their bytes,
    as sorting (key, record) pairs orders them). Raw arrays, not .npz: zipping a group's records
    cost a second copy of them."""
    keys = np.asarray(keys, np.int64)
    order = np.argsort(keys, kind="stable")
    if len(keys) > 1 and (np.diff(keys[order]) == 0).any():
        pairs = sorted(zip(keys.tolist(), records, strict=True))
        keys, records = np.array([k for k, _ in pairs], np.int64), [r for _, r in pairs]
    else:
        keys, records = keys[order], [records[i] for i in order.tolist()]
    ends = np.cumsum([len(r) for r in records], dtype=np.int64)
    header = [np.int64(len(keys)).tobytes(), keys.tobytes(), ends.tobytes()]
    with files.create_file(path) as f:
        f.write(b"".join(header + records))


def read_part(path: str, low: int = 0, high: int = 1 << 63) -> tuple[np.ndarray, np.ndarray, bytes]:
    """(sort keys, end offsets, bytes) of the records of a part file whose keys lie in
    [low, high): a shard's share of a group (`key_range`). Only those records' bytes are read,
    so the shards of a split, merging from every part, read each part's records once in all."""
    with files.open_file(path) as f:
        n = int(np.frombuffer(f.read(8), np.int64)[0])
        head = np.frombuffer(f.read(16 * n), np.int64)
        keys, ends = head[:n], head[n:]
        # Keys are int64: the last range's end, 2**63, is past them all (and past int64).
        first = int(np.searchsorted(keys, low))
        last = n if high > np.iinfo(np.int64).max else int(np.searchsorted(keys, high))
        begin = int(ends[first - 1]) if first else 0
        end = int(ends[last - 1]) if last else 0
        f.seek(8 + 16 * n + begin)
        data = f.read(end - begin)
    return keys[first:last], ends[first:last] - begin, data


def key_range(shard: int, shards: int) -> tuple[int, int]:
    """The sort keys of one shard of `shards`: an equal slice of [0, 2**63). A record's key is a
    seeded uniform draw, so each shard holds a uniform random share of every group, and a shard
    is known by its range alone: the shard count can wait until every record exists."""
    return shard * (1 << 63) // shards, (shard + 1) * (1 << 63) // shards
