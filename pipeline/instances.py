"""Turning tokenized documents into padded rows: packing (full_sentences) and A/B pairs
(segment_pair with NSP or SOP), then masking. Pure numpy; one call per packing group and dupe.

Row layout, as google-research/bert:
  full_sentences  [CLS] doc1 ... [SEP] doc2 ... [SEP] doc3 ...   segment 0, document_ids 1, 2, 3
  segment_pair    [CLS] A ... [SEP] B ... [SEP]                  segment 0 for A, 1 for B
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.config import CorpusConfig
from pipeline.masking import MaskingTables, mask_rows, stored_starts

# How segment_pair rows are cut, recorded in the manifest (`packing_version`):
#   1  google-research/bert's create_instances_from_document: the short target drawn per document
#   2  the short target drawn per row (`_doc_pairs`): fuller rows, a tenth of them short
PACKING_VERSION = 2

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


def _trim(segment: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    front = int(rng.binomial(k, 0.5))  # each removed token from the front or the back at random
    return segment[front : len(segment) - (k - front)]


def _truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int, rng: np.random.Generator):
    """Trim the longer segment until the pair fits (as BERT's truncate_seq_pair, k at a time)."""
    while (excess := len(a) + len(b) - max_tokens) > 0:
        if len(a) > len(b):
            a = _trim(a, min(excess, len(a) - len(b)), rng)
        else:
            b = _trim(b, min(excess, max(1, len(b) - len(a))), rng)
    return a, b


def _short_target(max_tokens: int, short_seq_prob: float, rng: np.random.Generator) -> int:
    """A row's target length: max_tokens, or with short_seq_prob a uniform length in [2, max]."""
    if rng.random() < short_seq_prob:
        return int(rng.integers(2, max_tokens + 1))
    return max_tokens


def _doc_pairs(doc_index, docs, sentences_of, max_tokens, short_seq_prob, task, rng):
    """google-research/bert's create_instances_from_document, for one document, but for when the
    short target is drawn (PACKING_VERSION 2): per row, not once per document.

    google-research/bert draws it once per document, so a long document that draws a short target
    cuts all its text into short rows: with 10 % of documents short, far more than 10 % of rows
    are, and the fill of a corpus of long documents swings by several points with the seed (the
    Python docs at 128: 82-92 % real tokens per packing group). Drawn per row, a tenth of the rows
    are short, as short_seq_prob says. Everything else is as google-research/bert: chunks of whole
    sentences up to the target, A a random prefix of the chunk, B the rest or (NSP, half the
    time, always for a one-sentence chunk) a random other document's text from a random sentence,
    the unused sentences given back; SOP swaps A and B half the time.

    `sentences_of(i)`: document i's non-empty sentences, split once per group, and their lengths.
    """
    sentences, lengths = sentences_of(doc_index)
    pairs = []
    target = _short_target(max_tokens, short_seq_prob, rng)
    start, length, i = 0, 0, 0
    while i < len(sentences):
        length += lengths[i]
        if i == len(sentences) - 1 or length >= target:
            chunk = sentences[start : i + 1]
            a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            a = np.concatenate(chunk[:a_end])
            label = 0
            if task == "nsp" and len(docs) > 1 and (len(chunk) == 1 or rng.random() < 0.5):
                # B from a random other document of the group; give back the unused sentences.
                label = 1
                other = int(rng.integers(0, len(docs) - 1))
                other += other >= doc_index
                other_sentences, other_lengths = sentences_of(other)
                first = int(rng.integers(0, len(other_sentences)))
                need = max(1, target - len(a))
                end, got = first, 0
                while end < len(other_sentences) and got < need:  # only what B can hold
                    got += other_lengths[end]
                    end += 1
                b = np.concatenate(other_sentences[first:end])[:need]
                i -= len(chunk) - a_end
            elif len(chunk) >= 2:
                b = np.concatenate(chunk[a_end:])
            else:
                # One sentence: split it so that both segments exist.
                if len(a) < 2:
                    start, length, i = i + 1, 0, i + 1
                    target = _short_target(max_tokens, short_seq_prob, rng)
                    continue
                cut = int(rng.integers(1, len(a)))
                a, b = a[:cut], a[cut:]
            if task == "sop" and rng.random() < 0.5:
                a, b, label = b, a, 1
            a, b = _truncate_pair(a, b, max_tokens, rng)
            pairs.append((a, b, label))
            start, length = i + 1, 0
            target = _short_target(max_tokens, short_seq_prob, rng)
        i += 1
    return pairs


def build_pairs(docs, order, seq_len, short_seq_prob, task, rng, ids: SpecialIds):
    """A/B rows for every document in `order`; returns (tokens, segment_ids, document_ids, labels)."""
    split: dict[int, tuple[list[np.ndarray], list[int]]] = {}

    def sentences_of(i: int) -> tuple[list[np.ndarray], list[int]]:
        if i not in split:
            sentences = docs[i].sentences()
            split[i] = sentences, [len(s) for s in sentences]
        return split[i]

    pairs = [
        pair
        for doc_index in order
        for pair in _doc_pairs(doc_index, docs, sentences_of, seq_len - 3, short_seq_prob, task, rng)
    ]
    n = len(pairs)
    tokens = np.full((n, seq_len), ids.pad, np.int32)
    segments = np.zeros((n, seq_len), np.int32)
    labels = np.zeros((n, 1), np.int32)
    for r, (a, b, label) in enumerate(pairs):
        la, lb = len(a), len(b)
        tokens[r, 0] = ids.cls
        tokens[r, 1 : 1 + la] = a
        tokens[r, 1 + la] = ids.sep
        tokens[r, 2 + la : 2 + la + lb] = b
        tokens[r, 2 + la + lb] = ids.sep
        segments[r, 2 + la : 3 + la + lb] = 1
        labels[r, 0] = label
    document_ids = (tokens != ids.pad).astype(np.int32)
    return tokens, segments, document_ids, labels


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
    rows = {
        "input_ids": masked["input_ids"],
        "input_mask": (tokens != ids.pad).astype(np.int64),
        "segment_ids": segments.astype(np.int64),
        "masked_lm_positions": masked["masked_lm_positions"],
        "masked_lm_ids": masked["masked_lm_ids"],
        "masked_lm_weights": masked["masked_lm_weights"],
        "next_sentence_labels": labels.astype(np.int64),
        "document_ids": document_ids.astype(np.int64),
    }
    if segmented:
        rows["word_starts"] = stored_starts(tokens, tables, unit_starts).astype(np.int64)
    return rows
