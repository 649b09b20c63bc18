"""Span extraction (reading comprehension) examples and figures: SQuAD 1.1 / 2.0 and CMRC 2018.

    found = read_squad("dev-v2.0.json")          # on_bad_row="skip" counts bad questions instead
    found.examples[0].question, .context, .answers   # answers: ((start, end, text), ...) in characters
    span_scores(predictions, found.examples)         # exact match and F1, by SQuAD's or CMRC's rules

The file: {"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}], "is_impossible"}]}]}]}; CMRC 2018 has the same shape. A question whose answer
text is not at its answer_start, or lies outside the context, is a bad row: one line naming the
file and the question's id, or skipped and counted. An unanswerable question (2.0) has no answers.

Figures: SQuAD's (lower-cased, punctuation and English articles dropped, whitespace tokens; exact
match and token F1, the best over the gold answers; an unanswerable question scores 1 only for an
empty prediction). For Chinese, CMRC 2018's: mixed segmentation (each CJK character a unit, runs
of Latin letters and digits a unit, punctuation dropped) and F1 from the longest common substring
of the two unit lists, as its official script computes it.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import string
import unicodedata
from collections.abc import Mapping, Sequence

import tensorflow as tf

from common.errors import BertbeamError
from launch.tasks.tagged import BAD_ROW_POLICIES, CJK

METRICS = ("auto", "squad", "cmrc")


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
    try:
        raw = json.loads(tf.io.gfile.GFile(path).read())
        paragraphs = [p for article in raw["data"] for p in article["paragraphs"]]
    except (tf.errors.NotFoundError, json.JSONDecodeError, KeyError, TypeError) as e:
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


# === Figures ===


def squad_tokens(text: str) -> list[str]:
    """SQuAD's normalisation: lower case, punctuation and the articles a/an/the dropped."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def cmrc_units(text: str) -> list[str]:
    """CMRC 2018's mixed segmentation: each CJK character a unit, Latin and digit runs a unit,
    punctuation (any Unicode P category) and spaces dropped."""
    units = re.findall(rf"[{CJK}]|[^\W{CJK}]+", text.lower())
    return [u for u in units if not all(unicodedata.category(c).startswith("P") for c in u)]


def longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
    best, row = 0, [0] * (len(b) + 1)
    for x in a:
        new = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            if x == y:
                new[j] = row[j - 1] + 1
                best = max(best, new[j])
        row = new
    return best


def pair_scores(prediction: str, gold: str, metric: str) -> tuple[float, float]:
    """(exact match, F1) of one prediction against one gold answer."""
    if metric == "cmrc":
        p, g = cmrc_units(prediction), cmrc_units(gold)
        common = longest_common_substring(p, g)
    else:
        p, g = squad_tokens(prediction), squad_tokens(gold)
        common = sum((collections.Counter(p) & collections.Counter(g)).values())
    exact = float(p == g)
    if not p or not g:
        return exact, exact
    if common == 0:
        return exact, 0.0
    precision, recall = common / len(p), common / len(g)
    return exact, 2 * precision * recall / (precision + recall)


def metric_for(examples: Sequence[SpanExample], metric: str = "auto") -> str:
    """auto: CMRC's for contexts that are mostly Chinese, else SQuAD's."""
    if metric != "auto":
        return metric
    sample = "".join(e.context for e in examples[:200])
    cjk = len(re.findall(f"[{CJK}]", sample))
    return "cmrc" if cjk > 0.3 * max(1, len(sample)) else "squad"


def span_scores(
    predictions: Mapping[str, str], examples: Sequence[SpanExample], metric: str = "auto"
) -> dict:
    """exact_match and f1 (0-1) over `examples`, the best over each one's gold answers; with
    unanswerable questions also split by has_answer / no_answer."""
    metric = metric_for(examples, metric)
    groups = collections.defaultdict(list)
    for example in examples:
        guess = predictions.get(example.id, "")
        if example.impossible:  # right only when the prediction says nothing (after normalising)
            empty = float(not (cmrc_units(guess) if metric == "cmrc" else squad_tokens(guess)))
            score = (empty, empty)
        else:
            score = max(pair_scores(guess, text, metric) for _, _, text in example.answers)
        groups["all"].append(score)
        groups["no_answer" if example.impossible else "has_answer"].append(score)
    out = {"metric": metric, "questions": len(examples)}
    for name, scores in groups.items():
        prefix = "" if name == "all" else f"{name}_"
        out[f"{prefix}exact_match"] = sum(s[0] for s in scores) / len(scores)
        out[f"{prefix}f1"] = sum(s[1] for s in scores) / len(scores)
        if prefix:
            out[f"{prefix}questions"] = len(scores)
    return out
