"""Hugging Face interop, checked with transformers' own PyTorch BERT: our export loads into
`BertForMaskedLM` with no missing or unexpected weights and gives the same masked-LM logits
(max abs difference <= 1e-4, float32) on real inputs; a transformers model loads into ours and
agrees the same way; the exported tokenizer tokenizes as our vocab does."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from launch.interop.hf_bert import hf_bert_config, load_hf_checkpoint, save_hf
from launch.interop.hf_folder import HFCheckpointError
from model.config import BertConfig
from model.masked_lm import build_pretraining_model
from pipeline import text
from pipeline.masking import MaskingTables, mask_rows
from pipeline.vocab import VocabFile
from tests.lazy import torch, transformers
from tests.releases import randomized_torch

H, HEADS, INNER, LAYERS, MAXPOS, T, P = 12, 3, 29, 2, 40, 33, 5
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def batch(botchan, wordpiece) -> dict[str, np.ndarray]:
    """Real inputs: consecutive Botchan sentences as [CLS] A [SEP] B [SEP], padded to T, with
    BERT's masking; 11 rows."""
    vocab = wordpiece.load()
    ids = vocab.special_ids
    normalized = text.normalize_line(botchan.read_text(encoding="utf-8"), Counter())
    sentences = [s for s in vocab.encode(text.document_sentences(normalized)[200:240]) if s]
    rows, segments = [], []
    for a, b in zip(sentences[0:22:2], sentences[1:22:2], strict=True):
        a, b = a[: (T - 3) // 2], b[: T - 3 - min(len(a), (T - 3) // 2)]
        row = [ids["cls"], *a, ids["sep"], *b, ids["sep"]]
        rows.append(row + [ids["pad"]] * (T - len(row)))
        segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1) + [0] * (T - len(row)))
    tokens = np.array(rows)
    masked = mask_rows(
        tokens, tables=MaskingTables.from_vocab(vocab), max_predictions=P, masked_lm_prob=0.15,
        whole_word=False, rng=np.random.default_rng(7),
    )  # fmt: skip
    input_mask = (tokens != ids["pad"]).astype(np.int32)
    return {
        "input_ids": masked["input_ids"].astype(np.int32),
        "input_mask": input_mask,
        "segment_ids": np.array(segments, np.int32),
        "document_ids": input_mask,  # one document per row: what Hugging Face's attention mask means
        "masked_lm_positions": masked["masked_lm_positions"].astype(np.int32),
    }


def bert_config(vocab_size: int, hidden_act: str) -> BertConfig:
    return BertConfig(
        vocab_size, hidden_size=H, num_layers=LAYERS, num_heads=HEADS, intermediate_size=INNER,
        max_position=MAXPOS, hidden_act=hidden_act,
    )  # fmt: skip


def randomized(model, seed: int):
    """Every weight random (biases and LayerNorm betas too, gammas around 1), so a bias or
    LayerNorm mapped to the wrong place cannot hide behind an initial zero or one."""
    rng = np.random.default_rng(seed)
    for w in model.trainable_weights:
        value = rng.normal(0.0, 0.2, tuple(w.shape))
        w.assign((1.0 + value) if w.path.endswith("gamma") else value)
    return model


def ours_logits(model, batch) -> np.ndarray:
    return np.asarray(model(batch, training=False)["mlm"])  # (B, P, V)


def hf_logits(hf_model, batch) -> np.ndarray:
    with torch.no_grad():
        out = hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(batch["segment_ids"].astype(np.int64)),
        )
    logits = out.logits if hasattr(out, "logits") else out.prediction_logits
    positions = batch["masked_lm_positions"].astype(np.int64)
    return np.take_along_axis(logits.numpy(), positions[:, :, None], axis=1)  # (B, P, V)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def load_quietly(cls, folder):
    """from_pretrained, returning the model, its loading info and any warnings transformers logged."""
    handler = _Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        hf_model, info = cls.from_pretrained(str(folder), output_loading_info=True)
    finally:
        logger.removeHandler(handler)
    return hf_model.eval(), info, handler.messages


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_approximate"])
def test_export_loads_in_transformers_with_the_same_logits(wordpiece, batch, tmp_path, hidden_act):
    vocab_size = wordpiece.load().size
    bert = bert_config(vocab_size, hidden_act)
    model = randomized(build_pretraining_model(bert, T, P, next_sentence=False), seed=1)
    save_hf(model, bert, wordpiece, str(tmp_path / "hf"))

    hf_model, info, warnings = load_quietly(transformers.BertForMaskedLM, tmp_path / "hf")
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set(), info
    assert not info["mismatched_keys"] and not info["error_msgs"], info
    assert not [m for m in warnings if "weight" in m.lower() or "LOAD REPORT" in m], warnings
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["hidden_act"] == {"gelu": "gelu", "gelu_approximate": "gelu_new"}[hidden_act]
    assert hf_model.config.layer_norm_eps == 1e-12

    ours, theirs = ours_logits(model, batch), hf_logits(hf_model, batch)
    assert ours.shape == theirs.shape == (11, P, vocab_size)
    assert np.abs(ours).max() > 1.0  # not a degenerate comparison of near-zero logits
    assert np.abs(ours - theirs).max() <= TOLERANCE


def test_the_gelu_flavour_matters_at_this_tolerance(wordpiece, batch, tmp_path):
    """The comparison can fail: exported as the other GELU, logits differ by more than 1e-4."""
    bert = bert_config(wordpiece.load().size, "gelu")
    model = randomized(build_pretraining_model(bert, T, P, next_sentence=False), seed=1)
    save_hf(model, bert, wordpiece, str(tmp_path / "hf"))
    config_path = tmp_path / "hf" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "hidden_act": "gelu_new"}))
    hf_model, _, _ = load_quietly(transformers.BertForMaskedLM, tmp_path / "hf")
    assert np.abs(ours_logits(model, batch) - hf_logits(hf_model, batch)).max() > 10 * TOLERANCE


def random_hf_model(cls, vocab_size: int, seed: int, hidden_act: str = "gelu"):
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=vocab_size, hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=INNER, max_position_embeddings=MAXPOS, hidden_act=hidden_act,
    )  # fmt: skip
    return randomized_torch(cls(config).eval(), seed)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_import_from_transformers_gives_the_same_logits(wordpiece, batch, tmp_path, hidden_act):
    vocab_size = wordpiece.load().size
    hf_model = random_hf_model(transformers.BertForMaskedLM, vocab_size, seed=2, hidden_act=hidden_act)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    bert = hf_bert_config(str(tmp_path / "hf" / "config.json"))
    assert bert.hidden_act == {"gelu": "gelu", "gelu_new": "gelu_approximate"}[hidden_act]
    model = build_pretraining_model(bert, T, P, next_sentence=False)
    assert load_hf_checkpoint(model, str(tmp_path / "hf")) == []
    diff = np.abs(ours_logits(model, batch) - hf_logits(hf_model, batch)).max()
    assert diff <= TOLERANCE


def test_import_of_a_pretraining_model_brings_pooler_and_nsp(wordpiece, batch, tmp_path):
    vocab_size = wordpiece.load().size
    hf_model = random_hf_model(transformers.BertForPreTraining, vocab_size, seed=3)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    model = build_pretraining_model(hf_bert_config(str(tmp_path / "hf" / "config.json")), T, P, True)
    assert load_hf_checkpoint(model, str(tmp_path / "hf")) == []
    ours = model(batch, training=False)
    with torch.no_grad():
        out = hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(batch["segment_ids"].astype(np.int64)),
        )
    assert np.abs(np.asarray(ours["nsp"]) - out.seq_relationship_logits.numpy()).max() <= TOLERANCE
    assert np.abs(np.asarray(ours["mlm"]) - hf_logits(hf_model, batch)).max() <= TOLERANCE

    # From a BertForMaskedLM (no pooler, no NSP head) those two start fresh, and say so.
    masked_lm = random_hf_model(transformers.BertForMaskedLM, vocab_size, seed=4)
    masked_lm.save_pretrained(str(tmp_path / "mlm"))
    fresh = load_hf_checkpoint(model, str(tmp_path / "mlm"))
    assert sorted(fresh) == ["nsp_logits/bias", "nsp_logits/kernel", "pooler/bias", "pooler/kernel"]


def test_a_padded_vocab_masks_its_rows_and_exports_exactly(wordpiece, batch, tmp_path):
    """Rows rounded up to a multiple of 128: on the tokens' rows the same logits as the model
    without them, the padded rows masked; the export's transformers logits match on every row
    (its vocab_size the rows, its tokenizer the tokens), and it reads back as the same model."""
    from model.masked_lm import MASKED_LOGIT

    vocab_file = wordpiece
    tokens = vocab_file.load().size
    plain = randomized(build_pretraining_model(bert_config(tokens, "gelu"), T, P, next_sentence=False), 8)
    padded_bert = bert_config(tokens, "gelu").padded(128)
    assert padded_bert.vocab_size % 128 == 0 and padded_bert.vocab_size > tokens == padded_bert.tokens
    padded = randomized(
        build_pretraining_model(padded_bert, T, P, next_sentence=False), 9
    )  # rows past: random
    for ours, theirs in zip(padded.weights, plain.weights, strict=True):
        value = theirs.numpy()
        if ours.shape != theirs.shape:  # the token-indexed rows: the plain model's, then random ones
            value = np.concatenate([value, ours.numpy()[tokens:]])
        ours.assign(value)
    logits = ours_logits(padded, batch)
    np.testing.assert_allclose(logits[..., :tokens], ours_logits(plain, batch), atol=1e-5)
    assert (logits[..., tokens:] == MASKED_LOGIT).all()

    save_hf(padded, padded_bert, vocab_file, str(tmp_path / "hf"))
    hf_model, info, _ = load_quietly(transformers.BertForMaskedLM, tmp_path / "hf")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf_model.config.vocab_size == padded_bert.vocab_size
    assert len(transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))) == tokens
    assert np.abs(logits - hf_logits(hf_model, batch)).max() <= TOLERANCE

    read = hf_bert_config(str(tmp_path / "hf" / "config.json"))
    assert read.vocab_size == padded_bert.vocab_size
    back = build_pretraining_model(
        dataclasses.replace(read, tokenizer_size=tokens), T, P, next_sentence=False
    )
    assert load_hf_checkpoint(back, str(tmp_path / "hf")) == []
    np.testing.assert_allclose(ours_logits(back, batch), logits, atol=1e-5)


def test_a_missing_or_misshapen_tensor_is_a_one_line_error(wordpiece, tmp_path):
    from safetensors.numpy import load_file, save_file

    vocab_size = wordpiece.load().size
    random_hf_model(transformers.BertForMaskedLM, vocab_size, seed=5).save_pretrained(str(tmp_path / "hf"))
    model = build_pretraining_model(bert_config(vocab_size, "gelu"), T, P, next_sentence=False)
    weights = tmp_path / "hf" / "model.safetensors"
    tensors = load_file(str(weights))
    name = "bert.encoder.layer.1.intermediate.dense.weight"
    save_file({k: v for k, v in tensors.items() if k != name}, str(weights))
    with pytest.raises(
        HFCheckpointError, match=f"no tensor {name} \\(for transformer_1/intermediate/kernel\\)"
    ):
        load_hf_checkpoint(model, str(tmp_path / "hf"))
    save_file({**tensors, name: tensors[name][:, :-1].copy()}, str(weights))
    with pytest.raises(HFCheckpointError, match=f"{name} has shape \\(29, 11\\), .* needs \\(29, 12\\)"):
        load_hf_checkpoint(model, str(tmp_path / "hf"))


def test_the_exported_tokenizer_tokenizes_as_our_vocab(botchan, wordpiece, botchan_vocab, tmp_path):
    normalized = text.normalize_line(botchan.read_text(encoding="utf-8"), Counter())
    sentences = text.document_sentences(normalized)[:400] + ["Héllo, Wörld! 東京は日本の首都です。"]
    for vocab_file in (wordpiece, VocabFile("sentencepiece", botchan_vocab.read_bytes())):
        vocab = vocab_file.load()
        folder = tmp_path / vocab_file.kind
        model = build_pretraining_model(bert_config(vocab.size, "gelu"), T, P, next_sentence=False)
        save_hf(model, bert_config(vocab.size, "gelu"), vocab_file, str(folder))
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
        ids = vocab.special_ids
        expected = [[ids["cls"], *row, ids["sep"]] for row in vocab.encode(sentences)]
        assert tokenizer(sentences)["input_ids"] == expected, vocab_file.kind
        assert tokenizer.mask_token_id == ids["mask"] and tokenizer.pad_token_id == ids["pad"]


def test_a_bpe_sentencepiece_vocab_exports_weights_without_a_tokenizer(botchan, tmp_path, capsys):
    from pipeline.vocab import train_sentencepiece

    lines = [line for line in botchan.read_text(encoding="utf-8").splitlines() if line.strip()][:2000]
    vocab_file = VocabFile("sentencepiece", train_sentencepiece(lines, vocab_size=300, model_type="bpe"))
    bert = bert_config(vocab_file.load().size, "gelu")
    save_hf(build_pretraining_model(bert, T, P, next_sentence=False), bert, vocab_file, str(tmp_path / "hf"))
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "config.json",
        "model.safetensors",
        "vocab.model",
    ]
    assert "no Hugging Face tokenizer for this sentencepiece vocab (a bpe model)" in capsys.readouterr().err
    _, info, _ = load_quietly(transformers.BertForMaskedLM, tmp_path / "hf")
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.slow
def test_export_cli_from_a_trained_run(trained_run, small_corpus, tmp_path):
    """`python -m launch.export` on a real run: HF logits on the corpus's own records match the
    checkpoint's, and the Google export reads back under Google's names."""
    import tensorflow as tf

    from launch.export import restore
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.schema import read_manifest

    for fmt in ("hf", "google", "keras"):
        done = subprocess.run(
            [sys.executable, "-m", "launch.export", "--model_dir", str(trained_run), "--format", fmt,
             "--output", str(tmp_path / fmt)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().endswith(f"({fmt}) to {tmp_path / fmt}")
    model, _, manifest, _, _ = restore(str(trained_run))
    assert manifest.folder == str(trained_run / "corpus")  # the run's own copy: no shards there
    data = read_manifest(str(small_corpus))
    assert manifest.vocab == data.vocab and manifest.seq_len == data.seq_len
    x, _, _ = next(iter(make_dataset(data, "validation", InputConfig(8, training=False))))
    real = {k: np.asarray(v) for k, v in x.items()}
    real["document_ids"] = real["input_mask"]  # one document per row, as Hugging Face sees a row
    hf_model, info, _ = load_quietly(transformers.BertForMaskedLM, tmp_path / "hf")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert np.abs(ours_logits(model, real) - hf_logits(hf_model, real)).max() <= TOLERANCE
    assert (tmp_path / "hf" / "vocab.model").read_bytes() == (small_corpus / "vocab.model").read_bytes()

    prefix = str(tmp_path / "google" / "bert_model.ckpt")
    word = tf.train.load_variable(prefix, "bert/embeddings/word_embeddings")
    np.testing.assert_array_equal(word, model.get_layer("token_embedding").embeddings.numpy())
    google_config = json.loads((tmp_path / "google" / "bert_config.json").read_text())
    assert google_config["num_hidden_layers"] == 2 and google_config["hidden_size"] == 24
    assert (tmp_path / "keras" / "pretraining.keras").exists()


def test_warm_start_from_hf_folder_with_its_config(small_corpus, tmp_path):
    """`--init_checkpoint hf:DIR`: the run starts from its weights, shaped by its config.json."""
    from launch.checkpoints import CheckpointError
    from launch.config import TrainConfig
    from launch.prepare import prepare
    from launch.train import build
    from pipeline.schema import read_manifest

    vocab_size = read_manifest(str(small_corpus)).vocab.size
    hf_model = random_hf_model(transformers.BertForMaskedLM, vocab_size, seed=6)
    hf_model.save_pretrained(str(tmp_path / "hf"))

    def config(model_dir, bert_config):
        return TrainConfig(
            data=str(small_corpus), model_dir=str(tmp_path / model_dir), bert_config=bert_config,
            init_checkpoint=f"hf:{tmp_path / 'hf'}", global_batch_size=8, train_steps=10, log_every=10,
            checkpoint_every=10, eval_every=10, export=False,
        )  # fmt: skip

    run = prepare(config("run", str(tmp_path / "hf" / "config.json")), None)
    assert run.bert.hidden_act == "gelu" and run.bert.layer_norm_epsilon == 1e-12
    assert build(run) == 0
    np.testing.assert_array_equal(
        run.model.get_layer("transformer_1").output_dense.kernel.numpy(),
        hf_model.bert.encoder.layer[1].output.dense.weight.detach().numpy().T,
    )
    # The release's rows, padded on load to a multiple of 128 (--vocab_multiple's default)
    bias = run.model.get_layer("mlm_bias").bias.numpy()
    assert run.bert.vocab_size == len(bias) == -(-vocab_size // 128) * 128 > vocab_size
    np.testing.assert_array_equal(bias[:vocab_size], hf_model.cls.predictions.bias.detach().numpy())
    # Without --bert_config, the folder's config.json is the shape.
    assert prepare(config("from_folder", None), None).bert == run.bert
    # A shape that does not fit the checkpoint: a one-line error naming the tensor.
    wrong = tmp_path / "wrong.json"
    wrong.write_text(dataclasses.replace(run.bert, intermediate_size=31).to_json())
    with pytest.raises(CheckpointError, match=r"^--init_checkpoint .*model.safetensors: .* has shape"):
        build(prepare(config("wrong", str(wrong)), None))


@pytest.mark.slow
def test_export_cli_errors_are_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "launch.export", "--model_dir", str(tmp_path / "none"), "--format", "hf",
         "--output", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: --model_dir {tmp_path / 'none'}: no config.json (not a launch.pretrain run)"
    )


@pytest.fixture(scope="module")
def trained_run(small_corpus, tiny_config, tmp_path_factory) -> Path:
    from launch.config import TrainConfig
    from launch.train import train

    model_dir = tmp_path_factory.mktemp("hf_run")
    train(
        TrainConfig(
            data=str(small_corpus), model_dir=str(model_dir), bert_config=str(tiny_config),
            global_batch_size=8, train_steps=20, warmup_steps=2, learning_rate=2e-3, log_every=10,
            checkpoint_every=10, eval_every=10, eval_steps=1, export=False,
        )
    )  # fmt: skip
    return model_dir


def test_a_cls_classifier_exports_as_bert_for_sequence_classification(wordpiece, batch, tmp_path):
    """A [CLS] classifier reads the pooler, and so does transformers' class: the pooler is
    exported with it, the labels are in the config, and the logits agree within 1e-4; without the
    pooler's weights the same folder is another model."""
    from launch.interop.hf_bert import save_hf_task
    from model.encoder import TASK_INPUTS, build_encoder
    from model.tasks.classifier import build_classifier

    bert = bert_config(wordpiece.load().size, "gelu")
    labels = ["negative", "neutral", "positive"]
    model = randomized(
        build_classifier(build_encoder(bert, T), len(labels), 0.1, seed=3, pooling="cls"), seed=5
    )
    names = {"id2label": dict(enumerate(labels)), "label2id": {k: i for i, k in enumerate(labels)}}
    save_hf_task(model, bert, wordpiece, str(tmp_path / "hf"), head="classifier",
                 architecture="BertForSequenceClassification", hf_head="classifier", config=names,
                 pooler=True)  # fmt: skip
    hf_model, info, warnings = load_quietly(transformers.BertForSequenceClassification, tmp_path / "hf")
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set(), info
    assert not [m for m in warnings if "LOAD REPORT" in m], warnings
    assert [hf_model.config.id2label[i] for i in range(len(labels))] == labels
    ours = np.asarray(model({name: batch[name] for name in TASK_INPUTS}, training=False))
    with torch.no_grad():
        theirs = hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(batch["segment_ids"].astype(np.int64)),
        ).logits.numpy()
    assert ours.shape == theirs.shape == (11, len(labels))
    assert (
        np.abs(ours).max() > 0.3 and np.ptp(ours, axis=0).max() > 0.05
    )  # a tanh pooler bounds them; rows differ
    assert np.abs(ours - theirs).max() <= TOLERANCE
    save_hf_task(model, bert, wordpiece, str(tmp_path / "no_pooler"), head="classifier", config=names,
                 architecture="BertForSequenceClassification", hf_head="classifier")  # fmt: skip
    hf_model, info, _ = load_quietly(transformers.BertForSequenceClassification, tmp_path / "no_pooler")
    assert {k for k in info["missing_keys"] if "pooler" in k}  # the pooler starts random there
