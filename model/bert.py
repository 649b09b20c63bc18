"""A compact BERT from Keras built-in layers, smallest piece first:
position embedding -> transformer block -> encoder -> pretraining heads -> build functions.
The encoder and heads also carry ModernBERT's block (model/modernbert.py) when the config says
`architecture: modernbert`: its embeddings have no segments or position table, its norms no bias.

Shapes: B batch, T sequence (seq_len), H hidden, E embedding width (H unless set), P
max_predictions, V vocab.
Every custom layer stores its constructor arguments and returns them from `get_config()`, and is
registered, so `clone_model` and `.keras` save/load work with no custom objects passed.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from model.config import BertConfig
from model.layers import ACTIVATIONS, PACKAGE, gather_rows, initializer
from model.modernbert import attention_ids, modern_blocks

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
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pre_layer_norm = pre_layer_norm
        self.hidden_act = hidden_act

        # === Layers ===
        self.attention = keras.layers.MultiHeadAttention(
            num_heads,
            hidden_size // num_heads,
            dropout=dropout,
            kernel_initializer=initializer(initializer_range),
            name="attention",
        )
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="attention_norm"
        )
        self.attention_dropout = keras.layers.Dropout(dropout, name="attention_dropout")
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
        self.output_dropout = keras.layers.Dropout(dropout, name="output_dropout")

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
            "initializer_range": self.initializer_range,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "pre_layer_norm": self.pre_layer_norm,
            "hidden_act": self.hidden_act,
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
        "embedding_dropout": keras.layers.Dropout(config.dropout, name="embedding_dropout"),
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


def masked_lm_logits(x, token_embedding, *, width: int, activation, epsilon: float, stddev: float,
                     prefix: str = "", use_bias: bool = True):  # fmt: skip
    """The masked-LM head on the gathered positions (B, P, H): transform to E, activation,
    LayerNorm, then the output projection tied to the token embedding, plus a bias: (B, P, V).
    Without `use_bias` (ModernBERT's head), the transform and the norm have none; the output
    bias stays."""
    h = keras.layers.Dense(
        width,
        activation=activation,
        use_bias=use_bias,
        kernel_initializer=initializer(stddev),
        name=f"{prefix}mlm_transform",
    )(x)
    h = keras.layers.LayerNormalization(epsilon=epsilon, center=use_bias, name=f"{prefix}mlm_norm")(h)
    return BiasAdd(name=f"{prefix}mlm_bias")(token_embedding(h, reverse=True))


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
