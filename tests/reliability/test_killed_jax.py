"""Training on Keras's JAX backend, where `import tensorflow` fails (as on the GPU image this
project is lent), SIGKILLed at random steps and while a checkpoint is being written: each re-run
resumes from the newest complete checkpoint, and the weights, optimizer slots, history, eval and
the batches trained are those of an uninterrupted JAX run, bit for bit."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

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
    trained_batches,
    without_timing,
)

TRAIN_STEPS = 60

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


def test_a_sigkilled_jax_run_without_tensorflow_resumes_bit_exactly(
    small_corpus, without_tensorflow, tmp_path, report
):
    mlm = pretrain_command(small_corpus, tmp_path, TRAIN_STEPS)

    def command(model_dir: Path) -> list[str]:  # `env` execs python: the pid (the trace's name) stays
        return ["env", "KERAS_BACKEND=jax", f"PYTHONPATH={without_tensorflow['PYTHONPATH']}", *mlm(model_dir)]

    reference = tmp_path / "reference"
    reference_pid = run_to_the_end(command, reference, tmp_path / "reference.log")
    assert "backend: jax" in (tmp_path / "reference.log").read_text()
    seed = kill_seed()
    targets = sorted(random.Random(seed).sample(range(12, TRAIN_STEPS - 25), 2))
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(command, resumed, targets, tmp_path, seed)
    torn = kill_in_a_save(command, resumed, tmp_path / "mid_save.log", segments, seed)
    resumed_from = checkpointed_step(resumed)
    assert resumed_from == torn - CHECKPOINT_EVERY  # the torn one is ignored, the one before is used
    segments.append((run_to_the_end(command, resumed, tmp_path / "final.log"), resumed_from))

    assert_same_variables(resumed, reference, seed)
    stream = read_trace(reference, reference_pid)
    seen = trained_batches(resumed, segments, TRAIN_STEPS, seed)
    assert seen == [stream[i] for i in range(TRAIN_STEPS)], f"seed {seed}"
    assert without_timing(history(resumed)) == without_timing(history(reference))
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    report(
        "JAX run without TensorFlow SIGKILLed, resumed",
        detail=f"seed {seed}; kills at steps {targets[0]}, {targets[1]} and mid-write of checkpoint {torn}; "
        "weights, slots, history, eval and the batches trained bit-identical to an uninterrupted JAX run",
    )
