"""Several sequence lengths from one build (`--seq_len 32,64`), and masking rates up to 0.4 with
max_predictions derived from them. Real DirectRunner builds on the Python docs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.errors import ConfigError
from pipeline.config import CorpusConfig, derived_max_predictions, per_length
from pipeline.schema import ManifestError, corpus_lengths, read_manifest
from tests.conftest import build, read_records, unmasked


def test_max_predictions_derives_from_the_rate_as_bert_s():
    assert derived_max_predictions(128, 0.15) == 20  # BERT's own pair of figures
    assert derived_max_predictions(512, 0.15) == 80
    assert derived_max_predictions(128, 0.3) == 40
    assert derived_max_predictions(37, 0.2) == 8  # 7.4 -> a multiple of 4 above it

    def config(**overrides) -> CorpusConfig:
        return CorpusConfig(input_patterns=("x",), output_dir="o", vocab_size=50, **overrides)

    assert config(seq_len=512).max_predictions == 80
    assert config(seq_len=128, masked_lm_prob=0.4).max_predictions == 52
    assert config(seq_len=128, max_predictions=7).max_predictions == 7  # given: kept
    with pytest.raises(ConfigError, match=r"^--masked_lm_prob: expected in \(0, 0.4\], found 0.45$"):
        config(masked_lm_prob=0.45)


def test_one_command_line_gives_one_config_per_length():
    from pipeline import build_corpus

    cfgs, _ = build_corpus.parse_args(["--input", "a", "--output", "out/c/", "--vocab_size", "50",
                                       "--seq_len", "128,512", "--masked_lm_prob", "0.2"])  # fmt: skip
    assert [(c.seq_len, c.max_predictions, c.output_dir) for c in cfgs] == [
        (128, 28, "out/c/seq128"),
        (512, 104, "out/c/seq512"),
    ]
    [one], _ = build_corpus.parse_args(["--input", "a", "--output", "o", "--vocab_size", "50"])
    assert (one.seq_len, one.max_predictions, one.output_dir) == (128, 20, "o")
    base = {"input_patterns": ("a",), "output_dir": "o", "vocab_size": 50}
    with pytest.raises(ConfigError, match=r"^--max_predictions: 1 values for 2 --seq_len values"):
        per_length({**base, "seq_len": (128, 512), "max_predictions": (20,)})
    with pytest.raises(ConfigError, match=r"^--seq_len 128,128: each length at most once"):
        per_length({**base, "seq_len": (128, 128)})
    with pytest.raises(ConfigError, match=r"argument --seq_len: invalid _ints value: '128,x'"):
        build_corpus.parse_args(["--input", "a", "--output", "o", "--vocab_size", "50", "--seq_len", "128,x"])


@pytest.fixture(scope="module")
def two_lengths(python_docs, botchan_vocab, tmp_path_factory):
    """The same documents built at 33 and 61 tokens in one run, and at 61 alone."""
    root = tmp_path_factory.mktemp("lengths")
    common = ["--input", str(python_docs / "library" / "c*.rst.txt"), "--doc_per_file",
              "--vocab", str(botchan_vocab), "--dupe_factor", "2", "--validation_fraction", "0.2",
              "--num_shards", "3", "--masked_lm_prob", "0.3"]  # fmt: skip
    from pipeline import build_corpus

    build_corpus.run(["--output", str(root / "both"), "--seq_len", "33,61", *common])
    alone = build(root / "alone", "--seq_len", "61", *common)
    return root / "both", root / "alone", alone


@pytest.mark.slow
def test_each_length_is_a_complete_corpus_over_the_same_documents(two_lengths):
    both, alone_folder, alone = two_lengths
    assert corpus_lengths(str(both)) == [33, 61]
    short, long = (read_manifest(str(both / f"seq{n}")) for n in (33, 61))
    assert (short.seq_len, short.max_predictions, long.seq_len, long.max_predictions) == (33, 12, 61, 20)
    assert short.masked_lm_prob == long.masked_lm_prob == 0.3
    assert short.vocab == long.vocab
    assert (both / "seq33" / short.vocab.file).read_bytes() == (both / "seq61" / long.vocab.file).read_bytes()
    for split in ("train", "validation"):
        assert short.split(split).documents == long.split(split).documents > 0
        # The same tokens, cut into rows of two lengths: every token of every document, twice
        # (dupe_factor 2), in both.
        counts = []
        for folder in ("seq33", "seq61"):
            rows = read_records(both / folder, split)
            tokens = unmasked(rows)
            real = tokens[rows["input_mask"] > 0]
            counts.append(np.bincount(real[real > 4], minlength=1000))  # ids 0-4: BERT's specials
        np.testing.assert_array_equal(counts[0], counts[1])
    # The 61-token corpus of the two-length build is the single-length build, byte for byte.
    assert json.loads((both / "seq61" / "manifest.json").read_text()) == alone
    for shard in alone["splits"]["train"]["shards"] + alone["splits"]["validation"]["shards"]:
        assert (both / "seq61" / shard["file"]).read_bytes() == (alone_folder / shard["file"]).read_bytes()
    with pytest.raises(ManifestError, match=r"a corpus at several lengths \(.*seq33, .*seq61\); pass one"):
        read_manifest(str(both))


@pytest.mark.slow
def test_a_higher_masking_rate_masks_that_share(two_lengths):
    both, _, _ = two_lengths
    for n in (33, 61):
        rows = read_records(both / f"seq{n}")
        tokens = unmasked(rows)
        candidates = ((rows["input_mask"] > 0) & (tokens > 4)).sum(axis=1)
        masked = rows["masked_lm_weights"].sum(axis=1)
        # BERT's rule per row: round(candidates x rate), capped by max_predictions.
        expected = np.minimum(np.maximum(1, np.round(candidates * 0.3)), rows["masked_lm_weights"].shape[1])
        assert abs(masked.sum() / expected.sum() - 1) < 0.01
        assert 0.28 < masked.sum() / candidates.sum() < 0.31


@pytest.mark.slow
def test_dynamic_masking_draws_its_own_rate(two_lengths):
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.reader.dynamic_masking import DynamicMasking
    from pipeline.reader.shards import InputError

    both, _, _ = two_lengths
    manifest = read_manifest(str(both / "seq61"))  # built at 0.3: room for 20 predictions
    for rate in (0.15, 0.2):
        masking = DynamicMasking.for_corpus(manifest, rate)
        config = InputConfig(per_replica_batch_size=16, seed=5, dynamic_masking=masking)
        masked = candidates = 0
        for features, _, weights in make_dataset(manifest, "train", config).take(20):
            masked += float(weights["mlm"].numpy().sum())
            ids = features["input_ids"].numpy()
            candidates += int(((features["input_mask"].numpy() > 0) & (ids > 4) | (ids == 4)).sum())
        assert abs(masked / candidates - rate) < 0.015, rate
    with pytest.raises(
        InputError,
        match=r"^--dynamic_masked_lm_prob 0.4: needs 28 masked positions per row at "
        r"seq_len 61, .*seq61 stores 20; rebuild it with --max_predictions 28",
    ):
        DynamicMasking.for_corpus(manifest, 0.4)


def test_training_flags_for_the_rate_are_checked():
    from launch.config import TrainConfig

    with pytest.raises(ConfigError, match=r"^--dynamic_masked_lm_prob needs --dynamic_masking$"):
        TrainConfig(data="d", model_dir="m", dynamic_masked_lm_prob=0.2)
    with pytest.raises(ConfigError, match=r"^--dynamic_masked_lm_prob: expected in \(0, 0.4\], found 0.5$"):
        TrainConfig(data="d", model_dir="m", dynamic_masking=True, dynamic_masked_lm_prob=0.5)
