"""Dynamic masking (RoBERTa's): a fresh BERT mask drawn in the graph each time a row is read,
from the static-mask shards, with static shapes; the TensorFlow twin of `pipeline/masking.py`,
which masks rows when the corpus is built, and of `masks_numpy.py`, which draws the same masks
without TensorFlow. The rules it draws by are `config.DynamicMasking`.

    masking = DynamicMasking.for_corpus(manifest)
    batch = remask(batch, masking, manifest.max_predictions, seed=(seed, step))
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pipeline.reader.config import DynamicMasking

__all__ = ["DynamicMasking", "remask", "unmask"]


def unmask(batch) -> tf.Tensor:
    """The original tokens: masked_lm_ids put back at masked_lm_positions where the weight is 1."""
    seq_len = batch["input_ids"].shape[-1]
    hit = tf.one_hot(batch["masked_lm_positions"], seq_len, dtype=tf.int32)  # (B, P, T)
    hit *= tf.cast(batch["masked_lm_weights"] > 0, tf.int32)[..., None]
    restored = tf.reduce_sum(hit * batch["masked_lm_ids"][..., None], axis=1)  # (B, T)
    return tf.where(tf.reduce_sum(hit, axis=1) > 0, restored, batch["input_ids"])


def remask(batch, masking: DynamicMasking, max_predictions: int, seed) -> dict:
    """A fresh BERT mask for a parsed batch, in the graph, static shapes (RoBERTa's dynamic masking).

    Same rules as the corpus builder: round(candidates * masked_lm_prob) positions (at least 1,
    at most max_predictions), 80 % [MASK] / 10 % random / 10 % kept, specials never chosen,
    positions sorted. Whole words: words are taken in random order until the next would overflow;
    with `masking.stored_units` a word is a unit of the records' `word_starts`.
    """
    tokens = unmask(batch)  # (B, T)
    b, t = tokens.shape
    seeds = tf.random.experimental.stateless_split(tf.stack([tf.cast(seed[0], tf.int64), seed[1]]), 4)
    is_special = tf.constant(masking.is_special, tf.bool)
    candidate = ~tf.gather(is_special, tokens)
    n_candidates = tf.reduce_sum(tf.cast(candidate, tf.float32), axis=1)
    budget = tf.minimum(
        float(max_predictions), tf.maximum(1.0, tf.round(n_candidates * masking.masked_lm_prob))
    )
    budget = tf.cast(tf.minimum(budget, n_candidates), tf.int32)  # (B,)

    if masking.stored_units or masking.starts_word is not None:
        if masking.stored_units:  # [CLS], [SEP], [PAD] end units; [UNK] stays in its own
            breaks = tf.constant(masking.breaks_units, tf.bool)
            starts = (batch["word_starts"] > 0) | tf.gather(breaks, tokens)
        else:
            breaks = is_special
            starts = tf.gather(tf.constant(masking.starts_word, tf.bool), tokens)
        prev_special = tf.gather(breaks, tf.pad(tokens[:, :-1], [[0, 0], [1, 0]]))
        boundary = starts | prev_special | tf.one_hot(0, t, on_value=True, off_value=False, dtype=tf.bool)
        words = tf.cumsum(tf.cast(boundary, tf.int32), axis=1) - 1  # (B, T)
    else:
        words = tf.broadcast_to(tf.range(t), (b, t))
    score = tf.gather(tf.random.stateless_uniform((b, t), seeds[0]), words, batch_dims=1)
    score = tf.where(candidate, score, 2.0)
    order = tf.argsort(score, axis=1, stable=True)  # (B, T): a word's pieces stay adjacent
    sorted_words = tf.gather(words, order, batch_dims=1)
    sorted_candidate = tf.gather(candidate, order, batch_dims=1)
    segment = sorted_words + tf.range(b)[:, None] * t  # a word's id, unique across the batch
    word_len = tf.gather(
        tf.math.unsorted_segment_sum(tf.cast(sorted_candidate, tf.int32), segment, b * t), segment
    )
    # Whole words in random order while they fit: each pass takes the longest prefix of the
    # remaining words that fits the room left, skipping words longer than that room. Three passes
    # come close to BERT's sequential skip-and-continue, with static shapes.
    taken = tf.zeros((b, t), tf.bool)
    room = budget
    for _ in range(3):
        eligible = sorted_candidate & ~taken & (word_len <= room[:, None])
        cum = tf.cumsum(tf.cast(eligible, tf.int32), axis=1)
        word_end = tf.gather(tf.math.unsorted_segment_max(cum, segment, b * t), segment)
        take = eligible & (word_end <= room[:, None])
        taken |= take
        room -= tf.reduce_sum(tf.cast(take, tf.int32), axis=1)
    selected = tf.scatter_nd(
        tf.stack([tf.broadcast_to(tf.range(b)[:, None], (b, t)), order], axis=-1), taken, (b, t)
    )

    u = tf.random.stateless_uniform((b, t), seeds[1])
    random_pool = tf.constant(np.flatnonzero(~np.array(masking.is_special)), tf.int32)
    random_tokens = tf.gather(
        random_pool, tf.random.stateless_uniform((b, t), seeds[2], 0, len(random_pool), tf.int32)
    )
    input_ids = tf.where(selected & (u < 0.8), masking.mask_id, tokens)
    input_ids = tf.where(selected & (u >= 0.9), random_tokens, input_ids)

    positions = tf.argsort(tf.cast(~selected, tf.int32), axis=1, stable=True)[:, :max_predictions]
    n_selected = tf.reduce_sum(tf.cast(selected, tf.int32), axis=1)
    valid = tf.range(max_predictions)[None, :] < n_selected[:, None]
    positions = tf.where(valid, positions, 0)
    return {
        **batch,
        "input_ids": input_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.where(valid, tf.gather(tokens, positions, batch_dims=1), 0),
        "masked_lm_weights": tf.cast(valid, tf.float32),
    }
