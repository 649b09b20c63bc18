"""The raw-string span extractor answers, question for question, what evaluation's Python path
answers: real Botchan paragraphs through windows much shorter than the contexts, n_best pairs
over all of a question's windows, no-answer against the threshold, odd texts, both vocab kinds;
and it survives a SavedModel."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from launch.finetune.span.data import SpanExample, read_squad
from launch.finetune.span.encoding import best_answers, encode_spans
from launch.finetune.span.serving import raw_endpoints, raw_span_extractor
from launch.finetune.text_encoder import TextEncoder
from launch.serving import write_saved_model
from model.config import BertConfig
from model.encoder import build_encoder
from model.tasks.span import build_span_model
from pipeline.vocab import VocabFile
from tests.launch.finetune.test_span_encoding import botchan_questions, squad_file
from tests.launch.finetune.test_tag_serving import ODD

SEQ_LEN = 29
OPTIONS = {"max_query_length": 7, "doc_stride": 5, "n_best": 4, "max_answer_length": 6}


def examples(botchan, tmp_path) -> list[SpanExample]:
    found = read_squad(squad_file(tmp_path, botchan_questions(botchan, 30))).examples
    return found + [SpanExample(f"odd{i}", "Who is it?", text, ()) for i, text in enumerate(ODD)]


def tiny_model(vocab_size: int):
    keras.utils.set_random_seed(4)
    bert = BertConfig(
        vocab_size, hidden_size=12, num_layers=1, num_heads=3, intermediate_size=17, max_position=32
    )
    return build_span_model(build_encoder(bert, SEQ_LEN), dropout=0.1, seed=4)


def python_answers(model, vocab_file, found, allow_null, null_threshold):
    data = encode_spans(found, vocab_file.load(), SEQ_LEN, OPTIONS["doc_stride"], OPTIONS["max_query_length"])
    logits = model.predict(data.features, verbose=0)
    return best_answers(data, logits["start"], logits["end"], n_best=OPTIONS["n_best"],
                        max_answer_length=OPTIONS["max_answer_length"], allow_null=allow_null,
                        null_threshold=null_threshold)  # fmt: skip


def served_answers(out: dict, found: list[SpanExample]) -> dict:
    answers = {}
    for i, example in enumerate(found):
        text, start, end = (out[k][i].numpy() for k in ("answer_text", "answer_start", "answer_end"))
        text = text.decode()
        assert (start, end) == (-1, -1) if not text else example.context[start:end] == text
        answers[example.id] = text
    return answers


@pytest.mark.slow  # about 15 s to trace
@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
def test_served_answers_are_the_python_paths(kind, botchan, botchan_wordpiece, botchan_vocab, tmp_path):
    vocab_file = (VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True) if kind == "wordpiece"
                  else VocabFile("sentencepiece", botchan_vocab.read_bytes()))  # fmt: skip
    found = examples(botchan, tmp_path)
    model = tiny_model(vocab_file.load().size)
    text_encoder = TextEncoder(vocab_file, SEQ_LEN)
    questions, contexts = (tf.constant([getattr(e, k) for e in found]) for k in ("question", "context"))
    spans = tf.function(
        raw_span_extractor(model, text_encoder, **OPTIONS, allow_null=False, null_threshold=0)
    )
    out = spans(questions, contexts)
    expected = python_answers(model, vocab_file, found, False, 0.0)
    assert served_answers(out, found) == expected
    answered = [text for text in expected.values() if text]
    assert len(answered) > 20 and len({len(t.split()) for t in answered}) > 2  # spans of several lengths
    unanswered = {e.id for e in found if not expected[e.id]}
    assert {"odd0", "odd1", "odd4"} <= unanswered  # nothing to answer with
    assert len(unanswered) < 6  # (a real one only where no n_best pair fits)

    # with unanswerable questions: a threshold where about half of them say "no answer"
    margin = (out["null_score"].numpy() - out["score"].numpy()).astype(np.float64)
    threshold = float(np.median(margin[np.isfinite(margin)]))
    nulls = tf.function(
        raw_span_extractor(model, text_encoder, **OPTIONS, allow_null=True, null_threshold=threshold)
    )
    expected = python_answers(model, vocab_file, found, True, threshold)
    assert served_answers(nulls(questions, contexts), found) == expected
    assert 10 < sum(not text for text in expected.values()) < 25


@pytest.mark.slow  # writes and loads a SavedModel
def test_the_saved_model_needs_no_bertbeam_code(botchan, botchan_wordpiece, tmp_path):
    vocab_file = VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True)
    found = examples(botchan, tmp_path)
    model = tiny_model(vocab_file.load().size)
    text_encoder = TextEncoder(vocab_file, SEQ_LEN)
    endpoints = raw_endpoints(model, text_encoder, **OPTIONS, allow_null=True, null_threshold=1.5)
    write_saved_model(str(tmp_path / "serving"), [model, text_encoder], endpoints)
    served = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]
    out = served(
        question=tf.constant([e.question for e in found]), context=tf.constant([e.context for e in found])
    )
    assert served_answers(out, found) == python_answers(model, vocab_file, found, True, 1.5)
