"""A Hugging Face tokenizer.json as a vocab (`TokenizerVocab`): ModernBERT's byte-level BPE, or any
model `tokenizers` reads; given, never trained here. Words start with "Ġ" (byte-level), "▁"
(Metaspace), or lack "##" (WordPiece)."""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.schema import VocabInfo
from pipeline.text import is_cjk
from pipeline.vocab.base import (
    CONTINUATION,
    WORD_START,
    TokenTable,
    VocabError,
)

# The special tokens by the names tokenizer.json files give them: BERT's, or RoBERTa's.
TOKENIZER_SPECIALS = {"pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>"), "cls": ("[CLS]", "<s>"),
                      "sep": ("[SEP]", "</s>"), "mask": ("[MASK]", "<mask>")}  # fmt: skip


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level map, reversed: the printable character that stands for each byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


@dataclasses.dataclass(frozen=True)
class TokenizerVocab(TokenTable):
    """A Hugging Face tokenizer.json (ModernBERT's byte-level BPE, GPT-2's and RoBERTa's, or any
    model `tokenizers` reads), with the tables masking needs.

    Whole-word marks come from the tokenizer's own word boundary: a byte-level token starting
    with "Ġ" (a space), a Metaspace token with "▁", a WordPiece token without "##". A byte-level
    tokenizer that adds no prefix space would read a sentence's first word without its "Ġ", as
    though it continued the previous sentence's last word, so each sentence is encoded as it
    stands in running text: after a space (`prefix`). Its [PAD] may be any id (ModernBERT's is
    50283): rows are padded with it and `input_mask` says which tokens are real."""

    data: bytes  # the tokenizer.json bytes

    def __post_init__(self):
        import json

        from tokenizers import Tokenizer

        try:
            spec = json.loads(self.data.decode("utf-8"))
            tokenizer = Tokenizer.from_str(self.data.decode("utf-8"))
        except Exception as e:  # tokenizers raises a bare Exception on a malformed file
            raise VocabError(f"not a tokenizers tokenizer.json ({str(e).splitlines()[0][:120]})") from None
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        special = {}
        for key, names in TOKENIZER_SPECIALS.items():
            found = next((vocab[n] for n in names if n in vocab), None)
            if found is None:
                raise VocabError(
                    f"tokenizer.json lacks {' or '.join(names)}; BERT pretraining needs "
                    "[PAD] [UNK] [CLS] [SEP] [MASK] (or <pad> <unk> <s> </s> <mask>)"
                )
            special[key] = found
        marker, prefix = _word_boundary(spec)
        tokens = [""] * (max(vocab.values()) + 1)  # by id; an id no token has stays ""
        for token, index in vocab.items():
            tokens[index] = token
        added_special = [i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special]
        object.__setattr__(self, "tokenizer", tokenizer)
        object.__setattr__(self, "special_ids", special)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "marker", marker)  # (kind, text) of the word boundary
        object.__setattr__(self, "prefix", prefix)  # put before each sentence
        object.__setattr__(self, "added_special", added_special)

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(is_special, starts_word, is_cjk): special ids are BERT's five and every added token
        marked special; the CJK test reads a byte-level token's bytes as text."""
        is_special = np.zeros(self.size, bool)
        is_special[[*self.special_ids.values(), *self.added_special]] = True
        kind, mark = self.marker
        if kind == "continuation":
            starts_word = np.array([not t.startswith(mark) for t in self.tokens], bool)
        else:
            starts_word = np.array([t.startswith(mark) for t in self.tokens], bool)
        texts = self.tokens
        if kind == "byte_level":
            alphabet = _byte_level_alphabet()
            texts = [bytes(alphabet.get(c, 32) for c in t).decode("utf-8", "ignore") for t in self.tokens]
        cjk = np.array([is_cjk(t) for t in texts], bool)
        return is_special, starts_word | is_special, cjk

    def encode(self, sentences: list[str]) -> list[list[int]]:
        texts = [self.prefix + s for s in sentences]
        return [e.ids for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_with_spans(self, sentences: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Per sentence: its ids and each token's (begin, end) character offsets in the sentence."""
        shift = len(self.prefix)
        encoded = self.tokenizer.encode_batch([self.prefix + s for s in sentences], add_special_tokens=False)
        return [(e.ids, [(max(b - shift, 0), max(end - shift, 0)) for b, end in e.offsets]) for e in encoded]

    def describe(self, file_name: str, trained: bool) -> VocabInfo:
        return VocabInfo(file_name, self.sha256, self.size, dict(self.special_ids), trained, "tokenizer")


def _word_boundary(spec: dict) -> tuple[tuple[str, str], str]:
    """((kind, mark), sentence prefix) from a tokenizer.json's pre-tokenizer or model."""

    def steps(part):
        if not part:
            return []
        if part.get("type") != "Sequence":
            return [part]
        return [s for p in part.get("pretokenizers", []) for s in steps(p)]

    for step in steps(spec.get("pre_tokenizer")):
        if step.get("type") == "ByteLevel":
            return ("byte_level", "\u0120"), "" if step.get("add_prefix_space") else " "
        if step.get("type") == "Metaspace":
            return ("start", step.get("replacement", WORD_START)), ""
    model = spec.get("model") or {}
    if model.get("type") == "WordPiece":
        return ("continuation", model.get("continuing_subword_prefix") or CONTINUATION), ""
    raise VocabError(
        f"tokenizer.json: no word boundary known for pre_tokenizer "
        f"{(spec.get('pre_tokenizer') or {}).get('type')} and model {model.get('type')}; "
        "expected ByteLevel, Metaspace or a WordPiece model"
    )
