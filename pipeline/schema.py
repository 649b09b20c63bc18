"""The data contract between the corpus builder and the input function, written once.

One table of features (name -> dtype, length) drives the writer's `tf.train.Example`, the reader's
`FixedLenFeature` spec and the manifest's feature list. Names and layout follow
google-research/bert's `create_pretraining_data.py`, so our shards also feed its and TF Model
Garden's trainers; `document_ids` is our one addition, which their readers simply ignore.

The manifest (`manifest.json` beside the shards) carries the numbers a reader must check before the
first step: schema version, seq_len, max_predictions and the vocab hash.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import numpy as np

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "validation")


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    dtype: str  # "int64" or "float32": the two kinds tf.train.Example stores.
    length: str  # "seq_len", "max_predictions" or "one".


FEATURES: tuple[Feature, ...] = (
    Feature("input_ids", "int64", "seq_len"),
    Feature("input_mask", "int64", "seq_len"),
    Feature("segment_ids", "int64", "seq_len"),
    Feature("masked_lm_positions", "int64", "max_predictions"),
    Feature("masked_lm_ids", "int64", "max_predictions"),
    Feature("masked_lm_weights", "float32", "max_predictions"),
    Feature("next_sentence_labels", "int64", "one"),
    # 1, 2, ... per document packed into the row, 0 on padding: keeps attention within a document.
    Feature("document_ids", "int64", "seq_len"),
)
FEATURE_NAMES = tuple(f.name for f in FEATURES)


class ManifestError(ValueError):
    """The shards on disk do not match what the caller expects."""


def feature_lengths(seq_len: int, max_predictions: int) -> dict[str, int]:
    sizes = {"seq_len": seq_len, "max_predictions": max_predictions, "one": 1}
    return {f.name: sizes[f.length] for f in FEATURES}


def serialize_example(arrays: Mapping[str, np.ndarray], seq_len: int, max_predictions: int) -> bytes:
    """One instance as a serialized `tf.train.Example`; refuses a wrong length."""
    from tensorflow.core.example import example_pb2  # the proto only; TF is imported once

    example = example_pb2.Example()
    features = example.features.feature
    for f, length in zip(FEATURES, feature_lengths(seq_len, max_predictions).values(), strict=True):
        values = arrays[f.name]
        if len(values) != length:
            raise ValueError(f"feature {f.name}: expected length {length}, found {len(values)}")
        if f.dtype == "int64":
            features[f.name].int64_list.value.extend(values.tolist())
        else:
            features[f.name].float_list.value.extend(values.tolist())
    return example.SerializeToString(deterministic=True)  # map order must not vary per process


def parsing_spec(seq_len: int, max_predictions: int) -> dict:
    """`tf.io.parse_example` spec with every length fixed: the reader's half of the contract."""
    import tensorflow as tf

    dtypes = {"int64": tf.int64, "float32": tf.float32}
    lengths = feature_lengths(seq_len, max_predictions)
    return {f.name: tf.io.FixedLenFeature([lengths[f.name]], dtypes[f.dtype]) for f in FEATURES}


def features_for_manifest(seq_len: int, max_predictions: int) -> dict[str, dict]:
    lengths = feature_lengths(seq_len, max_predictions)
    return {f.name: {"dtype": f.dtype, "length": lengths[f.name]} for f in FEATURES}


def read_manifest(data_dir: str) -> dict:
    """The manifest beside the shards, or a one-line error naming the path."""
    import tensorflow as tf

    path = f"{data_dir.rstrip('/')}/{MANIFEST_NAME}"
    if not tf.io.gfile.exists(path):
        raise ManifestError(f"{path}: no manifest; build the corpus with `make corpus` first")
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def check_manifest(
    manifest: Mapping,
    *,
    seq_len: int | None = None,
    max_predictions: int | None = None,
    vocab_sha256: str | None = None,
    source: str = MANIFEST_NAME,
) -> None:
    """Refuse, in one line, shards built with other numbers than the caller expects."""
    found_version = manifest.get("schema_version")
    if found_version != SCHEMA_VERSION:
        raise ManifestError(
            f"{source}: schema_version expected {SCHEMA_VERSION}, found {found_version}; rebuild the corpus"
        )
    build = manifest.get("build", {})
    for field, expected in (("seq_len", seq_len), ("max_predictions", max_predictions)):
        if expected is not None and build.get(field) != expected:
            raise ManifestError(
                f"{source}: {field} expected {expected}, found {build.get(field)}; "
                f"rebuild the corpus with --{field} {expected} or change the model's {field}"
            )
    found_sha = manifest.get("vocab", {}).get("sha256")
    if vocab_sha256 is not None and found_sha != vocab_sha256:
        raise ManifestError(
            f"{source}: vocab sha256 expected {vocab_sha256[:12]}..., found {str(found_sha)[:12]}...; "
            "the shards were tokenized with another vocabulary"
        )
