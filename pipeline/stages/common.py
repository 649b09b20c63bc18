"""What every stage shares: the bad-input error, the stats counters, and why curation removed a
document."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from common.errors import BertbeamError


class BadInputError(BertbeamError):
    """Input that cannot be used; the message is one line naming the file and the cause."""


def count_stats(stats: Counter) -> Counter:
    for name, value in stats.items():
        Metrics.counter("bertbeam", name).inc(value)
    return stats


class SumCounters(beam.CombineFn):
    def create_accumulator(self):
        return Counter()

    def add_input(self, acc, stats):
        acc.update(stats)
        return acc

    def merge_accumulators(self, accumulators):
        total = Counter()
        for acc in accumulators:
            total.update(acc)
        return total

    def extract_output(self, acc):
        return dict(acc)


def is_dry_run(options) -> bool:
    """Whether Beam's options ask only to build the job (Dataflow's `--dry_run`): nothing is read
    or written, so nothing the build would check or size beforehand exists."""
    return bool(options.get_all_options().get("dry_run"))


class Removal(NamedTuple):
    """Why a document leaves the corpus, for the manifest's counts and the audit's samples."""

    stage: str  # near_dedup, quality or language
    reason: str  # near_duplicate, a quality rule's name, or language / language_score
    value: object  # what was measured: a cluster's size, a rule's figure, a language
    bytes: int  # the document's UTF-8 size
    kept: int | None = None  # near_dedup: the content key of the cluster's kept document
