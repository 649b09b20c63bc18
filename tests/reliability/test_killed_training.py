"""Resume that loses nothing: a run SIGKILLed at random steps three times and once while writing a
checkpoint, resumed each time by re-running the same command, ends with the weights of an
uninterrupted run, having trained on exactly the same examples in the same order. A disk that
fills up while checkpointing stops the run with one line and leaves the previous checkpoint usable:
with space freed, the same command resumes from it and ends with the same weights again."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from launch import checkpoints
from tests.conftest import checkpoint_variables
from tests.reliability.resume import (
    CHECKPOINT_EVERY,
    assert_same_variables,
    checkpointed_step,
    history,
    kill_at_steps,
    kill_in_a_save,
    kill_seed,
    pretrain_command,
    read_trace,
    run_to_the_end,
    start,
    trained_batches,
    without_timing,
)

TRAIN_STEPS = 200

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


@pytest.fixture(scope="module")
def command(small_corpus, tmp_path_factory):
    return pretrain_command(small_corpus, tmp_path_factory.mktemp("bert"), TRAIN_STEPS)


@pytest.fixture(scope="module")
def reference(command, tmp_path_factory) -> tuple[Path, int]:
    """An uninterrupted run: its model_dir and process id (its trace file's name)."""
    model_dir = tmp_path_factory.mktemp("reference") / "run"
    return model_dir, run_to_the_end(command, model_dir, model_dir.parent / "reference.log")


def test_sigkills_at_random_steps_and_mid_checkpoint_change_nothing(command, reference, tmp_path, report):
    reference, reference_pid = reference
    seed = kill_seed()
    targets = sorted(random.Random(seed).sample(range(12, TRAIN_STEPS - 40), 3))
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(command, resumed, targets, tmp_path, seed)  # (pid, the step it resumed from)
    # Then mid-save.
    torn = kill_in_a_save(command, resumed, tmp_path / "mid_save.log", segments, seed)
    resumed_from = checkpointed_step(resumed)
    assert resumed_from == torn - CHECKPOINT_EVERY  # the torn one is ignored, the one before is used
    segments.append((run_to_the_end(command, resumed, tmp_path / "final.log"), resumed_from))

    # Weights, optimizer slots and step counter: bit for bit.
    assert_same_variables(resumed, reference, seed)

    # The examples: each segment starts reading at the step its checkpoint holds, and what every
    # segment trained on before the next one took over is the uninterrupted stream, in order.
    stream = read_trace(reference, reference_pid)
    starts = [resumed_from for _, resumed_from in segments]
    assert starts[0] == 0 and starts == sorted(starts), f"seed {seed}: {starts}"
    seen = trained_batches(resumed, segments, TRAIN_STEPS, seed)
    assert seen == [stream[i] for i in range(TRAIN_STEPS)], f"seed {seed}"
    assert len(set(",".join(seen).split(","))) > 0.9 * 8 * TRAIN_STEPS  # examples, mostly distinct

    # The logs agree too: rows from killed runs past their checkpoint were dropped on resume.
    rows = history(resumed)
    assert [r["step"] for r in rows] == list(range(5, TRAIN_STEPS + 1, 5))
    assert without_timing(rows) == without_timing(history(reference))
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    kills = ", ".join(f"step {t}" for t in targets) + f", mid-write of checkpoint {torn}"
    report(
        "training SIGKILLed 4 times, resumed each time",
        detail=f"seed {seed}; kills at {kills}; weights, slots, history, eval bit-identical to an "
        f"uninterrupted run; {TRAIN_STEPS} batches each trained once, in order",
    )


def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint(command, reference, tmp_path, report):
    reference, _ = reference
    # A tmpfs for the checkpoints that holds one checkpoint but not a second one beside it (the
    # manager deletes the oldest only after a new one is complete).
    checkpoint_bytes = (
        Path(f"{checkpoints.latest(str(reference / 'checkpoints'))}.safetensors").stat().st_size
    )
    size = (int(1.5 * checkpoint_bytes) // 4096 + 4) * 4096
    model_dir = tmp_path / "run"
    folder = model_dir / "checkpoints"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)  # fmt: skip
    assert mounted.returncode == 0, (
        f"mounting a {size}-byte tmpfs needs root (CI runs as root): {mounted.stderr}"
    )
    try:
        log = tmp_path / "full.log"
        assert start(command(model_dir), log).wait(timeout=600) == 2, log.read_text()[-3000:]
        line = log.read_text().strip().splitlines()[-1]
        assert line == (
            f"error: {folder}: no space left on the device writing checkpoint 20; the newest complete one "
            f"({folder}/ckpt-10) is untouched: free space and re-run to resume"
        ), line
        assert checkpointed_step(model_dir) == 10
        checkpoint_variables(model_dir)  # every tensor of ckpt-10 reads back
        subprocess.run(["mount", "-o", f"remount,size={64 << 20}", str(folder)], check=True)  # space freed
        log = tmp_path / "resumed.log"
        process = start(command(model_dir), log)
        assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
        assert min(read_trace(model_dir, process.pid)) == 10  # resumed from ckpt-10, not from scratch
        assert_same_variables(model_dir, reference, "full disk")
    finally:
        subprocess.run(["umount", str(folder)], check=False)
    report(
        "disk full while checkpointing (tmpfs)",
        detail=f"`{line}`; after freeing space the same command resumed from ckpt-10 and ended "
        "bit-identical to an uninterrupted run",
    )
