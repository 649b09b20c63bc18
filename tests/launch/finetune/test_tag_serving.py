"""The raw-string tagger gives, text for text, the entities fine-tuning's Python path predicts: the
same words (every BMP character checked), the vocab's own ids and character offsets (real English
and Chinese, accents, control characters), units, windows much shorter than the texts, and
decoding, for softmax and CRF taggers, each vocab kind; and it survives a SavedModel."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from launch.finetune.tag.data import Tagged, words_of
from launch.finetune.tag.encoding import decoded_labels, decoder, encode_tagged, predicted_entities
from launch.finetune.tag.schemes import bio_labels
from launch.finetune.tag.serving import graph_words, raw_endpoints, raw_tagger
from launch.finetune.text_encoder import TextEncoder
from launch.serving import write_saved_model
from model.config import BertConfig
from model.encoder import build_encoder
from model.tasks.tagger import build_tagger
from pipeline.vocab import VocabFile, train_wordpiece

ODD = [
    "",
    "   ",
    "Café  naïve\u00a0x\u200by e\u0301\u0301 ＫＡＤＯ 5€ a\x0bb ᾯ `x` ½3 2008年 北京",
    "ﬁne ǅ İstanbul straße\u2028new line\t\ttab ",
    "\u200b",
    "a\x00b c\x00",
]


def botchan_sentences(botchan, count: int) -> list[str]:
    text = " ".join(botchan.read_text(encoding="utf-8").split())
    return re.split(r"(?<=[.!?]) ", text)[200 : 200 + count]


def zh_sentences(zh_reviews, count: int) -> list[str]:
    lines = (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n")
    return [line.strip() for line in lines if line.strip()][:count]


@pytest.fixture(scope="module")
def vocabs(botchan_vocab, botchan_wordpiece, botchan, zh_reviews) -> dict:
    """(vocab file, real texts) of each kind: sentencepiece and a lower-cased WordPiece on Botchan,
    a cased character WordPiece on Chinese reviews."""
    english = botchan_sentences(botchan, 120) + ODD
    chinese = zh_sentences(zh_reviews, 120) + ODD
    zh_vocab = train_wordpiece(iter(chinese), vocab_size=3000, lower_case=False)
    return {
        "sentencepiece": (VocabFile("sentencepiece", botchan_vocab.read_bytes()), english),
        "wordpiece": (VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True), english),
        "wordpiece-zh": (VocabFile("wordpiece", zh_vocab, False), chinese),
    }


def test_graph_words_are_words_of_on_every_bmp_character(vocabs):
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000]
    single = graph_words(tf.constant([c.encode("utf-8") for c in chars]))
    found = [list(zip(s, e, strict=True)) for s, e in zip(*(t.to_list() for t in single), strict=True)]
    assert [(c, f) for c, f in zip(chars, found, strict=True) if f != list(words_of(c))] == []
    texts = vocabs["wordpiece"][1] + vocabs["wordpiece-zh"][1]
    starts, ends = (t.to_list() for t in graph_words(tf.constant(texts)))
    found = [list(zip(s, e, strict=True)) for s, e in zip(starts, ends, strict=True)]
    assert found == [list(words_of(text)) for text in texts]


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece", "wordpiece-zh"])
def test_pieces_with_spans_are_the_vocabs_own(kind, vocabs):
    vocab_file, texts = vocabs[kind]
    ids, starts, ends = TextEncoder(vocab_file, 16).pieces_with_spans(tf.constant(texts))
    rows = zip(*(t.to_list() for t in (ids, starts, ends)), strict=True)
    found = [(i, list(zip(s, e, strict=True))) for i, s, e in rows]
    encoded = vocab_file.load().encode_with_spans(texts)
    expected = [(i, [tuple(span) for span in spans]) for i, spans in encoded]
    assert [(t, f) for t, f, e in zip(texts, found, expected, strict=True) if f != e] == []
    assert sum(len(i) for i, _ in found) > 10 * len(texts)


def tiny_tagger(vocab_size: int, seq_len: int, labels: list[str], crf: bool):
    keras.utils.set_random_seed(3)
    bert = BertConfig(
        vocab_size, hidden_size=12, num_layers=1, num_heads=3, intermediate_size=17, max_position=32
    )
    tagger = build_tagger(build_encoder(bert, seq_len), len(labels), dropout=0.1, seed=3, crf=crf)
    if crf:  # transitions that matter: random, as a trained CRF's are not zero
        crf_layer = tagger.get_layer("crf")
        rng = np.random.default_rng(5)
        for weight in (crf_layer.transitions, crf_layer.start, crf_layer.end):
            weight.assign(rng.normal(0, 2, weight.shape).astype("float32"))
    return tagger


def python_path(tagger, vocab_file, texts, labels, crf, all_pieces, seq_len, stride):
    examples = [Tagged(text, (), words_of(text)) for text in texts]
    data = encode_tagged(examples, vocab_file.load(), labels, seq_len, stride, all_pieces)
    decoded = decoded_labels(decoder(tagger, labels, crf, jit_compile=False), data, batch=16)
    return predicted_entities(data, decoded, labels)


def served_entities(out: dict, texts: list[str]) -> list[list]:
    rows = []
    for i, text in enumerate(texts):
        n = int(out["entity_count"][i])
        kinds = [k.decode() for k in out["entity_type"][i].numpy()]
        starts, ends = out["entity_start"][i].numpy().tolist(), out["entity_end"][i].numpy().tolist()
        rows.append([(kinds[j], starts[j], ends[j]) for j in range(n)])
        assert [t.decode() for t in out["entity_text"][i][:n].numpy()] == [text[s:e] for _, s, e in rows[-1]]
        assert kinds[n:] == [""] * (len(kinds) - n) and set(starts[n:]) <= {-1}
    return rows


@pytest.mark.slow  # 5-10 s each to trace
@pytest.mark.parametrize(
    ("kind", "crf", "all_pieces"),
    [
        ("wordpiece", False, False),
        ("sentencepiece", True, True),
        ("wordpiece-zh", True, False),
    ],
)
def test_served_entities_are_the_python_paths(kind, crf, all_pieces, vocabs):
    vocab_file, texts = vocabs[kind]
    texts = texts[:30] + ODD
    seq_len, stride = 13, 4  # most texts span several windows
    labels = bio_labels(["LOC", "PER"])
    tagger = tiny_tagger(vocab_file.load().size, seq_len, labels, crf)
    expected = python_path(tagger, vocab_file, texts, labels, crf, all_pieces, seq_len, stride)
    serve = tf.function(raw_tagger(tagger, TextEncoder(vocab_file, seq_len), labels, crf, all_pieces, stride))
    found = served_entities(serve(tf.constant(texts)), texts)
    assert [(t, f, e) for t, f, e in zip(texts, found, expected, strict=True) if f != e] == []
    assert sum(map(len, found)) > len(texts)  # the random tagger finds plenty to compare
    assert any(e - s > 12 for row in found for _, s, e in row)  # entities over several pieces too


@pytest.mark.slow  # writes and loads a SavedModel
def test_the_saved_model_needs_no_bertbeam_code(vocabs, tmp_path):
    vocab_file, texts = vocabs["wordpiece"]
    labels = bio_labels(["PER"])
    tagger = tiny_tagger(vocab_file.load().size, 13, labels, crf=True)
    text_encoder = TextEncoder(vocab_file, 13)
    endpoints = raw_endpoints(tagger, text_encoder, labels, True, False, 4)
    write_saved_model(str(tmp_path / "serving"), [tagger, text_encoder], endpoints)
    expected = python_path(tagger, vocab_file, texts, labels, True, False, 13, 4)
    served = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]
    assert served_entities(served(text=tf.constant(texts)), texts) == expected
