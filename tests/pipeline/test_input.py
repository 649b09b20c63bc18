"""The tf.data input function on a real corpus built by the pipeline."""

import json

import numpy as np
import pytest
import tensorflow as tf

from pipeline.input import DynamicMasking, InputError, list_files, make_dataset, naming_bad_shards, unmask
from pipeline.schema import read_manifest


def dataset(corpus, **kwargs):
    args = {"manifest": read_manifest(str(corpus)), "per_replica_batch_size": 7, "training": True, "seed": 3}
    return make_dataset(str(corpus / "train-*"), **{**args, **kwargs})


def test_element_spec_is_static_and_keyed_by_model_inputs(small_corpus):
    features, labels, weights = dataset(small_corpus).element_spec
    assert set(features) == {"input_ids", "input_mask", "segment_ids", "document_ids", "masked_lm_positions"}
    for spec in [*features.values(), *labels.values(), *weights.values()]:
        assert spec.shape.is_fully_defined()
    assert features["input_ids"].shape == (7, 32) and features["input_ids"].dtype == tf.int32
    assert labels["mlm"].shape == (7, 5) and weights["mlm"].dtype == tf.float32


def test_manifest_mismatch_is_a_one_line_error(small_corpus):
    manifest = read_manifest(str(small_corpus))
    with pytest.raises(
        InputError, match="seq_len expected 128, found 32; rebuild the corpus with --seq_len 128"
    ):
        dataset(small_corpus, expected_seq_len=128)
    with pytest.raises(InputError, match="max_predictions expected 20, found 5"):
        dataset(small_corpus, expected_max_predictions=20)
    with pytest.raises(InputError, match="vocab sha256 expected 000000000000"):
        dataset(small_corpus, expected_vocab_sha256="0" * 64)
    with pytest.raises(InputError, match="schema_version expected 1, found 9"):
        dataset(small_corpus, manifest={**manifest, "schema_version": 9})
    with pytest.raises(InputError, match="nothing-\\*: no files match"):
        make_dataset(
            str(small_corpus / "nothing-*"),
            manifest=manifest,
            per_replica_batch_size=2,
            training=False,
            seed=0,
        )


def test_same_seed_same_batches_and_another_seed_differs(small_corpus):
    def first(seed):
        return np.concatenate(
            [x["input_ids"].numpy() for x, _, _ in dataset(small_corpus, seed=seed).take(5)]
        )

    assert np.array_equal(first(3), first(3))
    assert not np.array_equal(first(3), first(4))


def test_input_context_gives_each_pipeline_its_own_files(small_corpus):
    pattern = str(small_corpus / "train-*")
    shares = [list_files(pattern, tf.distribute.InputContext(2, i, 2)) for i in range(2)]
    assert sorted(shares[0] + shares[1]) == list_files(pattern, None) and not set(shares[0]) & set(shares[1])
    with pytest.raises(InputError, match="4 shards for 5 input pipelines; rebuild with --num_shards >= 5"):
        list_files(pattern, tf.distribute.InputContext(5, 0, 5))


def test_evaluation_reads_every_record_once(small_corpus):
    manifest = read_manifest(str(small_corpus))
    n = manifest["splits"]["validation"]["instances"]
    ds = make_dataset(str(small_corpus / "validation-*"), manifest=manifest, per_replica_batch_size=1,
                      training=False, seed=0)  # fmt: skip
    assert sum(1 for _ in ds) == n


def test_iterator_position_survives_a_checkpoint(small_corpus, tmp_path):
    ds = dataset(small_corpus)
    iterator = iter(ds)
    for _ in range(3):
        next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.write(str(tmp_path / "ckpt"))
    expected = [next(iterator)[0]["input_ids"].numpy() for _ in range(4)]
    resumed = iter(dataset(small_corpus))
    tf.train.Checkpoint(iterator=resumed).read(path).assert_consumed()
    got = [next(resumed)[0]["input_ids"].numpy() for _ in range(4)]
    for a, b in zip(expected, got, strict=True):
        assert np.array_equal(a, b)


def test_dynamic_masking_matches_static_statistics(small_corpus, botchan_vocab):
    masking = DynamicMasking.from_vocab_file(str(botchan_vocab), whole_word=False)
    static = list(dataset(small_corpus, training=False).take(40))
    dynamic = list(dataset(small_corpus, training=False, dynamic_masking=masking).take(40))
    for (xs, ys, ws), (xd, yd, wd) in zip(static, dynamic, strict=True):
        assert xd["input_ids"].shape == xs["input_ids"].shape
        # Same rows underneath: unmasking either gives the same tokens.
        rows_s = {"input_ids": xs["input_ids"], "masked_lm_positions": xs["masked_lm_positions"],
                  "masked_lm_ids": ys["mlm"], "masked_lm_weights": ws["mlm"]}  # fmt: skip
        rows_d = {"input_ids": xd["input_ids"], "masked_lm_positions": xd["masked_lm_positions"],
                  "masked_lm_ids": yd["mlm"], "masked_lm_weights": wd["mlm"]}  # fmt: skip
        assert np.array_equal(unmask(rows_s).numpy(), unmask(rows_d).numpy())
    count = lambda batches: sum(float(w["mlm"].numpy().sum()) for _, _, w in batches)  # noqa: E731
    assert count(dynamic) == count(static)  # the same budget per row
    shown, original = [], []
    for x, y, w in dynamic:
        valid = w["mlm"].numpy() > 0
        shown.append(np.take_along_axis(x["input_ids"].numpy(), x["masked_lm_positions"].numpy(), 1)[valid])
        original.append(y["mlm"].numpy()[valid])
    shown, original = np.concatenate(shown), np.concatenate(original)
    assert not np.isin(original, [0, 1, 2, 3, 4]).any()
    assert (shown == 4).mean() == pytest.approx(0.8, abs=0.04)
    assert (shown == original).mean() == pytest.approx(0.1, abs=0.04)
    positions = np.concatenate([x["masked_lm_positions"].numpy() for x, _, _ in dynamic])
    static_positions = np.concatenate([x["masked_lm_positions"].numpy() for x, _, _ in static])
    assert not np.array_equal(positions, static_positions)  # a fresh mask, not the stored one


def test_dynamic_masking_true_uses_the_corpus_vocab(small_corpus):
    first = next(iter(dataset(small_corpus, training=False, dynamic_masking=True)))
    stored = next(iter(dataset(small_corpus, training=False)))
    assert first[0]["input_ids"].shape == stored[0]["input_ids"].shape
    assert not np.array_equal(first[0]["masked_lm_positions"], stored[0]["masked_lm_positions"])
    assert float(first[2]["mlm"].numpy().sum()) == float(stored[2]["mlm"].numpy().sum())


def test_whole_word_dynamic_masking_keeps_words_whole(small_corpus, botchan_vocab):
    from pipeline.masking import MaskingTables, word_ids
    from pipeline.vocab import SentencePieceVocab as Vocab

    masking = DynamicMasking.from_vocab_file(str(botchan_vocab), whole_word=True)
    tables = MaskingTables.from_vocab(Vocab(botchan_vocab.read_bytes()))
    taken = wanted = 0
    for x, y, w in dataset(small_corpus, training=False, dynamic_masking=masking).take(20):
        rows = {"input_ids": x["input_ids"], "masked_lm_positions": x["masked_lm_positions"],
                "masked_lm_ids": y["mlm"], "masked_lm_weights": w["mlm"]}  # fmt: skip
        tokens = unmask(rows).numpy()
        words = word_ids(tokens, tables)
        for r in range(len(tokens)):
            chosen = set(x["masked_lm_positions"].numpy()[r][w["mlm"].numpy()[r] > 0].tolist())
            for word in np.unique(words[r][list(chosen)]):
                assert set(np.flatnonzero(words[r] == word).tolist()) <= chosen
            candidates = (~tables.is_special[tokens[r]]).sum()
            wanted += min(5, max(1, round(candidates * 0.15)))
            taken += len(chosen)
    assert taken >= 0.95 * wanted  # whole words rarely leave the budget short


def test_a_corrupt_shard_is_named(small_corpus, tmp_path):
    manifest = read_manifest(str(small_corpus))
    for path in sorted(small_corpus.glob("train-*")):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    victim = sorted(tmp_path.glob("train-*"))[2]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    files = list_files(str(tmp_path / "train-*"), None)
    ds = make_dataset(
        str(tmp_path / "train-*"), manifest=manifest, per_replica_batch_size=4, training=False, seed=0
    )
    with pytest.raises(InputError, match=f"{victim}: corrupt or truncated shard"):
        with naming_bad_shards(files):
            for _ in ds:
                pass


def test_truncated_or_missing_shards_are_named_before_the_first_step(small_corpus, tmp_path):
    manifest = read_manifest(str(small_corpus))
    for path in small_corpus.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    victim = sorted(tmp_path.glob("train-*"))[1]
    size = victim.stat().st_size
    victim.write_bytes(victim.read_bytes()[: size - 10])
    with pytest.raises(
        InputError, match=f"^{victim}: {size - 10} bytes, the manifest says {size}; truncated"
    ):
        make_dataset(
            str(tmp_path / "train-*"), manifest=manifest, per_replica_batch_size=2, training=True, seed=0
        )
    victim.unlink()
    with pytest.raises(InputError, match=f"^{victim}: in the manifest but missing"):
        make_dataset(
            str(tmp_path / "train-*"), manifest=manifest, per_replica_batch_size=2, training=True, seed=0
        )
    # The other split is not affected.
    make_dataset(
        str(tmp_path / "validation-*"), manifest=manifest, per_replica_batch_size=2, training=False, seed=0
    )
