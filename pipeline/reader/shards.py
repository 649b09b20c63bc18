"""The shards a reader reads, checked against the manifest: which ones this input pipeline reads,
whether they are all there and whole, and which one is corrupt when tf.data reports only an offset.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from common.errors import BertbeamError
from pipeline.schema import Manifest


class InputError(BertbeamError):
    """The data cannot feed this model; the message is one line naming the cause."""


def shard_files(
    manifest: Manifest, split: str, input_context: tf.distribute.InputContext | None = None
) -> list[str]:
    """The shards of `split` this input pipeline reads: all of them, or its share on a pod or
    across workers (every `num_input_pipelines`-th, from its id)."""
    files = manifest.files(split)
    if not files:
        raise InputError(f"{manifest.path}: the {split} split has no shards; rebuild with a larger corpus")
    if input_context is None or input_context.num_input_pipelines == 1:
        return files
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) < n:
        raise InputError(
            f"{manifest.folder}/{split}-*: {len(files)} shards for {n} input pipelines; "
            f"rebuild with --num_shards >= {n}"
        )
    return files[i::n]


def check_shards(manifest: Manifest, split: str, own_files: list[str]) -> None:
    """The shards against the manifest, before the first step: a missing shard (one listing of the
    folder) or a truncated or replaced one (its size; only this pipeline's share is stat-ed) is
    named. A corrupt byte inside a shard shows only on read: see `naming_bad_shards`."""
    shards = manifest.split(split).shards
    listed = {path.rsplit("/", 1)[-1] for path in tf.io.gfile.glob(f"{manifest.folder}/{split}-*")}
    for shard in shards:
        if shard.file not in listed:
            raise InputError(
                f"{manifest.folder}/{shard.file}: in the manifest but missing; rebuild the corpus"
            )
    sizes = {shard.file: shard.bytes for shard in shards}
    for path in own_files:
        want = sizes[path.rsplit("/", 1)[-1]]
        if (found := tf.io.gfile.stat(path).length) != want:
            raise InputError(
                f"{path}: {found} bytes, the manifest says {want}; truncated or replaced, rebuild the corpus"
            )


def read_shard(path):
    """One shard's serialized records."""
    return tf.data.TFRecordDataset(path, buffer_size=1 << 20)


def find_bad_shard(files: list[str]) -> tuple[str, str] | None:
    """(file, TF's message) for the first shard that does not read through cleanly, else None."""
    for path in files:
        try:
            tf.data.TFRecordDataset(path, buffer_size=1 << 20).reduce(0, lambda n, _: n + 1)
        except (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.OutOfRangeError) as e:
            return path, e.message.splitlines()[0] if e.message else type(e).__name__
    return None


@contextlib.contextmanager
def naming_bad_shards(files: list[str]):
    """Turn tf.data's DataLossError, which gives only an offset, into an InputError naming the file.

    with naming_bad_shards(manifest.files("train")):
        model.fit(dataset, ...)
    """
    try:
        yield
    except (tf.errors.DataLossError, tf.errors.NotFoundError) as e:
        bad = find_bad_shard(files)
        if bad is None:
            raise
        path, message = bad
        cause = message.split("}}")[-1].split("[Op:")[0].strip()
        raise InputError(f"{path}: corrupt or truncated shard ({cause}); rebuild the corpus") from e
