"""The data contract: one table of features, and the typed manifest that describes a corpus."""

import json

import pytest
import tensorflow as tf

from pipeline import schema
from pipeline.schema import Manifest, ManifestError, read_manifest


def test_google_bert_names_dtypes_and_lengths():
    assert schema.feature_lengths(7, 3) == {
        "input_ids": 7,
        "input_mask": 7,
        "segment_ids": 7,
        "masked_lm_positions": 3,
        "masked_lm_ids": 3,
        "masked_lm_weights": 3,
        "next_sentence_labels": 1,
        "document_ids": 7,
    }
    spec = schema.parsing_spec(7, 3)
    assert spec["masked_lm_weights"].dtype == tf.float32 and spec["input_ids"].dtype == tf.int64


def test_the_manifest_of_a_real_build_round_trips_byte_for_byte(small_corpus):
    text = (small_corpus / "manifest.json").read_text()
    manifest = Manifest.from_json(text, str(small_corpus))
    assert manifest.to_json() == text
    assert (manifest.seq_len, manifest.max_predictions, manifest.pairs) == (32, 5, False)
    assert manifest.packing_version == 3
    older = json.loads(text)
    del older["packing_version"]  # a corpus built before the field: version 1
    assert Manifest.from_json(json.dumps(older)).packing_version == 1
    assert manifest.vocab.file == "vocab.model" and manifest.vocab.kind == "sentencepiece"
    assert manifest.vocab_path == f"{small_corpus}/vocab.model"
    train = manifest.split("train")
    assert [f.rsplit("/", 1)[-1] for f in manifest.files("train")] == [s.file for s in train.shards]
    assert len(train.shards) == 4 and sum(s.records for s in train.shards) == train.instances > 0
    assert read_manifest(f"{small_corpus}/") == manifest


def edited(small_corpus, change) -> str:
    raw = json.loads((small_corpus / "manifest.json").read_text())
    change(raw)
    return json.dumps(raw)


BAD_MANIFESTS = {
    "missing": (lambda m: m["build"].pop("seq_len"), "field build.seq_len is missing"),
    "mistyped": (
        lambda m: m["build"].update(max_predictions="5"),
        "field build.max_predictions expected int, found '5'",
    ),
    "vocab": (lambda m: m["vocab"].pop("sha256"), "field vocab.sha256 is missing"),
    "shard": (
        lambda m: m["splits"]["train"]["shards"][2].pop("bytes"),
        r"field splits.train.shards\[2\].bytes is missing",
    ),
    "version": (lambda m: m.update(schema_version=9), "schema_version expected 1, 2, found 9; rebuild"),
    "counts": (
        lambda m: m["splits"]["validation"].update(instances=3),
        "validation has 3 instances but its shards list",
    ),
}


@pytest.mark.parametrize("case", list(BAD_MANIFESTS))
def test_a_bad_manifest_is_one_line_naming_the_file_and_field(small_corpus, case):
    change, message = BAD_MANIFESTS[case]
    with pytest.raises(ManifestError, match=f"^/somewhere/manifest.json: .*{message}"):
        Manifest.from_json(edited(small_corpus, change), "/somewhere")


def test_a_manifest_from_before_wordpiece_reads_as_sentencepiece(small_corpus):
    """Corpora built before vocabularies had a kind stay readable: no kind means sentencepiece."""
    older = edited(small_corpus, lambda m: [m["vocab"].pop(k) for k in ("kind", "lower_case")])
    vocab = Manifest.from_json(older).vocab
    assert (vocab.kind, vocab.lower_case) == ("sentencepiece", False)


def test_read_manifest_errors_name_the_folder(tmp_path):
    with pytest.raises(ManifestError, match=f"^{tmp_path}/nothing: does not exist; build a corpus first"):
        read_manifest(str(tmp_path / "nothing"))
    with pytest.raises(ManifestError, match=f"^{tmp_path}: has no manifest.json; build a corpus first"):
        read_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="manifest.json: not valid JSON"):
        read_manifest(str(tmp_path))
    with pytest.raises(ManifestError, match=r"manifest.json: field schema_version is missing"):
        Manifest.from_json("{}")


@pytest.mark.slow  # trains a model end to end
def test_a_version_1_corpus_still_reads_and_trains(small_corpus, tmp_path):
    """Corpora from before word_starts (schema 1: no segmenter, no encodings) stay readable."""
    import shutil

    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.reader.dynamic_masking import DynamicMasking

    old = tmp_path / "v1"
    shutil.copytree(small_corpus, old)
    raw = json.loads((old / "manifest.json").read_text())
    raw["schema_version"] = 1
    del raw["segmenter"], raw["input"]["encodings"]
    (old / "manifest.json").write_text(json.dumps(raw))
    manifest = read_manifest(str(old))
    assert (manifest.schema_version, manifest.segmenter, manifest.word_starts) == (1, {}, False)
    masking = DynamicMasking.for_corpus(manifest)
    assert not masking.stored_units
    config = InputConfig(4, training=False, dynamic_masking=masking)
    features, _, _ = next(iter(make_dataset(manifest, "train", config)))
    assert features["input_ids"].shape == (4, 32)
