"""Tag schemes for token tagging (NER): any of them read as entities, entities written as BIO.

    scheme_of(["B-PER", "I-PER", "O"])            # "bio"; "bioes", "io" (BILOU reads as BIOES)
    entities(["B-PER", "I-PER", "O", "I-LOC"])     # [("PER", 0, 2), ("LOC", 3, 4)]
    bio_tags([("PER", 0, 2)], 4)                   # ["B-PER", "I-PER", "O", "O"]

An entity is (type, start, end), end exclusive, over whatever units the tags label (tokens, or
characters once `launch/finetune/tag/data.py` maps them to text). `entities` reads any of the schemes
with conlleval's chunk rules, which seqeval's default mode also follows: a chunk starts at B or S,
at I or E after O, E or S, and wherever the type changes; it ends after E or S, before B, S or O,
and wherever the type changes. So a stray I-X after O opens an X entity rather than being dropped,
as seqeval's does (`metrics.py` scores the entities).
Inside the project every scheme becomes entities, and entities become BIO for the model: one
label set, one set of valid transitions, whatever the files used.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from common.errors import BertbeamError

SCHEMES = ("bio", "bioes", "io")
# BILOU's L(ast) and U(nit) are BIOES's E and S.
PREFIXES = {"B": "B", "I": "I", "E": "E", "S": "S", "L": "E", "U": "S"}

Entity = tuple[str, int, int]  # (type, start, end): end exclusive


class TagError(BertbeamError):
    """A tag no scheme reads; one line naming it."""


def split_tag(tag: str) -> tuple[str, str]:
    """ "B-PER" -> ("B", "PER"), "O" -> ("O", ""); BILOU's L and U as E and S. Anything else, a
    bare type included, is a TagError: guessing would mislabel silently."""
    if tag == "O":
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if not dash or prefix not in PREFIXES or not kind:
        raise TagError(f"tag {tag!r}: expected O, or B-, I-, E-, S- (or BILOU's L-, U-) and a type")
    return PREFIXES[prefix], kind


def scheme_of(tags: Iterable[str]) -> str:
    """The scheme a set of tags is written in: io (I and O only), bio, or bioes (any E or S)."""
    prefixes = {split_tag(tag)[0] for tag in tags}
    if prefixes & {"E", "S"}:
        return "bioes"
    return "bio" if "B" in prefixes else "io"


def entities(tags: Sequence[str]) -> list[Entity]:
    """The entities of one tag sequence by conlleval's chunk rules (module docstring)."""
    found: list[Entity] = []
    start, prev_prefix, prev_kind = None, "O", ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, kind = split_tag(tag)
        type_changed = kind != prev_kind
        ends = (
            prev_prefix in "ES"
            or (prev_prefix in "BI" and prefix in "BSO")
            or (prev_prefix != "O" and type_changed)
        )
        starts = (
            prefix in "BS" or (prefix in "IE" and prev_prefix in "ESO") or (prefix != "O" and type_changed)
        )
        if ends and start is not None:
            found.append((prev_kind, start, i))
            start = None
        if starts:
            start = i
        prev_prefix, prev_kind = prefix, kind
    return found


def bio_tags(spans: Iterable[Entity], length: int) -> list[str]:
    """BIO tags of `length` units for non-overlapping entities."""
    tags = ["O"] * length
    for kind, start, end in spans:
        tags[start] = f"B-{kind}"
        for i in range(start + 1, end):
            tags[i] = f"I-{kind}"
    return tags


def bio_labels(types: Iterable[str]) -> list[str]:
    """The model's label set for entity `types`: O first, then B- and I- of each type, sorted."""
    return ["O", *(f"{p}-{t}" for t in sorted(set(types)) for p in "BI")]


def bio_constraints(labels: Sequence[str], forbidden: float = -1e4) -> tuple[np.ndarray, np.ndarray]:
    """Transition (from, to) and start scores that allow only valid BIO over `labels`: I-X only
    after B-X or I-X, never first. Viterbi with them decodes a softmax tagger's scores into valid
    sequences (`model/tasks/crf.py: viterbi`)."""
    kinds = [split_tag(label) for label in labels]
    transitions = np.zeros((len(labels), len(labels)), "float32")
    start = np.zeros(len(labels), "float32")
    for to, (prefix, kind) in enumerate(kinds):
        if prefix == "I":
            start[to] = forbidden
            for before, (before_prefix, before_kind) in enumerate(kinds):
                if before_kind != kind or before_prefix not in "BI":
                    transitions[before, to] = forbidden
    return transitions, start
