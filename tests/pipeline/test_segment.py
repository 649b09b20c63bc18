"""Masking units from a segmenter's words and the tokens' character spans (pipeline/segment.py)."""

import hashlib

import numpy as np
import pytest

from pipeline import segment


def starts(sentence, words, spans):
    owner = segment.char_words([sentence], [words])
    return segment.unit_starts(owner, np.array(spans).reshape(-1, 2)).tolist()


def test_tokens_inside_one_word_share_its_unit():
    # 中国 | 人民 | 很 | 好, one token per character.
    spans = [(i, i + 1) for i in range(6)]
    assert starts("中国人民很好", ["中国", "人民", "很", "好"], spans) == [
        True,
        False,
        True,
        False,
        True,
        True,
    ]


def test_a_piece_across_two_words_joins_them():
    # sentencepiece's 国人 crosses 中国 | 人民: one unit 中国人民.
    spans = [(0, 1), (1, 3), (3, 4), (4, 5), (5, 6)]
    assert starts("中国人民很好", ["中国", "人民", "很", "好"], spans) == [True, False, False, True, True]


def test_a_token_covering_no_word_is_a_unit_of_its_own():
    # A segmenter that drops spaces; sentencepiece's dummy "▁" (empty span) and a "▁" on the space.
    spans = [(0, 0), (0, 2), (2, 3), (3, 5), (5, 6)]
    assert starts("ab cde", ["ab", "cde"], spans) == [True, True, True, True, False]


def test_a_span_with_uncovered_edges_takes_the_words_inside():
    # The token " cd" starts on an uncovered space, but touches cde, which "e" continues.
    spans = [(0, 2), (2, 5), (5, 6)]
    assert starts("ab cde", ["ab", "cde"], spans) == [True, True, False]


def test_words_the_segmenter_changed_cover_nothing():
    assert segment.char_words(["abc"], [["X", "bc"]]).tolist() == [-1, 0, 0]


def test_words_are_numbered_across_sentences():
    owner = segment.char_words(["你好", "世界 再见"], [["你好"], ["世界", "再见"]])
    assert owner.tolist() == [0, 0, 1, 1, -1, 2, 2]
    # The second sentence's first token begins a unit, whatever the words.
    spans = np.array([(0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7)])
    assert segment.unit_starts(owner, spans).tolist() == [True, False, True, False, True, False]


def test_describe_and_load():
    assert segment.load("none") is None and segment.describe("none") == {}
    cut = segment.load("jieba")
    assert cut("我爱北京天安门") == ["我", "爱", "北京", "天安门"]
    with_dict = segment.load("jieba", "北京天安门 100000\n".encode())
    assert with_dict("我爱北京天安门") == ["我", "爱", "北京天安门"]
    assert cut("我爱北京天安门") == ["我", "爱", "北京", "天安门"]  # the user dictionary stays its own
    assert segment.describe("jieba", b"x")["dictionary_sha256"] == hashlib.sha256(b"x").hexdigest()
    with pytest.raises(segment.SegmenterError, match="expected none, jieba or MODULE:FUNCTION"):
        segment.load("jieba2")
