"""Two workers on loopback, for real: two processes with a TF_CONFIG each train one model under
MultiWorkerMirroredStrategy, each reading its own shards. Their loss is the 2-replica
MirroredStrategy run's on the same global batch, only the chief writes to model_dir, and a worker
killed with SIGKILL stops the other with one line naming it; started again, both resume exactly."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from model.config import BertConfig
from pipeline.schema import read_manifest
from tests.conftest import checkpoint_variables

REPO = Path(__file__).resolve().parents[2]
STEPS = 30

pytestmark = pytest.mark.slow

# XLA stays off on both sides: XLA:CPU has no collectives ("Collectives are not yet implemented
# for CPU devices when compiling with XLA", TF 2.21), and under MirroredStrategy on logical CPUs it
# fails too (test_strategy.py). GPUs and TPUs compile the same step with XLA.
FLAGS = ["--global_batch_size", "14", "--train_steps", str(STEPS), "--warmup_steps", "3",
         "--learning_rate", "2e-3", "--log_every", "10", "--checkpoint_every", "10", "--eval_every", "10",
         "--eval_steps", "2", "--no-export", "--no-jit_compile", "--seed", "7"]  # fmt: skip

MIRRORED = r"""
import sys
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from launch.config import TrainConfig
from launch.train import train

train(TrainConfig.from_args(sys.argv[1:]), tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
"""


@pytest.fixture(scope="module")
def flags(small_corpus, tmp_path_factory) -> list[str]:
    bert = tmp_path_factory.mktemp("bert") / "bert.json"
    vocab = read_manifest(str(small_corpus)).vocab.size
    bert.write_text(BertConfig(vocab, 24, 2, 3, 44, 32).to_json())
    return ["--data", str(small_corpus), "--bert_config", str(bert), *FLAGS]


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(flags: list[str], model_dir: Path, logs: Path) -> list[subprocess.Popen]:
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "launch.pretrain", *flags, "--model_dir", str(model_dir),
             "--strategy", "multi_worker"],
            cwd=REPO, env={**os.environ, "TF_CONFIG": json.dumps(tf_config)},
            stdout=(logs / f"worker{index}.log").open("w"), stderr=subprocess.STDOUT,
        ))  # fmt: skip
    return processes


def history(model_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def two_workers(flags, tmp_path_factory) -> tuple[Path, Path]:
    """An uninterrupted two-worker run: its model_dir and the folder of its logs."""
    root = tmp_path_factory.mktemp("two_workers")
    processes = start_workers(flags, root / "run", root)
    codes = [p.wait(timeout=600) for p in processes]
    assert codes == [0, 0], (root / "worker0.log").read_text()[-3000:] + (root / "worker1.log").read_text()[
        -3000:
    ]
    return root / "run", root


def test_two_workers_train_as_two_mirrored_replicas_and_only_the_chief_writes(flags, two_workers, tmp_path):
    model_dir, logs = two_workers
    reference = tmp_path / "mirrored"
    result = subprocess.run([sys.executable, "-c", MIRRORED, *flags, "--model_dir", str(reference)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    # The same examples per replica (worker r reads what replica r reads: its own shards), the
    # gradients all-reduced across processes: the same losses, curves and evaluation.
    ours, theirs = history(model_dir), history(reference)
    assert [r["step"] for r in ours] == [r["step"] for r in theirs] == [10, 20, 30]
    for a, b in zip(ours, theirs, strict=True):
        for key in ("loss", "mlm_accuracy", "val_loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), (a["step"], key)
    assert ours[-1]["loss"] < ours[0]["loss"]
    evaluated, expected = (json.loads((d / "eval.json").read_text()) for d in (model_dir, reference))
    assert evaluated["mlm_loss"] == pytest.approx(expected["mlm_loss"], rel=1e-5)

    # Only the chief writes model_dir: worker 1 wrote its checkpoints and logs to a scratch folder
    # of its own, gone at the end, and model_dir has one checkpoint per interval, complete.
    line = next(x for x in (logs / "worker1.log").read_text().splitlines() if x.startswith("worker 1:"))
    scratch = Path(re.search(r"copies go to (\S+) \(deleted", line).group(1))
    assert not scratch.exists() and not str(scratch).startswith(str(model_dir))
    assert "worker 0:" not in (logs / "worker0.log").read_text()
    assert sorted(p.name for p in (model_dir / "checkpoints").glob("ckpt-*.safetensors")) == [
        f"ckpt-{s}.safetensors" for s in (10, 20, 30)
    ]
    checkpoint_variables(model_dir)  # every tensor of the last checkpoint reads back


def test_a_killed_worker_stops_the_job_in_one_line_and_both_resume_exactly(flags, two_workers, tmp_path):
    uninterrupted, _ = two_workers
    model_dir = tmp_path / "run"
    processes = start_workers(flags, model_dir, tmp_path)
    while not (model_dir / "checkpoints" / "checkpoints.json").exists():  # the chief saved step 10
        assert all(p.poll() is None for p in processes), (tmp_path / "worker0.log").read_text()[-3000:]
        time.sleep(0.05)
    processes[1].send_signal(signal.SIGKILL)
    assert processes[1].wait(timeout=60) == -signal.SIGKILL
    assert processes[0].wait(timeout=300) == 2, (tmp_path / "worker0.log").read_text()[-3000:]
    last = (tmp_path / "worker0.log").read_text().strip().splitlines()[-1]
    assert re.fullmatch(
        r"error: --strategy multi_worker: worker 1 \(127\.0\.0\.1:\d+\) stopped, and the job cannot go on "
        r"without it; start every worker again with the same command to resume from the last "
        r"checkpoint \(step (10|20)\)",
        last,
    ), last

    resumed = start_workers(flags, model_dir, tmp_path)
    assert [p.wait(timeout=600) for p in resumed] == [0, 0], (tmp_path / "worker0.log").read_text()[-3000:]
    assert "resuming at step" in (tmp_path / "worker0.log").read_text()
    expected, found = checkpoint_variables(uninterrupted), checkpoint_variables(model_dir)
    assert found.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(found[name], expected[name], err_msg=name)
    assert without_timing(history(model_dir)) == without_timing(history(uninterrupted))


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("examples_per_s", "tokens_per_s")} for r in rows]
