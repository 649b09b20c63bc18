import keras
import numpy as np
import pytest
import tensorflow as tf

from launch.optimizer import LayerwiseAdamW, WarmupLinearDecay, build_optimizer, layer_decay_multipliers


def test_warmup_then_linear_decay():
    schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=110, end_learning_rate=1e-5)
    values = {step: float(schedule(step)) for step in (0, 5, 10, 60, 110, 200)}
    assert values[0] == 0.0
    assert values[5] == pytest.approx(5e-4)
    assert values[10] == pytest.approx(1e-3)
    assert values[60] == pytest.approx((1e-3 + 1e-5) / 2)
    assert values[110] == pytest.approx(1e-5) and values[200] == pytest.approx(1e-5)
    assert WarmupLinearDecay.from_config(schedule.get_config()).get_config() == schedule.get_config()


def test_weight_decay_skips_layer_norm_and_biases():
    inputs = keras.Input((5,))
    x = keras.layers.Dense(3, name="dense")(inputs)
    x = keras.layers.LayerNormalization(name="norm")(x)
    model = keras.Model(inputs, x)
    optimizer = build_optimizer("adamw", learning_rate=0.1, warmup_steps=0, total_steps=100, weight_decay=0.5,
                                clipnorm=None)  # fmt: skip
    for v in model.trainable_variables:
        v.assign(np.ones(v.shape, "float32"))
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    # Zero gradients: Adam's step is 0, so only decoupled weight decay can move a weight.
    optimizer.apply_gradients([(np.zeros(v.shape, "float32"), v) for v in model.trainable_variables])
    moved = {v.path for v in model.trainable_variables if not np.array_equal(v.numpy(), before[v.path])}
    assert moved == {"dense/kernel"}


def test_variants_build():
    assert isinstance(
        build_optimizer("lamb", learning_rate=1e-3, warmup_steps=1, total_steps=9), keras.optimizers.Lamb
    )
    fp16 = build_optimizer("adamw", learning_rate=1e-3, warmup_steps=1, total_steps=9, mixed_precision="fp16")
    assert isinstance(fp16, keras.optimizers.LossScaleOptimizer)
    accumulating = build_optimizer(
        "adamw", learning_rate=1e-3, warmup_steps=1, total_steps=9, grad_accum_steps=4
    )
    assert accumulating.gradient_accumulation_steps == 4
    with pytest.raises(ValueError, match="--optimizer sgd: expected adamw or lamb"):
        build_optimizer("sgd", learning_rate=1e-3, warmup_steps=1, total_steps=9)


@pytest.mark.slow
def test_two_accumulated_half_batches_match_one_full_batch(small_corpus):
    from model.config import BertConfig
    from model.losses import compile_pretraining
    from model.masked_lm import build_pretraining_model
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.schema import read_manifest

    manifest = read_manifest(str(small_corpus))
    pool = next(iter(make_dataset(manifest, "train", InputConfig(64, training=False))))
    # 16 rows with the same number of real predictions: then each half's own normalisation (what
    # accumulation averages) and the full batch's agree, and the two updates must match closely.
    counts = pool[2]["mlm"].numpy().sum(axis=1)
    rows = np.flatnonzero(counts == np.bincount(counts.astype(int)).argmax())[:16]
    assert len(rows) == 16
    full = tuple({k: tf.gather(v, rows) for k, v in part.items()} for part in pool)
    halves = [tuple({k: v[i * 8 : (i + 1) * 8] for k, v in part.items()} for part in full) for i in range(2)]
    config = BertConfig(vocab_size=manifest.vocab.size, hidden_size=24, num_layers=1, num_heads=3,
                        intermediate_size=48, max_position=32, dropout=0.0)  # fmt: skip
    keras.utils.set_random_seed(1)
    reference = build_pretraining_model(config, 32, 5)
    weights = reference.get_weights()

    def train(batches, accumulate):
        model = build_pretraining_model(config, 32, 5)
        model.set_weights(weights)
        optimizer = build_optimizer("adamw", learning_rate=1e-2, warmup_steps=0, total_steps=1000,
                                    clipnorm=None, grad_accum_steps=accumulate)  # fmt: skip
        compile_pretraining(model, optimizer)
        for x, y, w in batches:
            model.train_on_batch(x, y, sample_weight=w)
        return model.get_weights()

    one_step = train([full], 1)
    accumulated = train(halves, 2)
    full_update = np.concatenate([(a - w).ravel() for a, w in zip(one_step, weights, strict=True)])
    accumulated_update = np.concatenate([(b - w).ravel() for b, w in zip(accumulated, weights, strict=True)])
    assert np.abs(full_update).max() > 1e-3  # the update really happened
    relative = np.linalg.norm(full_update - accumulated_update) / np.linalg.norm(full_update)
    assert relative < 1e-3, relative
    no_accumulation = train(halves, 1)  # two full steps instead: clearly different
    two_steps = np.concatenate([(b - w).ravel() for b, w in zip(no_accumulation, weights, strict=True)])
    assert np.linalg.norm(full_update - two_steps) / np.linalg.norm(full_update) > 0.3


def test_layer_decay_gives_each_layer_its_rate_from_the_head_down():
    factors = layer_decay_multipliers(
        ["token_embedding", "embedding_projection", "transformer_0", "transformer_1", "transformer_2",
         "pooler", "classifier"], num_layers=3, decay=0.5,
    )  # fmt: skip
    assert factors == {
        "token_embedding": 0.0625, "embedding_projection": 0.0625, "transformer_0": 0.125,
        "transformer_1": 0.25, "transformer_2": 0.5, "pooler": 1.0, "classifier": 1.0,
    }  # fmt: skip


def test_layerwise_adamw_scales_each_layers_first_step():
    """Adam's first step is lr x sign(gradient) (m / sqrt(v) = g / |g|), so each layer's move is
    exactly its rate: a multiplier that went missing or to the wrong layer shows."""
    inputs = keras.Input((4,))
    x = keras.layers.Dense(3, name="low")(inputs)
    x = keras.layers.Dense(2, name="high")(x)
    model = keras.Model(inputs, x)
    optimizer = build_optimizer("adamw", learning_rate=0.1, warmup_steps=0, total_steps=100,
                                weight_decay=0.0, clipnorm=None, lr_multipliers={"low": 0.25})  # fmt: skip
    assert isinstance(optimizer, LayerwiseAdamW)
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    optimizer.apply_gradients([(np.ones(v.shape, "float32"), v) for v in model.trainable_variables])
    for v in model.trainable_variables:
        step = before[v.path] - v.numpy()
        np.testing.assert_allclose(step, 0.1 * (0.25 if v.path.startswith("low/") else 1.0), rtol=1e-4)
    assert LayerwiseAdamW.from_config(optimizer.get_config()).lr_multipliers == {"low": 0.25}
    with pytest.raises(ValueError, match="per-layer learning rates are built for adamw"):
        build_optimizer("lamb", learning_rate=1e-3, warmup_steps=1, total_steps=9, lr_multipliers={"a": 0.5})


def test_multipliers_set_after_build_scale_the_next_step():
    """Pretraining from a release learns which layers start fresh after the optimizer is built
    (--fresh_lr_multiplier): factors set then still scale each layer's move, and the config
    carries them."""
    inputs = keras.Input((5,))
    model = keras.Model(
        inputs, keras.layers.Dense(3, name="head")(keras.layers.Dense(7, name="body")(inputs))
    )
    optimizer = build_optimizer("adamw", learning_rate=0.01, warmup_steps=0, total_steps=100,
                                weight_decay=0.0, clipnorm=None, lr_multipliers={})  # fmt: skip
    optimizer.build(model.trainable_variables)
    optimizer.set_lr_multipliers({"head": 30.0})
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    optimizer.apply_gradients([(np.full(v.shape, -2.0, "float32"), v) for v in model.trainable_variables])
    for v in model.trainable_variables:
        factor = 30.0 if v.path.startswith("head/") else 1.0
        np.testing.assert_allclose(v.numpy() - before[v.path], 0.01 * factor, rtol=1e-4)
    assert optimizer.get_config()["lr_multipliers"] == {"head": 30.0}


def rows_learn_and_the_rest_stay() -> None:
    """`LayerwiseAdamW.train_rows` (--warmup_embeddings on an extended vocab): rows 2 and 9 of 11
    learn; the others stay bit for bit under weight decay and clipping, where a gradient reaches
    every row (as the tied MLM output sends one); an unmasked variable still learns and decays;
    lifting the mask lets every row move. Run under either backend (see below)."""
    table = keras.Variable(np.ones((11, 3), "float32"), name="table")
    other = keras.Variable(np.ones(5, "float32"), name="other")
    optimizer = build_optimizer("adamw", learning_rate=0.1, warmup_steps=0, total_steps=100, weight_decay=0.5,
                                clipnorm=1.0, lr_multipliers={})  # fmt: skip
    optimizer.build([table, other])
    rows = np.zeros(11, "float32")
    rows[[2, 9]] = 1.0
    optimizer.train_rows({table.path: rows})
    gradient = np.linspace(-1.0, 1.0, 33, dtype="float32").reshape(11, 3) + 0.05
    for _ in range(3):
        optimizer.apply_gradients([(gradient, table), (np.ones(5, "float32"), other)])
    after = keras.ops.convert_to_numpy(table.value)
    np.testing.assert_array_equal(np.delete(after, [2, 9], axis=0), 1.0)
    assert np.abs(after[[2, 9]] - 1.0).min() > 0.1
    assert np.all(keras.ops.convert_to_numpy(other.value) < 1.0 - 0.3)
    optimizer.train_rows({})
    optimizer.apply_gradients([(gradient, table), (np.ones(5, "float32"), other)])
    assert np.abs(np.delete(keras.ops.convert_to_numpy(table.value), [2, 9], axis=0) - 1.0).min() > 0


def test_only_the_masked_rows_learn():
    rows_learn_and_the_rest_stay()


def test_only_the_masked_rows_learn_from_a_lookups_sparse_gradient():
    table = keras.Variable(np.ones((7, 2), "float32"), name="table")
    optimizer = build_optimizer("adamw", learning_rate=0.1, warmup_steps=0, total_steps=100,
                                lr_multipliers={})  # fmt: skip
    optimizer.build([table])
    optimizer.train_rows({table.path: np.array([0, 0, 0, 1, 0, 0, 0], "float32")})
    with tf.GradientTape() as tape:  # a lookup's gradient is tf.IndexedSlices over the rows it read
        loss = tf.reduce_sum(tf.gather(table.value, [1, 3, 3, 5]))
    (sparse,) = tape.gradient(loss, [table.value])
    assert isinstance(sparse, tf.IndexedSlices)
    optimizer.apply_gradients([(sparse, table)])
    moved = np.flatnonzero(np.abs(table.numpy() - 1.0).max(axis=1))
    assert moved.tolist() == [3]


def test_only_the_masked_rows_learn_on_jax():
    """The same under KERAS_BACKEND=jax, where the warm-up's train step applies the optimizer
    statelessly."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    check = "from tests.launch.test_optimizer import rows_learn_and_the_rest_stay as check; check()"
    done = subprocess.run(
        [sys.executable, "-c", check],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
