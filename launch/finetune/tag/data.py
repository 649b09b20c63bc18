"""Token-tagging examples (NER) as text with character-level entities, from the files people have:

    found = read_tagged("train.conll")        # or .jsonl; on_bad_row="skip" counts bad rows instead
    found.examples[0].text, found.examples[0].entities   # "John lives in Paris", (("PER", 0, 4), ...)
    found.scheme, found.types, found.bad_rows

- CoNLL: a token and its tag per line (the first and the last column, so CoNLL-2003's four
  columns read too), a blank line between sentences, `-DOCSTART-` lines skipped; a character per
  line for Chinese, as the People's Daily NER set.
- JSONL `{"tokens": [...], "tags": [...]}`, optionally with the sentence's `"text"` (the tokens must
  then appear in it, in order); JSONL `{"text": ..., "entities": [{"start", "end", "label"}]}` with
  character offsets (end exclusive; an entity's optional `"text"` must be what the offsets hold).
Tags in BIO, BIOES (BILOU) or IO (`launch/finetune/tag/schemes.py`). Tokens become text joined by spaces,
except a sentence written a character per line with Chinese in it, which is joined without: the
original sentence, so digits and Latin runs reach the tokenizer whole, as they were written.

Every example keeps its words' character spans (the file's tokens, or for text with offsets the
pre-tokenizer's words: runs of letters and digits, each punctuation mark and each CJK character),
the units a label belongs to (`launch/finetune/tag/alignment.py`). A bad row stops the read with one line
naming the file, the line and what is wrong, or with on_bad_row="skip" is skipped and counted by
reason; nothing valid is dropped.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter

from common.errors import BertbeamError
from launch.finetune.config import BAD_ROW_POLICIES
from launch.finetune.tag.schemes import Entity, TagError, entities, scheme_of
from pipeline import files
from pipeline.text import BERT_CJK, char_class

# BERT's CJK ideographs (its tokenizer splits every one into a token of its own).
CJK = char_class(BERT_CJK)
WORDS = re.compile(rf"[{CJK}]|[^\W{CJK}]+|[^\w\s]")


class TaggedDataError(BertbeamError):
    """A tagging file that cannot be read, or a bad row in one (on_bad_row="error")."""


@dataclasses.dataclass(frozen=True)
class Tagged:
    text: str
    entities: tuple[Entity, ...]  # (type, start, end) in characters of `text`, end exclusive
    words: tuple[tuple[int, int], ...]  # the words' (start, end) characters, in order


@dataclasses.dataclass
class TaggedSet:
    examples: list[Tagged]
    scheme: str  # the files' tag scheme ("bio", "bioes", "io"; "offsets" for character entities)
    types: list[str]  # entity types, sorted
    bad_rows: dict[str, int]  # reason -> rows skipped

    def __len__(self) -> int:
        return len(self.examples)


class BadRow(TaggedDataError):
    """One row that cannot be read: the reason (counted) and the detail (the error's line)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def words_of(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(m.span() for m in WORDS.finditer(text))


def joined(tokens: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """Tokens as text and each token's span: a character per token with Chinese among them is
    joined without spaces (the sentence as written), anything else with one space."""
    glue = "" if all(len(t) == 1 for t in tokens) and any(re.match(f"[{CJK}]", t) for t in tokens) else " "
    spans, at = [], 0
    for token in tokens:
        spans.append((at, at + len(token)))
        at += len(token) + len(glue)
    return glue.join(tokens), spans


def located(text: str, tokens: list[str]) -> list[tuple[int, int]]:
    """Each token's span in `text`, found in order past whitespace; BadRow where one is not there."""
    spans, at = [], 0
    for i, token in enumerate(tokens):
        while at < len(text) and text[at].isspace():
            at += 1
        if not token or text[at : at + len(token)] != token:
            found = text[at : at + len(token) + 10]
            raise BadRow(
                "tokens do not match the text", f"token {i} {token!r} is not next in the text ({found!r})"
            )
        spans.append((at, at + len(token)))
        at += len(token)
    return spans


def from_tags(tokens: list[str], tags: list[str], text: str | None = None) -> Tagged:
    if len(tokens) != len(tags):
        raise BadRow("tokens and tags differ in length", f"{len(tokens)} tokens, {len(tags)} tags")
    try:
        found = entities(tags)
    except TagError as e:
        raise BadRow("unknown tag", str(e)) from None
    if text is None:
        text, spans = joined(tokens)
    else:
        spans = located(text, tokens)
    return Tagged(text, tuple((k, spans[s][0], spans[e - 1][1]) for k, s, e in found), tuple(spans))


def from_offsets(text: str, rows: list) -> Tagged:
    spans = []
    for entity in rows:
        try:
            start, end, label = int(entity["start"]), int(entity["end"]), str(entity["label"])
        except (KeyError, TypeError, ValueError):
            raise BadRow("bad entity", f"entity {entity!r}: expected start, end and label") from None
        if not 0 <= start < end <= len(text):
            raise BadRow(
                "entity outside the text",
                f"entity {start}-{end} ({label}): the text has {len(text)} characters",
            )
        if "text" in entity and text[start:end] != entity["text"]:
            raise BadRow(
                "entity text differs",
                f"entity {start}-{end} holds {text[start:end]!r}, not {entity['text']!r}",
            )
        spans.append((label, start, end))
    spans.sort(key=lambda s: (s[1], s[2]))
    for (_, _, end), (label, start, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise BadRow("overlapping entities", f"entity {label} at {start} starts inside the one before it")
    return Tagged(text, tuple(spans), words_of(text))


# === Files ===


def conll_rows(lines: list[str]):
    """(line number, tokens, tags) per sentence, numbered by its first line; a sentence with a line
    that has no tag is one BadRow at that line (the whole sentence, not the sentence less a token)."""
    tokens, tags, first, bad = [], [], 0, None
    for number, line in enumerate([*lines, ""], start=1):
        columns = line.split()
        if columns and columns[0] == "-DOCSTART-":
            continue
        if not columns:
            if bad:
                yield bad
            elif tokens:
                yield first, tokens, tags
            tokens, tags, bad = [], [], None
            continue
        if not tokens and not bad:
            first = number
        if len(columns) < 2:
            bad = bad or (
                number,
                BadRow("line without a tag", f"expected a token and its tag, found {line.strip()!r}"),
                None,
            )
        tokens.append(columns[0])
        tags.append(columns[-1])


def jsonl_rows(lines: list[str]):
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            yield number, BadRow("not JSON", "not a JSON object"), None
            continue
        yield number, row, None


def parse_jsonl(row) -> Tagged:
    if not isinstance(row, dict):
        raise BadRow("not JSON", "not a JSON object")
    if "tokens" in row and "tags" in row:
        tokens, tags = row["tokens"], row["tags"]
        if not (isinstance(tokens, list) and isinstance(tags, list)):
            raise BadRow("bad fields", "tokens and tags must be lists")
        return from_tags([str(t) for t in tokens], [str(t) for t in tags], row.get("text"))
    if isinstance(row.get("text"), str) and isinstance(row.get("entities"), list):
        return from_offsets(row["text"], row["entities"])
    raise BadRow(
        "bad fields", f"expected tokens and tags, or text and entities; found {', '.join(row) or 'none'}"
    )


def read_tagged(path: str, fmt: str = "auto", on_bad_row: str = "error") -> TaggedSet:
    if on_bad_row not in BAD_ROW_POLICIES:
        raise TaggedDataError(f"--on_bad_row {on_bad_row}: expected one of {', '.join(BAD_ROW_POLICIES)}")
    if fmt == "auto":
        fmt = "jsonl" if path.endswith((".jsonl", ".json")) else "conll"
    try:
        if not files.exists(path):
            raise FileNotFoundError(path)
        lines = files.read_text(path).splitlines()
    except (FileNotFoundError, UnicodeDecodeError) as e:
        raise TaggedDataError(f"{path}: cannot read it ({type(e).__name__})") from None
    examples, bad, tags_seen, offsets = [], Counter(), set(), False
    for number, row, tags in conll_rows(lines) if fmt == "conll" else jsonl_rows(lines):
        try:
            if isinstance(row, BadRow):
                raise row
            if fmt == "conll":
                example = from_tags(row, tags)
                tags_seen.update(tags)
            else:
                example = parse_jsonl(row)
                tags_seen.update(row.get("tags", []))
                offsets |= "entities" in row
        except BadRow as e:
            if on_bad_row == "error":
                raise TaggedDataError(f"{path}:{number}: {e} (--on_bad_row skip skips such rows)") from None
            bad[e.reason] += 1
            continue
        examples.append(example)
    if not examples:
        raise TaggedDataError(f"{path}: no usable example ({dict(bad) or 'empty'})")
    scheme = scheme_of(tags_seen) if tags_seen else "offsets"
    if tags_seen and offsets:
        scheme = f"{scheme}+offsets"
    types = sorted({k for example in examples for k, _, _ in example.entities})
    return TaggedSet(examples, scheme, types, dict(bad))
