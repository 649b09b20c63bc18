"""Resume that loses nothing, in the other way a run reads its data: a two-corpus mixture trained
in two phases (33 tokens in batches of 8, then 45 in batches of 6), SIGKILLed once in each phase
and resumed each time by re-running the same command, ends with the weights, slots, history and
per-corpus eval of an uninterrupted run, having trained on the same batches in the same order."""

from __future__ import annotations

import random

import pytest

from tests.reliability.resume import (
    assert_same_variables,
    checkpointed_step,
    history,
    kill_at_steps,
    kill_seed,
    mixture_command,
    read_trace,
    run_to_the_end,
    trained_batches,
    without_timing,
)

MIXTURE_STEPS = 60  # phase 1 (33 tokens, batch 8): steps 1-30; phase 2 (45 tokens, batch 6): 31-60

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


def test_sigkills_in_a_mixture_and_inside_phase_2_change_nothing(mixture_corpora, tmp_path, report):
    command = mixture_command(mixture_corpora, tmp_path, MIXTURE_STEPS)
    reference = tmp_path / "reference"
    reference_pid = run_to_the_end(command, reference, tmp_path / "reference.log")

    seed = kill_seed()
    rng = random.Random(seed)
    targets = [rng.randrange(12, 28), rng.randrange(42, 56)]  # one kill in each phase
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(command, resumed, targets, tmp_path, seed)
    resumed_from = checkpointed_step(resumed)
    assert resumed_from > MIXTURE_STEPS // 2, f"seed {seed}: the last resume is not inside phase 2"
    segments.append((run_to_the_end(command, resumed, tmp_path / "final.log"), resumed_from))

    assert_same_variables(resumed, reference, seed)
    stream = read_trace(reference, reference_pid)
    assert sorted(stream) == list(range(MIXTURE_STEPS))  # both phases, nothing read past a phase's end
    seen = trained_batches(resumed, segments, MIXTURE_STEPS, seed)
    assert seen == [stream[i] for i in range(MIXTURE_STEPS)], f"seed {seed}"
    assert [len(stream[i].split(",")) for i in (0, MIXTURE_STEPS - 1)] == [8, 6]  # each phase's batch
    assert without_timing(history(resumed)) == without_timing(history(reference))
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    report(
        "mixture in two phases SIGKILLed in each phase, resumed",
        detail=f"seed {seed}; kills at steps {targets[0]} (seq 33) and {targets[1]} (seq 45); weights, "
        f"slots, history, per-corpus eval bit-identical; {MIXTURE_STEPS} batches each trained once, in order",
    )
