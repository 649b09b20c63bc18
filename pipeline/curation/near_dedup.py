"""NearDeduplicate: (key, text) -> the near-duplicates to remove, by MinHash LSH (`minhash.py`).

  Sign             (key, text) -> (bucket, (key, bytes, signature)), one per band
  GroupBuckets     documents that agree on a whole band
  ConfirmPairs     pairs within each bucket whose signatures pass the estimate
  Components       confirmed pairs -> clusters (union-find); each keeps its smallest content key
  Removed          every other member: a `Removal`

Only keys, sizes and signatures pass the shuffle, never text. A document's signature travels with
each of its bucket entries (14 x 448 bytes for FineWeb's 14 x 8), so that a bucket confirms its
own pairs: one shuffle where joining signatures to candidate pairs took four more (distinct pairs,
two joins and the sizes' join), which cost a 3.4 MB build 0.5-0.8 s more. The price is shuffle
bytes, about six times the joins' (docs/corpus.md). A pair that shares several buckets is
confirmed in each, with the same answer; the union-find takes it once. The clusters are found in
one place (a global combine over confirmed pairs), so that step holds a key and a size per
near-duplicate: for a web crawl with a third duplicated, about 100 bytes per duplicated document.
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
        units = minhash.unit_hashes(text, self._cfg.shingle_unit, self._segmenter)
        signature = self._hasher.signature(minhash.shingles(units, self._cfg.shingle_size))
        _progress.stage("near-dedup signatures", unit="documents").add(1)
        if signature is None:  # nothing but punctuation: nothing to compare
            return
        member = (key, len(text.encode("utf-8")), signature.tobytes())
        for bucket in self._hasher.bucket_keys(signature):
            yield bucket, member


def _confirmed_pairs(bucket, needed: float):
    """(bucket, [(key, bytes, signature)...]) -> ((key, bytes), (key, bytes)) for each pair the
    bucket makes whose signatures agree on at least `needed` of their positions."""
    _, members = bucket
    members = sorted(set(members))  # by content key: one entry per document
    if len(members) < 2:  # most buckets
        return
    if len(members) <= ALL_PAIRS_UP_TO:
        pairs = ((a, b) for i, a in enumerate(members) for b in members[i + 1 :])
    else:
        pairs = ((members[0], b) for b in members[1:])
    signatures = {key: np.frombuffer(sig, dtype=minhash.SIGNATURE_DTYPE) for key, _, sig in members}
    for (a, a_bytes, _), (b, b_bytes, _) in pairs:
        if minhash.estimated_jaccard(signatures[a], signatures[b]) >= needed:
            yield (a, a_bytes), (b, b_bytes)


class _Components(beam.CombineFn):
    """Confirmed pairs -> {member: (root, its bytes)} over all of them: union-find whose root is
    always the smallest key, so the kept document does not depend on the order pairs arrive in."""

    def create_accumulator(self):
        return {}, {}  # parent, bytes

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

    def add_input(self, accumulator, pair):
        parent, sizes = accumulator
        (a, a_bytes), (b, b_bytes) = pair
        self._union(parent, a, b)
        sizes[a], sizes[b] = a_bytes, b_bytes
        return accumulator

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        parent, sizes = next(accumulators)
        for other_parent, other_sizes in accumulators:
            for key, up in other_parent.items():
                self._union(parent, key, up)
            sizes.update(other_sizes)
        return parent, sizes

    def extract_output(self, accumulator):
        parent, sizes = accumulator
        return {key: (self._find(parent, key), sizes[key]) for key in parent}


def _removals(members: dict):
    """{member: (root, bytes)} -> (member, Removal) for every member but its cluster's root; the
    cluster-size histogram and the documents and bytes removed on a "stats" output."""
    cluster_sizes = Counter(root for root, _ in members.values())
    stats = Counter(f"curation/near_dedup/clusters_of/{n}" for n in cluster_sizes.values())
    removed = [(m, root, n_bytes) for m, (root, n_bytes) in sorted(members.items()) if m != root]
    if removed:
        stats["curation/near_dedup/documents_removed"] = len(removed)
        stats["curation/near_dedup/bytes_removed"] = sum(n_bytes for _, _, n_bytes in removed)
    yield beam.pvalue.TaggedOutput("stats", count_stats(stats))
    for member, root, n_bytes in removed:
        yield member, Removal("near_dedup", "near_duplicate", cluster_sizes[root], n_bytes, kept=root)


class NearDeduplicate(beam.PTransform):
    """(content key, text) -> "removed": (key, Removal) for every near-duplicate but one per
    cluster; "stats": removed documents and bytes, and the cluster sizes."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, docs):
        cfg = self._cfg
        needed = minhash.confirm_threshold(cfg.near_dedup_threshold, cfg.minhash_bands * cfg.minhash_rows)
        removed = (
            docs
            | "Sign" >> beam.ParDo(_Sign(cfg))
            | "GroupBuckets" >> beam.GroupByKey()
            | "ConfirmPairs" >> beam.FlatMap(_confirmed_pairs, needed)
            | "Components" >> beam.CombineGlobally(_Components())
            | "Removed" >> beam.FlatMap(_removals).with_outputs("stats", main="removed")
        )
        return removed.removed, removed.stats
