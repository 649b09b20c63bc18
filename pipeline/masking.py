"""Masked-LM masking of a batch of padded rows, vectorised with numpy.

BERT's rules: choose round(n * masked_lm_prob) of a row's non-special tokens (at least 1, at most
max_predictions); 80 % become [MASK], 10 % a random non-special token, 10 % stay; special tokens
([CLS], [SEP], [PAD]) are never chosen; positions are stored sorted, padding weights are 0.
Whole-word masking chooses words and never splits one: without a segmenter a word is a `▁`-initial
piece (or a WordPiece token) plus its continuations, and every CJK piece is a word of its own; with
one, the caller passes each token's "begins a unit" flag (`segment.unit_starts`) instead.
"""

from __future__ import annotations

import dataclasses

import numpy as np

MAX_MASKED_LM_PROB = 0.4  # the highest rate published recipes use (RoBERTa-wwm, MosaicBERT: 30 %)


@dataclasses.dataclass(frozen=True)
class MaskingTables:
    """Per-token-id facts masking needs; built once per worker from the vocab."""

    is_special: np.ndarray  # (V,) bool: [PAD] [UNK] [CLS] [SEP] [MASK] and control pieces
    starts_word: np.ndarray  # (V,) bool: the piece begins a word
    is_cjk: np.ndarray  # (V,) bool: the piece is unspaced script, a word by itself
    mask_id: int
    random_ids: np.ndarray  # ids a "random token" replacement draws from: every non-special id
    unk_id: int = -1  # [UNK]: never masked, but inside a segmenter's word it stays in the unit

    @classmethod
    def from_vocab(cls, vocab) -> MaskingTables:
        is_special, starts_word, is_cjk = vocab.tables()
        return cls(
            is_special=is_special,
            starts_word=starts_word,
            is_cjk=is_cjk,
            mask_id=vocab.special_ids["mask"],
            random_ids=np.flatnonzero(~is_special).astype(np.int32),
            unk_id=vocab.special_ids["unk"],
        )

    @property
    def breaks_units(self) -> np.ndarray:
        """(V,) bool: the row-structure tokens ([CLS], [SEP], [PAD], ...) that end any unit: every
        special token but [UNK], which stands for text and belongs to its word's unit."""
        breaks = self.is_special.copy()
        if self.unk_id >= 0:
            breaks[self.unk_id] = False
        return breaks


def vocab_starts(tokens: np.ndarray, tables: MaskingTables) -> np.ndarray:
    """(..., T) bool: the token begins a word by the vocab's marks alone (a `▁` or non-"##" piece,
    a CJK piece, or the piece after a CJK piece). The first token of the last axis always does."""
    prev = np.zeros_like(tokens)  # [PAD] before the first token: always a boundary
    prev[..., 1:] = tokens[..., :-1]
    starts = (
        tables.starts_word[tokens] | tables.is_cjk[tokens] | tables.is_cjk[prev] | tables.is_special[prev]
    )
    starts[..., 0] = True
    return starts


def stored_starts(tokens: np.ndarray, tables: MaskingTables, unit_starts: np.ndarray) -> np.ndarray:
    """(N, T) bool, the `word_starts` feature. A text token begins a unit where the segmenter's
    `unit_starts` and the vocab's own marks both say so: a "##" or non-"▁" continuation of a
    non-CJK piece never does (a segmenter that cuts such a word, as jieba cuts Cyrillic or
    accented words into characters, does not split it). A row's first text token and any after
    [CLS] or [SEP] begin a unit too (a word cut by a row edge is a unit of its own in each row);
    [CLS], [SEP] and padding are never a start. [UNK] keeps its flag: it is never masked, but the
    rest of its word is masked together."""
    breaks = tables.breaks_units
    after_break = np.ones_like(unit_starts)
    after_break[:, 1:] = breaks[tokens[:, :-1]]
    return ((unit_starts & vocab_starts(tokens, tables)) | after_break) & ~breaks[tokens]


def word_ids(tokens: np.ndarray, tables: MaskingTables, unit_starts: np.ndarray | None = None) -> np.ndarray:
    """(N, T) index of the word each token belongs to, counting from 0 in each row: by the vocab's
    marks, or by the segmenter's `unit_starts` (N, T), where a special token is a word of its own."""
    if unit_starts is None:
        boundary = vocab_starts(tokens, tables)
    else:
        boundary = stored_starts(tokens, tables, unit_starts) | tables.breaks_units[tokens]
    boundary[:, 0] = True
    return np.cumsum(boundary, axis=1) - 1


def _choose_whole_words(order, words, budget, n_candidates, selected):
    """Greedy over words in random order, skipping any that would overflow (BERT's rule). Only
    candidates: they sort first, and a row whose words all overflow gets fewer predictions, never
    a special token."""
    for r in range(order.shape[0]):
        if budget[r] == 0:
            continue
        o = order[r, : n_candidates[r]]
        w = words[r, o]
        starts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]]).tolist()
        ends = starts[1:] + [len(o)]
        count, target = 0, int(budget[r])
        for start, end in zip(starts, ends, strict=True):
            if count + end - start > target:
                continue
            selected[r, o[start:end]] = True
            count += end - start
            if count == target:
                break


def mask_rows(
    tokens: np.ndarray,
    *,
    tables: MaskingTables,
    max_predictions: int,
    masked_lm_prob: float,
    whole_word: bool,
    rng: np.random.Generator,
    unit_starts: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Mask (N, T) rows of token ids; returns the google-research/bert masked-LM features.
    `unit_starts` (N, T), with `whole_word`: the segmenter's units instead of the vocab's words."""
    n, t = tokens.shape
    candidate = ~tables.is_special[tokens]  # (N, T)
    n_candidates = candidate.sum(axis=1)
    budget = np.minimum(max_predictions, np.maximum(1, np.rint(n_candidates * masked_lm_prob)))
    budget = np.minimum(budget, n_candidates).astype(np.int64)

    # A random score per word, shared by its pieces; non-candidates sort last.
    words = word_ids(tokens, tables, unit_starts) if whole_word else None
    score = rng.random((n, t)) if words is None else np.take_along_axis(rng.random((n, t)), words, axis=1)
    score[~candidate] = 2.0

    selected = np.zeros((n, t), bool)
    if whole_word:
        order = np.argsort(score, axis=1, kind="stable")  # (N, T): pieces of a word stay adjacent
        _choose_whole_words(order, words, budget, n_candidates, selected)
    else:
        # Each row's `budget` lowest scores. No budget exceeds max_predictions: partition off that
        # many (distinct random floats: the same set a full sort would give), sort only those.
        k = min(max_predictions, t)
        lowest = np.argpartition(score, k - 1, axis=1)[:, :k] if k < t else np.argsort(score, axis=1)
        ranked = np.argsort(np.take_along_axis(score, lowest, axis=1), axis=1)
        lowest = np.take_along_axis(lowest, ranked, axis=1)
        np.put_along_axis(selected, lowest, np.arange(lowest.shape[1])[None, :] < budget[:, None], axis=1)

    # 80 % [MASK], 10 % random token, 10 % unchanged: drawn for the selected positions only.
    rows, cols = np.nonzero(selected)  # row-major: each row's positions ascending
    u = rng.random(len(rows))
    replaced = np.where(u < 0.8, tables.mask_id, tokens[rows, cols])
    at_random = u >= 0.9
    replaced[at_random] = tables.random_ids[rng.integers(0, len(tables.random_ids), int(at_random.sum()))]
    input_ids = tokens.copy()
    input_ids[rows, cols] = replaced

    # Selected positions first, in increasing order, then zeros (a scatter, not a second sort).
    count = selected.sum(axis=1)
    rank = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
    positions = np.zeros((n, max_predictions), np.int64)
    keep = rank < max_predictions
    positions[rows[keep], rank[keep]] = cols[keep]
    valid = np.arange(max_predictions)[None, :] < count[:, None]
    return {
        "input_ids": input_ids.astype(np.int64),
        "masked_lm_positions": positions.astype(np.int64),
        "masked_lm_ids": np.where(valid, np.take_along_axis(tokens, positions, axis=1), 0).astype(np.int64),
        "masked_lm_weights": valid.astype(np.float32),
    }
