"""Quality rules on real text: a good Botchan passage passes every rule, and each planted bad
version of it fails the rule it was made to fail, first; CJK text is measured in characters."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest

from pipeline.curation import quality, tokens

ALL = ("gopher", "c4")


@pytest.fixture(scope="module")
def lines(botchan) -> list[str]:
    """Sentences of a 400-word Botchan passage, one per line (22 of them)."""
    words = botchan.read_text(encoding="utf-8").split()
    return re.split(r"(?<=[.!?])\s+", " ".join(words[3000:3400]))


def planted(lines: list[str]) -> dict[str, str]:
    """Rule -> the passage changed so that it fails that rule."""
    text = "\n".join(lines)
    return {
        "gopher_duplicate_lines": "\n".join(lines[:12] + lines[:8]),
        "gopher_top_2gram": "\n".join(line + " very well, very well, very well." for line in lines),
        "gopher_word_count": "\n".join(lines[:3]),  # 45 words
        "gopher_mean_word_length": "\n".join(" ".join(w[:2] for w in line.split()) + "." for line in lines),
        "gopher_hash_ratio": "\n".join(" ".join("#" + w for w in line.split()) for line in lines),
        "gopher_bullet_lines": "\n".join("• " + line for line in lines),
        "gopher_ellipsis_lines": "\n".join(line.rstrip(".!?") + "..." for line in lines),
        "gopher_alpha_words": "\n".join(
            " ".join("20247" if i % 2 else w for i, w in enumerate(line.split())) for line in lines
        ),
        "gopher_stop_words": "\n".join(
            re.sub(r"\b(the|be|to|of|and|that|have|with)\b", "so", line, flags=re.I) for line in lines
        ),
        "c4_lorem_ipsum": text + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
        "c4_curly_brace": text + '\nThe setting is {"a": 1} in that file.',
        "c4_too_few_sentences": "\n".join(line.rstrip(".!?") for line in lines),
    }


def test_a_good_passage_passes_every_rule(lines):
    assert quality.first_failure("\n".join(lines), ALL, quality.Thresholds()) is None


def test_each_planted_document_fails_its_own_rule_first(lines):
    for rule, text in planted(lines).items():
        failed = quality.first_failure(text, ALL, quality.Thresholds())
        assert failed is not None and failed[0] == rule, (rule, failed)
        family = rule.split("_", 1)[0]
        other = tuple(f for f in ALL if f != family)
        # Three sentences, or lines ending in "...": C4 keeps no such line, so it would remove these too
        if rule not in ("gopher_word_count", "gopher_ellipsis_lines"):
            assert quality.first_failure(text, other, quality.Thresholds()) is None, rule


def test_thresholds_move_the_line(lines):
    short = "\n".join(lines[:3])  # 45 words
    assert quality.first_failure(short, ("gopher",), quality.Thresholds())[0] == "gopher_word_count"
    lowered = quality.Thresholds.parse("gopher_min_words=40")
    assert lowered.gopher_min_words == 40 and lowered.gopher_max_words == 100_000
    assert quality.first_failure(short, ("gopher",), lowered) is None


def test_thresholds_from_a_json_file_and_mistakes_named(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"c4_min_sentences": 2, "gopher_max_hash_ratio": 0.5}))
    read = lambda p: open(p, "rb").read()  # noqa: E731
    parsed = quality.Thresholds.parse(str(path), read)
    assert (parsed.c4_min_sentences, parsed.gopher_max_hash_ratio) == (2, 0.5)
    with pytest.raises(ValueError, match="unknown threshold 'gopher_min_wrds'"):
        quality.Thresholds.parse("gopher_min_wrds=3")
    with pytest.raises(ValueError, match="c4_min_sentences: expected a number, found 'many'"):
        quality.Thresholds.parse("c4_min_sentences=many")
    with pytest.raises(ValueError, match="missing.json: not a readable JSON object"):
        quality.Thresholds.parse(str(tmp_path / "missing.json"), read)


def test_cjk_text_is_measured_in_characters(zh_reviews):
    reviews = [r.strip() for r in (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n")]
    ended = [r.replace("\n", "") for r in reviews if r.endswith("。") and len(r) > 30][:40]
    text = "\n".join(ended)
    assert quality.is_cjk_document(text) and not quality.is_cjk_document("\n".join(["plain English."] * 3))
    # No English stop words and "words" of one character: Gopher's English rules stay out of it.
    assert quality.first_failure(text, ALL, quality.Thresholds()) is None
    measured = dict(
        (rule, value) for rule, value, _ in quality.gopher_quality(text, True, quality.Thresholds())
    )
    chars = len(re.findall(r"[\u4e00-\u9fff]", text))
    assert chars <= measured["gopher_word_count"] < chars + 200  # CJK characters, and the odd Latin word
    assert "gopher_stop_words" not in measured and "gopher_mean_word_length" not in measured
    brief = ended[0][:40] + "。"  # 41 characters
    assert quality.first_failure(brief, ("gopher",), quality.Thresholds())[0] == "gopher_word_count"


def reference_duplicate_chars(words: list[str], n: int) -> int:
    """Gopher's duplicated n-gram characters, written the plain way (datatrove's loop over word
    tuples): scanning left to right, a repeat counts its characters and is jumped past."""
    seen, total, i = set(), 0, 0
    while i + n <= len(words):
        gram = tuple(words[i : i + n])
        if gram in seen:
            total, i = total + sum(map(len, gram)), i + n
        else:
            seen.add(gram)
            i += 1
    return total


def ngrams(words: list[str]) -> quality._NGrams:
    """The n-gram counter over these tokens: joined by spaces, `findall` cuts them back out."""
    text = " ".join(words)
    assert quality._TOKENS.findall(text) == words
    return quality._NGrams(tokens.tokenize(text, quality.STOP_WORDS))


def test_ngram_repetition_matches_the_plain_scan(botchan):
    # Real prose, then the same with runs of it repeated at odd offsets, so the scan has repeats
    # that overlap, jump into each other and start mid-run.
    words = quality._TOKENS.findall(" ".join(botchan.read_text(encoding="utf-8").split()[7000:7611]))
    repeated = words[:97] + words[40:113] + words[:23] + words[5:61] + words[200:]
    for text_words in (words, repeated):
        exact = {n: reference_duplicate_chars(text_words, n) for n in range(5, 11)}
        grams = ngrams(text_words)
        assert [grams.duplicate_chars(n, enough=0) for n in exact] == list(exact.values())  # the scan
        # Below the limit a bound may stand for the figure (a shorter n-gram's repeats for the
        # longer ones); the rule's decision is the exact figure's at every limit.
        for limit in sorted({0, 1, *exact.values(), *(v + 1 for v in exact.values()), 10**9}):
            grams = ngrams(text_words)
            for n in exact:
                figure = grams.duplicate_chars(n, enough=limit)
                assert figure >= exact[n] and (figure <= limit) == (exact[n] <= limit), (n, limit)
    assert reference_duplicate_chars(repeated, 10) > reference_duplicate_chars(words, 5)  # repeats planted


def test_repeats_are_the_positions_seen_before():
    """`_repeats` against a plain loop, on values that collide in their top 16 bits (its filter)
    and some that repeat, in odd orders."""
    rng = np.random.default_rng(7)
    for size in (0, 1, 2, 37, 1_001):
        for distinct in (1, 3, 50, 10**6):
            low = rng.integers(0, distinct, size=size, dtype=np.uint64)
            values = (low % np.uint64(5)) << np.uint64(48) | low  # few top-bit groups, shared widely
            seen, plain = set(), []
            for value in values.tolist():
                plain.append(value in seen)
                seen.add(value)
            assert quality._repeats(values).tolist() == plain, (size, distinct)


@pytest.fixture(scope="module")
def documents(python_docs, botchan, lines) -> list[str]:
    """Real documents of every shape the rules meet: Python docs files (blank lines, markup,
    repeated lines), Botchan passages, and the planted bad passages."""
    files = sorted(python_docs.rglob("*.txt"))[::7]
    words = botchan.read_text(encoding="utf-8").split()
    passages = [" ".join(words[i : i + 37 + i % 500]) for i in range(0, 60_000, 1_500)]
    return [path.read_text(encoding="utf-8") for path in files] + passages + list(planted(lines).values())


def reference_word_figures(text: str) -> dict[str, float]:
    """Gopher's word figures the plain way, token by token (the counted rewrite must agree)."""
    words = quality._TOKENS.findall(text)
    real = [w for w in words if w[0].isalnum() or (w[0] == "_" and w.strip("_"))]
    figures = {
        "gopher_word_count": len(real),
        "gopher_alpha_words": sum(any(c.isalpha() for c in w) for w in real) / max(len(words), 1),
        "gopher_stop_words": sum(w.lower() in quality.STOP_WORDS for w in words),
    }
    if real:
        figures["gopher_mean_word_length"] = sum(map(len, real)) / len(real)
    return figures


def reference_top_chars(words: list[str], n: int) -> int:
    """Characters of the most frequent n-gram's occurrences (the first such on a tie), spaces in."""
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0
    gram, count = Counter(grams).most_common(1)[0]
    return (sum(map(len, gram)) + n - 1) * count


def test_the_fast_figures_are_the_plain_definitions(documents):
    """Each figure computed the fast way (distinct tokens counted once, n-gram counts from a
    sort, C4 stopping once enough sentences are in) equals its plain definition on real text."""
    thresholds = quality.Thresholds()
    for text in documents:
        measured = {rule: value for rule, value, _ in quality.gopher_quality(text, False, thresholds)}
        assert {rule: measured[rule] for rule in reference_word_figures(text)} == reference_word_figures(text)
        words = quality._TOKENS.findall(text)
        grams = quality._NGrams(tokens.tokenize(text, quality.STOP_WORDS))
        exact = {n: reference_top_chars(words, n) for n in (2, 3, 4)}
        assert {n: grams.top_chars(n) for n in exact} == exact
        # Below the limit a bound from bucket counts may stand for the figure; the decision is
        # the exact figure's at every limit, and a figure at or above the limit is exact.
        for n, figure in exact.items():
            for limit in (1, figure - 1, figure, figure + 1, len(text) * 0.2):
                bounded = grams.top_chars(n, enough=limit)
                assert bounded >= figure and (bounded <= limit) == (figure <= limit), (n, limit)
                assert bounded < limit or bounded == figure, (n, limit)
        *_, (rule, counted, _) = quality.c4(text, False, quality.Thresholds(c4_min_sentences=10**9))
        for least in (1, 3, 5, 8):  # the decision and the figure of a failure: the whole count's
            *_, (last, figure, passes) = quality.c4(text, False, quality.Thresholds(c4_min_sentences=least))
            if rule == last == "c4_too_few_sentences":
                assert passes == (counted >= least) and (passes or figure == counted)
