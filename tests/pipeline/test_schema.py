"""The data contract: one table drives writer, reader and manifest checks."""

import json

import numpy as np
import pytest
import tensorflow as tf

from pipeline import schema


def arrays(seq_len=7, max_predictions=3):
    lengths = schema.feature_lengths(seq_len, max_predictions)
    out = {name: np.arange(1, n + 1, dtype=np.int64) for name, n in lengths.items()}
    out["masked_lm_weights"] = np.array([1.0, 0.5, 0.0][:max_predictions], np.float32)
    return out


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


def test_writer_and_reader_agree():
    record = schema.serialize_example(arrays(), 7, 3)
    parsed = tf.io.parse_single_example(record, schema.parsing_spec(7, 3))
    for name, values in arrays().items():
        assert parsed[name].numpy().tolist() == values.tolist()
    assert record == schema.serialize_example(arrays(), 7, 3)  # deterministic bytes


def test_writer_refuses_a_wrong_length():
    bad = arrays()
    bad["segment_ids"] = bad["segment_ids"][:-1]
    with pytest.raises(ValueError, match="feature segment_ids: expected length 7, found 6"):
        schema.serialize_example(bad, 7, 3)


def manifest(**build):
    return {
        "schema_version": 1,
        "build": {"seq_len": 7, "max_predictions": 3, **build},
        "vocab": {"sha256": "ab" * 32},
    }


def test_check_manifest_names_the_mismatch():
    schema.check_manifest(manifest(), seq_len=7, max_predictions=3, vocab_sha256="ab" * 32)
    with pytest.raises(
        schema.ManifestError, match=r"seq_len expected 128, found 7; rebuild the corpus with --seq_len 128"
    ):
        schema.check_manifest(manifest(), seq_len=128)
    with pytest.raises(schema.ManifestError, match="max_predictions expected 20, found 3"):
        schema.check_manifest(manifest(), max_predictions=20)
    with pytest.raises(
        schema.ManifestError, match="vocab sha256 expected cdcdcdcdcdcd..., found abababababab"
    ):
        schema.check_manifest(manifest(), vocab_sha256="cd" * 32)
    with pytest.raises(schema.ManifestError, match="schema_version expected 1, found 0"):
        schema.check_manifest({**manifest(), "schema_version": 0})


def test_read_manifest_errors_name_the_path(tmp_path):
    with pytest.raises(schema.ManifestError, match=f"{tmp_path}/manifest.json: no manifest"):
        schema.read_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(schema.ManifestError, match="manifest.json: not valid JSON"):
        schema.read_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps(manifest()))
    assert schema.read_manifest(str(tmp_path))["build"]["seq_len"] == 7


def test_fast_encoder_matches_protobuf_deterministic_bytes():
    from tensorflow.core.example import example_pb2

    rng = np.random.default_rng(0)
    n = 17
    rows = {}
    for name, length in schema.feature_lengths(7, 3).items():
        # Values across every varint width, 0 and 2**62 included.
        rows[name] = rng.integers(0, 2 ** rng.integers(1, 63, (n, length)), dtype=np.int64)
    rows["input_ids"][0] = [0, 1, 127, 128, 16383, 16384, 2**62]
    rows["masked_lm_weights"] = rng.random((n, 3)).astype(np.float32)
    got = schema.serialize_examples(rows, 7, 3)
    for r in range(n):
        example = example_pb2.Example()
        for f in schema.FEATURES:
            target = example.features.feature[f.name]
            values = rows[f.name][r].tolist()
            (target.int64_list if f.dtype == "int64" else target.float_list).value.extend(values)
        assert got[r] == example.SerializeToString(deterministic=True)


def test_fast_encoder_refuses_negative_ints():
    bad = {name: values[None] for name, values in arrays().items()}
    bad["input_ids"] = -bad["input_ids"]
    with pytest.raises(ValueError, match="feature input_ids: negative values"):
        schema.serialize_examples(bad, 7, 3)
