"""Tag schemes and entity figures: the same entities and the same precision, recall and F1 as
seqeval (default mode, conlleval's rules) on sequences that break every rule a tagger can break."""

from __future__ import annotations

import itertools
import random

import keras
import numpy as np
import pytest
from seqeval.metrics import classification_report
from seqeval.metrics.sequence_labeling import get_entities

from launch.finetune.tag.metrics import entity_scores
from launch.finetune.tag.schemes import (
    TagError,
    bio_constraints,
    bio_labels,
    bio_tags,
    entities,
    scheme_of,
    split_tag,
)
from model.tasks.crf import viterbi


def random_tags(rng: random.Random, length: int) -> list[str]:
    """Any prefix after any other, two types: stray I- after O, E- without B-, type switches."""
    return [
        rng.choice(["O", "O", *(f"{p}-{t}" for p in "BIES" for t in ("PER", "LOC"))]) for _ in range(length)
    ]


def test_entities_are_seqevals_on_every_kind_of_sequence():
    rng = random.Random(7)
    for _ in range(3000):
        tags = random_tags(rng, rng.randrange(0, 13))
        ours = entities(tags)
        theirs = [(kind, start, end + 1) for kind, start, end in get_entities(tags)]
        assert ours == theirs, tags


def test_entity_scores_are_seqevals():
    """Gold in BIO and predictions that are gold with damage (a shifted boundary, a wrong type, a
    stray I-, a dropped entity): micro and per-type figures as seqeval's report gives them."""
    rng = random.Random(11)
    gold, predicted = [], []
    for _ in range(257):
        length = rng.randrange(1, 17)
        spans, i = [], 0
        while i < length:
            width = rng.randrange(1, 4)
            if rng.random() < 0.3 and i + width <= length:
                spans.append((rng.choice(["PER", "LOC", "ORG"]), i, i + width))
                i += width
            i += 1
        truth = bio_tags(spans, length)
        guess = [t if rng.random() < 0.85 else rng.choice(["O", "I-PER", "B-LOC", "I-ORG"]) for t in truth]
        gold.append(truth)
        predicted.append(guess)
    ours = entity_scores([entities(t) for t in gold], [entities(p) for p in predicted])
    report = classification_report(gold, predicted, output_dict=True, zero_division=0)
    assert ours["micro"].support == report["micro avg"]["support"] > 100
    for name in ("precision", "recall", "f1"):
        assert getattr(ours["micro"], name) == pytest.approx(
            report["micro avg"][f"{name}-score" if name == "f1" else name]
        )
    for kind, scores in ours["per_type"].items():
        assert scores.f1 == pytest.approx(report[kind]["f1-score"])
        assert scores.support == report[kind]["support"]


def test_schemes_and_their_mistakes():
    assert scheme_of(["O", "I-PER"]) == "io"
    assert scheme_of(["B-PER", "I-PER", "O"]) == "bio"
    assert scheme_of(["S-PER", "B-LOC", "E-LOC"]) == "bioes"
    assert scheme_of(["U-PER", "B-LOC", "L-LOC"]) == "bioes"  # BILOU
    assert entities(["B-LOC", "L-LOC", "U-PER"]) == [("LOC", 0, 2), ("PER", 2, 3)]
    assert entities(["I-PER", "I-PER", "O", "I-PER"]) == [("PER", 0, 2), ("PER", 3, 4)]  # IO
    assert split_tag("B-GPE-ORG") == ("B", "GPE-ORG")
    for bad in ("PER", "X-PER", "B-", "b-PER", ""):
        with pytest.raises(TagError, match="expected O, or B-, I-, E-, S-"):
            split_tag(bad)
    assert bio_labels(["PER", "LOC", "PER"]) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert bio_tags([("PER", 1, 3), ("LOC", 3, 4)], 5) == ["O", "B-PER", "I-PER", "B-LOC", "O"]


def test_constrained_viterbi_is_the_best_valid_bio_sequence():
    """The valid-BIO constraints under the CRF's Viterbi (model/tasks/crf.py): the best path among
    the valid ones, found by trying them all."""
    labels = bio_labels(["LOC", "PER"])  # O B-LOC I-LOC B-PER I-PER
    transitions, start = bio_constraints(labels)
    rng = np.random.default_rng(4)
    n = 5
    for _ in range(20):
        log_probs = np.log(rng.dirichlet(np.ones(len(labels)), size=n)).astype("float32")
        path = keras.ops.convert_to_numpy(
            viterbi(log_probs[None], np.array([n]), transitions, start, np.zeros(len(labels), "float32"))
        )[0]
        valid = [
            seq for seq in itertools.product(range(len(labels)), repeat=n)
            if all(not labels[b].startswith("I-") or labels[a][2:] == labels[b][2:] and labels[a] != "O"
                   for a, b in zip((None, *seq[:-1]), seq, strict=True) if a is not None)
            and not labels[seq[0]].startswith("I-")
        ]  # fmt: skip
        best = max(valid, key=lambda seq: sum(log_probs[i, y] for i, y in enumerate(seq)))
        assert tuple(path) == best
