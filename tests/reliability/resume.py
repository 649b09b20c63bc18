"""What the kill-and-resume tests share: the training commands they SIGKILL (a small corpus, and a
two-corpus mixture in two phases), starting and killing them, and reading back what each process
trained on (the batch fingerprints of `--trace_batches`) and the variables it ended with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from launch.checkpoints import Checkpoints
from model.config import BertConfig
from pipeline.schema import read_manifest
from tests.conftest import checkpoint_variables

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT_EVERY = 10

Command = Callable[[Path], list[str]]  # model_dir -> the argv that trains into it


def pretrain_command(corpus: Path, folder: Path, steps: int) -> Command:
    """A tiny BERT on `corpus` (its config written into `folder`) for `steps` batches of 8, with a
    checkpoint every CHECKPOINT_EVERY steps and every batch fingerprinted."""
    bert = folder / "bert.json"
    bert.write_text(BertConfig(read_manifest(str(corpus)).vocab.size, hidden_size=24, num_layers=2,
                               num_heads=3, intermediate_size=44, max_position=32).to_json())  # fmt: skip

    def command(model_dir: Path) -> list[str]:
        return [
            sys.executable, "-m", "launch.pretrain", "--data", str(corpus), "--model_dir", str(model_dir),
            "--bert_config", str(bert), "--global_batch_size", "8", "--train_steps", str(steps),
            "--warmup_steps", "20", "--learning_rate", "1e-3", "--log_every", "5",
            "--checkpoint_every", str(CHECKPOINT_EVERY), "--eval_every", "50", "--eval_steps", "2",
            "--dynamic_masking", "--trace_batches", "--no-export",
        ]  # fmt: skip

    return command


def mixture_command(corpora: Path, folder: Path, steps: int) -> Command:
    """A two-corpus mixture (`corpora`/docs weighted 2, /more 1) trained in two phases, 33 tokens
    in batches of 8 for the first half of `steps`, then 45 tokens in batches of 6: the other way a
    run reads its data."""
    bert = folder / "bert.json"
    bert.write_text(BertConfig(read_manifest(str(corpora / "docs" / "seq33")).vocab.size, hidden_size=24,
                               num_layers=2, num_heads=3, intermediate_size=44,
                               max_position=48).to_json())  # fmt: skip
    data = f"docs={corpora / 'docs'}:2,more={corpora / 'more'}:1"

    def command(model_dir: Path) -> list[str]:
        return [
            sys.executable, "-m", "launch.pretrain", "--data", data, "--model_dir", str(model_dir),
            "--phases", "33:0.5,45:0.5", "--phase_batch_sizes", "8,6",
            "--bert_config", str(bert), "--train_steps", str(steps), "--warmup_steps", "6",
            "--learning_rate", "1e-3", "--log_every", "5", "--checkpoint_every", str(CHECKPOINT_EVERY),
            "--eval_every", "20", "--eval_steps", "2", "--dynamic_masking", "--trace_batches", "--no-export",
        ]  # fmt: skip

    return command


def with_flags(command: Command, **values) -> Command:
    """`command` with some of its flags' values replaced (`train_steps=50`: --train_steps 50)."""

    def changed(model_dir: Path) -> list[str]:
        argv = command(model_dir)
        for name, value in values.items():
            argv[argv.index(f"--{name}") + 1] = str(value)
        return argv

    return changed


def start(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)


def logged_step(model_dir: Path) -> int:
    try:
        lines = (model_dir / "history.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (FileNotFoundError, json.JSONDecodeError, IndexError):
        return 0


def checkpointed_step(model_dir: Path) -> int:
    return Checkpoints.latest_step(str(model_dir / "checkpoints"))


def read_trace(model_dir: Path, pid: int) -> dict[int, str]:
    lines = (model_dir / "trace" / f"{pid}-0.tsv").read_text().splitlines()
    trace = {}
    for line in lines:
        index, digests = line.split("\t")
        assert int(index) not in trace, f"batch {index} read twice by one process"
        trace[int(index)] = digests
    return trace


def trained_batches(model_dir: Path, segments: list[tuple[int, int]], steps: int, seed) -> list[str]:
    """The batches the resumed processes trained on, joined: each (pid, step it resumed from)
    must start reading at that step, and counts until the next one took over."""
    ends = [resumed_from for _, resumed_from in segments[1:]] + [steps]
    seen = []
    for (pid, resumed_from), end in zip(segments, ends, strict=True):
        trace = read_trace(model_dir, pid)
        assert min(trace) == resumed_from, (
            f"seed {seed}: pid {pid} resumed at {resumed_from}, read from {min(trace)}"
        )
        seen += [trace[i] for i in range(resumed_from, end)]
    return seen


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("examples_per_s", "tokens_per_s")} for r in rows]


def kill_at_steps(command, model_dir: Path, targets: list[int], logs: Path, seed) -> list[tuple[int, int]]:
    """Starts the run once per target and SIGKILLs it once it has logged that step; returns
    (pid, the step it resumed from) per process."""
    segments = []
    for n, target in enumerate(targets):
        resumed_from = checkpointed_step(model_dir)
        process = start(command(model_dir), logs / f"segment{n}.log")
        # Its own progress: history.jsonl still holds the rows a killed run logged past its last
        # checkpoint until this run's first row replaces them, so wait for this run's trace too.
        trace = model_dir / "trace" / f"{process.pid}-0.tsv"
        while (logged_step(model_dir) < target or not trace.exists()) and process.poll() is None:
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL, f"seed {seed}: the run ended before its kill"
        segments.append((process.pid, resumed_from))
    return segments


def kill_mid_save(process: subprocess.Popen, model_dir: Path) -> int | None:
    """SIGKILLs the run in the middle of writing its next checkpoint, N; returns N if that
    checkpoint was left incomplete. The write is caught mid-way for certain, however fast it is:
    the checkpoint's temporary file (`ckpt-N.safetensors.tmp`) is a FIFO made beforehand, so the
    writer blocks in it once the pipe is full; the kill lands there, and the FIFO is replaced by
    the bytes it had taken, as a kill at that moment leaves a real file."""
    folder = model_dir / "checkpoints"
    step = (checkpointed_step(model_dir) // CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY
    fifo = folder / f"ckpt-{step}.safetensors.tmp"
    folder.mkdir(parents=True, exist_ok=True)
    # A kill at an earlier target may have torn this same checkpoint already; the writer would
    # overwrite its leftover, so the FIFO takes its place.
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    torn = b""
    try:
        while process.poll() is None and len(torn) < 4096:
            try:
                chunk = os.read(reader, 4096 - len(torn))
            except BlockingIOError:  # the writer has it open, nothing written yet
                chunk = b""
            torn += chunk
            if not chunk:
                time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        os.close(reader)
    fifo.unlink()
    fifo.write_bytes(torn)
    return step if torn and checkpointed_step(model_dir) < step else None


def kill_in_a_save(command: Command, model_dir: Path, log: Path, segments: list, seed) -> int:
    """Starts the run and SIGKILLs it inside its next checkpoint write (`kill_mid_save`); appends
    (pid, the step it resumed from) to `segments` and returns the torn checkpoint's step."""
    resumed_from = checkpointed_step(model_dir)
    process = start(command(model_dir), log)
    torn = kill_mid_save(process, model_dir)
    assert process.returncode == -signal.SIGKILL, f"seed {seed}: the run ended before its kill"
    assert torn is not None, f"seed {seed}: the kill landed outside the checkpoint write"
    segments.append((process.pid, resumed_from))
    return torn


def assert_same_variables(found_dir: Path, expected_dir: Path, seed) -> None:
    expected, found = checkpoint_variables(expected_dir), checkpoint_variables(found_dir)
    assert found.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(found[name], expected[name], err_msg=f"seed {seed}: {name}")


def history(model_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]


def run_to_the_end(command: Command, model_dir: Path, log: Path) -> int:
    """Runs `command` into `model_dir` uninterrupted (or to the end of a resumed run); its pid."""
    process = start(command(model_dir), log)
    assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    return process.pid


def kill_seed() -> int:
    """The seed of a test's random kill steps: RESUME_TEST_SEED to replay one, else a new one per
    run (each test's failure message names it)."""
    return int(os.environ.get("RESUME_TEST_SEED", time.time_ns() % 10_000))
