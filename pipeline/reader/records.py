"""Shards read without TensorFlow: TFRecord framing checked as TensorFlow checks it, and
`tf.train.Example`s decoded into the schema's fixed-length columns with numpy.

    shard = Shard.open("out/corpus/train-00000-of-00004.tfrecord")
    records = shard.records([0, 5, 9])             # bytes, each record's two checksums verified
    columns = decode_examples(records, lengths)    # {name: (N, length)} int64 / float32

The framing of a record: its length (8 bytes), the length's masked CRC-32C (4), the data, the
data's masked CRC-32C (4) (`pipeline/parts.py` writes it). `Shard.open` walks the lengths once
(an offset per record) and checks each length's checksum; a record's data checksum is checked
when it is read, so a flipped byte is found where tf.data finds it, on read.

`decode_examples` walks the Examples of a batch in lockstep with numpy: at each map entry, every
record's key is matched against the features wanted, whatever order each record keeps them in,
and the packed values of each feature are gathered into one buffer and decoded at once (varints
by their end bytes). An entry numpy cannot walk in lockstep (a record with more or fewer
entries, values not packed: valid protobuf that no writer of ours produces) sends the batch
through `_decode_one`, a plain walk of each record. Either way a feature missing, of the wrong
kind or of the wrong length is a `RecordError` naming it.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from common.errors import BertbeamError
from pipeline import files
from pipeline.parts import masked_crc32c

_HEADER = 12  # length (8) and its checksum (4)


class RecordError(BertbeamError):
    """A shard or record that does not read as TFRecord-framed `tf.train.Example`s."""


# === Framing ===


class Shard:
    """A shard's bytes (memory-mapped when local) and where each record's data starts and ends."""

    def __init__(self, path: str, data, starts: np.ndarray, lengths: np.ndarray):
        self.path = path
        self.data = data
        self.starts = starts
        self.lengths = lengths

    @classmethod
    def open(cls, path: str) -> Shard:
        data = _map(path)
        view = memoryview(data)
        starts, lengths = [], []
        at, end = 0, len(data)
        while at < end:
            if end - at < _HEADER:
                raise RecordError(f"truncated record header at byte {at}")
            header = bytes(view[at : at + 8])
            if int.from_bytes(view[at + 8 : at + 12], "little") != masked_crc32c(header):
                raise RecordError(f"corrupted record at byte {at}: its length's checksum does not match")
            length = int.from_bytes(header, "little")
            if at + _HEADER + length + 4 > end:
                raise RecordError(f"truncated record at byte {at}: {length} bytes announced")
            starts.append(at + _HEADER)
            lengths.append(length)
            at += _HEADER + length + 4
        return cls(path, data, np.array(starts, np.int64), np.array(lengths, np.int64))

    def __len__(self) -> int:
        return len(self.starts)

    def records(self, indices) -> list[bytes]:
        """The data of records `indices`, each checked against its checksum."""
        view = memoryview(self.data)
        out = []
        for i in indices:
            start, length = int(self.starts[i]), int(self.lengths[i])
            record = bytes(view[start : start + length])
            stored = int.from_bytes(view[start + length : start + length + 4], "little")
            if stored != masked_crc32c(record):
                raise RecordError(
                    f"corrupted record {i} at byte {start - _HEADER}: its data's checksum does not match"
                )
            out.append(record)
        return out


def _map(path: str):
    """A local shard memory-mapped (read on demand, shared with other processes' page cache); a
    remote one read whole."""
    if files.is_remote(path):
        return files.read_file(path)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


# === tf.train.Example ===

# Wire tags: Example.features, Features.feature (a map entry), entry.key, entry.value, and the
# Feature kinds: bytes_list (1), float_list (2), int64_list (3); packed values are field 1 of each.
_LD1, _LD2, _LD3 = 0x0A, 0x12, 0x1A
KINDS = {"int64": _LD3, "float32": _LD2}


class _Irregular(RecordError):
    """A batch numpy cannot walk in lockstep; `decode_examples` catches it and decodes the batch
    record by record instead, so it never reaches a user."""


def decode_examples(records: list[bytes], columns: dict[str, tuple[str, int]]) -> dict[str, np.ndarray]:
    """Serialized Examples -> {name: (N, length) array} for each of `columns` {name: (dtype,
    length)}: int64 or float32, as `tf.io.parse_example` with `FixedLenFeature`s gives them.
    Features the records hold beyond `columns` are skipped."""
    buf = np.frombuffer(b"".join(records), np.uint8)
    lengths = np.fromiter(map(len, records), np.int64, len(records))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    try:
        spans = _walk(buf, starts, starts + lengths, columns)
    except _Irregular:
        return _decode_each(records, columns)
    return {name: _values(buf, spans[name], name, *columns[name]) for name in columns}


def _varint(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each of `pos` (lengths: at most 5 bytes) and the position after it."""
    value = np.zeros(len(pos), np.int64)
    done = np.zeros(len(pos), bool)
    last = len(buf) - 1
    for k in range(5):
        byte = buf[np.minimum(pos + k, last)].astype(np.int64)
        value |= np.where(done, 0, (byte & 0x7F) << (7 * k))
        ends = ~done & (byte < 0x80)
        pos = np.where(ends, pos + k + 1, pos)
        done |= ends
    if not done.all():
        raise _Irregular
    return value, pos


def _tag(buf: np.ndarray, pos: np.ndarray, expected: int) -> np.ndarray:
    """The position after a one-byte tag that must be `expected` at every one of `pos`."""
    if (pos >= len(buf)).any() or (buf[np.minimum(pos, len(buf) - 1)] != expected).any():
        raise _Irregular
    return pos + 1


def _walk(buf, starts, ends, columns) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every record's (kind tag, start, end) of each column's packed values, walking the map
    entries of all records at once."""
    n = len(starts)
    size, pos = _varint(buf, _tag(buf, starts, _LD1))  # Example.features
    if (pos + size != ends).any():
        raise _Irregular
    found = {name: [np.zeros(n, np.int64) for _ in range(3)] for name in columns}
    seen = {name: np.zeros(n, bool) for name in columns}
    names = {name: np.frombuffer(name.encode(), np.uint8) for name in columns}
    while n and (pos < ends).any():
        if not (pos < ends).all():
            raise _Irregular  # records with more entries than others
        entry_size, at = _varint(buf, _tag(buf, pos, _LD1))
        entry_end = at + entry_size
        key_size, at = _varint(buf, _tag(buf, at, _LD1))
        key_at, at = at, at + key_size
        value_size, at = _varint(buf, _tag(buf, at, _LD2))
        kind = buf[np.minimum(at, len(buf) - 1)].astype(np.int64)
        list_size, at = _varint(buf, at + 1)
        list_end = at + list_size
        packed = list_size > 0
        if packed.any():
            if (buf[np.minimum(at, len(buf) - 1)][packed] != _LD1).any():
                raise _Irregular  # values not packed
            data_size, data_at = _varint(buf, at + 1)
            if ((data_at + data_size != list_end) & packed).any():
                raise _Irregular
        else:
            data_at = at
        data_at = np.where(packed, data_at, list_end)
        for name, encoded in names.items():
            hit = key_size == len(encoded)
            if len(encoded) and hit.any():
                index = np.minimum(key_at[:, None] + np.arange(len(encoded)), len(buf) - 1)
                hit &= (buf[index] == encoded).all(axis=1)
            for column, value in zip(found[name], (kind, data_at, list_end), strict=True):
                column[hit] = value[hit]
            seen[name] |= hit
        pos = entry_end
    for name in columns:
        if not seen[name].all():
            raise RecordError(
                f"feature {name}: missing from record {int(np.argmin(seen[name]))} of the batch"
            )
    return {name: tuple(found[name]) for name in columns}


def _values(buf, span, name: str, dtype: str, length: int) -> np.ndarray:
    kind, start, end = span
    if (kind != KINDS[dtype]).any():
        raise RecordError(f"feature {name}: expected a {dtype} list, found another kind")
    sizes = end - start
    if length and (sizes == 0).any():
        raise RecordError(f"feature {name}: expected {length} values per record, found none")
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    data = buf[np.repeat(start - offsets[:-1], sizes) + np.arange(offsets[-1])]
    n = len(start)
    if dtype == "float32":
        if (sizes != 4 * length).any():
            raise RecordError(f"feature {name}: expected {length} values per record, found another count")
        return data.view("<f4").reshape(n, length).astype(np.float32)
    ends = data < 0x80
    counts = np.add.reduceat(ends, offsets[:-1]) if len(data) else np.zeros(n, np.int64)
    if (counts != length).any() or (len(data) and not ends[-1]):
        raise RecordError(f"feature {name}: expected {length} values per record, found another count")
    first = np.concatenate([[0], np.flatnonzero(ends)[:-1] + 1])  # each varint's first byte
    shift = (np.arange(len(data)) - np.repeat(first, np.diff(np.append(first, len(data))))) * 7
    parts = (data & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
    return np.bitwise_or.reduceat(parts, first).view(np.int64).reshape(n, length)


def _decode_each(records: list[bytes], columns) -> dict[str, np.ndarray]:
    """The slow path: each record walked on its own (any entry order, packed or not)."""
    rows = [_decode_one(record, columns) for record in records]
    return {
        name: np.array([row[name] for row in rows], np.int64 if dtype == "int64" else np.float32).reshape(
            len(records), length
        )
        for name, (dtype, length) in columns.items()
    }


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise RecordError("a record ends inside a varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes, start: int, end: int):
    """(field number, wire type, value or (start, end)) of each field in data[start:end]."""
    at = start
    while at < end:
        key, at = _read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(data, at)
            yield number, wire, value
        elif wire == 2:
            size, at = _read_varint(data, at)
            yield number, wire, (at, at + size)
            at += size
        elif wire == 5:
            yield number, wire, data[at : at + 4]
            at += 4
        elif wire == 1:
            at += 8
        else:
            raise RecordError(f"unknown wire type {wire}")


def _decode_one(record: bytes, columns) -> dict[str, list]:
    out = {}
    for number, _, span in _fields(record, 0, len(record)):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(record, *span):
            if entry_number != 1:
                continue
            key, value = None, None
            for field, _, part in _fields(record, *entry):
                if field == 1:
                    key = record[part[0] : part[1]].decode("utf-8", "replace")
                elif field == 2:
                    value = part
            if key in columns and value is not None:
                out[key] = _feature_values(record, value, key, *columns[key])
    for name, (_, length) in columns.items():
        if name not in out:
            raise RecordError(f"feature {name}: missing from a record")
        if len(out[name]) != length:
            raise RecordError(f"feature {name}: expected {length} values per record, found {len(out[name])}")
    return out


def _feature_values(record: bytes, span, name: str, dtype: str, length: int) -> list:
    values = []
    for kind, _, inner in _fields(record, *span):
        if kind != KINDS[dtype] >> 3:
            raise RecordError(f"feature {name}: expected a {dtype} list, found another kind")
        for field, wire, part in _fields(record, *inner):
            if field != 1:
                continue
            if dtype == "float32":
                raw = record[part[0] : part[1]] if wire == 2 else part
                values.extend(np.frombuffer(raw, "<f4").tolist())
            elif wire == 2:
                at, end = part
                while at < end:
                    value, at = _read_varint(record, at)
                    values.append(value - (1 << 64) if value >= 1 << 63 else value)
            else:
                values.append(part - (1 << 64) if part >= 1 << 63 else part)
    return values
