"""Packing and pairing on tiny odd sizes with literal expectations."""

import numpy as np

from pipeline.config import CorpusConfig
from pipeline.instances import (
    SpecialIds,
    TokenizedDoc,
    build_pairs,
    create_instances,
    pack_full_sentences,
    truncated_lengths,
)
from pipeline.masking import MaskingTables

IDS = SpecialIds(pad=0, cls=2, sep=3)


def doc(key, *sentences):
    tokens = np.array([t for s in sentences for t in s], np.int32)
    return TokenizedDoc(key, tokens, np.array([len(s) for s in sentences], np.int32))


def test_full_sentences_packs_documents_back_to_back():
    docs = [doc(1, [10, 11, 12], [13]), doc(2, [20, 21]), doc(3, [30, 31, 32, 33, 34])]
    tokens, segments, document_ids = pack_full_sentences(docs, seq_len=7, ids=IDS)
    assert tokens.tolist() == [
        [2, 10, 11, 12, 13, 3, 20],
        [2, 21, 3, 30, 31, 32, 33],
        [2, 34, 3, 0, 0, 0, 0],
    ]
    assert document_ids.tolist() == [
        [1, 1, 1, 1, 1, 1, 2],
        [1, 1, 1, 2, 2, 2, 2],
        [1, 1, 1, 0, 0, 0, 0],
    ]
    assert segments.sum() == 0


def test_segment_pair_layout_and_lengths():
    rng = np.random.default_rng(0)
    docs = [doc(k, *[[10 * k + i] * 3 for i in range(5)]) for k in range(1, 4)]
    tokens, segments, document_ids, labels = build_pairs(
        docs, [0, 1, 2], seq_len=11, short_seq_prob=0.0, task="nsp", rng=rng, ids=IDS
    )
    assert tokens.shape == (len(labels), 11)
    for row, seg in zip(tokens, segments, strict=True):
        real = row[row != 0]
        seps = np.flatnonzero(real == 3)
        assert real[0] == 2 and len(seps) == 2 and seps[1] == len(real) - 1
        # Segment 0 covers [CLS] A [SEP]; segment 1 covers B [SEP]; padding is 0.
        assert seg[: seps[0] + 1].sum() == 0 and (seg[seps[0] + 1 : len(real)] == 1).all()
        assert seg[len(real) :].sum() == 0
        assert seps[0] >= 2 and seps[1] - seps[0] >= 2  # both segments non-empty
    assert (document_ids == (tokens != 0)).all()


def test_nsp_random_next_comes_from_another_document():
    rng = np.random.default_rng(1)
    docs = [doc(k, *[[10 * k + i] for i in range(6)]) for k in range(1, 5)]
    tokens, _, _, labels = build_pairs(
        docs, [0, 1, 2, 3], seq_len=9, short_seq_prob=0.0, task="nsp", rng=rng, ids=IDS
    )
    assert 0 < labels.sum() < len(labels)
    for row, label in zip(tokens, labels[:, 0], strict=True):
        real = row[row != 0]
        sep = np.flatnonzero(real == 3)[0]
        a_docs = {t // 10 for t in real[1:sep]}
        b_docs = {t // 10 for t in real[sep + 1 : -1]}
        if label == 1:
            assert a_docs.isdisjoint(b_docs)
        else:
            assert a_docs == b_docs
            assert max(real[1:sep]) < min(real[sep + 1 : -1])  # B follows A


def test_sop_label_one_means_swapped():
    rng = np.random.default_rng(2)
    docs = [doc(1, *[[10 + i] for i in range(40)])]
    tokens, _, _, labels = build_pairs(docs, [0], seq_len=9, short_seq_prob=0.0, task="sop", rng=rng, ids=IDS)
    assert 0 < labels.sum() < len(labels)
    for row, label in zip(tokens, labels[:, 0], strict=True):
        real = row[row != 0]
        sep = np.flatnonzero(real == 3)[0]
        in_order = max(real[1:sep]) < min(real[sep + 1 : -1])
        assert in_order == (label == 0)


def test_long_pairs_are_truncated_to_fit():
    rng = np.random.default_rng(3)
    docs = [doc(1, list(range(100, 150)), list(range(200, 260)))]
    tokens, _, _, _ = build_pairs(docs, [0], seq_len=13, short_seq_prob=0.0, task="sop", rng=rng, ids=IDS)
    assert tokens.shape[1] == 13
    assert ((tokens != 0).sum(axis=1) == 13).all()


def test_create_instances_returns_every_schema_feature_with_static_shapes():
    from pipeline.schema import feature_lengths, features

    is_special = np.zeros(37, bool)
    is_special[:5] = True
    tables = MaskingTables(
        is_special, np.ones(37, bool), np.zeros(37, bool), 4, np.arange(5, 37, dtype=np.int32)
    )
    cfg = CorpusConfig(input_patterns=("x",), output_dir="o", vocab_size=37, seq_len=7, max_predictions=5)
    docs = [doc(k, list(range(5 + k, 5 + k + 9))) for k in range(3)]
    rows = create_instances(docs, cfg=cfg, tables=tables, ids=IDS, rng=np.random.default_rng(0))
    assert set(rows) == {f.name for f in features()}  # no segmenter: no word_starts
    for name, length in feature_lengths(7, 5).items():
        assert rows[name].shape == (len(rows["input_ids"]), length)
    assert (rows["input_mask"] == (rows["document_ids"] > 0)).all()


def test_a_tenth_of_pair_rows_are_short_however_long_the_documents():
    """short_seq_prob is drawn per row (packing version 2): over many long documents about a tenth
    of the rows aim short. google-research/bert draws once per document, so a long document that
    draws short cuts all its text into short rows (about 18 % of rows here, and far from it on any
    one seed)."""
    max_tokens, shares, fills = 61, [], []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        docs = [doc(k, *[[100 + k] * 7] * 300) for k in range(20)]  # 2,100 tokens each
        tokens, _, _, labels = build_pairs(
            docs, list(range(20)), seq_len=max_tokens + 3, short_seq_prob=0.1, task="sop", rng=rng, ids=IDS
        )
        real = (tokens != 0).sum(axis=1)
        shares.append(np.mean(real < 0.85 * (max_tokens + 3)))
        fills.append(real.mean() / (max_tokens + 3))
    assert 0.06 < np.mean(shares) < 0.13, shares
    assert np.mean(fills) > 0.9, fills


def test_truncation_keeps_what_berts_token_at_a_time_loop_keeps():
    """The closed form against google-research/bert's truncate_seq_pair, run literally (one token
    at a time from the longer segment, B when equal) on every pair of lengths up to 40."""

    def bert(a_len, b_len, max_tokens):
        while a_len + b_len > max_tokens:
            if a_len > b_len:
                a_len -= 1
            else:
                b_len -= 1
        return a_len, b_len

    a_len, b_len = (v.ravel() for v in np.meshgrid(np.arange(1, 41), np.arange(1, 41)))
    for max_tokens in (2, 3, 17, 24, 61):
        kept = np.stack(truncated_lengths(a_len, b_len, max_tokens), axis=1).tolist()
        assert kept == [list(bert(a, b, max_tokens)) for a, b in zip(a_len, b_len, strict=True)]


def test_a_truncated_segment_loses_tokens_from_both_ends():
    """Each removed token comes off the front or the back at random. A 15-token A before a
    200-token B, 20 tokens of room: B keeps 10, and over many rows its front loses about half of
    the 190 it gives up (always 0 or always 190 if one end were favoured)."""
    rng = np.random.default_rng(4)
    docs = [doc(1, list(range(1000, 1015)), list(range(2000, 2200)))]
    fronts = []
    for _ in range(40):
        tokens, _, _, _ = build_pairs(docs, [0], seq_len=23, short_seq_prob=0.0, task="nsp", rng=rng, ids=IDS)
        seps = np.flatnonzero(tokens[0] == 3)
        a, b = tokens[0, 1 : seps[0]], tokens[0, seps[0] + 1 : seps[1]]
        assert len(a) == 10 and len(b) == 10 and (a >= 1000).all() and (a < 1015).all()
        assert (np.diff(b) == 1).all()  # one contiguous stretch of B
        fronts.append((b[0] - 2000) / 190)
    assert 0.4 < np.mean(fronts) < 0.6, fronts
