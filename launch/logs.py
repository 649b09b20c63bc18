"""Seeing what a run does: per log interval, TensorBoard scalars, a history.jsonl row, Keras's
progress line and the checkpoint when one is due (`EpochLog`); at the end, loss.png.

TensorBoard's event files are written here (`EventFile`), the same under either backend and
without TensorFlow: TFRecord-framed `Event` protos, TensorBoard's own (`tensorboard.compat.proto`,
which imports no TensorFlow), a scalar as its `simple_value`.
"""

from __future__ import annotations

import io
import json
import math
import os
import socket
import time

import keras

from launch import backend
from launch.checkpoints import Checkpoints
from launch.config import TrainConfig
from launch.run_dir import HISTORY, RunDir
from pipeline import files
from pipeline.parts import tfrecord_framed


class EventFile:
    """One TensorBoard event file in `folder`, rewritten whole at each flush: a GCS object cannot
    be appended to, and a run's scalars are a few kilobytes per thousand steps. A process that
    resumes a run starts a file of its own, as tf.summary does."""

    def __init__(self, folder: str):
        from tensorboard.compat.proto import event_pb2

        self._event = event_pb2.Event
        stamp = time.time()
        name = f"{int(stamp)}.{socket.gethostname()}.{os.getpid()}.bertbeam"
        self.path = f"{folder}/events.out.tfevents.{name}"
        # Written whole under a name TensorBoard does not read (it reads any "tfevents" name): a
        # run killed mid-flush leaves that partial copy, and its resumed process (another pid)
        # never overwrites it.
        self.partial = f"{folder}/.partial.{name}.tmp"
        self._records = [
            tfrecord_framed(self._event(wall_time=stamp, file_version="brain.Event:2").SerializeToString())
        ]

    def scalars(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto import summary_pb2

        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()]
        )
        event = self._event(wall_time=time.time(), step=int(step), summary=summary)
        self._records.append(tfrecord_framed(event.SerializeToString()))

    def flush(self) -> None:
        files.write_atomically(self.path, b"".join(self._records), tmp=self.partial)


class EpochLog(keras.callbacks.Callback):
    """At each epoch end (every log interval): TensorBoard scalars, a history row, a checkpoint
    when one is due (and at the phase's end), and step, learning rate, examples/s and MFU on
    Keras's progress line. Throughput covers training only, not validation. For a mixture,
    `sources` {name: (validation dataset, batches)} are evaluated one by one whenever Keras
    validates the whole: per-corpus curves (logs/validation-NAME/) and history fields."""

    def __init__(self, config: TrainConfig, history: History, checkpoints: Checkpoints, *,
                 global_batch: int, seq_len: int, flops_per_example: float, peak_tflops: float | None,
                 devices: int, phase_end: int | None = None,
                 sources: dict | None = None):  # fmt: skip
        super().__init__()
        self.config = config
        self.phase_end = phase_end or config.train_steps
        self.sources = sources or {}
        self.history = history
        self.checkpoints = checkpoints
        self.examples_per_epoch = config.batches_per_epoch * global_batch
        self.seq_len = seq_len
        self.flops_per_example = flops_per_example
        self.peak_flops = peak_tflops * 1e12 * devices if peak_tflops else None
        logs = history.run_dir.logs
        self.writers = {
            "train": EventFile(f"{logs}/train"),
            "validation": EventFile(f"{logs}/validation"),
            **{f"validation-{name}": EventFile(f"{logs}/validation-{name}") for name in self.sources},
        }

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.trained = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        # `self.model` (Keras's Callback property) brings a JAX run's variables up to date with its
        # train step's state before anything reads them: the step, the checkpoint below.
        step = int(backend.to_numpy(self.model.optimizer.iterations))
        examples_per_s = self.examples_per_epoch / max(1e-9, self.trained - self.started)
        row = {
            "step": step,
            "loss": mlm_loss(logs),
            "mlm_accuracy": pick(logs, "mlm_accuracy", "accuracy"),
            **_objective_figures(logs),
            "learning_rate": float(backend.to_numpy(self.model.optimizer.learning_rate)),
            "examples_per_s": examples_per_s,
            "tokens_per_s": examples_per_s * self.seq_len,
            "seq_len": self.seq_len,
        }
        if self.peak_flops:
            row["mfu"] = examples_per_s * self.flops_per_example / self.peak_flops
        if "val_loss" in logs:
            row["val_loss"] = mlm_loss(logs, "val_")
            row["val_mlm_accuracy"] = pick(logs, "val_mlm_accuracy", "val_accuracy")
            row.update({f"val_{k}": v for k, v in _objective_figures(logs, "val_").items()})
            if self.sources:
                row["val_sources"] = self._evaluate_sources()
        self._write(step, row)
        self.history.append(row)
        if step % self.config.checkpoint_every == 0 or step == self.phase_end:
            self.checkpoints.save(step, batches=step * self.config.grad_accum_steps)
        # The progress bar's epoch line is drawn after this callback, from the same dict.
        logs.update({"step": step, "lr": row["learning_rate"], "examples/s": examples_per_s})
        if "mfu" in row:
            logs["mfu"] = row["mfu"]

    def _evaluate_sources(self) -> dict:
        results = {}
        for name, (dataset, batches) in self.sources.items():
            source_logs = self.model.evaluate(dataset, steps=batches, return_dict=True, verbose=0)
            results[name] = {
                "loss": mlm_loss(source_logs),
                "mlm_accuracy": pick(source_logs, "mlm_accuracy", "accuracy"),
            }
        return results

    def _write(self, step: int, row: dict) -> None:
        names = ("loss", "mlm_accuracy", *OBJECTIVE_FIGURES, "learning_rate", "examples_per_s",
                 "tokens_per_s", "mfu")  # fmt: skip
        self.writers["train"].scalars(step, {n: row[n] for n in names if row.get(n) is not None})
        if "val_loss" in row:
            validation = {"loss": row["val_loss"], "mlm_accuracy": row["val_mlm_accuracy"]}
            validation.update(
                {n: row[f"val_{n}"] for n in OBJECTIVE_FIGURES if row.get(f"val_{n}") is not None}
            )
            self.writers["validation"].scalars(step, validation)
        for name, values in row.get("val_sources", {}).items():
            self.writers[f"validation-{name}"].scalars(step, values)
        for writer in self.writers.values():
            writer.flush()


# Figures beyond the masked LM's, by the name Keras logs them under, for whichever the model has:
# NSP/SOP; ELECTRA's discriminator (loss, accuracy, precision and recall on replaced tokens) and
# the share of real tokens the generator replaced. (With ELECTRA, mlm_* is the generator's.)
OBJECTIVE_FIGURES = {
    "nsp_accuracy": "nsp_accuracy",
    "rtd_loss": "rtd_loss",
    "rtd_accuracy": "rtd_accuracy",
    "rtd_precision": "rtd_precision",
    "rtd_recall": "rtd_recall",
    "replaced_fraction": "rtd_replaced",
}


def _objective_figures(logs: dict, prefix: str = "") -> dict:
    found = {name: pick(logs, prefix + logged) for name, logged in OBJECTIVE_FIGURES.items()}
    return {name: value for name, value in found.items() if value is not None}


def figures(logs: dict) -> dict:
    """An evaluation's figures from Keras's logs: masked-LM loss, accuracy and perplexity, and
    whichever of OBJECTIVE_FIGURES the model has."""
    loss = mlm_loss(logs)
    return {
        "mlm_loss": loss,
        "mlm_accuracy": pick(logs, "mlm_accuracy", "accuracy"),
        "perplexity": math.exp(min(loss, 700.0)),
        **_objective_figures(logs),
    }


def pick(logs: dict, *names: str) -> float | None:
    """The first of `names` that Keras logged (its names depend on how many outputs the model has)."""
    return next((float(logs[n]) for n in names if n in logs), None)


def mlm_loss(logs: dict, prefix: str = "") -> float | None:
    """The masked-LM loss: Keras logs it as `loss` when it is the only loss, else `mlm_loss`."""
    return pick(logs, f"{prefix}mlm_loss", f"{prefix}loss")


class History:
    """model_dir/history.jsonl: one row per log interval. Rewritten whole each time (GCS objects
    cannot be appended to); rows past the resumed step, from a killed run, are dropped."""

    def __init__(self, run_dir: RunDir, resumed_step: int):
        self.run_dir = run_dir
        self.rows = [r for r in read_history(run_dir) if r["step"] <= resumed_step]

    def append(self, row: dict) -> None:
        self.rows.append(row)
        self.run_dir.write(HISTORY, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.rows))


def read_history(run_dir: RunDir) -> list[dict]:
    path = run_dir.file(HISTORY)
    if not files.exists(path):
        return []
    return [json.loads(line) for line in files.read_text(path).splitlines() if line.strip()]


def plot_loss(rows: list[dict], path: str) -> None:
    """Training and validation masked-LM loss against step, from the history rows, as a PNG."""
    try:
        import matplotlib
    except ImportError:  # a machine with only what training needs (the GPU image bench/ is lent)
        print(f"note: matplotlib is not installed, so {path} is not drawn; history.jsonl has the figures")
        return

    matplotlib.use("Agg")  # no display on a server or TPU VM
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), dpi=120)
    train = [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None]
    validation = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    if train:
        axes.plot(*zip(*train, strict=True), label="training (mean over each log interval)")
    if validation:
        axes.plot(*zip(*validation, strict=True), "o-", label="validation")
    axes.set_xlabel("step (optimizer updates)")
    axes.set_ylabel("masked-LM loss")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    files.write_atomically(path, buffer.getvalue())  # also gs://
