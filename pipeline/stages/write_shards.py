"""WriteShards: part files -> one TFRecord per shard, written under _tmp/ and renamed."""

from __future__ import annotations

import logging

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline import files, schema
from pipeline.parts import (
    TMP_DIR,
    count_framed,
    read_part,
    shard_name,
)

log = logging.getLogger("bertbeam.corpus")


class WriteShard(beam.DoFn):
    """((split, shard), part files) -> one TFRecord file, records in sort-key order.

    The parts of a shard are loaded together (about --records_per_shard records with automatic
    shard counts) and ordered by their seeded keys. Written under _tmp/ and renamed into place, so
    a killed run leaves no partial shard under a final name. (Beam's WriteToTFRecord assigns
    records to shards by arrival, which would break byte-identical output across worker counts;
    here the shard and order come from the seed.)
    """

    def __init__(self, output_dir: str):
        self._output_dir = output_dir

    def process(self, keyed, plan):
        (split, shard), paths = keyed
        part_paths = sorted({p for p in paths if p is not None})  # None: a seed for an empty shard
        name = shard_name(split, shard, plan[split]["shards"])
        if not all(files.exists(p) for p in part_paths):
            # Run again after it finished (a Dask worker holding its result was lost): parts go only
            # after the shard is renamed into place, so that shard is this build's. Describe it.
            yield self._written(split, name)
            return
        parts = [read_part(p) for p in part_paths]
        tmp = f"{self._output_dir}/{TMP_DIR}/{name}"
        blob = b"".join(part_blob for _, _, part_blob in parts)
        at = np.cumsum([0] + [len(part_blob) for _, _, part_blob in parts])  # each part's place in it
        none = [np.zeros(0, np.int64)]
        keys = np.concatenate(none + [part_keys for part_keys, _, _ in parts])
        ends = np.concatenate(none + [part_ends + at[p] for p, (_, part_ends, _) in enumerate(parts)])
        sizes = np.concatenate(none + [np.diff(part_ends, prepend=0) for _, part_ends, _ in parts])
        order = np.argsort(keys, kind="stable")  # ties: part order, then file order
        ranges = zip((ends - sizes)[order].tolist(), ends[order].tolist(), strict=True)
        view = memoryview(blob)  # slices of a view copy nothing until the join: 2.5x faster
        data = b"".join([view[start:end] for start, end in ranges])  # framed records, by key
        with files.create_file(tmp) as f:
            f.write(data)
        files.rename(tmp, f"{self._output_dir}/{name}")
        for path in part_paths:
            files.remove(path)
        Metrics.counter("bertbeam", "shards_written").inc()
        log.info("wrote %s (%d records from %d parts)", name, len(keys), len(parts))
        yield {"split": split, "file": name, "records": len(keys), "bytes": len(data)}

    def _written(self, split: str, name: str) -> dict:
        data = files.read_file(f"{self._output_dir}/{name}")
        records = count_framed(data)
        log.info("%s was already written (%d records)", name, records)
        return {"split": split, "file": name, "records": records, "bytes": len(data)}


def _all_shard_keys(plan):
    return [((split, s), None) for split in schema.SPLITS for s in range(plan[split]["shards"])]


class WriteShards(beam.PTransform):
    def __init__(self, output_dir: str, plan):
        super().__init__()
        self._output_dir = output_dir
        self._plan = plan

    def expand(self, records):
        # Every shard gets a file, also one that no record hashed to.
        seeds = (
            records.pipeline
            | "ShardSeed" >> beam.Create([None])
            | "AllShards" >> beam.FlatMap(lambda _, plan: _all_shard_keys(plan), plan=self._plan)
        )
        return (
            (records, seeds)
            | "WithEmptyShards" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(WriteShard(self._output_dir), self._plan)
        )
