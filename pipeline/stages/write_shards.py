"""WriteShards: part files -> one TFRecord per shard (a key range of every part), written under
_tmp/ and renamed."""

from __future__ import annotations

import logging
import os

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline import files
from pipeline.config import CorpusConfig
from pipeline.parts import TMP_DIR, count_framed, key_range, read_part, shard_name
from pipeline.stages.beside import Beside

log = logging.getLogger("bertbeam.corpus")


class WriteShard(Beside):
    """((split, shard), part files) -> one TFRecord file, records in sort-key order.

    The shard's key range of every part of its split is loaded (about --records_per_shard
    records with automatic shard counts) and ordered by the records' seeded keys. Written under
    _tmp/ and renamed into place, so a killed run leaves no partial shard under a final name.
    (Beam's WriteToTFRecord assigns records to shards by arrival, which would break byte-identical
    output across worker counts; here the shard and order come from the seed.) In the in-process
    runner two shards are merged at a time (`Beside`): reading, sorting, joining large buffers and
    writing release the GIL.
    """

    def __init__(self, output_dir: str):
        super().__init__(threads=min(2, os.cpu_count() or 1))
        self._output_dir = output_dir

    def work(self, keyed, shards):
        (split, shard), paths = keyed
        part_paths = sorted(set(paths))
        name = shard_name(split, shard, shards[split])
        if not all(files.exists(p) for p in part_paths):
            # Run again after the build finished with it (a Dask worker holding its result was
            # lost after the manifest removed _tmp/): the shard in place is this build's.
            yield self._written(split, name)
            return
        low, high = key_range(shard, shards[split])
        parts = [read_part(p, low, high) for p in part_paths]
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
        files.rename(tmp, f"{self._output_dir}/{name}")  # parts stay: the split's other shards read them
        log.info("wrote %s (%d records from %d parts)", name, len(keys), len(parts))
        yield {"split": split, "file": name, "records": len(keys), "bytes": len(data)}

    def delivered(self, outputs):
        Metrics.counter("bertbeam", "shards_written").inc(len(outputs))

    def _written(self, split: str, name: str) -> dict:
        data = files.read_file(f"{self._output_dir}/{name}")
        records = count_framed(data)
        log.info("%s was already written (%d records)", name, records)
        return {"split": split, "file": name, "records": records, "bytes": len(data)}


def shard_counts(records: dict[str, int], cfg: CorpusConfig) -> dict[str, int]:
    """Shards per split from its records (known once every group is written): --num_shards (or
    --num_validation_shards) when given, else one per --records_per_shard; none for no records."""
    counts = {}
    for split, n in records.items():
        requested = cfg.num_shards if split == "train" else cfg.num_validation_shards
        counts[split] = (requested or -(-n // cfg.records_per_shard)) if n else 0
    return counts


def _to_shards(part, shards):  # (split, (path, records)) -> ((split, shard), path) for every shard
    split, (path, _) = part
    return [((split, shard), path) for shard in range(shards[split])]


class WriteShards(beam.PTransform):
    """(split, (part file, records)) -> a description per shard written ({split, file, records,
    bytes}), once every part is: the shard counts come from the records (`shard_counts`)."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, parts):
        counts = (
            parts
            | "RecordsPerPart" >> beam.Map(lambda part: (part[0], part[1][1]))
            | "RecordsPerSplit" >> beam.CombinePerKey(sum)
            | "RecordsBySplit" >> beam.combiners.ToDict()
            | "ShardCounts" >> beam.Map(shard_counts, self._cfg)
        )
        shards = beam.pvalue.AsSingleton(counts)
        # Every shard of a split reads every part of it: its key range of each.
        return (
            parts
            | "PartToShards" >> beam.FlatMap(_to_shards, shards=shards)
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(WriteShard(self._cfg.output_dir), shards)
        )
