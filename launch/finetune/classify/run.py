"""`launch.finetune --task classify` (the default): a label per text or text pair, judged by
accuracy and macro-F1.

Reads JSONL, TSV, CSV or a tfds split (`data.py`), tokenises in the graph with the run's vocab
(`launch/finetune/text_encoder.py`), trains the classifier (`model/tasks/classifier.py`: the pooled
[CLS] output or the mean of the real tokens, --pooling) and keeps the epoch with the best
validation accuracy. Writes, beside what every task writes (`launch/finetune/skeleton.py`):
  eval.json       accuracy, macro_f1, per_class, loss, examples on validation and under "test";
                  recipe: objective, pooling, layer_decay, fresh
  confusion.png   the confusion matrix (test when given, else validation)
  classifier.keras, serving/ (raw `text`, and `text_pair` for pair tasks, to label, label_id,
                  probabilities, logits; "tokenize" gives the model inputs: `serving.py`)
  hf/             transformers' BertForSequenceClassification ([CLS] pooling: it reads the
                  pooler) or ModernBertForSequenceClassification (its classifier_pooling)
"""

from __future__ import annotations

import keras
import numpy as np

from launch.finetune.classify.data import label_names, read_examples
from launch.finetune.classify.encoding import encode_texts
from launch.finetune.classify.metrics import figures, plot_confusion
from launch.finetune.config import FinetuneError
from launch.finetune.skeleton import Task, full_batches, label_config
from launch.interop.formats import HF_PREFIX
from model.tasks.classifier import build_classifier, compile_classifier, default_pooling
from pipeline.vocab.release import served_pooling


class ClassifyTask(Task):
    name, model_file, monitor, rows = "classify", "classifier.keras", "val_accuracy", "usable rows"
    scores = "classifier"
    hf = ("BertForSequenceClassification", "classifier", "ModernBertForSequenceClassification")
    hf_pooler = True

    def read(self, split: str, path: str):
        config = self.config
        keep = None if split == "train" else self.names
        found = read_examples(config.source(path), config.labelled_format, keep, config.on_bad_row)
        if split == "train":
            self.names = label_names(found.labels)
            if len(self.names) < 2:
                raise FinetuneError(
                    f"--train {path}: {len(self.names)} label(s) found; a classifier needs 2 or more"
                )
        return found

    def encode(self, found: dict) -> dict:
        vocab_file, seq_len = self.source.vocab_file, self.config.seq_len
        index = {name: i for i, name in enumerate(self.names)}
        return {
            split: Labelled(
                encode_texts(vocab_file, seq_len, ex.texts, ex.pairs),
                np.array([index[y] for y in ex.labels], np.int32),
            )
            for split, ex in found.items()
        }

    def build(self, encoder: keras.Model, fresh: list[str]) -> keras.Model:
        """--pooling auto: a sentence-transformers release's own (`served_pooling`), else
        `default_pooling` (the pooler where pretraining trained it)."""
        pooling = self.config.pooling
        if pooling == "auto" and self.source.weights.startswith(HF_PREFIX):
            pooling = served_pooling(self.source.weights.removeprefix(HF_PREFIX)) or pooling
        self.pooling = (
            default_pooling("pooler" not in fresh, self.source.bert) if pooling == "auto" else pooling
        )
        return build_classifier(encoder, len(self.names), self.source.bert.dropout, self.config.seed,
                                self.pooling, config=self.source.bert)  # fmt: skip

    def compile(self, model: keras.Model, optimizer) -> None:
        compile_classifier(model, optimizer, self.config.jit_compile)

    def fresh_layers(self, fresh: list[str], model: keras.Model) -> list[str]:
        read = [layer for layer in fresh if layer != "pooler" or self.pooling == "cls"]
        return read + super().fresh_layers([], model)

    def recipe(self) -> dict:
        return {"pooling": self.pooling}

    def validation(self, model: keras.Model) -> dict:
        """Keras's own weighted accuracy on the validation batches (the filling copies weigh 0)."""
        return {"validation_data": self._batches("validation", weighted=True)}

    def describe(self, steps: int, recipe: dict) -> str:
        config, source = self.config, self.source
        return (
            f"fine-tuning {'from scratch' if config.from_scratch else source.weights} on {config.train}: "
            f"{len(self.found['train'])} examples, {len(self.names)} labels, {config.budget(steps)}; "
            f"learning rate {recipe['learning_rate']:g}"
            f"{'' if config.learning_rate else ' (by width)'}, {recipe['pooling']} pooling, layer decay "
            f"{recipe['layer_decay']:g}"
            + ("" if config.from_scratch else f"; starting fresh: {', '.join(recipe['fresh'])}")
        )

    def evaluate(self, model: keras.Model, split: str) -> dict:
        data = self.data[split]
        logits = model.predict(self._batches(split), verbose=0)
        found = figures(data.targets, np.asarray(logits)[: len(data)], self.names, self.found[split].bad_rows)
        if split == "validation":
            found.pop("bad_rows")  # the top level's bad_rows covers every split
        return found

    def write_extras(self, out: str, results: dict) -> None:
        """confusion.png of the test split where there is one, else of validation."""
        split = "test" if "test" in results else "validation"
        confusion = (results["test"] if "test" in results else results).pop("confusion")
        results.pop("confusion", None)
        plot_confusion(confusion, self.names, f"{self.config.run_name}: {split}", f"{out}/confusion.png")

    def headline(self, figures: dict) -> dict:
        return {"accuracy": figures["accuracy"], "macro_f1": figures["macro_f1"]}

    def run_config(self) -> dict:
        return {"labels": self.names}

    def restore(self, run: dict, results: dict) -> None:
        self.names, self.pooling = run["labels"], results["recipe"]["pooling"]

    # --- exports ---

    def ids_outputs(self, model: keras.Model, inputs: dict) -> dict:
        from launch.finetune.classify.serving import predictions

        return predictions(model, self.names)(inputs)

    def raw_endpoints(self, model: keras.Model, text_encoder) -> dict:
        from launch.finetune.classify.serving import raw_endpoints

        return raw_endpoints(model, text_encoder, self.names, self.config.text_pair_field is not None)

    def hf_refusal(self, model: keras.Model) -> str | None:
        """transformers' BertForSequenceClassification reads [CLS] through the pooler, and
        ModernBertForSequenceClassification pools by its config's classifier_pooling (cls: the
        [CLS] position itself, which bertbeam's ModernBERT classifier never uses)."""
        if self.source.bert.modern and self.pooling != "mean":
            return (
                f"{self.pooling} pooling: ModernBertForSequenceClassification's cls pooling reads the [CLS] "
                "position, not a pooler; fine-tune with --pooling mean for a transformers classifier"
            )
        if not self.source.bert.modern and self.pooling != "cls":
            return (
                f"{self.pooling} pooling: BertForSequenceClassification reads [CLS] through the pooler "
                "only; fine-tune with --pooling cls for a transformers classifier"
            )
        return None

    def hf_config(self) -> dict:
        pooling = {"classifier_pooling": self.pooling} if self.source.bert.modern else {}
        return label_config(self.names) | pooling

    def _batches(self, split: str, weighted: bool = False):
        """The split's examples in order, in full batches; `weighted`: with the label ids and
        weights that count each example once and the filling copies not at all."""
        data = self.data[split]
        return full_batches(data.features, self.config.global_batch_size, data.targets if weighted else None)


class Labelled:
    """A split's model inputs {name: (N, T) int32} and label ids (N,)."""

    def __init__(self, features: dict[str, np.ndarray], targets: np.ndarray):
        self.features, self.targets = features, targets

    def __len__(self) -> int:
        return len(self.targets)
