"""Attention through keras.ops.dot_product_attention (issue 57): without attention dropout both
blocks take the call a GPU's cuDNN or a TPU fuses, and on this CPU it gives today's numbers; no
row is ever masked whole. Tiny odd sizes: seq 11, hidden 12, heads 3, batch 5."""

import dataclasses

import keras
import numpy as np
import pytest

from common.errors import ConfigError
from model.bert import attention_mask
from model.config import BertConfig
from model.masked_lm import build_pretraining_model
from model.modernbert import attend, attention_ids

B, T, P = 5, 11, 4


def batch(seed=0):
    """Real tokens, padding, and rows that pack two documents; task-style rows (document_ids =
    input_mask: padding's id 0) and pretraining rows (padding in the last document)."""
    rng = np.random.default_rng(seed)
    mask = np.ones((B, T), "int32")
    mask[1, 7:] = 0
    mask[3, 4:] = 0
    doc = np.ones((B, T), "int32")
    doc[2, 6:] = 2
    doc[4, 5:] = 2
    doc[3] = mask[3]  # padding's document id 0, as fine-tuning's rows
    return {
        "input_ids": rng.integers(5, 37, (B, T)).astype("int32") * mask,
        "input_mask": mask,
        "segment_ids": np.zeros((B, T), "int32"),
        "document_ids": doc,
        "masked_lm_positions": np.sort(rng.integers(0, 4, (B, P)), axis=1).astype("int32"),
    }


def logits(config: BertConfig, weights=None):
    model = build_pretraining_model(config, T, P)
    if weights is not None:
        model.set_weights(weights)
    return model, np.asarray(model(batch(), training=False)["mlm"])


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_no_attention_dropout_gives_todays_logits(architecture):
    """Attention dropout 0 takes keras.ops.dot_product_attention; 0.1 writes the scores out (at
    inference, no dropout drawn): the same weights give the same MLM logits within 1e-5."""
    shape = dict(vocab_size=37, hidden_size=12, num_layers=3, num_heads=3, intermediate_size=19,
                 max_position=16, architecture=architecture, local_attention=4)  # fmt: skip
    if architecture == "bert":
        shape.pop("local_attention")
    config = BertConfig(**shape, dropout=0.1)
    keras.utils.set_random_seed(3)
    written, before = logits(dataclasses.replace(config, attention_dropout=0.1))
    _, fused = logits(dataclasses.replace(config, attention_dropout=0.0), written.get_weights())
    np.testing.assert_allclose(fused, before, atol=1e-5)
    assert np.abs(before).max() > 0.1  # not a vacuous match


def test_the_two_paths_really_differ_in_what_they_call():
    """The check above could pass with one path twice: with dropout on in training, the written-out
    path draws masks and the outputs move; the fused path's do not (no attention dropout)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, T, 3, 4)).astype("float32") for _ in range(3))
    visible = np.ones((2, 1, T, T), bool)
    dropped = attend(q, k, v, visible, keras.layers.Dropout(0.5, seed=1), training=True)
    kept = attend(q, k, v, visible, keras.layers.Dropout(0.0), training=True)
    reference = attend(q, k, v, visible, keras.layers.Dropout(0.5, seed=1), training=False)
    np.testing.assert_allclose(np.asarray(kept), np.asarray(reference), atol=1e-5)
    assert np.abs(np.asarray(dropped) - np.asarray(reference)).max() > 1e-2


def test_no_row_is_masked_whole_and_real_rows_are_unchanged():
    x = batch()
    mask = np.asarray(attention_mask(x["input_mask"], x["document_ids"]))  # (B, T, T)
    assert mask.any(axis=-1).all()  # a fused kernel's softmax never runs over nothing
    real = x["input_mask"].astype(bool)
    same = x["document_ids"][:, :, None] == x["document_ids"][:, None, :]
    expected = same & real[:, None, :]  # a real token: its document's real tokens, as BERT's
    np.testing.assert_array_equal(mask[real], expected[real])
    ids = np.asarray(attention_ids(x["input_mask"], x["document_ids"]))
    visible = ids[:, :, None] == ids[:, None, :]
    assert visible.any(axis=-1).all()
    np.testing.assert_array_equal(visible[real], expected[real])


def test_attention_dropout_is_its_own_rate_and_a_config_states_it():
    config = BertConfig(vocab_size=37, dropout=0.1, attention_dropout=0.0)
    assert config.attention_probs_dropout == 0.0
    assert BertConfig(vocab_size=37, dropout=0.2).attention_probs_dropout == 0.2  # None: dropout
    assert BertConfig.from_json(config.to_json()) == config
    old = '{"vocab_size": 37, "dropout": 0.1}'  # a config written before the field
    assert BertConfig.from_json(old).attention_probs_dropout == 0.1
    with pytest.raises(ConfigError, match=r"attention_dropout: expected a rate in \[0, 1\), found 1.5"):
        BertConfig(vocab_size=37, attention_dropout=1.5)
