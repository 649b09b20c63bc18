"""The shards a reader reads, checked against the manifest: which ones this input pipeline reads,
whether they are all there and whole, and which one is corrupt when tf.data reports only an offset.
Free of TensorFlow but for the tf.data reader's own helpers (`read_shard`, `naming_bad_shards`).
"""

from __future__ import annotations

import contextlib
import dataclasses

from common.errors import BertbeamError
from pipeline import files
from pipeline.schema import Manifest


class InputError(BertbeamError):
    """The data cannot feed this model; the message is one line naming the cause."""


@dataclasses.dataclass(frozen=True)
class Pipelines:
    """Which of several input pipelines this one is, as `tf.distribute.InputContext` says it (the
    numpy reader's, one per process of a multi-host JAX run)."""

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0


def shard_files(manifest: Manifest, split: str, input_context=None) -> list[str]:
    """The shards of `split` this input pipeline reads: all of them, or its share on a pod or
    across workers (every `num_input_pipelines`-th, from its id). `input_context`: a
    `tf.distribute.InputContext` or `Pipelines`."""
    paths = manifest.files(split)
    if not paths:
        raise InputError(f"{manifest.path}: the {split} split has no shards; rebuild with a larger corpus")
    if input_context is None or input_context.num_input_pipelines == 1:
        return paths
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(paths) < n:
        raise InputError(
            f"{manifest.folder}/{split}-*: {len(paths)} shards for {n} input pipelines; "
            f"rebuild with --num_shards >= {n}"
        )
    return paths[i::n]


def check_shards(manifest: Manifest, split: str, own_files: list[str]) -> None:
    """The shards against the manifest, before the first step: a missing shard (one listing of the
    folder) or a truncated or replaced one (its size; only this pipeline's share is stat-ed) is
    named. A corrupt byte inside a shard shows only on read: see `naming_bad_shards`."""
    shards = manifest.split(split).shards
    listed = {path.rsplit("/", 1)[-1] for path in files.glob(f"{manifest.folder}/{split}-*")}
    for shard in shards:
        if shard.file not in listed:
            raise InputError(
                f"{manifest.folder}/{shard.file}: in the manifest but missing; rebuild the corpus"
            )
    sizes = {shard.file: shard.bytes for shard in shards}
    for path in own_files:
        want = sizes[path.rsplit("/", 1)[-1]]
        if (found := files.size(path)) != want:
            raise InputError(
                f"{path}: {found} bytes, the manifest says {want}; truncated or replaced, rebuild the corpus"
            )


def corrupt_shard(path: str, cause: str) -> InputError:
    """The one line either reader gives for a shard whose bytes do not read."""
    return InputError(f"{path}: corrupt or truncated shard ({cause}); rebuild the corpus")


# === tf.data's ===


def read_shard(path):
    """One shard's serialized records."""
    import tensorflow as tf

    return tf.data.TFRecordDataset(path, buffer_size=1 << 20)


def find_bad_shard(paths: list[str]) -> tuple[str, str] | None:
    """(file, cause) for the first shard whose framing or checksums do not hold, else None: the
    numpy reader's own checks, so that both readers name the same cause."""
    from pipeline.reader.records import RecordError, Shard

    for path in paths:
        try:
            shard = Shard.open(path)
            for start in range(0, len(shard), 4096):
                shard.records(range(start, min(start + 4096, len(shard))))
        except RecordError as e:
            return path, str(e)
        except FileNotFoundError:
            return path, "missing"
    return None


@contextlib.contextmanager
def naming_bad_shards(paths: list[str]):
    """Turn tf.data's DataLossError, which gives only an offset, into an InputError naming the file.

    with naming_bad_shards(manifest.files("train")):
        model.fit(dataset, ...)
    """
    import tensorflow as tf

    try:
        yield
    except (tf.errors.DataLossError, tf.errors.NotFoundError) as e:
        bad = find_bad_shard(paths)
        if bad is None:
            raise
        raise corrupt_shard(*bad) from e
