"""ModernBERT's block (Warner et al. 2024; answerdotai/ModernBERT) in the same Keras house as BERT's,
smallest piece first: rotary positions -> the sliding window -> attention -> the block.

The encoder around it is encoder.py's (`encoder_layers` builds these blocks when the config says
`architecture: modernbert`), and so are the pretraining heads, `encoder_from` and everything in
launch/: only the block and the embeddings differ. As transformers' ModernBertModel:

  embeddings   token embedding -> LayerNorm (no bias) -> dropout; no segments, no position table
  block        x + Wo(attention(norm(x)))      the first block has no norm there (x is normalised)
               x + Wo(gelu(a) * g), (a, g) = Wi(norm(x))                              GeGLU
  attention    fused QKV, no biases, RoPE on q and k (in float32), scaled by head_dim^-0.5,
               through keras.ops.dot_product_attention (a fused kernel where the device has one);
               global on layer i when i % global_attn_every_n_layers == 0 (RoPE base 160,000),
               else a token sees those within local_attention // 2 on either side (base 10,000)
  encoder      the blocks -> a final LayerNorm (no bias)
  MLM head     dense (no bias) -> gelu -> LayerNorm -> the tied embedding + a bias

Segment ids are taken and ignored (pairs are [CLS] A [SEP] B [SEP]), so a ModernBERT model has
the inputs a BERT has and every data path, export signature and classifier feeds it unchanged.
Rows that pack several documents keep attention within each, as BERT's do.

Shapes: B batch, T sequence, H hidden, N heads, D head width (H / N), C the local layers' chunk
(local_attention // 2), K chunks (ceil(T / C)).
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from model.layers import ACTIVATIONS, PACKAGE, Dropout, gather_rows, initializer

# A masked score, when attention dropout writes the scores out: far below any real one, and finite.
MASKED = -1e9


# === Rotary positions ===


def rotary_tables(seq_len: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (T, D) of RoPE at positions 0..T-1, as transformers builds them: frequencies
    theta^(-2i/D) for i < D/2, each used twice (the halves `rotate_half` pairs up). Constants of
    the static T: XLA folds them into the graph."""
    inverse = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)  # (D/2,)
    angles = np.arange(seq_len, dtype=np.float32)[:, None] * inverse[None]  # float32, as torch does
    angles = np.concatenate([angles, angles], axis=-1)  # (T, D)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotate(x, cos, sin):
    """RoPE on x (B, T, N, D), computed in float32 (as transformers does) and returned in x's dtype."""
    y = ops.cast(x, "float32")
    half = y.shape[-1] // 2
    rotated = ops.concatenate([-y[..., half:], y[..., :half]], axis=-1)  # rotate_half
    return ops.cast(y * cos[:, None, :] + rotated * sin[:, None, :], x.dtype)


# === The sliding window ===


def band(seq_len: int, local_attention: int) -> np.ndarray:
    """(T, T) bool: query i may see key j when |i - j| <= local_attention // 2 (transformers'
    `sliding_window_bidirectional_overlay` with ModernBertConfig.sliding_window)."""
    positions = np.arange(seq_len)
    return np.abs(positions[:, None] - positions[None, :]) <= local_attention // 2


def attention_ids(input_mask, document_ids):
    """(B, T) int32: 0 on padding, else the token's document id + 1. Query i sees key j when both
    have the same id: BERT's `attention_mask` (same document, real key; padding sees padding) kept
    per token, so that a local layer can cut its window's keys from it without a (T, T) mask."""
    return ops.where(ops.cast(input_mask, "bool"), ops.cast(document_ids, "int32") + 1, 0)


def _visible(query_ids, key_ids):
    """(..., Tq), (..., Tk) -> (..., Tq, Tk) bool. A padding query (id 0) sees the padding keys,
    so that no row is masked whole: a fused kernel's softmax over nothing may give NaN, which
    would reach real rows through the next layer's zero weights (0 x NaN)."""
    return ops.equal(query_ids[..., :, None], key_ids[..., None, :])


def attend(q, k, v, visible, dropout: keras.layers.Layer, training):
    """Scaled dot-product attention: q (B, Tq, N, D), k and v (B, Tk, N, D), visible (B, 1, Tq, Tk)
    -> (B, Tq, N, D). Without attention dropout, keras.ops.dot_product_attention, as Keras's
    MultiHeadAttention calls it: one fused kernel where Keras finds the device and shapes fit (the
    global flag passed on, which the op alone would not read); else the scores written out, the
    softmax in float32 (its exponent's range, as transformers), then the dropout."""
    scale = q.shape[-1] ** -0.5
    if dropout.rate == 0:
        fused = keras.config.is_flash_attention_enabled()  # None: Keras's choice; False: disabled
        return ops.dot_product_attention(q, k, v, mask=visible, scale=scale, flash_attention=fused)
    scores = ops.einsum("bqnd,bknd->bnqk", q, k) * ops.cast(scale, q.dtype)  # (B, N, Tq, Tk)
    scores = ops.where(visible, ops.cast(scores, "float32"), MASKED)
    weights = dropout(ops.cast(ops.softmax(scores, axis=-1), v.dtype), training=training)
    return ops.einsum("bnqk,bknd->bqnd", weights, v)


def global_attention(q, k, v, ids, dropout, training, window_mask=None):
    """Every query against every key (those within `window_mask` (T, T), when given): q, k, v
    (B, T, N, D), ids (B, T) -> (B, T, N, D)."""
    visible = _visible(ids, ids)  # (B, T, T)
    if window_mask is not None:
        visible = ops.logical_and(visible, window_mask)
    return attend(q, k, v, visible[:, None], dropout, training)


def local_attention(q, k, v, ids, window: int, dropout, training):
    """Each query against the keys within window // 2 of it, in chunks of C = window // 2 tokens:
    chunk k's queries see at most chunks k-1, k and k+1, so each scores 3C keys instead of T and
    the layer's cost grows linearly in T. Static shapes: T is padded to K C with keys that no
    real query sees; the K chunks go to `attend` as a batch of B K rows of C queries and 3C keys.
    q, k, v (B, T, N, D), ids (B, T) -> (B, T, N, D); exactly `band`'s mask."""
    t = q.shape[1]
    c = max(window // 2, 1)
    chunks = -(-t // c)
    pad = chunks * c - t

    def chunked(x):  # (B, T, ...) -> (B, K + 2, C, ...): a chunk of zeros on either side (ids 0: unseen)
        widths = [(0, 0), (c, c + pad)] + [(0, 0)] * (len(x.shape) - 2)
        x = ops.pad(x, widths)
        return ops.reshape(x, (-1, chunks + 2, c, *x.shape[2:]))

    def neighbours(x):  # (B, K + 2, C, ...) -> (B, K, 3C, ...): chunks k-1, k, k+1 side by side
        return ops.concatenate([x[:, :-2], x[:, 1:-1], x[:, 2:]], axis=2)

    def flat(x):  # (B, K, L, ...) -> (B K, L, ...)
        return ops.reshape(x, (-1, *x.shape[2:]))

    queries = chunked(q)[:, 1:-1]  # (B, K, C, N, D)
    keys, values = neighbours(chunked(k)), neighbours(chunked(v))  # (B, K, 3C, N, D)
    query_ids, key_ids = chunked(ids)[:, 1:-1], neighbours(chunked(ids))  # (B, K, C), (B, K, 3C)
    # Query r of chunk k is at k C + r, key s of its neighbourhood at (k - 1) C + s.
    offsets = np.arange(3 * c)[None, :] - c - np.arange(c)[:, None]  # (C, 3C): key - query
    visible = ops.logical_and(_visible(query_ids, key_ids), np.abs(offsets) <= window // 2)  # (B, K, C, 3C)
    context = attend(flat(queries), flat(keys), flat(values), flat(visible)[:, None], dropout, training)
    context = ops.reshape(context, (-1, chunks * c, *q.shape[2:]))  # (B, K C, N, D)
    return context[:, :t]  # (B, T, N, D)


# === The block ===


@keras.saving.register_keras_serializable(package=PACKAGE)
class ModernBlock(keras.layers.Layer):
    """ModernBERT's pre-norm block: rotary self-attention (global, or within a sliding window),
    then a GeGLU feed-forward, each added to the residual; no biases.

    Not Keras's MultiHeadAttention: that layer has no hook to rotate q and k between its
    projections and its scores, and the sliding window runs in chunks (`local_attention`) that it
    has no notion of. The attention itself is keras.ops.dot_product_attention, as that layer's is."""

    architecture = "modernbert"

    def __init__(
        self,
        *,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        rope_theta: float,
        local_attention: int | None = None,
        first: bool = False,
        dropout: float = 0.0,
        attention_dropout: float | None = None,
        initializer_range: float = 0.02,
        output_initializer_range: float = 0.02,
        layer_norm_epsilon: float = 1e-5,
        hidden_act: str = "gelu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.rope_theta = rope_theta
        self.local_attention = local_attention  # None: a global layer
        self.first = first  # the first block reads normalised embeddings: no attention norm
        self.dropout = dropout
        self.attention_rate = attention_dropout  # on the attention probabilities; None: dropout
        self.initializer_range = initializer_range
        self.output_initializer_range = output_initializer_range  # ModernBERT: 0.02 / sqrt(2 layers)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.hidden_act = hidden_act
        self.head_dim = hidden_size // num_heads

        # === Layers ===
        def dense(units, stddev, name):
            return keras.layers.Dense(
                units, use_bias=False, kernel_initializer=initializer(stddev), name=name
            )

        def norm(name):
            return keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, center=False, name=name)

        self.attention_norm = (
            keras.layers.Identity(name="attention_norm") if first else norm("attention_norm")
        )
        self.qkv = dense(3 * hidden_size, initializer_range, "qkv")
        self.attention_probs_dropout = Dropout(
            dropout if attention_dropout is None else attention_dropout, name="attention_probs_dropout"
        )
        self.attention_output = dense(hidden_size, output_initializer_range, "attention_output")
        self.attention_dropout = Dropout(dropout, name="attention_dropout")
        self.mlp_norm = norm("mlp_norm")
        self.mlp_input = dense(2 * intermediate_size, initializer_range, "mlp_input")
        self.mlp_dropout = Dropout(dropout, name="mlp_dropout")
        self.mlp_output = dense(hidden_size, output_initializer_range, "mlp_output")

    def build(self, input_shape):
        self.attention_norm.build(input_shape)
        self.qkv.build(input_shape)
        self.attention_output.build(input_shape)
        self.mlp_norm.build(input_shape)
        self.mlp_input.build(input_shape)
        self.mlp_output.build((*input_shape[:-1], self.intermediate_size))

    def call(self, x, attention_mask, query_positions=None, training=None):
        """x (B, T, H), attention_mask: `attention_ids` (B, T) -> (B, T, H); or, given
        query_positions (B, Q), those rows only (B, Q, H), the feed-forward on Q rows (as
        bert.TransformerBlock does)."""
        y = self.attend(self.attention_norm(x), attention_mask, training)  # (B, T, H)
        if query_positions is not None:
            x, y = gather_rows(x, query_positions), gather_rows(y, query_positions)  # (B, Q, H)
        x = x + self.attention_dropout(self.attention_output(y), training=training)
        gate_input, gate = ops.split(self.mlp_input(self.mlp_norm(x)), 2, axis=-1)  # (B, Q, I) each
        y = self.mlp_dropout(ACTIVATIONS[self.hidden_act](gate_input) * gate, training=training)
        return x + self.attention_dropout(self.mlp_output(y), training=training)

    def attend(self, x, ids, training=None):
        """Rotary multi-head self-attention: (B, T, H) -> (B, T, H), before the output projection."""
        seq_len = x.shape[1]  # static: the model is built for one T
        qkv = ops.reshape(self.qkv(x), (-1, seq_len, 3, self.num_heads, self.head_dim))  # (B, T, 3, N, D)
        cos, sin = rotary_tables(seq_len, self.head_dim, self.rope_theta)
        q, k, v = rotate(qkv[:, :, 0], cos, sin), rotate(qkv[:, :, 1], cos, sin), qkv[:, :, 2]
        dropout = self.attention_probs_dropout
        if self.local_attention is None:
            context = global_attention(q, k, v, ids, dropout, training)
        elif seq_len <= 3 * (self.local_attention // 2):  # chunks would score as many keys as T
            context = global_attention(q, k, v, ids, dropout, training, band(seq_len, self.local_attention))
        else:
            context = local_attention(q, k, v, ids, self.local_attention, dropout, training)
        return ops.reshape(context, (-1, seq_len, self.hidden_size))

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "rope_theta": self.rope_theta,
            "local_attention": self.local_attention,
            "first": self.first,
            "dropout": self.dropout,
            "attention_dropout": self.attention_rate,
            "initializer_range": self.initializer_range,
            "output_initializer_range": self.output_initializer_range,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "hidden_act": self.hidden_act,
        }


def modern_blocks(config, prefix: str = "") -> list[ModernBlock]:
    """`config.num_layers` ModernBERT blocks, named `{prefix}transformer_{i}` like BERT's (so
    checkpoints, layer decay and `encoder_from` read them alike), global every
    `global_attn_every_n_layers` starting with the first."""
    return [
        ModernBlock(
            hidden_size=config.hidden_size,
            num_heads=config.num_heads,
            intermediate_size=config.intermediate_size,
            rope_theta=config.global_rope_theta if config.is_global(i) else config.local_rope_theta,
            local_attention=None if config.is_global(i) else config.local_attention,
            first=i == 0,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            initializer_range=config.initializer_range,
            output_initializer_range=config.initializer_range / math.sqrt(2.0 * config.num_layers),
            layer_norm_epsilon=config.layer_norm_epsilon,
            hidden_act=config.hidden_act,
            name=f"{prefix}transformer_{i}",
        )
        for i in range(config.num_layers)
    ]
