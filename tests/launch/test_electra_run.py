"""An ELECTRA run end to end on a real corpus: it learns both objectives and logs the
discriminator's figures, launch.evaluate reports them, the export has both networks, and
launch.finetune fine-tunes the discriminator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from launch.checkpoints import latest, read_checkpoint
from launch.evaluate import evaluate_corpus
from launch.export import ExportError, export_as
from launch.finetune import finetune
from launch.finetune.pretrained import pretrained
from launch.train import train
from model.encoder import build_encoder
from tests.launch.test_finetune import config, topics  # noqa: F401 - the labelled topics fixture
from tests.launch.test_pretrain import run_config

pytestmark = pytest.mark.slow  # trains end to end

FIGURES = ("rtd_loss", "rtd_accuracy", "rtd_precision", "rtd_recall", "replaced_fraction")


@pytest.fixture(scope="module")
def electra_run(small_corpus, tiny_config, tmp_path_factory) -> Path:
    model_dir = tmp_path_factory.mktemp("electra_run")
    train(run_config(small_corpus, model_dir, tiny_config, objective="electra", generator_size=1 / 3,
                     train_steps=60, export=True))  # fmt: skip
    return model_dir


def test_both_objectives_learn_and_every_figure_is_logged(electra_run):
    rows = [json.loads(line) for line in (electra_run / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40, 50, 60]
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.3, rows  # the generator's masked LM
    assert rows[-1]["rtd_loss"] < rows[0]["rtd_loss"], rows
    for row in rows:
        assert set(FIGURES) <= set(row)
        assert 0.05 < row["replaced_fraction"] < 0.2  # ~15 % masked, most samples differ early
    assert [r["step"] for r in rows if "val_rtd_accuracy" in r] == [30, 60]
    evaluation = json.loads((electra_run / "eval.json").read_text())
    assert set(FIGURES) <= set(evaluation) and "nsp_accuracy" not in evaluation
    # More than the base rate: a discriminator that always says "original" scores 1 - replaced.
    assert evaluation["rtd_accuracy"] >= 1 - evaluation["replaced_fraction"] - 1e-6
    tags = set()
    for event_file in (electra_run / "logs" / "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            tags |= {value.tag for value in event.summary.value}
    assert set(FIGURES) <= tags


def test_evaluate_reports_the_objectives_figures(electra_run, small_corpus):
    found = evaluate_corpus(str(electra_run), str(small_corpus), batch_size=16)
    final = json.loads((electra_run / "eval.json").read_text())
    assert found["objective"] == "electra"
    for name in ("mlm_loss", "mlm_accuracy", "rtd_loss", "replaced_fraction"):
        assert name in found
    # The same split and weights; only the generator's samples differ (the sampler has moved on).
    assert found["mlm_loss"] == pytest.approx(final["mlm_loss"], rel=1e-4)
    assert found["rtd_accuracy"] == pytest.approx(final["rtd_accuracy"], abs=0.05)


def test_the_export_holds_both_networks(electra_run, tmp_path):
    line = export_as("hf", str(electra_run), str(tmp_path / "hf"))
    assert "ElectraForPreTraining" in line and "ElectraForMaskedLM" in line
    for part, architecture in (
        ("discriminator", "ElectraForPreTraining"),
        ("generator", "ElectraForMaskedLM"),
    ):
        config_json = json.loads((tmp_path / "hf" / part / "config.json").read_text())
        assert config_json["architectures"] == [architecture]
        assert (tmp_path / "hf" / part / "model.safetensors").exists()
    with pytest.raises(ExportError, match="ELECTRA run exports as hf"):
        export_as("google", str(electra_run), str(tmp_path / "google"))
    assert (electra_run / "export" / "pretraining.keras").exists()  # the Keras export at the end


def test_fine_tuning_an_electra_run_starts_from_its_discriminator(electra_run, topics):  # noqa: F811
    result = finetune(config(electra_run, topics, epochs=2, export=False))
    results = json.loads((Path(result["output"]) / "eval.json").read_text())
    recipe = results["recipe"]
    assert recipe["objective"] == "electra" and recipe["pooling"] == "mean"  # no NSP: no trained pooler
    assert recipe["fresh"] == ["classifier"]  # every encoder weight came from the run
    assert results["test"]["accuracy"] > 0.4  # three topics: chance is about 0.33
    # The encoder it starts from holds the run's discriminator, weight for weight.
    source = pretrained(config(electra_run, topics))
    encoder = build_encoder(source.bert, 32)
    assert source.load(encoder) == ["pooler"]
    tensors, _ = read_checkpoint(latest(str(electra_run / "checkpoints")))
    for weight in encoder.weights:
        if not weight.path.startswith("pooler/"):
            np.testing.assert_array_equal(weight.numpy(), tensors[f"model/{weight.path}"])
