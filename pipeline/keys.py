"""Hashing: the only source of identity and randomness in the corpus build.

A document's identity, its split and its packing group derive from a hash of its text, and every
seed from `--seed` and such a hash, never from worker state or arrival order: the same inputs give
the same bytes on any runner, with any number of workers, in any file order.
"""

from __future__ import annotations

import hashlib

KEY_BITS = (1 << 63) - 1  # keys stay non-negative int64: Beam's VarIntCoder refuses larger ints


def content_key(value: str | bytes) -> int:
    """63-bit key of a document or sentence (blake2b): identity, split and group derive from it."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & KEY_BITS


def seeded_key(seed: int, *parts: int) -> int:
    data = b"".join(int(p).to_bytes(8, "little", signed=False) for p in (seed, *parts))
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & KEY_BITS


def split_of(doc_key: int, validation_fraction: float) -> str:
    """Train or validation by document hash alone, so the split is the same for every seed."""
    return "validation" if (doc_key % 1_000_000) < validation_fraction * 1_000_000 else "train"
