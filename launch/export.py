"""What a user takes away from a run: model_dir/export/ at the end of training, and any format
from any checkpoint with the command line:

    python -m launch.export --model_dir out/run --format hf --output out/hf      # Hugging Face
    python -m launch.export --model_dir out/run --format google --output out/g   # google-research/bert
    python -m launch.export --model_dir out/run --format keras --output out/k    # as model_dir/export/

model_dir/export/ (and --format keras):

pretraining.keras   the pretraining model (MLM head, NSP/SOP head if trained), uncompiled.
                    `import model` registers its layers; then `keras.saving.load_model(path)`
                    needs no custom_objects.
encoder/            a SavedModel; signature "serving_default": input_ids, input_mask,
                    segment_ids (B, T) int32 -> sequence_output (B, T, H), pooled_output (B, H)
                    float32. Loads with plain `tf.saved_model.load`, no bertbeam code.
vocab.model / .txt  the corpus's vocab (sentencepiece, or WordPiece)
bert_config.json    the model's shape; train_config.json: the run that made it

--format hf: config.json, model.safetensors, tokenizer.json, tokenizer_config.json and the vocab,
which `transformers.BertForMaskedLM` / `AutoTokenizer.from_pretrained` load (launch/hf_checkpoint.py).
--format google: bert_model.ckpt.*, bert_config.json and the vocab, under google-research/bert's
variable names (launch/google_checkpoint.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402 - after the log level
import tensorflow as tf  # noqa: E402

from model.bert import build_pretraining_model, encoder_from  # noqa: E402

PRETRAINING = "pretraining.keras"
ENCODER = "encoder"


FORMATS = ("hf", "google", "keras")


class ExportError(ValueError):
    """Nothing to export, or not in that format; one line saying why."""


def export(model: keras.Model, *, bert, corpus, config, folder: str | None = None) -> str:
    folder = folder or f"{config.model_dir}/export"
    tf.io.gfile.makedirs(folder)
    # A fresh, uncompiled copy: the saved file then carries no optimizer or schedule, so loading
    # it needs only the model's own layers registered (and no strategy scope).
    plain = keras.Model.from_config(model.get_config())
    plain.set_weights(model.get_weights())
    plain.save(f"{folder}/{PRETRAINING}")
    save_encoder(encoder_from(plain), f"{folder}/{ENCODER}")
    vocab_name = corpus.vocab_file.rsplit("/", 1)[-1]  # vocab.model or vocab.txt
    tf.io.gfile.copy(corpus.vocab_file, f"{folder}/{vocab_name}", overwrite=True)
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


# === From a checkpoint, on the command line ===


def restore(model_dir: str, checkpoint: str | None = None):
    """(model, bert, corpus, config, checkpoint path) of a run: its config.json, its corpus's
    manifest and vocab, and the trainable weights of its newest checkpoint (or `checkpoint`)."""
    from launch.config import TrainConfig
    from launch.train import read_weights, resolve_bert_config, resolve_corpus

    model_dir = model_dir.rstrip("/")
    if not tf.io.gfile.exists(f"{model_dir}/config.json"):
        raise ExportError(f"--model_dir {model_dir}: no config.json (not a launch.pretrain run)")
    with tf.io.gfile.GFile(f"{model_dir}/config.json") as f:
        config = TrainConfig(**json.load(f))
    path = checkpoint or tf.train.latest_checkpoint(f"{model_dir}/checkpoints")
    if path is None:
        raise ExportError(f"--model_dir {model_dir}: no checkpoint yet in {model_dir}/checkpoints")
    corpus = resolve_corpus(config.data)
    bert = resolve_bert_config(config, corpus)
    model = build_pretraining_model(bert, corpus.seq_len, corpus.max_predictions, corpus.next_sentence)
    try:
        read_weights(model, path)
    except ValueError as e:
        raise ExportError(f"--checkpoint {path}: does not fit this run's model ({e})") from None
    return model, bert, corpus, config, path


def export_as(fmt: str, model_dir: str, output: str, checkpoint: str | None = None) -> str:
    """Writes the run's checkpoint to `output` in `fmt`; returns a line saying what was written."""
    from launch.google_checkpoint import google_config_json, save_google_checkpoint
    from launch.hf_checkpoint import save_hf
    from pipeline.vocab import from_manifest

    model, bert, corpus, config, path = restore(model_dir, checkpoint)
    output = output.rstrip("/")
    vocab_file = from_manifest(corpus.folder, corpus.manifest["vocab"])
    if fmt == "hf":
        save_hf(model, bert, vocab_file, output)
    elif fmt == "google":
        config_json = google_config_json(bert)
        save_google_checkpoint(model, f"{output}/bert_model.ckpt")
        with tf.io.gfile.GFile(f"{output}/bert_config.json", "w") as f:
            f.write(config_json)
        if bert.hidden_act == "gelu":
            print(
                "note: trained with exact (erf) GELU; google-research/bert computes the tanh form",
                file=sys.stderr,
            )
        with tf.io.gfile.GFile(f"{output}/{vocab_file.file_name}", "wb") as f:
            f.write(vocab_file.data)
    else:
        export(model, bert=bert, corpus=corpus, config=config, folder=output)
    return f"exported {path} ({fmt}) to {output}"


def main(argv: list[str] | None = None) -> int:
    from launch.google_checkpoint import GoogleCheckpointError
    from launch.hf_checkpoint import HFCheckpointError
    from launch.train import TrainError
    from pipeline.schema import ManifestError

    parser = argparse.ArgumentParser(prog="python -m launch.export", description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True, help="a launch.pretrain run (local or gs://)")
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument("--output", required=True, help="folder to write (local or gs://)")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint prefix (default: the newest)")
    args = parser.parse_args(argv)
    try:
        print(export_as(args.format, args.model_dir, args.output, args.checkpoint))
    except (ExportError, TrainError, ManifestError, HFCheckpointError, GoogleCheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
