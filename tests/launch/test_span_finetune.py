"""`launch.finetune --task span` end to end on real text: Botchan's sentences, "Who is named?",
answered by the one character named there or unanswerable where none is (SQuAD 2.0's shape). A
small random release learns it through windows shorter than the contexts; eval.json, errors.jsonl,
span.keras and the BertForQuestionAnswering export (logits within 1e-4) are right, and the
raw-string SavedModel scores what evaluation scored."""

from __future__ import annotations

import json
import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from launch.finetune import finetune
from launch.finetune.config import FinetuneConfig
from launch.finetune.span.data import read_squad
from launch.finetune.span.metrics import span_scores
from tests.releases import write_release

pytestmark = pytest.mark.slow  # trains a model
NAME = re.compile(r"Kiyo|Porcupine|Red Shirt|Madonna|Clown")


def squad(sentences: list[str], start: int) -> dict:
    paragraphs = []
    for i, context in enumerate(sentences):
        names = list(NAME.finditer(context))
        qa = {"id": f"q{start + i}", "question": "Who is named?"}
        if names:
            qa["answers"] = [{"text": names[0].group(), "answer_start": names[0].start()}]
        else:
            qa |= {"answers": [], "is_impossible": True}
        paragraphs.append({"context": context, "qas": [qa]})
    return {"version": "v2.0", "data": [{"title": "botchan", "paragraphs": paragraphs}]}


@pytest.fixture(scope="module")
def files(botchan, botchan_wordpiece, tmp_path_factory):
    return span_files(tmp_path_factory.mktemp("span"), botchan, botchan_wordpiece)


def span_files(folder: Path, botchan: Path, botchan_wordpiece: Path) -> Path:
    """SQuAD 2.0 train, validation and test files (questions for a name, some unanswerable); a release."""
    text = " ".join(botchan.read_text(encoding="utf-8").split())
    sentences = [s for s in re.split(r"(?<=[.!?]) ", text) if 40 < len(s) < 400]
    named = [s for s in sentences if len(NAME.findall(s)) == 1][:360]
    unnamed = [s for s in sentences if not NAME.search(s)][:120]
    mixed = [s for pair in zip(named[::3], named[1::3], named[2::3], unnamed, strict=False) for s in pair]
    for split, part, start in (("train", mixed[:300], 0), ("validation", mixed[300:400], 300),
                               ("test", mixed[400:], 400)):  # fmt: skip
        (folder / f"{split}.json").write_text(json.dumps(squad(part, start)), encoding="utf-8")
    write_release(folder / "release", "bert_model", botchan_wordpiece, max_position=40, seed=4)
    return folder


def test_a_span_extractor_learns_to_answer_and_to_abstain(files, tmp_path):
    out = tmp_path / "out"
    config = FinetuneConfig(
        task="span", init_checkpoint=f"hf:{files / 'release'}", output=str(out),
        train=str(files / "train.json"),
        validation=str(files / "validation.json"), test=str(files / "test.json"), seq_len=40, doc_stride=10,
        max_query_length=8, global_batch_size=8, epochs=8, learning_rate=3e-3, seed=2,
    )  # fmt: skip
    summary = finetune(config)
    results = json.loads((out / "eval.json").read_text())
    test = results["test"]
    assert summary["f1"] == test["f1"] > 0.8, test
    assert test["no_answer_questions"] >= 5 and test["no_answer_exact_match"] > 0.6
    assert test["windows"] > test["questions"]  # contexts longer than a window were read in several
    assert results["recipe"]["unanswerable"] and results["recipe"]["fresh"][-1] == "span"
    for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert row["answer"] not in (row["gold"] or [""])
    model = keras.models.load_model(out / "span.keras", compile=False)

    import torch
    import transformers

    hf = transformers.BertForQuestionAnswering.from_pretrained(str(out / "hf")).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out / "hf"))
    batch = tokenizer(["Who is named?"], ["Kiyo was glad to see me."], padding="max_length", max_length=40,
                      return_tensors="np")  # fmt: skip
    names = {"input_ids": "input_ids", "input_mask": "attention_mask", "segment_ids": "token_type_ids"}
    ours = model.predict({k: batch[v].astype("int32") for k, v in names.items()}, verbose=0)
    with torch.no_grad():
        theirs = hf(**{k: torch.tensor(v) for k, v in batch.items()})
    mask = batch["attention_mask"].astype(bool)
    np.testing.assert_allclose(theirs.start_logits.numpy()[mask], ours["start"][mask], atol=1e-4)
    np.testing.assert_allclose(theirs.end_logits.numpy()[mask], ours["end"][mask], atol=1e-4)

    # the SavedModel on the test split's raw questions and contexts scores what evaluation scored
    found = read_squad(str(files / "test.json")).examples
    served = tf.saved_model.load(str(out / "serving")).signatures["serving_default"]
    answers = served(
        question=tf.constant([e.question for e in found]), context=tf.constant([e.context for e in found])
    )
    texts = [t.decode() for t in answers["answer_text"].numpy()]
    figures = span_scores(dict(zip([e.id for e in found], texts, strict=True)), found)
    assert abs(figures["f1"] - test["f1"]) < 0.01, figures
