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
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
from collections.abc import Iterable, Mapping
from typing import Literal

import numpy as np
import sentencepiece as spm

from common.errors import BertbeamError
from pipeline.schema import Manifest, VocabInfo
from pipeline.text import is_cjk

# BERT's special tokens at fixed ids. [PAD] must be 0: padding is zeros in every feature.
SPECIAL_PIECES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
WORD_START = "\u2581"  # sentencepiece's "▁": the piece begins a new word
CONTINUATION = "##"  # WordPiece: the token continues the word before it


class VocabError(BertbeamError):
    """A vocabulary that cannot serve BERT pretraining, or not the one a corpus was built with."""


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


# Google's vocab.txt also holds "[unused0]".."[unused993]" and the like: bracketed, never produced
# by the tokenizer (the pre-tokenizer splits "[" off), so never masked or drawn as a random token.
def _is_bracketed(token: str) -> bool:
    return len(token) > 2 and token.startswith("[") and token.endswith("]")


class _TokenTable:
    """A vocab held as the file's bytes (`data`) and its token list (`tokens`, index = id)."""

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclasses.dataclass(frozen=True)
class WordPieceVocab(_TokenTable):
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
        is_special = np.array([_is_bracketed(t) for t in self.tokens], bool)
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
class TokenizerVocab(_TokenTable):
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
