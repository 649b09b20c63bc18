"""A run's folder (`--model_dir`): the names of everything a run writes there, written atomically,
and the run read back (its configuration and model shape) by whatever comes after it (export).

    model_dir/  config.json  bert_config.json  corpus/  checkpoints/  logs/{train,validation}/
                history.jsonl  eval.json  loss.png  summary.json  export/  trace/ (--trace_batches)

corpus/ holds a copy of the manifest and the vocab (no shards) of the corpus the model was last
built for (the last phase's length, a mixture's first corpus): what export and fine-tuning read,
so that neither depends on where --data lived, nor on which of several corpora it named. Reading
data goes through the corpus folders themselves.
"""

from __future__ import annotations

import dataclasses
import json

from common.errors import BertbeamError
from launch import checkpoints
from launch.config import TrainConfig
from model.config import BertConfig
from pipeline import files
from pipeline.files import write_atomically
from pipeline.schema import MANIFEST_NAME, Manifest, read_manifest
from pipeline.vocab import VocabFile

CONFIG = "config.json"  # the TrainConfig of the latest start
BERT_CONFIG = "bert_config.json"  # the model's shape, resolved from --preset or --bert_config
HISTORY = "history.jsonl"  # a row per log interval
EVAL = "eval.json"  # the final evaluation on the whole validation split
SUMMARY = "summary.json"
LOSS_PLOT = "loss.png"
WARM_START = "warm_start.json"  # --init_checkpoint: the source, and the weights it had none for


class RunDirError(BertbeamError):
    """Not a run folder, or one without what is asked of it."""


@dataclasses.dataclass(frozen=True)
class RunDir:
    path: str  # local or gs://

    def __post_init__(self):
        object.__setattr__(self, "path", self.path.rstrip("/"))

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"

    @property
    def checkpoints(self) -> str:
        return self.file("checkpoints")

    @property
    def logs(self) -> str:
        return self.file("logs")

    @property
    def export(self) -> str:
        return self.file("export")

    @property
    def trace(self) -> str:
        return self.file("trace")

    @property
    def corpus(self) -> str:
        return self.file("corpus")

    def keep_corpus(self, manifest: Manifest) -> None:
        """A copy of `manifest` and its vocab in corpus/ (the shards stay where they are)."""
        vocab = VocabFile.of_corpus(manifest)
        write_atomically(f"{self.corpus}/{vocab.file_name}", vocab.data)
        write_atomically(f"{self.corpus}/{MANIFEST_NAME}", manifest.to_json())

    def read_corpus(self) -> Manifest:
        """The corpus the run's model is built for: corpus/ (runs from before it existed: --data)."""
        if files.exists(f"{self.corpus}/{MANIFEST_NAME}"):
            return read_manifest(self.corpus)
        return read_manifest(self.read_config().data)

    def read(self, name: str) -> str:
        return files.read_text(self.file(name))

    def exists(self, name: str) -> bool:
        return files.exists(self.file(name))

    def write(self, name: str, text: str) -> None:
        write_atomically(self.file(name), text)

    def write_json(self, name: str, value) -> None:
        self.write(name, json.dumps(value, indent=2, sort_keys=True))

    def read_config(self) -> TrainConfig:
        """The configuration the run was (last) started with."""
        return TrainConfig.from_json(self._read(CONFIG), source=self.file(CONFIG))

    def read_bert_config(self) -> BertConfig:
        return BertConfig.from_json(self._read(BERT_CONFIG))

    def latest_checkpoint(self) -> str:
        path = checkpoints.latest(self.checkpoints)
        if path is None:
            raise RunDirError(f"--model_dir {self.path}: no checkpoint yet in {self.checkpoints}")
        return path

    def _read(self, name: str) -> str:
        if not files.exists(self.file(name)):
            raise RunDirError(f"--model_dir {self.path}: no {name} (not a launch.pretrain run)")
        return files.read_text(self.file(name))
