"""Character-level labels onto the tokenizer's pieces.

    units = units_of(example.words, piece_spans)        # the words, grouped where pieces join them
    labels, lost = unit_labels(units, example.entities)  # BIO per unit; entities it cannot hold

Pieces come from the vocab's own `encode_with_spans` (character offsets into the original text,
for vocab.txt, sentencepiece and tokenizer.json alike). A **unit** is what one label belongs to:
a word, or several words one piece covers (a character-per-line Chinese file's digits "2008"
become one piece, so its four one-character words become one unit). A unit's first piece carries
its label; the others are ignored by the loss, or carry it too (`all_pieces`: B- becomes I-).
An entity whose edge falls inside a unit cannot be told apart by this tokenizer: it is labelled
from the unit it starts in to the one it ends in, counted as `lost` (its exact span can never be
predicted), and scored at the character level against the gold text all the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from launch.finetune.tag.schemes import Entity, bio_tags
from model.tasks import IGNORE


@dataclasses.dataclass(frozen=True)
class Units:
    spans: tuple[tuple[int, int], ...]  # each unit's characters: its first word's start, last word's end
    first_piece: tuple[int, ...]  # the index of each unit's first piece (-1: no piece reached it)
    piece_unit: tuple[int, ...]  # the unit of each piece (-1: a piece on no word, e.g. a lone "▁")

    def __len__(self) -> int:
        return len(self.spans)


def units_of(words: Sequence[tuple[int, int]], pieces: Sequence[tuple[int, int]]) -> Units:
    """Group `words` (sorted character spans) that one piece spans into units; map each piece."""
    joins = [False] * len(words)  # word i joins the unit of word i - 1
    piece_words = []
    w = 0
    for begin, end in pieces:
        while w < len(words) and words[w][1] <= begin:
            w += 1
        last = w
        while last < len(words) and words[last][0] < end:
            last += 1
        piece_words.append(w if last > w and end > begin else -1)
        for i in range(w + 1, last):
            joins[i] = True
    unit_of_word, spans = [], []
    for i, (start, end) in enumerate(words):
        if joins[i] and spans:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        unit_of_word.append(len(spans) - 1)
    piece_unit = tuple(unit_of_word[w] if w >= 0 else -1 for w in piece_words)
    first = [-1] * len(spans)
    for piece, unit in enumerate(piece_unit):
        if unit >= 0 and first[unit] < 0:
            first[unit] = piece
    return Units(tuple(spans), tuple(first), piece_unit)


def unit_at(units: Units, char: int) -> int:
    """The unit whose characters hold `char`, or the next one after it."""
    for i, (_, end) in enumerate(units.spans):
        if char < end:
            return i
    return len(units) - 1


def unit_labels(units: Units, entities: Sequence[Entity]) -> tuple[list[str], int]:
    """BIO tags per unit for character-level `entities`, and how many of them the units cannot
    hold exactly (an edge inside a unit, a unit no piece reached, or a unit two entities share)."""
    spans, lost, taken = [], 0, -1
    for kind, start, end in entities:
        first, last = unit_at(units, start), unit_at(units, end - 1)
        exact = units.spans[first][0] == start and units.spans[last][1] == end
        seen = all(units.first_piece[u] >= 0 for u in range(first, last + 1))
        if first <= taken:  # shares a unit with the entity before it
            lost += 1
            continue
        lost += not (exact and seen)
        spans.append((kind, first, last + 1))
        taken = last
    return bio_tags(spans, len(units)), lost


def piece_labels(units: Units, tags: Sequence[str], label_ids: dict[str, int], all_pieces: bool) -> list[int]:
    """A label id per piece: the unit's on its first piece; on the others IGNORE, or with
    `all_pieces` the unit's again (B- as I-)."""
    out = []
    for piece, unit in enumerate(units.piece_unit):
        if unit < 0:
            out.append(IGNORE)
        elif units.first_piece[unit] == piece:
            out.append(label_ids[tags[unit]])
        elif all_pieces:
            tag = tags[unit]
            out.append(label_ids["I" + tag[1:] if tag.startswith("B-") else tag])
        else:
            out.append(IGNORE)
    return out
