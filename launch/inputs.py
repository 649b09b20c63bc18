"""The input streams of a run, from `pipeline/input.py`: the training stream per input pipeline
under the strategy, starting at a given batch (how a resumed run keeps its data position), with an
optional per-batch trace; and the validation split.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from launch.config import TrainConfig
from launch.run_dir import RunDir
from pipeline.input import DynamicMasking, InputConfig, make_dataset
from pipeline.schema import Manifest


def train_inputs(
    config: TrainConfig,
    manifest: Manifest,
    strategy: tf.distribute.Strategy,
    per_replica_batch: int,
    start_batch: int,
):
    """The distributed training stream, starting at batch `start_batch` of the uninterrupted one."""
    trace = RunDir(config.model_dir).trace if config.trace_batches else None
    if trace:
        os.makedirs(trace, exist_ok=True)  # local only: TrainConfig refuses gs:// with tracing
    input_config = InputConfig(
        per_replica_batch_size=per_replica_batch,
        training=True,
        seed=config.seed,
        dynamic_masking=DynamicMasking.for_corpus(manifest) if config.dynamic_masking else None,
    )

    def train_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # A batch index counts per input pipeline; each feeds its share of the replicas per step.
        per_step = strategy.num_replicas_in_sync // context.num_input_pipelines
        on_batch = _trace_to(f"{trace}/{os.getpid()}-{context.input_pipeline_id}.tsv") if trace else None
        return make_dataset(
            manifest,
            "train",
            input_config,
            input_context=context,
            skip_batches=start_batch * per_step,
            on_batch=on_batch,
        )

    return strategy.distribute_datasets_from_function(train_fn)


def validation_dataset(manifest: Manifest, global_batch: int, seed: int) -> tf.data.Dataset:
    """The validation split in global batches, in file order (Keras splits them over replicas)."""
    config = InputConfig(per_replica_batch_size=global_batch, training=False, seed=seed)
    return make_dataset(manifest, "validation", config)


def _trace_to(path: str):
    """One line per batch, in stream order: its index, then a fingerprint of each example."""

    def write(step, fingerprints):
        rows = ",".join(bytes(row).hex() for row in fingerprints.numpy())
        with open(path, "a") as f:
            f.write(f"{int(step)}\t{rows}\n")
        return np.int64(0)

    def on_batch(step, batch):
        content = tf.concat(
            [batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_ids"]], axis=1
        )
        return tf.py_function(write, [step, tf.fingerprint(content)], tf.int64)

    return on_batch
