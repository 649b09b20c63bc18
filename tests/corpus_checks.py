"""Content checks shared by the corpus tests: what documents a build must keep, and that the rows
hold exactly those documents' tokens, in order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from pipeline import text
from tests.conftest import unmasked


def expected_documents(files: list[Path], **kwargs) -> list[str]:
    """The distinct documents the reader should produce, in file order (dedup keeps first)."""
    stats = Counter()
    seen, docs = set(), []
    for path in files:
        with open(path, "rb") as f:
            for doc in text.text_documents(
                text.iter_lines(f, 1 << 20, stats),
                max_document_chars=1 << 20,
                stats=stats,
                **kwargs,
            ):
                if doc not in seen:
                    seen.add(doc)
                    docs.append(doc)
    return docs


def pieces_of(rows: dict, cls: int = 2, sep: int = 3) -> list[np.ndarray]:
    """Unmask every row, then cut it into its documents' pieces (no [CLS], [SEP] or padding)."""
    pieces = []
    for row, docs in zip(unmasked(rows), rows["document_ids"], strict=True):
        for d in np.unique(docs[docs > 0]):
            piece = row[docs == d]
            pieces.append(piece[(piece != cls) & (piece != sep)])
    return pieces


def assert_covers(pieces: list[np.ndarray], documents: list[list[int]], dupes: int):
    """Every piece is a contiguous run of one document, and the pieces hold each token exactly
    `dupes` times: no document lost, none invented, order kept."""
    sentinel = np.array([-1], np.int32)
    corpus = np.concatenate([np.concatenate([np.array(d, np.int32), sentinel]) for d in documents])
    blob = corpus.tobytes()
    for piece in pieces:
        needle = piece.astype(np.int32).tobytes()
        at = blob.find(needle)
        while at >= 0 and at % 4:
            at = blob.find(needle, at + 1)
        assert at >= 0, f"a row holds tokens that no document has in that order: {piece[:12]}"
    found = Counter(np.concatenate(pieces).tolist()) if pieces else Counter()
    want = Counter()
    for d in documents:
        want.update(d)
    assert found == Counter({t: n * dupes for t, n in want.items()})
