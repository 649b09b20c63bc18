"""FilterDocuments: (key, text) -> the documents kept, and a `Removal` for each one a quality
rule (`quality.py`) removes; per-rule counts on a "stats" output."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam

from pipeline import files, quality
from pipeline import progress as _progress
from pipeline.config import CorpusConfig
from pipeline.stages.common import count_stats
from pipeline.stages.near_dedup import Removal


class FilterDocuments(beam.DoFn):
    """Main output: (key, text) of the documents every rule keeps; "removed": (key, Removal);
    "stats": documents and bytes removed, per stage and per rule."""

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg

    def setup(self):
        self._thresholds = quality.Thresholds.parse(self._cfg.quality_thresholds, files.read_file)

    def process(self, keyed):
        key, text = keyed
        _progress.stage("quality filters", unit="documents").add(1)
        failed = quality.first_failure(text, self._cfg.quality_filters, self._thresholds)
        if failed is None:
            yield key, text
            return
        rule, measured = failed
        n_bytes = len(text.encode("utf-8"))
        stats = Counter({
            "curation/quality/documents_removed": 1,
            "curation/quality/bytes_removed": n_bytes,
            f"curation/quality/rule/{rule}/documents_removed": 1,
            f"curation/quality/rule/{rule}/bytes_removed": n_bytes,
        })  # fmt: skip
        yield beam.pvalue.TaggedOutput("stats", count_stats(stats))
        yield beam.pvalue.TaggedOutput("removed", (key, Removal("quality", rule, measured, n_bytes)))
