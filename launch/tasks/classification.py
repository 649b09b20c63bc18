"""Sequence classification's side of fine-tuning: the examples as full static batches, the
figures a classifier is judged by (accuracy, macro-F1, per class, the confusion matrix and its
plot), and what its SavedModel returns.

    figures(label_ids, logits, names, bad_rows)      # eval.json's numbers for one split
    plot_confusion(confusion, names, title, "confusion.png")
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf


def padded(features: dict[str, np.ndarray], label_ids: np.ndarray, batch: int) -> tf.data.Dataset:
    """Every example once, in order, in full batches: the last one is filled with weight-0 copies
    of the first example (static shapes; padding counts in no metric)."""
    n = len(label_ids)
    extra = -n % batch
    take = np.concatenate([np.arange(n), np.zeros(extra, np.int64)])
    x = {name: value[take] for name, value in features.items()}
    weights = np.concatenate([np.ones(n, np.float32), np.zeros(extra, np.float32)])
    return tf.data.Dataset.from_tensor_slices((x, label_ids[take], weights)).batch(batch, drop_remainder=True)


def evaluate_splits(classifier, data, names, batch, examples) -> dict:
    """Validation figures at the top level, test figures under "test"."""
    results = {}
    for split in ("validation", "test"):
        if split not in data:
            continue
        features, label_ids = data[split]
        logits = classifier.predict(padded(features, label_ids, batch).map(lambda x, y, w: x), verbose=0)
        found = figures(label_ids, np.asarray(logits)[: len(label_ids)], names, examples[split].bad_rows)
        if split == "validation":
            found.pop("bad_rows")  # the top level's bad_rows covers every split
            results.update(found)
        else:
            results["test"] = found
    return results


def predictions(classifier: keras.Model, names: list[str]):
    """What the served classifier returns for a batch of model inputs: logits, probabilities,
    label_id and the label's name."""
    label_names_tensor = tf.constant(names)

    def predict(inputs: dict) -> dict:
        logits = tf.cast(classifier(inputs, training=False), tf.float32)
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits),
            "label_id": label_id,
            "label": tf.gather(label_names_tensor, label_id),
        }

    return predict


# === Figures ===


def figures(label_ids: np.ndarray, logits: np.ndarray, names: list[str], bad_rows: dict) -> dict:
    """accuracy, macro_f1, per_class {label: precision, recall, f1, support}, loss (mean
    cross-entropy), examples, bad_rows; and the confusion matrix (rows: true, columns: predicted)."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    predicted = logits.argmax(axis=1)
    k = len(names)
    confusion = np.zeros((k, k), np.int64)
    np.add.at(confusion, (label_ids, predicted), 1)
    per_class = {}
    for i, name in enumerate(names):
        tp = confusion[i, i]
        precision = tp / confusion[:, i].sum() if confusion[:, i].sum() else 0.0
        recall = tp / confusion[i].sum() if confusion[i].sum() else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {
            "precision": float(precision),
            "recall": float(recall),
            "f1": float(f1),
            "support": int(confusion[i].sum()),
        }
    return {
        "accuracy": float((predicted == label_ids).mean()),
        "macro_f1": float(np.mean([c["f1"] for c in per_class.values()])),
        "per_class": per_class,
        "loss": float(-log_probs[np.arange(len(label_ids)), label_ids].mean()),
        "examples": int(len(label_ids)),
        "bad_rows": bad_rows,
        "confusion": confusion.tolist(),
    }


def plot_confusion(confusion: list[list[int]], names: list[str], title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix = np.asarray(confusion)
    size = max(3.5, 0.6 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    for (i, j), count in np.ndenumerate(matrix):
        color = "white" if count > matrix.max() / 2 else "black"
        ax.text(j, i, str(count), ha="center", va="center", color=color)
    fig.tight_layout()
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    with tf.io.gfile.GFile(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
