"""The demo's run on Keras's JAX backend, at the tests' size: it learns, evaluates, logs (history,
TensorBoard, MFU, loss.png) and exports in every format what transformers and TensorFlow load;
warm starts from each format in bf16, and `make adapt BACKEND=jax`. This process is
TensorFlow's; each JAX run is a process of its own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest

from launch.checkpoints import latest, read_checkpoint
from launch.export import restore
from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.schema import read_manifest
from tests.launch.test_jax import REPO, on_jax
from tests.lazy import torch, transformers

pytestmark = pytest.mark.slow  # trains end to end, in processes of their own


def hf_masked_logits(folder: Path, batch: dict) -> np.ndarray:
    """transformers' BertForMaskedLM from `folder`: its logits at the batch's masked positions."""
    hf_model = transformers.BertForMaskedLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        logits = hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(batch["segment_ids"].astype(np.int64)),
        ).logits.numpy()
    positions = batch["masked_lm_positions"].astype(np.int64)[:, :, None]
    return np.take_along_axis(logits, positions, axis=1)


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


@pytest.fixture(scope="module")
def jax_exports(jax_run) -> Path:
    """The run exported in each format under JAX (one process: `launch.export`'s `export_as`)."""
    model_dir, _ = jax_run
    folder = model_dir.parent / "exports"
    script = (
        "import sys\n"
        "from launch.export import export_as\n"
        "for fmt in ('hf', 'google', 'keras'):\n"
        "    print(export_as(fmt, sys.argv[1], f'{sys.argv[2]}/{fmt}'))\n"
    )
    out = on_jax(["-c", script, str(model_dir), str(folder)], model_dir.parent / "exports.log")
    for fmt in ("hf", "google", "keras"):
        assert any(line.endswith(f"({fmt}) to {folder / fmt}") for line in out.splitlines()), out[-2000:]
    return folder


def test_a_jax_run_exports_what_transformers_and_tensorflow_load(jax_run, jax_exports, small_corpus):
    """Each format exported under JAX, read here under TensorFlow: the .keras file gives the
    checkpoint's outputs, Hugging Face's BertForMaskedLM its logits within 1e-4, Google's
    checkpoint its weights under Google's names."""
    import tensorflow as tf

    model_dir, _ = jax_run
    tmp_path = jax_exports
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

    assert np.abs(hf_masked_logits(tmp_path / "hf", batch) - ours).max() <= 1e-4

    word = tf.train.load_variable(
        str(tmp_path / "google" / "bert_model.ckpt"), "bert/embeddings/word_embeddings"
    )
    np.testing.assert_array_equal(word, model.get_layer("token_embedding").embeddings.numpy())


def test_warm_starts_bf16_and_adapt_on_jax(jax_run, jax_exports, small_corpus, python_docs, botchan_wordpiece,
                                           tmp_path):  # fmt: skip
    """A warm start under JAX from each format (a bertbeam run, its Hugging Face and Google
    exports) in bf16, and `make adapt BACKEND=jax` from a release: its head warm-up, its training
    and its Hugging Face export, which transformers loads with the Keras model's logits."""
    from tests.releases import write_release

    model_dir, _ = jax_run
    hf, google = jax_exports / "hf", jax_exports / "google"
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
    ours = np.asarray(model(batch, training=False)["mlm"])
    assert np.abs(hf_masked_logits(root / "out" / "export", batch) - ours).max() <= 1e-4
