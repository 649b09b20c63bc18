"""A linear-chain CRF for token tagging, and Viterbi decoding in the graph, both with static shapes.

    crf = CRF(num_labels, name="crf")            # holds the transitions; passes emissions through
    model.compile(loss=CRFLoss(crf), ...)        # the negative log-likelihood, through compile
    labels = crf.decode(emissions, mask)          # (B, T) best path; -1 where mask is off

Labels sit on some positions only (a word's first piece: `launch/finetune/tag/alignment.py`), so the
chain runs over those: `compact` moves the labelled positions of each row to its front, in order,
by a gather whose indices come from a running count (not a one-argument `where`: XLA and TPUs need
the shape known before the data). Past a row's length the scores are carried through unchanged,
so every row is a prefix of one fixed-length recursion. The recursions are Python loops over the
static T, unrolled into the graph: `keras.ops.scan` is a `tf.while_loop` without a maximum
iteration count on TensorFlow, whose gradient XLA refuses to compile.

Shapes: B batch, T sequence, L labels.
"""

from __future__ import annotations

import keras
from keras import ops

from model.layers import PACKAGE
from model.tasks import IGNORE


def compact(values, mask):
    """(B, T, ...) values with each row's `mask`ed positions first, in order, and their count (B,).
    Slots past a row's count hold its first position's values: every reader stops at the count."""
    slots = ops.arange(ops.shape(mask)[1])
    slot_of = ops.cumsum(ops.cast(mask, "int32"), axis=1) - 1  # (B, T): each masked position's slot
    # The position that fills each slot, from a (B, slot, position) comparison: T**2 compares per
    # row, where an argsort would do; an XLA sort in the train step made the step several times
    # slower on CPU (docs/benchmarks/tagging.md, "The CRF's step", has the timings).
    fills = ops.logical_and(mask[:, None, :], slot_of[:, None, :] == slots[None, :, None])
    source = ops.sum(ops.where(fills, slots[None, None, :], 0), axis=2)  # (B, T)
    index = ops.reshape(source, (*ops.shape(source), *([1] * (len(values.shape) - 2))))
    return ops.take_along_axis(values, index, axis=1), ops.sum(ops.cast(mask, "int32"), axis=1)


def expand(values, mask):
    """`compact`'s inverse for (B, T) int labels: back to their positions, IGNORE off the mask."""
    slot_of = ops.maximum(ops.cumsum(ops.cast(mask, "int32"), axis=1) - 1, 0)
    return ops.where(mask, ops.take_along_axis(values, slot_of, axis=1), IGNORE)


def log_likelihood(emissions, tags, lengths, transitions, start, end):
    """log p(tags | emissions) of compacted rows: (B,) (0 for an empty row)."""
    num_labels = ops.shape(transitions)[0]
    steps = ops.arange(ops.shape(tags)[1])
    valid = steps[None, :] < lengths[:, None]  # (B, T)
    tags = ops.where(valid, tags, 0)
    emitted = ops.take_along_axis(emissions, tags[..., None], axis=2)[..., 0]  # (B, T)
    moves = ops.take(ops.reshape(transitions, (-1,)), tags[:, :-1] * num_labels + tags[:, 1:])  # (B, T - 1)
    last = ops.take_along_axis(tags, ops.maximum(lengths - 1, 0)[:, None], axis=1)[:, 0]
    score = (
        ops.sum(ops.where(valid, emitted, 0.0), axis=1)
        + ops.sum(ops.where(valid[:, 1:], moves, 0.0), axis=1)
        + ops.take(start, tags[:, 0])
        + ops.take(end, last)
    )

    alpha = start[None] + emissions[:, 0]  # (B, L): log-sum of every path's score so far
    for t in range(1, emissions.shape[1]):
        new = ops.logsumexp(alpha[:, :, None] + transitions[None], axis=1) + emissions[:, t]
        alpha = ops.where(valid[:, t, None], new, alpha)
    log_z = ops.logsumexp(alpha + end[None], axis=1)
    return ops.where(lengths > 0, score - log_z, 0.0)


def viterbi(emissions, lengths, transitions, start, end):
    """The best path of compacted rows: (B, T) int32, valid up to each row's length."""
    num_labels = ops.shape(transitions)[0]
    valid = ops.arange(ops.shape(emissions)[1])[None, :] < lengths[:, None]
    stay = ops.arange(num_labels)[None, :]  # a padded step points to itself
    scores, pointers = start[None] + emissions[:, 0], []  # scores (B, L): the best path ending in each label
    for t in range(1, emissions.shape[1]):
        candidates = scores[:, :, None] + transitions[None]  # (B, from, to)
        best = ops.max(candidates, axis=1) + emissions[:, t]
        pointers.append(ops.where(valid[:, t, None], ops.cast(ops.argmax(candidates, axis=1), "int32"), stay))
        scores = ops.where(valid[:, t, None], best, scores)
    label = ops.cast(ops.argmax(scores + end[None], axis=1), "int32")  # (B,) at the last step
    path = [label]
    for step_pointers in reversed(pointers):
        label = ops.take_along_axis(step_pointers, label[:, None], axis=1)[:, 0]
        path.append(label)
    return ops.stack(path[::-1], axis=1)


# === Layer ===


@keras.saving.register_keras_serializable(package=PACKAGE)
class CRF(keras.layers.Layer):
    """The transition scores (from, to), the start and the end scores; `call` passes the emissions
    through (float32), so the weights live in the model, its checkpoints and its saves."""

    def __init__(self, num_labels: int, **kwargs):
        kwargs.setdefault("dtype", "float32")  # the scores and the transitions in float32 under any policy
        super().__init__(**kwargs)
        self.num_labels = num_labels

    def build(self, input_shape):
        shape = (self.num_labels, self.num_labels)
        self.transitions = self.add_weight(name="transitions", shape=shape, initializer="zeros")
        self.start = self.add_weight(name="start", shape=(self.num_labels,), initializer="zeros")
        self.end = self.add_weight(name="end", shape=(self.num_labels,), initializer="zeros")

    def call(self, emissions):
        return ops.cast(emissions, "float32")

    def decode(self, emissions, mask):
        """The best labels at the `mask`ed positions (B, T), IGNORE elsewhere."""
        compacted, lengths = compact(ops.cast(emissions, "float32"), mask)
        path = viterbi(compacted, lengths, self.transitions, self.start, self.end)
        return expand(path, mask)

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels}


class CRFLoss(keras.losses.Loss):
    """The negative log-likelihood of the labelled positions' tags (IGNORE elsewhere) under `crf`'s
    transitions, per row. It reads the layer's weights, so compile it with the model it belongs to
    (bert4keras's CRF.sparse_loss, as a Keras Loss)."""

    def __init__(self, crf: CRF, name: str = "crf_loss"):
        super().__init__(name=name)
        self.crf = crf

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        mask = y_true != IGNORE
        emissions, lengths = compact(ops.cast(y_pred, "float32"), mask)
        tags, _ = compact(y_true, mask)
        crf = self.crf
        return -log_likelihood(emissions, tags, lengths, crf.transitions, crf.start, crf.end)

    def get_config(self):
        return {"name": self.name}
