"""The figures a classifier is judged by: accuracy, macro-F1, per class, the loss, the confusion
matrix and its plot.

    figures(label_ids, logits, names, bad_rows)      # eval.json's numbers for one split
    plot_confusion(confusion, names, title, "confusion.png")
"""

from __future__ import annotations

import io
import os

import numpy as np

from pipeline import files


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
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    files.make_dirs(os.path.dirname(path) or ".")
    files.write_atomically(path, image.getvalue())
    plt.close(fig)
