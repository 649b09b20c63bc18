"""What every fine-tuning task's run shares around Keras `fit`: the strategy and its batch check,
the shuffled training batches, the epoch that counts, and the files a run leaves beside eval.json.

    steps = steps_per_epoch(config, len(train_rows), "windows")
    strategy = task_strategy(config)
    fit_ds = training_batches(features, labels, config)
    best = best_epoch("val_entity_f1", config.epochs)
    write_run_files(config, source, out, history, results, {"labels": labels})
"""

from __future__ import annotations

import dataclasses
import json

import keras
import tensorflow as tf

from common.errors import ConfigError
from launch.strategy import choose_strategy
from launch.tasks.config import FinetuneConfig, FinetuneError
from pipeline.files import write_atomically


def steps_per_epoch(config: FinetuneConfig, rows: int, what: str) -> int:
    """Full batches per epoch; a one-line error when the training rows fill none."""
    steps = rows // config.global_batch_size
    if steps == 0:
        raise FinetuneError(
            f"--train {config.train}: {rows} {what}, fewer than one batch of {config.global_batch_size}"
        )
    return steps


def task_strategy(config: FinetuneConfig) -> tf.distribute.Strategy:
    """The seed set, then the strategy of --strategy; the global batch must split evenly over it."""
    keras.utils.set_random_seed(config.seed)
    strategy = choose_strategy(config.strategy, config.tpu)
    replicas = strategy.num_replicas_in_sync
    if config.global_batch_size % replicas:
        raise ConfigError(
            f"--global_batch_size {config.global_batch_size}: not divisible by the {replicas} replicas"
        )
    return strategy


def training_batches(features, labels, config: FinetuneConfig) -> tf.data.Dataset:
    """Every row once per epoch, reshuffled each epoch from --seed, in full batches."""
    rows = len(next(iter(features.values())))
    return (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .shuffle(rows, seed=config.seed, reshuffle_each_iteration=True)
        .batch(config.global_batch_size, drop_remainder=True)  # static shapes: every step the same (B, T)
        .prefetch(tf.data.AUTOTUNE)
    )


def best_epoch(monitor: str, epochs: int) -> keras.callbacks.EarlyStopping:
    """Keeps the weights of the epoch with the highest `monitor` (validation), restored at the end;
    never stops early (patience = every epoch)."""
    return keras.callbacks.EarlyStopping(
        monitor=monitor, mode="max", patience=epochs, restore_best_weights=True
    )


def write_run_files(config: FinetuneConfig, source, out: str, history, results: dict, extra: dict) -> None:
    """eval.json, history.jsonl (a row per epoch) and config.json (the flags, where the encoder
    and its vocab came from, plus `extra`)."""
    write_atomically(f"{out}/eval.json", json.dumps(results, indent=2, sort_keys=True))
    rows = [
        {"epoch": e + 1, **{k: float(v[e]) for k, v in history.history.items()}}
        for e in range(len(history.history["loss"]))
    ]
    write_atomically(f"{out}/history.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    vocab = {"kind": source.vocab_file.kind, "lower_case": source.vocab_file.lower_case}
    run = {"config": dataclasses.asdict(config), "encoder": source.weights, "vocab": vocab, **extra}
    write_atomically(f"{out}/config.json", json.dumps(run, indent=2, sort_keys=True))
