"""The corpus build's stages, each a small named Beam transform (`build_corpus.py` wires them):

  1 ReadDocuments        files (or a tfds split) -> normalised documents (or keys and where each
                         document is: (file, index)), per-file stats
  2 DeduplicateDocuments documents -> (content key, document or pointer), exact copies counted;
    RereadDocuments      the files again -> (key, text) of the documents kept
  3 TrainVocab           keyed documents -> a sentencepiece VocabFile from a seeded sample
  4 TokenizeDocuments    batches of (key, document) -> (split, TokenizedDoc): sentences split and
                         encoded once, with a segmenter's masking units; spilled to files, a
                         `SpilledDoc` pointer going on
  5 make_plan            token totals -> packing groups and shard counts per split
  6 CreateInstances      (split, TokenizedDoc) -> sorted part files per shard, and stats
  7 WriteShards          part files -> one TFRecord per shard, written under _tmp/ and renamed
  8 write_manifest       shards, stats, vocab, plan -> manifest.json, written last

Stats travel as `Counter`s on a "stats" output and are summed once (`SumCounters`); each is also a
Beam counter in the `bertbeam` namespace, so a Dataflow job shows them as it runs.
"""

from __future__ import annotations

import bz2
import concurrent.futures
import contextlib
import gzip
import itertools
import logging
import os
import time
import zlib
from collections import Counter

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from common.errors import BertbeamError
from pipeline import files, schema, segment, text
from pipeline import progress as _progress
from pipeline.config import CorpusConfig
from pipeline.files import write_atomically
from pipeline.instances import SpecialIds, TokenizedDoc, create_instances
from pipeline.keys import content_key, seeded_key, split_of
from pipeline.masking import MaskingTables
from pipeline.parts import (
    TMP_DIR,
    Spill,
    SpilledDoc,
    part_path,
    read_part,
    read_spilled,
    remove_tmp,
    shard_name,
    tfrecord_framed,
    write_part,
)
from pipeline.tfexample import serialize_examples
from pipeline.vocab import KINDS, VocabFile, train_sentencepiece, train_wordpiece

log = logging.getLogger("bertbeam.corpus")


class BadInputError(BertbeamError):
    """Input that cannot be used; the message is one line naming the file and the cause."""


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
    """(a binary stream of the file's text, decompressed by extension; the raw file under it,
    whose position is the bytes read so far).

    Python's own gzip/bz2 readers, not Beam's CompressedFile, because only they offer
    readline(size), which the bounded line reader needs.
    """
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield f, raw
        elif path.endswith(".bz2"):
            with bz2.BZ2File(raw, mode="rb") as f:
                yield f, raw
        else:
            yield raw, raw


class ReadFileDocuments(beam.DoFn):
    """A file -> its normalised documents, streamed line by line; a "stats" output per file.
    Progress: bytes read (of `total_bytes`, all files' sizes from the glob) and documents.

    `pointers`: each document as (content key, (file, index in the file)) instead of its text,
    so that deduplication holds keys, not the corpus; `RereadDocuments` reads the text again."""

    def __init__(self, cfg: CorpusConfig, total_bytes: int | None = None, launcher_pid: int | None = None,
                 pointers: bool = False):  # fmt: skip
        self._cfg = cfg
        self._total_bytes = total_bytes
        self._launcher_pid = launcher_pid
        self._pointers = pointers

    def _documents(self, path: str, stats: Counter, progress: bool = True):
        with _open_decompressed(path) as (f, _):
            head = f.read(text.SNIFF_BYTES)
        encoding, bom = text.sniff_encoding(head, self._cfg.encoding)
        if text.looks_binary(head[bom:], encoding):
            hint = "" if bom else " (text in another encoding needs --encoding NAME)"
            raise BadInputError(f"{path}: looks binary, not {encoding} text{hint}")
        stats[f"encoding/{encoding}{' with BOM' if bom else ''}"] += 1
        if progress:
            progress = _progress.stage(
                "read", total=self._total_bytes, unit="bytes", launcher_pid=self._launcher_pid
            )
        with _open_decompressed(path) as (f, raw):
            f.read(bom)
            lines = text.read_lines(f, encoding, self._cfg.max_line_bytes, stats)
            if self._cfg.format == "jsonl":
                documents = text.jsonl_documents(
                    lines,
                    text_field=self._cfg.text_field,
                    max_document_chars=self._cfg.max_document_chars,
                    stats=stats,
                )
            else:
                documents = text.text_documents(
                    lines,
                    doc_per_file=self._cfg.doc_per_file,
                    max_document_chars=self._cfg.max_document_chars,
                    stats=stats,
                )
            if not progress:
                yield from documents
                return
            counted = 0
            for document in documents:
                position = raw.tell()
                progress.add(position - counted, documents=1)
                counted = position
                yield document
            progress.add(raw.tell() - counted)

    def process(self, path: str):
        stats = Counter({"input/files": 1})
        documents = 0
        try:
            for document in self._documents(path, stats):
                yield (content_key(document), (path, documents)) if self._pointers else document
                documents += 1
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
        log.debug("read %s: %d documents", path, documents)  # progress lines: pipeline/progress.py
        yield beam.pvalue.TaggedOutput("stats", _count(stats))


class RereadDocuments(ReadFileDocuments):
    """(file, [(index, content key), ...]) -> (key, document) for those documents of the file,
    read again the same way (stats and progress were counted on the first read). A document
    whose key differs is a file that changed while the build ran."""

    def process(self, grouped):
        path, wanted = grouped
        keys = dict(wanted)
        found = 0
        try:
            for index, document in enumerate(self._documents(path, Counter(), progress=False)):
                if index in keys:
                    if content_key(document) != keys[index]:
                        break
                    yield keys[index], document
                    found += 1
                    if found == len(keys):
                        return
        except (OSError, EOFError, zlib.error, BadInputError):
            pass
        raise BadInputError(f"{path}: changed while the build ran (read twice); run it again")


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
                _progress.stage("read", unit="documents").add(1)
                yield document
        yield beam.pvalue.TaggedOutput("stats", _count(stats))


class ReadDocuments(beam.PTransform):
    """Input globs (or a tfds split) -> documents (str), plus per-file stats. `pointers` (files
    only): (content key, (file, index)) per document instead (`ReadFileDocuments`)."""

    def __init__(self, cfg: CorpusConfig, pointers: bool = False):
        super().__init__()
        self._cfg = cfg
        self._pointers = pointers

    def expand(self, pipeline):
        if self._cfg.format == "tfds":
            return pipeline | "ReadTfds" >> ReadTfdsDocuments(self._cfg)
        total = _input_bytes(self._cfg.input_patterns)
        read = ReadFileDocuments(self._cfg, total, os.getpid(), pointers=self._pointers)
        return (
            pipeline
            | "Patterns" >> beam.Create(list(self._cfg.input_patterns))
            | "MatchFiles" >> fileio.MatchAll()
            | "Paths" >> beam.Map(lambda metadata: metadata.path)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(read).with_outputs("stats", main="docs")
        )


def _input_bytes(patterns) -> int | None:
    """The input's size, from one glob when the graph is built: progress lines give a share of it
    (MatchFiles globs again inside the pipeline; a file that appears in between is read, and
    the share passes 100 %). None when the glob fails (a Dataflow dry run without credentials)."""
    try:
        return sum(m.size_in_bytes for r in FileSystems.match(list(patterns)) for m in r.metadata_list)
    except Exception:  # progress is a nicety: whatever stops the glob, the build itself reports
        return None


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


# ----------------------------------------------------------------------------------------------
# 3. TrainVocab


class TrainVocab(beam.PTransform):
    """Keyed documents -> one `VocabFile`: a sentencepiece model or a WordPiece vocab.txt trained
    on a seeded sample.

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
    # One library call, no progress inside it: say what it is doing, and how long it took.
    kind = "WordPiece" if cfg.vocab_model_type == "wordpiece" else f"sentencepiece {cfg.vocab_model_type}"
    log.info("training a %s vocab of %d on %s sampled sentences", kind, cfg.vocab_size, f"{len(sentences):,}")
    started = time.monotonic()
    if cfg.vocab_model_type == "wordpiece":
        data = train_wordpiece(sentences, vocab_size=cfg.vocab_size, lower_case=cfg.do_lower_case)
        vocab_file = VocabFile("wordpiece", data, cfg.do_lower_case)
    else:
        model = train_sentencepiece(sentences, vocab_size=cfg.vocab_size, model_type=cfg.vocab_model_type)
        vocab_file = VocabFile("sentencepiece", model)
    log.info("trained the vocab in %.1f s", time.monotonic() - started)
    return vocab_file


def write_vocab(vocab_file: VocabFile, output_dir: str, trained: bool) -> schema.VocabInfo:
    vocab = vocab_file.load()
    write_atomically(f"{output_dir}/{vocab_file.file_name}", vocab_file.data)
    return vocab.describe(vocab_file.file_name, trained)


# ----------------------------------------------------------------------------------------------
# 4. TokenizeDocuments


class TokenizeDocuments(beam.DoFn):
    """A batch of (key, document) -> (split, TokenizedDoc) per document: split into sentences,
    encoded once; with a word segmenter, each token also gets its "begins a masking unit" flag.

    Batches (`BatchDocuments` before it: up to 1 Mi characters), because one tokenizer call and
    one segmenter loop per batch, rather than per document, cut the segmented build's tokenizing
    time by a sixth on the Chinese reviews (the two libraries stop evicting each other's tables from the
    cache between every document). A document's result does not depend on its batch.
    """

    def __init__(self, cfg: CorpusConfig, segmenter: dict | None = None, spill_to: str | None = None):
        self._cfg = cfg
        self._segmenter_info = segmenter or {}  # segment.describe's record, checked against what loads
        self._launcher_pid = os.getpid()  # progress: a worker elsewhere names itself
        self._spill_to = spill_to  # a folder: documents go to spill files, SpilledDoc pointers on
        self._spill = None
        self._loaded = None
        self._segment = None

    def finish_bundle(self):
        if self._spill is not None:
            self._spill.close()  # before any pointer of this bundle is read
            self._spill = None

    def setup(self):
        # tokenizers' own thread pool (encode_batch) on every core, or not: read by tokenizers at
        # each call, the bytes are the same either way. Beam workers in processes of their own
        # (multi_processing, Dataflow) are one per core already, and there the pool only competes
        # with the other workers and with the segmenter: measured on 2 cores, the Chinese reviews
        # tokenized 1.4x faster without it. The in-process runner (in_memory, the default) is one
        # worker, and the pool encodes WordPiece 1.6x faster on 2 cores (bench/corpus.py --corpora
        # google). A segmenter is pure Python and holds the GIL: no pool then either.
        in_process = os.getpid() == self._launcher_pid
        pool = in_process and self._cfg.word_segmenter == "none"
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if pool else "false"
        cfg = self._cfg
        dictionary = segment.read_dictionary(cfg.segmenter_dict)
        if segment.describe(cfg.word_segmenter, dictionary) != self._segmenter_info:
            raise BadInputError(
                f"--segmenter_dict {cfg.segmenter_dict}: changed while the build ran; run it again"
            )
        self._segment = segment.load(cfg.word_segmenter, dictionary, cfg.segmenter_dict or "")

    def process(self, batch, vocab_file):
        if self._loaded is None or self._loaded[0] != vocab_file:
            self._loaded = (vocab_file, vocab_file.load())  # arrives as a side input: load once
        vocab = self._loaded[1]
        documents = [text.document_sentences(document) for _, document in batch]
        sentences = [sentence for document in documents for sentence in document]
        if self._segment is None:
            encoded, starts = vocab.encode(sentences), None
        else:
            encoded, starts = self._encode_units(sentences, vocab)
        skipped, sentence_at, token_at = 0, 0, 0
        for (key, _), document in zip(batch, documents, strict=True):
            ids = [e for e in encoded[sentence_at : sentence_at + len(document)] if e]
            sentence_at += len(document)
            if not ids:
                skipped += 1
                continue
            lengths = np.array([len(e) for e in ids], np.int32)
            n = int(lengths.sum())
            tokens = np.fromiter(itertools.chain.from_iterable(ids), np.int32, n)
            units = None if starts is None else starts[token_at : token_at + n]
            token_at += n
            doc = TokenizedDoc(key, tokens, lengths, units)
            if self._spill_to is not None:
                self._spill = self._spill or Spill(self._spill_to)
                doc = self._spill.write(doc)
            yield split_of(key, self._cfg.validation_fraction), doc
        progress = _progress.stage("tokenized", unit="documents", launcher_pid=self._launcher_pid)
        progress.add(len(batch), tokens=token_at)
        if skipped:
            yield beam.pvalue.TaggedOutput("stats", _count(Counter({"skipped/no_tokens": skipped})))

    def _encode_units(self, sentences: list[str], vocab) -> tuple[list[list[int]], np.ndarray]:
        """The sentences' ids, and each token's "begins a unit" flag (all sentences back to back),
        from the segmenter's words and the tokens' character spans: one numpy pass per batch.
        Words are numbered across the batch, so every sentence's first token begins a unit."""
        encoded, spans, offsets, offset = [], [], [], 0
        for sentence, (ids, sentence_spans) in zip(
            sentences, vocab.encode_with_spans(sentences), strict=True
        ):
            encoded.append(ids)
            spans.append(sentence_spans)
            offsets.append(offset)
            offset += len(sentence)
        counts = [len(ids) for ids in encoded]
        flat = itertools.chain.from_iterable(itertools.chain.from_iterable(spans))
        spans = np.fromiter(flat, np.int64, 2 * sum(counts)).reshape(-1, 2)
        spans += np.repeat(np.array(offsets, np.int64), counts)[:, None]  # offsets in the batch's text
        owner = segment.char_words(sentences, [self._segment(s) for s in sentences])
        return encoded, segment.unit_starts(owner, spans)


# ----------------------------------------------------------------------------------------------
# 5. PlanGroups: how many packing groups and shards each split gets, from its token count.


class PlanGroups(beam.PTransform):
    """(split, TokenizedDoc) -> one plan: the tokens per split decide groups and shard counts."""

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, docs):
        return (
            docs
            | "TokensPerDoc" >> beam.Map(lambda sd: (sd[0], sd[1].n_tokens))
            | "SumTokens" >> beam.CombinePerKey(sum)
            | "TokensBySplit" >> beam.combiners.ToDict()
            | "Plan" >> beam.Map(make_plan, self._cfg)
        )


def estimate_instances(tokens: int, dupes: int, seq_len: int) -> int:
    """Rows a split's tokens make if every row is full: a lower bound, close for packed rows."""
    return dupes * -(-tokens // (seq_len - 2))


def make_plan(token_totals: dict, cfg: CorpusConfig) -> dict:
    """Per split: tokens, packing groups, shards. A pure function of the token counts."""
    plan = {}
    for split in schema.SPLITS:
        tokens = int(token_totals.get(split, 0))
        dupes = cfg.dupe_factor if split == "train" else 1
        estimated_instances = estimate_instances(tokens, dupes, cfg.seq_len)
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
        by_shard: dict[int, list] = {}
        seed = [cfg.seed, schema.SPLITS.index(split), group]

        def one_dupe(dupe: int):  # (sort keys, framed records, rows) of one dupe: its own rng
            rng = np.random.default_rng([*seed, dupe])
            rows = create_instances(docs, cfg=cfg, tables=tables, ids=ids, rng=rng)
            sort_keys = rng.integers(0, 2**63, size=len(rows["input_ids"]), dtype=np.int64).tolist()
            records = serialize_examples(rows, cfg.seq_len, cfg.max_predictions)
            return sort_keys, [tfrecord_framed(record) for record in records], rows

        # The in-process runner is one worker: its idle core takes every other dupe. About half of
        # a dupe's time is numpy (masking, varints, gathers), which runs beside the other thread's
        # Python. A worker in a process of its own (multi_processing, Dataflow) has no idle core.
        threads = min(split_plan["dupes"], os.cpu_count() or 1) if os.getpid() == self._launcher_pid else 1
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for sort_keys, records, rows in pool.map(one_dupe, range(split_plan["dupes"])):
                for sort_key, record in zip(sort_keys, records, strict=True):
                    by_shard.setdefault(sort_key % split_plan["shards"], []).append((sort_key, record))
                n, real = len(records), int(rows["input_mask"].sum())
                stats[f"{split}/instances"] += n
                stats[f"{split}/real_tokens"] += real
                stats[f"{split}/padding_tokens"] += n * cfg.seq_len - real
                stats[f"{split}/masked_tokens"] += int(rows["masked_lm_weights"].sum())
                stats[f"{split}/next_sentence_label_1"] += int(rows["next_sentence_labels"].sum())
                self._progress(plan).add(n)
        for shard, records in sorted(by_shard.items()):
            path = part_path(cfg.output_dir, split, shard, group)
            write_part(path, sorted(records))  # rewritten identically if the bundle is retried
            yield (split, shard), path
        yield beam.pvalue.TaggedOutput("stats", _count(stats))


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


# ----------------------------------------------------------------------------------------------
# 7. WriteShards


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
        parts = [read_part(p) for p in part_paths]
        name = shard_name(split, shard, plan[split]["shards"])
        tmp = f"{self._output_dir}/{TMP_DIR}/{name}"
        blob = b"".join(part_blob for _, _, part_blob in parts)
        at = np.cumsum([0] + [len(part_blob) for _, _, part_blob in parts])  # each part's place in it
        none = [np.zeros(0, np.int64)]
        keys = np.concatenate(none + [part_keys for part_keys, _, _ in parts])
        ends = np.concatenate(none + [part_ends + at[p] for p, (_, part_ends, _) in enumerate(parts)])
        sizes = np.concatenate(none + [np.diff(part_ends, prepend=0) for _, part_ends, _ in parts])
        order = np.argsort(keys, kind="stable")  # ties: part order, then file order
        ranges = zip((ends - sizes)[order].tolist(), ends[order].tolist(), strict=True)
        data = b"".join(blob[start:end] for start, end in ranges)  # framed records, by key
        with files.create_file(tmp) as f:
            f.write(data)
        files.rename(tmp, f"{self._output_dir}/{name}")
        for path in part_paths:
            files.remove(path)
        Metrics.counter("bertbeam", "shards_written").inc()
        log.info("wrote %s (%d records from %d parts)", name, len(keys), len(parts))
        yield {"split": split, "file": name, "records": len(keys), "bytes": len(data)}


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


class WriteManifest(beam.PTransform):
    """Shard descriptions -> manifest.json, once every shard is written (side inputs: the summed
    stats, the vocab's VocabInfo, the plan)."""

    def __init__(self, cfg: CorpusConfig, stats, vocab_info, plan, segmenter: dict):
        super().__init__()
        self._cfg = cfg
        self._segmenter = segmenter
        self._inputs = {"stats": stats, "vocab_info": vocab_info, "plan": plan}

    def expand(self, shards):
        return (
            shards
            | "CollectShards" >> beam.combiners.ToList()
            | "Write"
            >> beam.FlatMap(write_manifest, cfg=self._cfg, segmenter=self._segmenter, **self._inputs)
        )


def write_manifest(shards, cfg, stats, vocab_info, plan, segmenter):
    """Removes what an earlier build left that this one did not write (shards with other counts,
    the other vocab kind, _tmp/), then writes manifest.json: last, so a folder with a manifest is
    a complete build."""
    manifest = schema.build_manifest(cfg, shards, stats, vocab_info, plan, segmenter)
    current = {s["file"] for s in shards}
    for split in schema.SPLITS:
        for path in files.glob(f"{cfg.output_dir}/{split}-*-of-*.tfrecord"):
            if path.rsplit("/", 1)[-1] not in current:
                files.remove(path)
    for name in set(KINDS.values()) - {vocab_info.file}:
        if files.exists(f"{cfg.output_dir}/{name}"):
            files.remove(f"{cfg.output_dir}/{name}")
    remove_tmp(cfg.output_dir)
    write_atomically(f"{cfg.output_dir}/{schema.MANIFEST_NAME}", manifest.to_json())
    yield manifest
