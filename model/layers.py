"""What both blocks build with (model/bert.py, model/modernbert.py): the package name Keras registers
our layers under, the GELU flavours, the initializer, and the row gather."""

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
