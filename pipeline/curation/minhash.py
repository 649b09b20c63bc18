"""MinHash signatures and LSH bands: near-duplicate detection's arithmetic. Pure numpy; nothing
here knows about Beam (`near_dedup.py` wires it).

A document becomes a set of shingles: its normalised words (or characters, for scripts written
without spaces, or a segmenter's words) in overlapping n-grams, each hashed to 64 bits. Its
signature is, for each of bands x rows seeded hash functions h_i(x) = mix(x XOR s_i) (mix:
splitmix64's finaliser, which moves every input bit into every output bit), the smallest value over
its shingles: two signatures agree in one position with probability equal to the documents'
Jaccard similarity. (Not (a x + b) mod p with small a: with a and x both under 2^32 that map stays
nearly monotonic in x, every function picks much the same minimum, and the estimate's error was
three times the theory's; measured in bench/curation.py.)

LSH cuts the signature into bands of rows; documents that agree on a whole band share a bucket and
become candidates, which happens with probability
1 - (1 - J^rows)^bands (FineWeb's 14 x 8: 0.92 at J = 0.8, 0.05 at 0.5, 0.001 at 0.3). A candidate
pair is confirmed when the signatures' share of equal positions is within two standard errors
below the threshold or above it, which keeps recall at the threshold near 98 % and drops chance
collisions below 0.5 (the estimate's error over 112 positions is about 0.04).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
import unicodedata
from collections.abc import Callable

import numpy as np

from pipeline.keys import KEY_BITS

SHINGLE_UNITS = ("words", "chars", "segmenter")
_NOT_WORD = re.compile(r"[^\w\s]+")
_DIGIT = re.compile(r"\d")
# Shingle hashes are combined from unit hashes by a polynomial over uint64 (wrapping): a shingle
# of k units is sum(h[i + j] * MULTIPLIERS[j]). Odd constants, fixed: they are part of what a
# signature means, as the seed is.
_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9,
     0x27D4EB2F165667C5, 0x85EBCA77C2B2AE63],
    dtype=np.uint64,
)  # fmt: skip
MAX_SHINGLE_SIZE = len(_MULTIPLIERS)  # 10: Gopher's repetition rules count word n-grams up to 10
# Shingles hashed at a time: a block's temporaries (1024 x 112 x 8 bytes each) stay in the core's
# cache; at 4096 rows they did not, and signing took 2.5x as long (same values either way).
_BLOCK = 1024
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (multiplication wraps, as intended)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX[0]
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX[1]
    return x ^ (x >> np.uint64(31))


def normalise(text: str) -> str:
    """What two copies that differ only in case, punctuation, digits or spacing share: NFKC,
    lower case, punctuation and symbols to spaces, every digit 0 (as datatrove's defaults do)."""
    text = unicodedata.normalize("NFKC", text).lower()
    return _DIGIT.sub("0", _NOT_WORD.sub(" ", text))


def _ascii_table() -> bytes:
    """`normalise` for ASCII text as one byte map, where a run of separators need not shrink to one
    space (words and characters ignore spaces): letters lowered, digits 0, the word characters kept,
    whitespace and every other character a space."""
    table = bytearray(b" " * 256)
    for byte in range(128):
        char = chr(byte)
        if char.isalnum() or char == "_":
            table[byte] = ord("0" if char.isdigit() else char.lower())
    return bytes(table)


_ASCII_NORMAL = _ascii_table()


def units(text: str, unit: str, segmenter: Callable[[str], list[str]] | None = None) -> list[str]:
    """The normalised text's words (split at spaces), characters (spaces left out), or the
    segmenter's words."""
    if unit != "segmenter" and text.isascii():  # most documents: bytes mapped in C, no regex
        text = text.encode("ascii").translate(_ASCII_NORMAL).decode("ascii")
    else:
        text = normalise(text)
    if unit == "words":
        return text.split()
    if unit == "chars":
        return [c for c in text if not c.isspace()]
    return [w for w in (w.strip() for w in segmenter(text)) if w]


@functools.lru_cache(maxsize=1 << 16)  # common words recur across documents
def _unit_hash(unit: str) -> int:
    return int.from_bytes(hashlib.blake2b(unit.encode("utf-8"), digest_size=8).digest(), "little")


def shingle_hashes(tokens: list[str], size: int) -> np.ndarray:
    """The document's distinct shingles of `size` units as 64-bit hashes; a document shorter than
    `size` units is one shingle; none for no units."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    hashed = np.fromiter(map(_unit_hash, tokens), dtype=np.uint64, count=len(tokens))
    return np.unique(combine(hashed, min(size, len(tokens))))


def combine(values: np.ndarray, k: int) -> np.ndarray:
    """One uint64 per run of `k` consecutive values (k <= MAX_SHINGLE_SIZE):
    sum(values[i + j] * MULTIPLIERS[j]), wrapping, as intended."""
    n = len(values) - k + 1
    combined = np.zeros(n, dtype=np.uint64)
    for j in range(k):
        combined += values[j : j + n] * _MULTIPLIERS[j]
    return combined


@dataclasses.dataclass(frozen=True)
class MinHasher:
    """Signatures of `bands` x `rows` values, from hash functions drawn from `seed`."""

    bands: int = 14
    rows: int = 8
    seed: int = 12345

    @property
    def size(self) -> int:
        return self.bands * self.rows

    @functools.cached_property  # drawn once per hasher, not once per document
    def _seeds(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)  # PCG64: the same draws on every machine
        return rng.integers(0, np.iinfo(np.uint64).max, size=self.size, dtype=np.uint64, endpoint=True)

    def signature(self, shingles: np.ndarray) -> np.ndarray | None:
        """The smallest mix(x XOR s_i) over the shingles x, per hash function i (uint64); None for
        no shingles."""
        if shingles.size == 0:
            return None
        seeds = self._seeds
        smallest = np.full(self.size, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, shingles.size, _BLOCK):
            block = shingles[start : start + _BLOCK, None]
            np.minimum(smallest, _mix(block ^ seeds).min(axis=0), out=smallest)
        return smallest

    def bucket_keys(self, signature: np.ndarray) -> list[int]:
        """One bucket key per band (the band's index is hashed in, so bands never share a bucket)."""
        rows = signature.reshape(self.bands, self.rows)
        return [
            int.from_bytes(hashlib.blake2b(band.to_bytes(2, "little") + rows[band].tobytes(), digest_size=8)
                           .digest(), "little") & KEY_BITS
            for band in range(self.bands)
        ]  # fmt: skip


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The share of positions where two signatures agree: an unbiased estimate of Jaccard."""
    return float(np.mean(a == b))


def confirm_threshold(threshold: float, signature_size: int) -> float:
    """The estimate a candidate pair needs: the threshold less two standard errors of the
    estimate at the threshold, so a pair exactly at it is confirmed about 98 % of the time."""
    return threshold - 2 * math.sqrt(threshold * (1 - threshold) / signature_size)


def candidate_probability(jaccard: float, bands: int, rows: int) -> float:
    """The chance that two documents of this similarity share at least one bucket."""
    return 1 - (1 - jaccard**rows) ** bands


def true_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard of two shingle sets (`shingle_hashes`), exactly: what signatures estimate."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)
