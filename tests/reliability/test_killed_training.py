"""Resume that loses nothing: a run SIGKILLed at random steps three times and once while writing a
checkpoint, resumed each time by re-running the same command, ends with the weights of an
uninterrupted run, having trained on exactly the same examples in the same order. A disk that
fills up while checkpointing stops the run with one line and leaves the previous checkpoint usable:
with space freed, the same command resumes from it and ends with the same weights again."""

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
from tests.conftest import checkpoint_variables

REPO = Path(__file__).resolve().parents[2]
TRAIN_STEPS = 200
CHECKPOINT_EVERY = 10

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


@pytest.fixture(scope="module")
def command(small_corpus, tmp_path_factory):
    bert = tmp_path_factory.mktemp("bert") / "bert.json"
    vocab = read_manifest(str(small_corpus)).vocab.size
    bert.write_text(BertConfig(vocab, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=44,
                               max_position=32).to_json())  # fmt: skip

    def command(model_dir: Path) -> list[str]:
        return [
            sys.executable, "-m", "launch.pretrain", "--data", str(small_corpus),
            "--model_dir", str(model_dir),
            "--bert_config", str(bert), "--global_batch_size", "8", "--train_steps", str(TRAIN_STEPS),
            "--warmup_steps", "20", "--learning_rate", "1e-3", "--log_every", "5",
            "--checkpoint_every", str(CHECKPOINT_EVERY), "--eval_every", "50", "--eval_steps", "2",
            "--dynamic_masking", "--trace_batches", "--no-export",
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


@pytest.fixture(scope="module")
def reference(command, tmp_path_factory) -> tuple[Path, int]:
    """An uninterrupted run: its model_dir and process id (its trace file's name)."""
    model_dir = tmp_path_factory.mktemp("reference") / "run"
    log = model_dir.parent / "reference.log"
    process = start(command(model_dir), log)
    assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    return model_dir, process.pid


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
    """SIGKILLs the run the moment a checkpoint is being written (TF writes `ckpt-N_temp/` first,
    then merges it into `ckpt-N.*`); returns N if that checkpoint was left incomplete."""
    folder = model_dir / "checkpoints"
    while process.poll() is None:
        try:
            writing = [name for name in os.listdir(folder) if "_temp" in name]
        except FileNotFoundError:
            writing = []
        if writing:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
            step = int(writing[0].split("_temp")[0].rsplit("-", 1)[1])
            return step if checkpointed_step(model_dir) < step else None
    return None


def assert_same_variables(found_dir: Path, expected_dir: Path, seed) -> None:
    expected, found = checkpoint_variables(expected_dir), checkpoint_variables(found_dir)
    assert found.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(found[name], expected[name], err_msg=f"seed {seed}: {name}")


def test_sigkills_at_random_steps_and_mid_checkpoint_change_nothing(command, reference, tmp_path, report):
    reference, reference_pid = reference
    seed = int(os.environ.get("RESUME_TEST_SEED", time.time_ns() % 10_000))
    targets = sorted(random.Random(seed).sample(range(12, TRAIN_STEPS - 40), 3))
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(command, resumed, targets, tmp_path, seed)  # (pid, the step it resumed from)
    # Then mid-save: retried if the save won the race and completed before the signal landed.
    torn = None
    for n in range(4):
        resumed_from = checkpointed_step(resumed)
        process = start(command(resumed), tmp_path / f"mid_save{n}.log")
        torn = kill_mid_save(process, resumed)
        assert process.returncode == -signal.SIGKILL, f"seed {seed}: the run ended before its kill"
        segments.append((process.pid, resumed_from))
        if torn is not None:
            break
    assert torn is not None, "no kill landed inside a checkpoint write in 4 tries"
    resumed_from = checkpointed_step(resumed)
    assert resumed_from == torn - CHECKPOINT_EVERY  # the torn one is ignored, the one before is used
    final = start(command(resumed), tmp_path / "final.log")
    assert final.wait(timeout=600) == 0, (tmp_path / "final.log").read_text()[-3000:]
    segments.append((final.pid, resumed_from))

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
    history = [json.loads(line) for line in (resumed / "history.jsonl").read_text().splitlines()]
    reference_history = [json.loads(line) for line in (reference / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == list(range(5, TRAIN_STEPS + 1, 5))
    assert without_timing(history) == without_timing(reference_history)
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
    latest = tf.train.latest_checkpoint(str(reference / "checkpoints"))
    checkpoint_bytes = sum(p.stat().st_size for p in Path(latest).parent.glob(f"{Path(latest).name}.*"))
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


MIXTURE_STEPS = 60  # phase 1 (33 tokens, batch 8): steps 1-30; phase 2 (45 tokens, batch 6): 31-60


@pytest.fixture(scope="module")
def mixture_command(mixture_corpora, tmp_path_factory):
    """A two-corpus mixture trained in two phases: the other way a run reads its data."""
    vocab = read_manifest(str(mixture_corpora / "docs" / "seq33")).vocab.size
    bert = tmp_path_factory.mktemp("bert") / "bert.json"
    bert.write_text(BertConfig(vocab, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=44,
                               max_position=48).to_json())  # fmt: skip
    data = f"docs={mixture_corpora / 'docs'}:2,more={mixture_corpora / 'more'}:1"

    def command(model_dir: Path) -> list[str]:
        return [
            sys.executable, "-m", "launch.pretrain", "--data", data, "--model_dir", str(model_dir),
            "--phases", "33:0.5,45:0.5", "--phase_batch_sizes", "8,6",
            "--bert_config", str(bert), "--train_steps", str(MIXTURE_STEPS), "--warmup_steps", "6",
            "--learning_rate", "1e-3", "--log_every", "5", "--checkpoint_every", str(CHECKPOINT_EVERY),
            "--eval_every", "20", "--eval_steps", "2", "--dynamic_masking", "--trace_batches", "--no-export",
        ]  # fmt: skip

    return command


def test_sigkills_in_a_mixture_and_inside_phase_2_change_nothing(mixture_command, tmp_path, report):
    reference = tmp_path / "reference"
    process = start(mixture_command(reference), tmp_path / "reference.log")
    assert process.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-3000:]
    reference_pid = process.pid

    seed = int(os.environ.get("RESUME_TEST_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    targets = [rng.randrange(12, 28), rng.randrange(42, 56)]  # one kill in each phase
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(mixture_command, resumed, targets, tmp_path, seed)
    resumed_from = checkpointed_step(resumed)
    assert resumed_from > MIXTURE_STEPS // 2, f"seed {seed}: the last resume is not inside phase 2"
    final = start(mixture_command(resumed), tmp_path / "final.log")
    assert final.wait(timeout=600) == 0, (tmp_path / "final.log").read_text()[-3000:]
    segments.append((final.pid, resumed_from))

    assert_same_variables(resumed, reference, seed)
    stream = read_trace(reference, reference_pid)
    assert sorted(stream) == list(range(MIXTURE_STEPS))  # both phases, nothing read past a phase's end
    seen = trained_batches(resumed, segments, MIXTURE_STEPS, seed)
    assert seen == [stream[i] for i in range(MIXTURE_STEPS)], f"seed {seed}"
    assert [len(stream[i].split(",")) for i in (0, MIXTURE_STEPS - 1)] == [8, 6]  # each phase's batch
    history = [json.loads(line) for line in (resumed / "history.jsonl").read_text().splitlines()]
    reference_history = [json.loads(line) for line in (reference / "history.jsonl").read_text().splitlines()]
    assert without_timing(history) == without_timing(reference_history)
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    report(
        "mixture in two phases SIGKILLed in each phase, resumed",
        detail=f"seed {seed}; kills at steps {targets[0]} (seq 33) and {targets[1]} (seq 45); weights, "
        f"slots, history, per-corpus eval bit-identical; {MIXTURE_STEPS} batches each trained once, in order",
    )


ELECTRA_STEPS = 50  # one kill: the MLM cases above cover kills in a row and mid-checkpoint


def test_a_sigkilled_electra_run_resumes_bit_exactly(command, tmp_path, report):
    """ELECTRA adds one more random state to the run: the generator's sampler. It is a model
    variable, so the checkpoint holds it; killed once, the run ends with the weights (both
    networks), slots, samples' effects and history of an uninterrupted one."""

    def electra(model_dir: Path) -> list[str]:
        argv = command(model_dir)
        argv[argv.index("--train_steps") + 1] = str(ELECTRA_STEPS)
        return [*argv, "--objective", "electra", "--generator_size", "0.34"]

    reference = tmp_path / "reference"
    process = start(electra(reference), tmp_path / "reference.log")
    assert process.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-3000:]
    reference_pid = process.pid
    seed = int(os.environ.get("RESUME_TEST_SEED", time.time_ns() % 10_000))
    targets = [random.Random(seed).randrange(12, ELECTRA_STEPS - 12)]
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(electra, resumed, targets, tmp_path, seed)
    resumed_from = checkpointed_step(resumed)
    final = start(electra(resumed), tmp_path / "final.log")
    assert final.wait(timeout=600) == 0, (tmp_path / "final.log").read_text()[-3000:]
    segments.append((final.pid, resumed_from))

    assert_same_variables(resumed, reference, seed)
    names = checkpoint_variables(reference)
    assert any("sampler_seed" in n or "state" in n for n in names)  # the sampler's state is saved
    assert any("generator_transformer_0" in n for n in names)
    stream = read_trace(reference, reference_pid)
    seen = trained_batches(resumed, segments, ELECTRA_STEPS, seed)
    assert seen == [stream[i] for i in range(ELECTRA_STEPS)], f"seed {seed}"
    history = [json.loads(line) for line in (resumed / "history.jsonl").read_text().splitlines()]
    reference_history = [json.loads(line) for line in (reference / "history.jsonl").read_text().splitlines()]
    assert without_timing(history) == without_timing(reference_history)
    assert "rtd_loss" in history[-1]
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    report(
        "ELECTRA run SIGKILLed, resumed",
        detail=f"seed {seed}; killed at step {targets[0]}; both networks' weights, "
        f"slots, the sampler's state, history and eval bit-identical to an uninterrupted run",
    )


MODERN_STEPS = 40  # phase 1 (33 tokens, batch 8): steps 1-20; phase 2 (45 tokens, batch 6): 21-40


def test_a_sigkilled_modernbert_run_in_two_phases_resumes_bit_exactly(mixture_command, tmp_path_factory,
                                                                       tmp_path, report):  # fmt: skip
    """ModernBERT's block (odd sizes, 3 layers so one is global, a window of 8 that both lengths
    exceed) in two phases across lengths, RoPE needing no position table to grow: killed once in
    each phase, it ends with the weights, slots, history and eval of an uninterrupted run."""
    mixture = mixture_command(tmp_path)
    vocab = BertConfig.from_json(Path(mixture[mixture.index("--bert_config") + 1]).read_text()).vocab_size
    bert = tmp_path_factory.mktemp("modern") / "bert.json"
    bert.write_text(BertConfig(vocab, architecture="modernbert", hidden_size=24, num_layers=3, num_heads=3,
                               intermediate_size=29, local_attention=8, dropout=0.1,
                               max_position=8192).to_json())  # fmt: skip

    def modern(model_dir: Path) -> list[str]:
        argv = mixture_command(model_dir)
        argv[argv.index("--bert_config") + 1] = str(bert)
        argv[argv.index("--train_steps") + 1] = str(MODERN_STEPS)
        return argv

    reference = tmp_path / "reference"
    process = start(modern(reference), tmp_path / "reference.log")
    assert process.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-3000:]
    reference_pid = process.pid
    seed = int(os.environ.get("RESUME_TEST_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    targets = [rng.randrange(6, 18), rng.randrange(26, 36)]
    resumed = tmp_path / "resumed"
    segments = kill_at_steps(modern, resumed, targets, tmp_path, seed)
    resumed_from = checkpointed_step(resumed)
    final = start(modern(resumed), tmp_path / "final.log")
    assert final.wait(timeout=600) == 0, (tmp_path / "final.log").read_text()[-3000:]
    segments.append((final.pid, resumed_from))

    assert_same_variables(resumed, reference, seed)
    assert any("qkv" in n for n in checkpoint_variables(reference))  # ModernBERT's weights
    stream = read_trace(reference, reference_pid)
    seen = trained_batches(resumed, segments, MODERN_STEPS, seed)
    assert seen == [stream[i] for i in range(MODERN_STEPS)], f"seed {seed}"
    assert [len(stream[i].split(",")) for i in (0, MODERN_STEPS - 1)] == [8, 6]  # each phase's batch
    history = [json.loads(line) for line in (resumed / "history.jsonl").read_text().splitlines()]
    reference_history = [json.loads(line) for line in (reference / "history.jsonl").read_text().splitlines()]
    assert without_timing(history) == without_timing(reference_history)
    assert history[-1]["loss"] < history[0]["loss"]
    assert (resumed / "eval.json").read_text() == (reference / "eval.json").read_text()
    report(
        "ModernBERT run in two phases SIGKILLed in each, resumed",
        detail=f"seed {seed}; kills at steps {targets[0]} (seq 33) and {targets[1]} (seq 45); weights, "
        "slots, history and eval bit-identical to an uninterrupted run",
    )
