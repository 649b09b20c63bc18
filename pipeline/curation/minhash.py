"""MinHash signatures and LSH bands: near-duplicate detection's arithmetic, in numpy and rensa; nothing
here knows about Beam (`near_dedup.py` wires it).

A document becomes a set of shingles: its normalised words (or characters, for scripts written
without spaces, or a segmenter's words) in overlapping n-grams, each hashed to 64 bits. A unit's
hash is a polynomial over its UTF-8 bytes, mixed (`unit_hashes`): computed for every unit of a
document at once in numpy, from prefix sums over its bytes (hashing each word as a Python string,
blake2b and a cache, cost more than the signatures). Its signature is, for each of bands x rows
seeded hash functions, the smallest value over its shingles: two signatures agree in one position
with probability equal to the documents' Jaccard similarity. Each shingle is mixed once (mix:
splitmix64's finaliser, which moves every input bit into every output bit; a shingle's hash is
linear in its units' hashes) and signed by rensa's R-MinHash, in Rust: 32-bit values from seeded
hash functions of the 64-bit value. It signs 20 times faster than the numpy it replaced (v2:
64-bit affine maps of the mixed value drawn by numpy's PCG64, 1.0 s per 30 MB of text); tests
hold it to a plain minimum per function and to the theory's spread of the estimate. SIGNATURE
names the definition with the rensa release that computes it, and the manifest records it.
(Not (a x + b) mod p on raw values: with a and x both under 2^32 that map stayed nearly monotonic
in x, every function picked much the same minimum, and the estimate's error was three times the
theory's; measured in bench/curation.py, and the spread is a test.)

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
import importlib.metadata
import math
import re
import unicodedata
from collections.abc import Callable

import numpy as np
import rensa

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
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
# A unit's hash: sum(byte[j] * P^j) over its UTF-8 bytes, wrapping, then mixed. P is odd, hence
# invertible modulo 2^64, so a unit's sum is read off the document's prefix sums at any offset.
# Changing P, the mix or the multipliers changes every signature: SIGNATURE names the definition
# (the manifest records it).
_P = 0xD1B54A32D192ED03
# v1: units hashed by blake2b one Python string at a time; v2: 64-bit affine functions in numpy;
# v3: rensa's R-MinHash (32-bit values). Same bands and rows throughout.
SIGNATURE = f"minhash-v3-rensa-{importlib.metadata.version('rensa')}"
SIGNATURE_DTYPE = np.uint32


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
_ASCII_UNITS = _ASCII_NORMAL.replace(b" ", b"\x00")  # the same map, units separated by NUL bytes
_UTF8_UNITS = _ASCII_UNITS[:128] + bytes(range(128, 256))  # the same, leaving multi-byte characters
_SEP = 0  # normalise() turns a NUL into a space, so no unit holds one


class _Normal(dict):
    """A code point -> what `normalise` makes of its character once lowered: "0" for a digit,
    itself for a word character, NUL for whitespace and everything else (a `str.translate`
    table, filled as characters are met)."""

    def __missing__(self, point: int) -> str:
        char = chr(point)
        mapped = "0" if char.isdecimal() else char if char.isalnum() or char == "_" else "\x00"
        self[point] = mapped
        return mapped


_NORMAL = _Normal()
_FEW_REPLACES = 16  # more distinct characters to change than this: one translate, not a replace each


def _separated(text: str) -> bytes:
    """`normalise(text)` in UTF-8 with a NUL byte for every separator (whitespace, punctuation):
    the units are its runs of other bytes. Made without a regular expression: in C, a byte map
    for ASCII and one replace per distinct non-ASCII character that changes (in English text a
    few quotes and dashes): less than half the time of `normalise`'s two substitutions."""
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_UNITS)
    lowered = unicodedata.normalize("NFKC", text).lower()
    data = lowered.encode("utf-8")
    raw = np.frombuffer(data, dtype=np.uint8)
    distinct = set(raw[raw >= 0x80].tobytes().decode("utf-8"))  # its non-ASCII characters only
    changed = [char for char in distinct if _NORMAL[ord(char)] != char]
    if len(changed) > _FEW_REPLACES:  # a replace is a pass over the text: linear in them, not quadratic
        return lowered.translate(_NORMAL).encode("utf-8")
    for char in changed:  # UTF-8 never matches inside another character, so a replace is exact
        data = data.replace(char.encode("utf-8"), _NORMAL[ord(char)].encode("utf-8"))
    return data.translate(_UTF8_UNITS)


_CACHED_POWERS = 1 << 20  # bytes: a table of 8 MiB each way, computed once; longer documents compute theirs


def _powers(length: int) -> tuple[np.ndarray, np.ndarray]:
    """(P^i, P^-i) modulo 2^64 for i < at least `length`."""
    return _power_tables(_CACHED_POWERS) if length <= _CACHED_POWERS else _power_tables(length)


@functools.lru_cache(maxsize=1)
def _power_tables(length: int) -> tuple[np.ndarray, np.ndarray]:
    def table(base: int) -> np.ndarray:
        steps = np.full(length, base, dtype=np.uint64)
        steps[0] = 1
        return np.cumprod(steps, dtype=np.uint64)  # wraps, as intended

    return table(_P), table(pow(_P, -1, 1 << 64))


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


def unit_hashes(text: str, unit: str, segmenter: Callable[[str], list[str]] | None = None) -> np.ndarray:
    """One 64-bit hash per unit of `units(text, unit, segmenter)`, in order, each a function of
    the unit's bytes alone (`unit_hash`), computed without a Python string per unit."""
    if unit == "segmenter":
        data = "\x00".join(units(text, unit, segmenter)).encode("utf-8")
    else:
        data = _separated(text)
    raw = np.frombuffer(data, dtype=np.uint8)
    if unit == "chars":  # a unit per character: a byte that starts one (not 10xxxxxx), not NUL
        first = np.flatnonzero((raw & 0xC0) != 0x80)
        ends = np.append(first[1:], raw.size)
        keep = raw[first] != _SEP
        starts, ends = first[keep], ends[keep]
    else:  # a unit per run of bytes other than NUL
        inside = np.concatenate(([False], raw != _SEP, [False]))
        edges = np.flatnonzero(inside[1:] != inside[:-1])
        starts, ends = edges[0::2], edges[1::2]
    return run_hashes(raw, starts, ends)


def run_hashes(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """One 64-bit hash per run values[starts[i]:ends[i]] (bytes or code points): the run's
    polynomial sum(values[j] * P^(j - start)), mixed; a function of the run's values alone."""
    if starts.size == 0:
        return np.zeros(0, dtype=np.uint64)
    forward, backward = _powers(values.size)
    sums = np.zeros(values.size + 1, dtype=np.uint64)
    np.cumsum(values * forward[: values.size], out=sums[1:])
    return _mix((sums[ends] - sums[starts]) * backward[starts])


def padded_run_hashes(columns: np.ndarray) -> np.ndarray:
    """`run_hashes` of short runs laid out one per column, zero-padded at the end (width x k, row
    j the runs' j-th values): the same hash for the same run (a zero adds nothing to the
    polynomial), found from the runs alone, without a pass over the text they lie in."""
    forward, _ = _powers(columns.shape[0])
    total = np.zeros(columns.shape[1], dtype=np.uint64)
    for j, values in enumerate(columns):
        total += values.astype(np.uint64) * forward[j]
    return _mix(total)


def unit_hash(unit: str) -> int:
    """What `unit_hashes` gives one unit, in plain Python: the definition it is tested against."""
    mask, total = (1 << 64) - 1, 0
    for byte in reversed(unit.encode("utf-8")):  # Horner's rule: sum(byte[j] * P^j)
        total = (total * _P + byte) & mask
    for shift, multiplier in ((30, int(_MIX[0])), (27, int(_MIX[1])), (31, 1)):  # `_mix`
        total = ((total ^ (total >> shift)) * multiplier) & mask
    return total


def shingles(hashes: np.ndarray, size: int) -> np.ndarray:
    """The document's shingles of `size` units (a unit hash each, `unit_hashes`) as 64-bit hashes,
    one per position, repeats included (a signature's minimum does not care); a document
    shorter than `size` units is one shingle; none for no units."""
    if hashes.size == 0:
        return hashes
    return combine(hashes, min(size, hashes.size))


def shingle_hashes(hashes: np.ndarray, size: int) -> np.ndarray:
    """The document's distinct shingles (`shingles`): the set that Jaccard is taken over."""
    return np.unique(shingles(hashes, size))


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

    def signature(self, shingles: np.ndarray) -> np.ndarray | None:
        """The smallest value of each hash function over the mixed shingles (uint32); None for no
        shingles."""
        if shingles.size == 0:
            return None
        rows = rensa.RMinHash.digest_matrix_from_flat_token_hashes(
            _mix(shingles), (0, shingles.size), self.size, self.seed
        ).to_rows()
        return np.array(rows[0], dtype=SIGNATURE_DTYPE)

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
