"""ELECTRA (Clark et al. 2020, google-research/electra): replaced-token detection, smallest piece
first: the generator's shape -> the token sampler -> the rows each network sees -> the build
function.

A small generator (a BERT of the same depth, `generator_size` of the discriminator's width, heads
and feed-forward) learns the masked LM on the row as the corpus masked it (BERT's 80 % [MASK],
10 % random, 10 % kept, stored or `--dynamic_masking`). Each selected position then gets a token
drawn from the generator's softmax, and the discriminator (the
encoder kept afterwards) reads the row with those tokens in place and says, for every real token,
whether it is the original. It learns from all T tokens of a row, not the 15 % masked, which is
why it learns more per FLOP than BERT's masked LM, most of all at small compute.

The two share the token, segment and position embeddings (and their LayerNorm): one layer, used
by both, so their gradients add up, as in ELECTRA. Where the generator is narrower than the
embeddings, a dense layer projects them to its width.

Outputs, both through `compile` (model/losses.py):
  "mlm" (B, P, V)  the generator's logits at the masked positions: BERT's masked-LM loss
  "rtd" (B, T, 2)  [..., 0] the discriminator's logit that each token was replaced, [..., 1] the
                   id it saw there (float32: exact for any vocab under 2^24). The target depends
                   on the generator's sample, so it travels with the prediction; the label from
                   the data is the original row, and the loss compares the two.

Shapes: B batch, T sequence, H hidden, E embedding width, P max_predictions, V vocab.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
import numpy as np
from keras import ops

from model.config import BertConfig
from model.encoder import (
    embed,
    encode,
    encoder_inputs,
    encoder_layers,
    layer_norm,
    run_blocks,
    transformer_blocks,
)
from model.layers import ACTIVATIONS, PACKAGE, initializer
from model.masked_lm import masked_lm_logits

GENERATOR = "generator_"  # the prefix of every generator layer's name
# ELECTRA's inputs beyond the encoder's: which positions are masked and their original tokens.
MASK_INPUTS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")


def generator_config(config: BertConfig, size: float) -> BertConfig:
    """The generator's shape: `size` of the discriminator's hidden size, heads and feed-forward
    (at least one head), the same depth. ELECTRA-Small and -Base use 1/4 and 1/3."""
    hidden = max(1, round(config.hidden_size * size))
    heads = max(1, round(config.num_heads * size))
    if hidden % heads:
        raise ValueError(
            f"generator_size {size}: a generator of hidden size {hidden} does not split into {heads} heads"
        )
    return dataclasses.replace(
        config,
        hidden_size=hidden,
        num_heads=heads,
        intermediate_size=max(1, round(config.intermediate_size * size)),
        # The embeddings are the discriminator's (width E); a projection brings them to `hidden`.
        embedding_size=config.embedding_width,
    )


# === Layers ===


def _mix(x):
    """A 32-bit integer hash (Wellons's lowbias32 finalizer): uint32 shifts, xors and wrapping
    multiplies, which TensorFlow and JAX compute alike, eagerly and under XLA."""
    x = ops.bitwise_xor(x, ops.right_shift(x, 16))
    x = ops.multiply(x, ops.convert_to_tensor(np.uint32(0x7FEB352D)))
    x = ops.bitwise_xor(x, ops.right_shift(x, 15))
    x = ops.multiply(x, ops.convert_to_tensor(np.uint32(0x846CA68B)))
    return ops.bitwise_xor(x, ops.right_shift(x, 16))


def _uniform(seed, like):
    """One float32 in (0, 1) per element of `like`, from `seed` (a SeedGenerator's two words) and
    the element's flat index: the hash's top 23 bits, centred ((k + 0.5) / 2**23, exact)."""
    seed = ops.cast(seed, "uint32")
    key = _mix(ops.bitwise_xor(_mix(seed[0]), seed[1]))
    flat = ops.reshape(ops.ones_like(like, dtype="int32"), (-1,))
    index = ops.cast(ops.reshape(ops.cumsum(flat) - 1, ops.shape(like)), "uint32")
    bits = ops.right_shift(_mix(ops.bitwise_xor(_mix(index), key)), 9)
    return (ops.cast(bits, "float32") + 0.5) * (1.0 / (1 << 23))


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenSampler(keras.layers.Layer):
    """One token id per row of logits (B, P, V) -> (B, P) int32, drawn from their softmax, never
    one of `excluded_ids` ([PAD], [CLS], [SEP], [MASK], [UNK] and unused slots: probability 0).

    By the inverse of the cumulative distribution: one uniform draw per row, and the sample is
    the first id whose cumulative probability reaches it (a count of the ids below it: static
    shapes, no gather). The Gumbel-max trick (argmax of logits + Gumbel noise) samples exactly as
    well but draws V random numbers per row: on XLA:CPU that doubled an ELECTRA step of the tiny
    model (vocab 8,000). No gradient flows through the sample.

    Its randomness is a Keras SeedGenerator: a variable, so a checkpoint holds its state and a
    resumed run draws exactly the samples an uninterrupted one would. Each call advances it, so the
    draw is a function of `seed` and the step. The uniform draw is a counter-based hash of that
    state and each row's index in 32-bit integer arithmetic (`_uniform`), not the backend's
    generator: TensorFlow and JAX then draw the same numbers, so the same weights and batch give
    the same samples, and the same loss, under either (tests/launch/test_backends.py). Computes
    in float32 under any dtype policy: the cumulative sum over V needs the precision."""

    def __init__(self, excluded_ids: Sequence[int] = (), seed: int | None = None, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.excluded_ids = tuple(int(i) for i in excluded_ids)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed, name="sampler_seed")

    def build(self, input_shape):
        vocab = input_shape[-1]
        self.exclusion = np.zeros((vocab,), np.float32)
        self.exclusion[[i for i in self.excluded_ids if i < vocab]] = -np.inf

    def call(self, logits):
        logits = ops.stop_gradient(ops.cast(logits, "float32")) + self.exclusion
        cumulative = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)  # (B, P, V)
        # u in (0, total): never 0, so a leading id of probability 0 is never the first to reach it.
        u = _uniform(self.seed_generator.next(), logits[..., 0])
        u = u[..., None] * cumulative[..., -1:]  # the total, 1 up to rounding
        return ops.cast(ops.sum(ops.cast(cumulative < u, "int32"), axis=-1), "int32")

    def compute_output_spec(self, logits):
        return keras.KerasTensor(logits.shape[:-1], dtype="int32")

    def get_config(self):
        return {**super().get_config(), "excluded_ids": list(self.excluded_ids), "seed": self.seed}


# === The rows each network sees ===


def place(row, positions, values, weights):
    """`row` (B, T) with `values` (B, P) written at `positions` (B, P) where `weights` > 0, and
    which positions that was: ((B, T) int32, (B, T) bool). One-hot sums, static shapes (a scatter
    is slower under XLA on CPU, and on a TPU's matrix unit)."""
    hit = ops.one_hot(positions, row.shape[1], dtype="int32")  # (B, P, T)
    hit = hit * ops.cast(weights > 0, "int32")[:, :, None]
    selected = ops.sum(hit, axis=1) > 0  # (B, T)
    placed = ops.sum(hit * values[:, :, None], axis=1)
    return ops.where(selected, placed, row), selected


def original_row(inputs: dict):
    """The row before masking (the stored 80/10/10 masks undone) and its masked positions."""
    return place(inputs["input_ids"], inputs["masked_lm_positions"], inputs["masked_lm_ids"],
                 inputs["masked_lm_weights"])  # fmt: skip


# === Functional model ===


def build_electra_model(
    config: BertConfig,
    seq_len: int,
    max_predictions: int,
    *,
    excluded_ids: Sequence[int],
    generator_size: float = 0.25,
    seed: int | None = None,
) -> keras.Model:
    """Generator + discriminator in one flat graph: {"mlm": (B, P, V), "rtd": (B, T, 2)} (module
    docstring). The discriminator's layers carry the encoder's names (`token_embedding`,
    `transformer_0`, ...), so `encoder_from` and fine-tuning read it as they read a BERT."""
    if seq_len > config.max_position:
        raise ValueError(f"seq_len {seq_len} exceeds the model's max_position {config.max_position}")
    inputs = encoder_inputs(seq_len)
    inputs["masked_lm_positions"] = keras.Input((max_predictions,), dtype="int32", name="masked_lm_positions")
    inputs["masked_lm_ids"] = keras.Input((max_predictions,), dtype="int32", name="masked_lm_ids")
    inputs["masked_lm_weights"] = keras.Input((max_predictions,), dtype="float32", name="masked_lm_weights")
    layers = encoder_layers(config)  # the discriminator
    small = generator_config(config, generator_size)
    stddev = config.initializer_range
    generator = {
        "embedding_projection": keras.layers.Dense(
            small.hidden_size, kernel_initializer=initializer(stddev), name=f"{GENERATOR}embedding_projection"
        )
        if small.hidden_size != config.embedding_width
        else None,
        "blocks": transformer_blocks(small, prefix=GENERATOR),
        "final_norm": layer_norm(config, f"{GENERATOR}final_norm") if config.final_norm else None,
    }

    # Generator: the row as masked (80/10/10); its last block only at the P selected positions.
    # Not every selected token replaced by [MASK]: measured on general English (tiny, 2 cores),
    # a generator that never sees a selected token kept stayed on the unigram plateau (masked-LM
    # accuracy 0.04) for 1,500 steps, even at the discriminator's width with no RTD loss, and the
    # discriminator with it at the prior; with the kept 10 % it leaves the plateau by step 900, as
    # BERT does. ELECTRA's own masking also leaves some selected tokens in place.
    x, mask = embed(layers, inputs)  # (B, T, E), (B, T, T)
    hidden = run_blocks(generator, x, mask, query_positions=inputs["masked_lm_positions"])  # (B, P, Hg)
    logits = masked_lm_logits(
        hidden,
        layers["token_embedding"],
        width=config.embedding_width,
        # Exact GELU whatever hidden_act says: Hugging Face's ElectraGeneratorPredictions fixes it.
        activation=ACTIVATIONS["gelu"],
        epsilon=config.layer_norm_epsilon,
        stddev=stddev,
        prefix=GENERATOR,
        tokens=config.tokenizer_size,
    )  # (B, P, V)
    mlm = keras.layers.Activation("linear", dtype="float32", name="mlm")(logits)

    # Discriminator: the original row with each selected position replaced by a sample.
    original, _ = original_row(inputs)  # (B, T): the stored masks undone
    sampled = TokenSampler(excluded_ids, seed, name=f"{GENERATOR}sampler")(mlm)  # (B, P), no gradient
    shown, _ = place(original, inputs["masked_lm_positions"], sampled, inputs["masked_lm_weights"])
    encoded = encode(layers, {**inputs, "input_ids": shown})  # (B, T, H): every token is scored
    h = keras.layers.Dense(
        config.hidden_size,
        activation=ACTIVATIONS[config.hidden_act],
        kernel_initializer=initializer(stddev),
        name="rtd_transform",
    )(encoded)
    replaced_logit = keras.layers.Dense(1, kernel_initializer=initializer(stddev), name="rtd_logits")(
        h
    )  # (B, T, 1)
    packed = ops.concatenate(
        [ops.cast(replaced_logit, "float32"), ops.cast(shown, "float32")[:, :, None]], -1
    )
    rtd = keras.layers.Activation("linear", dtype="float32", name="rtd")(packed)
    return keras.Model(inputs, {"mlm": mlm, "rtd": rtd}, name="electra_pretraining")
