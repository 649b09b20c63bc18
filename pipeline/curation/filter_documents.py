"""FilterDocuments: batches of (key, text) -> the documents kept, and a `Removal` for each one
removed: first by language (`language.py`: not one of --languages, or too little of it), then by
the first quality rule it fails (`quality.py`); counts per stage and rule, and the documents kept
per language, on a "stats" output.

A batch's languages are identified on a thread of its own, ahead of the rules: CLD2 releases the
GIL and the rules hold it (small numpy calls and Python), so on the in-memory runner, which runs
every curation stage on one core, the second core does CLD2's share (about a fifth of the stages'
time on English text; docs/benchmarks/curation.md). Each document's decision is its own, whatever
its batch."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam

from pipeline import files
from pipeline.config import CorpusConfig
from pipeline.curation import language, quality
from pipeline.curation.removal import Removal
from pipeline.stages import progress as _progress
from pipeline.stages.stats import count_stats


class FilterDocuments(beam.DoFn):
    """A batch of (key, text) -> main output: (key, text) of the documents every rule keeps;
    "removed": (key, Removal); "stats": documents and bytes removed, per stage and per rule."""

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg

    def setup(self):
        self._thresholds = quality.Thresholds.parse(self._cfg.quality_thresholds, files.read_file)
        self._identifier = ThreadPoolExecutor(1, thread_name_prefix="cld2") if self._cfg.languages else None

    def teardown(self):
        if self._identifier is not None:
            self._identifier.shutdown()

    def process(self, batch):
        _progress.stage("filters", unit="documents").add(len(batch))
        stats = Counter()
        identified = None
        if self._identifier is not None:  # map submits the whole batch at once, answers come in order
            identified = self._identifier.map(language.identify, [text for _, text in batch])
        for key, text in batch:
            removal = self._language(next(identified), text, stats) if identified is not None else None
            if removal is None and self._cfg.quality_filters:
                failed = quality.first_failure(text, self._cfg.quality_filters, self._thresholds)
                if failed is not None:
                    removal = Removal("quality", failed[0], failed[1], len(text.encode("utf-8")))
                    stats[f"curation/quality/rule/{failed[0]}/documents_removed"] += 1
                    stats[f"curation/quality/rule/{failed[0]}/bytes_removed"] += removal.bytes
            if removal is None:
                yield key, text
            else:
                stats[f"curation/{removal.stage}/documents_removed"] += 1
                stats[f"curation/{removal.stage}/bytes_removed"] += removal.bytes
                yield beam.pvalue.TaggedOutput("removed", (key, removal))
        if stats:
            yield beam.pvalue.TaggedOutput("stats", count_stats(stats))

    def _language(self, identified: tuple[str, float], text: str, stats: Counter) -> Removal | None:
        """A Removal if the document's language (`identified`: code, score) is not wanted, or too
        little of it is; counts the documents per detected language, kept and removed."""
        code, score = identified
        if code not in self._cfg.languages:
            stats[f"curation/language/removed/{code}"] += 1
            return Removal("language", "language", code, len(text.encode("utf-8")))
        if score < self._cfg.min_language_score:
            stats[f"curation/language/removed/{code}"] += 1
            return Removal("language", "language_score", round(score, 2), len(text.encode("utf-8")))
        stats[f"curation/language/kept/{code}"] += 1
        return None
