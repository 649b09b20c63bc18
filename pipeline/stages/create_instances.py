"""CreateInstances: (split, group, [TokenizedDoc]) -> one sorted part file per packing group, and stats."""

from __future__ import annotations

import concurrent.futures
import logging
import os
from collections import Counter

import apache_beam as beam
import numpy as np

from pipeline import schema
from pipeline.config import CorpusConfig
from pipeline.instances import SpecialIds, create_instances
from pipeline.masking import MaskingTables
from pipeline.parts import part_path, tfrecord_framed, write_part
from pipeline.stages import progress as _progress
from pipeline.stages.beside import Beside
from pipeline.stages.stats import count_stats
from pipeline.tfexample import serialize_examples

log = logging.getLogger("bertbeam.corpus")


class CreateGroupInstances(Beside):
    """(split, group, docs) -> (split, (part file, records)), and stats.

    One numpy pass per dupe over the whole group: pack or pair, then mask, then serialize. A seeded
    sort key per record both shuffles globally and picks the shard (`parts.key_range`). Records
    leave this step in one part file sorted by key, not through the shuffle: the shuffle then
    carries file names, so no runner holds the records in memory, and each shard is a merge.
    In the in-process runner a group's instances are created beside the next group's reading and
    tokenizing (`Beside`), and its dupes on threads of their own.
    """

    def __init__(self, cfg: CorpusConfig, expected: int | None = None):
        super().__init__(threads=1)
        self._cfg = cfg
        self._expected = expected  # instances, about: a progress line's total
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

    def work(self, grouped, vocab_file):
        cfg = self._cfg
        split, group, docs = grouped
        docs = sorted(docs, key=lambda d: d.key)  # a group is a set of documents: key order
        if cfg.pair_task == "nsp" and cfg.mode == "segment_pair" and len(docs) == 1:
            # As a one-document corpus always was: no other document to draw a next segment from.
            log.warning("%s packing group %016x holds one document: its NSP pairs are all true next "
                        "segments (label 0), none random", split, group)  # fmt: skip
        tables, ids = self._tables(vocab_file)
        dupes = cfg.dupe_factor if split == "train" else 1
        stats = Counter({f"{split}/documents": len(docs), f"{split}/packing_groups": 1})
        keys, records = [], []  # sort key arrays and framed records, of every dupe
        seed = [cfg.seed, schema.SPLITS.index(split), group]

        def one_dupe(dupe: int):  # (sort keys, framed records, rows) of one dupe: its own rng
            rng = np.random.default_rng([*seed, dupe])
            rows = create_instances(docs, cfg=cfg, tables=tables, ids=ids, rng=rng)
            sort_keys = rng.integers(0, 2**63, size=len(rows["input_ids"]), dtype=np.int64)
            framed = [tfrecord_framed(r) for r in serialize_examples(rows, cfg.seq_len, cfg.max_predictions)]
            return sort_keys, framed, rows

        # The in-process runner is one worker: its idle core takes every other dupe. About half of
        # a dupe's time is numpy (masking, varints, gathers), which runs beside the other thread's
        # Python. A worker in a process of its own (multi_processing, Dataflow) has no idle core.
        threads = min(dupes, os.cpu_count() or 1) if os.getpid() == self._launcher_pid else 1
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for sort_keys, framed, rows in pool.map(one_dupe, range(dupes)):
                keys.append(sort_keys)
                records.extend(framed)
                n, real = len(rows["input_ids"]), int(rows["input_mask"].sum())
                stats[f"{split}/instances"] += n
                stats[f"{split}/real_tokens"] += real
                stats[f"{split}/padding_tokens"] += n * cfg.seq_len - real
                stats[f"{split}/masked_tokens"] += int(rows["masked_lm_weights"].sum())
                stats[f"{split}/next_sentence_label_1"] += int(rows["next_sentence_labels"].sum())
        path = part_path(cfg.output_dir, split, group)
        write_part(path, np.concatenate(keys), records)  # the same bytes if the bundle is retried
        yield split, (path, len(records))
        yield beam.pvalue.TaggedOutput("stats", stats)

    def delivered(self, outputs):
        for out in outputs:
            if isinstance(out, beam.pvalue.TaggedOutput):
                count_stats(out.value)
                progress = _progress.stage(f"written at seq {self._cfg.seq_len}", total=self._expected,
                                           unit="instances", launcher_pid=self._launcher_pid)  # fmt: skip
                progress.add(sum(v for k, v in out.value.items() if k.endswith("/instances")))


class CreateInstances(beam.PTransform):
    """(split, group, [TokenizedDoc]) -> (split, (part file, records)) per group, and stats.
    `expected`: about how many instances (`groups.expected_instances`), for progress lines."""

    def __init__(self, cfg: CorpusConfig, vocab, expected: int | None = None):
        super().__init__()
        self._cfg = cfg
        self._vocab = vocab  # side input: the VocabFile
        self._expected = expected

    def expand(self, groups):
        create = CreateGroupInstances(self._cfg, self._expected)
        return groups | "PackAndMask" >> beam.ParDo(create, self._vocab).with_outputs("stats", main="records")
