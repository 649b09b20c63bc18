"""Why a document leaves the corpus: the record every curation stage emits for each document it
removes, which the manifest counts and the samples show."""

from __future__ import annotations

from typing import NamedTuple


class Removal(NamedTuple):
    """Why a document leaves the corpus, for the manifest's counts and the audit's samples."""

    stage: str  # near_dedup, quality or language
    reason: str  # near_duplicate, a quality rule's name, or language / language_score
    value: object  # what was measured: a cluster's size, a rule's figure, a language
    bytes: int  # the document's UTF-8 size
    kept: int | None = None  # near_dedup: the content key of the cluster's kept document
