"""Raw text -> sharded, statically padded masked-LM TFRecords, with Apache Beam.

    python -m pipeline.build_corpus --input 'data/*.txt' --output out/corpus --vocab_size 8000
    python -m pipeline.build_corpus ... --runner DataflowRunner --project P --region R \\
        --temp_location gs://B/tmp --setup_file ./setup.py

Stages, each a small named transform:
  ReadDocuments -> DeduplicateDocuments -> [TrainVocab] -> TokenizeDocuments -> PlanGroups
  -> CreateInstances -> WriteShards -> WriteManifest

Determinism: every random choice derives from --seed and a content hash (of a document, of a
packing group), never from worker state or arrival order, so the same inputs, vocab and seed give
byte-identical shards and manifest on any runner and any number of workers.
Memory: documents are read line by line with a bounded line length; instances are built per
packing group of about --group_tokens tokens, and shards are sorted per shard (about
--records_per_shard records), so no step holds the corpus.
"""

from __future__ import annotations

import argparse
import bz2
import contextlib
import dataclasses
import gzip
import hashlib
import io
import itertools
import json
import logging
import re
import sys
import zlib
from collections import Counter

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline import schema, text
from pipeline.config import CorpusConfig
from pipeline.instances import SpecialIds, TokenizedDoc, create_instances
from pipeline.masking import MaskingTables
from pipeline.vocab import KINDS, VocabError, VocabFile, kind_of, train_sentencepiece

log = logging.getLogger("bertbeam.corpus")

TMP_DIR = "_tmp"  # shards are written here, then renamed: no partial file under a final name


class BadInputError(ValueError):
    """Input that cannot be used; the message is one line naming the file and the cause."""


# ----------------------------------------------------------------------------------------------
# Hashing: the only source of identity and randomness.


KEY_BITS = (1 << 63) - 1  # keys stay non-negative int64: Beam's VarIntCoder refuses larger ints


def content_key(value: str | bytes) -> int:
    """63-bit key of a document or sentence (blake2b): identity, split and group derive from it."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & KEY_BITS


def seeded_key(seed: int, *parts: int) -> int:
    data = b"".join(int(p).to_bytes(8, "little", signed=False) for p in (seed, *parts))
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & KEY_BITS


def split_of(doc_key: int, validation_fraction: float) -> str:
    """Train or validation by document hash alone, so the split is the same for every seed."""
    return "validation" if (doc_key % 1_000_000) < validation_fraction * 1_000_000 else "train"


def _count(stats: Counter) -> Counter:
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


# ----------------------------------------------------------------------------------------------
# 1. ReadDocuments


@contextlib.contextmanager
def _open_decompressed(path: str):
    """A binary stream of the file's text, decompressed by extension.

    Python's own gzip/bz2 readers, not Beam's CompressedFile, because only they offer
    readline(size), which the bounded line reader needs.
    """
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield f
        elif path.endswith(".bz2"):
            with bz2.BZ2File(raw, mode="rb") as f:
                yield f
        else:
            yield raw


class ReadFileDocuments(beam.DoFn):
    """A file -> its normalised documents, streamed line by line; a "stats" output per file."""

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg

    def _documents(self, path: str, stats: Counter):
        with _open_decompressed(path) as f:
            if text.looks_binary(f.read(text.SNIFF_BYTES)):
                raise BadInputError(f"{path}: looks binary, not UTF-8 text")
        with _open_decompressed(path) as f:
            lines = text.iter_lines(f, self._cfg.max_line_bytes, stats)
            if self._cfg.format == "jsonl":
                yield from text.jsonl_documents(
                    lines,
                    text_field=self._cfg.text_field,
                    max_document_chars=self._cfg.max_document_chars,
                    stats=stats,
                )
            else:
                yield from text.text_documents(
                    lines,
                    doc_per_file=self._cfg.doc_per_file,
                    max_document_chars=self._cfg.max_document_chars,
                    stats=stats,
                )

    def process(self, path: str):
        stats = Counter({"input/files": 1})
        documents = 0
        try:
            for document in self._documents(path, stats):
                documents += 1
                yield document
        except (OSError, EOFError, zlib.error, BadInputError) as e:
            cause = str(e) if isinstance(e, BadInputError) else f"{path}: unreadable ({e})"
            if self._cfg.on_bad_file == "fail":
                raise BadInputError(f"{cause}; remove it or pass --on_bad_file=skip") from None
            reason = "binary" if "binary" in cause else "unreadable"
            stats[f"skipped/bad_file_{reason}"] += 1
            log.warning("skipping %s", cause)
        if documents == 0 and not any(k.startswith("skipped/bad_file") for k in stats):
            stats["skipped/empty_file"] += 1
        stats["input/documents"] += documents
        log.info("read %s: %d documents", path, documents)
        yield beam.pvalue.TaggedOutput("stats", _count(stats))


class ReadTfdsDocuments(beam.PTransform):
    """A tensorflow-datasets split -> normalised documents from its text field."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, pipeline):
        import tensorflow_datasets as tfds

        builder = tfds.builder(self._cfg.tfds_name, data_dir=self._cfg.tfds_data_dir)
        return (
            pipeline
            | "ReadFromTFDS" >> tfds.beam.ReadFromTFDS(builder, split=self._cfg.tfds_split)
            | "AsNumpy" >> beam.Map(tfds.as_numpy)
            | "ExtractText" >> beam.ParDo(_ExtractField(self._cfg)).with_outputs("stats", main="docs")
        )


class _ExtractField(beam.DoFn):
    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg

    def process(self, example):
        stats = Counter()
        value = example.get(self._cfg.text_field) if isinstance(example, dict) else None
        if isinstance(value, bytes):
            value = text.decode_line(value, stats)
        if not isinstance(value, str):
            stats["skipped/missing_text_field"] += 1
        else:
            for document in text.field_document(
                value, max_document_chars=self._cfg.max_document_chars, stats=stats
            ):
                stats["input/documents"] += 1
                yield document
        yield beam.pvalue.TaggedOutput("stats", _count(stats))


class ReadDocuments(beam.PTransform):
    """Input globs (or a tfds split) -> documents (str), plus per-file stats."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, pipeline):
        if self._cfg.format == "tfds":
            return pipeline | "ReadTfds" >> ReadTfdsDocuments(self._cfg)
        return (
            pipeline
            | "Patterns" >> beam.Create(list(self._cfg.input_patterns))
            | "MatchFiles" >> fileio.MatchAll()
            | "Paths" >> beam.Map(lambda metadata: metadata.path)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(ReadFileDocuments(self._cfg)).with_outputs("stats", main="docs")
        )


# ----------------------------------------------------------------------------------------------
# 2. DeduplicateDocuments


class _KeepOneCount(beam.CombineFn):
    """(text, copies): identical texts are identical, so which copy is kept does not matter."""

    def create_accumulator(self):
        return (None, 0)

    def add_input(self, acc, document):
        return (acc[0] if acc[0] is not None else document, acc[1] + 1)

    def merge_accumulators(self, accumulators):
        kept, copies = None, 0
        for document, n in accumulators:
            kept = kept if kept is not None else document
            copies += n
        return (kept, copies)

    def extract_output(self, acc):
        return acc


def _unique_with_stats(keyed):
    key, (document, copies) = keyed
    if copies > 1:
        yield beam.pvalue.TaggedOutput("stats", _count(Counter({"skipped/duplicate_document": copies - 1})))
    yield key, document


class DeduplicateDocuments(beam.PTransform):
    """documents -> (content key, document), exact duplicates removed and counted."""

    def expand(self, docs):
        return (
            docs
            | "KeyByContent" >> beam.Map(lambda d: (content_key(d), d))
            | "KeepOne" >> beam.CombinePerKey(_KeepOneCount())
            | "DropDuplicates" >> beam.FlatMap(_unique_with_stats).with_outputs("stats", main="docs")
        )


# ----------------------------------------------------------------------------------------------
# 3. TrainVocab


class TrainVocab(beam.PTransform):
    """Keyed documents -> one `VocabFile`: a sentencepiece model trained on a seeded sample.

    The sample is the --vocab_sample_sentences sentences with the smallest seeded hash: the same on
    every runner, bounded in memory, and spread over the whole corpus.
    """

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, keyed_docs):
        cfg = self._cfg
        return (
            keyed_docs
            | "Sentences" >> beam.FlatMap(lambda kd: text.document_sentences(kd[1]))
            | "KeyBySeededHash" >> beam.Map(lambda s: (seeded_key(cfg.seed, content_key(s)), s))
            | "Sample" >> beam.combiners.Top.Of(cfg.vocab_sample_sentences, reverse=True)
            | "Train" >> beam.Map(_train_on_sample, cfg)
        )


def _train_on_sample(sample: list[tuple[int, str]], cfg: CorpusConfig) -> VocabFile:
    if not sample:
        raise BadInputError(
            "no text to train a vocab on: every input document was empty or skipped; check --input"
        )
    sentences = [s for _, s in sample]
    model = train_sentencepiece(sentences, vocab_size=cfg.vocab_size, model_type=cfg.vocab_model_type)
    return VocabFile("sentencepiece", model)


def _write_vocab(vocab_file: VocabFile, output_dir: str, trained: bool) -> dict:
    vocab = vocab_file.load()
    _write_atomically(f"{output_dir}/{vocab_file.file_name}", vocab_file.data)
    return vocab.describe(vocab_file.file_name, trained)


# ----------------------------------------------------------------------------------------------
# 4. TokenizeDocuments


class TokenizeDocuments(beam.DoFn):
    """(key, document) -> (split, TokenizedDoc): split into sentences, encoded once."""

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg
        self._loaded = None

    def process(self, keyed_doc, vocab_file):
        if self._loaded is None or self._loaded[0] != vocab_file:
            self._loaded = (vocab_file, vocab_file.load())  # arrives as a side input: load once
        key, document = keyed_doc
        encoded = [ids for ids in self._loaded[1].encode(text.document_sentences(document)) if ids]
        if not encoded:
            yield beam.pvalue.TaggedOutput("stats", _count(Counter({"skipped/no_tokens": 1})))
            return
        lengths = np.array([len(ids) for ids in encoded], np.int32)
        tokens = np.fromiter(itertools.chain.from_iterable(encoded), np.int32, int(lengths.sum()))
        yield split_of(key, self._cfg.validation_fraction), TokenizedDoc(key, tokens, lengths)


# ----------------------------------------------------------------------------------------------
# 5. PlanGroups: how many packing groups and shards each split gets, from its token count.


def make_plan(token_totals: dict, cfg: CorpusConfig) -> dict:
    """Per split: tokens, packing groups, shards. A pure function of the token counts."""
    plan = {}
    for split in schema.SPLITS:
        tokens = int(token_totals.get(split, 0))
        dupes = cfg.dupe_factor if split == "train" else 1
        estimated_instances = dupes * -(-tokens // (cfg.seq_len - 2))
        requested = cfg.num_shards if split == "train" else cfg.num_validation_shards
        shards = requested or max(1, -(-estimated_instances // cfg.records_per_shard))
        plan[split] = {
            "tokens": tokens,
            "groups": max(1, tokens // cfg.group_tokens),
            "shards": shards if tokens else 0,
            "dupes": dupes,
        }
    return plan


# ----------------------------------------------------------------------------------------------
# 6. CreateInstances


class CreateGroupInstances(beam.DoFn):
    """((split, group), docs) -> ((split, shard), part file) per shard, and stats.

    One numpy pass per dupe over the whole group: pack or pair, then mask, then serialize. A seeded
    sort key per record both shuffles globally and picks the shard. Records leave this step in
    sorted part files (one per shard), not through the shuffle: the shuffle then carries file
    names, so no runner holds the records in memory, and each shard is a streaming merge.
    """

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg
        self._loaded = None

    def _tables(self, vocab_file):
        if self._loaded is None or self._loaded[0] != vocab_file:
            vocab = vocab_file.load()
            ids = SpecialIds(
                pad=vocab.special_ids["pad"],
                cls=vocab.special_ids["cls"],
                sep=vocab.special_ids["sep"],
            )
            self._loaded = (vocab_file, MaskingTables.from_vocab(vocab), ids)
        return self._loaded[1], self._loaded[2]

    def process(self, grouped, vocab_file, plan):
        cfg = self._cfg
        (split, group), docs = grouped
        docs = sorted(docs, key=lambda d: d.key)  # arrival order must not matter
        tables, ids = self._tables(vocab_file)
        split_plan = plan[split]
        stats = Counter({f"{split}/documents": len(docs)})
        by_shard: dict[int, list] = {}
        split_index = schema.SPLITS.index(split)
        for dupe in range(split_plan["dupes"]):
            rng = np.random.default_rng([cfg.seed, split_index, group, dupe])
            rows = create_instances(docs, cfg=cfg, tables=tables, ids=ids, rng=rng)
            n = len(rows["input_ids"])
            sort_keys = rng.integers(0, 2**63, size=n, dtype=np.int64).tolist()
            records = schema.serialize_examples(rows, cfg.seq_len, cfg.max_predictions)
            for sort_key, record in zip(sort_keys, records, strict=True):
                by_shard.setdefault(sort_key % split_plan["shards"], []).append((sort_key, record))
            real = int(rows["input_mask"].sum())
            stats[f"{split}/instances"] += n
            stats[f"{split}/real_tokens"] += real
            stats[f"{split}/padding_tokens"] += n * cfg.seq_len - real
            stats[f"{split}/masked_tokens"] += int(rows["masked_lm_weights"].sum())
            stats[f"{split}/next_sentence_label_1"] += int(rows["next_sentence_labels"].sum())
        for shard, records in sorted(by_shard.items()):
            path = f"{cfg.output_dir}/{TMP_DIR}/parts/{split}-{shard:05d}-g{group:05d}.npz"
            write_part(path, sorted(records))  # rewritten identically if the bundle is retried
            yield (split, shard), path
        yield beam.pvalue.TaggedOutput("stats", _count(stats))


def write_part(path: str, keyed_records: list[tuple[int, bytes]]) -> None:
    """A part file (.npz): the records' sort keys, their end offsets, and their bytes."""
    import tensorflow as tf

    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    keys = np.array([k for k, _ in keyed_records], np.int64)
    ends = np.cumsum([len(r) for _, r in keyed_records], dtype=np.int64)
    blob = np.frombuffer(b"".join(r for _, r in keyed_records), np.uint8)
    buffer = io.BytesIO()  # zipfile wants a seekable file; GFile on gs:// is write-only
    np.savez(buffer, keys=keys, ends=ends, blob=blob)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(buffer.getvalue())


def read_part(path: str) -> tuple[np.ndarray, np.ndarray, bytes]:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    with np.load(io.BytesIO(data)) as part:
        return part["keys"], part["ends"], part["blob"].tobytes()


def _group_of(split_doc, plan):
    split, doc = split_doc
    return (split, doc.key % plan[split]["groups"]), doc


class CreateInstances(beam.PTransform):
    """(split, TokenizedDoc) -> ((split, shard), part file) for every part, and stats."""

    def __init__(self, cfg: CorpusConfig, model_bytes, plan):
        super().__init__()
        self._cfg = cfg
        self._model_bytes = model_bytes
        self._plan = plan

    def expand(self, docs):
        instances = (
            docs
            | "AssignGroups" >> beam.Map(_group_of, plan=self._plan)
            | "GroupDocuments" >> beam.GroupByKey()
            | "PackAndMask"
            >> beam.ParDo(CreateGroupInstances(self._cfg), self._model_bytes, self._plan).with_outputs(
                "stats", main="records"
            )
        )
        return instances


# ----------------------------------------------------------------------------------------------
# 7. WriteShards


def shard_name(split: str, shard: int, num_shards: int) -> str:
    return f"{split}-{shard:05d}-of-{num_shards:05d}.tfrecord"


def _write_atomically(path: str, data: bytes) -> None:
    import tensorflow as tf

    tmp = f"{path}.tmp"
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    with tf.io.gfile.GFile(tmp, "wb") as f:
        f.write(data)
    tf.io.gfile.rename(tmp, path, overwrite=True)


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
        import tensorflow as tf

        (split, shard), paths = keyed
        part_paths = sorted({p for p in paths if p is not None})  # None: a seed for an empty shard
        parts = [read_part(p) for p in part_paths]
        name = shard_name(split, shard, plan[split]["shards"])
        tmp = f"{self._output_dir}/{TMP_DIR}/{name}"
        tf.io.gfile.makedirs(f"{self._output_dir}/{TMP_DIR}")
        order = sorted(
            (key, p, int(ends[i - 1]) if i else 0, int(ends[i]))
            for p, (keys, ends, _) in enumerate(parts)
            for i, key in enumerate(keys.tolist())
        )
        with tf.io.TFRecordWriter(tmp) as writer:
            for _, p, start, end in order:
                writer.write(parts[p][2][start:end])
        size = tf.io.gfile.stat(tmp).length  # the reader compares it: a truncated copy is caught early
        tf.io.gfile.rename(tmp, f"{self._output_dir}/{name}", overwrite=True)
        for path in part_paths:
            tf.io.gfile.remove(path)
        Metrics.counter("bertbeam", "shards_written").inc()
        log.info("wrote %s (%d records from %d parts)", name, len(order), len(parts))
        yield {"split": split, "file": name, "records": len(order), "bytes": size}


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


# ----------------------------------------------------------------------------------------------
# 8. WriteManifest


def build_manifest(cfg: CorpusConfig, shards: list[dict], stats: dict, vocab_info: dict, plan: dict) -> dict:
    splits = {}
    for split in schema.SPLITS:
        instances = stats.get(f"{split}/instances", 0)
        padding = stats.get(f"{split}/padding_tokens", 0)
        splits[split] = {
            "documents": stats.get(f"{split}/documents", 0),
            "instances": instances,
            "real_tokens": stats.get(f"{split}/real_tokens", 0),
            "masked_tokens": stats.get(f"{split}/masked_tokens", 0),
            "padding_fraction": round(padding / (instances * cfg.seq_len), 6) if instances else 0.0,
            "next_sentence_label_1": stats.get(f"{split}/next_sentence_label_1", 0),
            "dupe_factor": plan[split]["dupes"],
            "packing_groups": plan[split]["groups"],
            "shards": sorted(
                ({k: s[k] for k in ("file", "records", "bytes")} for s in shards if s["split"] == split),
                key=lambda s: s["file"],
            ),
        }
    by_prefix = lambda prefix: {  # noqa: E731
        k.split("/", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith(prefix + "/")
    }
    return {
        "schema_version": schema.SCHEMA_VERSION,
        "features": schema.features_for_manifest(cfg.seq_len, cfg.max_predictions),
        # Where the corpus lives is not a property of it: a moved or copied corpus stays valid.
        "build": {k: v for k, v in cfg.to_json_dict().items() if k != "output_dir"},
        "vocab": vocab_info,
        "input": {
            **by_prefix("input"),
            "skipped": by_prefix("skipped"),
            "repaired": by_prefix("repaired"),
        },
        "splits": splits,
    }


def _finalize(shards, cfg, stats, vocab_info, plan):
    import tensorflow as tf

    manifest = build_manifest(cfg, shards, stats, vocab_info, plan)
    current = {s["file"] for s in shards}
    for split in schema.SPLITS:  # shards of an earlier build with other shard counts
        for path in tf.io.gfile.glob(f"{cfg.output_dir}/{split}-*-of-*.tfrecord"):
            if path.rsplit("/", 1)[-1] not in current:
                tf.io.gfile.remove(path)
    for name in set(KINDS.values()) - {vocab_info["file"]}:  # an earlier build's other vocab kind
        if tf.io.gfile.exists(f"{cfg.output_dir}/{name}"):
            tf.io.gfile.remove(f"{cfg.output_dir}/{name}")
    if tf.io.gfile.exists(f"{cfg.output_dir}/{TMP_DIR}"):
        tf.io.gfile.rmtree(f"{cfg.output_dir}/{TMP_DIR}")
    body = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _write_atomically(f"{cfg.output_dir}/{schema.MANIFEST_NAME}", body.encode())
    yield manifest


# ----------------------------------------------------------------------------------------------
# The pipeline


def build_pipeline(p: beam.Pipeline, cfg: CorpusConfig, given_vocab: VocabFile | None):
    read = p | "ReadDocuments" >> ReadDocuments(cfg)
    unique = read.docs | "DeduplicateDocuments" >> DeduplicateDocuments()

    if given_vocab is None:
        vocab = unique.docs | "TrainVocab" >> TrainVocab(cfg)
    else:
        vocab = p | "GivenVocab" >> beam.Create([given_vocab])
    vocab_si = beam.pvalue.AsSingleton(vocab)
    vocab_info = vocab | "WriteVocab" >> beam.Map(_write_vocab, cfg.output_dir, given_vocab is None)

    tokenized = unique.docs | "TokenizeDocuments" >> beam.ParDo(
        TokenizeDocuments(cfg), vocab_si
    ).with_outputs("stats", main="docs")
    plan = (
        tokenized.docs
        | "TokensPerDoc" >> beam.Map(lambda sd: (sd[0], len(sd[1].tokens)))
        | "SumTokens" >> beam.CombinePerKey(sum)
        | "TokensBySplit" >> beam.combiners.ToDict()
        | "PlanGroups" >> beam.Map(make_plan, cfg)
    )
    plan_si = beam.pvalue.AsSingleton(plan)

    instances = tokenized.docs | "CreateInstances" >> CreateInstances(cfg, vocab_si, plan_si)
    shards = instances.records | "WriteShards" >> WriteShards(cfg.output_dir, plan_si)

    stats = (
        (read.stats, unique.stats, tokenized.stats, instances.stats)
        | "AllStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(SumCounters())
    )
    return (
        shards
        | "CollectShards" >> beam.combiners.ToList()
        | "WriteManifest"
        >> beam.FlatMap(
            _finalize,
            cfg=cfg,
            stats=beam.pvalue.AsSingleton(stats),
            vocab_info=beam.pvalue.AsSingleton(vocab_info),
            plan=plan_si,
        )
    )


# ----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    fields = {f.name: f for f in dataclasses.fields(CorpusConfig)}
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.build_corpus",
        description="Build sharded masked-LM TFRecords from raw text. Unknown flags go to Beam.",
    )
    parser.add_argument("--input", default="", help="GLOB[,GLOB...] of input files (local or gs://)")
    parser.add_argument("--output", required=True, help="output folder (local or gs://)")
    parser.add_argument("--nsp", action="store_true", help="segment_pair: next-sentence prediction")
    parser.add_argument("--sop", action="store_true", help="segment_pair: sentence-order prediction")
    for name, f in fields.items():
        if name in ("input_patterns", "output_dir", "pair_task"):
            continue
        default = f.default
        if isinstance(default, bool):
            parser.add_argument(f"--{name}", action="store_true", help=f"(default {default})")
        elif name == "vocab_size" or isinstance(default, int):
            parser.add_argument(f"--{name}", type=int, default=default)
        elif isinstance(default, float):
            parser.add_argument(f"--{name}", type=float, default=default)
        else:
            parser.add_argument(f"--{name}", default=default)
    return parser


def parse_args(argv: list[str]) -> tuple[CorpusConfig, list[str]]:
    args, beam_args = _parser().parse_known_args(argv)
    if args.nsp and args.sop:
        raise ValueError("give at most one of --nsp and --sop")
    values = {k: v for k, v in vars(args).items() if k not in ("input", "output", "nsp", "sop")}
    cfg = CorpusConfig(
        input_patterns=tuple(p for p in args.input.split(",") if p),
        output_dir=args.output.rstrip("/"),
        pair_task="nsp" if args.nsp else "sop" if args.sop else None,
        **values,
    )
    return cfg, beam_args


def _check_inputs(cfg: CorpusConfig) -> None:
    if cfg.format == "tfds":
        return
    for pattern in cfg.input_patterns:
        matched = FileSystems.match([pattern])[0].metadata_list
        if not matched:
            raise BadInputError(f"--input {pattern}: no files match")


def _load_vocab(cfg: CorpusConfig) -> VocabFile | None:
    """The given --vocab, checked before the pipeline starts: a sentencepiece .model, or Google
    BERT's WordPiece vocab.txt."""
    if cfg.vocab is None:
        return None
    kind = kind_of(cfg.vocab)
    try:
        with FileSystems.open(cfg.vocab, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            vocab_file = VocabFile(kind, f.read(), cfg.do_lower_case)
        vocab_file.load()
    except (OSError, RuntimeError) as e:
        raise VocabError(f"--vocab {cfg.vocab}: not a readable {kind} vocab ({e})") from None
    except VocabError as e:
        raise VocabError(f"--vocab {cfg.vocab}: {e}") from None
    return vocab_file


def run(argv: list[str] | None = None, save_main_session: bool = False):
    """Build the corpus; returns the Beam PipelineResult."""
    cfg, beam_args = parse_args(sys.argv[1:] if argv is None else argv)
    options = PipelineOptions(beam_args, save_main_session=save_main_session)
    standard = options.view_as(StandardOptions)
    if standard.runner in (None, "DirectRunner"):
        # Beam 2.77's DirectRunner first tries Prism, a Go binary it downloads from GitHub at run
        # time, and falls back to the in-process FnApiRunner where that fails (offline, say). Ask
        # for the FnApiRunner directly: the same, tested engine on every machine, no download,
        # and --direct_num_workers / --direct_running_mode honoured.
        standard.runner = "FnApiRunner"
    if options.view_as(DirectOptions).direct_running_mode == "multi_threading":
        # Seen with Beam 2.77: this mode's GroupByKey dropped elements (3 of 497 documents in one
        # run, a different number the next), so it cannot give the counts a manifest promises.
        raise ValueError(
            "--direct_running_mode multi_threading loses elements in Beam's DirectRunner; "
            "use in_memory (default) or multi_processing"
        )
    log.info("corpus config: %s", json.dumps(cfg.to_json_dict(), sort_keys=True))
    given_vocab = _load_vocab(cfg)
    dry_run = bool(options.get_all_options().get("dry_run"))
    if not dry_run:
        _check_inputs(cfg)
        _remove_stale_manifest(cfg.output_dir)
    p = beam.Pipeline(options=options)
    build_pipeline(p, cfg, given_vocab)
    result = p.run()
    if not dry_run:
        result.wait_until_finish()
    return result


def _remove_stale_manifest(output_dir: str) -> None:
    """A manifest marks a complete build; drop an old one before shards start changing."""
    import tensorflow as tf

    path = f"{output_dir}/{schema.MANIFEST_NAME}"
    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


def _error_line(error: BaseException) -> str | None:
    """Our one-line message from an exception, also when Beam wrapped it in a stage trace."""
    for candidate in (error, error.__cause__, error.__context__):
        if isinstance(candidate, BadInputError | VocabError | ValueError):
            message = str(candidate).strip().splitlines()
            # Beam appends the stage: " [while running 'ReadDocuments/...']"; the file is the news.
            return re.sub(r" \[while running '[^']*'\]$", "", message[0]) if message else None
    return None


def summary(manifest: dict, output_dir: str) -> str:
    """What a finished build made and where, for the console."""
    lines = [f"corpus written to {output_dir} (manifest.json, {manifest['vocab']['file']})"]
    for split, info in manifest["splits"].items():
        lines.append(
            f"  {split}: {info['instances']:,} instances in {len(info['shards'])} shards from "
            f"{info['documents']:,} documents, padding {info['padding_fraction']:.2%}"
        )
    skipped = ", ".join(f"{k} {v}" for k, v in manifest["input"]["skipped"].items()) or "none"
    repaired = ", ".join(f"{k} {v}" for k, v in manifest["input"]["repaired"].items()) or "none"
    lines.append(f"  skipped: {skipped}; repaired: {repaired}")
    if not any(info["instances"] for info in manifest["splits"].values()):
        lines.append("warning: no instances were written: every input document was empty or skipped")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    try:
        run(argv)
        cfg, beam_args = parse_args(argv)
        if not PipelineOptions(beam_args).get_all_options().get("dry_run"):
            print(summary(schema.read_manifest(cfg.output_dir), cfg.output_dir))
    except Exception as e:  # noqa: BLE001 - the user gets one line; the trace is in the log
        line = _error_line(e)
        if line is None:
            raise
        log.debug("trace", exc_info=True)
        print(f"error: {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
