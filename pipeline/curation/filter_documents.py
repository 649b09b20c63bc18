"""FilterDocuments: batches of (key, text) -> the documents kept, and a `Removal` for each one
removed: first by language (`language.py`: not one of --languages, or too little of it), then by
the first quality rule it fails (`quality.py`); counts per stage and rule, and the documents kept
per language, on a "stats" output.

Where the work runs. The in-memory runner runs every curation stage on one core, and the rules
hold the GIL (small numpy calls and Python; two threads over them were slower than one):
- by default, in the build's process, each batch's languages identified on a thread of their
  own ahead of the rules (CLD2 releases the GIL, so the second core does its share, about a
  fifth of the stages' time on English text);
- with `--filter_processes N`, each batch cut into N parts of about equal characters for N
  spawned processes that decide both, while the build's process reads and signs the next
  batches; a batch's outputs leave in order once its answers are in. The rules then use every
  core (docs/benchmarks/curation.md weighs the two ways). A daemonic worker (Dask's, under its
  nanny) may not start processes: it decides in itself, as by default.
Each document's decision is its own, whatever its batch or process (`rules.py`)."""

from __future__ import annotations

import collections
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline import files
from pipeline.config import CorpusConfig
from pipeline.curation import language, quality
from pipeline.curation.removal import Removal
from pipeline.curation.rules import Rules
from pipeline.stages import progress as _progress
from pipeline.stages.stats import count_stats

log = logging.getLogger("bertbeam.corpus")


class FilterDocuments(beam.DoFn):
    """A batch of (key, text) -> main output: (key, text) of the documents every rule keeps;
    "removed": (key, Removal); "stats": documents and bytes removed, per stage and per rule."""

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg

    def setup(self):
        cfg = self._cfg
        thresholds = quality.Thresholds.parse(cfg.quality_thresholds, files.read_file)
        self._rules = Rules(cfg.languages, cfg.min_language_score, cfg.quality_filters, thresholds)
        self._identifier, self._pool = None, None
        self._processes = cfg.filter_processes
        if self._processes and multiprocessing.current_process().daemon:  # a Dask worker, say
            log.warning(
                "--filter_processes %d: this worker is a daemonic process, which may not start "
                "processes; the rules run in it",
                self._processes,
            )
            self._processes = 0
        if self._processes:  # spawned: the build's process holds threads that fork would copy
            spawn = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self._processes, mp_context=spawn)
        elif cfg.languages:
            self._identifier = ThreadPoolExecutor(1, thread_name_prefix="cld2")

    def teardown(self):
        for executor in (self._identifier, self._pool):
            if executor is not None:
                executor.shutdown()

    def start_bundle(self):
        self._waiting = collections.deque()  # with workers: (batch, its parts' futures), oldest first

    def process(self, batch):
        _progress.stage("filters", unit="documents").add(len(batch))
        texts = [text for _, text in batch]
        if self._pool is None:
            yield from self._outputs(batch, self._decisions(texts))
            return
        # Batches wait in the workers while this process reads and signs the next ones; a batch's
        # outputs leave when its answers are in, at the latest once a batch per worker waits.
        self._waiting.append((batch, self._submit(texts)))
        while self._waiting and (
            len(self._waiting) > self._processes or all(f.done() for f in self._waiting[0][1])
        ):
            yield from self._answered()

    def finish_bundle(self):
        while self._waiting:  # a batch pipeline's one window: what finish_bundle emits must name it
            for output in self._answered():
                if isinstance(output, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
                else:
                    yield GlobalWindows.windowed_value(output)

    def _answered(self):
        batch, parts = self._waiting.popleft()
        return self._outputs(batch, [decision for part in parts for decision in part.result()])

    def _outputs(self, batch, decisions):
        stats = collections.Counter()
        for (key, text), (removal, seen) in zip(batch, decisions, strict=True):
            if seen is not None:
                stats[f"curation/language/{seen}"] += 1
            if removal is None:
                yield key, text
                continue
            removal = Removal(*removal, len(text.encode("utf-8")))
            if removal.stage == "quality":
                stats[f"curation/quality/rule/{removal.reason}/documents_removed"] += 1
                stats[f"curation/quality/rule/{removal.reason}/bytes_removed"] += removal.bytes
            stats[f"curation/{removal.stage}/documents_removed"] += 1
            stats[f"curation/{removal.stage}/bytes_removed"] += removal.bytes
            yield beam.pvalue.TaggedOutput("removed", (key, removal))
        if stats:
            yield beam.pvalue.TaggedOutput("stats", count_stats(stats))

    def _submit(self, texts: list[str]) -> list:
        """Futures of `Rules.decide_all` over `texts` in consecutive parts of about equal
        characters, one per worker."""
        n, total = self._processes, sum(map(len, texts))
        parts, part, size = [], [], 0
        for text in texts:
            part.append(text)
            size += len(text)
            if size * n >= total * (len(parts) + 1):
                parts.append(part)
                part = []
        parts.append(part)
        return [self._pool.submit(self._rules.decide_all, part) for part in parts if part]

    def _decisions(self, texts: list[str]):
        """`Rules.decide` for each text, in order, in this process."""
        if self._identifier is None:
            return (self._rules.decide(text) for text in texts)
        # map submits the whole batch at once and answers in order: CLD2 runs ahead of the rules
        identified = self._identifier.map(language.identify, texts)
        return (self._rules.decide(text, answer) for text, answer in zip(texts, identified, strict=True))
