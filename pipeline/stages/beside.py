"""Beside: a DoFn whose elements are worked on threads of its own when it runs in the launcher's
process (the in-process DirectRunner), so that the step before it goes on meanwhile."""

from __future__ import annotations

import concurrent.futures
import ctypes
import os

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue


class Beside(beam.DoFn):
    """Subclasses define `work(element, *side_inputs)`, a generator of outputs.

    The in-process runner runs a stage's steps on one thread, an element at a time: reading and
    tokenizing a packing group, then creating its instances, then the next group. Worked on a
    thread of its own, an element's outputs are yielded once done (in order), while the thread
    that calls `process` goes back to the step before; the tokenizer's pool, numpy and file I/O
    release the GIL, so the two overlap on two cores. At most `threads` elements are in flight, and
    memory holds at most that many (the rest wait in `process`). A worker in a process of its own
    (multi_processing, Dataflow, Dask) has no idle core: there `work` runs in `process`.

    Beam's metrics count only on the thread that runs the bundle, so `work` must not touch them:
    `delivered(outputs)` runs there, with each element's outputs, before they are yielded.
    """

    def __init__(self, threads: int):
        self._launcher_pid = os.getpid()
        self._threads = threads
        self._pool = None
        self._pending: list[concurrent.futures.Future] = []  # oldest first

    def work(self, element, *args):
        raise NotImplementedError

    def delivered(self, outputs: list) -> None:
        """Called on the bundle's thread with one element's outputs (counters, progress)."""

    def setup(self):
        if os.getpid() == self._launcher_pid and self._threads > 0:
            self._pool = concurrent.futures.ThreadPoolExecutor(self._threads)

    def process(self, element, *args):
        if self._pool is None:
            outputs = list(self.work(element, *args))
            self.delivered(outputs)
            yield from outputs
            return
        self._pending.append(self._pool.submit(lambda: list(self.work(element, *args))))
        while len(self._pending) > self._threads or (self._pending and self._pending[0].done()):
            outputs = self._pending.pop(0).result()
            release_freed_memory()
            self.delivered(outputs)
            yield from outputs

    def finish_bundle(self):
        pending, self._pending = self._pending, []
        for future in pending:  # outputs of the bundle's last elements, windowed as Beam wants here
            outputs = future.result()
            release_freed_memory()
            self.delivered(outputs)
            for out in outputs:
                if isinstance(out, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(out.tag, _windowed(out.value))
                else:
                    yield _windowed(out)

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def release_freed_memory() -> None:
    """Give the memory freed on other threads back to the system (glibc's `malloc_trim`).

    glibc gives each thread that allocates under contention an arena of its own and raises its
    mmap threshold after each large block freed, so a group's arrays freed on one thread stay
    in its arena while the next group's are allocated in another. The in-process build's peak at
    8x the Python docs was 518-686 MiB in four runs, against 458-481 at 1x (up to 1.45x); trimmed
    after each element, 470 against 479, in the same time. (One arena for the whole process,
    `M_ARENA_MAX` 1, kept it flat too, but cost a tenth of the build's time: the tokenizer's
    threads and ours then share one lock.) A no-op where the C library is not glibc."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _glibc_malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _glibc_malloc_trim()


def _windowed(value):
    return WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])
