"""Masking rules on tiny odd sizes (vocab 37, rows of 13) where a swapped axis would fail."""

import numpy as np
import pytest

from pipeline.masking import MaskingTables, mask_rows, word_ids

V = 37
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4


def tables(cjk=()) -> MaskingTables:
    is_special = np.zeros(V, bool)
    is_special[:5] = True
    starts_word = np.zeros(V, bool)
    starts_word[5:21] = True  # ids 5..20 are "▁word" pieces, 21..36 continuations
    starts_word[:5] = True
    is_cjk = np.zeros(V, bool)
    is_cjk[list(cjk)] = True
    return MaskingTables(is_special, starts_word, is_cjk, MASK, np.flatnonzero(~is_special).astype(np.int32))


def test_word_ids_group_continuations_and_split_cjk_pieces():
    row = np.array([[CLS, 5, 21, 22, 6, 30, 31, 32, SEP, 7, PAD, PAD, PAD]])
    assert word_ids(row, tables()).tolist() == [[0, 1, 1, 1, 2, 2, 2, 2, 3, 4, 5, 6, 7]]
    # 30 and 31 are CJK pieces: each is a word on its own, and so is what follows one.
    assert word_ids(row, tables(cjk=(30, 31))).tolist() == [[0, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]


def test_rate_one_masks_up_to_max_predictions_never_specials():
    rng = np.random.default_rng(0)
    rows = rng.integers(5, V, (11, 13))
    rows[:, 0], rows[:, -1] = CLS, SEP
    rows[3, 7:] = PAD
    # masked_lm_prob close to 1 forces the budget to max_predictions (5) whenever possible.
    out = mask_rows(rows, tables=tables(), max_predictions=5, masked_lm_prob=0.99, whole_word=False, rng=rng)
    assert out["masked_lm_positions"].shape == (11, 5)
    assert out["masked_lm_weights"].sum(axis=1).tolist() == [5.0] * 11
    for r in range(11):
        pos = out["masked_lm_positions"][r]
        assert np.all(np.diff(pos) > 0)  # sorted, distinct
        assert not np.isin(rows[r, pos], [PAD, CLS, SEP]).any()
        assert out["masked_lm_ids"][r].tolist() == rows[r, pos].tolist()
    unmasked = out["input_ids"].copy()
    np.put_along_axis(unmasked, out["masked_lm_positions"], out["masked_lm_ids"], axis=1)
    assert (unmasked == rows).all()
    untouched = np.ones_like(rows, bool)
    np.put_along_axis(untouched, out["masked_lm_positions"], False, axis=1)
    assert (out["input_ids"][untouched] == rows[untouched]).all()


def test_budget_is_rounded_share_of_candidates_and_padding_weights_zero():
    rng = np.random.default_rng(1)
    rows = np.full((2, 13), PAD)
    rows[0, :9] = [CLS, 5, 6, 7, 8, 9, 10, 11, SEP]  # 7 candidates * 0.3 = 2.1 -> 2
    rows[1, :3] = [CLS, SEP, PAD]  # no candidate at all -> nothing masked
    out = mask_rows(rows, tables=tables(), max_predictions=5, masked_lm_prob=0.3, whole_word=False, rng=rng)
    assert out["masked_lm_weights"].tolist() == [[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert out["masked_lm_positions"][:, 2:].sum() == 0 and out["masked_lm_ids"][:, 2:].sum() == 0
    assert (out["input_ids"][1] == rows[1]).all()


def test_eighty_ten_ten():
    rng = np.random.default_rng(2)
    rows = rng.integers(5, V, (4001, 13))
    out = mask_rows(rows, tables=tables(), max_predictions=3, masked_lm_prob=0.2, whole_word=False, rng=rng)
    valid = out["masked_lm_weights"] > 0
    shown = np.take_along_axis(out["input_ids"], out["masked_lm_positions"], axis=1)[valid]
    original = out["masked_lm_ids"][valid]
    n = valid.sum()
    mask_share = (shown == MASK).mean()
    kept_share = (shown == original).mean()
    random_share = 1 - mask_share - kept_share
    assert n > 7000
    assert mask_share == pytest.approx(0.8, abs=0.02)
    # A random replacement may draw the original token (1 in 32 here): it then counts as kept.
    assert kept_share == pytest.approx(0.1 + 0.1 / 32, abs=0.015)
    assert random_share == pytest.approx(0.1 - 0.1 / 32, abs=0.015)
    assert not np.isin(shown, [PAD, UNK, CLS, SEP]).any()


def test_whole_word_masks_every_piece_of_a_chosen_word():
    rng = np.random.default_rng(3)
    # Words of 1-3 pieces: a "▁" piece (5..20) followed by 0-2 continuations (21..36).
    rows = []
    for _ in range(301):
        row = [CLS]
        while len(row) < 12:
            row += [int(rng.integers(5, 21))] + rng.integers(21, V, int(rng.integers(0, 3))).tolist()
        rows.append(row[:12] + [SEP])
    rows = np.array(rows)
    t = tables()
    out = mask_rows(rows, tables=t, max_predictions=5, masked_lm_prob=0.4, whole_word=True, rng=rng)
    words = word_ids(rows, t)
    for r in range(len(rows)):
        chosen = set(out["masked_lm_positions"][r][out["masked_lm_weights"][r] > 0].tolist())
        assert 1 <= len(chosen) <= 5
        for w in np.unique(words[r]):
            members = set(np.flatnonzero(words[r] == w).tolist())
            assert members <= chosen or not (members & chosen), f"row {r} split word {w}"


def test_whole_word_that_overflows_leaves_the_row_unmasked_not_a_special():
    # One 3-piece word among [UNK]s: budget round(3 * 0.15) -> 1 < 3, so nothing fits. The greedy
    # pass must stop at the candidates, not go on to [CLS] / [UNK] / [SEP] words (it once did).
    rows = np.array([[CLS, UNK, 5, 21, 22, UNK, UNK, UNK, UNK, UNK, UNK, UNK, SEP]] * 9)
    for seed in range(5):
        out = mask_rows(
            rows, tables=tables(), max_predictions=4, masked_lm_prob=0.15, whole_word=True,
            rng=np.random.default_rng(seed),
        )  # fmt: skip
        assert out["masked_lm_weights"].sum() == 0
        assert (out["input_ids"] == rows).all()


def test_same_seed_same_masks():
    rows = np.random.default_rng(4).integers(5, V, (7, 13))
    a, b = (
        mask_rows(
            rows,
            tables=tables(),
            max_predictions=5,
            masked_lm_prob=0.15,
            whole_word=True,
            rng=np.random.default_rng(9),
        )  # fmt: skip
        for _ in range(2)
    )
    for name in a:
        assert (a[name] == b[name]).all()


def test_segmenter_units_keep_the_vocabs_continuations_and_end_at_row_structure():
    """stored_starts: the segmenter's starts AND the vocab's word marks; [CLS]/[SEP] end units."""
    from pipeline.masking import stored_starts

    # ids: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], 5 при, 6 ##вет, 7 中, 8 国, 9 人
    is_special = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], bool)
    starts_word = np.array([1, 1, 1, 1, 1, 1, 0, 1, 1, 1], bool)
    is_cjk = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1, 1], bool)
    tables = MaskingTables(is_special, starts_word, is_cjk, 4, np.arange(5, 10, dtype=np.int32), unk_id=1)
    tokens = np.array([[2, 5, 6, 7, 8, 1, 9, 3, 8, 9, 0]])
    # The segmenter cut привет into letters (при | ##вет) and 中国 | [UNK]人 ...
    segmenter = np.array([[1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0]], bool)
    got = stored_starts(tokens, tables, segmenter).astype(int).tolist()
    #   [CLS] при ##вет 中 国 [UNK] 人 [SEP] 国 人 [PAD]
    assert got == [[0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 0]]
