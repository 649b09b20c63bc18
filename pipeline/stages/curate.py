"""Curation between deduplication and tokenizing: which documents leave the corpus, and why.

  CurateDocuments      (key, text) -> "removed": (key, Removal), "stats": counts per stage
  DropRemoved          (key, pointer or text) and the removals -> the documents kept
  SampleRemoved        the removals -> a seeded, bounded sample per reason: (key, Removal), with
                       each near-duplicate's kept document beside it
  WriteRemovedSamples  the sample and its texts -> OUTPUT/curation/REASON.jsonl.gz

Every stage is off by default (`CorpusConfig.curating`); off, the graph has none of this.
"""

from __future__ import annotations

import gzip
import json

import apache_beam as beam

from pipeline import files
from pipeline.config import CorpusConfig
from pipeline.keys import seeded_key
from pipeline.stages.filter_documents import FilterDocuments
from pipeline.stages.near_dedup import NearDeduplicate

CURATION_DIR = "curation"
SAMPLE_TEXT_CHARS = 2000  # of each sampled document: enough to judge, bounded however long it is


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
            filtered = docs | "FilterDocuments" >> beam.ParDo(FilterDocuments(cfg)).with_outputs(
                "removed", "stats", main="kept"
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


class SampleRemoved(beam.PTransform):
    """(key, Removal) -> (key, (Removal or None)) of at most `n` removals per reason, those with the
    smallest seeded hash of their key (the same sample on any runner), plus each sampled
    near-duplicate's kept document as (kept key, None)."""

    def __init__(self, n: int, seed: int):
        super().__init__()
        self._n, self._seed = n, seed

    def expand(self, removed):
        seed = self._seed
        return (
            removed
            | "ByReason" >> beam.Map(lambda kr: (kr[1].reason, (seeded_key(seed, kr[0]), kr[0], kr[1])))
            | "SmallestPerReason" >> beam.combiners.Top.SmallestPerKey(self._n)
            | "Sampled" >> beam.FlatMap(_sampled)
        )


def _sampled(reason_top):
    for _, key, removal in reason_top[1]:
        yield key, removal
        if removal.kept is not None:
            yield removal.kept, None


def write_samples(texts: list, samples: list, folder: str) -> list[str]:
    """One JSONL.gz per reason under `folder`: each sampled document's key, measured value and
    text (cut at SAMPLE_TEXT_CHARS), and for a near-duplicate the text of the one its cluster
    kept. Rows sorted by key: the same bytes on any runner. Returns the files written."""
    text_of = dict(texts)
    rows: dict[str, list[dict]] = {}
    for key, removal in samples:
        if removal is None:
            continue
        row = {"key": key, "stage": removal.stage, "reason": removal.reason, "value": removal.value,
               "bytes": removal.bytes, "text": text_of.get(key, "")[:SAMPLE_TEXT_CHARS]}  # fmt: skip
        if removal.kept is not None:
            row["kept_key"] = removal.kept
            row["kept_text"] = text_of.get(removal.kept, "")[:SAMPLE_TEXT_CHARS]
        rows.setdefault(removal.reason, []).append(row)
    written = []
    for reason, reason_rows in sorted(rows.items()):
        lines = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in sorted(
            reason_rows, key=lambda r: r["key"]))  # fmt: skip
        path = f"{folder}/{reason}.jsonl.gz"
        files.write_atomically(path, gzip.compress(lines.encode("utf-8"), mtime=0))
        written.append(path)
    return written
