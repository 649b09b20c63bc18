"""Hugging Face's ELECTRA format, out and in: the discriminator as `ElectraForPreTraining`, the
generator as `ElectraForMaskedLM`, each a `save_pretrained` folder (config.json, model.safetensors,
the tokenizer and vocab).

    save_hf_electra(model, bert, generator, vocab_file, "out/hf")  # out/hf/discriminator, out/hf/generator
    load_hf_electra(model, "electra-small-discriminator")         # --init_checkpoint hf:DIR

Names go through Google's, as BERT's do (`hf_bert.py`): the base model is `electra.`
instead of `bert.`; `electra.embeddings_project` is the projection where the embeddings are
narrower than the encoder (ELECTRA-Small's discriminator, every generator here); the heads are
`discriminator_predictions.{dense, dense_prediction}` and `generator_predictions.{dense,
LayerNorm}` + `generator_lm_head` (its weight tied to the word embeddings, its bias ours). The two
networks share their embeddings here, so both folders hold the same embedding tensors, as
google/electra-*'s two repositories do.
"""

from __future__ import annotations

import keras

from launch.interop.google import (
    MappedVariable,
    block_mappings,
    dense_mappings,
    embedding_mappings,
    norm_mappings,
)
from launch.interop.hf_bert import ACTIVATIONS, hf_config, hf_rows
from launch.interop.hf_folder import HFCheckpointError, assign_hf_tensors, tensors_of, write_hf_folder
from model.config import BertConfig
from model.electra import GENERATOR
from model.encoder import count_blocks
from pipeline.vocab import VocabFile

DISCRIMINATOR_FOLDER, GENERATOR_FOLDER = "discriminator", "generator"


def discriminator_mappings(model: keras.Model) -> list[MappedVariable]:
    """The encoder of `model` (an ELECTRA model's discriminator, or any BERT's encoder) under
    ElectraForPreTraining's names, with the replaced-token head if the model has one."""
    names = {layer.name for layer in model.layers}
    rows = embedding_mappings("electra")
    if "embedding_projection" in names:
        rows += dense_mappings("electra/embeddings_project", "embedding_projection")
    rows += block_mappings(count_blocks(names), "electra/encoder")
    if "rtd_transform" in names:
        rows += dense_mappings("discriminator_predictions/dense", "rtd_transform")
        rows += dense_mappings("discriminator_predictions/dense_prediction", "rtd_logits")
    return rows


def generator_mappings(model: keras.Model) -> list[MappedVariable]:
    """An ELECTRA model's generator under ElectraForMaskedLM's names."""
    names = {layer.name for layer in model.layers}
    rows = embedding_mappings("electra")
    if f"{GENERATOR}embedding_projection" in names:
        rows += dense_mappings("electra/embeddings_project", f"{GENERATOR}embedding_projection")
    rows += block_mappings(count_blocks(names, prefix=GENERATOR), "electra/encoder", prefix=GENERATOR)
    rows += dense_mappings("generator_predictions/dense", f"{GENERATOR}mlm_transform")
    rows += norm_mappings("generator_predictions/LayerNorm", f"{GENERATOR}mlm_norm")
    rows.append(MappedVariable("generator_lm_head/bias", f"{GENERATOR}mlm_bias/bias"))
    return rows


def electra_config(bert: BertConfig, pad_token_id: int, architecture: str) -> dict:
    """transformers' ElectraConfig fields for a network of `bert`'s shape."""
    config = hf_config(bert, pad_token_id)  # BERT's fields, which ElectraConfig shares
    return {
        **config,
        "architectures": [architecture],
        "model_type": "electra",
        "embedding_size": bert.embedding_width,
        "hidden_act": ACTIVATIONS[bert.hidden_act],
        "summary_type": "first",
        "summary_use_proj": True,
        "summary_activation": "gelu",
        "summary_last_dropout": 0.1,
    }


def save_hf_electra(model: keras.Model, bert: BertConfig, generator: BertConfig, vocab_file: VocabFile,
                    folder: str) -> list[str]:  # fmt: skip
    """folder/discriminator (ElectraForPreTraining) and folder/generator (ElectraForMaskedLM);
    returns the two folders."""
    pad = vocab_file.load().special_ids["pad"]
    out = []
    for name, shape, architecture, rows in (
        (DISCRIMINATOR_FOLDER, bert, "ElectraForPreTraining", discriminator_mappings(model)),
        (GENERATOR_FOLDER, generator, "ElectraForMaskedLM", generator_mappings(model)),
    ):
        path = f"{folder.rstrip('/')}/{name}"
        config = electra_config(shape, pad, architecture)
        write_hf_folder(path, config, tensors_of(model, hf_rows(rows)), vocab_file, bert.max_position)
        out.append(path)
    return out


def load_hf_electra(model: keras.Model, folder: str) -> list[str]:
    """Assigns an ELECTRA discriminator's folder (ElectraForPreTraining, or a bare ElectraModel)
    to `model`'s encoder, and its replaced-token head where both have one. Returns the weights that
    stay fresh (a generator, an MLM head, a pooler): the caller lists them."""
    rows = discriminator_mappings(model)
    optional = {m.ours for m in rows if m.google.startswith("discriminator_predictions/")}
    try:
        return assign_hf_tensors(model, folder, hf_rows(rows), optional, prefix="electra.")
    except HFCheckpointError as e:
        raise HFCheckpointError(
            f"{e} (an ELECTRA discriminator: ElectraForPreTraining or ElectraModel)"
        ) from None
