"""google-research/bert's checkpoint format, in and out: its variable names, mapped one by one.

    load_google_checkpoint(model, "uncased_L-12_H-768_A-12/bert_model.ckpt")   # warm start
    save_google_checkpoint(model, "out/google/bert_model.ckpt")                 # for its tools
    save_google(model, bert, vocab_file, "out/google")   # the checkpoint, bert_config.json, vocab

Google's checkpoints name each tensor (`bert/encoder/layer_0/attention/self/query/kernel`) and
store attention kernels as (H, H) matrices, where Keras's MultiHeadAttention keeps (H, heads,
head_size); the mapping reshapes in both directions. Google's BERT computes GELU with the tanh
approximation: `google_bert_config` turns its `bert_config.json` into a `BertConfig` with
`hidden_act="gelu_approximate"`.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import keras
import numpy as np

from common.errors import BertbeamError
from launch.interop.grow import exported_values
from model.config import BertConfig
from model.encoder import count_blocks, weights_by_path
from pipeline import files
from pipeline.files import write_atomically
from pipeline.vocab import VocabFile


class GoogleCheckpointError(BertbeamError):
    """The checkpoint does not fit the model; one line naming the variable."""


@dataclasses.dataclass(frozen=True)
class MappedVariable:
    """One variable under both names; Hugging Face's BERT names derive from Google's (`hf_bert.py`)."""

    google: str  # the tensor's name in Google's checkpoint
    ours: str  # the Keras variable path in bertbeam's pretraining model
    transpose: bool = False  # Google stores it transposed (the NSP output weights)


def mappings(model: keras.Model) -> list[MappedVariable]:
    """Every variable of `model` with its Google name; the MLM head, pooler and NSP head only if
    present (an encoder alone has none)."""
    names = {layer.name for layer in model.layers}
    if "embedding_projection" in names:
        raise GoogleCheckpointError(
            "this model projects its embeddings (embedding_size != hidden_size), which BERT's "
            "format has no place for"
        )
    rows = embedding_mappings("bert") + block_mappings(count_blocks(names), "bert/encoder")
    if "mlm_transform" in names:
        rows += [
            MappedVariable("cls/predictions/transform/dense/kernel", "mlm_transform/kernel"),
            MappedVariable("cls/predictions/transform/dense/bias", "mlm_transform/bias"),
            MappedVariable("cls/predictions/transform/LayerNorm/gamma", "mlm_norm/gamma"),
            MappedVariable("cls/predictions/transform/LayerNorm/beta", "mlm_norm/beta"),
            MappedVariable("cls/predictions/output_bias", "mlm_bias/bias"),
        ]
    if "pooler" in names:
        rows += [
            MappedVariable("bert/pooler/dense/kernel", "pooler/kernel"),
            MappedVariable("bert/pooler/dense/bias", "pooler/bias"),
        ]
    if "nsp_logits" in names:
        rows += [
            MappedVariable("cls/seq_relationship/output_weights", "nsp_logits/kernel", transpose=True),
            MappedVariable("cls/seq_relationship/output_bias", "nsp_logits/bias"),
        ]
    return rows


def embedding_mappings(scope: str) -> list[MappedVariable]:
    """The token, segment and position embeddings and their LayerNorm, under `scope/embeddings`
    (`bert`; ELECTRA's `electra`)."""
    return [
        MappedVariable(f"{scope}/embeddings/word_embeddings", "token_embedding/embeddings"),
        MappedVariable(f"{scope}/embeddings/token_type_embeddings", "segment_embedding/embeddings"),
        MappedVariable(f"{scope}/embeddings/position_embeddings", "position_embedding/embeddings"),
        MappedVariable(f"{scope}/embeddings/LayerNorm/gamma", "embedding_norm/gamma"),
        MappedVariable(f"{scope}/embeddings/LayerNorm/beta", "embedding_norm/beta"),
    ]


def dense_mappings(google: str, ours: str) -> list[MappedVariable]:
    """A dense layer's kernel and bias."""
    return [
        MappedVariable(f"{google}/kernel", f"{ours}/kernel"),
        MappedVariable(f"{google}/bias", f"{ours}/bias"),
    ]


def norm_mappings(google: str, ours: str) -> list[MappedVariable]:
    """A LayerNorm's scale and offset."""
    return [
        MappedVariable(f"{google}/gamma", f"{ours}/gamma"),
        MappedVariable(f"{google}/beta", f"{ours}/beta"),
    ]


def block_mappings(count: int, scope: str, prefix: str = "") -> list[MappedVariable]:
    """`count` transformer blocks: `scope/layer_i` <-> `{prefix}transformer_i`."""
    rows = []
    for i in range(count):
        g, o = f"{scope}/layer_{i}", f"{prefix}transformer_{i}"
        for part in ("query", "key", "value"):
            rows += dense_mappings(f"{g}/attention/self/{part}", f"{o}/attention/{part}")
        rows += dense_mappings(f"{g}/attention/output/dense", f"{o}/attention/attention_output")
        rows += norm_mappings(f"{g}/attention/output/LayerNorm", f"{o}/attention_norm")
        rows += dense_mappings(f"{g}/intermediate/dense", f"{o}/intermediate")
        rows += dense_mappings(f"{g}/output/dense", f"{o}/output")
        rows += norm_mappings(f"{g}/output/LayerNorm", f"{o}/output_norm")
    return rows


def to_google_layout(mapping: MappedVariable, value: np.ndarray) -> np.ndarray:
    """Ours -> Google's: query/key/value kernels (H, heads, size) -> (H, H), the attention output
    kernel (heads, size, H) -> (H, H), attention biases (heads, size) -> (H,); the NSP weights
    transposed. All C-order reshapes: column h * size + d of Google's matrix is head h, unit d."""
    if mapping.transpose:
        return value.T
    if mapping.ours.endswith("attention_output/kernel"):
        return value.reshape(-1, value.shape[-1])
    if "/attention/" in mapping.ours and mapping.ours.endswith("/kernel"):
        return value.reshape(value.shape[0], -1)
    if "/attention/" in mapping.ours:
        return value.reshape(-1)
    return value


def from_google_layout(value: np.ndarray, mapping: MappedVariable, shape: tuple[int, ...]) -> np.ndarray:
    """Google's layout -> ours, `shape` being our variable's."""
    return (value.T if mapping.transpose else value).reshape(shape)


def load_google_checkpoint(model: keras.Model, prefix: str) -> None:
    """Assigns every mapped variable from a Google BERT checkpoint; a missing tensor or one whose
    size does not fit is a one-line error, before anything is assigned."""
    reader = _tensorflow(prefix).train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    weights = weights_by_path(model)
    values = {}
    for mapping in mappings(model):
        if mapping.google not in shapes:
            raise GoogleCheckpointError(f"{prefix}: no variable {mapping.google} (for {mapping.ours})")
        want = tuple(weights[mapping.ours].shape)
        found = tuple(shapes[mapping.google])
        if int(np.prod(found)) != int(np.prod(want)) or (mapping.transpose and found[::-1] != want):
            raise GoogleCheckpointError(
                f"{prefix}: {mapping.google} has shape {found}, the model's {mapping.ours} needs {want}"
            )
        values[mapping.ours] = from_google_layout(reader.get_tensor(mapping.google), mapping, want)
    for path, value in values.items():
        weights[path].assign(value)


def save_google_checkpoint(model: keras.Model, prefix: str) -> None:
    """Writes the model's variables under Google's names and layouts (a V2 checkpoint whose keys
    are those names, so `tf.train.load_variable(prefix, name)` and google-research/bert read it)."""
    tf = _tensorflow(prefix)
    values = exported_values(model)
    rows = mappings(model)
    tensors = [tf.constant(to_google_layout(m, values[m.ours])) for m in rows]
    if "/" in prefix:
        files.make_dirs(prefix.rsplit("/", 1)[0])
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=[m.google for m in rows],
        shape_and_slices=[""] * len(rows),
        tensors=tensors,
    )


def save_google(model: keras.Model, bert: BertConfig, vocab_file: VocabFile, folder: str) -> None:
    """An unpacked google-research/bert release: bert_model.ckpt.*, bert_config.json, the vocab."""
    config_json = google_config_json(bert)  # refuses a shape Google's code cannot build, first
    save_google_checkpoint(model, f"{folder}/bert_model.ckpt")
    write_atomically(f"{folder}/bert_config.json", config_json)
    if bert.hidden_act == "gelu":
        print(
            "note: trained with exact (erf) GELU; google-research/bert computes the tanh form",
            file=sys.stderr,
        )
    write_atomically(f"{folder}/{vocab_file.file_name}", vocab_file.data)


def google_bert_config(path: str) -> BertConfig:
    """google-research/bert's bert_config.json as a BertConfig (its "gelu" is the tanh form)."""
    raw = json.loads(files.read_text(path))
    if raw.get("hidden_act", "gelu") != "gelu":
        raise GoogleCheckpointError(f"{path}: hidden_act {raw['hidden_act']!r}; only gelu is supported")
    return bert_config_from(raw, hidden_act="gelu_approximate")


def bert_config_from(raw: dict, *, hidden_act: str, layer_norm_epsilon: float = 1e-12) -> BertConfig:
    """A BertConfig from the field names google-research/bert's config and Hugging Face's share
    (and ELECTRA's embedding_size, where it differs from hidden_size)."""
    embedding_size = raw.get("embedding_size")
    hidden = raw.get("hidden_dropout_prob", 0.1)
    attention = raw.get("attention_probs_dropout_prob", hidden)
    return BertConfig(
        embedding_size=embedding_size if embedding_size != raw["hidden_size"] else None,
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_position=raw["max_position_embeddings"],
        type_vocab_size=raw.get("type_vocab_size", 2),
        dropout=hidden,
        attention_dropout=None if attention == hidden else attention,
        initializer_range=raw.get("initializer_range", 0.02),
        layer_norm_epsilon=layer_norm_epsilon,
        hidden_act=hidden_act,
    )


def google_config_json(bert: BertConfig) -> str:
    """google-research/bert's bert_config.json for `bert`. Its "gelu" is the tanh form: a model
    trained with the exact erf GELU gets "gelu" too (Google's code knows no other), and outputs
    that differ by the two forms' gap (under 1e-3 per activation)."""
    if bert.pre_layer_norm:
        raise GoogleCheckpointError(
            "google-research/bert is post-LayerNorm; a pre_layer_norm model has no equivalent"
        )
    raw = {
        "attention_probs_dropout_prob": bert.attention_probs_dropout,
        "hidden_act": "gelu",
        "hidden_dropout_prob": bert.dropout,
        "hidden_size": bert.hidden_size,
        "initializer_range": bert.initializer_range,
        "intermediate_size": bert.intermediate_size,
        "max_position_embeddings": bert.max_position,
        "num_attention_heads": bert.num_heads,
        "num_hidden_layers": bert.num_layers,
        "type_vocab_size": bert.type_vocab_size,
        "vocab_size": bert.vocab_size,
    }
    return json.dumps(raw, indent=2, sort_keys=True)


def is_google_checkpoint(prefix: str) -> bool:
    """A TensorFlow checkpoint with google-research/bert's names (else a bertbeam run's)."""
    if not files.exists(f"{prefix}.index"):
        return False
    tf = _tensorflow(prefix)
    try:
        return (
            "bert/embeddings/word_embeddings" in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
        )
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError):
        return False


def _tensorflow(prefix: str):
    """TensorFlow, which reads and writes google-research/bert's checkpoints (TensorFlow's own
    format), under either Keras backend; a one-line error where it is not installed."""
    try:
        import tensorflow as tf
    except ImportError:
        raise GoogleCheckpointError(
            f"{prefix}: google-research/bert's checkpoints are TensorFlow's format, and tensorflow is not "
            "installed here; convert it where it is (python -m launch.export --format hf) or install it"
        ) from None
    return tf
