"""ModernBERT's block under the Keras standard, on tiny odd sizes (vocab 37, hidden 24, heads 3, 3
layers so that one is global, window 4, seq 11, batch 5), and its two position pieces against
transformers' own: the sliding-window mask and the rotary tables, at both bases."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.config import PRESETS, BertConfig
from model.encoder import encoder_from
from model.masked_lm import build_pretraining_model
from model.modernbert import (
    ModernBlock,
    attention_ids,
    band,
    global_attention,
    local_attention,
    rotary_tables,
    rotate,
)
from model.pretraining import Objective

CONFIG = BertConfig(
    37,
    architecture="modernbert",
    hidden_size=24,
    num_layers=3,
    num_heads=3,
    intermediate_size=29,
    local_attention=4,
    dropout=0.0,
    layer_norm_epsilon=1e-5,
)
B, T, P = 5, 11, 4


def batch(seed=0, documents=1, padded=True):
    rng = np.random.default_rng(seed)
    mask = np.ones((B, T), "int32")
    if padded:
        mask[1, 8:] = 0
        mask[3, 5:] = 0
    doc = np.ones((B, T), "int32")
    if documents == 2:
        doc[:, 6:] = 2
    return {
        "input_ids": rng.integers(5, 37, (B, T)).astype("int32"),
        "input_mask": mask,
        "segment_ids": rng.integers(0, 2, (B, T)).astype("int32"),
        "document_ids": doc * mask,
        "masked_lm_positions": np.sort(rng.integers(0, 5, (B, P)), axis=1).astype("int32"),
    }


def encoder_input(x):
    return {k: v for k, v in x.items() if k != "masked_lm_positions"}


def test_presets_have_modernberts_published_shapes():
    base = BertConfig.preset("modern-base", 50368)
    large = BertConfig.preset("modern-large", 50368)
    assert (base.num_layers, base.hidden_size, base.intermediate_size, base.num_heads) == (22, 768, 1152, 12)
    assert (large.num_layers, large.hidden_size, large.intermediate_size, large.num_heads) == (
        28,
        1024,
        2624,
        16,
    )
    assert base.modern and base.local_attention == 128 and base.global_attn_every_n_layers == 3
    assert {name for name in PRESETS if name.startswith("modern-")} == {
        f"modern-{size}" for size in ("tiny", "mini", "small", "base", "large")
    }


@pytest.mark.parametrize("size", ["tiny", "mini", "small"])
def test_small_presets_match_the_bert_presets_parameter_count(size):
    def count(config):
        return build_pretraining_model(config, 16, 2).count_params()

    bert, modern = count(BertConfig.preset(size, 37)), count(BertConfig.preset(f"modern-{size}", 37))
    assert abs(modern / bert - 1) < 0.1, (bert, modern)


def test_block_round_trips_every_argument():
    block = ModernBlock(
        hidden_size=24,
        num_heads=3,
        intermediate_size=29,
        rope_theta=123.0,
        local_attention=6,
        first=True,
        dropout=0.2,
        initializer_range=0.03,
        output_initializer_range=0.01,
        layer_norm_epsilon=1e-6,
        hidden_act="gelu_approximate",
        name="m",
    )
    config = block.get_config()
    assert ModernBlock.from_config(config).get_config() == config
    args = [a for a in inspect.signature(ModernBlock.__init__).parameters if a not in ("self", "kwargs")]
    assert set(args) <= set(config)


def test_layer_kinds_follow_global_attn_every_n_layers():
    model = build_pretraining_model(BertConfig(**{**CONFIG.__dict__, "num_layers": 7}), T, P)
    blocks = [model.get_layer(f"transformer_{i}") for i in range(7)]
    assert [b.local_attention for b in blocks] == [None, 4, 4, None, 4, 4, None]
    assert [b.rope_theta for b in blocks] == [
        160_000.0,
        10_000.0,
        10_000.0,
        160_000.0,
        10_000.0,
        10_000.0,
        160_000.0,
    ]
    assert [b.first for b in blocks] == [True] + [False] * 6
    assert not any(w.path.startswith("transformer_0/attention_norm") for w in model.weights)
    assert not any(w.path.endswith(("bias", "beta")) for w in model.weights if w.path != "mlm_bias/bias")


@pytest.mark.parametrize("window", [4, 5, 6, 128])
def test_the_band_is_transformers_sliding_window_mask(window):
    """ModernBertConfig.sliding_window is local_attention // 2; transformers' overlay is the mask."""
    from transformers.masking_utils import sliding_window_bidirectional_overlay

    theirs = sliding_window_bidirectional_overlay(window // 2)
    expected = np.array([[theirs(0, 0, q, k) for k in range(T)] for q in range(T)])
    np.testing.assert_array_equal(band(T, window), expected)
    assert band(T, window).sum() < T * T or window >= 2 * (T - 1)


@pytest.mark.parametrize("seq_len, window", [(11, 4), (23, 6), (23, 5), (9, 2), (30, 16)])
def test_chunked_local_attention_equals_the_full_scores_under_the_band(seq_len, window):
    rng = np.random.default_rng(seq_len + window)
    q, k, v = (rng.normal(size=(3, seq_len, 2, 4)).astype("float32") for _ in range(3))
    mask = np.ones((3, seq_len), "int32")
    mask[1, seq_len - 3 :] = 0
    doc = np.where(np.arange(seq_len) < seq_len // 2, 1, 2)[None].repeat(3, 0)
    ids = attention_ids(mask, doc)
    no_dropout = keras.layers.Dropout(0.0)
    chunked = local_attention(q, k, v, ids, window, no_dropout, False)
    full = global_attention(q, k, v, ids, no_dropout, False, band(seq_len, window))
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(chunked)[real], np.asarray(full)[real], atol=1e-5)
    # The window matters: the same scores without it differ.
    unbanded = global_attention(q, k, v, ids, no_dropout, False)
    assert np.abs(np.asarray(unbanded)[real] - np.asarray(full)[real]).max() > 1e-3
    # Without dropout all three went through keras.ops.dot_product_attention; with it (inference:
    # none drawn) the scores are written out, and give the same within 1e-5.
    written = keras.layers.Dropout(0.1)
    for fused, window_mask in ((chunked, "chunks"), (full, band(seq_len, window)), (unbanded, None)):
        if isinstance(window_mask, str):
            out = local_attention(q, k, v, ids, window, written, False)
        else:
            out = global_attention(q, k, v, ids, written, False, window_mask)
        np.testing.assert_allclose(np.asarray(out)[real], np.asarray(fused)[real], atol=1e-5)
    assert np.isfinite(np.asarray(chunked)).all()  # padding rows too: none is masked whole


@pytest.mark.parametrize("kind, theta", [("full_attention", 160_000.0), ("sliding_attention", 10_000.0)])
def test_rope_is_transformers_at_both_bases(kind, theta):
    import torch
    from transformers.models.modernbert import modeling_modernbert

    hf_config = modeling_modernbert.ModernBertConfig(
        hidden_size=24, num_attention_heads=3, num_hidden_layers=3
    )
    rotary = modeling_modernbert.ModernBertRotaryEmbedding(hf_config)
    x = torch.zeros(1, T, 24)
    cos, sin = rotary(x, torch.arange(T)[None], kind)
    ours_cos, ours_sin = rotary_tables(T, 8, theta)
    np.testing.assert_allclose(ours_cos, cos[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(ours_sin, sin[0].numpy(), atol=1e-6)
    q = np.random.default_rng(1).normal(size=(2, 3, T, 8)).astype("float32")  # (B, N, T, D), as torch
    theirs, _ = modeling_modernbert.apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(q), cos, sin)
    ours = rotate(np.transpose(q, (0, 2, 1, 3)), ours_cos, ours_sin)  # ours: (B, T, N, D)
    np.testing.assert_allclose(np.transpose(np.asarray(ours), (0, 2, 1, 3)), theirs.numpy(), atol=1e-5)


def test_clone_and_keras_file_give_identical_outputs(tmp_path):
    model = build_pretraining_model(CONFIG, T, P, next_sentence=True)
    x = batch()
    out = model(x)
    assert out["mlm"].shape == (B, P, 37) and out["nsp"].shape == (B, 2) and out["mlm"].dtype == "float32"
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(clone(x)["mlm"], out["mlm"])
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(loaded(x)["mlm"], out["mlm"])
    encoded = encoder_from(model)(encoder_input(x))
    assert encoded["sequence_output"].shape == (B, T, 24) and encoded["pooled_output"].shape == (B, 24)


def test_segments_are_ignored_documents_and_padding_are_not():
    keras.utils.set_random_seed(2)
    encoder = encoder_from(build_pretraining_model(CONFIG, T, P))
    x = encoder_input(batch(documents=2, padded=False))
    base = encoder(x)["sequence_output"].numpy()
    flipped = encoder({**x, "segment_ids": 1 - x["segment_ids"]})["sequence_output"].numpy()
    np.testing.assert_array_equal(base, flipped)
    # A token of the second document changes; the first document's outputs do not.
    changed = {**x, "input_ids": x["input_ids"].copy()}
    changed["input_ids"][:, 8] = 6 if changed["input_ids"][0, 8] != 6 else 7
    after = encoder(changed)["sequence_output"].numpy()
    np.testing.assert_allclose(after[:, :6], base[:, :6], atol=1e-6)
    assert np.abs(after[:, 6:] - base[:, 6:]).max() > 1e-4
    # Padding: whatever sits in a padded slot, real tokens read the same.
    padded = {**x, "input_mask": x["input_mask"].copy(), "input_ids": x["input_ids"].copy()}
    padded["input_mask"][:, 9:] = 0
    other = {**padded, "input_ids": padded["input_ids"].copy()}
    other["input_ids"][:, 9:] = 5
    np.testing.assert_allclose(
        encoder(padded)["sequence_output"].numpy()[:, :9],
        encoder(other)["sequence_output"].numpy()[:, :9],
        atol=1e-6,
    )


def test_the_last_block_on_the_read_rows_only_equals_a_full_pass():
    keras.utils.set_random_seed(3)
    config = BertConfig(**{**CONFIG.__dict__, "num_layers": 2, "global_attn_every_n_layers": 2})  # local last
    model = build_pretraining_model(config, T, P)
    x = batch(seed=4, documents=2)
    out = model(x, training=False)
    full = encoder_from(model)(encoder_input(x), training=False)["sequence_output"].numpy()
    picked = np.take_along_axis(full, x["masked_lm_positions"][:, :, None], axis=1)
    h = model.get_layer("mlm_norm")(model.get_layer("mlm_transform")(picked))
    logits = model.get_layer("mlm_bias")(model.get_layer("token_embedding")(h, reverse=True))
    np.testing.assert_allclose(out["mlm"].numpy(), logits.numpy(), atol=2e-5)


def test_every_gradient_is_dense_and_the_step_compiles_with_xla():
    model = build_pretraining_model(CONFIG, T, P)
    x = batch(seed=5)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True)["mlm"])
    grads = tape.gradient(loss, model.trainable_variables)
    assert not [
        v.path
        for v, g in zip(model.trainable_variables, grads, strict=True)
        if isinstance(g, tf.IndexedSlices) or g is None
    ]
    compiled = tf.function(lambda inputs: model(inputs, training=False)["mlm"], jit_compile=True)
    np.testing.assert_allclose(compiled(x).numpy(), model(x, training=False)["mlm"].numpy(), atol=1e-5)


def test_flops_count_the_local_layers_band_only():
    """At T = 512 with a window of 128, a local layer's scores cost 129/512 of a global one's."""
    config = BertConfig.preset("modern-tiny", 37)
    everything_global = BertConfig(**{**config.__dict__, "global_attn_every_n_layers": 1})
    objective = Objective()
    banded = objective.training_flops_per_example(config, 512, 20)
    full = objective.training_flops_per_example(everything_global, 512, 20)
    scores_per_layer = 3 * 2 * 2 * 512 * 512 * config.hidden_size
    assert full - banded == pytest.approx(2 * scores_per_layer * (1 - 129 / 512))
