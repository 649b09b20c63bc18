"""model_dir/export/: what a user takes away from a run.

pretraining.keras   the pretraining model (MLM head, NSP/SOP head if trained), uncompiled.
                    `import model` registers its layers; then `keras.saving.load_model(path)`
                    needs no custom_objects.
encoder/            a SavedModel; signature "serving_default": input_ids, input_mask,
                    segment_ids (B, T) int32 -> sequence_output (B, T, H), pooled_output (B, H)
                    float32. Loads with plain `tf.saved_model.load`, no bertbeam code.
vocab.model         the corpus's sentencepiece model
bert_config.json    the model's shape; train_config.json: the run that made it
"""

from __future__ import annotations

import keras
import tensorflow as tf

from model.bert import encoder_from

PRETRAINING = "pretraining.keras"
ENCODER = "encoder"


def export(model: keras.Model, *, bert, corpus, config) -> str:
    folder = f"{config.model_dir}/export"
    tf.io.gfile.makedirs(folder)
    # A fresh, uncompiled copy: the saved file then carries no optimizer or schedule, so loading
    # it needs only the model's own layers registered (and no strategy scope).
    plain = keras.Model.from_config(model.get_config())
    plain.set_weights(model.get_weights())
    plain.save(f"{folder}/{PRETRAINING}")
    save_encoder(encoder_from(plain), f"{folder}/{ENCODER}")
    tf.io.gfile.copy(corpus.vocab_file, f"{folder}/vocab.model", overwrite=True)
    for name, text in (("bert_config.json", bert.to_json()), ("train_config.json", config.to_json())):
        with tf.io.gfile.GFile(f"{folder}/{name}", "w") as f:
            f.write(text)
    print(f"exported to {folder}", flush=True)
    return folder


def save_encoder(encoder: keras.Model, path: str) -> None:
    """The encoder as a SavedModel with a three-input serving signature. Each row is taken as one
    document: document_ids = input_mask, so real tokens attend to real tokens."""
    seq_len = encoder.input["input_ids"].shape[1]
    spec = {
        name: tf.TensorSpec((None, seq_len), tf.int32, name=name)
        for name in ("input_ids", "input_mask", "segment_ids")
    }

    def serve(input_ids, input_mask, segment_ids):
        outputs = encoder(
            {
                "input_ids": input_ids,
                "input_mask": input_mask,
                "segment_ids": segment_ids,
                "document_ids": input_mask,
            },
            training=False,
        )
        return {name: tf.cast(value, tf.float32) for name, value in outputs.items()}

    archive = keras.export.ExportArchive()
    archive.track(encoder)
    archive.add_endpoint(
        "serving_default",
        serve,
        input_signature=[spec["input_ids"], spec["input_mask"], spec["segment_ids"]],
    )
    archive.write_out(path, verbose=False)


def load_pretraining_model(path: str) -> keras.Model:
    import model  # noqa: F401 - registers bertbeam's layers and loss

    return keras.saving.load_model(path)
