"""The pretraining run, in process, on a real corpus: it learns, logs, evaluates and exports what it
trained; its flags and its configuration errors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from launch.checkpoints import CheckpointError, latest, model_variables, read_checkpoint, read_weights
from launch.config import ConfigError, TrainConfig
from launch.prepare import TrainError, prepare
from launch.train import train
from model.config import BertConfig
from model.encoder import encoder_from
from model.masked_lm import build_pretraining_model
from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.schema import read_manifest

REPO = Path(__file__).resolve().parents[2]


def run_config(corpus, model_dir, bert_config, **overrides) -> TrainConfig:
    values = dict(
        data=str(corpus),
        model_dir=str(model_dir),
        bert_config=str(bert_config),
        global_batch_size=16,
        train_steps=60,
        warmup_steps=5,
        learning_rate=2e-3,
        log_every=10,
        checkpoint_every=30,
        eval_every=30,
        eval_steps=2,
        export=False,
    )
    return TrainConfig(**{**values, **overrides})


@pytest.fixture(scope="module")
def trained(small_corpus, tiny_config, tmp_path_factory) -> Path:
    model_dir = tmp_path_factory.mktemp("run")
    train(run_config(small_corpus, model_dir, tiny_config, export=True, peak_tflops=0.05))
    return model_dir


@pytest.mark.slow
def test_a_run_learns_and_leaves_eval_history_logs_and_a_plot(trained):
    rows = [json.loads(line) for line in (trained / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40, 50, 60]
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5, rows  # the masked-LM loss falls
    assert rows[-1]["mlm_accuracy"] > rows[0]["mlm_accuracy"]
    assert [r["step"] for r in rows if "val_loss" in r] == [30, 60]
    assert rows[0]["learning_rate"] > rows[-1]["learning_rate"] == pytest.approx(0.0, abs=1e-9)
    assert all(r["tokens_per_s"] == pytest.approx(32 * r["examples_per_s"]) for r in rows)
    assert all(0 < r["mfu"] for r in rows)

    evaluation = json.loads((trained / "eval.json").read_text())
    assert evaluation["step"] == 60
    assert evaluation["perplexity"] == pytest.approx(np.exp(evaluation["mlm_loss"]))
    assert (trained / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((trained / "config.json").read_text())["train_steps"] == 60

    tags = {}
    for event_file in (trained / "logs" / "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    for tag in ("loss", "mlm_accuracy", "learning_rate", "examples_per_s", "tokens_per_s", "mfu"):
        assert tags[tag] == [10, 20, 30, 40, 50, 60], tag
    assert list((trained / "logs" / "validation").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_the_evaluation_beats_a_uniform_guess(trained, small_corpus):
    evaluation = json.loads((trained / "eval.json").read_text())
    vocab = read_manifest(str(small_corpus)).vocab.size
    assert evaluation["mlm_loss"] < np.log(vocab) - 1.0
    assert evaluation["examples"] == read_manifest(str(small_corpus)).split("validation").instances // 16 * 16


def _real_batch(corpus: Path) -> dict:
    manifest = read_manifest(str(corpus))
    ds = make_dataset(manifest, "validation", InputConfig(per_replica_batch_size=5, training=False))
    features, _, _ = next(iter(ds))
    return {name: value.numpy() for name, value in features.items()}


@pytest.mark.slow
def test_the_export_reloads_with_the_trained_weights(trained, small_corpus, tiny_config):
    export = trained / "export"
    assert sorted(p.name for p in export.iterdir()) == [
        "bert_config.json", "encoder", "pretraining.keras", "train_config.json", "vocab.model",
    ]  # fmt: skip
    assert (export / "vocab.model").read_bytes() == (small_corpus / "vocab.model").read_bytes()
    bert = BertConfig.from_json((export / "bert_config.json").read_text())
    assert bert == BertConfig.from_json(tiny_config.read_text())

    # The last checkpoint, restored into a freshly built model: what training left.
    reference = build_pretraining_model(bert, 32, 5)
    read_weights(reference, latest(str(trained / "checkpoints")))
    batch = _real_batch(small_corpus)
    expected = reference(batch, training=False)["mlm"].numpy()

    loaded = keras.saving.load_model(export / "pretraining.keras")
    np.testing.assert_array_equal(loaded(batch, training=False)["mlm"].numpy(), expected)

    served = tf.saved_model.load(str(export / "encoder")).signatures["serving_default"]
    rows = {k: tf.constant(batch[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    out = served(**rows)
    single_document = {**rows, "document_ids": rows["input_mask"]}
    direct = encoder_from(loaded)(single_document, training=False)
    np.testing.assert_allclose(out["sequence_output"].numpy(), direct["sequence_output"].numpy(), atol=1e-6)
    np.testing.assert_allclose(out["pooled_output"].numpy(), direct["pooled_output"].numpy(), atol=1e-6)
    assert out["sequence_output"].shape == (5, 32, 24)


@pytest.mark.slow
def test_the_keras_file_loads_in_a_fresh_process_after_import_model(trained):
    script = (
        "import sys, keras, model; m = keras.saving.load_model(sys.argv[1]); print(m.name, sorted(m.output))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(trained / "export" / "pretraining.keras")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.stdout.strip().splitlines()[-1] == "bert_pretraining ['mlm']", result.stderr[-2000:]


@pytest.mark.slow
def test_a_finished_run_re_run_trains_no_further(trained, small_corpus, tiny_config):
    before = (trained / "history.jsonl").read_text()
    summary = train(run_config(small_corpus, trained, tiny_config))
    assert summary["step"] == 60
    assert (trained / "history.jsonl").read_text() == before


@pytest.mark.slow
def test_xla_stays_on_and_the_step_counter_resumes(trained, small_corpus, tiny_config):
    from launch.train import build

    run = prepare(run_config(small_corpus, trained, tiny_config), None)
    assert build(run) == 60
    assert run.model.jit_compile is True  # Keras silently falls back to no XLA in some setups


@pytest.mark.slow
def test_warm_start_takes_weights_but_not_the_step(trained, small_corpus, tiny_config, tmp_path):
    from launch.train import build

    run = prepare(run_config(small_corpus, tmp_path, tiny_config, init_checkpoint=str(trained)), None)
    assert build(run) == 0
    tensors, _ = read_checkpoint(latest(str(trained / "checkpoints")))
    kernel = run.model.get_layer("transformer_1").output_dense.kernel
    np.testing.assert_array_equal(kernel.numpy(), tensors["model/transformer_1/output/kernel"])
    other = BertConfig.from_json(tiny_config.read_text())
    wrong = tmp_path / "wrong.json"
    wrong.write_text(BertConfig(other.vocab_size, hidden_size=12, num_heads=3, intermediate_size=20,
                                max_position=40).to_json())  # fmt: skip
    with pytest.raises(CheckpointError, match=r"^--init_checkpoint .*ckpt-60: does not fit this model"):
        build(prepare(run_config(small_corpus, tmp_path / "w", wrong, init_checkpoint=str(trained)), None))


@pytest.mark.slow
def test_a_padded_vocab_resumes_warm_starts_and_pads_a_release_on_load(
    trained, small_corpus, tiny_config, tmp_path
):
    """--vocab_multiple (128 by default) rounds a preset's token rows up, and a release's, padded
    on load: its rows as they were, the new ones zero; a --bert_config keeps its rows, and a run
    started at other rows resumes at its own."""
    from launch.train import build

    tokens = read_manifest(str(small_corpus)).vocab.size
    short = dict(train_steps=10, checkpoint_every=10, eval_every=10, log_every=10)

    def preset_run(model_dir, **extra):  # --preset tiny, no --bert_config
        config = run_config(small_corpus, model_dir, tiny_config, **short)
        return dataclasses.replace(config, bert_config=None, preset="tiny", **extra)

    fresh = prepare(preset_run(tmp_path / "fresh"), None)
    assert fresh.bert.vocab_size == -(-tokens // 128) * 128 and fresh.bert.tokens == tokens
    assert prepare(run_config(small_corpus, trained, tiny_config), None).bert.vocab_size == tokens

    unpadded_dir = tmp_path / "unpadded"
    train(preset_run(unpadded_dir, vocab_multiple=1))
    run = prepare(preset_run(unpadded_dir), None)  # --vocab_multiple 128, the default
    assert run.bert.vocab_size == tokens and build(run) == 10  # resumed at its own rows

    release, _ = read_checkpoint(latest(str(unpadded_dir / "checkpoints")))
    run = prepare(preset_run(tmp_path / "warm", init_checkpoint=str(unpadded_dir)), None)
    assert build(run) == 0 and run.bert.vocab_size == fresh.bert.vocab_size
    rows = run.model.get_layer("token_embedding").embeddings.numpy()
    np.testing.assert_array_equal(rows[:tokens], release["model/token_embedding/embeddings"])
    assert not rows[tokens:].any()
    with pytest.raises(ConfigError, match=r"--vocab_multiple: expected >= 1, found 0"):
        run_config(small_corpus, tmp_path / "x", tiny_config, vocab_multiple=0)


@pytest.mark.slow
def test_grad_accumulation_matches_one_double_batch(small_corpus, tmp_path):
    """Two batches of 8 accumulated into one update == one update on the same 16 examples (the
    stream is the same examples in the same order); dropout off so both see the same network."""
    vocab = read_manifest(str(small_corpus)).vocab.size
    path = tmp_path / "bert.json"
    path.write_text(BertConfig(vocab, 24, 1, 3, 44, 40, dropout=0.0).to_json())
    common = dict(train_steps=1, warmup_steps=0, log_every=1, checkpoint_every=1, eval_every=1, eval_steps=0)
    one = run_config(small_corpus, tmp_path / "one", path, global_batch_size=16, **common)
    two = run_config(small_corpus, tmp_path / "two", path, global_batch_size=8, grad_accum_steps=2, **common)
    weights = {}
    for name, config in (("one", one), ("two", two)):
        train(config)
        weights[name], _ = read_checkpoint(latest(f"{config.model_dir}/checkpoints"))
    keras.utils.set_random_seed(0)  # as train() does before building: the common starting point
    start = model_variables(build_pretraining_model(BertConfig.from_json(path.read_text()), 32, 5))
    keys = [key for key in start if not key.startswith("state/")]

    def update(name):
        return np.concatenate([(weights[name][f"model/{k}"] - start[k].numpy()).ravel() for k in keys])

    one, two = update("one"), update("two")
    # Each micro-batch's loss is normalised by its own masked-token count and Keras averages the
    # two gradients, where the double batch divides by the total: close, not equal.
    assert np.linalg.norm(one - two) / np.linalg.norm(one) < 0.05
    assert np.linalg.norm(one) > 0.01  # it did move


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_on_cpu(small_corpus, tiny_config, tmp_path, precision):
    config = run_config(small_corpus, tmp_path, tiny_config, mixed_precision=precision, train_steps=4,
                        log_every=2, checkpoint_every=2, eval_every=2, eval_steps=1)  # fmt: skip
    summary = train(config)
    rows = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert summary["step"] == 4 and all(np.isfinite(r["loss"]) for r in rows)
    assert np.isfinite(summary["eval"]["mlm_loss"])
    assert keras.config.dtype_policy().name == "float32"  # restored for whoever runs next


def test_flags_map_onto_the_config():
    config = TrainConfig.from_args(
        ["--data", "d", "--model_dir", "m", "--no-jit_compile", "--global_batch_size", "64",
         "--learning_rate", "3e-4", "--tpu", "grpc://10.0.0.2:8470", "--log_every", "50",
         "--checkpoint_every", "200", "--eval_every", "300"]
    )  # fmt: skip
    assert (config.jit_compile, config.global_batch_size, config.learning_rate) == (False, 64, 3e-4)
    assert config.tpu == "grpc://10.0.0.2:8470" and config.steps_per_epoch == 50


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"preset": "huge"}, "^--preset huge: expected one of tiny, mini"),
        ({"train_steps": 0}, "^--train_steps: expected >= 1, found 0"),
        ({"mixed_precision": "fp8"}, "^--mixed_precision fp8: expected one of none, bf16, fp16$"),
        ({"log_every": 10, "steps_per_execution": 4}, "^--steps_per_execution 4 must divide the 10 batches"),
        ({"trace_batches": True, "model_dir": "gs://b/run"}, "^--trace_batches appends to local files"),
    ],
)
def test_bad_settings_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**{"data": "d", "model_dir": "m", **overrides})


def test_configuration_mistakes_say_what_to_change(small_corpus, tiny_config, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TrainError, match=r"^--data .*empty: has no manifest.json; build a corpus first"):
        prepare(run_config(empty, tmp_path / "m", tiny_config), None)

    bert = BertConfig.from_json(tiny_config.read_text())
    short = tmp_path / "short.json"
    short.write_text(BertConfig(bert.vocab_size, 24, 1, 3, 44, max_position=16).to_json())
    with pytest.raises(
        TrainError, match=r"seq_len 32 exceeds the model's max_position 16; rebuild the corpus"
    ):
        prepare(run_config(small_corpus, tmp_path / "m", short), None)

    other = tmp_path / "other.json"
    other.write_text(BertConfig(bert.vocab_size + 7, 24, 1, 3, 44, 40).to_json())
    with pytest.raises(
        TrainError, match=rf"vocab_size {bert.vocab_size + 7}, the corpus vocab has {bert.vocab_size}"
    ):
        prepare(run_config(small_corpus, tmp_path / "m", other), None)

    with pytest.raises(
        TrainError, match=r"the validation split has \d+ records, fewer than one global batch of 4096"
    ):
        prepare(run_config(small_corpus, tmp_path / "m", tiny_config, global_batch_size=4096), None)


@pytest.mark.slow
def test_a_sentence_order_corpus_trains_both_heads(python_docs, botchan_vocab, tmp_path):
    from tests.conftest import build

    corpus = tmp_path / "sop"
    build(corpus, "--input", str(python_docs / "library" / "b*.rst.txt"), "--vocab", str(botchan_vocab),
          "--seq_len", "32", "--max_predictions", "5", "--dupe_factor", "1", "--mode", "segment_pair",
          "--sop", "--validation_fraction", "0.2")  # fmt: skip
    bert = tmp_path / "bert.json"
    bert.write_text(BertConfig(1000, 24, 1, 3, 44, 32).to_json())
    summary = train(run_config(corpus, tmp_path / "run", bert, train_steps=4, log_every=2, checkpoint_every=2,
                               eval_every=2, eval_steps=1, export=True))  # fmt: skip
    assert 0.0 <= summary["eval"]["nsp_accuracy"] <= 1.0
    rows = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    # The masked-LM loss alone, not the sum with the sentence-order loss.
    assert all(0 < r["loss"] < 7.3 and 0 < r["val_loss"] < 7.3 for r in rows)  # ln 1000 = 6.9; + SOP ~0.7
    loaded = keras.saving.load_model(tmp_path / "run" / "export" / "pretraining.keras")
    assert sorted(loaded.output) == ["mlm", "nsp"]


@pytest.mark.slow
def test_resuming_off_the_log_interval_says_which_flags_to_keep(trained, small_corpus, tiny_config, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(trained, copy)
    before = (copy / "config.json").read_text()
    changed = run_config(small_corpus, copy, tiny_config, train_steps=100, log_every=25, checkpoint_every=25,
                         eval_every=25)  # fmt: skip
    with pytest.raises(
        TrainError, match=r"checkpoint at step 60 falls inside this run's 25-step log interval"
    ):
        train(changed)
    assert (copy / "config.json").read_text() == before  # the record of how it was started stays
