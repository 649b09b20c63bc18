"""The encoder both blocks share, smallest piece first: its inputs -> the embedding layers ->
the blocks (BERT's, `bert.py`, or ModernBERT's, `modernbert.py`, as the config says) -> the
encoder model with its pooler. Heads build on it: the masked LM (`masked_lm.py`), ELECTRA
(`electra.py`), the task heads (`tasks/`).

ModernBERT's embeddings have no segments or position table, and its norms no bias.
Shapes: B batch, T sequence (seq_len), H hidden, E embedding width (H unless set), Q query rows.
"""

from __future__ import annotations

import keras

from model.bert import OneHotEmbedding, PositionEmbedding, TransformerBlock, attention_mask
from model.config import BertConfig
from model.layers import Dropout, initializer
from model.modernbert import attention_ids, modern_blocks

# === The encoder's layers ===


# A task model's inputs: each row is one document (its document_ids are its input_mask), so raw
# text encodes to these three (launch/finetune/text_encoder.py), and serving signatures take them.
TASK_INPUTS = ("input_ids", "input_mask", "segment_ids")


def task_sequence(encoder: keras.Model) -> tuple[dict, keras.KerasTensor]:
    """A task model's inputs (TASK_INPUTS, one document per row) and the encoder's sequence output
    on them (B, T, H), through the encoder without its pooler: no weight that nothing reads."""
    seq_len = encoder.input["input_ids"].shape[1]
    inputs = {name: keras.Input((seq_len,), dtype="int32", name=name) for name in TASK_INPUTS}
    sequence = keras.Model(
        encoder.input, {"sequence_output": encoder.output["sequence_output"]}, name=encoder.name
    )
    return inputs, sequence({**inputs, "document_ids": inputs["input_mask"]})["sequence_output"]


def encoder_inputs(seq_len: int) -> dict:
    return {
        name: keras.Input((seq_len,), dtype="int32", name=name)
        for name in ("input_ids", "input_mask", "segment_ids", "document_ids")
    }


def layer_norm(config: BertConfig, name: str) -> keras.layers.LayerNormalization:
    """A LayerNorm of `config`'s epsilon; ModernBERT's have no bias (`center`)."""
    return keras.layers.LayerNormalization(
        epsilon=config.layer_norm_epsilon, center=not config.modern, name=name
    )


def encoder_layers(config: BertConfig) -> dict:
    """The encoder's layers, by the names checkpoints and `encoder_from` know them by. ModernBERT
    has no segment or position embedding (None here): its blocks rotate q and k instead."""
    stddev = config.initializer_range
    width = config.embedding_width
    return {
        "token_embedding": keras.layers.ReversibleEmbedding(
            config.vocab_size,
            width,
            embeddings_initializer=initializer(stddev),
            name="token_embedding",
        ),
        "segment_embedding": None
        if config.modern
        else OneHotEmbedding(
            config.type_vocab_size,
            width,
            embeddings_initializer=initializer(stddev),
            name="segment_embedding",
        ),
        "position_embedding": None
        if config.modern
        else PositionEmbedding(config.max_position, stddev, name="position_embedding"),
        "embedding_norm": layer_norm(config, "embedding_norm"),
        "embedding_dropout": Dropout(config.dropout, name="embedding_dropout"),
        "embedding_projection": keras.layers.Dense(
            config.hidden_size, kernel_initializer=initializer(stddev), name="embedding_projection"
        )
        if width != config.hidden_size
        else None,
        "blocks": transformer_blocks(config),
        "final_norm": layer_norm(config, "final_norm") if config.final_norm else None,
    }


def transformer_blocks(config: BertConfig, prefix: str = "") -> list[keras.layers.Layer]:
    """`num_layers` blocks of `config`'s shape and architecture, named `{prefix}transformer_{i}`."""
    if config.modern:
        return modern_blocks(config, prefix)
    return [
        TransformerBlock(
            hidden_size=config.hidden_size,
            num_heads=config.num_heads,
            intermediate_size=config.intermediate_size,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            initializer_range=config.initializer_range,
            layer_norm_epsilon=config.layer_norm_epsilon,
            pre_layer_norm=config.pre_layer_norm,
            hidden_act=config.hidden_act,
            name=f"{prefix}transformer_{i}",
        )
        for i in range(config.num_layers)
    ]


def embed(layers: dict, inputs: dict):
    """(token + segment + position embeddings, normalised: (B, T, E); attention mask (B, T, T)).
    ModernBERT: the token embedding alone, normalised, and the mask as its blocks take it
    (`modernbert.attention_ids`, (B, T))."""
    x = layers["token_embedding"](inputs["input_ids"])
    if layers["segment_embedding"] is not None:
        x = x + layers["segment_embedding"](inputs["segment_ids"])
    if layers["position_embedding"] is not None:
        x = layers["position_embedding"](x)
    x = layers["embedding_dropout"](layers["embedding_norm"](x))
    if is_modern(layers):
        return x, attention_ids(inputs["input_mask"], inputs["document_ids"])
    return x, attention_mask(inputs["input_mask"], inputs["document_ids"])


def is_modern(layers: dict) -> bool:
    """The encoder's blocks are ModernBERT's."""
    return layers["blocks"][0].architecture == "modernbert"


def run_blocks(layers: dict, x, mask, query_positions=None):
    """Embeddings (B, T, E) through the projection to H (when E != H), every block and the final
    norm (pre-LN): (B, T, H); or, given `query_positions` (B, Q), the last block computes only
    those rows: (B, Q, H)."""
    if layers["embedding_projection"] is not None:
        x = layers["embedding_projection"](x)
    blocks = layers["blocks"]
    for block in blocks[:-1]:
        x = block(x, attention_mask=mask)
    if query_positions is None:
        x = blocks[-1](x, attention_mask=mask)
    else:
        x = blocks[-1](x, attention_mask=mask, query_positions=query_positions)
    return layers["final_norm"](x) if layers["final_norm"] is not None else x


def encode(layers: dict, inputs: dict, query_positions=None):
    """All blocks on all T tokens, except that the last one computes only `query_positions`
    when given: (B, T, H), or (B, Q, H)."""
    x, mask = embed(layers, inputs)
    return run_blocks(layers, x, mask, query_positions)


# === Functional models ===


def encoder_from(pretraining_model: keras.Model) -> keras.Model:
    """The encoder inside a pretraining model (BERT's, or ELECTRA's discriminator), sharing its
    weights: inputs without the masked positions -> {"sequence_output": (B, T, H),
    "pooled_output": (B, H)}, every block on all T.

    A model trained without the NSP/SOP head never used its pooler, so none is in its graph; the
    encoder then gets an untrained one (as RoBERTa's is), initialised from a fixed seed so that
    every encoder taken from the same model, exported or not, has the same pooler.
    """
    model = pretraining_model
    names = {layer.name for layer in model.layers}
    layers = {name: model.get_layer(name) if name in names else None for name in ENCODER_LAYERS}
    layers["blocks"] = [model.get_layer(f"transformer_{i}") for i in range(count_blocks(names))]
    pooler = model.get_layer("pooler") if "pooler" in names else None
    return _encoder_model(layers, model.input["input_ids"].shape[1], pooler)


def build_encoder(config: BertConfig, seq_len: int) -> keras.Model:
    """A fresh encoder with a pooler, laid out (and named) as `encoder_from` gives it: what
    fine-tuning loads a checkpoint's encoder weights into, whatever objective trained them."""
    return _encoder_model(encoder_layers(config), seq_len, None)


# The encoder's single layers by name (the blocks are `transformer_0`, `transformer_1`, ...).
ENCODER_LAYERS = ("token_embedding", "segment_embedding", "position_embedding", "embedding_norm",
                  "embedding_dropout", "embedding_projection", "final_norm")  # fmt: skip


def _encoder_model(layers: dict, seq_len: int, pooler) -> keras.Model:
    inputs = encoder_inputs(seq_len)
    sequence = encode(layers, inputs)
    if pooler is None:
        width = sequence.shape[-1]
        init = keras.initializers.TruncatedNormal(stddev=0.02, seed=0)
        pooler = keras.layers.Dense(width, activation="tanh", kernel_initializer=init, name="pooler")
    outputs = {
        "sequence_output": keras.layers.Identity(name="sequence_output")(sequence),
        "pooled_output": pooler(sequence[:, 0, :]),
    }
    return keras.Model(inputs, outputs, name="bert_encoder")


def weights_by_path(model: keras.Model) -> dict[str, keras.Variable]:
    """The model's weights by their Keras path (`transformer_0/intermediate/kernel`): stable,
    since every layer is named; what checkpoints and the Google / Hugging Face mappings key on."""
    return {w.path: w for w in model.weights}


def count_blocks(names: set[str], prefix: str = "") -> int:
    """Transformer blocks in a model, from its layer names (transformer_0, transformer_1, ...;
    ELECTRA's generator: generator_transformer_0, ...)."""
    count = 0
    while f"{prefix}transformer_{count}" in names:
        count += 1
    return count
