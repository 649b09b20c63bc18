"""ReadDocuments: files (or a tfds split) -> normalised documents, or content keys and
where each document is, (file, index); RereadDocuments reads the text of the ones kept again."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import logging
import os
import zlib
from collections import Counter
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline import text
from pipeline.config import CorpusConfig
from pipeline.keys import content_key
from pipeline.runners.options import is_dry_run
from pipeline.stages import progress as _progress
from pipeline.stages.stats import BadInputError, count_stats

log = logging.getLogger("bertbeam.corpus")


def batch_documents(min_chars: int, max_chars: int = 1 << 20) -> beam.BatchElements:
    """(key, text) -> lists of them, sized in characters: Beam chooses each batch's size by timing,
    within [min_chars, max_chars], so memory per batch stays bounded however long the documents
    are. What a stage computes per document never depends on its batch, only how fast it runs."""
    return beam.BatchElements(
        min_batch_size=min_chars, max_batch_size=max_chars, element_size_fn=lambda keyed: len(keyed[1])
    )


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


class Pointer(NamedTuple):
    """Where a document is, and what batching it needs (`groups.BatchDocuments`)."""

    file_key: int  # the content key of its file's first document: the file's identity
    path: str
    index: int  # documents before it in the file
    chars: int  # its characters


class ReadFileDocuments(beam.DoFn):
    """A file -> its normalised documents, streamed line by line; a "stats" output per file.
    Progress: bytes read (of `total_bytes`, all files' sizes from the glob) and documents.

    `pointers`: each document as (content key, `Pointer`) instead of its text, so that
    deduplication holds keys, not the corpus; `RereadDocuments` reads the text again."""

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
        documents, file_key = 0, None
        try:
            for document in self._documents(path, stats):
                if not self._pointers:
                    yield document
                else:
                    key = content_key(document)
                    file_key = key if file_key is None else file_key
                    yield key, Pointer(file_key, path, documents, len(document))
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
        log.debug("read %s: %d documents", path, documents)  # progress lines: stages/progress.py
        yield beam.pvalue.TaggedOutput("stats", count_stats(stats))


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
        yield beam.pvalue.TaggedOutput("stats", count_stats(stats))


class ReadDocuments(beam.PTransform):
    """Input globs (or a tfds split) -> documents (str), plus per-file stats. `pointers` (files
    only): (content key, `Pointer`) per document instead (`ReadFileDocuments`). `total_bytes`:
    the input's size when the caller globbed it already (progress lines' total); else globbed here."""

    def __init__(self, cfg: CorpusConfig, pointers: bool = False, total_bytes: int | None = None):
        super().__init__()
        self._cfg = cfg
        self._pointers = pointers
        self._total_bytes = total_bytes

    def expand(self, pipeline):
        if self._cfg.format == "tfds":
            return pipeline | "ReadTfds" >> ReadTfdsDocuments(self._cfg)
        # A dry run builds the job and reads nothing: no glob (on gs:// without credentials it
        # retries for two minutes before it gives up).
        total = self._total_bytes
        if total is None and not is_dry_run(pipeline.pipeline.options):
            total = input_bytes(self._cfg.input_patterns)
        read = ReadFileDocuments(self._cfg, total, os.getpid(), pointers=self._pointers)
        return (
            pipeline
            | "Patterns" >> beam.Create(list(self._cfg.input_patterns))
            | "MatchFiles" >> fileio.MatchAll()
            | "Paths" >> beam.Map(lambda metadata: metadata.path)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(read).with_outputs("stats", main="docs")
        )


def input_bytes(patterns) -> int | None:
    """The input's size, from one glob when the graph is built: progress lines give a share of it
    (MatchFiles globs again inside the pipeline; a file that appears in between is read, and
    the share passes 100 %). None when the glob fails (a Dataflow dry run without credentials)."""
    try:
        return sum(m.size_in_bytes for r in FileSystems.match(list(patterns)) for m in r.metadata_list)
    except Exception:  # progress is a nicety: whatever stops the glob, the build itself reports
        return None
