"""The tf.data input function on a real corpus built by the pipeline."""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.reader.dynamic_masking import DynamicMasking, unmask
from pipeline.reader.order import MIXTURE_BLOCK, corpus_choices, mixture_starts
from pipeline.reader.shards import InputError, naming_bad_shards, shard_files
from pipeline.schema import ManifestError, Split, read_manifest


def dataset(corpus, split="train", **kwargs):
    config = InputConfig(**{"per_replica_batch_size": 7, "training": True, "seed": 3, **kwargs})
    return make_dataset(read_manifest(str(corpus)), split, config)


def test_element_spec_is_static_and_keyed_by_model_inputs(small_corpus):
    features, labels, weights = dataset(small_corpus).element_spec
    assert set(features) == {"input_ids", "input_mask", "segment_ids", "document_ids", "masked_lm_positions"}
    for spec in [*features.values(), *labels.values(), *weights.values()]:
        assert spec.shape.is_fully_defined()
    assert features["input_ids"].shape == (7, 32) and features["input_ids"].dtype == tf.int32
    assert labels["mlm"].shape == (7, 5) and weights["mlm"].dtype == tf.float32


def test_a_model_names_its_features_and_targets(small_corpus):
    """ELECTRA's model reads the masked positions' ids and weights too, and its "rtd" target is the
    original row (the stored masks undone: the numpy oracle), weighted by input_mask."""
    from tests.conftest import unmasked

    features = ("input_ids", "input_mask", "segment_ids", "document_ids", "masked_lm_positions",
                "masked_lm_ids", "masked_lm_weights")  # fmt: skip
    x, y, w = next(iter(dataset(small_corpus, "validation", training=False, features=features,
                                targets=("mlm", "rtd"))))  # fmt: skip
    assert tuple(x) == features and set(y) == set(w) == {"mlm", "rtd"}
    rows = {name: x[name].numpy() for name in ("input_ids", "masked_lm_positions")}
    rows.update(masked_lm_ids=y["mlm"].numpy(), masked_lm_weights=w["mlm"].numpy())
    np.testing.assert_array_equal(y["rtd"].numpy(), unmasked(rows))
    np.testing.assert_array_equal(w["rtd"].numpy(), x["input_mask"].numpy().astype(np.float32))
    with pytest.raises(InputError, match=r"no labels for \['sop'\]"):
        InputConfig(7, targets=("mlm", "sop"))
    with pytest.raises(InputError, match="the model reads word_starts, which its records do not hold"):
        dataset(small_corpus, features=("input_ids", "word_starts"))
    with pytest.raises(InputError, match="nsp .a corpus without sentence pairs."):
        dataset(small_corpus, targets=("mlm", "nsp"))


def test_the_split_is_the_manifests_shards_and_an_empty_one_is_named(small_corpus, tmp_path):
    corpus = copy_of(small_corpus, tmp_path / "corpus")
    # A stray file that matches the split's name pattern but is not in the manifest: never read.
    (corpus / "train-00007-of-00009.tfrecord").write_bytes(b"not a tfrecord at all")
    manifest = read_manifest(str(corpus))
    n = manifest.split("train").instances
    assert sum(1 for _ in make_dataset(manifest, "train", InputConfig(1, training=False))) == n
    with pytest.raises(InputError, match=r"manifest.json: the validation split has no shards"):
        empty = dataclasses.replace(manifest, splits={**manifest.splits, "validation": EMPTY})
        make_dataset(empty, "validation", InputConfig(2))
    with pytest.raises(ManifestError, match=r"manifest.json: no split 'test'; it has train, validation"):
        make_dataset(manifest, "test", InputConfig(2))


EMPTY = Split(
    documents=0, instances=0, real_tokens=0, masked_tokens=0, padding_fraction=0.0,
    next_sentence_label_1=0, dupe_factor=1, packing_groups=1, shards=(),
)  # fmt: skip


def test_same_seed_same_batches_and_another_seed_differs(small_corpus):
    def first(seed):
        return np.concatenate(
            [x["input_ids"].numpy() for x, _, _ in dataset(small_corpus, seed=seed).take(5)]
        )

    assert np.array_equal(first(3), first(3))
    assert not np.array_equal(first(3), first(4))


def test_input_context_gives_each_pipeline_its_own_files(small_corpus):
    manifest = read_manifest(str(small_corpus))
    shares = [shard_files(manifest, "train", tf.distribute.InputContext(2, i, 2)) for i in range(2)]
    assert sorted(shares[0] + shares[1]) == shard_files(manifest, "train") and not set(shares[0]) & set(
        shares[1]
    )
    with pytest.raises(InputError, match="4 shards for 5 input pipelines; rebuild with --num_shards >= 5"):
        shard_files(manifest, "train", tf.distribute.InputContext(5, 0, 5))


def records_of(ds) -> list[bytes]:
    """Each example of a stream of batches as bytes (its ids, positions and labels)."""
    rows = []
    for features, labels, _ in ds:
        content = np.concatenate(
            [features["input_ids"], features["masked_lm_positions"], labels["mlm"]], axis=1
        )
        rows.extend(row.tobytes() for row in content)
    return rows


@pytest.mark.slow
def test_a_resumed_stream_seeks_to_exactly_the_uninterrupted_batches(small_corpus):
    """Seeking (no replay) gives the batches an uninterrupted stream gives from there: inside a
    shuffle window, at a window's or an epoch's edge, epochs later, and per input pipeline."""
    manifest = read_manifest(str(small_corpus))
    n = manifest.split("train").instances
    for context in (None, tf.distribute.InputContext(2, 1, 2)):
        config = InputConfig(per_replica_batch_size=7, seed=5, shuffle_window=41)

        def stream(skip, batches, context=context, config=config):
            ds = make_dataset(manifest, "train", config, input_context=context, skip_batches=skip)
            return records_of(ds.take(batches))

        reference = stream(0, 3 * n // 7 + 10)  # three epochs and a bit
        for skip in (1, 5, 6, n // 7, n // 7 + 1, 2 * n // 7 + 3):
            assert stream(skip, 4) == reference[skip * 7 : skip * 7 + 28], (context, skip)


@pytest.mark.slow
def test_each_epoch_reads_every_record_once_in_a_new_order_even_far_away(small_corpus):
    manifest = read_manifest(str(small_corpus))
    everything = records_of(make_dataset(manifest, "train", InputConfig(1, training=False)))
    n = len(everything)
    config = InputConfig(per_replica_batch_size=1, seed=2, shuffle_window=50)
    epochs = [records_of(make_dataset(manifest, "train", config, skip_batches=e * n).take(n)) for e in (0, 1)]
    far = records_of(make_dataset(manifest, "train", config, skip_batches=10**9 * n).take(n))  # epoch 1e9
    for epoch in (*epochs, far):
        assert sorted(epoch) == sorted(everything)
    assert epochs[0] != epochs[1] != far and epochs[0] != everything


@pytest.mark.slow
def test_a_mixture_seeks_each_corpus_and_its_choices(small_corpus):
    """Choices come in blocks with fixed quotas: a seek across a block's edge equals the replay,
    and the counts per corpus are the rates' to within one record per corpus at any point."""
    manifest = read_manifest(str(small_corpus))
    rates = [0.3, 0.2, 0.5]
    choices = list(corpus_choices(rates, seed=9).take(2 * MIXTURE_BLOCK + 50).as_numpy_iterator())
    for start in (0, 17, MIXTURE_BLOCK - 3, MIXTURE_BLOCK, MIXTURE_BLOCK + 1000):
        counts = np.bincount(choices[:start], minlength=3)
        assert mixture_starts(rates, 9, start) == counts.tolist()
        assert np.all(np.abs(counts - np.array(rates) * start) <= MIXTURE_BLOCK * 0.05 + 1)
        assert (
            list(corpus_choices(rates, 9, start).take(40).as_numpy_iterator()) == choices[start : start + 40]
        )
    assert choices[:MIXTURE_BLOCK] != choices[MIXTURE_BLOCK : 2 * MIXTURE_BLOCK]
    config = InputConfig(per_replica_batch_size=7, seed=1, shuffle_window=30)

    def stream(skip, batches):
        ds = make_dataset([manifest] * 3, "train", config, rates=rates, skip_batches=skip)
        return records_of(ds.take(batches))

    reference = stream(0, MIXTURE_BLOCK // 7 + 5)
    for skip in (3, MIXTURE_BLOCK // 7):  # the second starts 1 record before block 1
        assert stream(skip, 3) == reference[skip * 7 : skip * 7 + 21]


def test_evaluation_reads_every_record_once(small_corpus):
    n = read_manifest(str(small_corpus)).split("validation").instances
    assert sum(1 for _ in dataset(small_corpus, "validation", per_replica_batch_size=1, training=False)) == n


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


def test_dynamic_masking_for_the_corpus_uses_its_vocab(small_corpus):
    masking = DynamicMasking.for_corpus(read_manifest(str(small_corpus)))
    first = next(iter(dataset(small_corpus, training=False, dynamic_masking=masking)))
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


def copy_of(corpus, folder):
    shutil.copytree(corpus, folder)
    return folder


def test_a_corrupt_shard_is_named(small_corpus, tmp_path):
    corpus = copy_of(small_corpus, tmp_path / "corpus")
    manifest = read_manifest(str(corpus))
    victim = Path(manifest.files("train")[2])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    ds = make_dataset(manifest, "train", InputConfig(4, training=False))
    with pytest.raises(InputError, match=f"{victim}: corrupt or truncated shard"):
        with naming_bad_shards(manifest.files("train")):
            for _ in ds:
                pass


def test_truncated_or_missing_shards_are_named_before_the_first_step(small_corpus, tmp_path):
    corpus = copy_of(small_corpus, tmp_path / "corpus")
    manifest = read_manifest(str(corpus))
    victim = Path(manifest.files("train")[1])
    size = victim.stat().st_size
    victim.write_bytes(victim.read_bytes()[: size - 10])
    with pytest.raises(
        InputError, match=f"^{victim}: {size - 10} bytes, the manifest says {size}; truncated"
    ):
        make_dataset(manifest, "train", InputConfig(2))
    victim.unlink()
    with pytest.raises(InputError, match=f"^{victim}: in the manifest but missing"):
        make_dataset(manifest, "train", InputConfig(2))
    make_dataset(manifest, "validation", InputConfig(2, training=False))  # the other split: not affected
