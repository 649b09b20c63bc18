"""Hugging Face's ModernBERT format, out and in: `ModernBertForMaskedLM` folders (config.json with its
own field names, model.safetensors, the tokenizer).

    save_hf_modernbert(model, bert, vocab_file, "out/hf")   # transformers.ModernBertForMaskedLM
    save_hf_modernbert_task(tagger, bert, vocab_file, "out/ner/hf", scores="tagger",
                            architecture="ModernBertForTokenClassification")  # or a span extractor
    load_hf_modernbert(model, "ModernBERT-base")            # --init_checkpoint hf:DIR
    modernbert_config("ModernBERT-base/config.json")        # its shape as a BertConfig

Names map one to one (model/modernbert.py keeps transformers' layout): `transformer_3/qkv` is
`model.layers.3.attn.Wqkv` (the fused projection, its output laid out (3, heads, head width) in
both), `mlp_input` is `mlp.Wi` (GeGLU's input half first, then the gate), the first block has
no `attn_norm`, and the head is `head.{dense, norm}` + `decoder`, whose weight is tied to the
token embedding (not saved) and whose bias is ours. Dense kernels are transposed (torch's Linear
stores (out, in)); LayerNorms have weights only (norm_bias false). Weights are read and written
with numpy: no torch needed here.
"""

from __future__ import annotations

import json

import keras
import numpy as np

from launch.interop.hf_folder import (
    HFCheckpointError,
    HFTensor,
    assign_hf_tensors,
    tensors_of,
    write_hf_folder,
)
from model.config import BertConfig
from model.encoder import count_blocks
from pipeline import files
from pipeline.vocab import VocabFile

ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_pytorch_tanh"}  # ours -> transformers'
FROM_HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_new": "gelu_approximate",
}
BASE = "model."  # ModernBertForMaskedLM's prefix for the encoder; a bare ModernBertModel has none


def mappings(model: keras.Model) -> list[HFTensor]:
    """Every weight of a ModernBERT pretraining model or encoder under ModernBertForMaskedLM's
    names (the head where the model has one). The pooler and an NSP head have no place there."""
    names = {layer.name for layer in model.layers}
    rows = [HFTensor("token_embedding/embeddings", "model.embeddings.tok_embeddings.weight"),
            HFTensor("embedding_norm/gamma", "model.embeddings.norm.weight")]  # fmt: skip
    for i in range(count_blocks(names)):
        ours, theirs = f"transformer_{i}", f"model.layers.{i}"
        if i > 0:  # the first block reads normalised embeddings: no norm before its attention
            rows.append(HFTensor(f"{ours}/attention_norm/gamma", f"{theirs}.attn_norm.weight"))
        rows += [
            HFTensor(f"{ours}/qkv/kernel", f"{theirs}.attn.Wqkv.weight", kernel=True),
            HFTensor(f"{ours}/attention_output/kernel", f"{theirs}.attn.Wo.weight", kernel=True),
            HFTensor(f"{ours}/mlp_norm/gamma", f"{theirs}.mlp_norm.weight"),
            HFTensor(f"{ours}/mlp_input/kernel", f"{theirs}.mlp.Wi.weight", kernel=True),
            HFTensor(f"{ours}/mlp_output/kernel", f"{theirs}.mlp.Wo.weight", kernel=True),
        ]
    rows.append(HFTensor("final_norm/gamma", "model.final_norm.weight"))
    if "mlm_transform" in names:
        rows += [HFTensor("mlm_transform/kernel", "head.dense.weight", kernel=True),
                 HFTensor("mlm_norm/gamma", "head.norm.weight"),
                 HFTensor("mlm_bias/bias", "decoder.bias")]  # fmt: skip
    return rows


def is_head(row: HFTensor) -> bool:
    return not row.hf.startswith(BASE)


# === Out ===


def hf_modernbert_config(bert: BertConfig, special_ids: dict[str, int]) -> dict:
    """ModernBertConfig's fields for `bert`, with the corpus vocab's [PAD]/[CLS]/[SEP]/[MASK] ids.
    RoPE's bases are written both ways: `rope_parameters` per layer type (transformers 5) and
    `global_rope_theta`/`local_rope_theta` (4.48 and later read those)."""
    if not bert.modern:
        raise HFCheckpointError("ModernBertForMaskedLM: the model is not architecture modernbert")
    layer_types = [
        "full_attention" if bert.is_global(i) else "sliding_attention" for i in range(bert.num_layers)
    ]
    return {
        "architectures": ["ModernBertForMaskedLM"],
        "model_type": "modernbert",
        "vocab_size": bert.vocab_size,
        "hidden_size": bert.hidden_size,
        "num_hidden_layers": bert.num_layers,
        "num_attention_heads": bert.num_heads,
        "intermediate_size": bert.intermediate_size,
        "hidden_activation": ACTIVATIONS[bert.hidden_act],
        "classifier_activation": ACTIVATIONS[bert.hidden_act],
        "max_position_embeddings": bert.max_position,
        "initializer_range": bert.initializer_range,
        "initializer_cutoff_factor": 2.0,
        "norm_eps": bert.layer_norm_epsilon,
        "norm_bias": False,
        "attention_bias": False,
        "mlp_bias": False,
        "classifier_bias": False,
        "decoder_bias": True,
        "attention_dropout": bert.attention_probs_dropout,
        "embedding_dropout": bert.dropout,
        "mlp_dropout": bert.dropout,
        "local_attention": bert.local_attention,
        "global_attn_every_n_layers": bert.global_attn_every_n_layers,
        "layer_types": layer_types,
        "global_rope_theta": bert.global_rope_theta,
        "local_rope_theta": bert.local_rope_theta,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": bert.global_rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": bert.local_rope_theta},
        },
        # What ModernBERT's own classifier does, and what `launch.finetune --pooling auto` picks.
        "classifier_pooling": "mean",
        "pad_token_id": special_ids["pad"],
        "cls_token_id": special_ids["cls"],
        "bos_token_id": special_ids["cls"],
        "sep_token_id": special_ids["sep"],
        "eos_token_id": special_ids["sep"],
        "mask_token_id": special_ids["mask"],
        "tie_word_embeddings": True,
        "dtype": "float32",
    }


def hf_tensors(model: keras.Model) -> dict[str, np.ndarray]:
    """ModernBertForMaskedLM's state dict (float32, C-contiguous) from the model's variables; the
    decoder weight is tied to the token embedding, so it is not among them."""
    return tensors_of(model, mappings(model))


def save_hf_modernbert(model: keras.Model, bert: BertConfig, vocab_file: VocabFile, folder: str) -> None:
    """config.json, model.safetensors, the vocab and its tokenizer files (`hf_folder.py`)."""
    config = hf_modernbert_config(bert, vocab_file.load().special_ids)
    write_hf_folder(folder, config, hf_tensors(model), vocab_file, bert.max_position)


def save_hf_modernbert_task(model: keras.Model, bert: BertConfig, vocab_file: VocabFile, folder: str, *,
                            scores: str, architecture: str, config: dict | None = None) -> None:  # fmt: skip
    """A fine-tuned ModernBERT task model (`model/tasks/`) as transformers' `architecture`: the
    encoder under `model.`, ModernBERT's task head (`model/tasks/head.py`) as `head.{dense, norm}`,
    the dense layer `scores` as `classifier`, `config` added to config.json: a softmax tagger as
    ModernBertForTokenClassification, a span extractor as ModernBertForQuestionAnswering (its
    `classifier` gives start and end). A CRF has no place there: the token head is per token."""
    from model.tasks.head import LAYERS

    names = {layer.name for layer in model.layers}
    if "crf" in names:
        raise HFCheckpointError(f"a CRF tagger: transformers' {architecture} has no CRF to hold it")
    if not set(LAYERS) <= names:
        head = ", ".join(LAYERS)
        raise HFCheckpointError(f"{architecture}: the model has no ModernBERT task head ({head})")
    encoder = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    rows = [*mappings(encoder),
            HFTensor(f"{LAYERS[0]}/kernel", "head.dense.weight", kernel=True),
            HFTensor(f"{LAYERS[1]}/gamma", "head.norm.weight"),
            HFTensor(f"{scores}/kernel", "classifier.weight", kernel=True),
            HFTensor(f"{scores}/bias", "classifier.bias")]  # fmt: skip
    num_labels = model.get_layer(scores).kernel.shape[-1]
    full = (
        hf_modernbert_config(bert, vocab_file.load().special_ids)
        | {"architectures": [architecture], "num_labels": num_labels}
        | (config or {})
    )
    write_hf_folder(folder, full, tensors_of(model, rows), vocab_file, bert.max_position)


# === In ===


def modernbert_config(path: str) -> BertConfig:
    """A transformers ModernBertConfig (config.json) as a BertConfig. What our block cannot do is a
    one-line error: biases, a layer pattern other than one global layer every n, scaled RoPE."""
    raw = json.loads(files.read_text(path))

    def field(name, default):
        return raw.get(name, default)

    for name, want in (("norm_bias", False), ("attention_bias", False), ("mlp_bias", False),
                       ("classifier_bias", False), ("decoder_bias", True)):  # fmt: skip
        if field(name, want) != want:
            raise HFCheckpointError(f"{path}: {name} {raw[name]}; bertbeam's ModernBERT has {want}")
    act = field("hidden_activation", "gelu")
    if act not in FROM_HF_ACTIVATIONS or field("classifier_activation", act) != act:
        raise HFCheckpointError(
            f"{path}: hidden_activation {act!r}, classifier_activation "
            f"{field('classifier_activation', act)!r}; expected the same one of "
            f"{', '.join(FROM_HF_ACTIVATIONS)}"
        )
    layers = raw["num_hidden_layers"]
    every = field("global_attn_every_n_layers", 3)
    expected = ["full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]
    if field("layer_types", expected) != expected:
        raise HFCheckpointError(
            f"{path}: layer_types {raw['layer_types']}; expected full_attention every {every} layers "
            "from the first"
        )
    rope = field("rope_parameters", None) or {}
    thetas = {}
    for kind, legacy, default in (("full_attention", "global_rope_theta", 160_000.0),
                                  ("sliding_attention", "local_rope_theta", 10_000.0)):  # fmt: skip
        params = rope.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise HFCheckpointError(
                f"{path}: rope_parameters.{kind}.rope_type {params['rope_type']!r}; expected default"
            )
        thetas[legacy] = float(params.get("rope_theta", field(legacy, default)))
    hidden = max(field(name, 0.0) for name in ("embedding_dropout", "mlp_dropout"))  # one rate here
    attention = field("attention_dropout", 0.0)
    return BertConfig(
        architecture="modernbert",
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        num_layers=layers,
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_position=field("max_position_embeddings", 8192),
        dropout=hidden,  # ModernBERT's are all 0
        attention_dropout=None if attention == hidden else attention,
        initializer_range=field("initializer_range", 0.02),
        layer_norm_epsilon=field("norm_eps", 1e-5),
        hidden_act=FROM_HF_ACTIVATIONS[act],
        local_attention=field("local_attention", 128),
        global_attn_every_n_layers=every,
        **thetas,
    )


def load_hf_modernbert(model: keras.Model, folder: str) -> list[str]:
    """Assigns every weight from `folder/model.safetensors` (ModernBertForMaskedLM's names, or a
    bare ModernBertModel's without `model.`). A missing or mis-shaped tensor is a one-line error
    before anything is assigned; only the MLM head may be missing (a ModernBertModel has none),
    and keeps its fresh values. Returns the weights that stay fresh: those, and any the format
    has no place for (a pooler, an NSP head)."""
    rows = mappings(model)
    return assign_hf_tensors(model, folder, rows, {row.ours for row in rows if is_head(row)}, prefix=BASE)
