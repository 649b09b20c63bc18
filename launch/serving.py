"""What a user serves a trained model with, built one way for the pretraining export and every
fine-tuned task: a `.keras` file without optimizer state, and SavedModels with the signatures
given (the encoder's here; each task's raw-string ones in launch/finetune/, written through
`write_saved_model`). Loading a SavedModel needs no bertbeam code (`tensorflow_text` for a
raw-string one).

    plain = save_keras(model, "export/pretraining.keras")    # the uncompiled copy it saved
    save_encoder(encoder_from(plain), "export/encoder")       # ids in, sequence/pooled out
"""

from __future__ import annotations

from collections.abc import Callable

import keras

from model.encoder import TASK_INPUTS


def save_keras(model: keras.Model, path: str) -> keras.Model:
    """A fresh, uncompiled copy of `model` as a .keras file: it carries no optimizer or schedule,
    so loading it needs only the model's own layers registered (`import model`), no strategy.
    Returns the copy, which the SavedModels then track: plain variables, not a strategy's."""
    plain = keras.Model.from_config(model.get_config())
    plain.set_weights(model.get_weights())
    plain.save(path)
    return plain


def id_specs(seq_len: int) -> list:
    """input_ids, input_mask, segment_ids: (B, seq_len) int32 each."""
    import tensorflow as tf

    return [tf.TensorSpec((None, seq_len), tf.int32, name=name) for name in TASK_INPUTS]


def write_saved_model(path: str, tracked: list, endpoints: dict[str, tuple[Callable, list]]):
    """A SavedModel at `path` holding `tracked` (models, the text encoder's tables), with one
    signature per endpoint name: (function, its input specs: `tf.TensorSpec`s). Keras writes it
    from either backend (JAX's through jax2tf); either way it needs TensorFlow installed."""
    archive = keras.export.ExportArchive()
    for item in tracked:
        archive.track(item)
    for name, (function, specs) in endpoints.items():
        archive.add_endpoint(name, function, input_signature=specs)
    archive.write_out(path, verbose=False)


def save_encoder(encoder: keras.Model, path: str) -> None:
    """The encoder with a three-input serving signature -> sequence_output (B, T, H) and
    pooled_output (B, H), float32. Each row is taken as one document: document_ids = input_mask,
    so real tokens attend to real tokens."""

    def serve(*ids):
        inputs = dict(zip(TASK_INPUTS, ids, strict=True))
        outputs = encoder({**inputs, "document_ids": inputs["input_mask"]}, training=False)
        return {name: keras.ops.cast(value, "float32") for name, value in outputs.items()}

    write_saved_model(
        path, [encoder], {"serving_default": (serve, id_specs(encoder.input["input_ids"].shape[1]))}
    )
