"""Language identification on real documents: English, Chinese, and mixed ones as documented (the
language of the larger part, with the share of it as the score)."""

from __future__ import annotations

import pytest

from pipeline.curation import language


@pytest.fixture(scope="module")
def english(botchan) -> str:
    return " ".join(botchan.read_text(encoding="utf-8").split()[5000:5120])


@pytest.fixture(scope="module")
def chinese(zh_reviews) -> str:
    reviews = (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n")
    return "\n".join(r.strip() for r in reviews[:8])


def test_english_and_chinese_are_told_apart(english, chinese):
    en, en_score = language.identify(english)
    zh, zh_score = language.identify(chinese)
    assert (en, zh) == ("en", "zh")
    assert en_score > 0.9 and zh_score > 0.8


def test_a_mixed_document_goes_to_its_larger_part_with_a_lower_score(english, chinese):
    mostly_english = english + "\n" + chinese[:60]
    code, score = language.identify(mostly_english)
    assert code == "en" and 0.5 < score < language.identify(english)[1]
    code, score = language.identify(chinese + "\n" + english)  # 3,643 bytes of Chinese, 626 of English
    assert code == "zh" and 0.5 < score < language.identify(chinese)[1] - 0.1


def test_what_cld2_cannot_place_is_unknown_and_never_an_error():
    assert language.identify("12345 67890") == ("un", 0.0)
    assert language.identify("") == ("un", 0.0)
    code, _ = language.identify(
        "control \x01\x02 characters in an otherwise English sentence about the weather"
    )
    assert code == "en"
