"""The input streams of a run, from `pipeline/input.py`: the training stream of a phase's corpora
(one, or a mixture) per input pipeline under the strategy, starting at a given batch (how a
resumed run keeps its data position), with an optional per-batch trace; and the validation splits.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from launch.config import TrainConfig
from launch.data import Corpora
from launch.run_dir import RunDir
from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.reader.dynamic_masking import DynamicMasking
from pipeline.reader.shards import InputError
from pipeline.schema import Manifest


def dynamic_masking(config: TrainConfig, corpora: Corpora) -> DynamicMasking | None:
    """--dynamic_masking's rules for the phase's corpora, at --dynamic_masked_lm_prob if given:
    one rule for a whole mixture, so its corpora must agree on whole-word masking, and on the
    masking rate unless --dynamic_masked_lm_prob sets it. (Vocab and features they share.)"""
    if not config.dynamic_masking:
        return None
    first, first_name = corpora.first, corpora.names[0]
    for name, other in zip(corpora.names[1:], corpora.manifests[1:], strict=True):
        if other.whole_word_mask != first.whole_word_mask:
            raise InputError(
                f"--dynamic_masking: {name} was built with whole_word_mask {other.whole_word_mask}, "
                f"{first_name} with {first.whole_word_mask}; one mask rule serves the mixture: rebuild "
                "one of them or train with the stored masks"
            )
        if config.dynamic_masked_lm_prob is None and other.masked_lm_prob != first.masked_lm_prob:
            raise InputError(
                f"--dynamic_masking: {name} was built with masked_lm_prob {other.masked_lm_prob}, "
                f"{first_name} with {first.masked_lm_prob}; choose the rate with --dynamic_masked_lm_prob"
            )
    return DynamicMasking.for_corpus(first, config.dynamic_masked_lm_prob)


def train_inputs(
    config: TrainConfig,
    corpora: Corpora,
    strategy: tf.distribute.Strategy,
    per_replica_batch: int,
    start_batch: int,
    *,
    first_batch_of_phase: int = 0,
    batches_in_phase: int | None = None,
    model_io: dict | None = None,
):
    """The distributed training stream, starting at batch `start_batch` of the uninterrupted one
    (counted from the phase's start), with the features and targets `model_io` names (the
    model's, `launch.models.model_io`). The trace counts batches from the run's start
    (`first_batch_of_phase` on) and leaves out what tf.data reads ahead past the phase's end."""
    trace = RunDir(config.model_dir).trace if config.trace_batches else None
    if trace:
        os.makedirs(trace, exist_ok=True)  # local only: TrainConfig refuses gs:// with tracing
    input_config = InputConfig(
        per_replica_batch_size=per_replica_batch,
        training=True,
        seed=config.seed,
        dynamic_masking=dynamic_masking(config, corpora),
        **(model_io or {}),
    )

    def train_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # A batch index counts per input pipeline; each feeds its share of the replicas per step.
        per_step = strategy.num_replicas_in_sync // context.num_input_pipelines
        on_batch = None
        if trace:
            path = f"{trace}/{os.getpid()}-{context.input_pipeline_id}.tsv"
            last = None if batches_in_phase is None else batches_in_phase * per_step
            on_batch = _trace_to(path, first_batch_of_phase * per_step, last)
        return make_dataset(
            list(corpora.manifests),
            "train",
            input_config,
            rates=corpora.rates,
            input_context=context,
            skip_batches=start_batch * per_step,
            on_batch=on_batch,
        )

    return strategy.distribute_datasets_from_function(train_fn, input_options(strategy, corpora))


def input_options(strategy: tf.distribute.Strategy, corpora: Corpora) -> tf.distribute.InputOptions | None:
    """Under MirroredStrategy, one input pipeline per replica, each reading its own shards, when
    every corpus has a shard per replica: replica r then trains on what worker r of a multi-worker
    run with one replica per worker trains on, so the same run on 2 devices of one host or on 2
    hosts sees the same batches (a test compares the losses). With fewer shards, one pipeline
    feeds all replicas, as Keras does by default."""
    replicas = strategy.num_replicas_in_sync
    if not isinstance(strategy, tf.distribute.MirroredStrategy) or replicas == 1:
        return None
    if any(len(m.split("train").shards) < replicas for m in corpora.manifests):
        return None
    return tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA
    )


def validation_dataset(
    manifests: list[Manifest],
    global_batch: int,
    seed: int,
    batches: list[int],
    features: tuple[str, ...] | None = None,
    targets: tuple[str, ...] | None = None,
) -> tf.data.Dataset:
    """`batches[i]` global batches of corpus i's validation split, one corpus after the other, in
    file order (Keras splits them over replicas), then the same again: Keras evaluates exactly
    `sum(batches)` steps, so every evaluation sees the same examples. (Repeated, because under a
    distribution strategy Keras's iterator reads ahead: a dataset that ends with the evaluation's
    last batch raised StopIteration at the second evaluation under MirroredStrategy.) `features`
    and `targets`: the model's input and output names (`launch.models.model_io`; default: a
    BERT's)."""
    config = InputConfig(
        per_replica_batch_size=global_batch, training=False, seed=seed, features=features, targets=targets
    )
    parts = [make_dataset(m, "validation", config).take(n) for m, n in zip(manifests, batches, strict=True)]
    ds = parts[0]
    for part in parts[1:]:
        ds = ds.concatenate(part)
    return ds.repeat()


def _trace_to(path: str, offset: int = 0, end: int | None = None):
    """One line per batch, in stream order: its index + `offset`, then a fingerprint of each
    example; batches from `end` on (read ahead past a phase's end) are left out."""

    def write(step, fingerprints):
        if end is not None and int(step) >= end:
            return np.int64(0)
        rows = ",".join(bytes(row).hex() for row in fingerprints.numpy())
        with open(path, "a") as f:
            f.write(f"{int(step) + offset}\t{rows}\n")
        return np.int64(0)

    def on_batch(step, batch):
        content = tf.concat(
            [batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_ids"]], axis=1
        )
        return tf.py_function(write, [step, tf.fingerprint(content)], tf.int64)

    return on_batch
