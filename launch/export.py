"""Export a run's checkpoint as a user takes it away: Hugging Face, google-research/bert or Keras.

model_dir/export/ is written at the end of training; any format from any checkpoint on the command
line:

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
which `transformers.BertForMaskedLM` / `AutoTokenizer.from_pretrained` load (interop/hf_bert.py);
a ModernBERT run writes `ModernBertForMaskedLM`'s (interop/hf_modernbert.py); an ELECTRA run writes
two such folders, OUTPUT/discriminator (`ElectraForPreTraining`) and OUTPUT/generator
(`ElectraForMaskedLM`) (interop/hf_electra.py).
--format google: bert_model.ckpt.*, bert_config.json and the vocab, under google-research/bert's
variable names (interop/google.py).
"""

from __future__ import annotations

import sys

import keras

from common.cli import Parser, first_paragraph, run_cli
from common.errors import BertbeamError
from launch import backend
from launch.checkpoints import CheckpointError, read_weights
from launch.config import TrainConfig
from launch.interop.formats import exporter
from launch.run_dir import RunDir
from launch.run_model import pretraining_model
from launch.serving import save_encoder, save_keras
from model.config import BertConfig
from model.encoder import encoder_from
from pipeline import files
from pipeline.files import write_atomically
from pipeline.schema import Manifest
from pipeline.vocab import VocabFile

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
    files.make_dirs(folder)
    plain = save_keras(model, f"{folder}/{PRETRAINING}")
    if backend.import_tensorflow():
        save_encoder(encoder_from(plain), f"{folder}/{ENCODER}")
    else:  # a SavedModel is TensorFlow's format, written by TensorFlow even from JAX
        print(f"note: no {folder}/{ENCODER}/ SavedModel: tensorflow is not installed here; "
              f"python -m launch.export --format keras where it is writes one", flush=True)  # fmt: skip
    vocab = VocabFile.of_corpus(manifest)
    write_atomically(f"{folder}/{vocab.file_name}", vocab.data)
    write_atomically(f"{folder}/bert_config.json", bert.to_json())
    write_atomically(f"{folder}/train_config.json", config.to_json())
    print(f"exported to {folder}", flush=True)
    return folder


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
    """Writes the run's checkpoint to `output` in `fmt` (`interop/formats.py` has the row that
    writes it); returns a line saying what was written."""
    model, bert, manifest, config, path = restore(model_dir, checkpoint)
    output = output.rstrip("/")
    if fmt == "keras":
        export(model, bert=bert, manifest=manifest, config=config, folder=output)
        return f"exported {path} ({fmt}) to {output}"
    objective = config.pretraining_objective
    row = exporter(fmt, bert, objective.name)
    if isinstance(row, str):  # no row writes this run in fmt: why, and what would
        kind = " ".join(
            [*(["ModernBERT"] if bert.modern else []), *(["ELECTRA"] if objective.name == "electra" else [])]
        )
        article = "an" if kind.startswith("E") else "a"
        raise ExportError(f"--model_dir {model_dir}: {article} {kind} run {row}")
    written = row.save(model, bert, VocabFile.of_corpus(manifest), objective, output)
    return f"exported {path} ({fmt}){written}"


def parser() -> Parser:
    p = Parser(prog="python -m launch.export", description=first_paragraph(__doc__), verbose_flag=True)
    p.add_argument("--model_dir", required=True, help="a launch.pretrain run (local or gs://)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--output", required=True, help="folder to write (local or gs://)")
    p.add_argument("--checkpoint", default=None, help="a checkpoint prefix (default: the newest)")
    return p


def _export(argv: list[str] | None) -> None:
    backend.check()
    args = parser().parse_args(argv)
    print(export_as(args.format, args.model_dir, args.output, args.checkpoint))


def main(argv: list[str] | None = None) -> int:
    return run_cli(_export, argv)


if __name__ == "__main__":
    sys.exit(main())
