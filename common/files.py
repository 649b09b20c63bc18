"""Writes that readers never see half done, on local disks and gs:// alike."""

from __future__ import annotations


def write_atomically(path: str, data: bytes | str) -> None:
    """Write to a temporary name beside `path`, then rename over it: a reader (or a run killed
    mid-write) sees the old file or the new one, never part of one; a killed writer's leftover
    `.tmp` is overwritten by the next write. GCS has no rename: on gs:// TensorFlow copies, then
    deletes, and the final object still appears whole."""
    import tensorflow as tf

    folder = path.rsplit("/", 1)[0] if "/" in path else "."
    tf.io.gfile.makedirs(folder)
    tmp = f"{path}.tmp"
    with tf.io.gfile.GFile(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    tf.io.gfile.rename(tmp, path, overwrite=True)
