"""Continued pretraining from a release with a head warm-up and a faster rate for the fresh head,
SIGKILLed once during the warm-up and once after it, resumed each time by re-running the same
command: it ends with the weights of an uninterrupted run, bit for bit (so a resumed run sets the
fresh layers' rate again), having read the same batches in the same order; and the switch from
head-only to all weights does not restart the data (the stream is the one a run without the
warm-up reads). The same with the token embeddings trained in the warm-up too (`--warmup_embeddings`,
issue 58's embeddings-first phase): their faster rate is the warm-up's only, set again on resume."""

from __future__ import annotations

import functools
import random
import sys
from pathlib import Path

import pytest

from pipeline.schema import read_manifest
from tests.releases import random_model
from tests.reliability.resume import (
    assert_same_variables,
    checkpointed_step,
    kill_at_steps,
    kill_seed,
    read_trace,
    run_to_the_end,
    trained_batches,
)

TRAIN_STEPS, HEAD_STEPS = 60, 20

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


@pytest.fixture(scope="module")
def command(small_corpus, tmp_path_factory):
    release = tmp_path_factory.mktemp("release")
    vocab_size = read_manifest(str(small_corpus)).vocab.size
    random_model("bert_model", vocab_size, max_position=32, seed=5).save_pretrained(str(release))

    def command(model_dir: Path, head_steps: int = HEAD_STEPS, embeddings: bool = False) -> list[str]:
        return [
            sys.executable, "-m", "launch.pretrain", "--data", str(small_corpus),
            "--model_dir", str(model_dir), "--init_checkpoint", f"hf:{release}",
            "--head_warmup_steps", str(head_steps), "--fresh_lr_multiplier", "7", "--global_batch_size", "8",
            "--train_steps", str(TRAIN_STEPS), "--warmup_steps", "10", "--learning_rate", "1e-3",
            "--log_every", "5", "--checkpoint_every", "5", "--eval_every", "30", "--eval_steps", "2",
            "--dynamic_masking", "--trace_batches", "--no-export",
            *(["--warmup_embeddings"] if embeddings else []),
        ]  # fmt: skip

    return command


@pytest.mark.parametrize("embeddings", [False, True], ids=["head", "head+embeddings"])
def test_sigkills_during_and_after_the_head_warm_up_change_nothing(command, embeddings, tmp_path, report):
    command = functools.partial(command, embeddings=embeddings)
    reference = tmp_path / "reference"
    reference_pid = run_to_the_end(command, reference, tmp_path / "reference.log")
    seed = kill_seed()
    rng = random.Random(seed)
    targets = [rng.randrange(7, HEAD_STEPS - 2), rng.randrange(HEAD_STEPS + 7, TRAIN_STEPS - 5)]
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(command, resumed, targets, tmp_path, seed)
    resumed_from = checkpointed_step(resumed)
    segments.append((run_to_the_end(command, resumed, tmp_path / "final.log"), resumed_from))
    log = (tmp_path / "segment0.log").read_text()
    assert f"head warm-up, steps 0-{HEAD_STEPS}:" in log, log[-2000:]
    assert ("and the token embeddings: " in log) == embeddings, log[-2000:]

    assert_same_variables(resumed, reference, seed)
    stream = read_trace(reference, reference_pid)
    assert trained_batches(resumed, segments, TRAIN_STEPS, seed) == [stream[i] for i in range(TRAIN_STEPS)]

    what = "continued pretraining with a head warm-up" + (
        " training the embeddings too" if embeddings else ""
    )
    detail = (f"seed {seed}; kills at steps {targets[0]} (warm-up, steps 0-{HEAD_STEPS}) and {targets[1]}; "
              "weights, slots and the batches read bit-identical to an uninterrupted run")  # fmt: skip
    if embeddings:
        report(f"{what} SIGKILLed twice, resumed", detail=detail)
        return
    # The data runs on across the switch: the same stream as a run with no warm-up.
    plain = tmp_path / "plain"
    without_warm_up = functools.partial(command, head_steps=0)
    plain_stream = read_trace(plain, run_to_the_end(without_warm_up, plain, tmp_path / "plain.log"))
    assert [stream[i] for i in range(TRAIN_STEPS)] == [plain_stream[i] for i in range(TRAIN_STEPS)]
    report(f"{what} SIGKILLed twice, resumed", detail=detail)
