"""A vocab extended to cover a script its release lacks (issue 58): every character of Chinese text
used at least K times comes in (`--extend_min_count`), the limits are one-line errors, a threshold
nothing reaches adds nothing and says so, and the rows of tokens the release knows only as [UNK]
start as --extension_init says."""

from __future__ import annotations

import logging
import re
from collections import Counter

import numpy as np
import pytest

from common.errors import ConfigError
from launch.interop.grow import grown_rows
from pipeline import text
from pipeline.config import CorpusConfig
from pipeline.stages.train_vocab import _train_on_sample
from pipeline.vocab import VocabError, VocabFile
from pipeline.vocab.extension import extend_vocab

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def chinese(zh_sample) -> list[str]:
    reviews = (zh_sample / "pos.txt").read_text(encoding="utf-8")
    return text.document_sentences(text.normalize_line(reviews, Counter()))


@pytest.fixture(scope="module")
def english(botchan_wordpiece) -> VocabFile:
    return VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True)


def test_every_character_used_k_times_comes_in_and_no_rarer_one(english, chinese):
    k = 7
    counts = Counter(c for s in chinese for c in CJK.findall(s))
    extended = extend_vocab(english, chinese, 0, k)
    base, vocab = english.load(), extended.load()
    added = {a["token"] for a in extended.release["added"]}
    known = set(base.tokens)
    assert {c for c, n in counts.items() if n >= k} - known <= added  # the script, whole
    assert not {c for c, n in counts.items() if n < k} & added  # nothing rarer
    # The [unused] slots first (5 in this vocab), then appended ids, each a real token of the text.
    ids = sorted(a["id"] for a in extended.release["added"])
    slots = [i for i, t in enumerate(base.tokens) if t.startswith("[unused")]
    assert ids[: len(slots)] == slots and ids[len(slots) :] == list(range(base.size, vocab.size))
    unk = base.special_ids["unk"]
    assert all(a["pieces"] == [unk] for a in extended.release["added"] if CJK.fullmatch(a["token"]))
    # No character used k times is [UNK] any more; most of the rarer ones still are.
    frequent = sorted(c for c, n in counts.items() if n >= k)
    assert vocab.encode(frequent) == [[vocab.tokens.index(c)] for c in frequent]
    rare = sorted(c for c, n in counts.items() if n < k and c not in known)
    assert vocab.encode(rare) == [[unk]] * len(rare)


def test_a_limit_or_a_threshold_nothing_reaches(english, chinese, caplog):
    with pytest.raises(
        VocabError, match=r"--extend_min_count 3: [\d,]+ tokens .* more than --extend_vocab 10 allows"
    ):
        extend_vocab(english, chinese, 10, 3)
    with pytest.raises(VocabError, match=r"would hold [\d,]+ tokens .* more than the 1,073,741,824"):
        from pipeline.vocab import extension

        extension._ranked([(5, "a")] * 3, 0, 1, extension.MAX_TOKENS - 2)
    cfg = CorpusConfig(input_patterns=("x.txt",), output_dir="o", vocab="v.txt", extend_min_count=10**9)
    with caplog.at_level(logging.WARNING, logger="bertbeam.corpus"):
        kept = _train_on_sample([(0, s) for s in chinese], cfg, english)
    assert kept.data == english.data and kept.release["added"] == []  # the build goes on with it
    assert "nothing was added" in caplog.text and "used 1000000000 times" in caplog.text


@pytest.mark.parametrize("init", ["pieces", "mean", "random"])
def test_rows_the_release_knows_only_as_unk(init):
    rng = np.random.default_rng(0)
    rows, bias, unk = rng.standard_normal((11, 6)).astype(np.float32), rng.standard_normal(11), 3
    added = [{"id": 2, "token": "x", "pieces": [4, 5]}, {"id": 11, "token": "中", "pieces": [unk]},
             {"id": 12, "token": "文", "pieces": [unk]}]  # fmt: skip
    grown = grown_rows(rows, 13, added, init, unk, seed=5)
    np.testing.assert_allclose(grown[2], rows[[4, 5]].mean(0), rtol=1e-6)  # known pieces: their mean
    np.testing.assert_array_equal(np.delete(grown[:11], 2, axis=0), np.delete(rows, 2, axis=0))
    new = grown[11:]
    if init == "pieces":
        np.testing.assert_array_equal(new, [rows[unk], rows[unk]])
    elif init == "mean":
        np.testing.assert_allclose(new, [rows.mean(0)] * 2, rtol=1e-6)
    else:
        norm = np.linalg.norm(rows, axis=1).mean()
        np.testing.assert_allclose(np.linalg.norm(new, axis=1), [norm, norm], rtol=1e-5)
        assert np.abs(new[0] - new[1]).max() > 0.1 and np.abs(new - rows[unk]).max() > 0.1
        np.testing.assert_array_equal(new, grown_rows(rows, 13, added, init, unk, seed=5)[11:])
        assert np.abs(new - grown_rows(rows, 13, added, init, unk, seed=6)[11:]).max() > 0
    # The output bias (one value a row) takes the mean for either start but pieces.
    grown_bias = grown_rows(bias, 13, added, init, unk, seed=5)
    assert grown_bias[11] == pytest.approx(bias[unk] if init == "pieces" else bias.mean())


def test_embeddings_first_needs_the_warm_up():
    from launch.config import TrainConfig

    base = ["--data", "c", "--model_dir", "m", "--train_steps", "50", "--log_every", "10"]
    with pytest.raises(ConfigError, match="--warmup_embeddings .* needs --head_warmup_steps"):
        TrainConfig.from_args([*base, "--init_checkpoint", "hf:r", "--warmup_embeddings"])
    with pytest.raises(ConfigError, match="--extension_init"):
        TrainConfig.from_args([*base, "--extension_init", "zeros"])
    with pytest.raises(ConfigError, match="--extend_min_count: expected >= 0, found -2"):
        CorpusConfig(input_patterns=("x.txt",), output_dir="o", vocab="v.txt", extend_min_count=-2)
