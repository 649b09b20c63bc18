"""A sentencepiece vocab: its trainer (`train_sentencepiece`, on the corpus's sentences) and
`SentencePieceVocab`, a `.model` loaded with the tables masking needs; words start with "▁"."""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Iterable

import numpy as np
import sentencepiece as spm

from pipeline.schema import VocabInfo
from pipeline.text import is_cjk
from pipeline.vocab.base import (
    SPECIAL_PIECES,
    WORD_START,
    VocabError,
)


def train_sentencepiece(sentences: Iterable[str], *, vocab_size: int, model_type: str) -> bytes:
    """A serialized sentencepiece model trained on `sentences` (in the order given).

    [PAD]=0 and [UNK]=1 are sentencepiece's own pad/unk; [CLS], [SEP], [MASK] are control symbols
    (ids 2, 3, 4), so a literal "[MASK]" in the text is never read as the mask token.
    """
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=0,
        pad_piece=SPECIAL_PIECES["pad"],
        unk_id=1,
        unk_piece=SPECIAL_PIECES["unk"],
        bos_id=-1,
        eos_id=-1,
        control_symbols=[SPECIAL_PIECES[k] for k in ("cls", "sep", "mask")],
        character_coverage=0.9995,
        input_sentence_size=0,  # we already sampled; do not let it resample
        shuffle_input_sentence=False,
        hard_vocab_limit=False,  # a tiny corpus may not support the full size: take what fits
        num_threads=1,  # one thread: the trained model's bytes must not depend on scheduling
        minloglevel=2,
    )
    return model.getvalue()


def _byte_to_char(sentence: str) -> np.ndarray:
    """(len(utf8) + 1,) the character index of every UTF-8 byte offset of `sentence`."""
    codepoints = np.frombuffer(sentence.encode("utf-32-le"), np.uint32)
    widths = 1 + (codepoints >= 0x80) + (codepoints >= 0x800) + (codepoints >= 0x10000)
    return np.append(np.repeat(np.arange(len(codepoints)), widths), len(codepoints))


@dataclasses.dataclass(frozen=True)
class SentencePieceVocab:
    """A loaded sentencepiece model plus what masking needs, built once per worker."""

    model_bytes: bytes

    def __post_init__(self):
        processor = spm.SentencePieceProcessor(model_proto=self.model_bytes)
        object.__setattr__(self, "processor", processor)
        ids = {}
        for key, piece in SPECIAL_PIECES.items():
            pid = processor.piece_to_id(piece)
            if processor.id_to_piece(pid) != piece:
                raise VocabError(
                    f"vocab lacks the special piece {piece}; expected BERT's [PAD] [UNK] [CLS] "
                    "[SEP] [MASK] (train one with --vocab_size N)"
                )
            ids[key] = pid
        if ids["pad"] != 0:
            raise VocabError(f"vocab has [PAD] at id {ids['pad']}, expected 0")
        object.__setattr__(self, "special_ids", ids)

    @property
    def size(self) -> int:
        return self.processor.get_piece_size()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.model_bytes).hexdigest()

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(is_special, starts_word, is_cjk) boolean arrays indexed by token id."""
        n = self.size
        is_special = np.zeros(n, bool)
        for pid in self.special_ids.values():
            is_special[pid] = True
        for pid in range(n):
            if self.processor.is_control(pid):
                is_special[pid] = True
        pieces = [self.processor.id_to_piece(i) for i in range(n)]
        starts_word = np.array([p.startswith(WORD_START) for p in pieces], bool) | is_special
        cjk = np.array([is_cjk(p) for p in pieces], bool)
        return is_special, starts_word, cjk

    def encode(self, sentences: list[str]) -> list[list[int]]:
        return self.processor.encode(sentences, out_type=int)

    def encode_with_spans(self, sentences: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Per sentence: its ids and each token's (begin, end) character offsets."""
        out = []
        protos = self.processor.encode(sentences, return_type="proto")
        for sentence, proto in zip(sentences, protos, strict=True):
            pieces = proto.pieces
            to_char = _byte_to_char(sentence).tolist()
            out.append(([p.id for p in pieces], [(to_char[p.begin], to_char[p.end]) for p in pieces]))
        return out

    def describe(self, file_name: str, trained: bool) -> VocabInfo:
        return VocabInfo(file_name, self.sha256, self.size, dict(self.special_ids), trained, "sentencepiece")
