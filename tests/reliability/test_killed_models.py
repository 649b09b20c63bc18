"""Resume that loses nothing, for the other models a run can train: an ELECTRA run (a generator
and a discriminator, and the sampler's random state) SIGKILLed once, and a ModernBERT run in two
phases SIGKILLed once in each, each resumed by re-running the same command, end with the weights,
slots, history and eval of an uninterrupted run, having trained on the same batches in order."""

from __future__ import annotations

import random

import pytest

from model.config import BertConfig
from pipeline.schema import read_manifest
from tests.conftest import checkpoint_variables
from tests.reliability.resume import (
    assert_same_variables,
    checkpointed_step,
    history,
    kill_at_steps,
    kill_seed,
    mixture_command,
    pretrain_command,
    read_trace,
    run_to_the_end,
    trained_batches,
    with_flags,
    without_timing,
)

ELECTRA_STEPS = 50  # one kill: test_killed_training.py covers kills in a row and mid-checkpoint
MODERN_STEPS = 40  # phase 1 (33 tokens, batch 8): steps 1-20; phase 2 (45 tokens, batch 6): 21-40

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


def test_a_sigkilled_electra_run_resumes_bit_exactly(small_corpus, tmp_path, report):
    """ELECTRA adds one more random state to the run: the generator's sampler. It is a model
    variable, so the checkpoint holds it; killed once, the run ends with the weights (both
    networks), slots, samples' effects and history of an uninterrupted one."""
    mlm = pretrain_command(small_corpus, tmp_path, ELECTRA_STEPS)

    def electra(model_dir):
        return [*mlm(model_dir), "--objective", "electra", "--generator_size", "0.34"]

    reference = tmp_path / "reference"
    reference_pid = run_to_the_end(electra, reference, tmp_path / "reference.log")
    seed = kill_seed()
    targets = [random.Random(seed).randrange(12, ELECTRA_STEPS - 12)]
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(electra, resumed, targets, tmp_path, seed)
    resumed_from = checkpointed_step(resumed)
    segments.append((run_to_the_end(electra, resumed, tmp_path / "final.log"), resumed_from))

    assert_same_variables(resumed, reference, seed)
    names = checkpoint_variables(reference)
    assert any("sampler_seed" in n or "state" in n for n in names)  # the sampler's state is saved
    assert any("generator_transformer_0" in n for n in names)
    stream = read_trace(reference, reference_pid)
    seen = trained_batches(resumed, segments, ELECTRA_STEPS, seed)
    assert seen == [stream[i] for i in range(ELECTRA_STEPS)], f"seed {seed}"
    rows = history(resumed)
    assert without_timing(rows) == without_timing(history(reference))
    assert "rtd_loss" in rows[-1]
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    report(
        "ELECTRA run SIGKILLed, resumed",
        detail=f"seed {seed}; killed at step {targets[0]}; both networks' weights, "
        f"slots, the sampler's state, history and eval bit-identical to an uninterrupted run",
    )


def test_a_sigkilled_modernbert_run_in_two_phases_resumes_bit_exactly(mixture_corpora, tmp_path, report):
    """ModernBERT's block (odd sizes, 3 layers so one is global, a window of 8 that both lengths
    exceed) in two phases across lengths, RoPE needing no position table to grow: killed once in
    each phase, it ends with the weights, slots, history and eval of an uninterrupted run."""
    vocab = read_manifest(str(mixture_corpora / "docs" / "seq33")).vocab.size
    bert = tmp_path / "modern.json"
    bert.write_text(BertConfig(vocab, architecture="modernbert", hidden_size=24, num_layers=3, num_heads=3,
                               intermediate_size=29, local_attention=8, dropout=0.1,
                               max_position=8192).to_json())  # fmt: skip
    modern = with_flags(mixture_command(mixture_corpora, tmp_path, MODERN_STEPS), bert_config=bert)

    reference = tmp_path / "reference"
    reference_pid = run_to_the_end(modern, reference, tmp_path / "reference.log")
    seed = kill_seed()
    rng = random.Random(seed)
    targets = [rng.randrange(6, 18), rng.randrange(26, 36)]
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(modern, resumed, targets, tmp_path, seed)
    resumed_from = checkpointed_step(resumed)
    segments.append((run_to_the_end(modern, resumed, tmp_path / "final.log"), resumed_from))

    assert_same_variables(resumed, reference, seed)
    assert any("qkv" in n for n in checkpoint_variables(reference))  # ModernBERT's weights
    stream = read_trace(reference, reference_pid)
    seen = trained_batches(resumed, segments, MODERN_STEPS, seed)
    assert seen == [stream[i] for i in range(MODERN_STEPS)], f"seed {seed}"
    assert [len(stream[i].split(",")) for i in (0, MODERN_STEPS - 1)] == [8, 6]  # each phase's batch
    rows = history(resumed)
    assert without_timing(rows) == without_timing(history(reference))
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    report(
        "ModernBERT run in two phases SIGKILLed in each, resumed",
        detail=f"seed {seed}; kills at steps {targets[0]} (seq 33) and {targets[1]} (seq 45); weights, "
        "slots, history and eval bit-identical to an uninterrupted run",
    )
