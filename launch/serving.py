"""What a user serves a trained model with, built one way for the pretraining export and every
fine-tuned task: a `.keras` file without optimizer state, and SavedModels whose signatures take the
model inputs or raw strings. Loading a SavedModel needs no bertbeam code (`tensorflow_text` for a
raw-string one).

    plain = save_keras(model, "export/pretraining.keras")    # the uncompiled copy it saved
    save_encoder(encoder_from(plain), "export/encoder")       # ids in, sequence/pooled out
    save_task(plain, text_encoder, predict, pairs=False, path="finetune/x/serving")
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import keras

from model.encoder import TASK_INPUTS

if TYPE_CHECKING:  # tensorflow-text loads only where a task is served, not with every export
    from launch.tasks.text_encoder import TextEncoder


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


def save_task(model: keras.Model, text_encoder: TextEncoder, predict: Callable[[dict], dict], pairs: bool,
              path: str) -> None:  # fmt: skip
    """A fine-tuned task's SavedModel: "serving_default" takes raw strings, `text` (and
    `text_pair` with `pairs`), and returns `predict(model inputs)`; "tokenize" returns the model
    inputs. A tokenizer.json vocab has no graph tokeniser (tasks/text_encoder.py): its
    "serving_default" takes the model inputs instead, which `tokenizers` with the vocab beside it
    gives."""
    if not text_encoder.graph_tokenizer:

        def serve(*ids):
            return predict(dict(zip(TASK_INPUTS, ids, strict=True)))

        write_saved_model(path, [model], {"serving_default": (serve, id_specs(text_encoder.seq_len))})
        print(f"note: {path} takes input_ids, input_mask, segment_ids: tensorflow-text has no byte-level "
              "BPE to run a tokenizer.json inside it", file=sys.stderr)  # fmt: skip
        return
    import tensorflow as tf

    text = tf.TensorSpec((None,), tf.string, name="text")
    if pairs:
        specs = [text, tf.TensorSpec((None,), tf.string, name="text_pair")]
        endpoints = {
            "serving_default": (lambda t, p: predict(text_encoder(t, p)), specs),
            "tokenize": (lambda t, p: text_encoder(t, p), specs),
        }
    else:
        endpoints = {
            "serving_default": (lambda t: predict(text_encoder(t)), [text]),
            "tokenize": (lambda t: text_encoder(t), [text]),
        }
    write_saved_model(path, [model, text_encoder], endpoints)
