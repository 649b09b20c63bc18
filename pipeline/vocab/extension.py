"""Vocab extension: a released WordPiece vocab plus up to N tokens learned from the domain's text
(`build_corpus --vocab RELEASE_DIR --extend_vocab N`), as WoBERT extended RoBERTa-wwm-ext's.

    extended = extend_wordpiece(base, sentences, 500)   # extended.release["added"]: what it added

The candidates are the pieces a WordPiece vocab trained on the domain's sample (at the release's
size and lower-casing) has and the release's lacks, ranked by how often that domain vocab uses
them on the sample (ties by the token). They fill the release's `[unusedN]` slots first, in id
order (Google's English vocab has 994, its Chinese one 99), so a release's ids stay where they were;
the rest are appended. Each added token records the release's ids for its text (`pieces`): a new
embedding row starts as the mean of those rows (`launch/interop/grow.py`), or, for a token the
release knows only as [UNK], as `launch.pretrain --extension_init` says.

Two ways to say how many: `count` (--extend_vocab N), the N most used; `min_count`
(--extend_min_count K), every candidate the sample uses at least K times, which is how a script
the release cuts to [UNK] comes in whole (an English release's vocab holds a few hundred of the
thousands of CJK characters Chinese text uses); with both, N is a limit and more is an error.
"""

from __future__ import annotations

import collections
import dataclasses
import re

from pipeline.vocab import (
    CONTINUATION,
    WORD_START,
    SentencePieceVocab,
    VocabError,
    VocabFile,
    WordPieceVocab,
    train_sentencepiece,
    train_wordpiece,
)
from pipeline.vocab.spm_proto import NORMAL, UNIGRAM, model_proto_class

UNUSED = re.compile(r"\[unused\d+\]")
# The most token rows an extended vocab may have: the corpus builder carries a segmenter's
# word-start flag in bit 30 of a token id (`pipeline/instances.py`), so ids stay below 2**30 (an
# int32 embedding row index could go to 2**31 - 1).
MAX_TOKENS = 1 << 30


def check_extendable(base: VocabFile) -> None:
    """A one-line VocabError, before the build starts, for a vocab that cannot be extended."""
    if base.kind == "tokenizer":
        raise VocabError(
            "--extend_vocab extends a WordPiece vocab.txt or a sentencepiece unigram model; this one is a "
            "tokenizer.json (its BPE would need new merges)"
        )
    if base.kind == "sentencepiece":
        proto = model_proto_class()()
        proto.ParseFromString(base.data)
        if proto.trainer_spec.model_type != UNIGRAM:
            raise VocabError("--extend_vocab extends a unigram sentencepiece model; this one is a bpe model")


def extend_vocab(base: VocabFile, sentences: list[str], count: int, min_count: int = 0) -> VocabFile:
    """`base` (WordPiece or a sentencepiece unigram model) with the tokens learned from
    `sentences` that `count` and `min_count` choose (`_ranked`); its `release` record gains
    base_size and the added tokens (none, where no candidate qualifies: the caller says so)."""
    extend = extend_sentencepiece if base.kind == "sentencepiece" else extend_wordpiece
    extended = extend(base, sentences, count, min_count)
    if not extended.release["added"]:  # the given vocab, byte for byte
        return dataclasses.replace(base, release=extended.release)
    return extended


def _ranked(
    candidates: list[tuple[int, str]], count: int, min_count: int = 0, base_size: int = 0
) -> list[str]:
    """The (uses, token) candidates to add, most used first, ties by the token: the `count` most
    used; with `min_count`, every one used that often (at most `count`, if given, or a one-line
    VocabError). More than MAX_TOKENS in all is a VocabError too."""
    ranked = sorted(candidates, key=lambda c: (-c[0], c[1]))
    if min_count:
        ranked = [c for c in ranked if c[0] >= min_count]
        if count and len(ranked) > count:
            raise VocabError(
                f"--extend_min_count {min_count}: {len(ranked):,} tokens of the domain's sample are used at "
                f"least {min_count} times, more than --extend_vocab {count:,} allows; raise either flag"
            )
    else:
        ranked = ranked[:count]
    if base_size + len(ranked) > MAX_TOKENS:
        raise VocabError(
            f"the extended vocab would hold {base_size + len(ranked):,} tokens with {len(ranked):,} added, "
            f"more than the {MAX_TOKENS:,} a corpus can carry; raise --extend_min_count"
        )
    return [token for _, token in ranked]


def extend_sentencepiece(base: VocabFile, sentences: list[str], count: int, min_count: int = 0) -> VocabFile:
    """A sentencepiece unigram model plus the pieces `_ranked` chooses from a unigram model trained on
    `sentences` at the base's size, appended with the score they have there (a sentencepiece
    model has no unused slots). Each records the base model's ids for its text as `pieces`."""
    check_extendable(base)
    vocab = base.load()
    proto = model_proto_class()()
    proto.ParseFromString(vocab.model_bytes)
    domain = SentencePieceVocab(train_sentencepiece(sentences, vocab_size=vocab.size, model_type="unigram"))
    uses = collections.Counter(token_id for ids in domain.encode(sentences) for token_id in ids)
    scores = {p.piece: p.score for p in model_proto_class()().FromString(domain.model_bytes).pieces}
    known = {p.piece for p in proto.pieces}
    processor = domain.processor
    candidates = [
        (uses[i], processor.id_to_piece(i)) for i in range(domain.size)
        if uses[i] > 0 and processor.id_to_piece(i) not in known and processor.is_unused(i) is False
        and not processor.is_control(i) and not processor.is_unknown(i)
    ]  # fmt: skip
    added = []
    for token in _ranked(candidates, count, min_count, vocab.size):
        added.append({"id": len(proto.pieces), "token": token, "pieces": _spm_pieces(vocab, token)})
        proto.pieces.add(piece=token, score=scores[token], type=NORMAL)
    record = {**base.release, "base_size": vocab.size, "added": added}
    return VocabFile("sentencepiece", proto.SerializeToString(), False, record)


def _spm_pieces(vocab: SentencePieceVocab, token: str) -> list[int]:
    """The base model's ids for a piece's text (a word-internal piece: without the word start
    the model would add)."""
    ids = vocab.processor.encode(token.replace(WORD_START, " ").strip(), out_type=int)
    start = vocab.processor.piece_to_id(WORD_START)
    if not token.startswith(WORD_START) and len(ids) > 1 and ids[0] == start:
        ids = ids[1:]
    return ids or [vocab.special_ids["unk"]]


def extend_wordpiece(base: VocabFile, sentences: list[str], count: int, min_count: int = 0) -> VocabFile:
    """`base` with the new tokens from `sentences` that `_ranked` chooses. Its `release` record gains
    base_size and added: each new token as {"id", "token", "pieces"} (its text in the base
    vocab's ids), in id order."""
    check_extendable(base)
    vocab = base.load()
    known = set(vocab.tokens)
    domain = WordPieceVocab(
        train_wordpiece(sentences, vocab_size=vocab.size, lower_case=base.lower_case), base.lower_case
    )
    uses = collections.Counter(token_id for ids in domain.encode(sentences) for token_id in ids)
    candidates = [
        (uses[i], token) for i, token in enumerate(domain.tokens) if token not in known and uses[i] > 0
    ]
    chosen = _ranked(
        candidates, count, min_count, vocab.size - sum(bool(UNUSED.fullmatch(t)) for t in vocab.tokens)
    )
    tokens = list(vocab.tokens)
    slots = [i for i, token in enumerate(tokens) if UNUSED.fullmatch(token)]
    index = {token: i for i, token in enumerate(tokens)}
    added = []
    for n, token in enumerate(chosen):
        token_id = slots[n] if n < len(slots) else len(tokens)
        pieces = base_pieces(token, index, vocab.special_ids["unk"])
        if token_id == len(tokens):
            tokens.append(token)
        else:
            tokens[token_id] = token
        added.append({"id": token_id, "token": token, "pieces": pieces})
    data = "".join(f"{token}\n" for token in tokens).encode("utf-8")
    record = {**base.release, "base_size": vocab.size, "added": sorted(added, key=lambda a: a["id"])}
    return VocabFile("wordpiece", data, base.lower_case, record)


def base_pieces(token: str, index: dict[str, int], unk: int) -> list[int]:
    """The ids WordPiece's greedy longest match cuts `token` into with `index` (a "##" token
    continues a word: its pieces are continuations too); [unk] where no piece fits."""
    continuation = token.startswith(CONTINUATION) and len(token) > len(CONTINUATION)
    word = token[len(CONTINUATION) :] if continuation else token
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = (CONTINUATION if start > 0 or continuation else "") + word[start:end]
            if piece in index:
                pieces.append(index[piece])
                start = end
                break
        else:
            return [unk]
    return pieces
