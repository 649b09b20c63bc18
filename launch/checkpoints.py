"""Checkpoints: what a run saves to resume exactly, and reads back.

    checkpoints = Checkpoints(model, optimizer, f"{model_dir}/checkpoints", keep=3)
    step = checkpoints.restore()          # the newest checkpoint, if any: optimizer updates done
    checkpoints.save(step)
    read_weights(model, "out/run/checkpoints/ckpt-500", partial=True)   # weights only

Starting from other formats' weights (warm start, Google's and Hugging Face's) is `interop/`.

Keras 3 models are not `tf.train` trackables (a `tf.train.Checkpoint(model=model)` saves no weight
at all), so a checkpoint holds their `tf.Variable`s in dicts with stable keys (`model_variables`,
`optimizer_variables`).
"""

from __future__ import annotations

import contextlib
import errno
import re

import keras
import tensorflow as tf

from common.errors import BertbeamError
from model.encoder import ENCODER_LAYERS, weights_by_path


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


# === Reading weights back ===


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


def layers_of(paths: list[str]) -> list[str]:
    """The layers that own weight `paths` (`transformer_0/attention/query/kernel` ->
    `transformer_0`), in their order, once each."""
    return list(dict.fromkeys(path.split("/", 1)[0] for path in paths))
