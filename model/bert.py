"""A compact BERT from Keras built-in layers, smallest piece first:
position embedding -> transformer block -> encoder -> pretraining heads -> build functions.

Shapes: B batch, T sequence (seq_len), H hidden, P max_predictions, V vocab.
Every custom layer stores its constructor arguments and returns them from `get_config()`, and is
registered, so `clone_model` and `.keras` save/load work with no custom objects passed.
"""

from __future__ import annotations

import keras
from keras import ops

from model.config import BertConfig

PACKAGE = "bertbeam"


def _init(config: BertConfig):
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


# === Layers ===


@keras.saving.register_keras_serializable(package=PACKAGE)
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position 0..T-1 to its input (B, T, H)."""

    def __init__(self, max_position: int, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.max_position = max_position
        self.initializer_range = initializer_range

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_position, input_shape[-1]),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
        )

    def call(self, x):
        seq_len = x.shape[1]  # static: the model is built for one T
        return x + ops.cast(self.embeddings[:seq_len], x.dtype)[None]

    def get_config(self):
        return {
            **super().get_config(),
            "max_position": self.max_position,
            "initializer_range": self.initializer_range,
        }


@keras.saving.register_keras_serializable(package=PACKAGE)
class TransformerBlock(keras.layers.Layer):
    """Self-attention + feed-forward, each with a residual and LayerNorm (post-LN as BERT, or pre-LN)."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        pre_layer_norm: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pre_layer_norm = pre_layer_norm
        init = keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.attention = keras.layers.MultiHeadAttention(
            num_heads, hidden_size // num_heads, dropout=dropout, kernel_initializer=init, name="attention"
        )
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="attention_norm"
        )
        self.attention_dropout = keras.layers.Dropout(dropout, name="attention_dropout")
        # Exact-erf GELU, as BERT (not the tanh approximation).
        self.intermediate = keras.layers.Dense(
            intermediate_size, activation=keras.activations.gelu, kernel_initializer=init, name="intermediate"
        )
        self.output_dense = keras.layers.Dense(hidden_size, kernel_initializer=init, name="output")
        self.output_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="output_norm")
        self.output_dropout = keras.layers.Dropout(dropout, name="output_dropout")

    def build(self, input_shape):
        self.attention.build(input_shape, input_shape)
        self.attention_norm.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))
        self.output_norm.build(input_shape)

    def call(self, x, attention_mask, training=None):  # x (B, T, H), attention_mask (B, T, T)
        norm = self.attention_norm if self.pre_layer_norm else (lambda y: y)
        y = norm(x)
        y = self.attention(y, y, attention_mask=attention_mask, training=training)
        x = x + self.attention_dropout(y, training=training)
        if not self.pre_layer_norm:
            x = self.attention_norm(x)
        y = self.output_norm(x) if self.pre_layer_norm else x
        y = self.output_dense(self.intermediate(y))
        x = x + self.output_dropout(y, training=training)
        return x if self.pre_layer_norm else self.output_norm(x)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "dropout": self.dropout,
            "initializer_range": self.initializer_range,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "pre_layer_norm": self.pre_layer_norm,
        }


@keras.saving.register_keras_serializable(package=PACKAGE)
class BiasAdd(keras.layers.Layer):
    """A learned bias over the last axis: the MLM output bias beside the tied embedding."""

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(input_shape[-1],), initializer="zeros")

    def call(self, x):
        return x + ops.cast(self.bias, x.dtype)


def attention_mask(input_mask, document_ids):
    """(B, T, T): token i may attend to j when j is real and both belong to the same document.

    Rows that pack several documents keep attention within each; a row of one document gets the
    plain padding mask. Built with static shapes from two (B, T) inputs, no dynamic ops.
    """
    same_document = ops.equal(document_ids[:, :, None], document_ids[:, None, :])
    return ops.logical_and(same_document, ops.cast(input_mask, "bool")[:, None, :])


# === Functional models ===


def encoder_inputs(seq_len: int) -> dict:
    return {
        name: keras.Input((seq_len,), dtype="int32", name=name)
        for name in ("input_ids", "input_mask", "segment_ids", "document_ids")
    }


def _encode(config: BertConfig, inputs: dict):
    """The encoder graph on `inputs`: (sequence (B, T, H), pooled (B, H), token embedding layer)."""
    seq_len = inputs["input_ids"].shape[1]
    if seq_len > config.max_position:
        raise ValueError(f"seq_len {seq_len} exceeds the model's max_position {config.max_position}")
    init = _init(config)
    token_embedding = keras.layers.ReversibleEmbedding(
        config.vocab_size, config.hidden_size, embeddings_initializer=init, name="token_embedding"
    )
    segment_embedding = keras.layers.Embedding(
        config.type_vocab_size, config.hidden_size, embeddings_initializer=init, name="segment_embedding"
    )
    x = token_embedding(inputs["input_ids"]) + segment_embedding(inputs["segment_ids"])  # (B, T, H)
    x = PositionEmbedding(config.max_position, config.initializer_range, name="position_embedding")(x)
    x = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="embedding_norm")(x)
    x = keras.layers.Dropout(config.dropout, name="embedding_dropout")(x)
    mask = attention_mask(inputs["input_mask"], inputs["document_ids"])  # (B, T, T)
    for i in range(config.num_layers):
        x = TransformerBlock(
            config.hidden_size,
            config.num_heads,
            config.intermediate_size,
            config.dropout,
            config.initializer_range,
            config.layer_norm_epsilon,
            config.pre_layer_norm,
            name=f"transformer_{i}",
        )(x, attention_mask=mask)
    if config.pre_layer_norm:
        x = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="final_norm")(x)
    x = keras.layers.Identity(name="sequence_output")(x)  # a stable name for `encoder_from`
    pooler = keras.layers.Dense(config.hidden_size, activation="tanh", kernel_initializer=init, name="pooler")
    return x, pooler(x[:, 0, :]), token_embedding  # pooled from [CLS]


def build_pretraining_model(
    config: BertConfig, seq_len: int, max_predictions: int, next_sentence: bool = False
) -> keras.Model:
    """Encoder + masked-LM head (+ NSP/SOP head): outputs {"mlm": (B, P, V)[, "nsp": (B, 2)]} logits.

    The MLM head gathers the P masked positions first, so the V-wide projection (tied to the token
    embedding) runs on P positions, not T. One flat graph: the tied embedding is one layer called
    twice, which `clone_model` and saving keep tied.
    """
    inputs = encoder_inputs(seq_len)
    inputs["masked_lm_positions"] = keras.Input((max_predictions,), dtype="int32", name="masked_lm_positions")
    sequence, pooled, token_embedding = _encode(config, inputs)
    picked = ops.take_along_axis(sequence, inputs["masked_lm_positions"][:, :, None], axis=1)  # (B, P, H)
    h = keras.layers.Dense(
        config.hidden_size,
        activation=keras.activations.gelu,
        kernel_initializer=_init(config),
        name="mlm_transform",
    )(picked)
    h = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="mlm_norm")(h)
    logits = BiasAdd(name="mlm_bias")(token_embedding(h, reverse=True))  # (B, P, V)
    # Logits in float32 also under a bf16/fp16 policy: the softmax over V needs the range.
    outputs = {"mlm": keras.layers.Activation("linear", dtype="float32", name="mlm")(logits)}
    if next_sentence:
        nsp = keras.layers.Dense(2, kernel_initializer=_init(config), name="nsp_logits")(pooled)
        outputs["nsp"] = keras.layers.Activation("linear", dtype="float32", name="nsp")(nsp)
    return keras.Model(inputs, outputs, name="bert_pretraining")


def encoder_from(pretraining_model: keras.Model) -> keras.Model:
    """The encoder inside a pretraining model, sharing its weights: inputs without the masked
    positions -> {"sequence_output": (B, T, H), "pooled_output": (B, H)}.

    A model trained without the NSP/SOP head never used its pooler, so none is in its graph; the
    encoder then gets an untrained one (as RoBERTa's is), initialised from a fixed seed so that
    every encoder taken from the same model, exported or not, has the same pooler.
    """
    inputs = {k: v for k, v in pretraining_model.input.items() if k != "masked_lm_positions"}
    sequence = pretraining_model.get_layer("sequence_output").output
    if any(layer.name == "pooler" for layer in pretraining_model.layers):
        pooled = pretraining_model.get_layer("pooler").output
    else:
        width = sequence.shape[-1]
        init = keras.initializers.TruncatedNormal(stddev=0.02, seed=0)
        pooled = keras.layers.Dense(width, activation="tanh", kernel_initializer=init, name="pooler")(
            sequence[:, 0, :]
        )
    return keras.Model(inputs, {"sequence_output": sequence, "pooled_output": pooled}, name="bert_encoder")
