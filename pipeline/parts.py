"""Part files: the sorted records one packing group contributes to one shard.

Records do not travel through Beam's shuffle: each group writes one `.npz` per shard under
`OUTPUT/_tmp/parts/` (sort keys, end offsets, the bytes), the shuffle carries only the file names,
and each shard is a merge of its parts. A runner then never holds the corpus's records in memory.
"""

from __future__ import annotations

import io
import uuid
from typing import NamedTuple

import numpy as np

TMP_DIR = "_tmp"  # parts and unfinished shards live here; a finished build removes it


def remove_tmp(folder: str) -> None:
    """`folder`'s _tmp/ (parts, unfinished shards, spilled tokens), once nothing reads it."""
    import tensorflow as tf

    if tf.io.gfile.exists(f"{folder}/{TMP_DIR}"):
        tf.io.gfile.rmtree(f"{folder}/{TMP_DIR}")


def shard_name(split: str, shard: int, num_shards: int) -> str:
    return f"{split}-{shard:05d}-of-{num_shards:05d}.tfrecord"


def part_path(output_dir: str, split: str, shard: int, group: int) -> str:
    return f"{output_dir}/{TMP_DIR}/parts/{split}-{shard:05d}-g{group:05d}.npz"


def write_part(path: str, keyed_records: list[tuple[int, bytes]]) -> None:
    """A part file (.npz): the records' sort keys, their end offsets, and their bytes."""
    import tensorflow as tf

    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    keys = np.array([k for k, _ in keyed_records], np.int64)
    ends = np.cumsum([len(r) for _, r in keyed_records], dtype=np.int64)
    blob = np.frombuffer(b"".join(r for _, r in keyed_records), np.uint8)
    buffer = io.BytesIO()  # zipfile wants a seekable file; GFile on gs:// is write-only
    np.savez(buffer, keys=keys, ends=ends, blob=blob)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(buffer.getvalue())


def read_part(path: str) -> tuple[np.ndarray, np.ndarray, bytes]:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    with np.load(io.BytesIO(data)) as part:
        return part["keys"], part["ends"], part["blob"].tobytes()


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
        import tensorflow as tf

        tf.io.gfile.makedirs(folder)
        self.path = f"{folder}/{uuid.uuid4().hex}.bin"
        self._file = tf.io.gfile.GFile(self.path, "wb")
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
    import tensorflow as tf

    from pipeline.instances import TokenizedDoc

    docs = []
    by_file: dict[str, list[SpilledDoc]] = {}
    for pointer in pointers:
        by_file.setdefault(pointer.path, []).append(pointer)
    for path, here in sorted(by_file.items()):
        with tf.io.gfile.GFile(path, "rb") as f:
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
