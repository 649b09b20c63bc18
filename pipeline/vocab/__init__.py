"""Vocabularies: what tokenizes the corpus, and the per-token tables masking needs.

Three kinds, one interface (`size`, `special_ids`, `encode`, `encode_with_spans`, `tables`,
`describe`):
  sentencepiece  a `.model` trained here (`train_sentencepiece`) or given; words start with "▁"
  wordpiece      Google BERT's `vocab.txt`, a token per line, "##" marks a continuation; trained
                 here (`train_wordpiece`) or given; tokenized by Hugging Face `tokenizers` with
                 BERT's normalizer (lower case and accent stripping when `lower_case`) and
                 pre-tokenizer
  tokenizer      a Hugging Face `tokenizer.json`, given (ModernBERT's byte-level BPE, or any
                 model `tokenizers` reads); words start with "Ġ" (byte-level), "▁" (Metaspace),
                 or lack "##" (WordPiece)
`VocabFile` carries a vocab's kind and bytes through the pipeline (a Beam side input) and loads it;
`VocabFile.of_corpus(manifest)` reads a built corpus's vocab, checked against the manifest's hash.
One module per kind, each with its trainer where it has one (`sentencepiece.py`, `wordpiece.py`,
`tokenizer_json.py`), what they share (`base.py`), `VocabFile` (`file.py`); beside them the
extension of a release's vocab with domain tokens (`extension.py`), a release's tokenizer read as
a vocab (`release.py`) and sentencepiece's model protobuf (`spm_proto.py`). The names below are
the package's interface: `from pipeline.vocab import VocabFile`.
"""

from pipeline.vocab.base import CONTINUATION, SPECIAL_PIECES, WORD_START, VocabError
from pipeline.vocab.file import KINDS, Vocab, VocabFile, kind_of
from pipeline.vocab.sentencepiece import SentencePieceVocab, train_sentencepiece
from pipeline.vocab.tokenizer_json import TOKENIZER_SPECIALS, TokenizerVocab
from pipeline.vocab.wordpiece import WordPieceVocab, train_wordpiece

__all__ = [
    "CONTINUATION",
    "KINDS",
    "SPECIAL_PIECES",
    "TOKENIZER_SPECIALS",
    "WORD_START",
    "SentencePieceVocab",
    "TokenizerVocab",
    "Vocab",
    "VocabError",
    "VocabFile",
    "WordPieceVocab",
    "kind_of",
    "train_sentencepiece",
    "train_wordpiece",
]
