"""`launch.finetune --task tag`: a token tagger (NER) on a pretrained encoder, judged by entity F1.

Reads CoNLL or JSONL (`data.py`), puts the character-level entities onto the vocab's pieces as
BIO in windows (`alignment.py`, `encoding.py`), trains the tagger (`model/tasks/tagger.py`;
`--crf` adds a CRF whose transitions learn at --crf_lr_multiplier x the rate) and keeps the epoch
with the best validation entity F1 (`metrics.py`). Writes, beside what every task writes
(`launch/finetune/skeleton.py`):
  eval.json      entity F1, precision, recall, per type, unaligned entities on validation and
                 under "test"; the recipe (labels, scheme, crf, rate, ...)
  errors.jsonl   the first 50 examples (test, else validation) with an entity missed or wrong
  tagger.keras, serving/ (raw strings in, entities out: type, character start and end, text;
                 `serving.py`)
  hf/            a softmax tagger as transformers' BertForTokenClassification (a ModernBERT one
                 as ModernBertForTokenClassification; labels in its config's id2label)
"""

from __future__ import annotations

import keras

from launch.finetune.config import FinetuneError
from launch.finetune.skeleton import Task, label_config
from launch.finetune.tag.data import read_tagged
from launch.finetune.tag.encoding import decoded_labels, decoder, encode_tagged, predicted_entities
from launch.finetune.tag.metrics import EntityF1, error_samples, tag_figures
from launch.finetune.tag.schemes import bio_labels
from model.tasks.tagger import build_tagger, compile_tagger
from pipeline.files import write_atomically


class TagTask(Task):
    name, model_file, monitor, rows = "tag", "tagger.keras", "val_entity_f1", "windows"
    scores = "tagger"
    hf = ("BertForTokenClassification", "classifier", "ModernBertForTokenClassification")

    def read(self, split: str, path: str):
        found = read_tagged(path, on_bad_row=self.config.on_bad_row)
        if split == "train":
            if not found.types:
                raise FinetuneError(f"--train {path}: no entity in it; a tagger needs at least one type")
            self.labels = bio_labels(found.types)
        return found

    def encode(self, found: dict) -> dict:
        config, vocab = self.config, self.source.vocab_file.load()
        return {
            split: encode_tagged(
                tagged.examples, vocab, self.labels, config.seq_len, config.stride, config.label_all_pieces
            )  # fmt: skip
            for split, tagged in found.items()
        }

    def build(self, encoder: keras.Model, fresh: list[str]) -> keras.Model:
        config = self.config
        return build_tagger(encoder, len(self.labels), self.source.bert.dropout, config.seed, crf=config.crf,
                            config=self.source.bert)  # fmt: skip

    def compile(self, model: keras.Model, optimizer) -> None:
        compile_tagger(model, optimizer, self.config.jit_compile)

    def faster_layers(self) -> dict[str, float] | None:
        return {"crf": self.config.crf_lr_multiplier} if self.config.crf else None

    def recipe(self) -> dict:
        config = self.config
        return {"crf": config.crf, "labels": self.labels, "scheme": self.found["train"].scheme,
                "label_all_pieces": config.label_all_pieces, "doc_stride": config.stride,
                "windows": {split: len(d) for split, d in self.data.items()}}  # fmt: skip

    def validation(self, model: keras.Model) -> dict:
        self.decode = decoder(model, self.labels, self.config.crf, self.config.jit_compile)
        batch = self.config.global_batch_size
        gold = self.found["validation"].examples
        return {"callbacks": [EntityF1(self.decode, self.data["validation"], gold, self.labels, batch)]}

    def describe(self, steps: int, recipe: dict) -> str:
        config, train = self.config, self.found["train"]
        return (
            f"fine-tuning a tagger{' with a CRF' if config.crf else ''} from "
            f"{'scratch' if config.from_scratch else self.source.weights} on {config.train}: {len(train)} "
            f"examples ({len(self.data['train'])} windows), {len(self.labels)} labels ({train.scheme}), "
            f"{config.budget(steps)}; learning rate {recipe['learning_rate']:g}, "
            f"layer decay {recipe['layer_decay']:g}"
        )

    def evaluate(self, model: keras.Model, split: str) -> dict:
        data = self.data[split]
        decoded = decoded_labels(self.decode, data, self.config.global_batch_size)
        predicted = predicted_entities(data, decoded, self.labels)
        self.errors = error_samples(self.found[split].examples, predicted)  # the last split's: test
        return tag_figures(self.found[split].examples, predicted, data.lost)

    def write_extras(self, out: str, results: dict) -> None:
        write_atomically(f"{out}/errors.jsonl", self.errors)

    def headline(self, figures: dict) -> dict:
        return {"entity_f1": figures["entity_f1"]}

    def run_config(self) -> dict:
        return {"labels": self.labels}

    def restore(self, run: dict, results: dict) -> None:
        self.labels = run["labels"]

    # --- exports ---

    def ids_outputs(self, model: keras.Model, inputs: dict) -> dict:
        return {"scores": model(inputs, training=False)}

    def raw_endpoints(self, model: keras.Model, text_encoder) -> dict:
        from launch.finetune.tag.serving import raw_endpoints

        config = self.config
        return raw_endpoints(
            model, text_encoder, self.labels, config.crf, config.label_all_pieces, config.stride
        )

    def hf_config(self) -> dict:
        return label_config(self.labels)
