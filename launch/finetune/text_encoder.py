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

from pipeline.text import BERT_CJK, char_class
from pipeline.vocab import VocabFile

# What BERT's normaliser turns into a space, and where its pre-tokenizer cuts a word off and keeps
# the cut as a word of its own: ASCII punctuation, Unicode's, CJK ideographs.
SPACE = r"[\t\n\r\p{Z}]"  # Zl and Zp too: U+2028 and U+2029 are spaces to `tokenizers`
BERT_SPLITS = f"[!-/:-@\\[-`{{-~\\p{{P}}]|[{char_class(BERT_CJK, re2=True)}]"


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
        return tf.cast(self.tokenizer.tokenize(self.normalise(text)).merge_dims(-2, -1), tf.int32)

    def normalise(self, text: tf.Tensor) -> tf.Tensor:
        """BERT's normaliser for a WordPiece vocab (module docstring), string by string."""
        text = tf.strings.regex_replace(text, SPACE, " ")
        text = tf.strings.regex_replace(text, r"[\p{C}\x{FFFD}]", "")
        if self.lower_case:
            text = tft.normalize_utf8(text, "NFD")
            text = tf.strings.regex_replace(text, r"\p{Mn}", "")
            text = tf.strings.lower(text, encoding="utf-8")
        return text

    def pieces_with_spans(self, text: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
        """(B,) strings -> each token's id and its (begin, end) character offsets into the raw
        string, (B, None) int32 each: `tokenize`'s ids, the vocab's `encode_with_spans` offsets.

        sentencepiece reports byte offsets into the raw text itself. BertTokenizer's offsets are
        into the normalised text, which is shorter wherever a control character or an accent went,
        so a WordPiece text is cut into BERT's words on the raw string first (at whitespace,
        punctuation and CJK; never inside what BERT keeps whole, so the ids are unchanged), each
        word normalised alone, and each normalised character traced back to the raw character it
        came from (normalising character by character: a removed character gives none)."""
        if self.kind == "tokenizer":
            raise ValueError("a tokenizer.json vocab has no graph tokeniser (module docstring)")
        if self.kind == "sentencepiece":
            ids, starts, ends = self.tokenizer.tokenize_with_offsets(text)
            rows = tf.gather(text, ids.value_rowids())
            return ids, *(ids.with_flat_values(chars_before(rows, o.flat_values)) for o in (starts, ends))
        cut = f"{SPACE}+|{BERT_SPLITS}"
        words, starts, _ = tft.regex_split_with_offsets(without_nul(text), cut, BERT_SPLITS)
        flat = words.flat_values
        word_start = chars_before(tf.gather(text, words.value_rowids()), starts.flat_values)
        normal = self.normalise(flat)
        ids, begins, ends = (t.merge_dims(-2, -1) for t in self.tokenizer.tokenize_with_offsets(normal))
        owner = ids.value_rowids()  # the word of each piece
        # Over all words' raw characters in a row: how many normalised characters they make, summed.
        chars = tf.strings.unicode_split(flat, "UTF-8")
        made = tf.cumsum(tf.strings.length(self.normalise(chars.flat_values), unit="UTF8_CHAR"))
        first_char = tf.cast(chars.row_starts(), tf.int32)
        before = tf.gather(tf.concat([[0], made], 0), first_char)  # made by the words before each word

        def raw(at):  # the raw character (within its word) that a normalised character came from
            found = tf.searchsorted(made, tf.gather(before, owner) + at, "right")
            return ids.with_flat_values(found - tf.gather(first_char, owner))

        piece_word = tf.gather(normal, owner)
        first = raw(chars_before(piece_word, begins.flat_values))
        last = raw(chars_before(piece_word, ends.flat_values) - 1)
        shift = ids.with_flat_values(tf.gather(word_start, owner))
        nested = [words.with_flat_values(t).merge_dims(1, 2) for t in (ids, shift + first, shift + last + 1)]
        return tf.cast(nested[0], tf.int32), nested[1], nested[2]

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


def without_nul(text: tf.Tensor) -> tf.Tensor:
    """`text` with each NUL as \x01 (both control characters, one byte): tensorflow-text's regex
    split reads a string only up to its first NUL."""
    return tf.strings.regex_replace(text, "\x00", "\x01")


def chars_before(strings: tf.Tensor, byte_offsets: tf.Tensor) -> tf.Tensor:
    """The character offset (int32) of each byte offset into its string."""
    prefix = tf.strings.substr(strings, tf.zeros_like(byte_offsets), byte_offsets)
    return tf.strings.length(prefix, unit="UTF8_CHAR")


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
