"""DeduplicateDocuments: (content key, document or pointer) -> one per key, exact copies counted."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam

from pipeline.keys import content_key
from pipeline.stages.stats import count_stats


def _first(kept, document):
    return document if kept is None else min(kept, document)


class _KeepOneCount(beam.CombineFn):
    """(text or pointer, copies): of a document's copies, the least pointer is kept (the copy in
    the file of least key, then path, then place), whatever order they arrive in: where a document
    is decides the batch it is read in (`groups.BatchDocuments`). Texts of a key are all equal."""

    def create_accumulator(self):
        return (None, 0)

    def add_input(self, acc, document):
        return (_first(acc[0], document), acc[1] + 1)

    def merge_accumulators(self, accumulators):
        kept, copies = None, 0
        for document, n in accumulators:
            if document is not None:
                kept = _first(kept, document)
            copies += n
        return (kept, copies)

    def extract_output(self, acc):
        return acc


def _unique_with_stats(keyed):
    key, (document, copies) = keyed
    if copies > 1:
        yield beam.pvalue.TaggedOutput(
            "stats", count_stats(Counter({"skipped/duplicate_document": copies - 1}))
        )
    yield key, document


class DeduplicateDocuments(beam.PTransform):
    """documents -> (content key, document), exact duplicates removed and counted. `keyed`: the
    input is (content key, anything) already (`ReadDocuments(pointers=True)`): one is kept per key."""

    def __init__(self, keyed: bool = False):
        super().__init__()
        self._keyed = keyed

    def expand(self, docs):
        if not self._keyed:
            docs = docs | "KeyByContent" >> beam.Map(lambda d: (content_key(d), d))
        return (
            docs
            | "KeepOne" >> beam.CombinePerKey(_KeepOneCount())
            | "DropDuplicates" >> beam.FlatMap(_unique_with_stats).with_outputs("stats", main="docs")
        )
