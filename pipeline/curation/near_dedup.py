"""NearDeduplicate: (key, text) -> the near-duplicates to remove, by MinHash LSH (`minhash.py`).

  Sign             (key, text) -> (key, signature) and (bucket, key) per band, (key, bytes)
  GroupBuckets     documents that agree on a whole band
  CandidatePairs   pairs from each bucket, once each however many bands they share
  Confirm          both signatures joined to each pair; kept where the estimate passes
  Components       confirmed pairs -> clusters (union-find); each keeps its smallest content key
  Removed          every other member: a `Removal`, with its bytes joined back

Only keys, signatures and sizes pass through the shuffles, never text. The clusters are found in
one place (a global combine over confirmed pairs), so that step holds a key per near-duplicate:
for a web crawl with a third duplicated, about 100 bytes per duplicated document.
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
import numpy as np

from pipeline import segment
from pipeline.config import CorpusConfig
from pipeline.curation import minhash
from pipeline.curation.removal import Removal
from pipeline.stages import progress as _progress
from pipeline.stages.stats import count_stats

# A bucket holding more documents than this pairs each with its smallest key only, not with every
# other (n^2 pairs): its members share a whole band, so they are near each other already.
ALL_PAIRS_UP_TO = 32


class _Sign(beam.DoFn):
    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg

    def setup(self):
        self._hasher = minhash.MinHasher(self._cfg.minhash_bands, self._cfg.minhash_rows, self._cfg.seed)
        self._segmenter = None
        if self._cfg.shingle_unit == "segmenter":
            dictionary = segment.read_dictionary(self._cfg.segmenter_dict)
            self._segmenter = segment.load(
                self._cfg.word_segmenter, dictionary, self._cfg.segmenter_dict or ""
            )

    def process(self, keyed):
        key, text = keyed
        units = minhash.units(text, self._cfg.shingle_unit, self._segmenter)
        signature = self._hasher.signature(minhash.shingle_hashes(units, self._cfg.shingle_size))
        _progress.stage("near-dedup signatures", unit="documents").add(1)
        if signature is None:  # nothing but punctuation: nothing to compare
            return
        yield key, signature.tobytes()
        yield beam.pvalue.TaggedOutput("sizes", (key, len(text.encode("utf-8"))))
        for bucket in self._hasher.bucket_keys(signature):
            yield beam.pvalue.TaggedOutput("buckets", (bucket, key))


def _candidate_pairs(bucket):
    _, keys = bucket
    keys = sorted(set(keys))
    if len(keys) <= ALL_PAIRS_UP_TO:
        yield from ((a, b) for i, a in enumerate(keys) for b in keys[i + 1 :])
    else:
        yield from ((keys[0], b) for b in keys[1:])


def _by_second(joined):
    """(first, {pair: [second...], signature: [sig]}) -> (second, (first, sig))."""
    first, grouped = joined
    for signature in grouped["signature"]:
        for second in grouped["pair"]:
            yield second, (first, signature)


def _confirm(joined, needed: float):
    """(second, {half: [(first, sig)...], signature: [sig]}) -> (first, second) where the
    signatures agree on at least `needed` of their positions."""
    second, grouped = joined
    for signature in grouped["signature"]:
        b = np.frombuffer(signature, dtype=np.uint64)
        for first, first_signature in grouped["half"]:
            if minhash.estimated_jaccard(np.frombuffer(first_signature, dtype=np.uint64), b) >= needed:
                yield first, second


class _Components(beam.CombineFn):
    """Confirmed pairs -> {member: root} over all of them: union-find whose root is always the
    smallest key, so the kept document does not depend on the order pairs arrive in."""

    def create_accumulator(self):
        return {}

    @staticmethod
    def _find(parent: dict, key: int) -> int:
        root = key
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(key, key) != root:  # path compression
            parent[key], key = root, parent[key]
        return root

    def _union(self, parent: dict, a: int, b: int) -> None:
        ra, rb = self._find(parent, a), self._find(parent, b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
            parent.setdefault(min(ra, rb), min(ra, rb))

    def add_input(self, parent, pair):
        self._union(parent, *pair)
        return parent

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for other in accumulators:
            for key, parent in other.items():
                self._union(merged, key, parent)
        return merged

    def extract_output(self, parent):
        return {key: self._find(parent, key) for key in parent}


def _removals(roots: dict):
    """{member: root} -> (member, (cluster size, root)) for every member but its cluster's root;
    the cluster-size histogram on a "stats" output."""
    sizes = Counter(roots.values())
    histogram = Counter(f"curation/near_dedup/clusters_of/{n}" for n in sizes.values())
    yield beam.pvalue.TaggedOutput("stats", count_stats(histogram))
    for member, root in sorted(roots.items()):
        if member != root:
            yield member, (sizes[root], root)


def _with_bytes(joined):
    """(key, {cluster: [(size, root)], bytes: [n]}) -> (key, Removal) and its stats."""
    key, grouped = joined
    for size, root in grouped["cluster"]:
        n_bytes = next(iter(grouped["bytes"]), 0)  # one per key: exact copies are gone before this stage
        stats = Counter(
            {"curation/near_dedup/documents_removed": 1, "curation/near_dedup/bytes_removed": n_bytes}
        )
        yield beam.pvalue.TaggedOutput("stats", count_stats(stats))
        yield key, Removal("near_dedup", "near_duplicate", size, n_bytes, kept=root)


class NearDeduplicate(beam.PTransform):
    """(content key, text) -> "removed": (key, Removal) for every near-duplicate but one per
    cluster; "stats": removed documents and bytes, and the cluster sizes."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, docs):
        cfg = self._cfg
        needed = minhash.confirm_threshold(cfg.near_dedup_threshold, cfg.minhash_bands * cfg.minhash_rows)
        signed = docs | "Sign" >> beam.ParDo(_Sign(cfg)).with_outputs("buckets", "sizes", main="signatures")
        pairs = (
            signed.buckets
            | "GroupBuckets" >> beam.GroupByKey()
            | "CandidatePairs" >> beam.FlatMap(_candidate_pairs)
            | "DistinctPairs" >> beam.Distinct()
        )
        halves = (
            {"pair": pairs, "signature": signed.signatures}
            | "JoinFirst" >> beam.CoGroupByKey()
            | "BySecond" >> beam.FlatMap(_by_second)
        )
        clusters = (
            {"half": halves, "signature": signed.signatures}
            | "JoinSecond" >> beam.CoGroupByKey()
            | "Confirm" >> beam.FlatMap(_confirm, needed)
            | "Components" >> beam.CombineGlobally(_Components())
            | "Clusters" >> beam.FlatMap(_removals).with_outputs("stats", main="members")
        )
        removed = (
            {"cluster": clusters.members, "bytes": signed.sizes}
            | "JoinBytes" >> beam.CoGroupByKey()
            | "Removed" >> beam.FlatMap(_with_bytes).with_outputs("stats", main="removed")
        )
        stats = (clusters.stats, removed.stats) | "NearDedupStats" >> beam.Flatten()
        return removed.removed, stats
