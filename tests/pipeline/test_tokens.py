"""The quality rules' tokens as arrays (`pipeline/curation/tokens.py`) against their definition,
`quality._TOKENS.findall`, and the word figures against a plain loop over its tokens."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipeline.curation import minhash, quality, tokens


def cut(text: str) -> list[str]:
    _, _, _, starts, ends = tokens.spans(text)
    return [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


@pytest.fixture(scope="module")
def real_texts(python_docs, zh_reviews, botchan) -> list[str]:
    texts = [path.read_text(encoding="utf-8") for path in sorted(python_docs.rglob("*.txt"))[::25]]
    texts += (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n")[:60]
    texts += [(zh_reviews / "neg.txt").read_text(encoding="utf-8")[:30_000]]  # reviews, one text
    texts.append(botchan.read_text(encoding="utf-8")[:50_000])
    return texts


def test_tokens_are_the_regular_expressions_on_real_text(real_texts):
    for text in real_texts:
        assert cut(text) == quality._TOKENS.findall(text)


def test_tokens_are_the_regular_expressions_on_every_character():
    """Every code point in runs of 7,001, and short strings drawn from the characters where the
    classes meet: CJK punctuation after and before ASCII punctuation, underscores, spaces of
    other scripts, characters past the BMP, a lone surrogate."""
    every = "".join(chr(c) for c in range(0x110000))
    for start in range(0, len(every), 7001):
        text = every[start : start + 7001]
        assert cut(text) == quality._TOKENS.findall(text), hex(start)
    rng = random.Random(5)
    pool = "a_Z9 \n!.・ー。中、゛K\u3000…«\u0301\U0001f600\U00020000\ud800"
    for _ in range(3000):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 23)))
        assert cut(text) == quality._TOKENS.findall(text), ascii(text)


def test_the_word_figures_are_a_loop_over_the_tokens(real_texts):
    """Per token: a word (not punctuation, not underscores only), with a letter, a stop word;
    equal tokens hash equal, different ones differ."""
    for text in real_texts + ["The _ __x__ THE and ÀND wİth K \u212a", ""]:
        words = quality._TOKENS.findall(text)
        got = tokens.tokenize(text, quality.STOP_WORDS)
        real = [w[0].isalnum() or (w[0] == "_" and bool(w.strip("_"))) for w in words]
        assert got.real.tolist() == real
        assert got.lengths.tolist() == list(map(len, words))
        pairs = list(zip(real, words, strict=True))
        assert got.alpha.tolist() == [r and any(map(str.isalpha, w)) for r, w in pairs]
        assert got.stop.tolist() == [r and w.lower() in quality.STOP_WORDS for r, w in pairs]
        distinct = dict(zip(got.hashes.tolist(), words, strict=True))
        assert len(distinct) == len(set(words))
        one_by_one = [tokens.tokenize(w, quality.STOP_WORDS).hashes[0] for w in words[:300]]
        assert np.array_equal(got.hashes[:300], one_by_one)  # a function of the token alone


def test_short_runs_hash_as_the_prefix_sums_hash_them():
    """`padded_run_hashes`, which the stop words use, gives what `run_hashes` gives each run, for
    runs of 0 to 6 values padded to 7, among values up to the largest code point."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 0x110000, size=401, dtype=np.uint32)
    lengths = rng.integers(0, 7, size=57)
    starts = rng.integers(0, values.size - 7, size=57)
    width = np.arange(7)[:, None]
    columns = np.where(width < lengths, values[starts + width], 0)
    expected = minhash.run_hashes(values, starts, starts + lengths)
    assert np.array_equal(minhash.padded_run_hashes(columns), expected)
    runs = {tuple(values[a : a + n]) for a, n in zip(starts, lengths, strict=True)}
    assert len(set(expected.tolist())) == len(runs)  # distinct runs, distinct hashes
