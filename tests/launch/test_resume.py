"""Resume that loses nothing: a run SIGKILLed at random steps three times, and resumed each time by
re-running the same command, ends with the weights of an uninterrupted run, and trained on exactly
the same examples in the same order."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from model.config import BertConfig
from pipeline.schema import read_manifest

REPO = Path(__file__).resolve().parents[2]
TRAIN_STEPS = 200


@pytest.fixture(scope="module")
def command(small_corpus, tmp_path_factory):
    bert = tmp_path_factory.mktemp("bert") / "bert.json"
    vocab = read_manifest(str(small_corpus))["vocab"]["size"]
    bert.write_text(BertConfig(vocab, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=44,
                               max_position=32).to_json())  # fmt: skip

    def command(model_dir: Path) -> list[str]:
        return [
            sys.executable, "-m", "launch.pretrain", "--data", str(small_corpus),
            "--model_dir", str(model_dir),
            "--bert_config", str(bert), "--global_batch_size", "8", "--train_steps", str(TRAIN_STEPS),
            "--warmup_steps", "20", "--learning_rate", "1e-3", "--log_every", "5", "--checkpoint_every", "10",
            "--eval_every", "50", "--eval_steps", "2", "--dynamic_masking", "--trace_batches", "--no-export",
        ]  # fmt: skip

    return command


def start(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)


def logged_step(model_dir: Path) -> int:
    try:
        lines = (model_dir / "history.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (FileNotFoundError, json.JSONDecodeError, IndexError):
        return 0


def checkpointed_step(model_dir: Path) -> int:
    latest = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def read_trace(model_dir: Path, pid: int) -> dict[int, str]:
    lines = (model_dir / "trace" / f"{pid}-0.tsv").read_text().splitlines()
    trace = {}
    for line in lines:
        index, digests = line.split("\t")
        assert int(index) not in trace, f"batch {index} read twice by one process"
        trace[int(index)] = digests
    return trace


def variables(model_dir: Path) -> dict[str, np.ndarray]:
    path = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    return {
        name: tf.train.load_variable(path, name)
        for name, _ in tf.train.list_variables(path)
        if name.startswith(("model/", "optimizer/"))
    }


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("examples_per_s", "tokens_per_s")} for r in rows]


def test_three_sigkills_change_nothing(command, tmp_path):
    reference = tmp_path / "reference"
    uninterrupted = start(command(reference), tmp_path / "reference.log")
    assert uninterrupted.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-3000:]

    seed = int(os.environ.get("RESUME_TEST_SEED", time.time_ns() % 10_000))
    targets = sorted(random.Random(seed).sample(range(12, TRAIN_STEPS - 20), 3))
    resumed = tmp_path / "resumed"
    segments = []  # (pid, the step it resumed from)
    for n, target in enumerate(targets):
        resumed_from = checkpointed_step(resumed)
        process = start(command(resumed), tmp_path / f"segment{n}.log")
        while logged_step(resumed) < target and process.poll() is None:
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL, f"seed {seed}: the run ended before its kill"
        segments.append((process.pid, resumed_from))
    resumed_from = checkpointed_step(resumed)
    final = start(command(resumed), tmp_path / "final.log")
    assert final.wait(timeout=600) == 0, (tmp_path / "final.log").read_text()[-3000:]
    segments.append((final.pid, resumed_from))

    # Weights, optimizer slots and step counter: bit for bit.
    expected, found = variables(reference), variables(resumed)
    assert found.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(found[name], expected[name], err_msg=f"seed {seed}: {name}")

    # The examples: each segment starts reading at the step its checkpoint holds, and what every
    # segment trained on before the next one took over is the uninterrupted stream, in order.
    stream = read_trace(reference, uninterrupted.pid)
    starts = [resumed_from for _, resumed_from in segments]
    assert starts[0] == 0 and starts == sorted(starts), f"seed {seed}: {starts}"
    ends = starts[1:] + [TRAIN_STEPS]
    seen = []
    for (pid, resumed_from), end in zip(segments, ends, strict=True):
        trace = read_trace(resumed, pid)
        assert min(trace) == resumed_from, (
            f"seed {seed}: pid {pid} resumed at {resumed_from}, read from {min(trace)}"
        )
        seen += [trace[i] for i in range(resumed_from, end)]
    assert seen == [stream[i] for i in range(TRAIN_STEPS)], f"seed {seed}"
    assert len(set(",".join(seen).split(","))) > 0.9 * 8 * TRAIN_STEPS  # examples, mostly distinct

    # The logs agree too: rows from killed runs past their checkpoint were dropped on resume.
    history = [json.loads(line) for line in (resumed / "history.jsonl").read_text().splitlines()]
    reference_history = [json.loads(line) for line in (reference / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == list(range(5, TRAIN_STEPS + 1, 5))
    assert without_timing(history) == without_timing(reference_history)
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
