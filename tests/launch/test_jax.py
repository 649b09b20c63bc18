"""Keras on JAX against TensorFlow, on a real corpus: one optimizer step from the same weights
gives the same loss and weights under both backends (BERT, ModernBERT, ELECTRA), a checkpoint
written under one resumes under the other, two devices train as one, and the demo's run on JAX
evaluates, logs and exports what loads in transformers. This process is TensorFlow's; each JAX
run is a process of its own (a process holds one Keras backend)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from launch.checkpoints import latest, read_checkpoint
from launch.config import TrainConfig
from launch.export import restore
from launch.train import train
from model.config import BertConfig
from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.schema import read_manifest
from tests.lazy import torch, transformers
from tests.reliability.resume import mixture_command

REPO = Path(__file__).resolve().parents[2]
PARITY = 1e-5  # float32, the bound for the loss and every weight after one step

pytestmark = pytest.mark.slow  # trains end to end, in processes of their own


def on_jax(args: list[str], log: Path, env: dict | None = None) -> str:
    """`python args` under KERAS_BACKEND=jax; its output (the test fails with its tail)."""
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, "KERAS_BACKEND": "jax", **(env or {})},
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


@pytest.fixture(scope="module")
def jax_run(small_corpus, tiny_config, tmp_path_factory) -> tuple[Path, str]:
    """The demo's run on JAX at the test's size: trains, checkpoints, evaluates, plots, exports."""
    model_dir = tmp_path_factory.mktemp("jax_run") / "run"
    log = on_jax([
        "-m", "launch.pretrain", "--data", str(small_corpus), "--model_dir", str(model_dir),
        "--bert_config", str(tiny_config), "--global_batch_size", "16", "--train_steps", "60",
        "--warmup_steps", "5", "--learning_rate", "2e-3", "--log_every", "10", "--checkpoint_every", "30",
        "--eval_every", "30", "--eval_steps", "2", "--peak_tflops", "0.5",
    ], model_dir.parent / "run.log")  # fmt: skip
    return model_dir, log


def test_the_demo_on_jax_learns_logs_and_evaluates(jax_run):
    import tensorflow as tf

    model_dir, log = jax_run
    assert "backend: jax" in log, log[:2000]
    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40, 50, 60]
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5, rows
    assert all(0 < r["mfu"] < 1 for r in rows)  # MFU against --peak_tflops
    evaluated = json.loads((model_dir / "eval.json").read_text())
    assert evaluated["step"] == 60 and np.isfinite(evaluated["mlm_loss"])
    assert (model_dir / "loss.png").stat().st_size > 1000
    # TensorBoard's own reader finds every logged loss in the event file written without tf.summary.
    events = sorted((model_dir / "logs").rglob("events.out.tfevents.*"))
    losses = {
        event.step: value.simple_value
        for event in tf.compat.v1.train.summary_iterator(str(events[0]))
        for value in event.summary.value
        if value.tag == "loss"
    }
    assert losses == {r["step"]: pytest.approx(r["loss"], rel=1e-6) for r in rows}


def test_a_jax_run_exports_what_transformers_and_tensorflow_load(jax_run, small_corpus, tmp_path):
    """Each format exported under JAX, read here under TensorFlow: the .keras file gives the
    checkpoint's outputs, Hugging Face's BertForMaskedLM its logits within 1e-4, Google's
    checkpoint its weights under Google's names."""
    import tensorflow as tf

    model_dir, _ = jax_run
    for fmt in ("hf", "google", "keras"):
        out = on_jax(["-m", "launch.export", "--model_dir", str(model_dir), "--format", fmt,
                      "--output", str(tmp_path / fmt)], tmp_path / f"{fmt}.log")  # fmt: skip
        assert any(line.endswith(f"({fmt}) to {tmp_path / fmt}") for line in out.splitlines()), out[-2000:]
    model = restore(str(model_dir))[0]
    x, _, _ = next(
        iter(make_dataset(read_manifest(str(small_corpus)), "validation", InputConfig(8, training=False)))
    )
    batch = {k: np.asarray(v) for k, v in x.items()}
    batch["document_ids"] = batch["input_mask"]  # one document per row, as Hugging Face sees a row
    ours = np.asarray(model(batch, training=False)["mlm"])

    loaded = keras.saving.load_model(tmp_path / "keras" / "pretraining.keras")
    np.testing.assert_allclose(np.asarray(loaded(batch, training=False)["mlm"]), ours, atol=1e-5)
    in_run = keras.saving.load_model(model_dir / "export" / "pretraining.keras")  # the run's own export
    np.testing.assert_allclose(np.asarray(in_run(batch, training=False)["mlm"]), ours, atol=1e-5)

    hf_model = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        logits = hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(batch["segment_ids"].astype(np.int64)),
        ).logits.numpy()
    positions = batch["masked_lm_positions"].astype(np.int64)[:, :, None]
    assert np.abs(np.take_along_axis(logits, positions, axis=1) - ours).max() <= 1e-4

    word = tf.train.load_variable(
        str(tmp_path / "google" / "bert_model.ckpt"), "bert/embeddings/word_embeddings"
    )
    np.testing.assert_array_equal(word, model.get_layer("token_embedding").embeddings.numpy())


def test_warm_starts_bf16_and_adapt_on_jax(jax_run, small_corpus, python_docs, botchan_wordpiece, tmp_path):
    """A warm start under JAX from each format (a bertbeam run, its Hugging Face and Google
    exports) in bf16, and `make adapt BACKEND=jax` from a release: its head warm-up, its training
    and its Hugging Face export, which transformers loads with the Keras model's logits."""
    from tests.releases import write_release

    model_dir, _ = jax_run
    hf, google = tmp_path / "hf", tmp_path / "google"
    for fmt, out in (("hf", hf), ("google", google)):
        on_jax(["-m", "launch.export", "--model_dir", str(model_dir), "--format", fmt, "--output", str(out)],
               tmp_path / f"{fmt}.log")  # fmt: skip
    script = (
        "import sys, json\n"
        "from launch.config import TrainConfig\n"
        "from launch.train import train\n"
        "data, out, *sources = sys.argv[1:]\n"
        "for n, source in enumerate(sources):\n"
        "    argv = ['--data', data, '--model_dir', f'{out}/warm{n}', '--init_checkpoint', source,\n"
        "            '--global_batch_size', '8', '--train_steps', '4', '--warmup_steps', '1',\n"
        "            '--log_every', '2', '--checkpoint_every', '4', '--eval_every', '4',\n"
        "            '--eval_steps', '1', '--no-export', '--mixed_precision', 'bf16']\n"
        "    print(json.dumps(train(TrainConfig.from_args(argv))))\n"
    )
    sources = [str(model_dir), f"hf:{hf}", str(google)]
    log = on_jax(["-c", script, str(small_corpus), str(tmp_path), *sources], tmp_path / "warm.log")
    for n, source in enumerate(sources):
        rows = [json.loads(x) for x in (tmp_path / f"warm{n}" / "history.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [2, 4] and all(np.isfinite(r["loss"]) for r in rows), log[-2000:]
        # From trained weights, not from scratch: the first loss is the run's, well below ln(vocab).
        assert rows[0]["loss"] < 0.8 * np.log(read_manifest(str(small_corpus)).vocab.size), (source, rows)

    root = tmp_path / "adapt"
    release = write_release(root / "release", "bert_model", botchan_wordpiece, seed=3)
    done = subprocess.run(
        ["make", "adapt", "BACKEND=jax", f"RELEASE={root / 'release'}",
         f"INPUT={python_docs}/library/b*.rst.txt", f"OUT={root / 'out'}", "TRAIN_STEPS=20",
         "ARGS=--doc_per_file --seq_len 33 --max_predictions 5 --validation_fraction 0.3",
         "TRAIN_ARGS=--strategy cpu --global_batch_size 4 --eval_steps 1 --keep_checkpoints 10"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "backend: jax" in done.stdout + done.stderr
    # The head warm-up (2 steps) froze every weight the release had, slots included, as on TensorFlow.
    head, _ = read_checkpoint(str(root / "out" / "run" / "checkpoints" / "ckpt-2"))
    end, _ = read_checkpoint(latest(str(root / "out" / "run" / "checkpoints")))
    kernel = "model/transformer_1/output/kernel"
    np.testing.assert_array_equal(
        head[kernel], release.encoder.layer[1].output.dense.weight.detach().numpy().T
    )
    assert not head["optimizer/layerwise_adam_w/transformer_1_output_kernel_momentum"].any()
    assert head["optimizer/layerwise_adam_w/mlm_bias_bias_momentum"].any()  # the fresh head learned
    assert np.abs(end[kernel] - head[kernel]).max() > 0  # then everything trained
    model = restore(str(root / "out" / "run"))[0]
    manifest = read_manifest(str(root / "out" / "corpus"))
    x, _, _ = next(iter(make_dataset(manifest, "validation", InputConfig(2, training=False))))
    batch = {k: np.asarray(v) for k, v in x.items()}
    batch["document_ids"] = batch["input_mask"]
    hf_model = transformers.BertForMaskedLM.from_pretrained(str(root / "out" / "export")).eval()
    with torch.no_grad():
        logits = hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(batch["segment_ids"].astype(np.int64)),
        ).logits.numpy()
    positions = batch["masked_lm_positions"].astype(np.int64)[:, :, None]
    ours = np.asarray(model(batch, training=False)["mlm"])
    assert np.abs(np.take_along_axis(logits, positions, axis=1) - ours).max() <= 1e-4


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
