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
which `transformers.BertForMaskedLM` / `AutoTokenizer.from_pretrained` load (launch/hf_checkpoint.py);
a ModernBERT run writes `ModernBertForMaskedLM`'s (launch/hf_modernbert.py); an ELECTRA run writes
two such folders, OUTPUT/discriminator (`ElectraForPreTraining`) and OUTPUT/generator
(`ElectraForMaskedLM`) (launch/hf_electra.py).
--format google: bert_model.ckpt.*, bert_config.json and the vocab, under google-research/bert's
variable names (launch/google_checkpoint.py).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402 - after the log level
import tensorflow as tf  # noqa: E402

from common.cli import Parser, run_cli  # noqa: E402
from common.errors import BertbeamError  # noqa: E402
from launch.checkpoints import CheckpointError, read_weights  # noqa: E402
from launch.config import TrainConfig  # noqa: E402
from launch.google_checkpoint import google_config_json, save_google_checkpoint  # noqa: E402
from launch.hf_checkpoint import save_hf  # noqa: E402
from launch.hf_electra import save_hf_electra  # noqa: E402
from launch.hf_modernbert import save_hf_modernbert  # noqa: E402
from launch.models import pretraining_model  # noqa: E402
from launch.run_dir import RunDir  # noqa: E402
from model.config import BertConfig  # noqa: E402
from model.electra import generator_config  # noqa: E402
from model.encoder import encoder_from  # noqa: E402
from pipeline.files import write_atomically  # noqa: E402
from pipeline.schema import Manifest  # noqa: E402
from pipeline.vocab import VocabFile  # noqa: E402

PRETRAINING = "pretraining.keras"
ENCODER = "encoder"
FORMATS = ("hf", "google", "keras")


class ExportError(BertbeamError):
    """Nothing to export, or not in that format; one line saying why."""


def export(model: keras.Model, *, bert: BertConfig, manifest: Manifest, config: TrainConfig,
           folder: str | None = None) -> str:  # fmt: skip
    """model_dir/export/ (or `folder`): the Keras file, the encoder SavedModel, the corpus's vocab
    and both configs."""
    folder = folder or RunDir(config.model_dir).export
    tf.io.gfile.makedirs(folder)
    # A fresh, uncompiled copy: the saved file then carries no optimizer or schedule, so loading
    # it needs only the model's own layers registered (and no strategy scope).
    plain = keras.Model.from_config(model.get_config())
    plain.set_weights(model.get_weights())
    plain.save(f"{folder}/{PRETRAINING}")
    save_encoder(encoder_from(plain), f"{folder}/{ENCODER}")
    vocab = VocabFile.of_corpus(manifest)
    write_atomically(f"{folder}/{vocab.file_name}", vocab.data)
    write_atomically(f"{folder}/bert_config.json", bert.to_json())
    write_atomically(f"{folder}/train_config.json", config.to_json())
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


# === From a checkpoint, on the command line ===


def restore(model_dir: str, checkpoint: str | None = None):
    """(model, bert, manifest, config, checkpoint path) of a run: its config.json and
    bert_config.json, the manifest and vocab it keeps (model_dir/corpus/), and the weights of its
    newest checkpoint (or `checkpoint`)."""
    run_dir = RunDir(model_dir)
    config = run_dir.read_config()
    bert = run_dir.read_bert_config()
    path = checkpoint or run_dir.latest_checkpoint()
    manifest = run_dir.read_corpus()
    model = pretraining_model(config.pretraining_objective, bert, manifest, seed=config.seed)
    try:
        read_weights(model, path)
    except CheckpointError as e:
        raise ExportError(f"--checkpoint {e}") from None
    return model, bert, manifest, config, path


def export_as(fmt: str, model_dir: str, output: str, checkpoint: str | None = None) -> str:
    """Writes the run's checkpoint to `output` in `fmt`; returns a line saying what was written."""
    model, bert, manifest, config, path = restore(model_dir, checkpoint)
    output = output.rstrip("/")
    if fmt == "keras":
        export(model, bert=bert, manifest=manifest, config=config, folder=output)
        return f"exported {path} ({fmt}) to {output}"
    vocab_file = VocabFile.of_corpus(manifest)
    electra = "rtd" in model.output  # an ELECTRA run: a discriminator and a generator
    if bert.modern and (electra or fmt == "google"):
        formats, why = (
            ("keras", "transformers has no ModernBERT ELECTRA")
            if electra
            else ("hf (ModernBertForMaskedLM) or keras", "google-research/bert has no such block")
        )
        kind = "ModernBERT ELECTRA" if electra else "ModernBERT"
        raise ExportError(f"--model_dir {model_dir}: a {kind} run exports as {formats}; {why}")
    if fmt == "hf" and bert.modern:
        save_hf_modernbert(model, bert, vocab_file, output)
        return f"exported {path} ({fmt}): ModernBertForMaskedLM to {output}"
    if fmt == "hf" and electra:
        generator = generator_config(bert, config.pretraining_objective.generator_size)
        folders = save_hf_electra(model, bert, generator, vocab_file, output)
        discriminator, generator_folder = folders
        return (
            f"exported {path} ({fmt}): ElectraForPreTraining to {discriminator}, "
            f"ElectraForMaskedLM to {generator_folder}"
        )
    if fmt == "hf":
        save_hf(model, bert, vocab_file, output)
    elif electra:
        raise ExportError(
            f"--model_dir {model_dir}: an ELECTRA run exports as hf (ElectraForPreTraining and "
            "ElectraForMaskedLM) or keras; google-research/bert's format has no place for its generator"
        )
    else:
        config_json = google_config_json(bert)
        save_google_checkpoint(model, f"{output}/bert_model.ckpt")
        write_atomically(f"{output}/bert_config.json", config_json)
        if bert.hidden_act == "gelu":
            print(
                "note: trained with exact (erf) GELU; google-research/bert computes the tanh form",
                file=sys.stderr,
            )
        write_atomically(f"{output}/{vocab_file.file_name}", vocab_file.data)
    return f"exported {path} ({fmt}) to {output}"


def parser() -> Parser:
    p = Parser(prog="python -m launch.export", description=__doc__.splitlines()[0], verbose_flag=True)
    p.add_argument("--model_dir", required=True, help="a launch.pretrain run (local or gs://)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--output", required=True, help="folder to write (local or gs://)")
    p.add_argument("--checkpoint", default=None, help="a checkpoint prefix (default: the newest)")
    return p


def _export(argv: list[str] | None) -> None:
    args = parser().parse_args(argv)
    print(export_as(args.format, args.model_dir, args.output, args.checkpoint))


def main(argv: list[str] | None = None) -> int:
    return run_cli(_export, argv)


if __name__ == "__main__":
    sys.exit(main())
