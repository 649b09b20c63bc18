"""The tf.data input function: a corpus split -> static-shape batches that `model.fit` consumes.

    manifest = read_manifest("out/corpus")
    ds = make_dataset(manifest, "train", InputConfig(per_replica_batch_size=32, seed=1))

Elements are `(features, labels, sample_weights)`, by default a BERT's:
  features        input_ids, input_mask, segment_ids, document_ids (B, T); masked_lm_positions (B, P)
  labels          {"mlm": masked_lm_ids (B, P)}, plus {"nsp": next_sentence_labels (B, 1)} for pairs
  sample_weights  {"mlm": masked_lm_weights (B, P)}, plus {"nsp": ones (B,)}
A model with other inputs or outputs names them (`InputConfig.features`, `.targets`): any of the
records' features; targets from `TARGETS` (ELECTRA's "rtd": the original row, weighted by
input_mask).
Every shape is fully defined: TPUs (and XLA generally) compile one program per shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from pipeline import schema
from pipeline.reader.config import FEATURE_INPUTS, InputConfig, check_request
from pipeline.reader.dynamic_masking import remask, unmask
from pipeline.reader.order import corpus_choices, mixture_starts, seekable_records
from pipeline.reader.shards import check_shards, read_shard, shard_files
from pipeline.schema import Manifest

__all__ = ["FEATURE_INPUTS", "TARGETS", "InputConfig", "make_dataset"]


def make_dataset(
    manifest: Manifest | Sequence[Manifest],
    split: str,
    config: InputConfig,
    *,
    rates: Sequence[float] | None = None,
    input_context: tf.distribute.InputContext | None = None,
    skip_batches: int = 0,
    on_batch=None,
) -> tf.data.Dataset:
    """A dataset of static-shape batches of `split` for `model.fit`; see the module docstring.

    `manifest` is one corpus, or several that agree on vocab, shapes and features (a mixture,
    `launch/sources.py` checks them), for training: each record's corpus is drawn at `rates` (per
    example, seeded: `order.corpus_choices`). Evaluation reads one corpus per dataset.

    The shards are checked against the manifest first (missing, truncated or replaced: a one-line
    `InputError`). Deterministic for a given seed; its iterator can be saved with
    `tf.train.Checkpoint(iterator=...)`.

    `skip_batches` resumes a training stream: it starts at that batch by arithmetic over the
    manifests' per-shard record counts (`order.seekable_records`, `order.corpus_choices`), reading at most one
    shuffle window and one shard's head, whatever the position; what follows is exactly what an
    uninterrupted iterator would give (masks included: a dynamic mask is seeded by the batch's
    index in the stream).
    `on_batch(index, parsed_batch)`, if given, runs on every batch in order (a debugging trace).
    """
    manifests = [manifest] if isinstance(manifest, Manifest) else list(manifest)
    first = manifests[0]
    spec = schema.parsing_spec(first.seq_len, first.max_predictions, first.word_starts)
    seed, masking, batch_size = config.seed, config.dynamic_masking, config.per_replica_batch_size
    check_request(manifests, config, rates, skip_batches)
    start = skip_batches * batch_size  # records of this pipeline's stream before the first batch
    if len(manifests) == 1:
        ds = _records(first, split, config, input_context, seed, start)
    else:
        # Corpus i shuffles with seed + i, from the records the first `start` choices took of it.
        starts = mixture_starts(rates, seed, start)
        streams = [
            _records(m, split, config, input_context, seed + i, starts[i]) for i, m in enumerate(manifests)
        ]
        ds = tf.data.Dataset.choose_from_datasets(streams, corpus_choices(rates, seed, start))
    # Static shapes: a partial last batch would be a second program to compile (and on TPU, an
    # error), hence drop_remainder=True.
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.map(
        lambda records: _parse(records, spec), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    ds = ds.enumerate(start=skip_batches)  # each batch's index in the whole stream
    if masking is not None:
        max_predictions = first.max_predictions
        ds = ds.map(
            lambda step, batch: (step, remask(batch, masking, max_predictions, seed=(seed, step))),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    if on_batch is not None:
        ds = ds.map(lambda step, batch: (step, _after(on_batch(step, batch), batch)))  # in order
    features, targets = config.names(first)
    ds = ds.map(
        lambda step, batch: _to_keras(batch, features, targets),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def _records(
    manifest: Manifest,
    split: str,
    config: InputConfig,
    input_context: tf.distribute.InputContext | None,
    seed: int,
    start: int = 0,
) -> tf.data.Dataset:
    """One corpus's serialized records: for training, the seekable stream of its shards from
    record `start` on (`order.seekable_records`); else every record once, in file order."""
    files = shard_files(manifest, split, input_context)
    check_shards(manifest, split, files)
    if config.training:
        records = {shard.file: shard.records for shard in manifest.split(split).shards}
        counts = [records[path.rsplit("/", 1)[-1]] for path in files]
        return seekable_records(files, counts, seed, start, config.shuffle_window, where=manifest.folder)
    ds = tf.data.Dataset.from_tensor_slices(files)
    return ds.interleave(
        read_shard,
        cycle_length=min(config.cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def _after(done, batch):
    """`batch`, once `done` (an op with a side effect) has run."""
    with tf.control_dependencies([done]):
        return {name: tf.identity(value) for name, value in batch.items()}


def _parse(records, spec):
    parsed = tf.io.parse_example(records, spec)
    # tf.train.Example stores int64; TPUs (and GPU kernels) want int32, and ids fit.
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}


# A model output's (label, sample weight) from a parsed batch.
TARGETS = {
    "mlm": lambda batch: (batch["masked_lm_ids"], batch["masked_lm_weights"]),
    "nsp": lambda batch: (
        batch["next_sentence_labels"],
        tf.ones(tf.shape(batch["next_sentence_labels"])[:1], tf.float32),
    ),
    # ELECTRA's replaced-token detection: the original row; [PAD] is never scored.
    "rtd": lambda batch: (unmask(batch), tf.cast(batch["input_mask"], tf.float32)),
}


def _to_keras(batch, features: Sequence[str], targets: Sequence[str]):
    pairs = {name: TARGETS[name](batch) for name in targets}
    return (
        {name: batch[name] for name in features},
        {name: label for name, (label, _) in pairs.items()},
        {name: weight for name, (_, weight) in pairs.items()},
    )
