"""A Hugging Face `save_pretrained` folder, whatever model it holds: config.json, model.safetensors
and the tokenizer files, written and read with numpy (no torch). Each model's names and shapes are
its format module's (`hf_bert.py`, `hf_electra.py`, `hf_modernbert.py`): a list of `HFTensor`s.

    write_hf_folder(folder, config, tensors_of(model, rows), vocab_file, max_position)
    fresh = assign_hf_tensors(model, folder, rows, optional={...}, prefix="bert.")
"""

from __future__ import annotations

import dataclasses
import json
import sys

import keras
import numpy as np

from common.errors import BertbeamError
from launch.interop.google import MappedVariable, from_google_layout, to_google_layout
from launch.interop.grow import exported_values
from launch.interop.hf_tokenizer import tokenizer_files
from model.encoder import weights_by_path
from pipeline import files
from pipeline.vocab import VocabFile

WEIGHTS = "model.safetensors"
TORCH_WEIGHTS = "pytorch_model.bin"  # older releases: a pickle, read only by torch
CONFIG = "config.json"


class HFCheckpointError(BertbeamError):
    """The Hugging Face checkpoint does not fit; one line naming the file and tensor."""


@dataclasses.dataclass(frozen=True)
class HFTensor:
    """One weight under both names, and how its layout differs between the two."""

    ours: str  # the Keras weight path
    hf: str  # transformers' state-dict name
    kernel: bool = False  # a Dense kernel: torch's Linear stores it transposed, (out, in)
    # BERT's names derive from Google's, and so do its layouts (attention kernels (H, heads, size)
    # in Keras are (H, H) there): the Google row, where the tensor goes through that layout.
    google: MappedVariable | None = None

    def to_hf(self, value: np.ndarray) -> np.ndarray:
        value = to_google_layout(self.google, value) if self.google else value
        return value.T if self.kernel else value

    def from_hf(self, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        value = value.T if self.kernel else value
        return from_google_layout(value, self.google, shape) if self.google else value


def hf_model_type(folder: str) -> str:
    """config.json's model_type ("bert", "electra", "modernbert"; "bert" when unsaid)."""
    return _config(folder).get("model_type", "bert")


def _config(folder: str) -> dict:
    path = f"{folder}/{CONFIG}"
    if not files.exists(path):
        return {}
    return json.loads(files.read_text(path))


def is_hf_config(raw: dict) -> bool:
    return raw.get("model_type") in ("bert", "electra", "modernbert") or "transformers_version" in raw


# === Out ===


def tensors_of(model: keras.Model, rows: list[HFTensor]) -> dict[str, np.ndarray]:
    """The state dict of `rows` from the model's variables (float32, C-contiguous)."""
    values = exported_values(model)
    return {row.hf: np.ascontiguousarray(row.to_hf(np.asarray(values[row.ours], np.float32))) for row in rows}


def write_hf_folder(folder: str, config: dict, tensors: dict[str, np.ndarray], vocab_file: VocabFile,
                    model_max_length: int) -> None:  # fmt: skip
    """A `save_pretrained` folder: config.json, model.safetensors, the vocab, and the tokenizer
    files where the vocab kind has a Hugging Face tokenizer."""
    from safetensors.numpy import save

    files.make_dirs(folder)
    written = {
        CONFIG: json.dumps(config, indent=2, sort_keys=True).encode(),
        WEIGHTS: save(tensors, metadata={"format": "pt"}),
        vocab_file.file_name: vocab_file.data,
    }
    tokenizer = tokenizer_files(vocab_file, model_max_length)
    if tokenizer is None:
        print(f"note: no Hugging Face tokenizer for this {vocab_file.kind} vocab (a bpe model); "
              f"{folder} has the weights and {vocab_file.file_name} only", file=sys.stderr)  # fmt: skip
    written.update(tokenizer or {})
    for name, data in written.items():
        files.write_atomically(f"{folder}/{name}", data)


# === In ===


def read_hf_tensors(folder: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    path = f"{folder}/{WEIGHTS}"
    if not files.exists(path) and files.exists(f"{folder}/{TORCH_WEIGHTS}"):
        architecture = (_config(folder).get("architectures") or ["AutoModel"])[0]  # keeps its heads
        convert = f"transformers.{architecture}.from_pretrained(DIR).save_pretrained(DIR)"
        raise HFCheckpointError(
            f"{folder}: only {TORCH_WEIGHTS} (torch's pickle format); bertbeam reads {WEIGHTS}: convert "
            f"it once with {convert}"
        )
    if not files.exists(path):
        raise HFCheckpointError(f"{folder}: no {WEIGHTS} (a Hugging Face save_pretrained folder)")
    return load(files.read_file(path))


def assign_hf_tensors(model: keras.Model, folder: str, rows: list[HFTensor], optional: set[str],
                      prefix: str) -> list[str]:  # fmt: skip
    """Assigns `rows` from `folder/model.safetensors`, each under its Hugging Face name with or
    without the base model's `prefix` (`bert.`, `electra.`, `model.`: a bare BertModel saves
    without it). A missing or mis-shaped tensor is a one-line error, before anything is assigned,
    unless its variable is in `optional`: those keep their fresh values. Returns what stays fresh:
    those, and every variable of the model no row maps."""
    folder = folder.rstrip("/")
    tensors = read_hf_tensors(folder)
    path = f"{folder}/{WEIGHTS}"
    weights = weights_by_path(model)
    values = {}
    for row in rows:
        found = next((k for k in (row.hf, row.hf.removeprefix(prefix)) if k in tensors), None)
        if found is None:
            if row.ours in optional:
                continue
            raise HFCheckpointError(f"{path}: no tensor {row.hf} (for {row.ours})")
        want = tuple(weights[row.ours].shape)
        expected = row.to_hf(np.zeros(want, np.float32)).shape
        if tensors[found].shape != expected:
            raise HFCheckpointError(
                f"{path}: {found} has shape {tensors[found].shape}, the model's {row.ours} needs {expected}"
            )
        values[row.ours] = row.from_hf(tensors[found].astype(np.float32), want)
    for ours, value in values.items():
        weights[ours].assign(value)
    return [p for p in weights if p not in values]
