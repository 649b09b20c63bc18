"""Graph ops both raw-string servings share (tag/serving.py, span/serving.py): ragged rows made
dense, values gathered by row and position, and run_squad's windows computed batched, as
`launch/finetune/windows.py` computes them in Python.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# Every character below U+3001 that Python's str.isspace() calls a space, as an RE2 class body
# (RE2's \s is ASCII only).
SPACES = "".join(f"\\x{{{ord(c):X}}}" for c in map(chr, range(0x3001)) if c.isspace())


def dense(ragged: tf.RaggedTensor, pad: int) -> tf.Tensor:
    """(B, N + 1) int32: the rows padded with `pad`, one column more than the longest, so every
    row has a padding column to point at."""
    rows = tf.cast(ragged.to_tensor(pad), tf.int32)
    return tf.concat([rows, tf.fill([tf.shape(rows)[0], 1], pad)], axis=1)


def rows_at(table, row: tf.Tensor, at: tf.Tensor) -> tf.Tensor:
    """(W, T) values of `table` (B, N; ragged, or dense from `dense`): row `row` (W,), position
    `at` (W, T), clipped into range."""
    if isinstance(table, tf.RaggedTensor):
        table = dense(table, 0)
    width = tf.shape(table)[1]
    return tf.gather(tf.reshape(table, [-1]), row[:, None] * width + tf.clip_by_value(at, 0, width - 1))


def best_window(n: tf.Tensor, length, stride):
    """Each row's window count (B,) as `windows.windows` (`length` and `stride` for all rows, or
    (B,) each), and for each piece (B, P + 1) the window (index within its row) where it has the
    most context, as `windows.best_windows`."""
    length, stride = (tf.broadcast_to(x, tf.shape(n)) for x in (length, stride))
    count = 1 + tf.maximum(0, (n - length + stride - 1) // stride)
    k = tf.range(tf.reduce_max(count))
    start = k[None] * stride[:, None]  # (B, K)
    size = tf.minimum(length[:, None], n[:, None] - start)
    p = tf.range(tf.reduce_max(n) + 1)[None, :, None]
    start, size = start[:, None], size[:, None]
    inside = (k[None, None] < count[:, None, None]) & (p >= start) & (p < start + size)
    # run_squad's score in float64, as Python computes it: the shorter side, then 0.01 x the size
    shorter = tf.cast(tf.minimum(p - start, start + size - 1 - p), tf.float64)
    score = shorter + 0.01 * tf.cast(size, tf.float64)
    score = tf.where(inside, score, -np.inf)
    best = tf.reduce_max(score, axis=-1, keepdims=True)
    return count, tf.reduce_min(tf.where(score == best, k[None, None], tf.size(k)), axis=-1)
