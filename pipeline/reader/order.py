"""The training order of a corpus's records, and of a mixture's corpora: pure functions of the
seed, so that a position in the stream is arithmetic (a resume seeks there instead of replaying).

    seekable_records(files, counts, seed, start, window)   # one corpus, from record `start`
    corpus_choices(rates, seed, start)                       # a mixture: each record's corpus
    mixture_starts(rates, seed, start)                       # records of each corpus before `start`
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from common.errors import need
from pipeline.reader.config import MIXTURE_BLOCK
from pipeline.reader.shards import InputError, read_shard


def _block_counts(rates: Sequence[float], n) -> tf.Tensor:
    """Records of each corpus among a mixture's first n choices, n a block boundary: corpora 0..i
    take round(n * (r_0 + ... + r_i)) of them. One formula, in the graph and for a resume."""
    bounds = np.cumsum(np.asarray(rates, np.float64)) / float(np.sum(rates))
    bounds[-1] = 1.0  # exactly: the counts then sum to n
    upto = tf.cast(tf.floor(tf.cast(n, tf.float64) * tf.constant(bounds) + 0.5), tf.int64)
    return upto - tf.pad(upto[:-1], [[1, 0]])


def _choice_block(rates: Sequence[float], seed: int, k) -> tf.Tensor:
    """Block k of a mixture's choices: each corpus's quota (`_block_counts` at the block's end
    less at its start), shuffled by (seed, k)."""
    k = tf.cast(k, tf.int64)
    quota = _block_counts(rates, (k + 1) * MIXTURE_BLOCK) - _block_counts(rates, k * MIXTURE_BLOCK)
    corpora = tf.repeat(tf.range(len(rates), dtype=tf.int64), quota)
    return tf.random.experimental.stateless_shuffle(corpora, tf.stack([tf.constant(seed, tf.int64), k]))


def mixture_starts(rates: Sequence[float], seed: int, start: int) -> list[int]:
    """Records of each corpus among a mixture's first `start` choices: the whole blocks' quotas
    by arithmetic, then the head of one block drawn."""
    block, head = divmod(start, MIXTURE_BLOCK)
    whole = _block_counts(rates, block * MIXTURE_BLOCK).numpy()
    drawn = np.bincount(_choice_block(rates, seed, block).numpy()[:head], minlength=len(rates))
    return [int(n) for n in whole + drawn]


def corpus_choices(rates: Sequence[float], seed: int, start: int = 0) -> tf.data.Dataset:
    """The corpus of every record of a mixture from choice `start` on: an endless stream of
    indices, a pure function of the seed, drawn a block at a time (`_choice_block`): vectorised,
    `sample_from_datasets` draws one per record in a map call, which capped a three-corpus mixture
    at 28,000 records/s on 2 cores."""
    block, head = divmod(start, MIXTURE_BLOCK)
    blocks = tf.data.Dataset.counter(start=block).map(lambda k: _choice_block(rates, seed, k))
    return blocks.unbatch().skip(head)


def seekable_records(
    files: list[str], counts: list[int], seed: int, start: int, window: int, where: str = ""
) -> tf.data.Dataset:
    """The endless training order of `files` (holding `counts` records) from record `start` on.

    Epoch e reads the shards whole, one after the other, in an order drawn from (seed, e); its
    records are cut into windows of `window` (the last one shorter) and each window is permuted
    by a draw from (seed, e, window). The builder already wrote each shard in a random order
    (`pipeline/stages/`), so this is as good a shuffle as a `window`-record buffer over
    interleaved shards, and, unlike one, the position is arithmetic: record `start` is in epoch
    start // n, window (start % n) // `window`. A resume reads that window from the one shard
    where it begins (skipping inside that shard only) and drops the window's records before
    `start`: time to the first batch does not depend on the step (bench/resume.py).
    """
    total = sum(counts)
    need(total > 0, f"{where}: the shards hold no records", InputError)
    window = min(window, total)
    first_epoch, offset = divmod(start, total)
    first_window, skip = divmod(offset, window)
    paths, sizes = tf.constant(files), tf.constant(counts, tf.int64)
    key = tf.constant(seed, tf.int64)

    def epoch(e):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(len(files), dtype=tf.int64), tf.stack([key, 2 * e])
        )
        ordered = tf.gather(sizes, order)
        begins = tf.cumsum(ordered, exclusive=True)
        resume_at = tf.where(e == first_epoch, tf.constant(first_window * window, tf.int64), 0)
        # Shards wholly before the resume point are never opened; the one it falls in skips its head.
        heads = tf.clip_by_value(resume_at - begins, 0, ordered)
        shards = tf.data.Dataset.from_tensor_slices((tf.gather(paths, order), heads, ordered))
        shards = shards.filter(lambda path, head, size: head < size)
        records = shards.flat_map(lambda path, head, size: read_shard(path).skip(head))

        def permute(w, batch):
            draw = tf.random.experimental.stateless_fold_in(tf.stack([key, 2 * e + 1]), w)
            return tf.random.experimental.stateless_shuffle(batch, draw)

        return records.batch(window).enumerate(start=resume_at // window).map(permute).unbatch()

    return tf.data.Dataset.counter(start=first_epoch).flat_map(epoch).skip(skip)
