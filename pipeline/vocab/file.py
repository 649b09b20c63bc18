"""`VocabFile`: a vocab's kind and bytes, what the pipeline passes around (a Beam side input) and
what a corpus stores; `load()` gives the vocab of its kind, `of_corpus(manifest)` reads a built
corpus's, checked against the manifest's hash."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Literal

from pipeline.schema import Manifest
from pipeline.vocab.base import (
    VocabError,
)
from pipeline.vocab.sentencepiece import SentencePieceVocab
from pipeline.vocab.tokenizer_json import TokenizerVocab
from pipeline.vocab.wordpiece import WordPieceVocab

Vocab = SentencePieceVocab | WordPieceVocab | TokenizerVocab


# kind: its file name in a corpus
KINDS = {"sentencepiece": "vocab.model", "wordpiece": "vocab.txt", "tokenizer": "tokenizer.json"}


@dataclasses.dataclass(frozen=True)
class VocabFile:
    """A vocab's kind and bytes: what the pipeline passes around and what a corpus stores."""

    kind: Literal["sentencepiece", "wordpiece", "tokenizer"]
    data: bytes
    lower_case: bool = False  # wordpiece only
    # A release's vocab (`--vocab RELEASE_DIR`): its name, base sha256 and any tokens added to it.
    release: Mapping[str, object] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def file_name(self) -> str:
        return KINDS[self.kind]

    def load(self) -> Vocab:
        if self.kind == "wordpiece":
            return WordPieceVocab(self.data, self.lower_case)
        if self.kind == "tokenizer":
            return TokenizerVocab(self.data)
        return SentencePieceVocab(self.data)

    @classmethod
    def of_corpus(cls, manifest: Manifest) -> VocabFile:
        """The vocab beside a corpus's shards, refused in one line unless it is the one they were
        tokenized with (the manifest's sha256): masking and export use it."""
        from pipeline import files

        path, info = manifest.vocab_path, manifest.vocab
        if not files.exists(path):
            raise VocabError(f"{path}: missing (the manifest names it); rebuild the corpus")
        data = files.read_file(path)
        found = hashlib.sha256(data).hexdigest()
        if found != info.sha256:
            raise VocabError(
                f"{path}: sha256 {found[:12]}..., the manifest says {info.sha256[:12]}...; "
                "the shards were tokenized with another vocab, rebuild the corpus"
            )
        return cls(info.kind, data, info.lower_case, dict(info.release))


def kind_of(path: str) -> str:
    """A vocab file's kind by its name: Google BERT's vocab.txt, a Hugging Face tokenizer.json,
    else a sentencepiece model."""
    if path.endswith(".json"):
        return "tokenizer"
    return "wordpiece" if path.endswith(".txt") else "sentencepiece"
