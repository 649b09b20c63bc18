"""`launch.finetune --task tag` end to end on real sentences (Botchan's, its characters' names
marked): from a small random release, softmax and CRF taggers learn the names to a high entity F1
through windows shorter than the sentences; eval.json, errors.jsonl and tagger.keras are right,
and the raw-string SavedModel scores what evaluation scored."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from launch.finetune import finetune
from launch.finetune.config import FinetuneConfig
from launch.finetune.tag.data import read_tagged, words_of
from launch.finetune.tag.metrics import tag_figures
from pipeline.vocab import VocabFile
from tests.launch.finetune.test_tag_encoding import botchan_examples
from tests.launch.finetune.test_tag_serving import served_entities
from tests.releases import write_release

pytestmark = pytest.mark.slow  # trains two taggers


@pytest.fixture(scope="module")
def files(botchan, botchan_wordpiece, tmp_path_factory):
    return tag_files(tmp_path_factory.mktemp("tag"), botchan, botchan_wordpiece)


def tag_files(folder: Path, botchan: Path, botchan_wordpiece: Path) -> Path:
    """train (JSONL with offsets), validation (CoNLL), test (JSONL tokens and tags); a release."""
    examples = botchan_examples(botchan, 1000)  # all of them: 413
    parts = {"train": examples[:260], "validation": examples[260:330], "test": examples[330:]}
    offsets = [{"text": e.text, "entities": [{"start": s, "end": t, "label": k} for k, s, t in e.entities]}
               for e in parts["train"]]  # fmt: skip
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in offsets), encoding="utf-8")

    def tags(example):
        words = words_of(example.text)
        out = ["O"] * len(words)
        for kind, start, end in example.entities:
            inside = [i for i, (s, t) in enumerate(words) if s >= start and t <= end]
            out[inside[0]] = f"B-{kind}"
            for i in inside[1:]:
                out[i] = f"I-{kind}"
        return [example.text[s:t] for s, t in words], out

    conll = ["\n".join(f"{w} {t}" for w, t in zip(*tags(e), strict=True)) for e in parts["validation"]]
    (folder / "validation.conll").write_text("\n\n".join(conll) + "\n", encoding="utf-8")
    rows = [dict(zip(("tokens", "tags"), tags(e), strict=True)) for e in parts["test"]]
    (folder / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    write_release(folder / "release", "bert_model", botchan_wordpiece, max_position=40, seed=3)
    return folder


@pytest.mark.parametrize("crf", [False, True])
def test_a_tagger_learns_the_names(files, tmp_path, crf):
    config = FinetuneConfig(
        task="tag", crf=crf, init_checkpoint=f"hf:{files / 'release'}", output=str(tmp_path / "out"),
        train=str(files / "train.jsonl"), validation=str(files / "validation.conll"),
        test=str(files / "test.jsonl"),
        seq_len=24, doc_stride=8, global_batch_size=8, epochs=10, learning_rate=3e-3, seed=1,
    )  # fmt: skip
    summary = finetune(config)
    out = tmp_path / "out"
    results = json.loads((out / "eval.json").read_text())
    assert summary["entity_f1"] == results["test"]["entity_f1"] > 0.8, results["test"]
    assert set(results["test"]["per_type"]) == {"PER", "LOC"}
    assert results["test"]["per_type"]["PER"]["f1"] > 0.8
    assert results["test"]["unaligned_entities"] == 0
    recipe = results["recipe"]
    assert recipe["labels"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"] and recipe["crf"] == crf
    assert recipe["windows"]["train"] > 400  # sentences longer than a window were read in several
    assert recipe["fresh"][-1] == ("crf" if crf else "tagger")
    for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert row["missed"] or row["wrong"]
    tagger = keras.models.load_model(out / "tagger.keras", compile=False)
    if crf:  # the transitions learned at 100x the rate: B-PER -> I-PER (Red Shirt) above B-PER -> I-LOC
        transitions = tagger.get_layer("crf").transitions.numpy()
        assert transitions[3, 4] > transitions[3, 2] + 0.5
    x = {"input_ids": np.full((2, 24), 7, "int32"), "input_mask": np.ones((2, 24), "int32"),
         "segment_ids": np.zeros((2, 24), "int32")}  # fmt: skip
    assert tagger.predict(x, verbose=0).shape == (2, 24, 5)
    assert (out / "hf").exists() != crf  # transformers has no CRF
    # the SavedModel on the test split's raw texts scores what evaluation scored
    gold = read_tagged(str(files / "test.jsonl")).examples
    texts = [example.text for example in gold]
    served = tf.saved_model.load(str(out / "serving")).signatures["serving_default"]
    figures = tag_figures(gold, served_entities(served(text=tf.constant(texts)), texts), 0)
    assert abs(figures["entity_f1"] - results["test"]["entity_f1"]) < 0.01, figures
    if not crf:
        hf_parity(out, tagger, recipe["labels"])


def hf_parity(out, tagger, labels):
    """The export loads in transformers as BertForTokenClassification with the labels, and its
    tokenizer and logits are ours (within 1e-4) on real text."""
    import torch
    import transformers

    hf = transformers.BertForTokenClassification.from_pretrained(str(out / "hf")).eval()
    assert [hf.config.id2label[i] for i in range(len(labels))] == labels
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out / "hf"))
    text = "Kiyo said the Red Shirt had gone to Tokyo."
    ours = VocabFile("wordpiece", (out / "hf" / "vocab.txt").read_bytes(), True).load().encode([text])[0]
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ours
    batch = tokenizer([text], padding="max_length", max_length=24, return_tensors="np")
    names = {"input_ids": "input_ids", "input_mask": "attention_mask", "segment_ids": "token_type_ids"}
    x = {ours: batch[theirs].astype("int32") for ours, theirs in names.items()}
    with torch.no_grad():
        theirs = hf(**{k: torch.tensor(v) for k, v in batch.items()}).logits.numpy()
    mask = x["input_mask"].astype(bool)
    np.testing.assert_allclose(theirs[mask], tagger.predict(x, verbose=0)[mask], atol=1e-4)
