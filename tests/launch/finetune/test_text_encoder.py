"""The graph's text encoder against the Python code it must equal. BERT's CJK ideographs are
written once (pipeline/text.py's BERT_CJK) and read three ways: RE2 in the graph's splitter
(text_encoder.BERT_SPLITS), Python's `re` in the tagger's words (tag/data.py's CJK), and
`tokenizers`' BertNormalizer, which the pipeline tokenises with; all three must agree on every
code point. Classification's Python layout, for a machine without TensorFlow, must give the
graph's ids."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
from tokenizers import normalizers

from launch.finetune.classify.encoding import encode_in_python
from launch.finetune.tag.data import CJK
from launch.finetune.text_encoder import BERT_SPLITS, TextEncoder
from pipeline.vocab import VocabFile

SURROGATES = range(0xD800, 0xE000)


def every_code_point() -> list[str]:
    return [chr(p) for p in range(0x110000) if p not in SURROGATES]


def test_the_graph_the_tagger_and_tokenizers_split_the_same_cjk_characters():
    chars = every_code_point()
    cjk_class = BERT_SPLITS.split("|")[1]  # the second alternative: the ideographs
    in_graph = tf.strings.regex_full_match(tf.constant(chars), cjk_class).numpy()
    python = re.compile(f"[{CJK}]")
    in_python = np.array([python.fullmatch(c) is not None for c in chars])
    # BertNormalizer(handle_chinese_chars) puts a space on each side of what BERT calls CJK.
    bert = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True, strip_accents=False,
                                      lowercase=False)  # fmt: skip
    in_tokenizers = np.array([bert.normalize_str(c) == f" {c} " for c in chars])
    assert in_tokenizers.sum() > 80_000  # the ideographs through Extension E, and the compatibility blocks
    for name, found in (("graph", in_graph), ("tagger", in_python)):
        differ = [f"U+{ord(chars[i]):04X}" for i in np.flatnonzero(found != in_tokenizers)[:5]]
        assert differ == [], f"{name} and tokenizers disagree on {differ}"


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_the_python_layout_equals_the_graphs(kind, botchan, botchan_vocab, botchan_wordpiece):
    """Classification without TensorFlow encodes in Python (`encode_in_python`): the same ids,
    masks and segments as the graph's encoder, single texts and pairs, cut to fit both ways."""
    vocab_file = (
        VocabFile("sentencepiece", botchan_vocab.read_bytes())
        if kind == "sentencepiece"
        else VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True)
    )
    lines = [line.strip() for line in botchan.read_text(encoding="utf-8").splitlines() if line.strip()][
        200:420
    ]
    texts, pairs = lines[:110], lines[110:]
    pairs[3] = pairs[3][:5]  # a short second text beside a long first one
    texts[7] = "x"  # and the other way round
    for seq_len, second in ((19, None), (19, pairs), (61, pairs)):
        graph = TextEncoder(vocab_file, seq_len).encode_all(texts, second)
        python = encode_in_python(vocab_file, seq_len, texts, second)
        assert graph.keys() == python.keys()
        for name in graph:
            np.testing.assert_array_equal(python[name], graph[name], err_msg=f"{name} at {seq_len}")
        lengths = python["input_mask"].sum(axis=1)
        assert (lengths == seq_len).any() if seq_len == 19 else (lengths < seq_len).any()  # cut; padded
    assert python["segment_ids"].any()
