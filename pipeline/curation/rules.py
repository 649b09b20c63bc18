"""`Rules`: what decides one document, language (`language.py`) then quality (`quality.py`), as one
picklable value. Pure, and free of Beam, so that a worker process that `FilterDocuments` spawns
imports numpy and the rules (0.17 s), not Beam (0.8 s)."""

from __future__ import annotations

import dataclasses

from pipeline.curation import language, quality


@dataclasses.dataclass(frozen=True)
class Rules:
    """What decides one document (picklable: it travels to the worker processes)."""

    languages: tuple[str, ...]
    min_language_score: float
    filters: tuple[str, ...]
    thresholds: quality.Thresholds

    def decide(self, text: str, identified: tuple[str, float] | None = None):
        """(removal, language): removal is (stage, rule, figure) or None for a document kept;
        language "kept/CODE" or "removed/CODE" when --languages is on. `identified` is CLD2's
        answer when it was found elsewhere."""
        removal, seen = None, None
        if self.languages:
            code, score = identified or language.identify(text)
            if code not in self.languages:
                removal, seen = ("language", "language", code), f"removed/{code}"
            elif score < self.min_language_score:
                removal, seen = ("language", "language_score", round(score, 2)), f"removed/{code}"
            else:
                seen = f"kept/{code}"
        if removal is None and self.filters:
            failed = quality.first_failure(text, self.filters, self.thresholds)
            if failed is not None:
                removal = ("quality", *failed)
        return removal, seen

    def decide_all(self, texts: list[str]) -> list:
        return [self.decide(text) for text in texts]


def rules_ready() -> None:
    """Nothing: the first task of each process `filter_documents.start_processes` starts."""
