"""Curation between deduplication and tokenizing: which documents leave the corpus, and why.

  CurateDocuments      (key, text) -> "removed": (key, Removal), "stats": counts per stage
                       (`filter_documents.py`: language and quality rules; `near_dedup.py`)
  DropRemoved          (key, pointer or text) and the removals -> the documents kept

A sample of what was removed goes to OUTPUT/curation/ (`samples.py`). Every stage is off by
default (`CorpusConfig.curating`); off, the graph has none of this.
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.config import CorpusConfig
from pipeline.curation.filter_documents import FilterDocuments
from pipeline.curation.near_dedup import NearDeduplicate
from pipeline.stages.read import batch_documents


class CurateDocuments(beam.PTransform):
    """(content key, text) -> (removed: (key, Removal), stats). The filters first, then
    near-duplicates among the documents they keep, so that no cluster keeps a document a filter
    then removes."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, docs):
        cfg, removed, stats = self._cfg, [], []
        if cfg.quality_filters or cfg.languages:
            filtered = (
                docs
                # 64 Ki characters at least: enough documents that the language thread stays
                # ahead of the rules (filter_documents.py)
                | "BatchForFilters" >> batch_documents(min_chars=1 << 16)
                | "FilterDocuments"
                >> beam.ParDo(FilterDocuments(cfg)).with_outputs("removed", "stats", main="kept")
            )
            docs = filtered.kept
            removed.append(filtered.removed)
            stats.append(filtered.stats)
        if cfg.near_dedup_threshold:
            near_removed, near_stats = docs | "NearDeduplicate" >> NearDeduplicate(cfg)
            removed.append(near_removed)
            stats.append(near_stats)
        return (
            removed | "AllRemoved" >> beam.Flatten(),
            stats | "AllCurationStats" >> beam.Flatten(),
        )


def _keep_unremoved(joined):
    key, grouped = joined
    if not grouped["removed"]:
        for doc in grouped["doc"]:
            yield key, doc


class DropRemoved(beam.PTransform):
    """{"doc": (key, pointer or text), "removed": (key, Removal)} -> (key, pointer or text) of
    the documents no stage removed. Keys and pointers only pass the shuffle for files."""

    def expand(self, inputs):
        return (
            inputs | "JoinRemovals" >> beam.CoGroupByKey() | "KeepUnremoved" >> beam.FlatMap(_keep_unremoved)
        )
