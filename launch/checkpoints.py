"""Checkpoints: what a run saves to resume exactly, and reads back, in one format that TensorFlow
and JAX runs both write and read.

    checkpoints = Checkpoints(model, optimizer, f"{model_dir}/checkpoints", keep=3)
    step = checkpoints.restore()          # the newest checkpoint, if any: optimizer updates done
    checkpoints.save(step, batches=step * grad_accum_steps)
    read_weights(model, "out/run/checkpoints/ckpt-500", partial=True)   # weights only
    read_checkpoint("out/run/checkpoints/ckpt-500")                      # ({key: array}, metadata)

A checkpoint is one safetensors file, `ckpt-STEP.safetensors`: the model's variables under
`model/PATH` (its weights by Keras path; other state, the dropout seeds, as `model/state/I` by
position, since their auto-generated names carry a process-wide counter), the optimizer's under
`optimizer/PATH` (slots and step counter, the path without the counter suffix a second optimizer
in one process gets), and in its metadata the step and the data position (batches read), the
backend and Keras version that wrote it. Safetensors is numpy in, numpy out: nothing in it is
TensorFlow's or JAX's, and `safetensors` is already what the Hugging Face export writes with.

Saves are atomic: the file is written under a temporary name and renamed, then `checkpoints.json`
(the kept checkpoints, newest last) is replaced, then the oldest beyond `keep` are deleted. A run
killed at any moment leaves the index naming complete files only.

Runs from before this format wrote TensorFlow's (`ckpt-N.index` and data files, the `checkpoint`
file): where TensorFlow is installed they are read too, under either backend, and the next save
is in this format. Starting from other formats' weights (warm start, Google's and Hugging Face's)
is `interop/`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re

import keras
import numpy as np

from common.errors import BertbeamError
from launch import backend
from model.encoder import ENCODER_LAYERS, weights_by_path
from pipeline import files

FORMAT = "bertbeam-checkpoint-1"
INDEX = "checkpoints.json"
SUFFIX = ".safetensors"


class CheckpointError(BertbeamError):
    """A checkpoint that cannot be read into this model; one line naming it and the cause."""


class DiskFullError(BertbeamError):
    """The disk under the run filled up; what is already written stays usable."""


# === Saving and resuming ===


class Checkpoints:
    """Model and optimizer variables, saved atomically, the newest `keep` kept."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, folder: str, keep: int,
                 restore_from: str | None = None):  # fmt: skip
        """Saves into `folder`; restores from `restore_from` (default: `folder`): a worker other
        than the chief resumes from the chief's checkpoints and saves into a scratch folder."""
        self.model, self.optimizer = model, optimizer
        self.folder = folder.rstrip("/")
        self.keep = keep
        self.restore_from = (restore_from or folder).rstrip("/")
        # Keyed once, here: the head warm-up then sets weights `trainable = False`, which would
        # move them among the non-trainable variables that `state/<i>` counts.
        self._variables = {
            **{f"model/{k}": v for k, v in model_variables(self.model).items()},
            **{f"optimizer/{k}": v for k, v in optimizer_variables(self.optimizer).items()},
        }

    def variables(self) -> dict:
        return self._variables

    @staticmethod
    def latest_step(folder: str) -> int:
        """The step of the newest checkpoint in `folder` (its number: `save(step)`), 0 if none;
        read before a model exists, to know which phase to build."""
        path = latest(folder)
        return int(path.rsplit("-", 1)[1]) if path else 0

    def restore(self) -> int:
        """Restores the latest checkpoint, if any: every variable, each one there; returns the
        optimizer updates done so far."""
        path = latest(self.restore_from)
        if path:
            tensors, _ = read_checkpoint(path)
            assign(self.variables(), tensors, path, exact=True)
        return int(backend.to_numpy(self.optimizer.iterations))

    def save(self, step: int, batches: int | None = None) -> str:
        """Writes checkpoint `step` (`batches`: the data position, batches read; default `step`)
        and returns its path."""
        path = f"{self.folder}/ckpt-{step}"
        tensors = {key: np.array(backend.to_numpy(v)) for key, v in self.variables().items()}  # 0-d stays
        metadata = {
            "format": FORMAT,
            "step": str(step),
            "batches": str(step if batches is None else batches),
            "backend": backend.name(),
            "keras": keras.__version__,
        }
        try:
            _write(path + SUFFIX, tensors, metadata)
            kept = [p for p in _index(self.folder) if p != f"ckpt-{step}"] + [f"ckpt-{step}"]
            files.write_atomically(f"{self.folder}/{INDEX}", json.dumps({"checkpoints": kept[-self.keep :]}))
        except OSError as e:
            if not _out_of_space(e):
                raise
            if files.exists(f"{path}{SUFFIX}.tmp"):  # the space it took is the next try's
                files.remove(f"{path}{SUFFIX}.tmp")
            newest = latest(self.folder) or "none yet"
            raise DiskFullError(
                f"{self.folder}: no space left on the device writing checkpoint {step}; the newest "
                f"complete one ({newest}) is untouched: free space and re-run to resume"
            ) from None
        for old in kept[: -self.keep]:
            if files.exists(f"{self.folder}/{old}{SUFFIX}"):
                files.remove(f"{self.folder}/{old}{SUFFIX}")
        return path


def write_weights(model: keras.Model, path: str) -> str:
    """The model's weights alone as a checkpoint at `path` (without suffix), for a warm start or
    `--init_checkpoint`; returns `path`."""
    tensors = {f"model/{k}": np.array(backend.to_numpy(w.value)) for k, w in weights_by_path(model).items()}
    _write(path + SUFFIX, tensors, {"format": FORMAT, "backend": backend.name(), "keras": keras.__version__})
    return path


def _write(path: str, tensors: dict, metadata: dict) -> None:
    """One safetensors file, written under a temporary name and renamed. Its bytes are ours to
    write: `safetensors.save_file` renames a file of its own into place, mode 0600, which would
    leave our temporary name unused."""
    from safetensors.numpy import save

    tmp = f"{path}.tmp"
    with files.create_file(tmp) as f:
        f.write(save(tensors, metadata=metadata))
    files.rename(tmp, path)


def _index(folder: str) -> list[str]:
    """The checkpoints the index lists, oldest first ([] for none, or no index)."""
    path = f"{folder}/{INDEX}"
    return json.loads(files.read_text(path))["checkpoints"] if files.exists(path) else []


def latest(folder: str) -> str | None:
    """The newest checkpoint in `folder` as a path without suffix (`.../ckpt-500`), or None: the
    index's newest, else (a run from before this format) TensorFlow's `checkpoint` file's."""
    folder = folder.rstrip("/")
    listed = _index(folder)
    if listed:
        return f"{folder}/{listed[-1]}"
    if files.exists(f"{folder}/checkpoint") and backend.has_tensorflow():
        import tensorflow as tf

        return tf.train.latest_checkpoint(folder)
    return None


def exists(path: str) -> bool:
    """A checkpoint (either format) at `path`, a path without suffix."""
    return files.exists(path + SUFFIX) or files.exists(path + ".index")


def _out_of_space(error: Exception) -> bool:
    return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error)


@contextlib.contextmanager
def out_of_space_is_one_line(model_dir: str):
    """A full disk under the logs or history (checkpoints say more, in `Checkpoints.save`)."""
    try:
        yield
    except OSError as e:
        if not _out_of_space(e):
            raise
        raise DiskFullError(
            f"--model_dir {model_dir}: no space left on the device; checkpoints already written are "
            "complete: free space and re-run to resume"
        ) from None


def model_variables(model: keras.Model) -> dict:
    """The model's variables under stable keys: trainable weights by their Keras path (stable,
    because every layer is named); other state (dropout RNG seeds) by position, since its
    auto-generated names carry a process-wide counter (`seed_generator_20`) that differs when a
    process builds a second model."""
    named = weights_by_path(model)
    named.update({f"state/{i}": v for i, v in enumerate(model.non_trainable_variables)})
    return _unique(named, model.variables)


def optimizer_variables(optimizer: keras.optimizers.Optimizer) -> dict:
    """Step counter and slots, keyed by path without the counter suffix that a second optimizer
    in one process gets (`adam_w_1/...` -> `adam_w/...`)."""

    def key(path: str) -> str:
        owner, _, rest = path.partition("/")
        return f"{re.sub(r'_[0-9]+$', '', owner)}/{rest}"

    return _unique({key(v.path): v for v in optimizer.variables}, optimizer.variables)


def _unique(named: dict, variables) -> dict:
    if len(named) != len(variables):
        raise RuntimeError("two variables share a checkpoint key")
    return named


# === Reading back ===


def read_checkpoint(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({key: array}, metadata) of the checkpoint at `path` (without suffix), either format."""
    if files.exists(path + SUFFIX):
        from safetensors.numpy import load

        data = files.read_file(path + SUFFIX)
        header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
        return load(data), header.get("__metadata__", {})
    if files.exists(path + ".index"):
        return _read_tensorflow(path), {}
    raise CheckpointError(f"{path}: no checkpoint there ({path}{SUFFIX} does not exist)")


def _read_tensorflow(path: str) -> dict[str, np.ndarray]:
    """A checkpoint of the format bertbeam wrote before this one (`tf.train.Checkpoint` of dicts
    `model` and `optimizer`), by our keys."""
    if not backend.has_tensorflow():
        raise CheckpointError(
            f"{path}: a TensorFlow checkpoint (a run from before bertbeam's own format); reading it "
            "needs tensorflow, which this machine lacks: export it where TensorFlow is, or resume there"
        )
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    tensors = {}
    for name in reader.get_variable_to_shape_map():
        group, _, rest = name.partition("/")
        if group in ("model", "optimizer") and rest.endswith("/.ATTRIBUTES/VARIABLE_VALUE"):
            key = rest.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")
            # tf.train.Checkpoint escaped a dict key's "/" as ".S" and "." as "..".
            key = re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), key)
            tensors[f"{group}/{key}"] = reader.get_tensor(name)
    return tensors


def assign(variables: dict, tensors: dict, path: str, exact: bool = False) -> None:
    """Each variable its tensor, all or none: a missing key, another shape or a value its dtype
    cannot hold is a `CheckpointError`. `exact`: the checkpoint may hold nothing else (a resume)."""
    missing = sorted(set(variables) - set(tensors))
    if missing:
        raise CheckpointError(f"{path}: does not fit this model (it has no {missing[0]})")
    if exact and (extra := sorted(set(tensors) - set(variables))):
        raise CheckpointError(f"{path}: does not fit this model ({extra[0]} is not one of its variables)")
    values = {}
    for key, variable in variables.items():
        value = tensors[key]
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(
                f"{path}: does not fit this model ({key} has shape {list(value.shape)}, the model's "
                f"{list(variable.shape)})"
            )
        cast = value.astype(keras.backend.standardize_dtype(variable.dtype))
        if not np.array_equal(cast.astype(value.dtype), value):  # a seed as int64 or uint32, say
            raise CheckpointError(f"{path}: {key} does not fit the model's {variable.dtype}")
        values[key] = cast
    for key, variable in variables.items():
        variable.assign(values[key])


def read_weights(model: keras.Model, path: str, partial: bool = False) -> list[str]:
    """The weights of a bertbeam checkpoint; `CheckpointError` (with the cause) when the
    checkpoint does not fit the model. With `partial`, weights the checkpoint lacks keep their
    values (the heads an ELECTRA run does not have, a pooler a run without NSP never trained),
    and their paths are returned; a missing encoder weight, or one the checkpoint holds in
    another shape, is still an error."""
    tensors, _ = read_checkpoint(path)
    weights = {f"model/{p}": w for p, w in weights_by_path(model).items()}
    missing = []
    if partial:
        missing = [key.removeprefix("model/") for key in weights if key not in tensors]
        encoder = [p for p in missing if is_encoder_weight(p)]
        if encoder:  # another depth or layout: not a head that may start fresh
            raise CheckpointError(f"{path}: does not fit this model (it has no {encoder[0]})")
        weights = {k: w for k, w in weights.items() if k in tensors}
    assign(weights, tensors, path)
    return missing


def is_encoder_weight(path: str) -> bool:
    """The weight belongs to the encoder (embeddings, blocks, final norm), not to a head."""
    layer = path.split("/", 1)[0]
    return layer in ENCODER_LAYERS or re.fullmatch(r"transformer_\d+", layer) is not None


def layers_of(paths: list[str]) -> list[str]:
    """The layers that own weight `paths` (`transformer_0/attention/query/kernel` ->
    `transformer_0`), in their order, once each."""
    return list(dict.fromkeys(path.split("/", 1)[0] for path in paths))
