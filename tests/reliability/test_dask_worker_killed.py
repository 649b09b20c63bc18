"""A Dask worker process SIGKILLed while a corpus build runs on the cluster (after its first
tasks finished): the build completes with the DirectRunner's bytes (the scheduler reruns the
lost tasks, the nanny starts a new worker), or stops with a one-line error naming the lost worker
and no manifest. Never a corpus that looks complete but is not."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import apache_beam as beam
import pytest

from pipeline import build_corpus
from pipeline.runners.dask_runner import DaskBuildError, DaskRunner
from tests.conftest import build
from tests.dask_cluster import loopback_cluster

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`

ARGS = ("--doc_per_file", "--vocab_size", "1300", "--whole_word_mask", "--seq_len", "51", "--max_predictions",
        "8", "--dupe_factor", "2", "--num_shards", "4", "--validation_fraction", "0.1")  # fmt: skip


# When to kill: once a packing group's part file is written (reading, deduplication and the vocab
# are behind, more groups and the shards ahead), or once the first shard is in place (the lost
# worker's shards are written again from the parts, which stay until the manifest is written).
MOMENTS = {"first part written": "_tmp/parts/*.part", "first shard written": "*.tfrecord"}


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_worker_killed_mid_build(python_docs, tmp_path, report, caplog, moment):
    import logging

    import distributed

    caplog.set_level(logging.INFO, logger="bertbeam.corpus")

    inputs = ("--input", f"{python_docs}/library/[a-c]*.rst.txt")
    build(tmp_path / "direct", *inputs, *ARGS)
    expected = {p.name: p.read_bytes() for p in (tmp_path / "direct").iterdir()}
    out = tmp_path / "dask"
    with loopback_cluster(tmp_path / "cluster") as address, distributed.Client(address) as client:
        before = client.run(os.getpid)  # {worker address: pid}
        outcome: dict = {}

        def run() -> None:
            try:
                build_corpus.run(["--output", str(out), *inputs, *ARGS, "--runner", "DaskRunner",
                                  "--dask_client_address", address])  # fmt: skip
            except Exception as e:  # the main thread checks what it was
                outcome["error"] = e

        builder = threading.Thread(target=run)
        builder.start()
        deadline = time.monotonic() + 300
        while not list(out.glob(MOMENTS[moment])):
            assert builder.is_alive() and time.monotonic() < deadline, outcome or "the build ended first"
            time.sleep(0.02)
        # The worker that wrote a shard (its forwarded log line names its process), else the first.
        writers = {r.process for r in caplog.records if r.getMessage().startswith("wrote ")}
        victim = next((w for w, pid in sorted(before.items()) if pid in writers), sorted(before)[0])
        assert not (out / "manifest.json").exists()
        os.kill(before[victim], signal.SIGKILL)
        killed_at = sorted(p.name for p in out.glob("*.tfrecord"))
        builder.join(timeout=600)
        assert not builder.is_alive()
        after = client.run(os.getpid)

    assert victim not in after and len(after) == 2  # the nanny started a new worker in its place
    if "error" in outcome:  # the other allowed outcome: one line naming the worker, no manifest
        error = outcome["error"]
        assert isinstance(error, DaskBuildError) and victim in str(error), repr(error)
        assert not (out / "manifest.json").exists()
        result = f"stopped: {error}"
    else:
        got = {p.name: p.read_bytes() for p in out.iterdir()}
        assert sorted(got) == sorted(expected)  # shards, vocab, manifest; no _tmp/ left
        for name in expected:
            assert got[name] == expected[name], f"{name} differs after the worker was killed"
        result = f"completed, {len(expected)} files byte-identical to the DirectRunner's"
    found = sum("was already written" in r.getMessage() for r in caplog.records)
    report(
        f"Dask worker SIGKILLed mid-build, {moment} (2 workers on loopback)",
        detail=f"{len(killed_at)} shards written at the kill; {result}; {found} shards found already written",
    )


class _KillOwnWorker(beam.DoFn):
    """A task that takes its worker down every time it runs (as one out of memory would)."""

    def process(self, element):
        os.kill(os.getpid(), signal.SIGKILL)
        yield element


def test_a_task_that_keeps_killing_workers_stops_the_build(tmp_path, report):
    from apache_beam.options.pipeline_options import PipelineOptions

    # The scheduler gives up on a task after it took down 1 + allowed-failures workers.
    config = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    with loopback_cluster(tmp_path / "cluster", config=config) as address:
        options = PipelineOptions(["--dask_client_address", address])
        p = beam.Pipeline(runner=DaskRunner(), options=options)
        _ = p | beam.Create([1]) | beam.ParDo(_KillOwnWorker()) | beam.Map(print)
        with pytest.raises(DaskBuildError) as error:
            p.run()
    line = str(error.value)
    assert "\n" not in line and re.search(r"kept losing workers: .*tcp://127\.0\.0\.1:\d+", line), line
    report("Dask task that SIGKILLs its worker every time", detail=f"`error: {line[:160]}...`")
