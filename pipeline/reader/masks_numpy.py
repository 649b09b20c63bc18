"""Dynamic masking without TensorFlow: `dynamic_masking.py`'s `unmask` and `remask` in numpy,
giving the same masks for the same (seed, batch index) (tests/pipeline/test_reader_numpy.py).

    batch = remask(batch, masking, manifest.max_predictions, seed=(seed, step))

The same rules, op for op (`dynamic_masking.remask` says why each is there): the budget,
words scored by one uniform draw each and taken in score order over three passes while they
fit, 80 % [MASK] / 10 % random / 10 % kept, positions in row order. Its draws are TensorFlow's
stateless ones (`stateless.py`), so each is bit-equal to the graph's.
"""

from __future__ import annotations

import numpy as np

from pipeline.reader import stateless
from pipeline.reader.config import DynamicMasking


def unmask(batch) -> np.ndarray:
    """The original tokens: masked_lm_ids put back at masked_lm_positions where the weight is 1."""
    ids = batch["input_ids"]
    hit = batch["masked_lm_positions"][..., None] == np.arange(ids.shape[-1])  # (B, P, T)
    hit &= (batch["masked_lm_weights"] > 0)[..., None]
    hits = hit.astype(np.int32)
    restored = np.einsum("bpt,bp->bt", hits, batch["masked_lm_ids"].astype(np.int32))
    return np.where(hits.sum(axis=1) > 0, restored, ids).astype(ids.dtype)


def _segment_reduce(values: np.ndarray, segment: np.ndarray, size: int, reduce) -> np.ndarray:
    """tf.math.unsorted_segment_sum / _max of (B, T) `values` by `segment` ids, gathered back."""
    out = np.full(size, np.iinfo(np.int32).min if reduce is np.maximum else 0, np.int64)
    reduce.at(out, segment.reshape(-1), values.reshape(-1))
    return out[segment]


def remask(batch: dict, masking: DynamicMasking, max_predictions: int, seed) -> dict:
    """A fresh BERT mask for a parsed batch of numpy arrays: `dynamic_masking.remask`'s."""
    tokens = unmask(batch)  # (B, T)
    b, t = tokens.shape
    seeds = stateless.split((int(seed[0]), int(seed[1])), 4)
    is_special = np.asarray(masking.is_special, bool)
    candidate = ~is_special[tokens]
    n_candidates = candidate.sum(axis=1).astype(np.float32)
    budget = np.minimum(
        np.float32(max_predictions),
        np.maximum(np.float32(1.0), np.round(n_candidates * np.float32(masking.masked_lm_prob))),
    )
    budget = np.minimum(budget, n_candidates).astype(np.int32)  # (B,)

    if masking.stored_units or masking.starts_word is not None:
        if masking.stored_units:
            breaks = np.asarray(masking.breaks_units, bool)
            starts = (batch["word_starts"] > 0) | breaks[tokens]
        else:
            breaks = is_special
            starts = np.asarray(masking.starts_word, bool)[tokens]
        prev = np.pad(tokens[:, :-1], [[0, 0], [1, 0]])
        boundary = starts | breaks[prev]
        boundary[:, 0] = True
        words = np.cumsum(boundary, axis=1, dtype=np.int32) - 1  # (B, T)
    else:
        words = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t))
    score = np.take_along_axis(stateless.uniform((b, t), seeds[0]), words, axis=1)
    score = np.where(candidate, score, np.float32(2.0))
    order = np.argsort(score, axis=1, kind="stable")  # (B, T): a word's pieces stay adjacent
    sorted_words = np.take_along_axis(words, order, axis=1)
    sorted_candidate = np.take_along_axis(candidate, order, axis=1)
    segment = sorted_words + np.arange(b)[:, None] * t  # a word's id, unique across the batch
    word_len = _segment_reduce(sorted_candidate.astype(np.int64), segment, b * t, np.add)
    taken = np.zeros((b, t), bool)
    room = budget.astype(np.int64)
    for _ in range(3):
        eligible = sorted_candidate & ~taken & (word_len <= room[:, None])
        cum = np.cumsum(eligible, axis=1, dtype=np.int64)
        word_end = _segment_reduce(cum, segment, b * t, np.maximum)
        take = eligible & (word_end <= room[:, None])
        taken |= take
        room -= take.sum(axis=1)
    selected = np.zeros((b, t), bool)
    np.put_along_axis(selected, order, taken, axis=1)

    u = stateless.uniform((b, t), seeds[1])
    pool = np.flatnonzero(~is_special).astype(np.int32)
    random_tokens = pool[stateless.uniform_int((b, t), seeds[2], 0, len(pool))]
    input_ids = np.where(selected & (u < np.float32(0.8)), np.int32(masking.mask_id), tokens)
    input_ids = np.where(selected & (u >= np.float32(0.9)), random_tokens, input_ids).astype(tokens.dtype)

    positions = np.argsort((~selected).astype(np.int32), axis=1, kind="stable")[:, :max_predictions]
    n_selected = selected.sum(axis=1)
    valid = np.arange(max_predictions)[None, :] < n_selected[:, None]
    positions = np.where(valid, positions, 0).astype(np.int32)
    return {
        **batch,
        "input_ids": input_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": np.where(valid, np.take_along_axis(tokens, positions, axis=1), 0).astype(
            tokens.dtype
        ),
        "masked_lm_weights": valid.astype(np.float32),
    }
