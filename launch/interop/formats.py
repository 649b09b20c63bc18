"""The one table of checkpoint formats, and everything that dispatches on it: warm start, reading a
model's shape, export, and the encoder a fine-tune starts from.

    warm_start(model, "hf:bert-base-uncased")     # --init_checkpoint: any format in, fresh layers listed
    config_beside("hf:all-MiniLM-L6-v2")          # its config.json (a sentence-transformers folder too)
    read_bert_config("release/config.json")       # ours, Google's or Hugging Face's config file
    exporter("hf", bert, objective).save(...)     # launch.export --format hf
    locate("uncased_L-12_H-768_A-12")             # (GOOGLE, "uncased_L-12_H-768_A-12/bert_model.ckpt")

A format is one row of FORMATS: where its model's shape lives, how its weights go into a Keras
model, and (for the exchange formats) how a trained model is written in it. Adding a format is one
module beside this one and one row here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import keras

from common.errors import ConfigError
from launch import checkpoints
from launch.checkpoints import CheckpointError, layers_of, read_weights
from launch.interop.google import (
    GoogleCheckpointError,
    google_bert_config,
    is_google_checkpoint,
    load_google_checkpoint,
    save_google,
)
from launch.interop.hf_bert import hf_bert_config, load_hf_checkpoint, save_hf
from launch.interop.hf_electra import load_hf_electra, save_hf_electra
from launch.interop.hf_folder import HFCheckpointError, hf_model_type, is_hf_config
from launch.interop.hf_modernbert import load_hf_modernbert, modernbert_config, save_hf_modernbert
from model.config import BertConfig
from model.electra import generator_config
from model.encoder import weights_by_path
from model.pretraining import Objective
from pipeline import files
from pipeline.vocab import VocabError, VocabFile
from pipeline.vocab.release import model_folder

HF_PREFIX = "hf:"  # --init_checkpoint hf:DIR: a Hugging Face BERT, ELECTRA or ModernBERT folder


@dataclasses.dataclass(frozen=True)
class CheckpointFormat:
    config_file: str  # the model's shape, in the folder beside the weights
    read_config: Callable[[str], BertConfig]  # that file -> the model's shape
    # The weights at a location (a folder or checkpoint prefix) into a model built for them;
    # returns the paths of the model's weights the format has none for (they stay fresh).
    load: Callable[[keras.Model, str], list[str]]
    export: str | None = None  # the `launch.export --format` that writes it
    model_type: str | None = None  # Hugging Face's config.json model_type
    architecture: str = "bert"  # the block a model in it has (BertConfig.architecture)
    objective: str = "mlm"  # what pretrained a model in it: what fine-tuning recipes look up
    holds: str = ""  # what an export in it holds, for messages
    # (model, its shape, the run's vocab, its objective, folder) -> what was written, for the
    # export's line; writes the folder in this format.
    save: Callable[[keras.Model, BertConfig, VocabFile, Objective, str], str] | None = None


def _read_ours(path: str) -> BertConfig:
    return BertConfig.from_json(files.read_text(path))


def _load_google(model: keras.Model, prefix: str) -> list[str]:
    load_google_checkpoint(model, prefix)  # every variable or a one-line error
    return []


def _save_hf(model, bert, vocab_file, objective, folder) -> str:
    save_hf(model, bert, vocab_file, folder)
    return f" to {folder}"


def _save_hf_electra(model, bert, vocab_file, objective, folder) -> str:
    generator = generator_config(bert, objective.generator_size)
    discriminator, generator_folder = save_hf_electra(model, bert, generator, vocab_file, folder)
    return f": ElectraForPreTraining to {discriminator}, ElectraForMaskedLM to {generator_folder}"


def _save_hf_modernbert(model, bert, vocab_file, objective, folder) -> str:
    save_hf_modernbert(model, bert, vocab_file, folder)
    return f": ModernBertForMaskedLM to {folder}"


def _save_google(model, bert, vocab_file, objective, folder) -> str:
    save_google(model, bert, vocab_file, folder)
    return f" to {folder}"


BERTBEAM = CheckpointFormat(  # a bertbeam run's model_dir, checkpoints folder or checkpoint
    "bert_config.json", _read_ours, lambda model, path: read_weights(model, path, partial=True)
)
GOOGLE = CheckpointFormat(
    "bert_config.json", google_bert_config, _load_google,
    export="google", holds="bert_model.ckpt", save=_save_google,
)  # fmt: skip
HF_BERT = CheckpointFormat(
    "config.json", hf_bert_config, load_hf_checkpoint,
    export="hf", model_type="bert", holds="BertForMaskedLM", save=_save_hf,
)  # fmt: skip
HF_ELECTRA = CheckpointFormat(
    "config.json", hf_bert_config, load_hf_electra,
    export="hf", model_type="electra", objective="electra",
    holds="ElectraForPreTraining and ElectraForMaskedLM", save=_save_hf_electra,
)  # fmt: skip
HF_MODERNBERT = CheckpointFormat(
    "config.json", modernbert_config, load_hf_modernbert,
    export="hf", model_type="modernbert", architecture="modernbert",
    holds="ModernBertForMaskedLM", save=_save_hf_modernbert,
)  # fmt: skip
FORMATS = (BERTBEAM, GOOGLE, HF_BERT, HF_ELECTRA, HF_MODERNBERT)

# Why a run has no row in an export format, by (--format, architecture, objective).
NO_EXPORT = {
    ("hf", "modernbert", "electra"): "transformers has no ModernBERT ELECTRA",
    ("google", "modernbert", "electra"): "transformers has no ModernBERT ELECTRA",
    ("google", "modernbert", "mlm"): "google-research/bert has no such block",
    ("google", "bert", "electra"): "google-research/bert's format has no place for its generator",
}


# === In ===


def locate(source: str) -> tuple[CheckpointFormat, str]:
    """The format of `source` and where its weights are: `hf:DIR` (by config.json's model_type;
    BERT's when unsaid), an unpacked google-research/bert release (its folder or the
    bert_model.ckpt prefix), or a bertbeam run's model_dir, checkpoints folder or checkpoint."""
    source = source.rstrip("/")
    if source.startswith(HF_PREFIX):
        try:  # a sentence-transformers folder: the model is in the module its modules.json names
            folder = model_folder(source.removeprefix(HF_PREFIX))
        except VocabError as e:
            raise CheckpointError(str(e)) from None
        return _hf_format(hf_model_type(folder)), folder
    path = _checkpoint_path(source)
    return (GOOGLE if is_google_checkpoint(path) else BERTBEAM), path


def config_beside(source: str) -> str | None:
    """The model's config file that ships with the weights of `source` (an HF folder's
    config.json, a Google release's or a bertbeam run's bert_config.json); None if there is none."""
    fmt, location = locate(source.rstrip("/"))
    folders = [location] if source.startswith(HF_PREFIX) else [location.rsplit("/", 1)[0]]
    if fmt is BERTBEAM:  # model_dir/checkpoints/ckpt-N: the run's bert_config.json is two up
        folders.append(folders[0].rsplit("/", 1)[0])
    paths = [f"{folder}/{fmt.config_file}" for folder in folders]
    return next((path for path in paths if files.exists(path)), None)


def _hf_format(model_type: str | None) -> CheckpointFormat:
    """The Hugging Face row of a config.json's model_type (BERT's when unsaid or unknown)."""
    return next((f for f in FORMATS if f.model_type == model_type), HF_BERT)


def _checkpoint_path(source: str) -> str:
    """The checkpoint prefix in a run's folder, a checkpoints folder, a Google release folder, or
    `source` itself when it is a prefix."""
    path = checkpoints.latest(f"{source}/checkpoints") or checkpoints.latest(source)
    if path is None and files.exists(f"{source}/bert_model.ckpt.index"):
        path = f"{source}/bert_model.ckpt"  # an unpacked google-research/bert release
    if path is None and checkpoints.exists(source):
        path = source
    if path is None:
        raise CheckpointError(f"{source}: no checkpoint found there")
    return path


def load_weights(model: keras.Model, source: str) -> list[str]:
    """Weights only (no optimizer state, no step) from `source` in any format (`locate`) into
    `model`; returns the layers the source has no weights for, which keep their fresh values (a
    head, a pooler, ELECTRA's generator). A source that does not fit is a `CheckpointError`."""
    return layers_of(_load(model, source))


def _load(model: keras.Model, source: str) -> list[str]:
    fmt, location = locate(source)
    try:
        return fmt.load(model, location)
    except (GoogleCheckpointError, HFCheckpointError) as e:
        raise CheckpointError(str(e)) from None


def warm_start(model: keras.Model, source: str) -> list[str]:
    """`load_weights` for --init_checkpoint: errors name the flag, and what starts fresh is printed
    once, each layer with its weights' shapes. Returns the paths of the weights left fresh."""
    source = source.rstrip("/")
    try:
        fresh = _load(model, source)
    except CheckpointError as e:
        raise CheckpointError(f"--init_checkpoint {e}") from None
    weights = weights_by_path(model)
    shapes = {layer: [] for layer in layers_of(fresh)}
    for path in fresh:
        if weights[path].trainable:  # not a dropout's random state
            shapes[path.split("/", 1)[0]].append("x".join(map(str, weights[path].shape)) or "scalar")
    listed = [f"{layer} ({', '.join(found)})" for layer, found in shapes.items() if found]
    if listed:
        print(f"warm start: {source} has no weights for {', '.join(listed)}; those start fresh", flush=True)
    return fresh


def read_bert_config(path: str) -> BertConfig:
    """A model shape from Hugging Face's config.json, google-research/bert's bert_config.json or
    our BertConfig JSON, told apart by their fields."""
    text = files.read_text(path)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if is_hf_config(raw):
        fmt = _hf_format(raw.get("model_type"))
    else:
        fmt = GOOGLE if "num_hidden_layers" in raw else BERTBEAM
    try:
        return fmt.read_config(path)
    except ConfigError as e:  # BertConfig's own checks do not know the file; the format readers do
        raise CheckpointError(f"{path}: {e}") from None


# === Out ===


def exporter(fmt: str, bert: BertConfig, objective: str) -> CheckpointFormat | str:
    """The row that writes a model of `bert`'s architecture, trained with `objective`, as
    `launch.export --format fmt`; else why none does, with the formats that would."""
    for row in FORMATS:
        if row.export == fmt and row.architecture == bert.architecture and row.objective == objective:
            return row
    others = [
        f"{row.export} ({row.holds})"
        for row in FORMATS
        if row.export and row.architecture == bert.architecture and row.objective == objective
    ]
    return f"exports as {' or '.join([*others, 'keras'])}; {NO_EXPORT[(fmt, bert.architecture, objective)]}"
