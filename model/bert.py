"""BERT's block (Devlin et al. 2018, google-research/bert): its learned position and one-hot segment
embeddings, the post-LN (or pre-LN) transformer block, and the attention mask that keeps packed
documents apart. `encoder.py` assembles them into the encoder.

Shapes: B batch, T sequence (seq_len), H hidden, Q query rows.
Every layer stores its constructor arguments and returns them from `get_config()`, and is
registered, so `clone_model` and `.keras` save/load work with no custom objects passed.
"""

from __future__ import annotations

import keras
from keras import ops

from model.layers import ACTIVATIONS, PACKAGE, Dropout, gather_rows, initializer

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
            initializer=initializer(self.initializer_range),
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
class OneHotEmbedding(keras.layers.Embedding):
    """keras.layers.Embedding, looked up as a one-hot matmul: for a small table (the 2 segment
    ids) that is as fast, and its gradient is dense. A gather's gradient is an IndexedSlices with
    one slice per token; Keras 3 optimizers apply such a gradient slice by slice (since
    keras-team/keras#18692), so Adam squares each slice before duplicate rows are summed, and the
    second moment of a row every token hits (segment 0) comes out as a sum of squares instead of a
    square of sums (seen with Keras 3.15). Should Keras sum duplicates first, the one-hot can stay
    for speed: google-research/bert looked segments up the same way."""

    def call(self, inputs):
        one_hot = ops.one_hot(inputs, self.input_dim, dtype=self.compute_dtype)  # (B, T, types)
        return ops.matmul(one_hot, ops.cast(self.embeddings, self.compute_dtype))


@keras.saving.register_keras_serializable(package=PACKAGE)
class TransformerBlock(keras.layers.Layer):
    """Self-attention + feed-forward, each with a residual and LayerNorm (post-LN as BERT, or pre-LN)."""

    architecture = "bert"

    def __init__(
        self,
        *,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-12,
        pre_layer_norm: bool = False,
        hidden_act: str = "gelu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.attention_rate = attention_dropout  # on the attention probabilities; None: dropout
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pre_layer_norm = pre_layer_norm
        self.hidden_act = hidden_act

        # === Layers ===
        # Without attention dropout, MultiHeadAttention computes through
        # keras.ops.dot_product_attention: one fused kernel (cuDNN's flash attention on a GPU, a
        # TPU's) where Keras finds the device and shapes fit, the plain XLA ops elsewhere (and
        # after keras.config.disable_flash_attention()). With it, the scores are written out.
        self.attention = keras.layers.MultiHeadAttention(
            num_heads,
            hidden_size // num_heads,
            dropout=dropout if attention_dropout is None else attention_dropout,
            kernel_initializer=initializer(initializer_range),
            name="attention",
        )
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="attention_norm"
        )
        self.attention_dropout = Dropout(dropout, name="attention_dropout")
        self.intermediate = keras.layers.Dense(
            intermediate_size,
            activation=ACTIVATIONS[hidden_act],
            kernel_initializer=initializer(initializer_range),
            name="intermediate",
        )
        self.output_dense = keras.layers.Dense(
            hidden_size, kernel_initializer=initializer(initializer_range), name="output"
        )
        self.output_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="output_norm")
        self.output_dropout = Dropout(dropout, name="output_dropout")

    def build(self, input_shape):
        self.attention.build(input_shape, input_shape)
        self.attention_norm.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))
        self.output_norm.build(input_shape)

    def call(self, x, attention_mask, query_positions=None, training=None):
        """x (B, T, H), attention_mask (B, T, T) -> (B, T, H); or, given query_positions (B, Q),
        only those Q rows: (B, Q, H), exactly what the full call gives there, with the
        feed-forward (the block's largest matmuls) on Q rows instead of T.

        Attention itself still runs on all T queries: on XLA:CPU (TF 2.21) the attention-dropout
        of a (B, heads, Q, T) score tensor with Q < T made the step 2x slower, not faster."""
        norm = self.attention_norm if self.pre_layer_norm else (lambda y: y)
        y = norm(x)
        y = self.attention(y, y, attention_mask=attention_mask, training=training)
        if query_positions is not None:
            x, y = gather_rows(x, query_positions), gather_rows(y, query_positions)  # (B, Q, H)
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
            "attention_dropout": self.attention_rate,
            "initializer_range": self.initializer_range,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "pre_layer_norm": self.pre_layer_norm,
            "hidden_act": self.hidden_act,
        }


def attention_mask(input_mask, document_ids):
    """(B, T, T): token i may attend to j when both belong to the same document and j is real, or
    both are padding.

    Rows that pack several documents keep attention within each; a row of one document gets the
    plain padding mask. A padding query sees the padding keys, so that no row is masked whole: a
    fused kernel's softmax over nothing may give NaN, which would reach real rows through the
    next layer's zero weights (0 x NaN); real rows are as before. Built with static shapes from
    two (B, T) inputs, no dynamic ops.
    """
    same_document = ops.equal(document_ids[:, :, None], document_ids[:, None, :])
    real = ops.cast(input_mask, "bool")
    real_key = ops.logical_and(same_document, real[:, None, :])
    padding_pair = ops.logical_not(ops.logical_or(real[:, :, None], real[:, None, :]))
    return ops.logical_or(real_key, padding_pair)
