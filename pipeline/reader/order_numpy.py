"""`order.py`'s training order in numpy: the same records in the same order, without TensorFlow.

    for refs in seekable_records(counts, seed, start, window):   # one corpus, from record `start`
        ...   # (N, 2) int64 chunks of (file index, record index), a shuffle window at a time
    corpus_choices(rates, seed, start)                          # a mixture: each record's corpus
    mixture_starts(rates, seed, start)                          # records of each corpus before `start`

`order.py` defines the order (its docstrings say how); each function here draws the same
permutations with `stateless.py`, TensorFlow's stateless ops in numpy, and
tests/pipeline/test_reader_numpy.py holds the two to the same records, batch for batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from common.errors import need
from pipeline.reader import stateless
from pipeline.reader.config import MIXTURE_BLOCK
from pipeline.reader.shards import InputError


def seekable_records(
    counts: Sequence[int], seed: int, start: int, window: int, where: str = ""
) -> Iterator[np.ndarray]:
    """The endless training order of files holding `counts` records, from record `start` on, as
    (N, 2) chunks of (file, record) indices: epoch e reads the files whole in an order drawn from
    (seed, 2e), cut into windows of `window`, window w permuted by a draw from
    fold_in((seed, 2e + 1), w) (`order.seekable_records`)."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    need(total > 0, f"{where}: the shards hold no records", InputError)
    window = min(window, total)
    epoch, offset = divmod(start, total)
    w, skip = divmod(offset, window)
    while True:
        order = stateless.shuffle(np.arange(len(counts), dtype=np.int64), (seed, 2 * epoch))
        ends = np.cumsum(counts[order])
        while w * window < total:
            position = np.arange(w * window, min((w + 1) * window, total), dtype=np.int64)
            at = np.searchsorted(ends, position, side="right")  # which file of the epoch's order
            refs = np.stack([order[at], position - (ends[at] - counts[order][at])], axis=1)
            draw = stateless.fold_in((seed, 2 * epoch + 1), w)
            refs = refs[stateless.shuffle(np.arange(len(refs)), draw)]
            yield refs[skip:]
            w, skip = w + 1, 0
        epoch, w = epoch + 1, 0


def _block_counts(rates: Sequence[float], n: int) -> np.ndarray:
    """`order._block_counts`: records of each corpus among a mixture's first n choices."""
    bounds = np.cumsum(np.asarray(rates, np.float64)) / float(np.sum(rates))
    bounds[-1] = 1.0
    upto = np.floor(np.float64(n) * bounds + 0.5).astype(np.int64)
    return upto - np.concatenate([[0], upto[:-1]])


def _choice_block(rates: Sequence[float], seed: int, k: int) -> np.ndarray:
    """`order._choice_block`: block k of a mixture's choices, each corpus's quota shuffled."""
    quota = _block_counts(rates, (k + 1) * MIXTURE_BLOCK) - _block_counts(rates, k * MIXTURE_BLOCK)
    corpora = np.repeat(np.arange(len(rates), dtype=np.int64), quota)
    return stateless.shuffle(corpora, (seed, k))


def mixture_starts(rates: Sequence[float], seed: int, start: int) -> list[int]:
    """Records of each corpus among a mixture's first `start` choices (`order.mixture_starts`)."""
    block, head = divmod(start, MIXTURE_BLOCK)
    whole = _block_counts(rates, block * MIXTURE_BLOCK)
    drawn = np.bincount(_choice_block(rates, seed, block)[:head], minlength=len(rates))
    return [int(n) for n in whole + drawn]


def corpus_choices(rates: Sequence[float], seed: int, start: int = 0) -> Iterator[np.ndarray]:
    """The corpus of every record of a mixture from choice `start` on, a block at a time
    (`order.corpus_choices`)."""
    block, head = divmod(start, MIXTURE_BLOCK)
    while True:
        yield _choice_block(rates, seed, block)[head:]
        block, head = block + 1, 0
