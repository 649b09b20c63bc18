"""Progress a person can read while a build runs: a log line per stage every few seconds.

    read: 41.2 of 154.0 MB (27 %), 1,310 documents, 9.8 MB/s, about 12 s left
    tokenized: 2,400 documents, 1,903,211 tokens, 610 documents/s
    written at seq 128: 21,504 of about 76,000 instances (28 %), 8,100 instances/s, about 7 s left

The DoFns that do the work call `stage(...).add(...)`: the figures are those of the process the
DoFn runs in. On the DirectRunner's default in-memory mode that is the whole build; with
--direct_num_workers N in multi_processing mode, or on Dataflow, each worker logs its own share
(its lines name it), and the same figures are Beam counters in the `bertbeam` namespace
(`progress/...`), which Dataflow's console sums across workers as the job runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from apache_beam.metrics import Metrics

log = logging.getLogger("bertbeam.corpus")

# Seconds between two lines of one stage. Tests set it to 0 to see every update.
EVERY_SECONDS = 5.0

_stages: dict[str, Stage] = {}
_lock = threading.Lock()


def stage(name: str, *, total: float | None = None, unit: str = "", launcher_pid: int | None = None) -> Stage:
    """This process's progress of stage `name`, created on first use. `total` (in `unit`, the
    main figure's) gives a percentage and an estimate of the time left."""
    with _lock:
        found = _stages.get(name)
        if found is None:
            found = _stages[name] = Stage(name, total, unit, launcher_pid)
        return found


def reset() -> None:
    """Forget every stage (a new build in the same process starts from zero)."""
    with _lock:
        _stages.clear()


def log_totals() -> list[str]:
    """Each stage's final line, logged, for the stages that ran in this process (all of them on
    the DirectRunner's in-memory mode; none when workers did the work elsewhere)."""
    with _lock:
        lines = [found.line(final=True) for found in _stages.values()]
    for line in lines:
        log.info("done, %s", line)
    return lines


class Stage:
    """Running totals of one stage in this process: a main figure (`amount`, in `unit`) and
    named counts; `add` logs a line when EVERY_SECONDS have passed since the last one."""

    def __init__(self, name: str, total: float | None, unit: str, launcher_pid: int | None):
        self.name, self.total, self.unit = name, total, unit
        self._key = name.replace(" ", "_")
        self.amount = 0.0
        self.counts: dict[str, int] = {}
        self._started = time.monotonic()
        self._logged = self._last = self._started
        # A worker other than the launching process says so: its figures are its share.
        self._who = "" if launcher_pid in (None, os.getpid()) else f"worker {os.getpid()}: "
        self._lock = threading.Lock()

    def add(self, amount: float = 0.0, **counts: int) -> None:
        with self._lock:
            self.amount += amount
            if amount:
                Metrics.counter("bertbeam", f"progress/{self._key} {self.unit}").inc(int(amount))
            for key, value in counts.items():
                self.counts[key] = self.counts.get(key, 0) + value
                Metrics.counter("bertbeam", f"progress/{self._key} {key}").inc(value)
            self._last = time.monotonic()
            if self._last - self._logged >= EVERY_SECONDS:
                self._logged = self._last
                log.info("%s", self.line())

    def line(self, final: bool = False) -> str:
        """The figures so far; the rate is over the time from the first update to the latest."""
        rate = self.amount / max(1e-3, self._last - self._started)
        scale, unit = (1e6, "MB") if self.unit == "bytes" else (1, self.unit)

        def figure(value: float) -> str:
            return f"{value / scale:,.1f}" if scale > 1 else f"{value:,.0f}"

        text = f"{self._who}{self.name}: {figure(self.amount)}"
        if self.total:
            about = "" if self.unit == "bytes" else "about "
            text += (
                f" of {about}{figure(self.total)} {unit} ({min(100.0, 100 * self.amount / self.total):.0f} %)"
            )
        else:
            text += f" {unit}"
        text += "".join(f", {value:,} {key}" for key, value in self.counts.items())
        text += f", {figure(rate)} {unit}/s"
        if self.total and rate > 0 and self.amount < self.total and not final:
            text += f", about {(self.total - self.amount) / rate:,.0f} s left"
        return text
