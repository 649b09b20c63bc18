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


def test_a_batchs_languages_reach_their_own_documents(botchan, zh_reviews):
    """FilterDocuments identifies a batch's languages on a thread of its own, ahead of the rules:
    each document must still get its own verdict. English, Chinese, a mixed document under
    --min_language_score and documents the rules fail, interleaved in an odd order, against the
    verdict of each alone."""
    from pipeline.config import CorpusConfig
    from pipeline.curation import quality
    from pipeline.curation.filter_documents import FilterDocuments

    words = botchan.read_text(encoding="utf-8").split()
    english = [" ".join(words[900 * n : 900 * n + 60 + 13 * n]) + "." for n in range(10)]
    reviews = (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n")
    chinese = ["\n".join(r.strip() for r in reviews[i : i + 3]) for i in range(0, 21, 3)]
    mixed = [english[2] + "\n" + chinese[1][:40], chinese[4] + "\n" + english[5][:200]]  # en 0.8, zh
    short = ["Too short to keep.", "{ a brace } and a few words, again and again."]
    docs = [d for group in zip(english, chinese + mixed[:1], strict=False) for d in group] + mixed + short
    docs = docs[5:] + docs[:5]
    cfg = CorpusConfig(input_patterns=("x",), output_dir="o", vocab_size=99, languages=("en",),
                       min_language_score=0.9, quality_filters=("gopher", "c4"),
                       filter_processes=0)  # in process: the thread this case is about  # fmt: skip
    thresholds = quality.Thresholds()

    def alone(text: str):
        code, score = language.identify(text)
        if code != "en" or score < 0.9:
            return ("language", "language" if code != "en" else "language_score")
        failed = quality.first_failure(text, cfg.quality_filters, thresholds)
        return ("quality", failed[0]) if failed else "kept"

    fn = FilterDocuments(cfg)
    fn.setup()
    try:
        found = {}
        for out in fn.process([(f"k{i}", text) for i, text in enumerate(docs)]):
            if getattr(out, "tag", None) == "removed":
                key, removal = out.value
                found[key] = (removal.stage, removal.reason)
            elif getattr(out, "tag", None) is None:
                found[out[0]] = "kept"
    finally:
        fn.teardown()
    expected = {f"k{i}": alone(text) for i, text in enumerate(docs)}
    assert found == expected
    verdicts = list(expected.values())
    assert {"kept", ("language", "language"), ("language", "language_score")} <= set(verdicts)
    assert any(v[0] == "quality" for v in verdicts if v != "kept")
