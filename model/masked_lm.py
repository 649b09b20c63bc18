"""BERT's pretraining model: the encoder with the masked-LM head (tied to the token embedding) and,
for pair corpora, the NSP/SOP head on the pooled [CLS]. ELECTRA's generator reuses the head.

Shapes: B batch, T sequence (seq_len), H hidden, E embedding width, P max_predictions, V vocab.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from model.config import BertConfig
from model.encoder import encode, encoder_inputs, encoder_layers
from model.layers import ACTIVATIONS, PACKAGE, initializer

# === Layers ===


# A padded row's logit: no probability beside any real one (exp(-1e4) is 0 in float32), and
# finite in float16 and bfloat16, so that an export can state it as the row's output bias.
MASKED_LOGIT = -1e4


@keras.saving.register_keras_serializable(package=PACKAGE)
class BiasAdd(keras.layers.Layer):
    """A learned bias over the last axis: the MLM output bias beside the tied embedding. With
    `tokens` (a padded vocab, `BertConfig.tokenizer_size`), the rows from `tokens` on give
    MASKED_LOGIT whatever their weights, and so no gradient."""

    def __init__(self, tokens: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.tokens = tokens

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(input_shape[-1],), initializer="zeros")

    def call(self, x):
        x = x + ops.cast(self.bias, x.dtype)
        if self.tokens is None or self.tokens >= x.shape[-1]:
            return x
        real = np.arange(x.shape[-1]) < self.tokens  # a constant of the static V
        return ops.where(real, x, ops.cast(MASKED_LOGIT, x.dtype))

    def get_config(self):
        return {**super().get_config(), "tokens": self.tokens}


# === Functional models ===


def masked_lm_logits(x, token_embedding, *, width: int, activation, epsilon: float, stddev: float,
                     prefix: str = "", use_bias: bool = True, tokens: int | None = None):  # fmt: skip
    """The masked-LM head on the gathered positions (B, P, H): transform to E, activation,
    LayerNorm, then the output projection tied to the token embedding, plus a bias: (B, P, V),
    the rows past `tokens` (a padded vocab's) masked. Without `use_bias` (ModernBERT's head), the
    transform and the norm have none; the output bias stays."""
    h = keras.layers.Dense(
        width,
        activation=activation,
        use_bias=use_bias,
        kernel_initializer=initializer(stddev),
        name=f"{prefix}mlm_transform",
    )(x)
    h = keras.layers.LayerNormalization(epsilon=epsilon, center=use_bias, name=f"{prefix}mlm_norm")(h)
    return BiasAdd(tokens, name=f"{prefix}mlm_bias")(token_embedding(h, reverse=True))


def build_pretraining_model(
    config: BertConfig, seq_len: int, max_predictions: int, next_sentence: bool = False
) -> keras.Model:
    """Encoder + masked-LM head (+ NSP/SOP head): outputs {"mlm": (B, P, V)[, "nsp": (B, 2)]} logits.

    Pretraining reads the last block's output at P masked positions and at [CLS] only, so the last
    block's feed-forward runs on just those 1 + P rows: the same numbers as a full pass, for
    (1 + P) / T of that work (`TransformerBlock.call`). The MLM head's
    vocab-wide projection, tied to the token embedding, then runs on P positions, not T. One flat
    graph: the tied embedding is one layer called twice, which `clone_model` and saving keep tied.
    """
    if seq_len > config.max_position:
        raise ValueError(f"seq_len {seq_len} exceeds the model's max_position {config.max_position}")
    inputs = encoder_inputs(seq_len)
    inputs["masked_lm_positions"] = keras.Input((max_predictions,), dtype="int32", name="masked_lm_positions")
    layers = encoder_layers(config)
    cls = ops.zeros_like(inputs["masked_lm_positions"][:, :1])  # [CLS] is at position 0
    rows = ops.concatenate([cls, inputs["masked_lm_positions"]], axis=1)  # (B, 1 + P)
    encoded = encode(layers, inputs, query_positions=rows)  # (B, 1 + P, H)
    logits = masked_lm_logits(
        encoded[:, 1:, :],
        layers["token_embedding"],
        width=config.embedding_width,
        activation=ACTIVATIONS[config.hidden_act],
        epsilon=config.layer_norm_epsilon,
        # ModernBERT initialises its head's dense as its blocks' output projections.
        stddev=config.initializer_range / math.sqrt(2.0 * config.num_layers)
        if config.modern
        else config.initializer_range,
        use_bias=not config.modern,
        tokens=config.tokenizer_size,
    )  # (B, P, V)
    # Logits in float32 also under a bf16/fp16 policy: the softmax over V needs the range.
    outputs = {"mlm": keras.layers.Activation("linear", dtype="float32", name="mlm")(logits)}
    if next_sentence:
        pooler = keras.layers.Dense(
            config.hidden_size,
            activation="tanh",
            kernel_initializer=initializer(config.initializer_range),
            name="pooler",
        )
        nsp = keras.layers.Dense(
            2, kernel_initializer=initializer(config.initializer_range), name="nsp_logits"
        )(pooler(encoded[:, 0, :]))
        outputs["nsp"] = keras.layers.Activation("linear", dtype="float32", name="nsp")(nsp)
    return keras.Model(inputs, outputs, name="bert_pretraining")
