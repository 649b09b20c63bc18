"""--data as one corpus, a mixture or per-phase lengths (`launch/sources.py`): parsing, rates, and a
one-line error for every corpus that cannot train with the others. Corpora are real builds."""

from __future__ import annotations

import json

import pytest

from launch.optimizer import WarmupLinearDecay
from launch.sources import DataError, Phase, Source, parse_phases, parse_sources, resolve
from pipeline import build_corpus


def test_data_flags_parse_into_sources(tmp_path):
    assert parse_sources("out/corpus/") == [Source("corpus", "out/corpus")]
    # The weight follows the last ':' when it is a number; gs:// paths hold a ':' of their own.
    assert parse_sources("wiki=gs://b/wiki:3,code=out/code:0.5") == [
        Source("wiki", "gs://b/wiki", 3.0),
        Source("code", "out/code", 0.5),
    ]
    assert parse_sources("a=gs://b/x,b=y") == [Source("a", "gs://b/x"), Source("b", "y")]
    mixture = tmp_path / "mixture.json"
    mixture.write_text(
        json.dumps({"wiki": {"path": "gs://b/wiki/", "weight": 2}, "code": {"path": "c", "weight": 1}})
    )
    assert parse_sources(str(mixture)) == [Source("wiki", "gs://b/wiki", 2.0), Source("code", "c", 1.0)]
    mixture.write_text(json.dumps({"wiki": "w", "code": "c"}))
    assert parse_sources(str(mixture)) == [Source("wiki", "w"), Source("code", "c")]

    for bad, message in [
        ("a=x:3,b=y", r"^--data: weights for some corpora but not b; give all or none$"),
        ("a=x:0,b=y:1", r"^--data a: weight expected > 0, found 0.0$"),
        ("a=x,a=y", r"^--data: each corpus name at most once, found a, a$"),
        ("a=x,=y", r"^--data '=y': expected NAME=PATH\[:WEIGHT\]$"),
        ("a b=x,c=y", r"^--data: corpus name 'a b': letters, digits, '_', '.' and '-' only$"),
    ]:
        with pytest.raises(DataError, match=message):
            parse_sources(bad)
    mixture.write_text(json.dumps({"wiki": {"path": "w", "weight": "heavy"}}))
    with pytest.raises(DataError, match=r"mixture.json: wiki: weight expected a number, found 'heavy'$"):
        parse_sources(str(mixture))
    mixture.write_text("{")
    with pytest.raises(DataError, match=r"mixture.json: not valid JSON"):
        parse_sources(str(mixture))


def test_phases_split_the_run_on_the_log_interval():
    assert parse_phases(None, None, 1000, 100) == [Phase(None, 0, 1000)]
    assert parse_phases("128:0.9,512:0.1", None, 1000, 100) == [Phase(128, 0, 900), Phase(512, 900, 1000)]
    # 0.7 of 45 is 31.5: the boundary moves to the 5-step interval nearest it.
    assert parse_phases("32:0.7,64:0.3", "8,4", 45, 5) == [Phase(32, 0, 30, 8), Phase(64, 30, 45, 4)]
    for phases, sizes, message in [
        ("128:0.9,512:0.2", None, r"fractions sum to 1.1, expected 1"),
        ("128:0.95,512:0.05", None, r"phase 2 \(seq 512\) gets no steps once boundaries are rounded"),
        ("128,512", None, r"'128': expected SEQ_LEN:FRACTION"),
        ("128:0.5,128:0.5", None, r"each sequence length at most once"),
        ("128:0.5,512:0.5", "8", r"--phase_batch_sizes 8: expected 2 sizes >= 1, one per phase"),
        (None, "8,4", r"--phase_batch_sizes needs --phases"),
    ]:
        with pytest.raises(DataError, match=message):
            parse_phases(phases, sizes, 100, 10)


def test_restarted_warmup_starts_at_the_phase_and_ends_with_the_run():
    whole = WarmupLinearDecay(1.0, 10, 110)
    restarted = WarmupLinearDecay(1.0, 10, 110, warmup_start=50)
    lr = lambda schedule, step: float(schedule(step))  # noqa: E731
    assert lr(whole, 5) == pytest.approx(0.5) and lr(whole, 60) == pytest.approx(0.5)
    assert lr(restarted, 55) == pytest.approx(0.5)  # 5 updates into its own warmup
    assert lr(restarted, 60) == pytest.approx(1.0)
    assert lr(restarted, 85) == pytest.approx(0.5)  # half way from 60 to 110
    assert lr(restarted, 110) == pytest.approx(0.0)


@pytest.fixture(scope="module")
def corpora(mixture_corpora, python_docs, botchan_vocab):
    """conftest's two corpora at 33 and 45 tokens, and four that do not fit them: another vocab,
    other max_predictions, NSP pairs, segmenter units (a `word_starts` feature)."""
    library = python_docs / "library"
    common = ["--seq_len", "33,45", "--dupe_factor", "1", "--num_shards", "2", "--doc_per_file",
              "--validation_fraction", "0.2", "--input", str(library / "b*.rst.txt")]  # fmt: skip
    build_corpus.run(["--output", str(mixture_corpora / "own_vocab"), "--vocab_size", "300", *common])
    build_corpus.run(["--output", str(mixture_corpora / "more_masks"), "--vocab", str(botchan_vocab),
                      "--max_predictions", "9,11", *common])  # fmt: skip
    build_corpus.run(["--output", str(mixture_corpora / "pairs"), "--vocab", str(botchan_vocab),
                      "--mode", "segment_pair", "--nsp", *common])  # fmt: skip
    build_corpus.run(["--output", str(mixture_corpora / "segmented"), "--vocab", str(botchan_vocab),
                      "--whole_word_mask", "--word_segmenter", "jieba", *common])  # fmt: skip
    build_corpus.run(["--output", str(mixture_corpora / "whole_words"), "--vocab", str(botchan_vocab),
                      "--whole_word_mask", *common])  # fmt: skip
    build_corpus.run(["--output", str(mixture_corpora / "rate_20"), "--vocab", str(botchan_vocab),
                      "--masked_lm_prob", "0.2", "--max_predictions", "8,8", *common])  # fmt: skip
    return mixture_corpora


@pytest.mark.slow
def test_rates_come_from_weights_or_sizes(corpora):
    docs, more = str(corpora / "docs"), str(corpora / "more")
    weighted = resolve(parse_sources(f"docs={docs}:3,more={more}:1"), 33)
    assert weighted.rates == (0.75, 0.25)
    assert [m.folder for m in weighted.manifests] == [f"{docs}/seq33", f"{more}/seq33"]
    records = [m.split("train").instances for m in weighted.manifests]
    by_size = resolve(parse_sources(f"docs={docs},more={more}"), 45, temperature=1.0)
    sizes = [m.split("train").instances for m in by_size.manifests]
    assert by_size.rates == pytest.approx([s / sum(sizes) for s in sizes])
    flat = resolve(parse_sources(f"docs={docs},more={more}"), 33, temperature=1e6)
    assert flat.rates == pytest.approx([0.5, 0.5], abs=1e-4)
    described = weighted.describe(examples=1000)
    assert described["docs"]["expected_epochs"] == pytest.approx(750 / records[0])
    assert described["more"]["records"] == records[1]


@pytest.mark.slow
def test_a_corpus_that_does_not_fit_the_others_is_named(corpora, small_corpus):
    docs = corpora / "docs"
    for data, seq_len, message in [
        (f"docs={docs},other={corpora / 'own_vocab'}", 33,
         r"^--data other=.*own_vocab/seq33: vocab sha256 \w+, but docs has \w+; every corpus"),
        (f"docs={docs},other={corpora / 'more_masks'}", 45,
         r"^--data other=.*more_masks/seq45: max_predictions 11, but docs has 8;"),
        (f"docs={docs},pairs={corpora / 'pairs'}", 33,
         r"^--data pairs=.*pairs/seq33: pair task nsp, but docs has none;"),
        (f"docs={docs},units={corpora / 'segmented'}", 45,
         r"^--data units=.*segmented/seq45: features \[.*'word_starts'\], but docs has \[.*\];"),
        (f"docs={docs}/seq33,small={small_corpus}", None,
         r"^--data small=.*: seq_len 32, but docs has 33;"),
        (f"docs={docs},none={corpora / 'missing'}", 33, r"^--data none: .*missing: does not exist"),
        (f"docs={docs}", 64, r"^--data docs=.*: no seq64/ corpus \(found lengths 33, 45\); rebuild it with "
                             r"--seq_len 33,45,64$"),
        (f"docs={docs}/seq33", 45, r"seq_len 33, the phase needs 45"),
        (str(docs), None, r"^--data .*docs: a corpus at several lengths"),
    ]:  # fmt: skip
        with pytest.raises(DataError, match=message):
            resolve(parse_sources(data), seq_len)


@pytest.mark.slow
def test_dynamic_masking_needs_one_rule_for_the_mixture(corpora, tmp_path):
    from launch.config import TrainConfig
    from launch.prepare import TrainError, prepare

    def run(data: str, **overrides):
        config = TrainConfig(data=data, model_dir=str(tmp_path / "m"), strategy="cpu", global_batch_size=4,
                             phases="33:0.5,45:0.5", train_steps=20, log_every=5, checkpoint_every=5,
                             eval_every=5, dynamic_masking=True, **overrides)  # fmt: skip
        return prepare(config, None)

    docs = corpora / "docs"
    with pytest.raises(
        TrainError,
        match=r"^--dynamic_masking: words was built with whole_word_mask True, docs "
        r"with False; one mask rule serves the mixture",
    ):
        run(f"docs={docs},words={corpora / 'whole_words'}")
    with pytest.raises(
        TrainError,
        match=r"^--dynamic_masking: fast was built with masked_lm_prob 0.2, docs with "
        r"0.15; choose the rate with --dynamic_masked_lm_prob$",
    ):
        run(f"docs={docs},fast={corpora / 'rate_20'}")
    assert len(run(f"docs={docs},fast={corpora / 'rate_20'}", dynamic_masked_lm_prob=0.15).stages) == 2
    assert len(run(f"docs={docs},more={corpora / 'more'}").stages) == 2  # stored or dynamic: one rule
