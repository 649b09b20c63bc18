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
import functools
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


def _varint_columns(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varint bytes of every value of an (N, L) non-negative int64 array.

    Returns (data, lengths): each row's bytes back to back in `data`, and bytes per row.
    """
    width = max(1, (int(values.max(initial=0)).bit_length() + 6) // 7)  # bytes of the largest
    dtype = np.uint32 if width <= 4 else np.uint64  # token ids fit 32 bits: half the traffic
    v = values.astype(dtype)
    n_bytes = np.ones(v.shape, np.uint8)
    for k in range(1, width):
        n_bytes += v >= dtype(1) << dtype(7 * k)
    k = np.arange(width, dtype=dtype)  # (K,)
    groups = ((v[..., None] >> (dtype(7) * k)) & dtype(0x7F)).astype(np.uint8)  # (N, L, K)
    groups |= (k < n_bytes[..., None] - 1).astype(np.uint8) << 7  # continuation bit
    present = k < n_bytes[..., None]
    return groups[present], n_bytes.sum(axis=1, dtype=np.int64)


@functools.lru_cache(maxsize=1 << 16)
def _varint(n: int) -> bytes:
    out, rest = bytearray(), n
    while rest >= 0x80:
        out.append((rest & 0x7F) | 0x80)
        rest >>= 7
    out.append(rest)
    return bytes(out)


@functools.lru_cache(maxsize=1 << 16)
def _entry_prefix(name: str, kind: bytes, packed_bytes: int) -> bytes:
    """The bytes of one feature-map entry up to its packed values (cached per packed length)."""
    key = b"\x0a" + _varint(len(name)) + name.encode()  # entry.key = 1
    values_header = b"\x0a" + _varint(packed_bytes)  # Int64List/FloatList.value = 1, packed
    feature_header = kind + _varint(len(values_header) + packed_bytes)  # Feature.<kind>
    feature_bytes = len(feature_header) + len(values_header) + packed_bytes
    value_header = b"\x12" + _varint(feature_bytes)  # entry.value = 2
    entry_bytes = len(key) + len(value_header) + feature_bytes
    return (
        b"\x0a" + _varint(entry_bytes) + key + value_header + feature_header + values_header
    )  # Features.feature = 1


def serialize_examples(rows: Mapping[str, np.ndarray], seq_len: int, max_predictions: int) -> list[bytes]:
    """Serialized `tf.train.Example`s, one per row of the (N, length) arrays in `rows`.

    The bytes are exactly those of protobuf's `Example.SerializeToString(deterministic=True)`
    (a test holds us to that), but encoded column-wise with numpy: building one proto per row
    costs ~100 us, four times all the other per-instance work together. Deterministic map order
    (sorted feature names) matters: the same seed must give the same bytes in every process.
    """
    lengths = feature_lengths(seq_len, max_predictions)
    n = None
    columns = []  # per feature, sorted by name: (name, kind, packed data, row offsets)
    for f in sorted(FEATURES, key=lambda f: f.name):
        values = np.asarray(rows[f.name])
        if values.ndim != 2 or values.shape[1] != lengths[f.name]:
            raise ValueError(f"feature {f.name}: expected length {lengths[f.name]}, found {values.shape[-1]}")
        if n is None:
            n = len(values)
        if f.dtype == "int64":
            if values.size and values.min() < 0:
                raise ValueError(f"feature {f.name}: negative values are not supported")
            data, row_bytes = _varint_columns(values)
            kind = b"\x1a"  # Feature.int64_list = 3
        else:
            data = values.astype("<f4").reshape(-1).view(np.uint8)
            row_bytes = np.full(len(values), 4 * values.shape[1])
            kind = b"\x12"  # Feature.float_list = 2
        offsets = np.concatenate([[0], np.cumsum(row_bytes)]).tolist()
        columns.append((f.name, kind, data.tobytes(), offsets))
    examples = []
    for r in range(n or 0):
        parts = []
        for name, kind, data, offsets in columns:
            start, end = offsets[r], offsets[r + 1]
            parts.append(_entry_prefix(name, kind, end - start))
            parts.append(data[start:end])
        body = b"".join(parts)
        examples.append(b"\x0a" + _varint(len(body)) + body)  # Example.features = 1
    return examples


def serialize_example(arrays: Mapping[str, np.ndarray], seq_len: int, max_predictions: int) -> bytes:
    """One instance as a serialized `tf.train.Example`; refuses a wrong length."""
    rows = {}
    for name, values in arrays.items():
        values = np.asarray(values)
        if values.ndim != 1:
            raise ValueError(f"feature {name}: expected a vector, found shape {values.shape}")
        rows[name] = values[None]
    return serialize_examples(rows, seq_len, max_predictions)[0]


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
