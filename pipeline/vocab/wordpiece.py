"""Google BERT's WordPiece vocab: its trainer (`train_wordpiece`, Hugging Face `tokenizers`'
WordPiece trainer with BERT's normalizer and pre-tokenizer) and `WordPieceVocab`, a vocab.txt
loaded with the tables masking needs; "##" marks a continuation."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

import numpy as np

from pipeline.schema import VocabInfo
from pipeline.text import is_cjk
from pipeline.vocab.base import (
    CONTINUATION,
    SPECIAL_PIECES,
    TokenTable,
    VocabError,
    is_bracketed,
)


def _bert_tokenizer(model, lower_case: bool):
    """A Hugging Face `Tokenizer` around `model` with Google BERT's normalizer and pre-tokenizer:
    control characters dropped, every CJK character a word of its own, punctuation split off."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers

    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lower_case, lowercase=lower_case
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def train_wordpiece(sentences: Iterable[str], *, vocab_size: int, lower_case: bool) -> bytes:
    """A Google-layout vocab.txt trained on `sentences` by `tokenizers`' WordPiece trainer: BERT's
    specials at ids 0-4 ([PAD] [UNK] [CLS] [SEP] [MASK]), then every character seen (word-initial,
    then "##" word-internal), then the learned pieces.

    The trainer alone is not deterministic: it numbers the "##" characters in hash-map order, and
    that numbering breaks ties between equally frequent merges, so two runs can learn different
    pieces. Handing it every character, sorted, as a leading "special" token fixes the numbering
    before it counts anything; with that, the same sentences give the same bytes in every process
    (tests/pipeline/test_wordpiece_training.py).
    """
    from tokenizers import models, trainers

    sentences = list(sentences)
    tokenizer = _bert_tokenizer(models.WordPiece(unk_token=SPECIAL_PIECES["unk"]), lower_case)
    initial, internal = set(), set()
    for sentence in sentences:
        normalized = tokenizer.normalizer.normalize_str(sentence)
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized):
            initial.add(word[0])
            internal.update(word[1:])
    alphabet = sorted(initial) + [CONTINUATION + c for c in sorted(internal)]
    if len(SPECIAL_PIECES) + len(alphabet) >= vocab_size:
        logging.getLogger("bertbeam.corpus").warning(
            "--vocab_size %d: the sample holds %d characters, all kept; no longer piece is learned",
            vocab_size,
            len(alphabet),
        )
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_PIECES.values(), *alphabet],
        show_progress=False,
    )
    tokenizer.train_from_iterator(sentences, trainer=trainer)
    tokens = sorted(tokenizer.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1])
    return "".join(f"{token}\n" for token, _ in tokens).encode("utf-8")


@dataclasses.dataclass(frozen=True)
class WordPieceVocab(TokenTable):
    """Google BERT's vocab.txt, tokenized by Hugging Face `tokenizers` (BERT's normalizer,
    pre-tokenizer and greedy longest-match WordPiece), with the tables masking needs."""

    data: bytes  # the vocab.txt bytes; a token's id is its line number
    lower_case: bool = False  # BERT's do_lower_case: lower case and strip accents first

    def __post_init__(self):
        from tokenizers import models

        try:
            text = self.data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise VocabError(f"not UTF-8 at byte {e.start}; expected one WordPiece token per line") from None
        tokens = [line.rstrip("\r") for line in text.split("\n")]
        if tokens and tokens[-1] == "":
            tokens.pop()  # the final newline
        ids: dict[str, int] = {}
        for number, token in enumerate(tokens):
            if not token or token != token.strip():
                raise VocabError(f"line {number + 1}: {token!r} is empty or has surrounding spaces")
            if token in ids:
                raise VocabError(f"line {number + 1}: {token!r} repeats line {ids[token] + 1}")
            ids[token] = number
        special = {}
        for key, piece in SPECIAL_PIECES.items():
            if piece not in ids:
                raise VocabError(
                    f"vocab lacks the special token {piece}; expected BERT's [PAD] [UNK] [CLS] [SEP] [MASK]"
                )
            special[key] = ids[piece]
        if special["pad"] != 0:
            raise VocabError(f"vocab has [PAD] on line {special['pad'] + 1}, expected line 1 (id 0)")
        tokenizer = _bert_tokenizer(
            models.WordPiece(ids, unk_token=SPECIAL_PIECES["unk"], max_input_chars_per_word=200),
            self.lower_case,
        )
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "special_ids", special)
        object.__setattr__(self, "tokenizer", tokenizer)

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(is_special, starts_word, is_cjk); a "##" token continues the word before it."""
        is_special = np.array([is_bracketed(t) for t in self.tokens], bool)
        is_special[list(self.special_ids.values())] = True
        starts_word = np.array([not t.startswith(CONTINUATION) for t in self.tokens], bool) | is_special
        cjk = np.array([is_cjk(t) for t in self.tokens], bool)
        return is_special, starts_word, cjk

    def encode(self, sentences: list[str]) -> list[list[int]]:
        # No special tokens added: instances place [CLS] and [SEP] themselves. The _fast variant
        # skips the character offsets (only `encode_with_spans` needs them): the same ids, a
        # tenth less time.
        return [e.ids for e in self.tokenizer.encode_batch_fast(sentences, add_special_tokens=False)]

    def encode_with_spans(self, sentences: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Per sentence: its ids and each token's (begin, end) character offsets."""
        return [(e.ids, e.offsets) for e in self.tokenizer.encode_batch(sentences, add_special_tokens=False)]

    def describe(self, file_name: str, trained: bool) -> VocabInfo:
        return VocabInfo(
            file_name, self.sha256, self.size, dict(self.special_ids), trained, "wordpiece", self.lower_case
        )
