"""Keras on JAX against TensorFlow, on a real corpus: one optimizer step from the same weights
gives the same loss and weights under both backends (BERT, ModernBERT, ELECTRA), a checkpoint
written under one resumes under the other, two devices and two processes train as one, a run
where TensorFlow does not import, and the one-line refusals (the demo's run on JAX:
test_jax_run.py). This process is TensorFlow's; each JAX run is a process of its own (a process
holds one Keras backend)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launch.checkpoints import latest, read_checkpoint
from launch.config import TrainConfig
from launch.train import train
from model.config import BertConfig
from pipeline.schema import read_manifest
from tests.lazy import transformers
from tests.reliability.resume import mixture_command

REPO = Path(__file__).resolve().parents[2]
PARITY = 1e-5  # float32, the bound for the loss and every weight after one step

pytestmark = pytest.mark.slow  # trains end to end, in processes of their own


def on_jax(args: list[str], log: Path, env: dict | None = None) -> str:
    """`python args` under KERAS_BACKEND=jax; its output (the test fails with its tail)."""
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, **(env or {}), "KERAS_BACKEND": "jax"},  # `make test` exports tensorflow
    )  # fmt: skip
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout + done.stderr


def flags(corpus: Path, model_dir: Path, bert: Path, steps: int, *extra: str) -> list[str]:
    return [
        "--data", str(corpus), "--model_dir", str(model_dir), "--bert_config", str(bert),
        "--global_batch_size", "8", "--train_steps", str(steps), "--warmup_steps", "0",
        "--learning_rate", "1e-3", "--end_learning_rate", "1e-3", "--log_every", "1",
        "--checkpoint_every", "1", "--eval_every", "100", "--eval_steps", "0", "--no-export", *extra,
    ]  # fmt: skip


def assert_close(found: Path, expected: Path, step: int, tolerance: float) -> None:
    """Checkpoint `step` of two runs: the same tensors within `tolerance`, and the same loss."""
    a, meta_a = read_checkpoint(f"{found}/checkpoints/ckpt-{step}")
    b, meta_b = read_checkpoint(f"{expected}/checkpoints/ckpt-{step}")
    assert a.keys() == b.keys()
    worst = max((float(np.abs(a[k].astype(np.float64) - b[k]).max()), k) for k in a)
    assert worst[0] <= tolerance, f"step {step}: {worst[1]} differs by {worst[0]:.3g} ({meta_a} / {meta_b})"
    losses = [json.loads((d / "history.jsonl").read_text().splitlines()[-1]) for d in (found, expected)]
    assert losses[0]["step"] == losses[1]["step"] == step
    assert abs(losses[0]["loss"] - losses[1]["loss"]) <= tolerance * max(1.0, abs(losses[1]["loss"]))


@pytest.mark.parametrize("kind", ["bert", "modernbert", "electra"])
def test_one_step_gives_the_same_loss_and_weights_under_both_backends(kind, small_corpus, tmp_path):
    """TensorFlow trains step 1; from that checkpoint, each backend trains step 2 on the same
    batch: the same loss and weights (and optimizer slots) within 1e-5. Dropout is 0, the one
    random draw that differs by backend; ELECTRA's sampler draws the same on both. For BERT the
    JAX checkpoint then resumes under TensorFlow: step 3 as TensorFlow's own step 3."""
    vocab = read_manifest(str(small_corpus)).vocab.size
    shape = dict(hidden_size=24, num_heads=3, dropout=0.0)
    config = (
        BertConfig(
            vocab,
            architecture="modernbert",
            num_layers=3,
            intermediate_size=29,
            local_attention=8,
            max_position=8192,
            **shape,
        )  # fmt: skip
        if kind == "modernbert"
        else BertConfig(vocab, num_layers=2, intermediate_size=44, max_position=32, **shape)
    )
    bert = tmp_path / "bert.json"
    bert.write_text(config.to_json())
    extra = ["--objective", "electra", "--generator_size", "0.34"] if kind == "electra" else []
    tf_run, jax_run = tmp_path / "tensorflow", tmp_path / "jax"

    def run(model_dir: Path, steps: int) -> TrainConfig:
        return TrainConfig.from_args(flags(small_corpus, model_dir, bert, steps, *extra))

    train(run(tf_run, 1))
    shutil.copytree(tf_run, jax_run)
    train(run(tf_run, 2))
    on_jax(["-m", "launch.pretrain", *flags(small_corpus, jax_run, bert, 2, *extra)], tmp_path / "jax.log")
    assert read_checkpoint(f"{jax_run}/checkpoints/ckpt-2")[1]["backend"] == "jax"
    assert_close(jax_run, tf_run, 2, PARITY)
    a, _ = read_checkpoint(f"{jax_run}/checkpoints/ckpt-2")
    b, _ = read_checkpoint(f"{tf_run}/checkpoints/ckpt-1")
    assert max(np.abs(a[k] - b[k]).max() for k in a if k.startswith("model/")) > 100 * PARITY  # it moved

    if kind == "bert":  # and back: JAX's checkpoint resumed under TensorFlow
        train(run(jax_run, 3))
        train(run(tf_run, 3))
        assert_close(jax_run, tf_run, 3, PARITY)


def test_two_devices_train_as_one_in_a_mixture_in_two_phases(mixture_corpora, tmp_path):
    """keras.distribution's DataParallel over two CPU devices (XLA's host device count) against
    one device, the same global batches: a two-corpus mixture in two phases (33 tokens in 8s,
    then 45 in 6s), dynamic masking, dropout on. The weights agree within float32 tolerance."""
    command = mixture_command(mixture_corpora, tmp_path, 16)
    runs = {}
    for devices in (1, 2):
        model_dir = tmp_path / f"devices{devices}"
        xla = f"--xla_force_host_platform_device_count={devices}"
        argv = [a for a in command(model_dir)[1:] if a != "--trace_batches"]
        log = on_jax([*argv, "--strategy", "cpu"], tmp_path / f"{devices}.log", {"XLA_FLAGS": xla})
        assert f"JaxStrategy({devices} CPU device(s)" in log, log[-2000:]
        runs[devices] = model_dir
    a, _ = read_checkpoint(latest(str(runs[1] / "checkpoints")))
    b, _ = read_checkpoint(latest(str(runs[2] / "checkpoints")))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-5, err_msg=key)
    rows = [
        [json.loads(x)["loss"] for x in (d / "history.jsonl").read_text().splitlines()] for d in runs.values()
    ]
    np.testing.assert_allclose(rows[1], rows[0], rtol=1e-5)


def test_a_run_where_tensorflow_does_not_import(small_corpus, tiny_config, without_tensorflow, tmp_path):
    """As on the GPU image: pretraining on JAX with `import tensorflow` failing (Beam's too) reads
    the shards, checkpoints, resumes, evaluates, logs and exports for transformers; only the
    encoder's SavedModel, TensorFlow's own format, is left out, with a note."""
    model_dir = tmp_path / "run"
    command = ["-m", "launch.pretrain", "--data", str(small_corpus), "--model_dir", str(model_dir),
               "--bert_config", str(tiny_config), "--global_batch_size", "8", "--warmup_steps", "2",
               "--log_every", "5", "--checkpoint_every", "5", "--eval_every", "10", "--eval_steps", "2",
               "--dynamic_masking"]  # fmt: skip
    on_jax([*command, "--train_steps", "5", "--no-export"], tmp_path / "first.log", without_tensorflow)
    log = on_jax([*command, "--train_steps", "10"], tmp_path / "second.log", without_tensorflow)
    assert "resuming at step 5" in log, log[-2000:]
    assert json.loads((model_dir / "eval.json").read_text())["step"] == 10
    assert sorted(p.name for p in (model_dir / "export").iterdir()) == [
        "bert_config.json", "pretraining.keras", "train_config.json", "vocab.model",
    ]  # fmt: skip
    assert "SavedModel" in log and "tensorflow" in log.lower()
    assert list((model_dir / "logs").rglob("events.out.tfevents.*"))
    on_jax(["-m", "launch.export", "--model_dir", str(model_dir), "--format", "hf", "--output",
            str(tmp_path / "hf")], tmp_path / "hf.log", without_tensorflow)  # fmt: skip
    assert transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf")) is not None


@pytest.mark.parametrize(
    "backend, flags, line",
    [
        (
            "torch",
            [],
            r"^error: KERAS_BACKEND=torch: bertbeam trains on tensorflow or jax; set KERAS_BACKEND=jax",
        ),
        ("numpy", [], r"^error: KERAS_BACKEND=numpy: bertbeam trains on tensorflow or jax"),
        (
            "jax",
            ["--strategy", "gpu"],
            r"^error: --strategy gpu: no GPU is visible to JAX \(it sees cpu devices\)",
        ),
        (
            "jax",
            ["--deterministic"],
            r"^error: --deterministic sets TensorFlow's op determinism, and this run is on jax",
        ),
        ("jax", ["--tpu", "local"], r"^error: --tpu "),
    ],
)
def test_a_backend_or_flag_it_cannot_honour_is_one_line(
    backend, flags, line, small_corpus, tiny_config, tmp_path
):
    import re

    done = subprocess.run(
        [sys.executable, "-m", "launch.pretrain", "--data", str(small_corpus), "--model_dir", str(tmp_path),
         "--bert_config", str(tiny_config), "--train_steps", "2", *flags],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "KERAS_BACKEND": backend},
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and lines and re.match(line, lines[-1]), done.stderr[-2000:]
    assert not any(line.startswith("Traceback") for line in lines)
    assert not (tmp_path / "checkpoints").exists()


def test_two_processes_on_loopback_train_one_model(small_corpus, tiny_config, tmp_path):
    """`--strategy multi_worker` on JAX: two processes joined by `jax.distributed` (Keras's
    KERAS_DISTRIBUTION_* variables), one CPU device each, train one model: the same losses and
    evaluation in both, process 0 alone writing model_dir, process 1 into a scratch folder."""
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    model_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "launch.pretrain", "--data", str(small_corpus), "--model_dir", str(model_dir),
        "--bert_config", str(tiny_config), "--global_batch_size", "8", "--train_steps", "10",
        "--warmup_steps", "2", "--log_every", "5", "--checkpoint_every", "5", "--eval_every", "10",
        "--eval_steps", "2", "--no-export", "--strategy", "multi_worker",
    ]  # fmt: skip
    addresses = ",".join(f"127.0.0.1:{p}" for p in ports)
    processes, logs = [], []
    for index in range(2):
        env = {**os.environ, "KERAS_BACKEND": "jax", "KERAS_DISTRIBUTION_JOB_ADDRESSES": addresses,
               "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
               "KERAS_DISTRIBUTION_PROCESS_ID": str(index)}  # fmt: skip
        logs.append(tmp_path / f"process{index}.log")
        processes.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=logs[-1].open("w"),
                                          stderr=subprocess.STDOUT))  # fmt: skip
    for process, log in zip(processes, logs, strict=True):
        assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    texts = [log.read_text() for log in logs]
    assert all("JaxStrategy(2 CPU device(s), 2 process(es))" in t for t in texts), texts[0][-2000:]

    def progress(text: str) -> list[str]:  # Keras's lines, less their timings
        return [line.split(" - ", 3)[-1].split(" - examples/s")[0] for line in text.splitlines()
                if line.startswith("5/5")]  # fmt: skip

    assert progress(texts[0]) == progress(texts[1]) and len(progress(texts[0])) == 2
    assert json.loads((model_dir / "eval.json").read_text())["step"] == 10
    assert sorted(p.name for p in (model_dir / "checkpoints").glob("*.safetensors")) == [
        "ckpt-10.safetensors", "ckpt-5.safetensors",
    ]  # fmt: skip
    assert "worker 1:" in texts[1] and "worker 1:" not in texts[0]
