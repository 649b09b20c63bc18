"""Beam pipelines on a Dask cluster (dask.distributed): bertbeam's DaskRunner.

    python -m pipeline.build_corpus ... --runner DaskRunner --dask_client_address tcp://HOST:8786
    python -m pipeline.build_corpus ... --runner DaskRunner --dask_workers 4   # a local cluster

Beam 2.77 ships a DaskRunner (apache_beam.runners.dask). This one keeps its options (`DaskOptions`:
--dask_client_address, --dask_scheduler_file, ...) and its overrides for Create, Flatten, Reshuffle,
and translates the graph itself (`dask_translate.py`, which names each defect of Beam's translation
that stops it running this builder).

What a stage writes goes through Beam's FileSystems under the output folder; the runner checks
before the build that every worker sees that folder and the input files (a worker on another
machine needs gs://, s3:// or a shared mount) and runs the same bertbeam and Beam versions.
Progress lines are the workers' own (`pipeline.stages.progress`), forwarded to the launcher's log with
dask's `forward_logging`. Beam metrics are not collected (`metrics()` says so): the manifest's
counts come from the pipeline's own stats, not from counters. A worker lost mid-build is dask's to
handle: the scheduler reruns the lost tasks on the workers left (every stage's writes are
idempotent or go to fresh names), and a task that keeps killing workers stops the build with
`DaskBuildError`.
"""

from __future__ import annotations

import importlib.metadata
import logging
import platform
import uuid

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult, PipelineRunner, PipelineState

from common.errors import BertbeamError, ConfigError
from pipeline import files

try:  # the optional extra: pip install 'bertbeam[dask]'
    import dask
    import distributed
    from apache_beam.runners.dask.dask_runner import DaskOptions

    from pipeline.runners.dask_translate import Translate, count_consumers, overrides
except ImportError as e:  # the message is tested in a process without dask
    _MISSING = e
else:
    _MISSING = None

INSTALL = "pip install 'bertbeam[dask]' (dask[distributed]) on the launcher and on every worker"
LOGGER = "bertbeam.corpus"  # the progress lines' logger, forwarded from the workers
log = logging.getLogger(LOGGER)


# Partitions (the tasks of a stage): two per worker thread, so that a slow one does not hold up
# its stage, and at least one per PARTITION_BYTES of input. A task's result stays in its worker's
# memory as one list until every consumer has run (dask keeps task results whole); but ParDos
# that each read only the one before run as one task, element by element (`dask_translate`), so
# the documents' text streams from the second read through tokenizing, and what a task keeps is
# small: content keys, pointers, part file names, stats. The bound keeps a task's share of the input
# (and the time a lost task costs again) in proportion as inputs grow.
PARTITION_BYTES = 64 << 20
WAIT_FOR_WORKERS = 60  # seconds a build waits for a first worker on a scheduler that has none


class DaskBuildError(BertbeamError):
    """The cluster could not run the build: a worker lost too often, one that cannot see the
    output folder, or one with other versions."""


def require_dask() -> None:
    """One line saying how to install the extra, when dask is missing."""
    if _MISSING is not None:
        raise ConfigError(f"--runner DaskRunner needs dask.distributed ({_MISSING}): {INSTALL}")


if _MISSING is None:

    class ClusterOptions(PipelineOptions):
        """bertbeam's one addition to Beam's DaskOptions: the size of the local cluster started
        when no scheduler is named."""

        @classmethod
        def _add_argparse_args(cls, parser):
            parser.add_argument(
                "--dask_workers",
                type=int,
                default=None,
                help="Without --dask_client_address or --dask_scheduler_file: the number of worker "
                "processes of the local Dask cluster the build starts and stops (default: one per CPU).",
            )


# === The runner ===


class _ForwardProgress(distributed.WorkerPlugin if _MISSING is None else object):
    """On every worker, also one that joins or restarts mid-build: the progress logger at INFO,
    so that dask's forward_logging has lines to forward."""

    def setup(self, worker) -> None:
        logging.getLogger(LOGGER).setLevel(logging.INFO)


def _worker_view(probes: list[str], inputs: list[str]) -> dict:
    """What a worker runs and sees: versions, whether each of the launcher's probe files is there,
    and how many files each input pattern matches."""
    return {
        **_versions(),
        "sees": [files.exists(probe) for probe in probes],
        "inputs": [len(files.glob(pattern)) for pattern in inputs],
    }


def _versions() -> dict:
    return {
        "bertbeam": importlib.metadata.version("bertbeam"),
        "apache-beam": importlib.metadata.version("apache-beam"),
        "python": platform.python_version(),
    }


class DaskResult(PipelineResult):
    """A finished build (the runner returns once the cluster is done)."""

    def __init__(self):
        super().__init__(PipelineState.DONE)

    def wait_until_finish(self, duration=None):
        return self._state

    def metrics(self):
        raise NotImplementedError(
            "bertbeam's DaskRunner collects no Beam metrics; the manifest's counts come from the "
            "pipeline's own stats, and progress lines from the workers' logs"
        )


class DaskRunner(PipelineRunner):
    """Runs a Beam pipeline on a dask.distributed cluster: the one at --dask_client_address (or
    --dask_scheduler_file), else a local cluster of --dask_workers processes, stopped afterwards.
    `shared` names folders every worker must see (the build's output), `inputs` the input patterns
    every worker must match as the launcher does; `input_bytes`, the input's size, sets the least
    number of partitions (--dask_npartitions overrides)."""

    def __init__(self, shared: tuple[str, ...] = (), inputs: tuple[str, ...] = (), input_bytes: int = 0):
        super().__init__()
        self.shared, self.inputs = tuple(shared), tuple(inputs)
        self.input_bytes = input_bytes

    def run_pipeline(self, pipeline, options):
        require_dask()
        # A local cluster's scheduler runs in this process, and its INFO lines (every worker
        # joining, every connection) would drown the build's own progress lines.
        quiet = logging.getLogger("distributed")
        level = quiet.level
        quiet.setLevel(logging.WARNING)
        try:
            return self._run(pipeline, options)
        finally:
            quiet.setLevel(level)

    def _run(self, pipeline, options) -> DaskResult:
        beam_options = options.view_as(DaskOptions)
        client, cluster = self._connect(beam_options, options.view_as(ClusterOptions))
        try:
            log.info("Dask cluster %s: dashboard %s", client.scheduler.address, client.dashboard_link)
            self._check_workers(client)
            client.register_plugin(_ForwardProgress(), name="bertbeam-progress")
            client.forward_logging(LOGGER, level=logging.INFO)
            threads = sum(client.nthreads().values())
            partitions = beam_options.npartitions or max(2 * threads, -(-self.input_bytes // PARTITION_BYTES))
            pipeline.replace_all(overrides())
            translate = Translate(partitions, count_consumers(pipeline))
            pipeline.visit(translate)
            # Unoptimized: dask's bag optimization fuses chains of tasks into new keys, and a side
            # input (a Delayed, optimized apart from the bags) would then compute its producers again
            # (seen: the vocab trained 12 times in one build). A ParDo's task is large enough that
            # fusion saves nothing measurable.
            futures = client.compute(translate.leaves(), optimize_graph=False)
            try:
                client.gather(futures)
            except distributed.KilledWorker as e:
                client.cancel(futures)
                raise DaskBuildError(f"the Dask cluster kept losing workers: {e}") from None
            except BaseException:
                client.cancel(futures)  # a remote cluster stops the build's other tasks too
                raise
            return DaskResult()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()

    @staticmethod
    def _connect(beam_options, ours) -> tuple:
        """(client, the local cluster it runs on or None): the scheduler named by Beam's Dask
        options, else a local cluster of --dask_workers processes."""
        where = beam_options.address or beam_options.scheduler_file
        if not where:
            cluster = distributed.LocalCluster(
                n_workers=ours.dask_workers,
                threads_per_worker=1,  # the DoFns hold the GIL: a process per core
                processes=True,
                host="127.0.0.1",
                dashboard_address=":0",
                silence_logs=logging.WARNING,
            )
            return distributed.Client(cluster), cluster
        timeout = beam_options.timeout if isinstance(beam_options.timeout, int) else dask.config.no_default
        try:
            client = distributed.Client(
                address=beam_options.address,
                scheduler_file=beam_options.scheduler_file,
                timeout=timeout,
                name=beam_options.name,
                connection_limit=beam_options.connection_limit,
            )
        except OSError as e:
            raise DaskBuildError(f"cannot reach the Dask scheduler at {where}: {e}") from None
        return client, None

    def _check_workers(self, client) -> None:
        """Every worker runs our versions, sees the shared folders and matches the input files the
        launcher matches, or the build stops here in one line naming the worker. (A worker that
        matched no input would build an empty corpus without a word.)"""
        if not client.scheduler_info().get("workers"):
            try:
                client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS)
            except TimeoutError:
                raise DaskBuildError(
                    f"no worker joined the Dask scheduler at {client.scheduler.address} in "
                    f"{WAIT_FOR_WORKERS} s: start workers (dask worker {client.scheduler.address})"
                ) from None
        ours = _versions()
        probes = {folder: f"{folder}/_tmp/dask-probe-{uuid.uuid4().hex}" for folder in self.shared}
        try:
            for probe in probes.values():
                files.write_atomically(probe, "bertbeam\n")
            matched = [len(files.glob(pattern)) for pattern in self.inputs]
            views = client.run(_worker_view, list(probes.values()), list(self.inputs))
            for worker, view in sorted(views.items()):
                other = [f"{k} {view[k]} (here {v})" for k, v in ours.items() if view[k] != v]
                if other:
                    raise DaskBuildError(
                        f"Dask worker {worker} runs {', '.join(other)}: install the same on every worker"
                    )
                for folder, seen in zip(probes, view["sees"], strict=True):
                    if not seen:
                        raise DaskBuildError(
                            f"Dask worker {worker} cannot see {folder}: the output must be storage every "
                            "worker reaches (gs://, s3://, or the same shared mount on every host)"
                        )
                for pattern, here, there in zip(self.inputs, matched, view["inputs"], strict=True):
                    if there != here:
                        raise DaskBuildError(
                            f"Dask worker {worker} matches {there} files for --input {pattern}, the launcher "
                            f"{here}: the input must be storage every worker reaches, at the same path"
                        )
        finally:
            for probe in probes.values():
                if files.exists(probe):
                    files.remove(probe)
