"""Part files: the sorted records one packing group contributes to one shard.

Records do not travel through Beam's shuffle: each group writes one part file per shard under
`OUTPUT/_tmp/parts/` (sort keys, end offsets, the records' bytes in TFRecord framing), the
shuffle carries only the file names, and each shard is a merge of its parts. A runner then never
holds the corpus's records in memory.
"""

from __future__ import annotations

import functools
import struct
import uuid
from typing import NamedTuple

import google_crc32c
import numpy as np

from pipeline import files

TMP_DIR = "_tmp"  # parts and unfinished shards live here; a finished build removes it


def remove_tmp(folder: str) -> None:
    """`folder`'s _tmp/ (parts, unfinished shards, spilled tokens), once nothing reads it."""
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


def part_path(output_dir: str, split: str, shard: int, group: int) -> str:
    return f"{output_dir}/{TMP_DIR}/parts/{split}-{shard:05d}-g{group:05d}.part"


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


def read_part(path: str) -> tuple[np.ndarray, np.ndarray, bytes]:
    """(sort keys, end offsets, bytes) of a part file."""
    data = files.read_file(path)
    n = int(np.frombuffer(data, np.int64, 1)[0])
    keys = np.frombuffer(data, np.int64, n, 8)
    ends = np.frombuffer(data, np.int64, n, 8 + 8 * n)
    return keys, ends, data[8 + 16 * n :]


# Tokenized documents do not travel through Beam's shuffle either: TokenizeDocuments appends each
# one to a spill file of its bundle under `ROOT/_tmp/tokens/`, and the shuffle that groups them
# for packing carries `SpilledDoc` pointers (a few dozen bytes each). A runner then holds neither
# the corpus's text nor its tokens, whatever its size (docs/corpus.md, "Memory").
TOKENS_DIR = "tokens"
_HEADER = 4  # int64s before each document: key, tokens, sentences, has unit starts


class SpilledDoc(NamedTuple):
    """Where one tokenized document lies in a spill file, and what grouping needs of it."""

    key: int
    n_tokens: int
    path: str
    offset: int
    size: int


def spill_dir(root: str) -> str:
    return f"{root}/{TMP_DIR}/{TOKENS_DIR}"


class Spill:
    """One bundle's spill file, written as documents arrive (a retried bundle writes a new file:
    the name is random, and only the pointers of the attempt that succeeded travel on)."""

    def __init__(self, folder: str):
        self.path = f"{folder}/{uuid.uuid4().hex}.bin"
        self._file = files.create_file(self.path)
        self._offset = 0

    def write(self, doc) -> SpilledDoc:
        units = doc.unit_starts
        parts = [
            np.array([doc.key, len(doc.tokens), len(doc.sentence_lengths), units is not None], np.int64),
            np.ascontiguousarray(doc.tokens, np.int32),
            np.ascontiguousarray(doc.sentence_lengths, np.int32),
        ]
        if units is not None:
            parts.append(np.ascontiguousarray(units, np.bool_))
        data = b"".join(p.tobytes() for p in parts)
        self._file.write(data)
        pointer = SpilledDoc(int(doc.key), len(doc.tokens), self.path, self._offset, len(data))
        self._offset += len(data)
        return pointer

    def close(self) -> None:
        self._file.close()


def read_spilled(pointers: list[SpilledDoc]) -> list:
    """The TokenizedDocs the pointers name, each spill file opened once."""
    from pipeline.instances import TokenizedDoc

    docs = []
    by_file: dict[str, list[SpilledDoc]] = {}
    for pointer in pointers:
        by_file.setdefault(pointer.path, []).append(pointer)
    for path, here in sorted(by_file.items()):
        with files.open_file(path) as f:
            for pointer in sorted(here, key=lambda p: p.offset):
                f.seek(pointer.offset)
                data = f.read(pointer.size)
                key, n_tokens, n_sentences, has_units = np.frombuffer(data[: 8 * _HEADER], np.int64)
                at = 8 * _HEADER
                tokens = np.frombuffer(data, np.int32, int(n_tokens), at)
                at += 4 * int(n_tokens)
                lengths = np.frombuffer(data, np.int32, int(n_sentences), at)
                at += 4 * int(n_sentences)
                units = np.frombuffer(data, np.bool_, int(n_tokens), at) if has_units else None
                docs.append(TokenizedDoc(int(key), tokens, lengths, units))
    return docs
