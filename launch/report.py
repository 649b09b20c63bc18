"""model_dir/loss.png: training and validation loss against step, from model_dir/history.jsonl."""

from __future__ import annotations

import io

import tensorflow as tf


def plot_loss(rows: list[dict], path: str) -> None:
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
