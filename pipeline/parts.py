"""Part files: the sorted records one packing group contributes to one shard.

Records do not travel through Beam's shuffle: each group writes one `.npz` per shard under
`OUTPUT/_tmp/parts/` (sort keys, end offsets, the bytes), the shuffle carries only the file names,
and each shard is a merge of its parts. A runner then never holds the corpus's records in memory.
"""

from __future__ import annotations

import io

import numpy as np

TMP_DIR = "_tmp"  # parts and unfinished shards live here; a finished build removes it


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
