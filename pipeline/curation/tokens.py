"""The quality rules' tokens as arrays: what `quality._TOKENS.findall(text)` cuts (a CJK character,
a run of word characters, or a run of punctuation), each as a 64-bit hash, its length in characters
and the figures Gopher's rules take from it, computed for a whole document at once in numpy
rather than one Python string per token (that was half of what the rules cost).

The text's code points (UTF-32) get a class each from a table (`_Tables`). A token starts where
the regular expression would start a match:
- a CJK character (`CJK_RANGES`, word character or not) is a token of its own;
- a run of word characters outside CJK (`\\w`: `isalnum()` or "_");
- a run of punctuation (neither `\\w` nor `\\s`), which, once it has started, also takes CJK-range
  characters that are not word characters (the regex's third branch does); one that stands first
  in such a run is a token of its own.
Tests hold the tokens to `findall`'s on real text and every character there is.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from pipeline import text
from pipeline.curation import minhash

SPACE, WORD, PUNCT, CJK_WORD, CJK_OTHER = range(5)
CJK_RANGES = (text.KANA, text.CJK_EXT_A, text.CJK_UNIFIED, text.HANGUL, text.CJK_COMPATIBILITY)
_POINTS = 0x110000


def _class_of(char: str) -> int:
    point = ord(char)
    if char.isspace():
        return SPACE
    word = char.isalnum() or char == "_"
    if any(lo <= point <= hi for lo, hi in CJK_RANGES):
        return CJK_WORD if word else CJK_OTHER
    return WORD if word else PUNCT


_LETTER = 8  # the class table's bit for "is a letter", beside the class in its low bits
_UNSEEN = 255  # a code point not met yet


class _Tables:
    """Per code point: class with the letter bit (`_LETTER`), and lower case (`str.lower()` where it
    gives one character; U+0130, whose lower case is two, stays: it holds no stop word either way).
    Filled as code points are first met, a few hundred in English text, so no process pays for all
    1.1 million (a loop over the BMP alone took 0.1-0.2 s, a twentieth of a small build). One
    lookup per character gives class, letter and "not met yet" at once: the three lookups it
    replaces were 60 % of what finding the spans cost."""

    def __init__(self):
        self.kind = np.full(_POINTS, _UNSEEN, dtype=np.uint8)
        self.lower = np.arange(_POINTS, dtype=np.uint32)

    def classes(self, points: np.ndarray) -> np.ndarray:
        """Each code point's class with its letter bit."""
        kind = self.kind[points]
        if (kind == _UNSEEN).any():  # after the first documents, nearly never
            self._learn(np.unique(points[kind == _UNSEEN]))
            kind = self.kind[points]
        return kind

    def _learn(self, new: np.ndarray) -> None:
        for point in new.tolist():
            char = chr(point)
            if len(low := char.lower()) == 1:
                self.lower[point] = ord(low)
            # the class last: a reader that finds it set finds the lower case set too
            self.kind[point] = _class_of(char) | (_LETTER if char.isalpha() else 0)


_TABLES = _Tables()


@dataclasses.dataclass(frozen=True)
class Tokens:
    """A document's tokens, in order: `hashes` (equal tokens, equal hashes), `lengths` in
    characters, `real` (a word: not punctuation, not only underscores), and of the words, `alpha`
    (holds a letter) and `stop` (lower-cased, one of `stop_words`)."""

    hashes: np.ndarray
    lengths: np.ndarray
    real: np.ndarray
    alpha: np.ndarray
    stop: np.ndarray

    def __len__(self) -> int:
        return int(self.hashes.size)


def spans(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(code points, class and letter flag per code point, token starts, token ends) of `text`."""
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    kind = _TABLES.classes(points)
    letter = kind >= _LETTER
    kind &= _LETTER - 1
    n = points.size
    if n == 0:
        return points, kind, letter, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if (kind == CJK_OTHER).any():
        continues = _continues_with_cjk(kind, n)
    else:  # most text: a word or punctuation character continues a run of its own class
        continues = np.zeros(n, dtype=bool)
        np.equal(kind[1:], kind[:-1], out=continues[1:])
        continues &= (kind == WORD) | (kind == PUNCT)
    starts = np.flatnonzero((kind != SPACE) & ~continues)
    # A token ends where the next one starts or at a space, whichever comes first.
    ends_at = np.flatnonzero(~np.concatenate((continues[1:], [False])) & (kind != SPACE)) + 1
    return points, kind, letter, starts, ends_at


def _continues_with_cjk(kind: np.ndarray, n: int) -> np.ndarray:
    """Which characters continue the token before them, where CJK_OTHER characters occur."""
    index = np.arange(n, dtype=np.int32 if n < 1 << 31 else np.int64)  # half the bytes per character
    punct = kind == PUNCT
    # A punctuation run (PUNCT or CJK_OTHER, unbroken) takes every character after its first PUNCT.
    loose = punct | (kind == CJK_OTHER)
    run_start = np.maximum.accumulate(np.where(loose & ~np.concatenate(([False], loose[:-1])), index, -1))
    last_punct = np.maximum.accumulate(np.where(punct, index, -1))
    previous_punct = np.concatenate(([-1], last_punct[:-1]))
    inside_punct = loose & (previous_punct >= run_start) & (index > run_start)
    word = kind == WORD
    return inside_punct | (word & np.concatenate(([False], word[:-1])))


def tokenize(text: str, stop_words: frozenset[str]) -> Tokens:
    """The document's `Tokens` (see the module's docstring for where they start and end)."""
    points, kind, letter, starts, ends = spans(text)
    lengths = ends - starts
    hashes = minhash.run_hashes(points, starts, ends)
    stop = _stop(points, starts, lengths, stop_words)
    # Whether a token holds a letter: the spans from one start to the next hold the token and
    # the spaces after it, which are no letters (a reduction, not a cumulative sum over the text).
    alpha = np.logical_or.reduceat(letter, starts) if starts.size else np.zeros(0, dtype=bool)
    first = kind[starts]
    real = (first == CJK_WORD) | (first == WORD)
    underscored = np.flatnonzero(real & (points[starts] == ord("_")))  # words of underscores only start so
    if underscored.size:
        underscore = np.concatenate(([0], np.cumsum(points == ord("_"))))
        only = underscore[ends[underscored]] - underscore[starts[underscored]] == lengths[underscored]
        real[underscored[only]] = False
    return Tokens(hashes, lengths, real, alpha & real, stop & real)


def _stop(points: np.ndarray, starts: np.ndarray, lengths: np.ndarray, stop_words: frozenset[str]):
    """Which tokens, lower-cased, are stop words: hashed only where a token is as long as stop
    words are (in English, about 2 tokens in 5), each from its own few characters."""
    stop_hashes, (shortest, longest) = _stop_hashes(stop_words)
    stop = np.zeros(starts.size, dtype=bool)
    if not stop_hashes.size:
        return stop
    candidates = np.flatnonzero((lengths >= shortest) & (lengths <= longest))
    width = np.arange(longest)[:, None]
    at = np.minimum(starts[candidates] + width, points.size - 1)
    columns = np.where(width < lengths[candidates], _TABLES.lower[points[at]], 0)
    lowered = minhash.padded_run_hashes(columns)
    found = np.minimum(np.searchsorted(stop_hashes, lowered), stop_hashes.size - 1)
    stop[candidates] = stop_hashes[found] == lowered
    return stop


@functools.lru_cache(maxsize=4)
def _stop_hashes(stop_words: frozenset[str]) -> tuple[np.ndarray, tuple[int, int]]:
    """The stop words' hashes, sorted (`minhash.run_hashes` of their code points), and their
    shortest and longest lengths."""
    words = sorted(stop_words)
    points = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32)
    lengths = np.array([len(w) for w in words], dtype=np.int64)
    ends = np.cumsum(lengths)
    hashes = np.sort(minhash.run_hashes(points, ends - lengths, ends))
    return hashes, (int(lengths.min(initial=0)), int(lengths.max(initial=0)))
