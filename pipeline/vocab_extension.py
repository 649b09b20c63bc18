"""Vocab extension: a released WordPiece vocab plus up to N tokens learned from the domain's text
(`build_corpus --vocab RELEASE_DIR --extend_vocab N`), as WoBERT extended RoBERTa-wwm-ext's.

    extended = extend_wordpiece(base, sentences, 500)   # extended.release["added"]: what it added

The candidates are the pieces a WordPiece vocab trained on the domain's sample (at the release's
size and lower-casing) has and the release's lacks, ranked by how often that domain vocab uses
them on the sample (ties by the token). They fill the release's `[unusedN]` slots first, in id
order (Google's English vocab has 994, its Chinese one 99), so a release's ids stay where they were;
the rest are appended. Each added token records the release's ids for its text (`pieces`): a new
embedding row starts as the mean of those rows (`launch/interop/grow.py`).
"""

from __future__ import annotations

import collections
import re

from pipeline.vocab import CONTINUATION, VocabError, VocabFile, WordPieceVocab, train_wordpiece

UNUSED = re.compile(r"\[unused\d+\]")


def extend_wordpiece(base: VocabFile, sentences: list[str], count: int) -> VocabFile:
    """`base` with up to `count` new tokens from `sentences`. Its `release` record gains
    base_size and added: each new token as {"id", "token", "pieces"} (its text in the base
    vocab's ids), in id order."""
    if base.kind != "wordpiece":
        raise VocabError(
            f"--extend_vocab extends a WordPiece vocab (vocab.txt); this release's is a {base.kind} vocab"
        )
    vocab = base.load()
    known = set(vocab.tokens)
    domain = WordPieceVocab(
        train_wordpiece(sentences, vocab_size=vocab.size, lower_case=base.lower_case), base.lower_case
    )
    uses = collections.Counter(token_id for ids in domain.encode(sentences) for token_id in ids)
    candidates = [
        (uses[i], token) for i, token in enumerate(domain.tokens) if token not in known and uses[i] > 0
    ]
    chosen = [token for _, token in sorted(candidates, key=lambda c: (-c[0], c[1]))[:count]]
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
