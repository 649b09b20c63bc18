"""The figures reading comprehension is judged by: exact match and F1, the best over a question's
gold answers, by SQuAD's rules (lower-cased, punctuation and English articles dropped, whitespace
tokens, token F1; an unanswerable question scores 1 only for an empty prediction) or, for
Chinese, CMRC 2018's (mixed segmentation: each CJK character a unit, runs of Latin letters and
digits a unit, punctuation dropped; F1 from the longest common substring of the two unit lists,
as its official script computes it).

    span_scores(predictions, found.examples)     # {"exact_match", "f1", ...; has_/no_answer_ ...}
"""

from __future__ import annotations

import collections
import re
import string
import unicodedata
from collections.abc import Mapping, Sequence

from launch.finetune.span.data import SpanExample
from pipeline.text import BERT_CJK, char_class

CJK = char_class(BERT_CJK)


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
