"""Span extraction's windows and answers: questions and contexts into static windows with their
answer's piece positions, and the model's start/end logits back into answer text.

    data = encode_spans(found.examples, vocab, seq_len=128, doc_stride=64, max_query_length=32)
    data.features, data.starts, data.ends       # (W, T) int32; (W,) positions, 0 ([CLS]) for none
    answers = best_answers(data, start_logits, end_logits, n_best=20, max_answer_length=30,
                           allow_null=True, null_threshold=0.0)   # {question id: text}

A window is [CLS] question [SEP] context piece range [SEP], segment ids 0 then 1, zero padding to
seq_len; the context goes in `doc_stride` pieces apart (`launch/finetune/windows.py`). An answer outside a
window (or a question without one) points at [CLS], as BERT's run_squad does. Answers are ranked
over all of a question's windows: the n_best starts and ends of each, pairs whose start has its
most context there, end >= start and at most max_answer_length pieces; the text is the context's
characters from the start piece's first to the end piece's last. With unanswerable questions
(SQuAD 2.0), "no answer" wins when its score (start + end at [CLS], the lowest over the windows)
beats the best span by more than null_threshold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from launch.finetune.span.data import SpanExample
from launch.finetune.windows import best_windows, windows


@dataclasses.dataclass
class SpanWindow:
    example: int  # index into the examples
    offset: int  # the window position of its first context piece
    start: int  # its first context piece
    size: int  # its context pieces
    best: np.ndarray  # (size,) bool: the pieces that have their most context in this window


@dataclasses.dataclass
class SpanData:
    features: dict[str, np.ndarray]  # input_ids, input_mask, segment_ids: (W, T) int32
    starts: np.ndarray  # (W,) int32: the answer's first piece in the window, 0 for none
    ends: np.ndarray  # (W,) int32: its last piece
    windows: list[SpanWindow]
    examples: list[SpanExample]
    pieces: list[list[tuple[int, int]]]  # per example: each context piece's characters

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def targets(self) -> dict[str, np.ndarray]:  # what the loss compares the logits with
        return {"start": self.starts, "end": self.ends}


def answer_pieces(spans: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """The first and last context piece of the character span [start, end), None if no piece
    overlaps it (an answer the tokenizer dropped, e.g. only control characters)."""
    inside = [i for i, (b, e) in enumerate(spans) if b < end and e > start]
    return (inside[0], inside[-1]) if inside else None


def encode_spans(examples: Sequence[SpanExample], vocab, seq_len: int, doc_stride: int,
                 max_query_length: int) -> SpanData:  # fmt: skip
    cls, sep = vocab.special_ids["cls"], vocab.special_ids["sep"]
    questions = vocab.encode([e.question for e in examples])
    contexts = vocab.encode_with_spans([e.context for e in examples])
    rows, out_windows, starts, ends, pieces = [], [], [], [], []
    for index, (example, question, (ids, spans)) in enumerate(
        zip(examples, questions, contexts, strict=True)
    ):
        question = question[:max_query_length]
        room = seq_len - len(question) - 3
        answer = answer_pieces(spans, *example.answers[0][:2]) if example.answers else None
        spans_of = windows(len(ids), room, min(doc_stride, room))
        best = np.array(best_windows(len(ids), spans_of), np.int64)
        offset = len(question) + 2
        for w, (start, size) in enumerate(spans_of):
            rows.append(([cls, *question, sep, *ids[start : start + size], sep], offset))
            inside = answer is not None and start <= answer[0] and answer[1] < start + size
            starts.append(offset + answer[0] - start if inside else 0)
            ends.append(offset + answer[1] - start if inside else 0)
            out_windows.append(SpanWindow(index, offset, start, size, best[start : start + size] == w))
        pieces.append(list(spans))
    n = len(rows)
    features = {name: np.zeros((n, seq_len), np.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    for i, (ids, offset) in enumerate(rows):
        features["input_ids"][i, : len(ids)] = ids
        features["input_mask"][i, : len(ids)] = 1
        features["segment_ids"][i, offset : len(ids)] = 1
    starts, ends = np.array(starts, np.int32), np.array(ends, np.int32)
    return SpanData(features, starts, ends, out_windows, list(examples), pieces)


def best_answers(data: SpanData, start_logits: np.ndarray, end_logits: np.ndarray, *, n_best: int = 20,
                 max_answer_length: int = 30, allow_null: bool = False,
                 null_threshold: float = 0.0) -> dict:  # fmt: skip
    """{question id: answer text ("" for no answer)} from every window's (T,) start/end logits."""
    best: dict[int, tuple[float, int, int]] = {}  # example -> (score, first piece, last piece)
    null: dict[int, float] = {}
    for w, window in enumerate(data.windows):
        s, e = start_logits[w], end_logits[w]
        null[window.example] = min(null.get(window.example, np.inf), float(s[0] + e[0]))
        context = slice(window.offset, window.offset + window.size)
        top_starts = np.argsort(-s[context], kind="stable")[:n_best]
        top_ends = np.argsort(-e[context], kind="stable")[:n_best]
        for i in top_starts:
            if not window.best[i]:
                continue
            for j in top_ends:
                if j < i or j - i + 1 > max_answer_length:
                    continue
                score = float(s[window.offset + i] + e[window.offset + j])
                if score > best.get(window.example, (-np.inf,))[0]:
                    best[window.example] = (score, window.start + i, window.start + j)
    answers = {}
    for index, example in enumerate(data.examples):
        found = best.get(index)
        if found is None or (allow_null and null[index] > found[0] + null_threshold):
            answers[example.id] = ""
            continue
        spans = data.pieces[index]
        # strip: a sentencepiece piece's span starts at the space its "▁" stands for
        answers[example.id] = example.context[spans[found[1]][0] : spans[found[2]][1]].strip()
    return answers
