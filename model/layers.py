"""What both blocks build with (model/bert.py, model/modernbert.py): the package name Keras registers
our layers under, the GELU flavours, the initializer, the row gather, and Dropout with a choice of
random bits."""

from __future__ import annotations

import keras
from keras import ops

PACKAGE = "bertbeam"


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_approximate(x):
    """GELU's tanh approximation, as google-research/bert (registered, so saved models name it)."""
    return keras.activations.gelu(x, approximate=True)


# GELU flavours: exact erf (Hugging Face's "gelu") or the tanh approximation (google-research/bert's).
ACTIVATIONS = {"gelu": keras.activations.gelu, "gelu_approximate": gelu_approximate}


def initializer(stddev: float):
    """A new initializer for each weight. An unseeded Keras 3 initializer fixes its seed when it is
    created, so one object handed to two layers draws the same numbers for both (the segment
    embedding was the token embedding's first rows); Keras's MultiHeadAttention clones its own
    initializer per sublayer for the same reason."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def gather_rows(x, positions):
    """x (B, T, D), positions (B, Q) -> (B, Q, D): as a one-hot matmul, which XLA (and a TPU's
    matrix unit) runs far faster than a batched gather and its scatter gradient."""
    picker = ops.one_hot(positions, x.shape[1], dtype=x.dtype)  # (B, Q, T)
    return ops.einsum("bqt,btd->bqd", picker, x)


# === Dropout's random bits ===

# How the Dropout below draws its masks on Keras's JAX backend: "keras", Keras's own (threefry,
# a float32 uniform per element); "threefry16", the same generator, 16 bits per element (half the
# threefry work); "rbg32" and "rbg16", XLA's RngBitGenerator (Philox on a GPU) keyed from the same
# Keras seed. Every kind keeps an element with probability 1 - rate (16 bits: within 2^-17 of
# it) and scales it by 1 / (1 - rate). "keras" until bench/gpu.sh measures another faster on a
# GPU (docs/benchmarks/gpu.md); TensorFlow's Philox draws are unchanged by it.
DROPOUT_RNGS = ("keras", "threefry16", "rbg32", "rbg16")
dropout_rng = {"kind": "keras"}


def keep_mask(seed, shape, rate: float, kind: str):
    """(shape) bool, True with probability 1 - rate: `kind`'s bits (DROPOUT_RNGS but "keras")
    from `seed`, Keras's (2,) uint32 seed, compared with rate's share of their range."""
    import jax
    import jax.numpy as jnp

    width = 16 if kind.endswith("16") else 32
    dtype = jnp.uint16 if width == 16 else jnp.uint32
    seed = jnp.asarray(seed, jnp.uint32)
    if kind.startswith("rbg"):  # rbg's keys are 4 words: the seed, and the seed mixed with a constant
        key = jax.random.wrap_key_data(jnp.concatenate([seed, seed ^ jnp.uint32(0x9E3779B9)]), impl="rbg")
    else:
        key = jax.random.wrap_key_data(seed, impl="threefry2x32")
    threshold = min(round(rate * 2**width), 2**width - 1)
    return jax.random.bits(key, shape, dtype) >= jnp.asarray(threshold, dtype)


@keras.saving.register_keras_serializable(package=PACKAGE)
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout, its mask drawn as `dropout_rng["kind"]` says on Keras's JAX backend
    (Keras's own otherwise): the same layer, config and seed, so only the draw's cost differs."""

    def call(self, inputs, training=False):
        kind = dropout_rng["kind"]
        plain = kind == "keras" or self.noise_shape is not None or keras.backend.backend() != "jax"
        if plain or not training or self.rate == 0:
            return super().call(inputs, training=training)
        keep = keep_mask(self.seed_generator.next(), inputs.shape, self.rate, kind)
        return ops.where(keep, inputs / ops.cast(1 - self.rate, inputs.dtype), ops.zeros_like(inputs))
