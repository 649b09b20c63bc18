"""Hugging Face's BERT format, out and in: `config.json` + `model.safetensors` (+ tokenizer files).

    save_hf(model, bert, vocab_file, "out/hf")      # transformers.BertForMaskedLM.from_pretrained
    load_hf_checkpoint(model, "out/hf")             # warm start (--init_checkpoint hf:out/hf)

Names and layouts go through Google's (launch/google_checkpoint.py), which differ from Hugging
Face's in a fixed way: `/` -> `.`, `layer_3` -> `layer.3`, kernel/gamma/beta -> weight/bias, and
every dense kernel transposed (torch's Linear stores (out, in)). The export holds exactly the
weights `BertForMaskedLM` has: the decoder is tied to the word embeddings and its bias is
`cls.predictions.bias`; BertForMaskedLM has no pooler and no NSP head, so those stay out (the
Google export keeps them). GELU: our exact "gelu" is Hugging Face's "gelu"; the tanh form is its
"gelu_new". Weights are read and written with numpy: no torch needed here.
"""

from __future__ import annotations

import json
import re
import sys

import keras
import numpy as np
import tensorflow as tf

from common.errors import BertbeamError
from launch.google_checkpoint import (
    MappedVariable,
    bert_config_from,
    from_google_layout,
    mappings,
    to_google_layout,
)
from model.config import BertConfig
from model.encoder import weights_by_path
from pipeline.vocab import SPECIAL_PIECES, SentencePieceVocab, VocabFile

WEIGHTS = "model.safetensors"
ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new"}  # ours -> Hugging Face's
FROM_HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
}
TOKENIZER_CLASS = {
    "wordpiece": "BertTokenizer",
    "sentencepiece": "PreTrainedTokenizerFast",
    "tokenizer": "PreTrainedTokenizerFast",
}
MASKED_LM_ONLY = ("bert/pooler/", "cls/seq_relationship/")  # not part of BertForMaskedLM


class HFCheckpointError(BertbeamError):
    """The Hugging Face checkpoint does not fit; one line naming the file and tensor."""


def hf_name(google: str) -> str:
    """Google's name -> Hugging Face's: `bert/encoder/layer_3/attention/self/query/kernel` ->
    `bert.encoder.layer.3.attention.self.query.weight`."""
    special = {
        "cls/predictions/output_bias": "cls.predictions.bias",
        "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
        "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
    }
    if google in special:
        return special[google]
    parts = re.sub(r"layer_(\d+)", r"layer.\1", google).split("/")
    if parts[-1].endswith("_embeddings"):
        return ".".join(parts) + ".weight"
    parts[-1] = {"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(parts[-1], parts[-1])
    return ".".join(parts)


def _is_kernel(mapping: MappedVariable) -> bool:
    return mapping.google.endswith("/kernel")


# === Out ===


def hf_config(bert: BertConfig, pad_token_id: int) -> dict:
    if bert.pre_layer_norm:
        raise HFCheckpointError(
            "Hugging Face's BERT is post-LayerNorm; a pre_layer_norm model has no equivalent there"
        )
    return {
        "architectures": ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": bert.vocab_size,
        "hidden_size": bert.hidden_size,
        "num_hidden_layers": bert.num_layers,
        "num_attention_heads": bert.num_heads,
        "intermediate_size": bert.intermediate_size,
        "hidden_act": ACTIVATIONS[bert.hidden_act],
        "hidden_dropout_prob": bert.dropout,
        "attention_probs_dropout_prob": bert.dropout,
        "max_position_embeddings": bert.max_position,
        "type_vocab_size": bert.type_vocab_size,
        "initializer_range": bert.initializer_range,
        "layer_norm_eps": bert.layer_norm_epsilon,
        "position_embedding_type": "absolute",
        "pad_token_id": pad_token_id,
        "tie_word_embeddings": True,
        "dtype": "float32",
    }


def hf_tensors(model: keras.Model, rows: list[MappedVariable] | None = None) -> dict[str, np.ndarray]:
    """The state dict of `rows` (default: BertForMaskedLM's) from the model's variables
    (float32, C-contiguous), under Hugging Face's names."""
    weights = weights_by_path(model)
    rows = [m for m in mappings(model) if not m.google.startswith(MASKED_LM_ONLY)] if rows is None else rows
    out = {}
    for m in rows:
        value = to_google_layout(m, np.asarray(keras.ops.convert_to_numpy(weights[m.ours]), np.float32))
        out[hf_name(m.google)] = np.ascontiguousarray(value.T if _is_kernel(m) else value)
    return out


def save_hf(model: keras.Model, bert: BertConfig, vocab_file: VocabFile, folder: str) -> None:
    """config.json, model.safetensors and the vocab, plus the tokenizer (tokenizer.json,
    tokenizer_config.json) that `transformers.AutoTokenizer` loads where the vocab kind has one."""
    config = hf_config(bert, vocab_file.load().special_ids["pad"])
    write_hf_folder(folder, config, hf_tensors(model), vocab_file, bert.max_position)


def write_hf_folder(folder: str, config: dict, tensors: dict[str, np.ndarray], vocab_file: VocabFile,
                    model_max_length: int) -> None:  # fmt: skip
    """A `save_pretrained` folder: config.json, model.safetensors, the vocab, and the tokenizer
    files where the vocab kind has a Hugging Face tokenizer."""
    from safetensors.numpy import save

    tf.io.gfile.makedirs(folder)
    files = {
        "config.json": json.dumps(config, indent=2, sort_keys=True).encode(),
        WEIGHTS: save(tensors, metadata={"format": "pt"}),
        vocab_file.file_name: vocab_file.data,
    }
    tokenizer = hf_tokenizer(vocab_file)
    vocab = vocab_file.load()
    if vocab_file.kind == "tokenizer":  # already the tokenizer: kept byte for byte, its own token names
        pieces = {key: vocab.tokens[index] for key, index in vocab.special_ids.items()}
    else:
        pieces = SPECIAL_PIECES
    if tokenizer is None:
        print(f"note: no Hugging Face tokenizer for this {vocab_file.kind} vocab (a bpe model); "
              f"{folder} has the weights and {vocab_file.file_name} only", file=sys.stderr)  # fmt: skip
    else:
        if vocab_file.kind != "tokenizer":
            files["tokenizer.json"] = tokenizer.to_str().encode()
        files["tokenizer_config.json"] = json.dumps(
            {
                "tokenizer_class": TOKENIZER_CLASS[vocab_file.kind],
                "do_lower_case": vocab_file.lower_case,
                "model_max_length": model_max_length,
                **{f"{key}_token": piece for key, piece in pieces.items()},
            },
            indent=2,
            sort_keys=True,
        ).encode()
    for name, data in files.items():
        with tf.io.gfile.GFile(f"{folder}/{name}", "wb") as f:
            f.write(data)


def hf_tokenizer(vocab_file: VocabFile):
    """A `tokenizers.Tokenizer` that tokenizes exactly as our vocab does, plus BERT's [CLS] A [SEP]
    (B [SEP]) template and special tokens. WordPiece: the same tokenizer. A sentencepiece unigram
    model: its pieces, scores and normalization map as a tokenizers Unigram model (the conversion
    transformers applies to sentencepiece tokenizers). None for a bpe sentencepiece model: its
    merges are not in the model file."""
    from tokenizers import AddedToken, Tokenizer, decoders, processors

    vocab = vocab_file.load()
    if vocab_file.kind == "tokenizer":  # a tokenizer.json: itself
        return Tokenizer.from_str(vocab_file.data.decode("utf-8"))
    if vocab_file.kind == "wordpiece":
        tokenizer = Tokenizer.from_str(vocab.tokenizer.to_str())  # a copy
        tokenizer.decoder = decoders.WordPiece(prefix="##")
    else:
        tokenizer = _unigram_from_sentencepiece(vocab)
        if tokenizer is None:
            return None
    ids = vocab.special_ids
    cls, sep = SPECIAL_PIECES["cls"], SPECIAL_PIECES["sep"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids["cls"]), (sep, ids["sep"])],
    )
    tokenizer.add_special_tokens([AddedToken(piece, special=True) for piece in SPECIAL_PIECES.values()])
    return tokenizer


def _unigram_from_sentencepiece(vocab: SentencePieceVocab):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    proto = _model_proto_class()()
    proto.ParseFromString(vocab.model_bytes)
    if proto.trainer_spec.model_type != 1:  # UNIGRAM
        return None
    # Control pieces ([CLS], [SEP], [MASK]) never match text in sentencepiece: score them out.
    pieces = [(p.piece, -1e9 if p.type == 3 else p.score) for p in proto.pieces]  # 3: CONTROL
    tokenizer = Tokenizer(models.Unigram(pieces, proto.trainer_spec.unk_id, False))
    spec = proto.normalizer_spec
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    scheme = "always" if spec.add_dummy_prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    return tokenizer


def _model_proto_class():
    """The fields of sentencepiece's ModelProto we read, declared for protobuf to parse (others
    are skipped). sentencepiece 0.2.3's own generated module needs protobuf >= 7 and TF 2.21 pins
    6; once TensorFlow allows 7, `sentencepiece.sentencepiece_model_pb2.ModelProto` replaces this."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    optional, repeated = 1, 3
    string, bytes_, float_, int32, bool_, message = 9, 12, 2, 5, 8, 11
    # message: [(field, number, label, type, type_name or default)], as in sentencepiece_model.proto
    # (its enums read as their int32 wire values; the defaults are the .proto's).
    schema = {
        "SentencePiece": [("piece", 1, optional, string, None), ("score", 2, optional, float_, None),
                          ("type", 3, optional, int32, "1")],
        "TrainerSpec": [("model_type", 3, optional, int32, "1"), ("unk_id", 40, optional, int32, None)],
        "NormalizerSpec": [("precompiled_charsmap", 2, optional, bytes_, None),
                           ("add_dummy_prefix", 3, optional, bool_, "true"),
                           ("remove_extra_whitespaces", 4, optional, bool_, "true")],
        "ModelProto": [("pieces", 1, repeated, message, "SentencePiece"),
                       ("trainer_spec", 2, optional, message, "TrainerSpec"),
                       ("normalizer_spec", 3, optional, message, "NormalizerSpec")],
    }  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name="bertbeam_spm.proto", package="bertbeam_spm")
    for name, fields in schema.items():
        message_type = file.message_type.add(name=name)
        for field, number, label, kind, extra in fields:
            spec = message_type.field.add(name=field, number=number, label=label, type=kind)
            if kind == message:
                spec.type_name = f".bertbeam_spm.{extra}"
            elif extra is not None:
                spec.default_value = extra
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bertbeam_spm.ModelProto"))


# === In ===


def hf_bert_config(path: str) -> BertConfig:
    """A Hugging Face BERT (or ELECTRA discriminator) config.json as a BertConfig (its "gelu" is
    the exact erf form)."""
    with tf.io.gfile.GFile(path) as f:
        raw = json.load(f)
    act = raw.get("hidden_act", "gelu")
    if act not in FROM_HF_ACTIVATIONS:
        expected = ", ".join(FROM_HF_ACTIVATIONS)
        raise HFCheckpointError(f"{path}: hidden_act {act!r}; expected one of {expected}")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        found = raw["position_embedding_type"]
        raise HFCheckpointError(f"{path}: position_embedding_type {found!r}; expected absolute")
    return bert_config_from(
        raw, hidden_act=FROM_HF_ACTIVATIONS[act], layer_norm_epsilon=raw.get("layer_norm_eps", 1e-12)
    )


def is_hf_config(raw: dict) -> bool:
    return raw.get("model_type") in ("bert", "electra", "modernbert") or "transformers_version" in raw


def hf_model_type(folder: str) -> str:
    """config.json's model_type ("bert", "electra", "modernbert"; "bert" when unsaid)."""
    path = f"{folder}/config.json"
    if not tf.io.gfile.exists(path):
        return "bert"
    with tf.io.gfile.GFile(path) as f:
        return json.load(f).get("model_type", "bert")


def load_hf_checkpoint(model: keras.Model, folder: str) -> list[str]:
    """Assigns every variable from `folder/model.safetensors` (BertForMaskedLM, BertForPreTraining
    or BertModel names). A missing or mis-shaped tensor is a one-line error, before anything is
    assigned; only the MLM head, the pooler and NSP head may be missing (BertModel has no MLM
    head, BertForMaskedLM no pooler or NSP head): they keep their fresh initialisation, and
    their names are returned."""
    folder = folder.rstrip("/")
    rows = mappings(model)
    optional = {m.ours for m in rows if m.google.startswith((*MASKED_LM_ONLY, "cls/predictions/"))}
    return assign_hf_tensors(model, folder, rows, optional, prefix="bert.")


def read_hf_tensors(folder: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    path = f"{folder}/{WEIGHTS}"
    if not tf.io.gfile.exists(path):
        raise HFCheckpointError(f"{folder}: no {WEIGHTS} (a Hugging Face save_pretrained folder)")
    with tf.io.gfile.GFile(path, "rb") as f:
        return load(f.read())


def assign_hf_tensors(model: keras.Model, folder: str, rows: list[MappedVariable], optional: set[str],
                      prefix: str) -> list[str]:  # fmt: skip
    """Assigns `rows` from `folder/model.safetensors`, each under its Hugging Face name with or
    without the base model's `prefix` (`bert.`, `electra.`: a bare BertModel saves without it).
    A missing or mis-shaped tensor is a one-line error, before anything is assigned, unless its
    variable is in `optional`: those keep their fresh values. Returns what stays fresh: those,
    and every variable of the model no row maps."""
    tensors = read_hf_tensors(folder)
    path = f"{folder}/{WEIGHTS}"
    weights = weights_by_path(model)
    values = {}
    for m in rows:
        name = hf_name(m.google)
        found = next((k for k in (name, name.removeprefix(prefix)) if k in tensors), None)
        if found is None:
            if m.ours in optional:
                continue
            raise HFCheckpointError(f"{path}: no tensor {name} (for {m.ours})")
        value = tensors[found].astype(np.float32)
        value = value.T if _is_kernel(m) else value
        want = tuple(weights[m.ours].shape)
        expected = to_google_layout(m, np.zeros(want, np.float32)).shape
        if value.shape != expected:
            raise HFCheckpointError(
                f"{path}: {found} has shape {tensors[found].shape}, the model's {m.ours} needs "
                f"{expected[::-1] if _is_kernel(m) else expected}"
            )
        values[m.ours] = from_google_layout(value, m, want)
    for ours, value in values.items():
        weights[ours].assign(value)
    return [path for path in weights if path not in values]
