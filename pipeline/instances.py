"""Turning tokenized documents into padded rows: packing (full_sentences) and A/B pairs
(segment_pair with NSP or SOP), then masking. Pure numpy; one call per packing group and dupe.

Row layout, as google-research/bert:
  full_sentences  [CLS] doc1 ... [SEP] doc2 ... [SEP] doc3 ...   segment 0, document_ids 1, 2, 3
  segment_pair    [CLS] A ... [SEP] B ... [SEP]                  segment 0 for A, 1 for B
"""

from __future__ import annotations

import bisect
import dataclasses
import random

import numpy as np

from pipeline.config import CorpusConfig
from pipeline.masking import MaskingTables, mask_rows, stored_starts

# How rows are cut and grouped, recorded in the manifest (`packing_version`):
#   1  google-research/bert's create_instances_from_document: the short target drawn per document
#   2  the short target drawn per row (`_doc_pairs`): fuller rows, a tenth of them short
#   3  packing groups cut from the input as it is read (`stages/groups.py`), not by a hash of
#      each document after the whole corpus is tokenized; shards are key ranges of every group
#      (`parts.key_range`). Rows are cut as in 2, from other groups: every mode's bytes changed.
PACKING_VERSION = 3

# With a segmenter, each token's "begins a masking unit" flag rides in this bit of its id through
# packing, pairing and truncation, so every way those cut and move tokens moves the flag with its
# token; it is taken off again before masking. Vocabularies are far below 2**30 tokens.
_UNIT_BIT = 30


@dataclasses.dataclass(frozen=True)
class TokenizedDoc:
    """A document tokenized once: its sentences' ids back to back, and their lengths."""

    key: int  # 64-bit content hash: identity, split and group all derive from it
    tokens: np.ndarray  # (L,) int32
    sentence_lengths: np.ndarray  # (S,) int32, sums to L
    unit_starts: np.ndarray | None = None  # (L,) bool, with a segmenter: the token begins a unit

    @property
    def n_tokens(self) -> int:  # as `parts.SpilledDoc`'s: grouping reads either
        return len(self.tokens)

    def sentences(self) -> list[np.ndarray]:
        """The non-empty sentences, as views of `tokens` (slices: np.split costs ~10x as much)."""
        ends = np.cumsum(self.sentence_lengths).tolist()
        starts = [0, *ends[:-1]]
        return [self.tokens[s:e] for s, e in zip(starts, ends, strict=True) if e > s]


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    pad: int
    cls: int
    sep: int


def pack_full_sentences(docs: list[TokenizedDoc], seq_len: int, ids: SpecialIds):
    """Fill rows completely with consecutive documents (RoBERTa's FULL-SENTENCES).

    Each document is followed by [SEP] and the next one continues in the same row, so only the
    group's last row is padded. A sentence that does not fit continues in the next row. Returns
    (tokens, segment_ids, document_ids), each (N, T).
    """
    stream = np.concatenate([np.append(d.tokens, ids.sep) for d in docs]).astype(np.int32)
    owner = np.concatenate([np.full(len(d.tokens) + 1, i, np.int32) for i, d in enumerate(docs)])
    width = seq_len - 1  # room after [CLS]
    n_rows = -(-len(stream) // width)
    pad = n_rows * width - len(stream)
    stream = np.pad(stream, (0, pad), constant_values=ids.pad).reshape(n_rows, width)
    owner = np.pad(owner, (0, pad), constant_values=-1).reshape(n_rows, width)
    tokens = np.concatenate([np.full((n_rows, 1), ids.cls, np.int32), stream], axis=1)
    # Documents numbered 1, 2, ... within the row; [CLS] belongs to the row's first document.
    local = np.where(owner >= 0, owner - owner[:, :1] + 1, 0)
    document_ids = np.concatenate([np.ones((n_rows, 1), np.int32), local], axis=1)
    return tokens, np.zeros_like(tokens), document_ids


def truncated_lengths(a_len: np.ndarray, b_len: np.ndarray, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The lengths google-research/bert's truncate_seq_pair leaves, for every pair at once.

    It removes one token at a time from the longer segment (B when they are equal) until the pair
    fits: the longer one shrinks alone while the gap lasts, then both take turns, B first. So a
    pair that fits is kept; one whose gap covers the excess loses it all from the longer segment;
    any other ends at ceil(max/2) tokens of A and floor(max/2) of B.
    """
    excess = a_len + b_len - max_tokens
    a_alone = (excess > 0) & (a_len > b_len) & (a_len - b_len >= excess)
    b_alone = (excess > 0) & (a_len <= b_len) & (b_len - a_len >= excess)
    both = (excess > 0) & ~a_alone & ~b_alone
    a_kept = np.where(a_alone, a_len - excess, np.where(both, (max_tokens + 1) // 2, a_len))
    b_kept = np.where(b_alone, b_len - excess, np.where(both, max_tokens // 2, b_len))
    return a_kept, b_kept


class _Pairing:
    """The state one call of `build_pairs` shares across its documents: the group's tokens back to
    back, each document's sentence offsets into them, and the row cutter's random draws.

    A segment is (start, length) in `flat`, never an array: a chunk's sentences are contiguous in
    their document, so A and B are integer arithmetic, and the rows are truncated and gathered
    from `flat` in one numpy pass at the end. The draws come from a `random.Random` seeded from the
    caller's numpy Generator (still a pure function of the seed): a Python draw costs ~0.1 us where
    a numpy scalar draw costs ~2 us, and a row takes about six. An integer below n is
    int(random() * n): randrange's rejection loop costs ten times as much, and the product's
    bias, n / 2**53, is nothing at these sizes.
    """

    def __init__(self, docs, rng: np.random.Generator):
        self.flat = np.concatenate([d.tokens for d in docs]) if docs else np.zeros(0, np.int32)
        base = np.cumsum([0] + [len(d.tokens) for d in docs]).tolist()
        # Per document: absolute token offsets in `flat` of its non-empty sentences' starts and ends.
        self.bounds = []
        for d, b in zip(docs, base, strict=False):
            lengths = np.asarray(d.sentence_lengths)
            ends = (b + np.cumsum(lengths))[lengths > 0].tolist()
            starts = [b, *ends[:-1]] if ends else []
            self.bounds.append((starts, ends))
        self.random = random.Random(int(rng.integers(0, 2**63)))

    def doc_pairs(self, doc_index: int, max_tokens: int, short_seq_prob: float, task: str, pairs: list):
        """google-research/bert's create_instances_from_document, for one document, but for when
        the short target is drawn (PACKING_VERSION 2): per row, not once per document.

        google-research/bert draws it once per document, so a long document that draws a short
        target cuts all its text into short rows: with 10 % of documents short, far more than 10 %
        of rows are, and the fill of a corpus of long documents swings by several points with the
        seed (the Python docs at 128: 82-92 % real tokens per packing group). Drawn per row, a
        tenth of the rows are short, as short_seq_prob says. Everything else is as
        google-research/bert: chunks of whole sentences up to the target, A a random prefix of the
        chunk, B the rest or (NSP, half the time, always for a one-sentence chunk) a random other
        document's text from a random sentence, the unused sentences given back; SOP swaps A and
        B half the time. Appends (a_start, a_len, b_start, b_len, label) to `pairs`, not yet
        truncated to `max_tokens` (`truncated_lengths`).
        """
        uniform = self.random.random  # the one draw: every choice below is made from it

        def short_target() -> int:  # max_tokens, or with short_seq_prob a length in [2, max]
            return 2 + int(uniform() * (max_tokens - 1)) if uniform() < short_seq_prob else max_tokens

        starts, ends = self.bounds[doc_index]
        n, docs = len(starts), len(self.bounds)
        target = short_target()
        first = 0  # the chunk's first sentence
        while first < n:
            # The chunk: sentences from `first` until their length reaches the target, or the end.
            last = min(bisect.bisect_left(ends, starts[first] + target, first), n - 1)
            size = last + 1 - first
            a_end = 1 + int(uniform() * (size - 1)) if size >= 2 else 1  # sentences in A
            a = (starts[first], ends[first + a_end - 1] - starts[first])
            label = 0
            if task == "nsp" and docs > 1 and (size == 1 or uniform() < 0.5):
                # B from a random other document, from a random sentence, only what B can hold;
                # the chunk's sentences after A are given back.
                label = 1
                other = int(uniform() * (docs - 1))
                other += other >= doc_index
                other_starts, other_ends = self.bounds[other]
                b_start = other_starts[int(uniform() * len(other_starts))]
                b = (b_start, min(max(1, target - a[1]), other_ends[-1] - b_start))
                last = first + a_end - 1
            elif size >= 2:
                b = (ends[first + a_end - 1], ends[last] - ends[first + a_end - 1])
            elif a[1] < 2:  # one sentence of one token: no pair
                first = last + 1
                target = short_target()
                continue
            else:  # one sentence: split it so that both segments exist
                cut = 1 + int(uniform() * (a[1] - 1))
                a, b = (a[0], cut), (a[0] + cut, a[1] - cut)
            if task == "sop" and uniform() < 0.5:
                a, b, label = b, a, 1
            pairs.append((*a, *b, label))  # truncated later, all rows at once
            first = last + 1
            target = short_target()


def build_pairs(docs, order, seq_len, short_seq_prob, task, rng, ids: SpecialIds):
    """A/B rows for every document in `order`; returns (tokens, segment_ids, document_ids, labels)."""
    pairing = _Pairing(docs, rng)
    pairs: list[tuple[int, int, int, int, int]] = []
    for doc_index in order:
        pairing.doc_pairs(int(doc_index), seq_len - 3, short_seq_prob, task, pairs)
    a_start, a_len, b_start, b_len, labels = np.array(pairs, np.int64).reshape(-1, 5).T
    # BERT's truncate_seq_pair removes each token from the front or the back of its segment by a
    # coin flip: the tokens a segment loses from its front are Binomial(removed, 1/2).
    a_kept, b_kept = truncated_lengths(a_len, b_len, seq_len - 3)
    a_start = a_start + rng.binomial(a_len - a_kept, 0.5)
    b_start = b_start + rng.binomial(b_len - b_kept, 0.5)
    # [CLS] A [SEP] B [SEP] [PAD]...: every row gathered from the group's tokens at once, in int32
    # (half the memory traffic of int64; a group holds far fewer than 2**31 tokens).
    col = np.arange(seq_len, dtype=np.int32)[None, :]
    a_sep = (1 + a_kept)[:, None].astype(np.int32)  # A is columns 1 .. a_sep - 1
    b_sep = (a_sep + 1 + b_kept[:, None]).astype(np.int32)  # B is a_sep + 1 .. b_sep - 1
    in_b = col > a_sep
    a_from, b_from = (a_start[:, None] - 1).astype(np.int32), (b_start[:, None] - a_sep - 1).astype(np.int32)
    source = np.where(in_b, b_from, a_from) + col
    text = (col < b_sep) & (col != a_sep)
    text[:, 0] = False
    source *= text  # any in-range index: those tokens are replaced below
    tokens = pairing.flat[source] if len(pairing.flat) else np.zeros(source.shape, np.int32)
    tokens[~text] = ids.pad
    tokens[(col == a_sep) | (col == b_sep)] = ids.sep
    tokens[:, 0] = ids.cls
    segments = (in_b & (col <= b_sep)).astype(np.int32)
    document_ids = (tokens != ids.pad).astype(np.int32)
    labels = labels[:, None]
    return tokens, segments, document_ids, labels.astype(np.int32)


def create_instances(
    docs: list[TokenizedDoc],
    *,
    cfg: CorpusConfig,
    tables: MaskingTables,
    ids: SpecialIds,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """All rows one dupe of one packing group yields, masked: the schema's features, (N, ...);
    `word_starts` too when the documents carry a segmenter's unit starts."""
    segmented = bool(docs) and docs[0].unit_starts is not None
    if segmented:
        docs = [
            dataclasses.replace(d, tokens=d.tokens | (d.unit_starts.astype(np.int32) << _UNIT_BIT))
            for d in docs
        ]
    order = rng.permutation(len(docs))  # a new document order per dupe: new rows, not only masks
    if cfg.mode == "full_sentences":
        tokens, segments, document_ids = pack_full_sentences([docs[i] for i in order], cfg.seq_len, ids)
        labels = np.zeros((len(tokens), 1), np.int32)
    else:
        tokens, segments, document_ids, labels = build_pairs(
            docs, order, cfg.seq_len, cfg.short_seq_prob, cfg.pair_task, rng, ids
        )
    unit_starts = None
    if segmented:
        unit_starts = (tokens >> _UNIT_BIT).astype(bool)
        tokens = tokens & ((1 << _UNIT_BIT) - 1)
    masked = mask_rows(
        tokens,
        tables=tables,
        max_predictions=cfg.max_predictions,
        masked_lm_prob=cfg.masked_lm_prob,
        whole_word=cfg.whole_word_mask,
        rng=rng,
        unit_starts=unit_starts,
    )
    # The 0/1 and small columns stay int32: the serializer writes the same varints from any
    # integer type, and casting each (N, T) column to int64 cost a fifth of this function.
    rows = {
        "input_ids": masked["input_ids"],
        "input_mask": (tokens != ids.pad).astype(np.int32),
        "segment_ids": segments,
        "masked_lm_positions": masked["masked_lm_positions"],
        "masked_lm_ids": masked["masked_lm_ids"],
        "masked_lm_weights": masked["masked_lm_weights"],
        "next_sentence_labels": labels,
        "document_ids": document_ids,
    }
    if segmented:
        rows["word_starts"] = stored_starts(tokens, tables, unit_starts).astype(np.int64)
    return rows
