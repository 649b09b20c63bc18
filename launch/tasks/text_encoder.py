"""Raw strings -> BERT inputs inside the TensorFlow graph: what fine-tuning trains on and what its
SavedModel serves, one function for both, so a served string gets exactly the ids training saw.

    encoder = TextEncoder(VocabFile.of_corpus(manifest), seq_len=128)
    batch = encoder(tf.constant(["a review"]), tf.constant(["its reply"]))   # or no pair
    batch["input_ids"], batch["input_mask"], batch["segment_ids"]          # (B, 128) int32

The pretraining pipeline tokenises in Python (sentencepiece, Hugging Face `tokenizers`); here the
same vocab runs as tensorflow-text ops, which a SavedModel can carry:
- sentencepiece: tensorflow-text's SentencepieceTokenizer, the same C++ library and model proto;
- WordPiece: BERT's normaliser written as regex ops (control characters dropped, every kind of
  whitespace a space, and with lower_case NFD + accents stripped + lower-cased, as `tokenizers`'
  BertNormalizer does), then tensorflow-text's BertTokenizer (whitespace, punctuation and CJK
  splits, greedy longest-match WordPiece).
Both give the pipeline's ids on every text of both demo corpora and both labelled sets
(tests/launch/test_finetune.py checks it on real text).
- tokenizer.json (ModernBERT's byte-level BPE): tensorflow-text has no byte-level BPE op, so
  `tokenizers` runs it in Python (the pipeline's own code, so the same ids) through
  `tf.py_function`. That works wherever the Python process runs the graph, training included,
  but a SavedModel cannot carry it: `graph_tokenizer` says so, and the fine-tuned SavedModel of
  such a vocab takes token ids instead (launch/serving.py).

Layout, as google-research/bert's run_classifier: [CLS] a [SEP] (b [SEP]), segment ids 0 then 1,
zero padding to seq_len. Too long: tokens come off the end of the longer text first (BERT's
_truncate_seq_pair), so a pair keeps as much of both as fits.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_text as tft

from pipeline.vocab import VocabFile


class TextEncoder(tf.Module):
    def __init__(self, vocab_file: VocabFile, seq_len: int):
        super().__init__(name="text_encoder")
        vocab = vocab_file.load()
        self.seq_len = seq_len
        self.kind = vocab_file.kind
        self.lower_case = bool(vocab_file.lower_case)
        self.cls_id = vocab.special_ids["cls"]
        self.sep_id = vocab.special_ids["sep"]
        # A tokenizer.json encodes in Python: the vocab itself (never tracked into a SavedModel).
        self.python_vocab = vocab if vocab_file.kind == "tokenizer" else None
        if vocab_file.kind == "tokenizer":
            self.tokenizer = None
        elif vocab_file.kind == "sentencepiece":
            self.tokenizer = tft.SentencepieceTokenizer(model=vocab_file.data, out_type=tf.int32)
        else:
            table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(vocab.tokens), tf.range(len(vocab.tokens), dtype=tf.int64)
                ),
                default_value=vocab.special_ids["unk"],
            )
            # max_bytes_per_word: `tokenizers` gives [UNK] past 200 characters; 800 bytes holds
            # 200 characters of any script, so no real word is cut short here first.
            self.tokenizer = tft.BertTokenizer(
                table,
                token_out_type=tf.int64,
                unknown_token="[UNK]",
                lower_case=False,
                max_bytes_per_word=800,
            )

    @property
    def graph_tokenizer(self) -> bool:
        """The tokeniser is graph ops, which a SavedModel can carry (not a tokenizer.json's)."""
        return self.kind != "tokenizer"

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """(B,) strings -> (B, None) int32 token ids, no special tokens."""
        if self.kind == "tokenizer":
            return self._python_tokenize(text)
        if self.kind == "sentencepiece":
            return self.tokenizer.tokenize(text)
        text = tf.strings.regex_replace(text, r"[\t\n\r\p{Zs}]", " ")
        text = tf.strings.regex_replace(text, r"[\p{C}\x{FFFD}]", "")
        if self.lower_case:
            text = tft.normalize_utf8(text, "NFD")
            text = tf.strings.regex_replace(text, r"\p{Mn}", "")
            text = tf.strings.lower(text, encoding="utf-8")
        return tf.cast(self.tokenizer.tokenize(text).merge_dims(-2, -1), tf.int32)

    def _python_tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        def encode(strings):
            ids = self.python_vocab.encode([s.decode("utf-8") for s in strings.numpy()])
            flat = [i for row in ids for i in row]
            return tf.constant(flat, tf.int32, (len(flat),)), tf.constant([len(r) for r in ids], tf.int64)

        values, lengths = tf.py_function(encode, [text], [tf.int32, tf.int64])
        values.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(values, lengths)

    def __call__(self, text: tf.Tensor, pair: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        segments = [self.tokenize(text)] if pair is None else [self.tokenize(text), self.tokenize(pair)]
        budget = self.seq_len - 1 - len(segments)  # [CLS] and one [SEP] per segment
        segments = truncate(segments, budget)
        ids, segment_ids = tft.combine_segments(segments, self.cls_id, self.sep_id)
        input_ids, input_mask = tft.pad_model_inputs(ids, self.seq_len)
        segment_ids, _ = tft.pad_model_inputs(segment_ids, self.seq_len)
        return {
            "input_ids": tf.cast(input_ids, tf.int32),
            "input_mask": tf.cast(input_mask, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
        }

    def encode_all(self, texts: list[str], pairs: list[str] | None = None, chunk: int = 1024) -> dict:
        """The model inputs of every text (and its pair), (N, seq_len) int32 numpy arrays each,
        by the graph's own tokeniser, `chunk` texts at a time."""
        parts = []
        for start in range(0, len(texts), chunk):
            pair = None if pairs is None else tf.constant(pairs[start : start + chunk])
            parts.append(
                {k: v.numpy() for k, v in self(tf.constant(texts[start : start + chunk]), pair).items()}
            )
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def truncate(segments: list[tf.RaggedTensor], budget: int) -> list[tf.RaggedTensor]:
    """BERT's _truncate_seq_pair in closed form: one text keeps its first `budget` tokens; of a pair,
    tokens come off the end of the longer one (of b on a tie) until both fit. (tensorflow-text's
    ShrinkLongestTrimmer does not trace inside a tf.function in 2.21.)"""
    lengths = [tf.cast(s.row_lengths(), tf.int32) for s in segments]
    if len(segments) == 1:
        keep = [tf.minimum(lengths[0], budget)]
    else:
        a, b = lengths
        half_up, half_down = (budget + 1) // 2, budget // 2
        fits = a + b <= budget
        keep_a = tf.where(
            fits | ((a <= b) & (2 * a <= budget)),
            a,
            tf.where((b < a) & (2 * b <= budget), budget - b, half_up),
        )
        keep_b = tf.where(
            fits | ((b < a) & (2 * b <= budget)),
            b,
            tf.where((a <= b) & (2 * a <= budget), budget - a, half_down),
        )
        keep = [keep_a, keep_b]
    out = []
    for segment, n in zip(segments, keep, strict=True):
        positions = tf.ragged.range(tf.cast(segment.row_lengths(), tf.int32))
        out.append(tf.ragged.boolean_mask(segment, positions < n[:, None]))
    return out
