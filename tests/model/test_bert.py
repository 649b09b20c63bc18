"""The Keras standard as tests (README, "The model": the four rules), on tiny odd sizes: seq 7,
hidden 12, heads 3, vocab 37,
max_predictions 5, batch 13, so a swapped axis fails."""

import dataclasses
import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.bert import OneHotEmbedding, PositionEmbedding, TransformerBlock
from model.config import BertConfig
from model.encoder import encoder_from
from model.losses import MaskedLMLoss, compile_pretraining
from model.masked_lm import BiasAdd, build_pretraining_model

REPO = Path(__file__).resolve().parents[2]
CONFIG = BertConfig(
    vocab_size=37, hidden_size=12, num_layers=2, num_heads=3, intermediate_size=37, max_position=16
)
B, T, P = 13, 7, 5


def batch(seed=0, documents=1):
    rng = np.random.default_rng(seed)
    doc = np.ones((B, T), "int32")
    if documents == 2:
        doc[:, 4:] = 2
    return {
        "input_ids": rng.integers(5, 37, (B, T)).astype("int32"),
        "input_mask": np.ones((B, T), "int32"),
        "segment_ids": rng.integers(0, 2, (B, T)).astype("int32"),
        "document_ids": doc,
        "masked_lm_positions": np.sort(rng.integers(0, T, (B, P)), axis=1).astype("int32"),
    }


@pytest.mark.parametrize(
    "layer",
    [
        PositionEmbedding(16, 0.05, name="p"),
        TransformerBlock(
            hidden_size=12,
            num_heads=3,
            intermediate_size=37,
            dropout=0.2,
            initializer_range=0.03,
            layer_norm_epsilon=1e-6,
            pre_layer_norm=True,
            hidden_act="gelu_approximate",
            name="t",
        ),  # fmt: skip
        BiasAdd(name="b"),
        OneHotEmbedding(3, 12, embeddings_initializer="ones", name="o"),
    ],
)
def test_custom_layers_round_trip_their_config(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config


def test_every_constructor_argument_is_in_get_config():
    import inspect

    # OneHotEmbedding adds no argument to keras.layers.Embedding's: the round trip above covers it.
    examples = [PositionEmbedding(9), TransformerBlock(hidden_size=12, num_heads=3, intermediate_size=37),
                BiasAdd(), MaskedLMLoss()]  # fmt: skip
    for instance in examples:
        args = [
            a for a in inspect.signature(type(instance).__init__).parameters if a not in ("self", "kwargs")
        ]
        assert set(args) <= set(instance.get_config()), type(instance)


@pytest.mark.parametrize("pre_ln, accelerated", [(False, False), (True, False), (False, True)])
def test_shapes_clone_and_keras_file_give_identical_outputs(pre_ln, accelerated, tmp_path):
    """Also with the accelerator's changes: no attention dropout (the fused call), and the vocab
    padded to a multiple of 16 (48 rows, the last 11 masked)."""
    config = BertConfig(**{**CONFIG.__dict__, "pre_layer_norm": pre_ln})
    if accelerated:
        config = dataclasses.replace(config, attention_dropout=0.0).padded(16)
    model = build_pretraining_model(config, T, P, next_sentence=True)
    x = batch()
    out = model(x)
    assert out["mlm"].shape == (B, P, 48 if accelerated else 37) and out["nsp"].shape == (B, 2)
    assert out["mlm"].dtype == "float32"
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(clone(x)["mlm"], out["mlm"])
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)  # no custom_objects: the layers are registered
    np.testing.assert_array_equal(loaded(x)["mlm"], out["mlm"])
    np.testing.assert_array_equal(loaded(x)["nsp"], out["nsp"])
    encoded = encoder_from(model)({k: v for k, v in x.items() if k != "masked_lm_positions"})
    assert encoded["sequence_output"].shape == (B, T, 12) and encoded["pooled_output"].shape == (B, 12)


def test_no_two_weights_are_drawn_from_one_seed():
    """Every random weight gets its own initializer: one unseeded Keras 3 initializer handed to two
    layers draws the same numbers for both (the segment embedding was once the token embedding's
    first two rows, and a block's two feed-forward kernels held the same numbers)."""
    keras.utils.set_random_seed(0)
    model = build_pretraining_model(CONFIG, T, P, next_sentence=True)
    first_values = {}
    for w in model.trainable_weights:
        if w.path.endswith(("gamma", "beta", "bias")):  # constant initialisers
            continue
        head = tuple(np.asarray(w).ravel()[:6].round(7).tolist())
        assert head not in first_values, f"{w.path} draws the same numbers as {first_values[head]}"
        first_values[head] = w.path
    assert len(first_values) == 6 + 6 * CONFIG.num_layers  # 3 embeddings, MLM, pooler, NSP; 6 per block


def test_output_projection_is_tied_to_the_token_embedding():
    model = build_pretraining_model(CONFIG, T, P)
    names = [w.path for w in model.weights]
    assert sum("token_embedding" in n for n in names) == 1  # one matrix, used twice
    assert any(n.endswith("mlm_bias/bias") for n in names)


def test_a_token_ignores_the_other_document_in_its_row():
    model = build_pretraining_model(CONFIG, T, P)
    encoder = encoder_from(model)
    x = {k: v for k, v in batch(documents=2).items() if k != "masked_lm_positions"}
    changed = {**x, "input_ids": x["input_ids"].copy()}
    changed["input_ids"][:, 4:] = (changed["input_ids"][:, 4:] + 7) % 32 + 5  # document 2 only
    a = encoder(x)["sequence_output"].numpy()
    b = encoder(changed)["sequence_output"].numpy()
    np.testing.assert_allclose(a[:, :4], b[:, :4], atol=1e-6)  # document 1 unchanged
    assert np.abs(a[:, 4:] - b[:, 4:]).max() > 1e-3
    # ...and without document_ids separating them, it does not.
    joined = {**x, "document_ids": np.ones((B, T), "int32")}
    joined_changed = {**changed, "document_ids": np.ones((B, T), "int32")}
    assert np.abs(encoder(joined)["sequence_output"].numpy()[:, :4]
                  - encoder(joined_changed)["sequence_output"].numpy()[:, :4]).max() > 1e-3  # fmt: skip


def test_padding_is_not_attended_to():
    encoder = encoder_from(build_pretraining_model(CONFIG, T, P))
    x = {k: v for k, v in batch().items() if k != "masked_lm_positions"}
    x["input_mask"][:, 5:] = 0
    other = {**x, "input_ids": x["input_ids"].copy()}
    other["input_ids"][:, 5:] = 0
    np.testing.assert_allclose(encoder(x)["sequence_output"].numpy()[:, :5],
                               encoder(other)["sequence_output"].numpy()[:, :5], atol=1e-6)  # fmt: skip


def test_no_add_loss_or_add_metric_in_the_package():
    pattern = re.compile(r"\.(add_loss|add_metric)\(")
    offenders = [
        f"{path.relative_to(REPO)}:{i}"
        for folder in ("pipeline", "model", "launch")
        for path in sorted((REPO / folder).rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
    assert pattern.search("model.add_loss(x)")  # the scan can fail


def test_no_one_argument_tf_where_in_the_package():
    pattern = re.compile(r"tf\.where\([^,()]*\)")
    offenders = [
        str(path) for folder in ("pipeline", "model", "launch")
        for path in (REPO / folder).rglob("*.py") if pattern.search(path.read_text())
    ]  # fmt: skip
    assert offenders == []


def test_masked_lm_loss_is_normalised_by_real_masked_tokens():
    logits = tf.random.stateless_normal((3, 5, 37), seed=(1, 2))
    labels = tf.constant(np.arange(15).reshape(3, 5) % 37)
    weights = tf.constant([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], tf.float32)
    per_position = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True).numpy()
    expected = (per_position * weights.numpy()).sum() / 8
    assert float(MaskedLMLoss()(labels, logits, weights)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
def test_train_step_compiles_with_xla_and_a_tiny_model_overfits(small_corpus):
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.schema import read_manifest

    manifest = read_manifest(str(small_corpus))
    config = BertConfig(vocab_size=manifest.vocab.size, hidden_size=48, num_layers=2, num_heads=3,
                        intermediate_size=96, max_position=32, dropout=0.0)  # fmt: skip
    ds = make_dataset(manifest, "train", InputConfig(per_replica_batch_size=16, training=False))
    ds = ds.take(4).cache().repeat()
    keras.utils.set_random_seed(0)
    model = compile_pretraining(build_pretraining_model(config, 32, 5), keras.optimizers.AdamW(3e-3),
                                jit_compile=True)  # fmt: skip
    history = model.fit(ds, steps_per_epoch=4, epochs=40, verbose=0).history
    assert model.jit_compile
    assert history["loss"][-1] < 0.3 * history["loss"][0], history["loss"][::8]
    assert history["accuracy"][-1] > 0.8


@pytest.mark.parametrize(
    "config",
    [
        CONFIG,
        BertConfig(37, 12, 3, 3, 37, 16, pre_layer_norm=True, hidden_act="gelu_approximate"),
    ],
    ids=["post-LN, exact GELU", "pre-LN, tanh GELU"],
)
def test_the_last_block_on_the_read_rows_only_equals_a_full_pass(config):
    """The pretraining model runs its last block on [CLS] and the P masked rows only; the heads
    applied to a full pass (every block on all T tokens, via `encoder_from`) give the same logits."""
    keras.utils.set_random_seed(3)
    model = build_pretraining_model(config, T, P, next_sentence=True)
    x = batch(seed=4, documents=2)
    x["input_mask"][:2, -2:] = 0  # some padding too
    out = model(x, training=False)
    full = encoder_from(model)({k: v for k, v in x.items() if k != "masked_lm_positions"}, training=False)
    picked = np.take_along_axis(full["sequence_output"].numpy(), x["masked_lm_positions"][:, :, None], axis=1)
    h = model.get_layer("mlm_norm")(model.get_layer("mlm_transform")(picked))
    logits = model.get_layer("mlm_bias")(model.get_layer("token_embedding")(h, reverse=True))
    np.testing.assert_allclose(out["mlm"].numpy(), logits.numpy(), atol=2e-5)
    nsp = model.get_layer("nsp_logits")(full["pooled_output"])
    np.testing.assert_allclose(out["nsp"].numpy(), nsp.numpy(), atol=2e-5)
    assert (
        config.hidden_act == "gelu"
        or model.get_layer("mlm_transform").activation.__name__ == "gelu_approximate"
    )


def test_every_gradient_is_dense():
    """An IndexedSlices gradient (a gather's) meets Keras 3.15's Adam, which squares slices before
    summing duplicate rows: no variable of the model may get one."""
    model = build_pretraining_model(CONFIG, T, P, next_sentence=True)
    x = batch(seed=5)
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        loss = tf.reduce_sum(out["mlm"]) + tf.reduce_sum(out["nsp"])
    grads = tape.gradient(loss, model.trainable_variables)
    sparse = [
        v.path
        for v, g in zip(model.trainable_variables, grads, strict=True)
        if isinstance(g, tf.IndexedSlices)
    ]
    assert sparse == []
