"""Long texts into overlapping windows of pieces, as BERT's run_squad reads them, for the tagger
and the span extractor alike.

    windows(len(piece_ids), seq_len - 2, doc_stride)     # (start, length) of each window
    best_windows(len(piece_ids), spans)                  # the window each piece is read from

Windows are `doc_stride` pieces apart, and each piece is predicted from the window where it has
the most context on its shorter side.
"""

from __future__ import annotations

from collections.abc import Sequence


def windows(n: int, length: int, stride: int) -> list[tuple[int, int]]:
    """(start, size) of the windows that cover `n` pieces `length` at a time, each `stride` after the
    one before (run_squad's loop); one empty window for no pieces."""
    out, start = [], 0
    while True:
        size = min(length, n - start)
        out.append((start, size))
        if start + size >= n:
            return out
        start += min(size, stride)


def best_windows(n: int, spans: Sequence[tuple[int, int]]) -> list[int]:
    """For each of `n` pieces, the window (index into `spans`) where it has the most context: the
    larger of its shorter side, ties to the longer window and then the first (run_squad's rule)."""
    best = []
    for piece in range(n):
        scores = [
            (min(piece - start, start + size - 1 - piece) + 0.01 * size, -i)
            for i, (start, size) in enumerate(spans)
            if start <= piece < start + size
        ]
        best.append(-max(scores)[1])
    return best
