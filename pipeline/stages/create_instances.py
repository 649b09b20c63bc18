"""CreateInstances: (split, TokenizedDoc) -> sorted part files per shard, and stats."""

from __future__ import annotations

import concurrent.futures
import os
from collections import Counter

import apache_beam as beam
import numpy as np

from pipeline import schema
from pipeline.config import CorpusConfig
from pipeline.instances import SpecialIds, create_instances
from pipeline.masking import MaskingTables
from pipeline.parts import (
    SpilledDoc,
    part_path,
    read_spilled,
    tfrecord_framed,
    write_part,
)
from pipeline.stages import progress as _progress
from pipeline.stages.plan import estimate_instances
from pipeline.stages.stats import count_stats
from pipeline.tfexample import serialize_examples


class CreateGroupInstances(beam.DoFn):
    """((split, group), docs) -> ((split, shard), part file) per shard, and stats.

    One numpy pass per dupe over the whole group: pack or pair, then mask, then serialize. A seeded
    sort key per record both shuffles globally and picks the shard. Records leave this step in
    sorted part files (one per shard), not through the shuffle: the shuffle then carries file
    names, so no runner holds the records in memory, and each shard is a streaming merge.
    """

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg
        self._launcher_pid = os.getpid()  # progress: a worker elsewhere names itself
        self._loaded = None

    def _tables(self, vocab_file):  # the vocab arrives as a side input: loaded once per worker
        if self._loaded is None or self._loaded[0] != vocab_file:
            vocab = vocab_file.load()
            ids = SpecialIds(
                pad=vocab.special_ids["pad"],
                cls=vocab.special_ids["cls"],
                sep=vocab.special_ids["sep"],
            )
            self._loaded = (vocab_file, MaskingTables.from_vocab(vocab), ids)
        return self._loaded[1], self._loaded[2]

    def _progress(self, plan):
        total = sum(estimate_instances(p["tokens"], p["dupes"], self._cfg.seq_len) for p in plan.values())
        name = f"written at seq {self._cfg.seq_len}"
        return _progress.stage(name, total=total, unit="instances", launcher_pid=self._launcher_pid)

    def process(self, grouped, vocab_file, plan):
        cfg = self._cfg
        (split, group), docs = grouped
        docs = list(docs)
        spilled = [d for d in docs if isinstance(d, SpilledDoc)]
        if spilled:  # the group's documents, read back from the spill files
            docs = [d for d in docs if not isinstance(d, SpilledDoc)] + read_spilled(spilled)
        docs = sorted(docs, key=lambda d: d.key)  # arrival order must not matter
        tables, ids = self._tables(vocab_file)
        split_plan = plan[split]
        stats = Counter({f"{split}/documents": len(docs)})
        by_shard: dict[int, tuple[list, list]] = {}  # sort key arrays and framed records
        seed = [cfg.seed, schema.SPLITS.index(split), group]

        def one_dupe(dupe: int):  # ({shard: (sort keys, framed records)}, rows) of one dupe: its own rng
            rng = np.random.default_rng([*seed, dupe])
            rows = create_instances(docs, cfg=cfg, tables=tables, ids=ids, rng=rng)
            sort_keys = rng.integers(0, 2**63, size=len(rows["input_ids"]), dtype=np.int64)
            records = [tfrecord_framed(r) for r in serialize_examples(rows, cfg.seq_len, cfg.max_predictions)]
            shard_of = sort_keys % split_plan["shards"]
            shards = {}
            for shard in np.unique(shard_of).tolist():
                at = np.flatnonzero(shard_of == shard)
                shards[shard] = sort_keys[at], [records[i] for i in at.tolist()]
            return shards, rows

        # The in-process runner is one worker: its idle core takes every other dupe. About half of
        # a dupe's time is numpy (masking, varints, gathers), which runs beside the other thread's
        # Python. A worker in a process of its own (multi_processing, Dataflow) has no idle core.
        threads = min(split_plan["dupes"], os.cpu_count() or 1) if os.getpid() == self._launcher_pid else 1
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for shards, rows in pool.map(one_dupe, range(split_plan["dupes"])):
                for shard, (keys, records) in shards.items():
                    shard_keys, shard_records = by_shard.setdefault(shard, ([], []))
                    shard_keys.append(keys)
                    shard_records.extend(records)
                n, real = len(rows["input_ids"]), int(rows["input_mask"].sum())
                stats[f"{split}/instances"] += n
                stats[f"{split}/real_tokens"] += real
                stats[f"{split}/padding_tokens"] += n * cfg.seq_len - real
                stats[f"{split}/masked_tokens"] += int(rows["masked_lm_weights"].sum())
                stats[f"{split}/next_sentence_label_1"] += int(rows["next_sentence_labels"].sum())
                self._progress(plan).add(n)
        for shard, (keys, records) in sorted(by_shard.items()):
            path = part_path(cfg.output_dir, split, shard, group)
            write_part(path, np.concatenate(keys), records)  # the same bytes if the bundle is retried
            yield (split, shard), path
        yield beam.pvalue.TaggedOutput("stats", count_stats(stats))


def _group_of(split_doc, plan):
    split, doc = split_doc
    return (split, doc.key % plan[split]["groups"]), doc


class CreateInstances(beam.PTransform):
    """(split, TokenizedDoc) -> ((split, shard), part file) for every part, and stats."""

    def __init__(self, cfg: CorpusConfig, vocab, plan):
        super().__init__()
        self._cfg = cfg
        self._vocab = vocab  # side input: the VocabFile
        self._plan = plan  # side input: make_plan's dict

    def expand(self, docs):
        return (
            docs
            | "AssignGroups" >> beam.Map(_group_of, plan=self._plan)
            | "GroupDocuments" >> beam.GroupByKey()
            | "PackAndMask"
            >> beam.ParDo(CreateGroupInstances(self._cfg), self._vocab, self._plan).with_outputs(
                "stats", main="records"
            )
        )
