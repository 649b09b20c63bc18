"""Hugging Face's BERT format, out and in: `BertForMaskedLM` folders (config.json +
model.safetensors + tokenizer; `hf_folder.py` writes and reads them).

    save_hf(model, bert, vocab_file, "out/hf")      # transformers.BertForMaskedLM.from_pretrained
    save_hf_task(tagger, bert, vocab_file, "out/ner/hf", head="tagger", ...)  # BertForTokenClassification
    load_hf_checkpoint(model, "out/hf")             # warm start (--init_checkpoint hf:out/hf)

Names and layouts go through Google's (`google.py`), which differ from Hugging Face's in a fixed
way: `/` -> `.`, `layer_3` -> `layer.3`, kernel/gamma/beta -> weight/bias, and every dense kernel
transposed (torch's Linear stores (out, in)). The export holds exactly the weights
`BertForMaskedLM` has: the decoder is tied to the word embeddings and its bias is
`cls.predictions.bias`; BertForMaskedLM has no pooler and no NSP head, so those stay out (the
Google export keeps them). GELU: our exact "gelu" is Hugging Face's "gelu"; the tanh form is its
"gelu_new".
"""

from __future__ import annotations

import json
import re

import keras
import numpy as np

from launch.interop.google import MappedVariable, bert_config_from, mappings
from launch.interop.hf_folder import (
    HFCheckpointError,
    HFTensor,
    assign_hf_tensors,
    tensors_of,
    write_hf_folder,
)
from model.config import BertConfig
from pipeline import files
from pipeline.vocab import VocabFile

ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new"}  # ours -> Hugging Face's
FROM_HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
}
MASKED_LM_ONLY = ("bert/pooler/", "cls/seq_relationship/")  # not part of BertForMaskedLM


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


def hf_rows(rows: list[MappedVariable]) -> list[HFTensor]:
    """Google's rows under Hugging Face's names (ELECTRA's too: `electra/...` -> `electra....`)."""
    return [HFTensor(m.ours, hf_name(m.google), kernel=m.google.endswith("/kernel"), google=m) for m in rows]


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
        "attention_probs_dropout_prob": bert.attention_probs_dropout,
        "max_position_embeddings": bert.max_position,
        "type_vocab_size": bert.type_vocab_size,
        "initializer_range": bert.initializer_range,
        "layer_norm_eps": bert.layer_norm_epsilon,
        "position_embedding_type": "absolute",
        "pad_token_id": pad_token_id,
        "tie_word_embeddings": True,
        "dtype": "float32",
    }


def hf_tensors(model: keras.Model) -> dict[str, np.ndarray]:
    """BertForMaskedLM's state dict (float32, C-contiguous) from the model's variables."""
    return tensors_of(model, hf_rows([m for m in mappings(model) if not m.google.startswith(MASKED_LM_ONLY)]))


def save_hf(model: keras.Model, bert: BertConfig, vocab_file: VocabFile, folder: str) -> None:
    """config.json, model.safetensors and the vocab, plus the tokenizer (tokenizer.json,
    tokenizer_config.json) that `transformers.AutoTokenizer` loads where the vocab kind has one."""
    config = hf_config(bert, vocab_file.load().special_ids["pad"])
    write_hf_folder(folder, config, hf_tensors(model), vocab_file, bert.max_position)


def save_hf_task(model: keras.Model, bert: BertConfig, vocab_file: VocabFile, folder: str, *, head: str,
                 architecture: str, hf_head: str, config: dict | None = None,
                 pooler: bool = False) -> None:  # fmt: skip
    """A fine-tuned task model (`model/tasks/`) as transformers' `architecture`: the encoder's
    weights under `bert.` (the pooler too with `pooler`), the dense layer `head` as `hf_head` (its
    kernel transposed, as every Linear), `config` added to config.json: a [CLS] classifier as
    BertForSequenceClassification (`classifier`, on the pooler), a softmax tagger as
    BertForTokenClassification (`classifier`), a span extractor as BertForQuestionAnswering
    (`qa_outputs`). A CRF has no place there: transformers' token head is per token."""
    if "crf" in {layer.name for layer in model.layers}:
        raise HFCheckpointError(
            "a CRF tagger: transformers' BertForTokenClassification has no CRF to hold it"
        )
    encoder = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    rows = [
        m
        for m in mappings(encoder)
        if m.google.startswith("bert/") and (pooler or not m.google.startswith("bert/pooler/"))
    ]
    tensors = tensors_of(encoder, hf_rows(rows))
    dense = model.get_layer(head)
    tensors[f"{hf_head}.weight"] = np.ascontiguousarray(
        keras.ops.convert_to_numpy(dense.kernel).T, np.float32
    )
    tensors[f"{hf_head}.bias"] = np.ascontiguousarray(keras.ops.convert_to_numpy(dense.bias), np.float32)
    full = (
        hf_config(bert, vocab_file.load().special_ids["pad"])
        | {"architectures": [architecture]}
        | (config or {})
    )
    write_hf_folder(folder, full, tensors, vocab_file, bert.max_position)


# === In ===


def hf_bert_config(path: str) -> BertConfig:
    """A Hugging Face BERT (or ELECTRA discriminator) config.json as a BertConfig (its "gelu" is
    the exact erf form)."""
    raw = json.loads(files.read_text(path))
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


def load_hf_checkpoint(model: keras.Model, folder: str) -> list[str]:
    """Assigns every variable from `folder/model.safetensors` (BertForMaskedLM, BertForPreTraining
    or BertModel names). A missing or mis-shaped tensor is a one-line error, before anything is
    assigned; only the MLM head, the pooler and NSP head may be missing (BertModel has no MLM
    head, BertForMaskedLM no pooler or NSP head): they keep their fresh initialisation, and
    their names are returned."""
    rows = mappings(model)
    optional = {m.ours for m in rows if m.google.startswith((*MASKED_LM_ONLY, "cls/predictions/"))}
    return assign_hf_tensors(model, folder, hf_rows(rows), optional, prefix="bert.")
