"""`tf.train.Example` bytes for the schema's rows, encoded column-wise with numpy.

Building one protobuf message per row costs ~100 us, four times all the other per-instance work of
the corpus build together; encoding each feature column once with numpy costs ~10 us per row. The
bytes are exactly protobuf's `Example.SerializeToString(deterministic=True)`
(tests/pipeline/test_tfexample.py holds us to that), so any TFRecord reader parses them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from pipeline.schema import FEATURES


def _varint_columns(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varint bytes of every value of an (N, L) non-negative int64 array.

    Returns (data, lengths): each row's bytes back to back in `data`, and bytes per row.
    """
    largest = int(values.max(initial=0))
    width = max(1, (largest.bit_length() + 6) // 7)  # bytes of the largest
    if width == 1:  # every value below 128 is its own byte (masks, segments, positions at 128)
        return values.astype(np.uint8).reshape(-1), np.full(len(values), values.shape[1], np.int64)
    if largest < _TABLE_LIMIT:  # token ids: every value's bytes looked up at once
        words, keep, n_bytes = _varint_table(largest.bit_length())
        # Each value's bytes as one little-endian 4-byte word, and a word of 1/0 bytes saying which
        # of them belong to the varint: one gather each, then one `np.compress` over the bytes
        # (boolean indexing of an (N, L, 3) table cost five times as much).
        data = np.compress(keep[values].view(np.bool_).reshape(-1), words[values].view(np.uint8).reshape(-1))
        return data, n_bytes[values].sum(axis=1, dtype=np.int64)
    dtype = np.uint32 if width <= 4 else np.uint64
    v = values.astype(dtype)
    n_bytes = np.ones(v.shape, np.uint8)
    for k in range(1, width):
        n_bytes += v >= dtype(1) << dtype(7 * k)
    k = np.arange(width, dtype=dtype)  # (K,)
    groups = ((v[..., None] >> (dtype(7) * k)) & dtype(0x7F)).astype(np.uint8)  # (N, L, K)
    groups |= (k < n_bytes[..., None] - 1).astype(np.uint8) << 7  # continuation bit
    present = k < n_bytes[..., None]
    return groups[present], n_bytes.sum(axis=1, dtype=np.int64)


_TABLE_LIMIT = 1 << 21  # values of at most 3 varint bytes: every vocab's ids


@functools.lru_cache(maxsize=8)
def _varint_table(bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every value below 2**bits (at most 21): its varint bytes as a little-endian 4-byte word,
    a word whose bytes are 1 where a varint byte is and 0 after it, and its count of bytes."""
    v = np.arange(1 << bits, dtype="<u4")
    n_bytes = (1 + (v >= 1 << 7) + (v >= 1 << 14)).astype(np.uint8)
    words = np.zeros_like(v)
    for k in range(3):
        continued = (k + 1 < n_bytes).astype("<u4") << 7  # the continuation bit
        words |= (((v >> (7 * k)) & 0x7F) | continued) << (8 * k)
    keep = np.array([0, 0x1, 0x101, 0x10101], "<u4")[n_bytes]
    return words, keep, n_bytes


@functools.lru_cache(maxsize=1 << 16)
def _varint(n: int) -> bytes:
    out, rest = bytearray(), n
    while rest >= 0x80:
        out.append((rest & 0x7F) | 0x80)
        rest >>= 7
    out.append(rest)
    return bytes(out)


@functools.lru_cache(maxsize=1 << 16)
def _entry_prefix(name: str, kind: bytes, packed_bytes: int) -> bytes:
    """The bytes of one feature-map entry up to its packed values (cached per packed length)."""
    key = b"\x0a" + _varint(len(name)) + name.encode()  # entry.key = 1
    values_header = b"\x0a" + _varint(packed_bytes)  # Int64List/FloatList.value = 1, packed
    feature_header = kind + _varint(len(values_header) + packed_bytes)  # Feature.<kind>
    feature_bytes = len(feature_header) + len(values_header) + packed_bytes
    value_header = b"\x12" + _varint(feature_bytes)  # entry.value = 2
    entry_bytes = len(key) + len(value_header) + feature_bytes
    return (
        b"\x0a" + _varint(entry_bytes) + key + value_header + feature_header + values_header
    )  # Features.feature = 1


def serialize_examples(rows: Mapping[str, np.ndarray], seq_len: int, max_predictions: int) -> list[bytes]:
    """Serialized `tf.train.Example`s, one per row of the (N, length) arrays in `rows`: every
    required feature of the schema, and each optional one `rows` holds.

    Features go in sorted name order, as deterministic serialization orders the map: plain
    `SerializeToString()` orders it differently from process to process, and the same seed must
    give the same bytes in every process.
    """
    lengths = {"seq_len": seq_len, "max_predictions": max_predictions, "one": 1}
    n = None
    # Per run of features, in name order: a fixed-size run (every row's entries the same size:
    # the masks, the weights, positions at 128) as one (N, bytes) matrix of prefixes and values,
    # or one variable-size feature (name, kind, packed data, row offsets). A row is then a few
    # slices joined, not two per feature.
    blocks: list = []
    for f in sorted(FEATURES, key=lambda f: f.name):
        if f.optional and f.name not in rows:
            continue
        if f.name not in rows:
            raise ValueError(f"feature {f.name}: missing")
        values = np.asarray(rows[f.name])
        if values.ndim != 2 or values.shape[1] != lengths[f.length]:
            raise ValueError(
                f"feature {f.name}: expected length {lengths[f.length]}, found {values.shape[-1]}"
            )
        if n is None:
            n = len(values)
        if f.dtype == "int64":
            if values.size and values.min() < 0:
                raise ValueError(f"feature {f.name}: negative values are not supported")
            data, row_bytes = _varint_columns(values)
            kind = b"\x1a"  # Feature.int64_list = 3
        else:
            data = values.astype("<f4").reshape(-1).view(np.uint8)
            row_bytes = np.full(len(values), 4 * values.shape[1])
            kind = b"\x12"  # Feature.float_list = 2
        if len(values) and (row_bytes == row_bytes[0]).all():
            prefix = np.frombuffer(_entry_prefix(f.name, kind, int(row_bytes[0])), np.uint8)
            entries = np.concatenate([np.broadcast_to(prefix, (n, len(prefix))), data.reshape(n, -1)], axis=1)
            if blocks and isinstance(blocks[-1], np.ndarray):
                entries = np.concatenate([blocks.pop(), entries], axis=1)
            blocks.append(entries)
        else:
            offsets = np.concatenate([[0], np.cumsum(row_bytes)]).tolist()
            blocks.append((f.name, kind, data.tobytes(), offsets))
    runs = []  # (bytes, width) of a fixed-size run, or the variable feature's tuple
    for block in blocks:
        runs.append((block.tobytes(), block.shape[1]) if isinstance(block, np.ndarray) else block)
    examples = []
    for r in range(n or 0):
        parts = []
        for run in runs:
            if len(run) == 2:
                data, width = run
                parts.append(data[r * width : (r + 1) * width])
            else:
                name, kind, data, offsets = run
                start, end = offsets[r], offsets[r + 1]
                parts.append(_entry_prefix(name, kind, end - start))
                parts.append(data[start:end])
        body = b"".join(parts)
        examples.append(b"\x0a" + _varint(len(body)) + body)  # Example.features = 1
    return examples


def serialize_example(arrays: Mapping[str, np.ndarray], seq_len: int, max_predictions: int) -> bytes:
    """One instance as a serialized `tf.train.Example`; refuses a wrong length."""
    rows = {}
    for name, values in arrays.items():
        values = np.asarray(values)
        if values.ndim != 1:
            raise ValueError(f"feature {name}: expected a vector, found shape {values.shape}")
        rows[name] = values[None]
    return serialize_examples(rows, seq_len, max_predictions)[0]
