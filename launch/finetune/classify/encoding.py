"""Texts (and text pairs) to the classifier's inputs, as google-research/bert's run_classifier lays
them out: [CLS] a [SEP] (b [SEP]), segment ids 0 then 1, zero padding to seq_len; too long, tokens
come off the end of the longer text first (_truncate_seq_pair).

    features = encode_texts(vocab_file, 128, texts, pairs)   # {name: (N, 128) int32}

Where TensorFlow is installed the graph's own tokeniser encodes them (`text_encoder.py`), the one
the SavedModel serves, so a served string gets exactly the ids training saw. Without it (JAX on a
machine without TensorFlow) the vocab's own tokenizer does, in Python: the pipeline's ids, which
the graph's equal (tests/launch/finetune/test_text_encoder.py holds the two layouts equal).
"""

from __future__ import annotations

import numpy as np

from pipeline.vocab import VocabFile


def encode_texts(
    vocab_file: VocabFile, seq_len: int, texts: list[str], pairs: list[str] | None = None
) -> dict:
    """The model inputs of every text (and its pair): (N, seq_len) int32 arrays."""
    from launch.backend import has_tensorflow

    if has_tensorflow():
        from launch.finetune.text_encoder import TextEncoder

        return TextEncoder(vocab_file, seq_len).encode_all(texts, pairs)
    return encode_in_python(vocab_file, seq_len, texts, pairs)


def encode_in_python(
    vocab_file: VocabFile, seq_len: int, texts: list[str], pairs: list[str] | None = None
) -> dict:
    """`encode_texts` by the vocab's own tokenizer, with no TensorFlow."""
    vocab = vocab_file.load()
    cls, sep = vocab.special_ids["cls"], vocab.special_ids["sep"]
    firsts = vocab.encode(texts)
    seconds = vocab.encode(pairs) if pairs is not None else [None] * len(texts)
    out = {
        name: np.zeros((len(texts), seq_len), np.int32) for name in ("input_ids", "input_mask", "segment_ids")
    }
    for row, (a, b) in enumerate(zip(firsts, seconds, strict=True)):
        a, b = truncated(list(a), None if b is None else list(b), seq_len - (2 if b is None else 3))
        ids = [cls, *a, sep, *([*b, sep] if b is not None else [])]
        out["input_ids"][row, : len(ids)] = ids
        out["input_mask"][row, : len(ids)] = 1
        out["segment_ids"][row, len(a) + 2 : len(ids)] = 1
    return out


def truncated(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """BERT's _truncate_seq_pair: one text keeps its first `budget` tokens; of a pair, a token comes
    off the end of the longer one (of b on a tie) until both fit."""
    if b is None:
        return a[:budget], None
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b
