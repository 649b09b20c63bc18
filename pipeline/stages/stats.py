"""What every stage counts with: the stats counters summed into the manifest, and the bad-input
error a stage raises."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.metrics import Metrics

from common.errors import BertbeamError


class BadInputError(BertbeamError):
    """Input that cannot be used; the message is one line naming the file and the cause."""


def count_stats(stats: Counter) -> Counter:
    """`stats`, each also added to its Beam counter in the `bertbeam` namespace (a Dataflow job
    shows them as it runs)."""
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
