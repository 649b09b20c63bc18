"""A real Dask cluster on loopback for the tests: a `dask scheduler` process and `dask worker`
processes (each a nanny and its worker), started as a user starts them on their hosts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def loopback_cluster(folder: Path, workers: int = 2, config: dict[str, str] | None = None):
    """Yields the scheduler's address (tcp://127.0.0.1:PORT) once `workers` one-thread workers
    have joined; stops every process afterwards. The workers run in `folder`/workers (their
    working directory), not in the test's, with temp folders `folder`/workers/tmp0, tmp1, ...
    `config`: dask settings for every process, as environment variables (DASK_...)."""
    import distributed

    scheduler_file = folder / "scheduler.json"
    cwd = folder / "workers"
    cwd.mkdir(parents=True, exist_ok=True)
    # The workers import what the pipeline's DoFns are made of: bertbeam (installed) and, for
    # the tests' own DoFns, this repository's tests/ package, as a user ships their code to workers.
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "warning",
        **(config or {}),
    }
    dask = [sys.executable, "-m", "dask"]
    at = ["--scheduler-file", str(scheduler_file)]
    scheduler = [*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0", *at]
    worker = [*dask, "worker", *at, "--host", "127.0.0.1", "--nthreads", "1", "--nworkers", "1",
              "--no-dashboard", "--local-directory", str(cwd / "dask-scratch")]  # fmt: skip
    procs = [subprocess.Popen(scheduler, cwd=cwd, env=env, start_new_session=True)]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, "the dask scheduler did not start"
            time.sleep(0.1)
        for n in range(workers):
            # Each worker its own temp folder (TMPDIR), which a test can check stays empty: a stage
            # that wrote to its host's temp would break on several hosts.
            (cwd / f"tmp{n}").mkdir(exist_ok=True)
            tmp = {"TMPDIR": str(cwd / f"tmp{n}")}
            procs.append(subprocess.Popen(worker, cwd=cwd, env={**env, **tmp}, start_new_session=True))
        with distributed.Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            if workers:
                client.wait_for_workers(workers, timeout=120)
            address = client.scheduler.address
        yield address
    finally:
        if scheduler_file.exists():
            with (
                contextlib.suppress(Exception),
                distributed.Client(scheduler_file=str(scheduler_file), timeout=10) as client,
            ):
                client.shutdown()  # scheduler and workers close cleanly (a SIGTERM'd nanny waits 8 s)
        deadline = time.monotonic() + 10
        for proc in reversed(procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # a nanny still restarting its worker, say
                os.killpg(proc.pid, signal.SIGKILL)  # with its worker: each started in its own group
                proc.wait()
