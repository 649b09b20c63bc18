"""A ModernBERT run end to end on a real corpus, through the same entry points as BERT's: it learns,
launch.evaluate reports it, the Hugging Face export loads in transformers with the run's logits,
launch.finetune fine-tunes it (mean pooling, as ModernBERT's classifier) and tags with it (exported
as ModernBertForTokenClassification with the tagger's logits), mixed precision and ELECTRA train
it. (SIGKILL and two phases: tests/reliability/test_killed_models.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from launch.evaluate import evaluate_corpus
from launch.export import ExportError, export_as, restore
from launch.finetune import finetune
from launch.finetune.config import FinetuneConfig
from launch.train import train
from model.config import BertConfig
from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.schema import read_manifest
from pipeline.vocab import VocabFile
from tests.launch.finetune.test_tag_encoding import botchan_examples
from tests.launch.interop.test_hf_bert import load_quietly
from tests.launch.test_finetune import config, topics  # noqa: F401 - the labelled topics fixture
from tests.launch.test_pretrain import run_config
from tests.lazy import torch, transformers

pytestmark = pytest.mark.slow  # trains end to end


@pytest.fixture(scope="module")
def modern_config(small_corpus, tmp_path_factory) -> Path:
    """Odd sizes (H 24, 3 heads, GeGLU 29, 3 layers: one global), a window of 8 in 32-token rows."""
    vocab = read_manifest(str(small_corpus)).vocab.size
    path = tmp_path_factory.mktemp("modern") / "bert.json"
    path.write_text(
        BertConfig(
            vocab,
            architecture="modernbert",
            hidden_size=24,
            num_layers=3,
            num_heads=3,
            intermediate_size=29,
            local_attention=8,
            dropout=0.0,
            layer_norm_epsilon=1e-5,
            max_position=8192,
        ).to_json()
    )
    return path


@pytest.fixture(scope="module")
def modern_run(small_corpus, modern_config, tmp_path_factory) -> Path:
    model_dir = tmp_path_factory.mktemp("modern_run")
    train(run_config(small_corpus, model_dir, modern_config, export=True))
    return model_dir


def test_it_learns_and_evaluates(modern_run, small_corpus):
    rows = [json.loads(line) for line in (modern_run / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40, 50, 60]
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5, rows
    assert json.loads((modern_run / "bert_config.json").read_text())["architecture"] == "modernbert"
    found = evaluate_corpus(str(modern_run), str(small_corpus), batch_size=16)
    final = json.loads((modern_run / "eval.json").read_text())
    assert found["mlm_loss"] == pytest.approx(final["mlm_loss"], rel=1e-4)


def test_the_hf_export_gives_the_runs_logits_in_transformers(modern_run, small_corpus, tmp_path):
    line = export_as("hf", str(modern_run), str(tmp_path / "hf"))
    assert "ModernBertForMaskedLM" in line
    hf_model, info, warnings = load_quietly(transformers.ModernBertForMaskedLM, tmp_path / "hf")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not [m for m in warnings if "weight" in m.lower()], warnings
    model = restore(str(modern_run))[0]
    manifest = read_manifest(str(small_corpus))
    data = make_dataset(manifest, "validation", InputConfig(8, training=False, features=tuple(model.input)))
    batch = next(iter(data))
    x = {k: np.asarray(v) for k, v in batch[0].items()}
    assert (x["document_ids"].max(1) > x["document_ids"].min(1)).any()  # rows that pack documents
    ours = np.asarray(model(x, training=False)["mlm"])
    # transformers knows no documents in a row: give it the run's masks, per layer type (additive).
    ids = np.where(x["input_mask"] > 0, x["document_ids"] + 1, 0)
    visible = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] > 0)
    window = np.abs(np.arange(32)[:, None] - np.arange(32)[None]) <= 4
    masks = {
        kind: torch.from_numpy(np.where(v, 0.0, -1e9).astype(np.float32)[:, None])
        for kind, v in (("full_attention", visible), ("sliding_attention", visible & window))
    }
    hf_model.config._attn_implementation = "eager"
    with torch.no_grad():
        logits = hf_model(
            input_ids=torch.from_numpy(x["input_ids"].astype(np.int64)), attention_mask=masks
        ).logits.numpy()
    theirs = np.take_along_axis(logits, x["masked_lm_positions"][:, :, None].astype(np.int64), axis=1)
    assert np.abs(ours - theirs).max() <= 1e-4
    assert (tmp_path / "hf" / "tokenizer.json").exists()
    with pytest.raises(ExportError, match="ModernBERT run exports as hf"):
        export_as("google", str(modern_run), str(tmp_path / "google"))


def test_fine_tuning_uses_mean_pooling_and_learns(modern_run, topics):  # noqa: F811
    result = finetune(config(modern_run, topics, epochs=3, export=False))
    results = json.loads((Path(result["output"]) / "eval.json").read_text())
    # ModernBERT's dense-and-norm head before the scores, as ModernBertForSequenceClassification has it
    assert results["recipe"]["pooling"] == "mean"
    assert results["recipe"]["fresh"] == ["task_transform", "task_norm", "classifier"]
    assert results["test"]["accuracy"] > 0.4  # three topics: chance is about 0.33


def test_a_tagger_fine_tunes_and_exports_as_modernbertfortokenclassification(
    modern_run, small_corpus, botchan, tmp_path
):
    """launch.finetune --task tag on the run: ModernBERT's task head is part of the tagger (fresh),
    and hf/ loads in transformers with every weight placed and the tagger's logits on real text."""
    import keras

    def entities(example):
        return [{"start": s, "end": t, "label": k} for k, s, t in example.entities]

    rows = [{"text": e.text, "entities": entities(e)} for e in botchan_examples(botchan, 160)]
    for split, part in (("train", rows[:130]), ("validation", rows[130:])):
        lines = "".join(json.dumps(r) + "\n" for r in part)
        (tmp_path / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    out = tmp_path / "ner"
    splits = {split: str(tmp_path / f"{split}.jsonl") for split in ("train", "validation")}
    settings = dict(seq_len=32, doc_stride=8, global_batch_size=8, epochs=1, learning_rate=3e-3)
    finetune(FinetuneConfig(task="tag", model_dir=str(modern_run), output=str(out), **splits, **settings))
    recipe = json.loads((out / "eval.json").read_text())["recipe"]
    assert recipe["fresh"][-3:] == ["task_transform", "task_norm", "tagger"], recipe["fresh"]

    hf_model, info, _ = load_quietly(transformers.ModernBertForTokenClassification, out / "hf")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert [hf_model.config.id2label[i] for i in range(len(recipe["labels"]))] == recipe["labels"]
    vocab = VocabFile.of_corpus(read_manifest(str(small_corpus))).load()
    ids = vocab.special_ids
    pieces = vocab.encode([r["text"] for r in rows[130:134]])
    tokens = np.full((4, 32), ids["pad"], np.int32)
    for i, row in enumerate(pieces):
        row = [ids["cls"], *row[:30], ids["sep"]]
        tokens[i, : len(row)] = row
    mask = (tokens != ids["pad"]).astype(np.int32)
    assert mask.sum(1).min() < 32 < 2 * mask.sum(1).max()  # padding, and rows past the window of 8
    tagger = keras.models.load_model(out / "tagger.keras", compile=False)
    ours = tagger.predict({"input_ids": tokens, "input_mask": mask, "segment_ids": 0 * mask}, verbose=0)
    with torch.no_grad():
        theirs = hf_model(input_ids=torch.from_numpy(tokens.astype(np.int64)),
                          attention_mask=torch.from_numpy(mask.astype(np.int64))).logits.numpy()  # fmt: skip
    real = mask.astype(bool)
    assert np.abs(ours[real]).max() > 0.1 and np.abs(ours[real] - theirs[real]).max() <= 1e-4


@pytest.mark.parametrize(
    "overrides",
    [{"mixed_precision": "bf16"}, {"objective": "electra", "generator_size": 1 / 3}],
    ids=["bf16", "electra"],
)
def test_mixed_precision_and_electra_train_it(small_corpus, modern_config, tmp_path, overrides):
    result = train(
        run_config(
            small_corpus,
            tmp_path / "run",
            modern_config,
            train_steps=20,
            eval_steps=1,
            checkpoint_every=20,
            eval_every=20,
            **overrides,
        )
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["loss"]) for r in rows) and rows[-1]["loss"] < rows[0]["loss"], rows
    assert result is not None


def test_a_modernbert_release_with_its_bpe_tokenizer_pretrains_on_and_fine_tunes(
    python_docs,
    botchan_bpe,
    topics,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    """A folder laid out as answerdotai/ModernBERT-base (transformers' save_pretrained, its
    byte-level BPE tokenizer.json and nothing else; more embedding rows than tokens, as ModernBERT's
    50,368 for 50,285): `make corpus` takes the tokenizer as the vocab, pretraining warm-starts
    every weight from the folder, and launch.finetune fine-tunes it."""
    from launch.interop.hf_modernbert import hf_tensors
    from tests.conftest import build
    from tests.launch.interop.test_hf_modernbert import random_hf_model

    tokens = len(json.loads(botchan_bpe.read_text())["model"]["vocab"]) + 5  # the specials after the vocab
    release = tmp_path / "ModernBERT"
    hf_model = random_hf_model(-(-tokens // 64) * 64, seed=5)  # rows padded to a multiple of 64, as theirs
    hf_model.config.pad_token_id = tokens - 2
    hf_model.save_pretrained(str(release))
    (release / "tokenizer.json").write_bytes(botchan_bpe.read_bytes())

    corpus = tmp_path / "corpus"
    build(
        corpus,
        "--input",
        str(python_docs / "library" / "b*.rst.txt"),
        "--vocab",
        str(release / "tokenizer.json"),
        "--whole_word_mask",
        "--seq_len",
        "32",
        "--max_predictions",
        "5",
        "--dupe_factor",
        "1",
        "--validation_fraction",
        "0.1",
    )
    model_dir = tmp_path / "run"
    train(
        run_config(
            corpus,
            model_dir,
            release / "config.json",
            init_checkpoint=f"hf:{release}",
            train_steps=10,
            checkpoint_every=10,
            eval_every=10,
            learning_rate=1e-9,
            warmup_steps=0,
        )
    )
    # Warm-started weight for weight: ten steps at lr 1e-9 leave them where the release had them.
    # The release's rows past its tokenizer's (1,505 of 1,536 here) are masked here, and an export
    # states them as the mask makes them: zero embeddings, -1e4 output biases.
    model = restore(str(model_dir))[0]
    shape = BertConfig.from_json((model_dir / "bert_config.json").read_text())
    tokens = shape.tokens
    assert tokens < shape.vocab_size and tokens == read_manifest(str(corpus)).vocab.size
    ours = hf_tensors(model)
    theirs = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
    for name, value in ours.items():
        if name in ("model.embeddings.tok_embeddings.weight", "decoder.bias"):
            assert (value[tokens:] == (0 if name.endswith("weight") else -1e4)).all(), name
            value, theirs[name] = value[:tokens], theirs[name][:tokens]
        np.testing.assert_allclose(value, theirs[name], atol=1e-5, err_msg=name)

    result = finetune(
        config(
            None,
            topics,
            init_checkpoint=f"hf:{release}",
            output=str(tmp_path / "ft"),
            epochs=2,
            model_dir=None,
        )
    )
    results = json.loads((Path(result["output"]) / "eval.json").read_text())
    assert results["recipe"]["pooling"] == "mean"
    assert (tmp_path / "ft" / "serving" / "saved_model.pb").exists()
