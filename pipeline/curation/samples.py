"""The removed documents a person reviews: a seeded sample per reason, with their texts, in
OUTPUT/curation/REASON.jsonl.gz (`report.py` prints them).

  SampleRemoved        the removals -> a seeded, bounded sample per reason: (key, Removal), with
                       each near-duplicate's kept document beside it
  WriteRemovedSamples  the sample and its texts (read again) -> OUTPUT/curation/REASON.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
from collections import Counter

import apache_beam as beam

from pipeline import files
from pipeline.config import CorpusConfig
from pipeline.keys import seeded_key

CURATION_DIR = "curation"
SAMPLE_TEXT_CHARS = 2000  # of each sampled document: enough to judge, bounded however long it is


def write_removed_samples(cfg: CorpusConfig, removed, docs, reread, folder: str):
    """A seeded sample of the removed documents per reason, with their texts (read again by
    `reread`, the build's (key, pointer) -> (key, text)), into `folder`; returns a stats
    PCollection (the files written), which the manifest waits for."""
    sample = removed | "SampleRemoved" >> SampleRemoved(cfg.curation_samples, cfg.seed)
    # The sample is small (curation_samples per reason): a side input that picks its documents'
    # pointers, not a join that shuffles every document's pointer beside it.
    sampled_docs = docs | "SampledDocs" >> beam.ParDo(_PickSampled(), beam.pvalue.AsList(sample))
    texts = reread(sampled_docs, "ForSamples") | "CollectSampleTexts" >> beam.combiners.ToList()
    return (
        texts
        | "WriteRemovedSamples" >> beam.Map(write_samples, beam.pvalue.AsList(sample), folder)
        | "SamplesWritten" >> beam.Map(lambda paths: Counter({"curation/sample_files": len(paths)}))
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


class _PickSampled(beam.DoFn):
    """(key, pointer or text) -> itself when the sample holds its key."""

    def __init__(self):
        self._sample, self._keys = None, frozenset()

    def process(self, doc, sample):
        if sample is not self._sample:  # the side input: one set per bundle, not one per document
            self._sample, self._keys = sample, frozenset(key for key, _ in sample)
        if doc[0] in self._keys:
            yield doc


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
