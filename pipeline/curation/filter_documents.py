"""FilterDocuments: batches of (key, text) -> the documents kept, and a `Removal` for each one
removed: first by language (`language.py`: not one of --languages, or too little of it), then by
the first quality rule it fails (`quality.py`); counts per stage and rule, and the documents kept
per language, on a "stats" output.

Where the work runs. The in-memory runner runs every curation stage on one core, and the rules
hold the GIL (small numpy calls and Python; two threads over them were slower than one):
- on processes: each batch cut into N parts of about equal characters for N spawned processes
  that decide both language and quality, while the build's process reads and signs the next
  batches; a batch's outputs leave in order once its answers are in. The rules then use every
  core (docs/benchmarks/curation.md weighs the two ways);
- in the build's process, each batch's languages identified on a thread of their own ahead of
  the rules (CLD2 releases the GIL, so the second core does its share).
`--filter_processes N` chooses (0: in process). By default (-1, `processes_for`) the build's own
process on a machine of several cores uses processes, up to AUTO_PROCESSES; a runner's worker
(multi_processing, Dask, Dataflow: a worker per core already) decides in itself. The processes
start with the build's `__main__` hidden from them (`start_processes`). A daemonic worker (Dask's,
under its nanny) may not start processes: it decides in itself whatever the flag.
Each document's decision is its own, whatever its batch or process (`rules.py`)."""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import sys
import types
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline import files
from pipeline.config import CorpusConfig
from pipeline.curation import language, quality
from pipeline.curation.removal import Removal
from pipeline.curation.rules import Rules, rules_ready
from pipeline.stages import progress as _progress
from pipeline.stages.stats import count_stats

log = logging.getLogger("bertbeam.corpus")
AUTO_PROCESSES = 4  # at most, by default: each holds numpy, CLD2 and a batch (90-140 MiB)


def processes_for(requested: int, launcher_pid: int) -> int:
    """How many processes decide the rules: `requested` (--filter_processes) when >= 0; by
    default (-1), the machine's cores up to AUTO_PROCESSES in the build's own process (the
    in-memory runner), where the rules would otherwise hold one core; 0 in a runner's worker, on
    one core, or in a daemonic process (which may not start any)."""
    if requested >= 0:
        return requested
    cores = os.cpu_count() or 1
    if os.getpid() != launcher_pid or multiprocessing.current_process().daemon or cores < 2:
        return 0
    return min(cores, AUTO_PROCESSES)


def start_processes(n: int) -> ProcessPoolExecutor:
    """`n` spawned processes for `Rules`, all started now with `__main__` hidden. multiprocessing
    has each process import the module that started the build again: the command line's imports
    Beam (0.8 s of every process's start, 1.1 s of a small build), and a script that calls the
    build outside `if __name__ == "__main__":` would start a build in each, on the same output
    folder. They need only rules.py, which they import by name. None starts later (the pool
    starts one only while it has fewer than `n`; one that dies breaks it: BrokenProcessPool), so
    none imports `__main__`."""
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")  # what each process is told to import
    try:
        for _ in range(n):  # none is idle before it has started, so each submit starts one
            pool.submit(rules_ready)
    finally:
        sys.modules["__main__"] = main
    return pool


class FilterDocuments(beam.DoFn):
    """A batch of (key, text) -> main output: (key, text) of the documents every rule keeps;
    "removed": (key, Removal); "stats": documents and bytes removed, per stage and per rule."""

    def __init__(self, cfg: CorpusConfig):
        self._cfg = cfg
        self._launcher_pid = os.getpid()  # the build's own process: the default's processes

    def setup(self):
        cfg = self._cfg
        thresholds = quality.Thresholds.parse(cfg.quality_thresholds, files.read_file)
        self._rules = Rules(cfg.languages, cfg.min_language_score, cfg.quality_filters, thresholds)
        self._identifier, self._pool = None, None
        self._processes = processes_for(cfg.filter_processes, self._launcher_pid)
        if self._processes and multiprocessing.current_process().daemon:  # a Dask worker, say
            log.warning(
                "--filter_processes %d: this worker is a daemonic process, which may not start "
                "processes; the rules run in it",
                self._processes,
            )
            self._processes = 0
        if self._processes:  # spawned: the build's process holds threads that fork would copy
            log.info("curation: the language and quality rules on %d processes", self._processes)
            self._pool = start_processes(self._processes)
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
