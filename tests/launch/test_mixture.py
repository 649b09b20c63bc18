"""Training on a weighted mixture and in two phases of sequence length, for real: the proportions
in the batches a run actually trained on, per-corpus evaluation, a phase boundary that carries
the step counter and optimizer slots into the longer model, export from the run's own files."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from launch.checkpoints import optimizer_variables, read_checkpoint
from launch.config import TrainConfig
from launch.optimizer import WarmupLinearDecay
from launch.prepare import TrainError, prepare
from launch.streams import Trace
from launch.train import build, train
from model.config import BertConfig
from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.schema import read_manifest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bert_config(mixture_corpora, tmp_path_factory) -> Path:
    vocab = read_manifest(str(mixture_corpora / "docs" / "seq33")).vocab.size
    path = tmp_path_factory.mktemp("bert") / "bert.json"
    path.write_text(BertConfig(vocab, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=44,
                               max_position=48).to_json())  # fmt: skip
    return path


def config(model_dir: Path, data: str, bert: Path, **overrides) -> TrainConfig:
    values = dict(data=data, model_dir=str(model_dir), bert_config=str(bert), strategy="cpu",
                  global_batch_size=8, train_steps=60, warmup_steps=6, learning_rate=1e-3, log_every=5,
                  checkpoint_every=30, eval_every=20, eval_steps=3, export=False, seed=3)  # fmt: skip
    return TrainConfig(**{**values, **overrides})


def fingerprints(folder: Path) -> set[str]:
    """The trace's fingerprint of every train record of a corpus (as launch/streams.py computes it)."""
    manifest = read_manifest(str(folder))
    found = set()
    for features, labels, _ in make_dataset(manifest, "train", InputConfig(1, training=False)):
        content = tf.concat([features["input_ids"], features["masked_lm_positions"], labels["mlm"]], axis=1)
        found.update(Trace.digests(content.numpy()))
    return found


def traced_examples(model_dir: Path) -> list[str]:
    [trace] = (model_dir / "trace").glob("*.tsv")
    return [row for line in trace.read_text().splitlines() for row in line.split("\t")[1].split(",")]


def test_a_mixture_trains_at_its_rates_and_evaluates_each_corpus(mixture_corpora, bert_config, tmp_path):
    docs, more = mixture_corpora / "docs" / "seq33", mixture_corpora / "more" / "seq33"
    model_dir = tmp_path / "run"
    summary = train(config(model_dir, f"docs={docs}:3,more={more}:1", bert_config, trace_batches=True))

    # The batches trained on: every example is a record of one of the two, at 3:1 (more/ is
    # eleven times the size of docs/, so rates by size would give docs 8 %).
    by_source = {"docs": fingerprints(docs), "more": fingerprints(more)}
    assert not by_source["docs"] & by_source["more"]
    examples = traced_examples(model_dir)
    assert len(examples) == 60 * 8
    counts = Counter(next(n for n, prints in by_source.items() if e in prints) for e in examples)
    assert sum(counts.values()) == len(examples)
    assert abs(counts["docs"] / len(examples) - 0.75) < 0.06  # 3 sigma at 480 draws

    resolved = json.loads((model_dir / "config.json").read_text())["resolved"]["phases"]
    [phase] = resolved
    assert {n: c["rate"] for n, c in phase["corpora"].items()} == {"docs": 0.75, "more": 0.25}
    records = read_manifest(str(docs)).split("train").instances
    assert phase["corpora"]["docs"]["expected_epochs"] == pytest.approx(0.75 * 480 / records)

    # eval.json: the mixture as a whole (today's keys) and each corpus under sources.
    results = json.loads((model_dir / "eval.json").read_text())
    assert results == summary["eval"]
    assert set(results) == {"step", "examples", "mlm_loss", "mlm_accuracy", "perplexity", "sources"}
    sources = results["sources"]
    assert set(sources) == {"docs", "more"}
    for name, folder in (("docs", docs), ("more", more)):
        assert sources[name]["examples"] == read_manifest(str(folder)).split("validation").instances // 8 * 8
        assert sources[name]["perplexity"] == pytest.approx(np.exp(sources[name]["mlm_loss"]))
    assert results["examples"] == sources["docs"]["examples"] + sources["more"]["examples"]
    # The whole is the example-weighted mean of the parts (equal batches): two evaluations agree.
    weighted = sum(s["mlm_loss"] * s["examples"] for s in sources.values()) / results["examples"]
    assert results["mlm_loss"] == pytest.approx(weighted, rel=1e-5)
    assert sources["docs"]["mlm_loss"] != pytest.approx(sources["more"]["mlm_loss"], rel=1e-4)

    # Per-corpus curves: history rows and TensorBoard runs beside the mixture's.
    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    evaluated = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in evaluated] == [20, 40, 60]
    assert all(set(r["val_sources"]) == {"docs", "more"} for r in evaluated)
    for name in ("docs", "more"):
        events = list((model_dir / "logs" / f"validation-{name}").glob("events.*"))
        tags = {v.tag for e in tf.compat.v1.train.summary_iterator(str(events[0])) for v in e.summary.value}
        assert {"loss", "mlm_accuracy"} <= tags

    # The same seed, the same batches.
    again = tmp_path / "again"
    train(config(again, f"docs={docs}:3,more={more}:1", bert_config, trace_batches=True, eval_steps=0))
    assert traced_examples(again) == examples


def test_two_phases_carry_the_run_into_the_longer_model(mixture_corpora, bert_config, tmp_path):
    # Copies: the run must not need its corpora after training (export reads model_dir/corpus/).
    data = tmp_path / "data"
    for name in ("docs", "more"):
        shutil.copytree(mixture_corpora / name, data / name)
    model_dir = tmp_path / "run"
    phased = config(model_dir, f"docs={data / 'docs'}:1,more={data / 'more'}:1", bert_config,
                    train_steps=40, phases="33:0.5,45:0.5", phase_batch_sizes="8,4", checkpoint_every=15,
                    eval_every=10, keep_checkpoints=10, max_epochs_warning=0.1)  # fmt: skip
    summary = train(phased)
    assert summary["step"] == 40

    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    assert [(r["step"], r["seq_len"]) for r in rows] == [(s, 33 if s <= 20 else 45) for s in range(5, 41, 5)]
    schedule = WarmupLinearDecay(1e-3, 6, 40)  # one schedule over both phases
    for r in rows:
        assert r["learning_rate"] == pytest.approx(float(schedule(r["step"])), rel=1e-6)
    resolved = json.loads((model_dir / "config.json").read_text())["resolved"]["phases"]
    [warning] = json.loads((model_dir / "config.json").read_text())["resolved"]["warnings"]
    epochs = 0.5 * 20 * 8 / read_manifest(str(data / "docs" / "seq33")).split("train").instances
    assert epochs > 0.1  # docs/ at 33 tokens only; more/ is eleven times larger
    assert warning.startswith(
        f"docs ({data / 'docs' / 'seq33'}) will be read {epochs:.1f} times in phase 1 (>"
    )
    assert [(p["seq_len"], p["steps"], p["global_batch_size"]) for p in resolved] == [
        (33, [0, 20], 8),
        (45, [20, 40], 4),
    ]
    # Checkpoints at 15 and 30 as asked, and at 20, the end of phase 1.
    steps = sorted(
        int(p.name.split("-")[1].split(".")[0])
        for p in (model_dir / "checkpoints").glob("ckpt-*.safetensors")
    )
    assert steps == [15, 20, 30, 40]

    # Phase 2 starts from exactly what phase 1 left: weights, slots and step counter, restored
    # into the 45-token model (checkpoint keys are variable paths, the same at every length).
    boundary = tmp_path / "boundary"
    shutil.copytree(model_dir / "checkpoints", boundary / "checkpoints")
    (boundary / "checkpoints" / "checkpoints.json").write_text(
        json.dumps({"checkpoints": ["ckpt-15", "ckpt-20"]})
    )
    run = prepare(TrainConfig(**{**vars(phased), "model_dir": str(boundary), "restart_warmup": True}), None)
    assert build(run, run.stages[1]) == 20
    assert run.model.inputs[0].shape[1] == 45
    saved = str(boundary / "checkpoints" / "ckpt-20")
    restored = optimizer_variables(run.model.optimizer)
    assert sum("momentum" in k or "velocity" in k for k in restored) == 2 * len(run.model.trainable_variables)
    tensors, _ = read_checkpoint(saved)
    for key, variable in restored.items():
        np.testing.assert_array_equal(variable.numpy(), tensors[f"optimizer/{key}"], err_msg=key)
    assert int(run.model.optimizer.iterations.numpy()) == 20
    assert any(np.abs(v.numpy()).sum() > 0 for k, v in restored.items() if "velocity" in k)
    assert run.model.optimizer.learning_rate.numpy() == pytest.approx(0.0)  # its warmup starts again at 20

    # The run's corpus for export is its own copy; the data can go.
    shutil.rmtree(data)
    manifest = read_manifest(str(model_dir / "corpus"))
    assert manifest.seq_len == 45
    from launch.export import export_as

    assert "(hf)" in export_as("hf", str(model_dir), str(tmp_path / "hf"))
    assert (tmp_path / "hf" / "vocab.txt").exists() or (tmp_path / "hf" / "tokenizer.json").exists()


def test_phase_mistakes_are_one_line(mixture_corpora, bert_config, tiny_config, tmp_path):
    docs = mixture_corpora / "docs"
    from launch.strategy import StrategyError

    with pytest.raises(
        StrategyError, match=rf"^--data more={mixture_corpora}/more: a TPU reads and writes only gs://"
    ):
        prepare(config("gs://b/run", f"docs=gs://b/docs,more={mixture_corpora}/more", bert_config,
                       strategy="tpu"), None)  # fmt: skip
    with pytest.raises(
        TrainError, match=r"^--data .*docs/seq45: seq_len 45 exceeds the model's max_position 40"
    ):
        prepare(config(tmp_path / "m", str(docs), tiny_config, phases="33:0.5,45:0.5"), None)
    with pytest.raises(TrainError, match=r"no seq64/ corpus \(found lengths 33, 45\)"):
        prepare(config(tmp_path / "m", str(docs), bert_config, phases="33:0.5,64:0.5"), None)
    with pytest.raises(
        TrainError,
        match=r"^--dynamic_masked_lm_prob 0.3: needs 12 masked positions per row at "
        r"seq_len 33, .*seq33 stores 8; rebuild it with --max_predictions 12",
    ):
        prepare(config(tmp_path / "m", str(docs / "seq33"), bert_config, dynamic_masking=True,
                       dynamic_masked_lm_prob=0.3), None)  # fmt: skip
