"""ModernBERT with Hugging Face both ways, checked with transformers' own ModernBertForMaskedLM: our
export loads with no missing or unexpected weights and no warning, and gives the same masked-LM
logits (max abs difference <= 1e-4, float32) on real text, with rows longer than the window and
with padding; a transformers model loads into ours and agrees the same way. Odd sizes: hidden 24,
3 heads, feed-forward 29, 4 layers (global, local, local, global), window 4, seq 23. A tagger and
a span extractor on it export as ModernBertForTokenClassification / ModernBertForQuestionAnswering
with the same logits too."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from launch.interop.formats import read_bert_config, warm_start
from launch.interop.hf_folder import HFCheckpointError
from launch.interop.hf_modernbert import (
    load_hf_modernbert,
    modernbert_config,
    save_hf_modernbert,
    save_hf_modernbert_task,
)
from model.config import BertConfig
from model.encoder import TASK_INPUTS, build_encoder
from model.masked_lm import build_pretraining_model
from model.tasks.classifier import build_classifier
from model.tasks.span import build_span_model
from model.tasks.tagger import build_tagger
from pipeline import text
from tests.launch.interop.test_hf_bert import load_quietly, randomized
from tests.lazy import torch, transformers
from tests.releases import randomized_torch

H, HEADS, INNER, LAYERS, WINDOW, T, P = 24, 3, 29, 4, 4, 23, 6
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def batch(botchan, wordpiece) -> dict[str, np.ndarray]:
    """Botchan sentences as [CLS] A [SEP] B [SEP] (no segment ids: ModernBERT has none), padded to
    T; every position read, so the whole row is compared. 9 rows, most padded."""
    vocab = wordpiece.load()
    ids = vocab.special_ids
    normalized = text.normalize_line(botchan.read_text(encoding="utf-8"), Counter())
    sentences = [s for s in vocab.encode(text.document_sentences(normalized)[300:340]) if s]
    rows = []
    for a, b in zip(sentences[0:18:2], sentences[1:18:2], strict=True):
        row = [ids["cls"], *a[:12], ids["sep"], *b[:8], ids["sep"]][:T]
        rows.append(row + [ids["pad"]] * (T - len(row)))
    tokens = np.array(rows, np.int32)
    input_mask = (tokens != ids["pad"]).astype(np.int32)
    assert input_mask.sum(1).max() > 2 * WINDOW and input_mask.sum(1).min() < T  # past the window; padding
    return {
        "input_ids": tokens,
        "input_mask": input_mask,
        "segment_ids": np.zeros_like(tokens),
        "document_ids": input_mask,
        "masked_lm_positions": np.tile(np.arange(T, dtype=np.int32), (len(rows), 1)),
    }


def modern_config(vocab_size: int, **overrides) -> BertConfig:
    return BertConfig(
        vocab_size,
        architecture="modernbert",
        hidden_size=H,
        num_layers=LAYERS,
        num_heads=HEADS,
        intermediate_size=INNER,
        local_attention=WINDOW,
        dropout=0.0,
        layer_norm_epsilon=1e-5,
        max_position=64,
        **overrides,
    )


def ours_logits(model, batch) -> np.ndarray:
    return np.asarray(model(batch, training=False)["mlm"])  # (B, T, V): every position read


def hf_logits(hf_model, batch) -> np.ndarray:
    with torch.no_grad():
        return hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
        ).logits.numpy()


def real_difference(ours, theirs, batch) -> float:
    """Max |difference| over real tokens (a padded query's output is never read, and transformers
    lets it attend where ours does not)."""
    return float((np.abs(ours - theirs) * batch["input_mask"][:, :, None]).max())


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_approximate"])
def test_export_loads_in_transformers_with_the_same_logits(wordpiece, batch, tmp_path, hidden_act):
    vocab = wordpiece.load()
    bert = modern_config(vocab.size, hidden_act=hidden_act, local_rope_theta=777.0)
    model = randomized(build_pretraining_model(bert, T, T), seed=1)
    save_hf_modernbert(model, bert, wordpiece, str(tmp_path / "hf"))

    hf_model, info, warnings = load_quietly(transformers.ModernBertForMaskedLM, tmp_path / "hf")
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set(), info
    assert not info["mismatched_keys"] and not info["error_msgs"], info
    assert not [m for m in warnings if "weight" in m.lower() or "LOAD REPORT" in m], warnings
    config = hf_model.config
    assert config.layer_types == [
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
    ]
    assert config.sliding_window == WINDOW // 2
    assert config.rope_parameters["sliding_attention"]["rope_theta"] == 777.0
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id) == (
        vocab.special_ids["pad"],
        vocab.special_ids["cls"],
        vocab.special_ids["sep"],
    )
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["classifier_pooling"] == "mean"

    for implementation in ("eager", "sdpa"):
        hf_model.config._attn_implementation = implementation
        ours, theirs = ours_logits(model, batch), hf_logits(hf_model, batch)
        assert np.abs(ours).max() > 1.0  # not a comparison of near-zero logits
        assert real_difference(ours, theirs, batch) <= TOLERANCE, implementation


def test_the_window_and_the_rope_base_matter_at_this_tolerance(wordpiece, batch, tmp_path):
    """The comparison can fail: the same weights read with another window or RoPE base differ."""
    bert = modern_config(wordpiece.load().size)
    model = randomized(build_pretraining_model(bert, T, T), seed=1)
    save_hf_modernbert(model, bert, wordpiece, str(tmp_path / "hf"))
    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    ours = ours_logits(model, batch)
    for change in (
        {"local_attention": 8},
        {
            "rope_parameters": {
                **config["rope_parameters"],
                "sliding_attention": {"rope_type": "default", "rope_theta": 160_000.0},
            }
        },
    ):
        path.write_text(json.dumps({**config, **change}))
        hf_model, _, _ = load_quietly(transformers.ModernBertForMaskedLM, tmp_path / "hf")
        assert real_difference(ours, hf_logits(hf_model, batch), batch) > 10 * TOLERANCE, change


def random_hf_model(vocab_size: int, seed: int, cls=None):
    """A transformers ModernBERT (`cls`, default ModernBertForMaskedLM) with random weights."""
    cls = cls or transformers.ModernBertForMaskedLM
    torch.manual_seed(seed)
    config = transformers.ModernBertConfig(
        vocab_size=vocab_size,
        hidden_size=H,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INNER,
        local_attention=WINDOW,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        cls_token_id=2,
        sep_token_id=3,
    )
    return randomized_torch(cls(config).eval(), seed, is_scale=lambda name: "norm" in name)


def test_import_from_transformers_gives_the_same_logits(wordpiece, batch, tmp_path):
    vocab_size = wordpiece.load().size
    hf_model = random_hf_model(vocab_size, seed=2)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    bert = read_bert_config(str(tmp_path / "hf" / "config.json"))
    assert bert.modern and bert.local_attention == WINDOW and bert.global_rope_theta == 160_000.0
    model = build_pretraining_model(bert, T, T)
    assert warm_start(model, f"hf:{tmp_path / 'hf'}") == []
    assert real_difference(ours_logits(model, batch), hf_logits(hf_model, batch), batch) <= TOLERANCE


def test_a_bare_modernbertmodel_brings_the_encoder_and_leaves_the_head_fresh(wordpiece, tmp_path):
    hf_model = random_hf_model(wordpiece.load().size, seed=3, cls=transformers.ModernBertModel)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    model = build_pretraining_model(modernbert_config(str(tmp_path / "hf" / "config.json")), T, P)
    fresh = load_hf_modernbert(model, str(tmp_path / "hf"))
    assert sorted(fresh) == ["mlm_bias/bias", "mlm_norm/gamma", "mlm_transform/kernel"]
    np.testing.assert_allclose(
        model.get_layer("token_embedding").embeddings.numpy(),
        hf_model.embeddings.tok_embeddings.weight.detach().numpy(),
    )


def test_a_missing_or_misshapen_tensor_or_config_is_a_one_line_error(wordpiece, tmp_path):
    from safetensors.numpy import load_file, save_file

    bert = modern_config(wordpiece.load().size)
    model = build_pretraining_model(bert, T, P)
    save_hf_modernbert(model, bert, wordpiece, str(tmp_path / "hf"))
    weights = tmp_path / "hf" / "model.safetensors"
    tensors = load_file(str(weights))
    save_file({k: v for k, v in tensors.items() if k != "model.layers.2.mlp.Wi.weight"}, str(weights))
    with pytest.raises(HFCheckpointError, match=r"no tensor model\.layers\.2\.mlp\.Wi\.weight") as e:
        load_hf_modernbert(model, str(tmp_path / "hf"))
    assert "\n" not in str(e.value)
    save_file({**tensors, "model.final_norm.weight": np.ones(7, np.float32)}, str(weights))
    with pytest.raises(HFCheckpointError, match=r"final_norm\.weight has shape \(7,\).*needs \(24,\)"):
        load_hf_modernbert(model, str(tmp_path / "hf"))

    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    for change, message in (
        ({"norm_bias": True}, "norm_bias True"),
        ({"layer_types": ["full_attention"] * LAYERS}, "layer_types"),
        ({"hidden_activation": "silu"}, "hidden_activation 'silu'"),
    ):
        path.write_text(json.dumps({**config, **change}))
        with pytest.raises(HFCheckpointError, match=message) as e:
            modernbert_config(str(path))
        assert "\n" not in str(e.value)


def task_logits(hf_model, batch):
    with torch.no_grad():
        return hf_model(
            input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(batch["input_mask"].astype(np.int64)),
        )


@pytest.mark.parametrize("task", ["classify", "tag", "span"])
def test_a_classifier_tagger_and_span_extractor_export_as_transformers_task_models(wordpiece, batch, tmp_path,
                                                                                  task):  # fmt: skip
    """Every weight placed (ModernBERT's task head included: without it the logits differ), the
    labels in the config (and the classifier's pooling), and logits within 1e-4 of ours (per text,
    or per real token)."""
    bert = modern_config(wordpiece.load().size, hidden_act="gelu_approximate")
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    names = {"id2label": dict(enumerate(labels)), "label2id": {k: i for i, k in enumerate(labels)}}
    if task == "classify":
        classifier = build_classifier(
            build_encoder(bert, T), len(labels), 0.1, seed=3, pooling="mean", config=bert
        )
        model = randomized(classifier, seed=4)
        save_hf_modernbert_task(model, bert, wordpiece, str(tmp_path / "hf"), scores="classifier",
                                architecture="ModernBertForSequenceClassification",
                                config=names | {"classifier_pooling": "mean"})  # fmt: skip
        cls = transformers.ModernBertForSequenceClassification
    elif task == "tag":
        tagger = build_tagger(build_encoder(bert, T), len(labels), 0.1, seed=3, config=bert)
        model = randomized(tagger, seed=4)
        save_hf_modernbert_task(model, bert, wordpiece, str(tmp_path / "hf"), scores="tagger",
                                architecture="ModernBertForTokenClassification", config=names)  # fmt: skip
        cls = transformers.ModernBertForTokenClassification
    else:
        model = randomized(build_span_model(build_encoder(bert, T), 0.1, seed=3, config=bert), seed=4)
        save_hf_modernbert_task(model, bert, wordpiece, str(tmp_path / "hf"), scores="span",
                                architecture="ModernBertForQuestionAnswering")  # fmt: skip
        cls = transformers.ModernBertForQuestionAnswering
    hf_model, info, warnings = load_quietly(cls, tmp_path / "hf")
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set(), info
    assert not info["mismatched_keys"] and not [m for m in warnings if "LOAD REPORT" in m], warnings

    ours = model({name: batch[name] for name in TASK_INPUTS}, training=False)
    theirs = task_logits(hf_model, batch)
    if task == "classify":  # one row of logits per text: its "real tokens" are its labels
        assert [hf_model.config.id2label[i] for i in range(len(labels))] == labels
        ours, hf = np.asarray(ours), theirs.logits.numpy()
        assert ours.shape == hf.shape and np.abs(ours).max() > 1.0
        assert np.abs(ours - hf).max() <= TOLERANCE
        pairs = [(ours, hf)]
    elif task == "tag":
        assert [hf_model.config.id2label[i] for i in range(len(labels))] == labels
        pairs = [(np.asarray(ours), theirs.logits.numpy())]
    else:
        pairs = [(np.asarray(ours[k]), getattr(theirs, f"{k}_logits").numpy()) for k in ("start", "end")]
    for mine, hf in pairs if task != "classify" else []:  # per token: the real ones only
        mine, hf = mine.reshape(*batch["input_mask"].shape, -1), hf.reshape(*batch["input_mask"].shape, -1)
        assert np.abs(mine).max() > 1.0
        assert real_difference(mine, hf, batch) <= TOLERANCE

    # the comparison can fail: the same folder without the head's norm is another model
    model.get_layer("task_norm").gamma.assign(np.ones(H, np.float32))
    changed = model({name: batch[name] for name in TASK_INPUTS}, training=False)
    changed = np.asarray(changed["start"] if task == "span" else changed)
    if task == "classify":
        assert np.abs(changed - pairs[0][1]).max() > 100 * TOLERANCE
        return
    changed = changed.reshape(*batch["input_mask"].shape, -1)
    assert real_difference(changed, pairs[0][1].reshape(changed.shape), batch) > 100 * TOLERANCE


def test_a_crf_tagger_or_a_bert_tagger_has_no_modernbert_task_form(wordpiece, tmp_path):
    bert = modern_config(wordpiece.load().size)
    crf = build_tagger(build_encoder(bert, T), 3, 0.1, seed=0, crf=True, config=bert)
    with pytest.raises(HFCheckpointError, match="a CRF tagger"):
        save_hf_modernbert_task(crf, bert, wordpiece, str(tmp_path / "a"), scores="tagger",
                                architecture="ModernBertForTokenClassification")  # fmt: skip
    plain = build_tagger(build_encoder(bert, T), 3, 0.1, seed=0)  # no config: no ModernBERT head
    with pytest.raises(HFCheckpointError, match="no ModernBERT task head"):
        save_hf_modernbert_task(plain, bert, wordpiece, str(tmp_path / "b"), scores="tagger",
                                architecture="ModernBertForTokenClassification")  # fmt: skip
