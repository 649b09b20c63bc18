"""The figures NER is judged by: entity-level precision, recall and F1, micro and per type (an
entity counts only with its type, start and end all right, in characters: conlleval's and
seqeval's rule, checked against seqeval in tests/launch/finetune/test_tag_schemes.py), the
validation F1 after each epoch, and the examples a tagger got wrong.

    entity_scores(gold, predicted)               # {"micro": Scores, "per_type": {type: Scores}}
    tag_figures(gold, predicted, lost)           # eval.json's numbers for one split
    error_samples(gold, predicted)               # errors.jsonl
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Sequence

import keras

from launch.finetune.tag.data import Tagged
from launch.finetune.tag.encoding import TagData, decoded_labels, predicted_entities
from launch.finetune.tag.schemes import Entity


@dataclasses.dataclass(frozen=True)
class Scores:
    precision: float
    recall: float
    f1: float
    support: int  # gold entities

    @classmethod
    def of(cls, correct: int, predicted: int, gold: int) -> Scores:
        precision = correct / predicted if predicted else 0.0
        recall = correct / gold if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return cls(precision, recall, f1, gold)


def entity_scores(gold: Sequence[Iterable[Entity]], predicted: Sequence[Iterable[Entity]]) -> dict:
    """Exact-match entity figures over a set of examples (each a collection of entities):
    {"micro": Scores, "per_type": {type: Scores}}; an entity counts only with its type, start and
    end all right."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold examples against {len(predicted)} predicted")
    correct, n_gold, n_predicted = Counter(), Counter(), Counter()
    for truth, guess in zip(gold, predicted, strict=True):
        truth, guess = set(truth), set(guess)
        for counter, found in ((n_gold, truth), (n_predicted, guess), (correct, truth & guess)):
            counter.update(kind for kind, _, _ in found)
    types = sorted(set(n_gold) | set(n_predicted))
    per_type = {t: Scores.of(correct[t], n_predicted[t], n_gold[t]) for t in types}
    micro = Scores.of(sum(correct.values()), sum(n_predicted.values()), sum(n_gold.values()))
    return {"micro": micro, "per_type": per_type}


def tag_figures(gold: Sequence[Tagged], predicted: Sequence[Sequence[Entity]], lost: int) -> dict:
    """Entity-level precision, recall and F1, micro and per type (exact spans in characters)."""
    scores = entity_scores([example.entities for example in gold], predicted)
    as_dict = dataclasses.asdict
    return {
        "entity_f1": scores["micro"].f1,
        "entity_precision": scores["micro"].precision,
        "entity_recall": scores["micro"].recall,
        "entities": scores["micro"].support,
        "per_type": {kind: as_dict(s) for kind, s in scores["per_type"].items()},
        "examples": len(gold),
        "unaligned_entities": lost,
    }


def error_samples(gold: Sequence[Tagged], predicted: Sequence[Sequence[Entity]], limit: int = 50) -> str:
    """JSONL of the first `limit` examples whose entities were not all right: the text, what was
    missed and what was wrong (type, start, end, the characters)."""
    lines = []
    for example, guess in zip(gold, predicted, strict=True):
        truth, guess = set(example.entities), set(guess)
        if truth == guess:
            continue
        shown = {
            name: [(k, s, e, example.text[s:e]) for k, s, e in sorted(found, key=lambda x: x[1])]
            for name, found in (("missed", truth - guess), ("wrong", guess - truth))
        }
        lines.append(json.dumps({"text": example.text, **shown}, ensure_ascii=False) + "\n")
        if len(lines) == limit:
            break
    return "".join(lines)


class EntityF1(keras.callbacks.Callback):
    """Validation entity F1 after every epoch, as `val_entity_f1` in the logs (before
    EarlyStopping reads them: put this callback first)."""

    def __init__(self, decode, data: TagData, gold: Sequence[Tagged], labels: Sequence[str], batch: int):
        super().__init__()
        self.decode, self.data, self.gold, self.labels, self.batch = decode, data, gold, labels, batch

    def on_epoch_end(self, epoch, logs=None):
        predicted = predicted_entities(
            self.data, decoded_labels(self.decode, self.data, self.batch), self.labels
        )
        f1 = entity_scores([g.entities for g in self.gold], predicted)["micro"].f1
        if logs is not None:
            logs["val_entity_f1"] = f1
        print(f"epoch {epoch + 1}: validation entity F1 {f1:.4f}", flush=True)
