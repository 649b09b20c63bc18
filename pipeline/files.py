"""Files on local disks and gs:// alike, for the builder and for training, with or without Beam.

    write_atomically("out/run/config.json", text)      # temp file + rename: never half a file
    read_text("gs://bucket/corpus/manifest.json")

Through Beam's FileSystems where Beam is installed (always, with bertbeam's dependencies): the
corpus builder and its workers then never import TensorFlow (3-6 s per process, a fifth of a
small build), and the same code reaches every filesystem Beam has (gs://, s3://, local). Beam is
imported on first use, not with this module, so a training run on local paths pays for it once.

Where Beam is not installed (the GPU image training runs on has JAX and neither Beam nor
TensorFlow), local paths go through the standard library and a remote one through TensorFlow's
gfile if TensorFlow is there; with neither, a remote path is a one-line `FilesError`.

In pipeline/, not common/: common/ may not import Beam (tests/test_architecture.py); launch/
takes its files from here.
"""

from __future__ import annotations

import functools
import glob as local_glob
import os
import shutil

from common.errors import BertbeamError


class FilesError(BertbeamError):
    """A path this machine has no filesystem for."""


@functools.cache
def _beam():
    """Beam's (FileSystems, CompressionTypes), or None where Beam is not installed."""
    try:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems
    except ImportError:
        return None
    return FileSystems, CompressionTypes


def is_remote(path: str) -> bool:
    return "://" in path


def _gfile(path: str):
    """TensorFlow's gfile for a remote path on a machine without Beam."""
    try:
        import tensorflow as tf
    except ImportError:
        raise FilesError(
            f"{path}: this machine has neither apache-beam[gcp] nor tensorflow to reach it; install one "
            "or copy the files to a local folder"
        ) from None
    return tf.io.gfile


def open_file(path: str):
    """A binary read stream of `path` as stored (no decompression by extension), seekable."""
    if beam := _beam():
        return beam[0].open(path, compression_type=beam[1].UNCOMPRESSED)
    return _gfile(path).GFile(path, "rb") if is_remote(path) else open(path, "rb")


def create_file(path: str):
    """A binary write stream of `path`, stored as written; a local folder is created if missing
    (object stores have none)."""
    if beam := _beam():
        return beam[0].create(path, compression_type=beam[1].UNCOMPRESSED)
    if is_remote(path):
        return _gfile(path).GFile(path, "wb")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return open(path, "wb")


def read_file(path: str) -> bytes:
    with open_file(path) as f:
        return f.read()


def read_text(path: str) -> str:
    return read_file(path).decode("utf-8")


def exists(path: str) -> bool:
    if beam := _beam():
        return beam[0].exists(path)
    return _gfile(path).exists(path) if is_remote(path) else os.path.exists(path)


def is_dir(path: str) -> bool:
    """A local folder, or a remote prefix with objects under it."""
    return bool(glob(f"{path.rstrip('/')}/*")) if is_remote(path) else os.path.isdir(path)


def make_dirs(path: str) -> None:
    """A local folder and its parents (object stores need none)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)


def size(path: str) -> int:
    """Bytes in `path`."""
    if not is_remote(path):
        return os.path.getsize(path)
    if beam := _beam():
        return beam[0].match([path])[0].metadata_list[0].size_in_bytes
    return _gfile(path).stat(path).length


def glob(pattern: str) -> list[str]:
    if beam := _beam():
        return sorted(m.path for m in beam[0].match([pattern])[0].metadata_list)
    return sorted(_gfile(pattern).glob(pattern) if is_remote(pattern) else local_glob.glob(pattern))


def remove(path: str) -> None:
    if beam := _beam():
        beam[0].delete([path])
    elif is_remote(path):
        _gfile(path).remove(path)
    else:
        os.remove(path)


def remove_tree(folder: str) -> None:
    """`folder` and everything under it; nothing if it is not there. (A trailing "/" is how Beam
    deletes a prefix recursively on an object store; a local folder is a directory.)"""
    folder = folder.rstrip("/")
    if not is_remote(folder):
        if os.path.isdir(folder):
            shutil.rmtree(folder)
    elif beam := _beam():
        beam[0].delete([f"{folder}/"])
    elif _gfile(folder).exists(folder):
        _gfile(folder).rmtree(folder)


def rename(source: str, destination: str) -> None:
    """Replaces `destination` if it exists (local: one rename; an object store: copy, delete)."""
    if beam := _beam():
        beam[0].rename([source], [destination])
    elif is_remote(source):
        _gfile(source).rename(source, destination, overwrite=True)
    else:
        os.replace(source, destination)


def write_atomically(path: str, data: bytes | str, tmp: str | None = None) -> None:
    """Write to a temporary name beside `path` (`tmp`, else `path`.tmp), then rename over it: a
    reader (or a run killed mid-write) sees the old file or the new one, never part of one; a
    killed writer's leftover `.tmp` is overwritten by the next write. GCS has no rename: Beam
    copies, then deletes, and the final object still appears whole."""
    tmp = tmp or f"{path}.tmp"
    with create_file(tmp) as f:
        f.write(data.encode() if isinstance(data, str) else data)
    rename(tmp, path)
