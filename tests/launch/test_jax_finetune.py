"""The three fine-tuning tasks on Keras's JAX backend where `import tensorflow` fails, through the
same run skeleton: each trains, writes the eval.json a TensorFlow run writes, and exports a
`.keras` model and a Hugging Face model with the same logits; the raw-string SavedModel, which
needs TensorFlow, is one line there and is written afterwards by a TensorFlow process from the
`.keras` file. This process is TensorFlow's; the JAX runs are one process of their own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from launch.finetune.skeleton import serve_under_tensorflow
from launch.finetune.tag.data import read_tagged
from launch.finetune.tag.metrics import tag_figures
from tests.launch.finetune.test_tag_serving import served_entities
from tests.launch.test_jax import on_jax
from tests.launch.test_span_finetune import NAME, span_files
from tests.launch.test_tag_finetune import tag_files
from tests.lazy import torch, transformers

pytestmark = pytest.mark.slow  # fine-tunes three models in a process of its own
MODEL_FILES = {"classify": "classifier.keras", "tag": "tagger.keras", "span": "span.keras"}

RUNS = """
import json, sys
from launch.finetune import finetune
from launch.finetune.config import FinetuneConfig
tag, span, out = sys.argv[1:4]
common = dict(global_batch_size=8, learning_rate=3e-3)
runs = {
    "tag": dict(task="tag", init_checkpoint=f"hf:{tag}/release", train=f"{tag}/train.jsonl",
                validation=f"{tag}/validation.conll", test=f"{tag}/test.jsonl", seq_len=24, doc_stride=8,
                epochs=10, seed=1),
    "classify": dict(init_checkpoint=f"hf:{tag}/release", train=f"{out}/names-train.jsonl",
                     validation=f"{out}/names-validation.jsonl", seq_len=40, epochs=4, patience=0,
                     pooling="cls"),
    "span": dict(task="span", init_checkpoint=f"hf:{span}/release", train=f"{span}/train.json",
                 validation=f"{span}/validation.json", seq_len=40, doc_stride=10, max_query_length=8,
                 epochs=8, seed=2),
}
for name, flags in runs.items():
    print(json.dumps({name: finetune(FinetuneConfig(output=f"{out}/{name}", **common, **flags))}))
"""


@pytest.fixture(scope="module")
def jax_tasks(botchan, botchan_wordpiece, without_tensorflow, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("jax_tasks")
    (folder / "tag_data").mkdir(), (folder / "span_data").mkdir()
    tag = tag_files(folder / "tag_data", botchan, botchan_wordpiece)
    span = span_files(folder / "span_data", botchan, botchan_wordpiece)
    # Botchan's sentences that name one of its characters, and as many that name none
    text = " ".join(botchan.read_text(encoding="utf-8").split())
    sentences = [s for s in re.split(r"(?<=[.!?]) ", text) if 20 < len(s) < 120]  # the name within 40 pieces
    named, plain = (
        [s for s in sentences if NAME.search(s)][:240],
        [s for s in sentences if not NAME.search(s)][:240],
    )
    rows = [{"text": s, "label": label} for pair in zip(named, plain, strict=True)
            for s, label in zip(pair, ("named", "plain"), strict=True)]  # fmt: skip
    for split, part in (("train", rows[:360]), ("validation", rows[360:])):
        (folder / f"names-{split}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in part), encoding="utf-8"
        )
    on_jax(["-c", RUNS, str(tag), str(span), str(folder)], folder / "runs.log", without_tensorflow)
    return folder


def test_every_task_fine_tunes_on_jax_without_tensorflow(jax_tasks):
    log = (jax_tasks / "runs.log").read_text()
    for task in ("classify", "tag", "span"):  # the one line, and the rest written
        assert f"note: no {jax_tasks / task / 'serving'}: the raw-string SavedModel needs TensorFlow" in log
        assert (jax_tasks / task / "hf" / "config.json").exists() and not (
            jax_tasks / task / "serving"
        ).exists()
    tag = json.loads((jax_tasks / "tag" / "eval.json").read_text())
    span = json.loads((jax_tasks / "span" / "eval.json").read_text())
    classify = json.loads((jax_tasks / "classify" / "eval.json").read_text())
    assert tag["test"]["entity_f1"] > 0.8, tag["test"]  # as on TensorFlow (test_tag_finetune.py)
    assert span["f1"] > 0.6, span
    # A [CLS] classifier on this random release barely moves in 4 epochs, on either backend (the
    # learning is held by the TensorFlow tests); here: it trained each epoch, and exports below.
    epochs = [
        json.loads(line) for line in (jax_tasks / "classify" / "history.jsonl").read_text().splitlines()
    ]
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4] and classify["recipe"]["pooling"] == "cls"
    for results, task in ((tag, "tag"), (span, "span"), (classify, "classify")):
        assert results["recipe"]["task"] == task
        assert set(results["bad_rows"]) >= {"train", "validation"}


def test_jax_exports_load_in_tensorflow_and_transformers(jax_tasks):
    """The SavedModel (a TensorFlow process wrote it from the .keras file) scores what evaluation
    scored; transformers' classes give the .keras models' logits within 1e-4."""
    out = jax_tasks / "tag"
    serve_under_tensorflow(str(out / "serving"))  # what a JAX run with TensorFlow installed does
    gold = read_tagged(str(jax_tasks / "tag_data" / "test.jsonl")).examples
    texts = [example.text for example in gold]
    served = tf.saved_model.load(str(out / "serving")).signatures["serving_default"]
    figures = tag_figures(gold, served_entities(served(text=tf.constant(texts)), texts), 0)
    results = json.loads((out / "eval.json").read_text())
    assert abs(figures["entity_f1"] - results["test"]["entity_f1"]) < 0.01, figures

    rng = np.random.default_rng(0)
    for task, cls in (("tag", transformers.BertForTokenClassification),
                      ("span", transformers.BertForQuestionAnswering),
                      ("classify", transformers.BertForSequenceClassification)):  # fmt: skip
        model = keras.saving.load_model(jax_tasks / task / MODEL_FILES[task])
        length = model.input["input_ids"].shape[1]
        ones = np.ones((3, length), "int32")
        x = {"input_ids": rng.integers(5, 200, (3, length)).astype("int32"), "input_mask": ones,
             "segment_ids": 0 * ones}  # fmt: skip
        ours = model.predict(x, verbose=0)
        hf = cls.from_pretrained(str(jax_tasks / task / "hf")).eval()
        with torch.no_grad():
            theirs = hf(input_ids=torch.from_numpy(x["input_ids"].astype(np.int64)),
                        attention_mask=torch.from_numpy(x["input_mask"].astype(np.int64)),
                        token_type_ids=torch.from_numpy(x["segment_ids"].astype(np.int64)))  # fmt: skip
        pairs = (
            [(ours["start"], theirs.start_logits), (ours["end"], theirs.end_logits)]
            if task == "span"
            else [(ours, theirs.logits)]
        )
        for mine, hf_logits in pairs:
            np.testing.assert_allclose(hf_logits.numpy(), mine, atol=1e-4, err_msg=task)
