"""SQuAD and CMRC files, their figures by the official definitions, and answers through windows:
logits that point at the gold pieces give back the gold text from every window layout, a
question without an answer gives "", and every bad question is one line naming it."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from launch.finetune.span.data import SquadDataError, read_squad
from launch.finetune.span.encoding import best_answers, encode_spans
from launch.finetune.span.metrics import cmrc_units, pair_scores, span_scores
from pipeline.vocab import VocabFile


def squad_file(tmp_path, paragraphs, name="squad.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return str(path)


def botchan_questions(botchan, count=40):
    """Real paragraphs of Botchan; each question asks for a name the paragraph holds (its answer
    is that occurrence), every fifth unanswerable."""
    text = " ".join(botchan.read_text(encoding="utf-8").split())
    paragraphs, rng = [], random.Random(2)
    for i, m in enumerate(re.finditer(r"(?:[^.]*?\b(?:Kiyo|Porcupine|Red Shirt)\b[^.]*\.){1,3}", text)):
        context = m.group().strip()
        names = list(re.finditer(r"Kiyo|Porcupine|Red Shirt", context))
        answer = rng.choice(names)
        qa = {"id": f"q{i}", "question": f"Who is named near word {len(context[: answer.start()].split())}?"}
        if i % 5 == 4:
            qa |= {"answers": [], "is_impossible": True}
        else:
            qa["answers"] = [{"text": answer.group(), "answer_start": answer.start()}]
        paragraphs.append({"context": context, "qas": [qa]})
        if len(paragraphs) == count:
            break
    return paragraphs


@pytest.mark.parametrize("vocab_kind", ["wordpiece", "sentencepiece"])
@pytest.mark.parametrize(("seq_len", "stride"), [(160, 64), (40, 7), (32, 5)])
def test_gold_logits_give_gold_answers_through_windows(botchan, botchan_wordpiece, botchan_vocab, tmp_path,
                                                      vocab_kind, seq_len, stride):  # fmt: skip
    # Windows of at least twice the longest answer: a start piece's most-context window then holds
    # the whole answer, which is the only window whose labels point at it (run_squad's scheme).
    found = read_squad(squad_file(tmp_path, botchan_questions(botchan)))
    assert found.version_2 and len(found) == 40
    vocab = (VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True) if vocab_kind == "wordpiece"
             else VocabFile("sentencepiece", botchan_vocab.read_bytes())).load()  # fmt: skip
    data = encode_spans(found.examples, vocab, seq_len, stride, max_query_length=12)
    if seq_len < 50:
        assert len(data) > 2 * len(found)
    start_logits = np.zeros((len(data), seq_len), np.float32)
    end_logits = np.zeros((len(data), seq_len), np.float32)
    start_logits[np.arange(len(data)), data.starts] = 10.0
    end_logits[np.arange(len(data)), data.ends] = 10.0
    for w, window in enumerate(data.windows):  # a question's no-answer windows point at [CLS]
        assert (data.starts[w] == 0) == (data.ends[w] == 0)
        assert (
            data.features["segment_ids"][w, window.offset] == 1
            and data.features["segment_ids"][w, window.offset - 1] == 0
        )
    answers = best_answers(data, start_logits, end_logits, allow_null=True)
    for example in found.examples:
        assert answers[example.id] == (example.answers[0][2] if example.answers else "")
    figures = span_scores(answers, found.examples)
    assert figures["exact_match"] == figures["f1"] == 1.0 and figures["no_answer_questions"] == 8


def test_squad_and_cmrc_figures():
    assert pair_scores("The Red Shirt", "red shirt!", "squad") == (1.0, 1.0)
    exact, f1 = pair_scores("the red shirt and Kiyo", "Red Shirt", "squad")
    assert exact == 0.0 and f1 == pytest.approx(2 * (2 / 4) * 1 / (2 / 4 + 1))
    assert cmrc_units("他在2008年去了New York。") == ["他", "在", "2008", "年", "去", "了", "new", "york"]
    exact, f1 = pair_scores("北京大学的", "北京大学", "cmrc")  # longest common substring 4 of 5 and 4
    assert exact == 0.0 and f1 == pytest.approx(2 * 0.8 * 1.0 / 1.8)
    assert pair_scores("京北", "北京", "cmrc")[1] == pytest.approx(0.5)  # a substring, not a bag
    from launch.finetune.span.data import SpanExample

    examples = [SpanExample("a", "q", "ctx", ((0, 3, "ctx"),)), SpanExample("b", "q", "ctx", ())]
    assert (
        span_scores({"a": "ctx", "b": "the"}, examples, "squad")["exact_match"] == 1.0
    )  # "the" says nothing
    assert span_scores({"a": "ctx", "b": "x"}, examples, "squad")["no_answer_exact_match"] == 0.0


@pytest.mark.parametrize(
    ("qa", "message"),
    [
        ({"id": "x1", "question": "?", "answers": [{"text": "abc", "answer_start": 3}]},
         "question x1: answer not at its answer_start: 'abc' at 3"),
        ({"id": "x2", "question": "?", "answers": [{"text": "abc", "answer_start": 99}]},
         "question x2: answer outside the context"),
        ({"id": "x3", "question": "  ", "answers": []}, "question x3: no question"),
        ({"id": "x4", "question": "?"}, "question x4: no answer: neither answers nor is_impossible"),
    ],
)  # fmt: skip
def test_bad_questions_are_one_line_or_counted(tmp_path, qa, message):
    good = {"id": "ok", "question": "which?", "answers": [{"text": "abc", "answer_start": 0}]}
    path = squad_file(tmp_path, [{"context": "abc def", "qas": [qa, good]}])
    with pytest.raises(SquadDataError, match=message):
        read_squad(path)
    found = read_squad(path, on_bad_row="skip")
    assert [e.id for e in found.examples] == ["ok"] and sum(found.bad_rows.values()) == 1
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(SquadDataError, match="broken.json: not a SQuAD-shaped file"):
        read_squad(str(tmp_path / "broken.json"))
