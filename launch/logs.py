"""Seeing what a run does: per log interval, TensorBoard scalars, a history.jsonl row, Keras's
progress line and the checkpoint when one is due (`EpochLog`); at the end, loss.png.
"""

from __future__ import annotations

import io
import json
import math
import time

import keras
import tensorflow as tf

from launch.checkpoints import Checkpoints
from launch.config import TrainConfig
from launch.run_dir import HISTORY, RunDir


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
        self.writers = {
            "train": tf.summary.create_file_writer(f"{history.run_dir.logs}/train"),
            "validation": tf.summary.create_file_writer(f"{history.run_dir.logs}/validation"),
            **{
                f"validation-{name}": tf.summary.create_file_writer(
                    f"{history.run_dir.logs}/validation-{name}"
                )
                for name in self.sources
            },
        }

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.trained = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        step = int(self.model.optimizer.iterations.numpy())
        examples_per_s = self.examples_per_epoch / max(1e-9, self.trained - self.started)
        row = {
            "step": step,
            "loss": mlm_loss(logs),
            "mlm_accuracy": pick(logs, "mlm_accuracy", "accuracy"),
            **_objective_figures(logs),
            "learning_rate": float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)),
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
            self.checkpoints.save(step)
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
        with self.writers["train"].as_default(step=step):
            for name in ("loss", "mlm_accuracy", *OBJECTIVE_FIGURES, "learning_rate", "examples_per_s",
                         "tokens_per_s", "mfu"):  # fmt: skip
                if row.get(name) is not None:
                    tf.summary.scalar(name, row[name])
        if "val_loss" in row:
            with self.writers["validation"].as_default(step=step):
                tf.summary.scalar("loss", row["val_loss"])
                tf.summary.scalar("mlm_accuracy", row["val_mlm_accuracy"])
                for name in OBJECTIVE_FIGURES:
                    if row.get(f"val_{name}") is not None:
                        tf.summary.scalar(name, row[f"val_{name}"])
        for name, values in row.get("val_sources", {}).items():
            with self.writers[f"validation-{name}"].as_default(step=step):
                tf.summary.scalar("loss", values["loss"])
                tf.summary.scalar("mlm_accuracy", values["mlm_accuracy"])
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
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_loss(rows: list[dict], path: str) -> None:
    """Training and validation masked-LM loss against step, from the history rows, as a PNG."""
    import matplotlib

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
    with tf.io.gfile.GFile(path, "wb") as f:  # also gs://
        f.write(buffer.getvalue())
