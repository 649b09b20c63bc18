"""Checkpoints: what a run saves to resume exactly, and the weights a run can start from.

    checkpoints = Checkpoints(model, optimizer, f"{model_dir}/checkpoints", keep=3)
    step = checkpoints.restore()          # the newest checkpoint, if any: optimizer updates done
    checkpoints.save(step)
    warm_start(model, "hf:out/hf")        # weights only: a bertbeam run, Google BERT, Hugging Face
    read_bert_config("bert_config.json")  # ours, Google's or Hugging Face's config format

Keras 3 models are not `tf.train` trackables (a `tf.train.Checkpoint(model=model)` saves no weight
at all), so a checkpoint holds their `tf.Variable`s in dicts with stable keys (`model_variables`,
`optimizer_variables`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import re

import keras
import tensorflow as tf

from common.errors import BertbeamError, ConfigError
from launch.google_checkpoint import (
    GoogleCheckpointError,
    google_bert_config,
    is_google_checkpoint,
    load_google_checkpoint,
)
from launch.hf_checkpoint import (
    HFCheckpointError,
    hf_bert_config,
    hf_model_type,
    is_hf_config,
    load_hf_checkpoint,
)
from launch.hf_electra import load_hf_electra
from launch.hf_modernbert import load_hf_modernbert, modernbert_config
from model.config import BertConfig
from model.encoder import ENCODER_LAYERS, weights_by_path

HF_PREFIX = "hf:"  # --init_checkpoint hf:DIR: a Hugging Face BERT, ELECTRA or ModernBERT folder
HF_LOADERS = {"electra": load_hf_electra, "modernbert": load_hf_modernbert}  # else BERT's


class CheckpointError(BertbeamError):
    """A checkpoint that cannot be read into this model; one line naming it and the cause."""


class DiskFullError(BertbeamError):
    """The disk under the run filled up; what is already written stays usable."""


# === Saving and resuming ===


class Checkpoints:
    """Model and optimizer variables, saved atomically by tf.train.CheckpointManager: a run killed
    mid-save leaves the previous checkpoint as the latest, since the `checkpoint` index file is
    replaced only after the new files are complete."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, folder: str, keep: int,
                 restore_from: str | None = None):  # fmt: skip
        """Saves into `folder`; restores from `restore_from` (default: `folder`): a worker other
        than the chief resumes from the chief's checkpoints and saves into a scratch folder."""
        self.optimizer = optimizer
        self.checkpoint = tf.train.Checkpoint(
            model=model_variables(model), optimizer=optimizer_variables(optimizer)
        )
        self.manager = tf.train.CheckpointManager(self.checkpoint, folder, max_to_keep=keep)
        self.restore_from = restore_from or folder

    @staticmethod
    def latest_step(folder: str) -> int:
        """The step of the newest checkpoint in `folder` (its number: `save(step)`), 0 if none;
        read before a model exists, to know which phase to build."""
        path = tf.train.latest_checkpoint(folder)
        return int(path.rsplit("-", 1)[1]) if path else 0

    def restore(self) -> int:
        """Restores the latest checkpoint, if any; returns the optimizer updates done so far."""
        latest = tf.train.latest_checkpoint(self.restore_from)
        if latest:
            self.checkpoint.restore(latest).assert_consumed()
        return int(self.optimizer.iterations.numpy())

    def save(self, step: int) -> str:
        try:
            return self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as e:
            if not _out_of_space(e):
                raise
            kept = self.manager.latest_checkpoint or "none yet"
            raise DiskFullError(
                f"{self.manager.directory}: no space left on the device writing checkpoint "
                f"{step}; the newest complete one ({kept}) is untouched: free space and re-run to resume"
            ) from None


def _out_of_space(error: Exception) -> bool:
    return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error)


@contextlib.contextmanager
def out_of_space_is_one_line(model_dir: str):
    """A full disk under the logs or history (checkpoints say more, in `Checkpoints.save`)."""
    try:
        yield
    except (tf.errors.OpError, OSError) as e:
        if not _out_of_space(e):
            raise
        raise DiskFullError(
            f"--model_dir {model_dir}: no space left on the device; checkpoints already written are "
            "complete: free space and re-run to resume"
        ) from None


def model_variables(model: keras.Model) -> dict:
    """The model's tf.Variables under stable keys: trainable weights by their Keras path (stable,
    because every layer is named); other state (dropout RNG seeds) by position, since its
    auto-generated names carry a process-wide counter (`seed_generator_20`) that differs when a
    process builds a second model."""
    named = _weight_values(model)
    named.update({f"state/{i}": v.value for i, v in enumerate(model.non_trainable_variables)})
    return _unique(named, model.variables)


def _weight_values(model: keras.Model) -> dict:
    """The tf.Variables behind the model's weights, by Keras path: what a checkpoint's "model"
    holds, and all that a warm start or an export reads back."""
    return {path: weight.value for path, weight in weights_by_path(model).items()}


def optimizer_variables(optimizer: keras.optimizers.Optimizer) -> dict:
    """Step counter and slots, keyed by path without the counter suffix that a second optimizer
    in one process gets (`adam_w_1/...` -> `adam_w/...`)."""

    def key(path: str) -> str:
        owner, _, rest = path.partition("/")
        return f"{re.sub(r'_[0-9]+$', '', owner)}/{rest}"

    return _unique({key(v.path): v.value for v in optimizer.variables}, optimizer.variables)


def _unique(named: dict, variables) -> dict:
    if len(named) != len(variables):
        raise RuntimeError("two variables share a checkpoint key")
    return named


# === Starting from other weights ===


def read_weights(model: keras.Model, path: str, partial: bool = False) -> list[str]:
    """The weights of a bertbeam checkpoint; `CheckpointError` (with the first line of the cause)
    when the checkpoint does not fit the model. With `partial`, weights the checkpoint lacks keep
    their values (the heads an ELECTRA run does not have, a pooler a run without NSP never
    trained), and their paths are returned; a missing encoder weight, or one the checkpoint holds
    in another shape, is still an error."""
    weights = _weight_values(model)
    missing = []
    if partial:
        keys = {name.split("/.ATTRIBUTES/")[0] for name, _ in tf.train.list_variables(path)}
        missing = [p for p in weights if _checkpoint_key("model", p) not in keys]
        encoder = [p for p in missing if is_encoder_weight(p)]
        if encoder:  # another depth or layout: not a head that may start fresh
            raise CheckpointError(f"{path}: does not fit this model (it has no {encoder[0]})")
        weights = {p: v for p, v in weights.items() if p not in missing}
    try:
        status = tf.train.Checkpoint(model=weights).read(path)
        status.expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
        cause = str(e).strip().splitlines()[0][:200]
        raise CheckpointError(f"{path}: does not fit this model ({cause})") from None
    return missing


def is_encoder_weight(path: str) -> bool:
    """The weight belongs to the encoder (embeddings, blocks, final norm), not to a head."""
    layer = path.split("/", 1)[0]
    return layer in ENCODER_LAYERS or re.fullmatch(r"transformer_\d+", layer) is not None


def _checkpoint_key(group: str, path: str) -> str:
    """How tf.train.Checkpoint names a dict entry: `/` in the key escaped as `.S`."""
    return f"{group}/{path.replace('.', '..').replace('/', '.S')}"


def warm_start(model: keras.Model, source: str) -> list[str]:
    """Weights only (no optimizer state, no step) from a bertbeam model_dir or checkpoint, a
    Google BERT release (its folder, or a bert_model.ckpt prefix), or `hf:DIR`, a Hugging Face
    BERT, ELECTRA discriminator or ModernBERT folder (config.json + model.safetensors). Returns the layers the
    source has no weights for, which keep their fresh initialisation (a head, a pooler, ELECTRA's
    generator), and prints them. Errors name --init_checkpoint."""
    source = source.rstrip("/")
    try:
        if source.startswith(HF_PREFIX):
            folder = source.removeprefix(HF_PREFIX)
            load = HF_LOADERS.get(hf_model_type(folder), load_hf_checkpoint)
            fresh = load(model, folder)
        else:
            path = _checkpoint_path(source)
            if is_google_checkpoint(path):
                load_google_checkpoint(model, path)
                fresh = []
            else:
                fresh = read_weights(model, path, partial=True)
    except (CheckpointError, GoogleCheckpointError, HFCheckpointError) as e:
        raise CheckpointError(f"--init_checkpoint {e}") from None
    layers = layers_of(fresh)
    if layers:
        print(f"warm start: {source} has no weights for {', '.join(layers)}; those start fresh", flush=True)
    return layers


def layers_of(paths: list[str]) -> list[str]:
    """The layers that own weight `paths` (`transformer_0/attention/query/kernel` ->
    `transformer_0`), in their order, once each."""
    return list(dict.fromkeys(path.split("/", 1)[0] for path in paths))


def _checkpoint_path(source: str) -> str:
    """The checkpoint prefix in a run's folder, a checkpoints folder, a Google release folder, or
    `source` itself when it is a prefix."""
    path = tf.train.latest_checkpoint(f"{source}/checkpoints") or tf.train.latest_checkpoint(source)
    if path is None and tf.io.gfile.exists(f"{source}/bert_model.ckpt.index"):
        path = f"{source}/bert_model.ckpt"  # an unpacked google-research/bert release
    if path is None and tf.io.gfile.exists(f"{source}.index"):
        path = source
    if path is None:
        raise CheckpointError(f"{source}: no checkpoint found there")
    return path


def read_bert_config(path: str) -> BertConfig:
    """A model shape from Hugging Face's config.json, google-research/bert's bert_config.json or
    our BertConfig JSON, told apart by their fields."""
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    try:
        if is_hf_config(raw):
            return modernbert_config(path) if raw.get("model_type") == "modernbert" else hf_bert_config(path)
        if "num_hidden_layers" in raw:
            return google_bert_config(path)
        return BertConfig.from_json(text)
    except ConfigError as e:  # BertConfig's own checks do not know the file; the format readers do
        raise CheckpointError(f"{path}: {e}") from None
