"""What every vocab kind shares: BERT's special tokens at fixed ids, the word marks, the one
error class, and the table of tokens a vocab.txt or tokenizer.json is held as."""

from __future__ import annotations

import hashlib

from common.errors import BertbeamError

# BERT's special tokens at fixed ids. [PAD] must be 0: padding is zeros in every feature.
SPECIAL_PIECES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


WORD_START = "\u2581"  # sentencepiece's "▁": the piece begins a new word


CONTINUATION = "##"  # WordPiece: the token continues the word before it


class VocabError(BertbeamError):
    """A vocabulary that cannot serve BERT pretraining, or not the one a corpus was built with."""


# Google's vocab.txt also holds "[unused0]".."[unused993]" and the like: bracketed, never produced
# by the tokenizer (the pre-tokenizer splits "[" off), so never masked or drawn as a random token.
def is_bracketed(token: str) -> bool:
    return len(token) > 2 and token.startswith("[") and token.endswith("]")


class TokenTable:
    """A vocab held as the file's bytes (`data`) and its token list (`tokens`, index = id)."""

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()
