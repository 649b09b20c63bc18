"""Reading-comprehension examples from SQuAD-shaped JSON: SQuAD 1.1 / 2.0 and CMRC 2018.

    found = read_squad("dev-v2.0.json")          # on_bad_row="skip" counts bad questions instead
    found.examples[0].question, .context, .answers   # answers: ((start, end, text), ...) in characters

The file: {"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}], "is_impossible"}]}]}]}; CMRC 2018 has the same shape. A question whose answer
text is not at its answer_start, or lies outside the context, is a bad row: one line naming the
file and the question's id, or skipped and counted. An unanswerable question (2.0) has no answers.
`metrics.py` scores the answers.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Mapping

from common.errors import BertbeamError
from launch.finetune.config import BAD_ROW_POLICIES
from pipeline import files


class SquadDataError(BertbeamError):
    """A SQuAD-shaped file that cannot be read, or a bad question in one (on_bad_row="error")."""


@dataclasses.dataclass(frozen=True)
class SpanExample:
    id: str
    question: str
    context: str
    answers: tuple[tuple[int, int, str], ...]  # (start, end, text) in characters of the context

    @property
    def impossible(self) -> bool:
        return not self.answers


@dataclasses.dataclass
class SpanSet:
    examples: list[SpanExample]
    bad_rows: dict[str, int]
    version_2: bool  # some questions are unanswerable

    def __len__(self) -> int:
        return len(self.examples)


def read_squad(path: str, on_bad_row: str = "error") -> SpanSet:
    if on_bad_row not in BAD_ROW_POLICIES:
        raise SquadDataError(f"--on_bad_row {on_bad_row}: expected one of {', '.join(BAD_ROW_POLICIES)}")
    if not files.exists(path):
        raise SquadDataError(f"{path}: no such file")
    try:
        raw = json.loads(files.read_text(path))
        paragraphs = [p for article in raw["data"] for p in article["paragraphs"]]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise SquadDataError(f"{path}: not a SQuAD-shaped file ({type(e).__name__}: {e})") from None
    examples, bad = [], collections.Counter()
    for paragraph in paragraphs:
        context = paragraph.get("context", "")
        for qa in paragraph.get("qas", []):
            qid = str(qa.get("id", "?"))
            try:
                examples.append(span_example(qid, context, qa))
            except SquadDataError as e:
                if on_bad_row == "error":
                    raise SquadDataError(
                        f"{path}: question {qid}: {e} (--on_bad_row skip skips such questions)"
                    ) from None
                bad[e.args[0].split(":")[0]] += 1
    if not examples:
        raise SquadDataError(f"{path}: no usable question ({dict(bad) or 'empty'})")
    return SpanSet(examples, dict(bad), any(e.impossible for e in examples))


def span_example(qid: str, context: str, qa: Mapping) -> SpanExample:
    question = str(qa.get("question", "")).strip()
    if not question:
        raise SquadDataError("no question: the question is empty")
    answers = []
    for answer in [] if qa.get("is_impossible") else qa.get("answers", []):
        text, start = str(answer.get("text", "")), answer.get("answer_start")
        if not isinstance(start, int) or not 0 <= start < start + len(text) <= len(context) or not text:
            raise SquadDataError(
                f"answer outside the context: {text!r} at {start}, the context has {len(context)}"
            )
        if context[start : start + len(text)] != text:
            found = context[start : start + len(text)]
            raise SquadDataError(
                f"answer not at its answer_start: {text!r} at {start}, the context has {found!r}"
            )
        answers.append((start, start + len(text), text))
    if not answers and not qa.get("is_impossible"):
        raise SquadDataError("no answer: neither answers nor is_impossible")
    return SpanExample(qid, question, context, tuple(dict.fromkeys(answers)))
