"""ELECTRA on tiny odd sizes (hidden 12, heads 3, generator 1/3: hidden 4, one head; vocab 37;
seq 9, 4 predictions, batch 5), so a swapped axis or a shared-by-mistake weight fails: the
generator's shape and the embeddings it shares, what each network sees, the sampler's seeds and
its never-sampled ids, the target the loss derives, and the seed's rules (config, clone, .keras,
XLA)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.config import BertConfig
from model.electra import TokenSampler, generator_config, place
from model.encoder import encoder_from
from model.losses import ReplacedFraction, ReplacedTokenLoss, ReplacedTokenPrecision, ReplacedTokenRecall
from model.pretraining import Objective

CONFIG = BertConfig(vocab_size=37, hidden_size=12, num_layers=2, num_heads=3, intermediate_size=29,
                    max_position=16)  # fmt: skip
B, T, P = 5, 9, 4
MASK, SPECIALS = 4, (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK]
ELECTRA = Objective("electra", generator_size=1 / 3)


def batch(seed=0, padded_from=7):
    """Rows of real tokens (ids 5..36) after [CLS], padding from `padded_from`, 3 real predictions
    and one padding slot per row (position 0, weight 0), stored 80/10/10-style: some positions
    [MASK], one kept as is."""
    rng = np.random.default_rng(seed)
    original = rng.integers(5, 37, (B, T)).astype("int32")
    original[:, 0] = 2
    original[:, padded_from:] = 0
    mask = (original != 0).astype("int32")
    positions = np.stack([np.sort(rng.choice(np.arange(1, padded_from), 3, replace=False)) for _ in range(B)])
    positions = np.concatenate([positions, np.zeros((B, 1), int)], axis=1).astype("int32")
    weights = np.array([[1, 1, 1, 0]] * B, "float32")
    ids = np.take_along_axis(original, positions, axis=1) * (weights > 0)
    stored = original.copy()
    for r in range(B):
        stored[r, positions[r, :2]] = MASK  # the third stays the original token (BERT's 10 %)
    return original, {
        "input_ids": stored,
        "input_mask": mask,
        "segment_ids": np.zeros((B, T), "int32"),
        "document_ids": mask,
        "masked_lm_positions": positions,
        "masked_lm_ids": ids.astype("int32"),
        "masked_lm_weights": weights,
    }


def build(seed=7):
    return ELECTRA.build(CONFIG, T, P, excluded_ids=SPECIALS, seed=seed)


def test_the_generator_is_a_third_as_wide_with_the_same_depth():
    small = generator_config(CONFIG, 1 / 3)
    assert (small.hidden_size, small.num_heads, small.intermediate_size, small.num_layers) == (4, 1, 10, 2)
    assert small.embedding_width == 12  # the discriminator's embeddings, projected to 4
    with pytest.raises(ValueError, match="does not split into"):
        generator_config(BertConfig(vocab_size=37, hidden_size=24, num_heads=8), 0.45)  # 11 into 4 heads


def test_one_embedding_serves_both_networks_and_the_output_projection():
    model = build()
    paths = [w.path for w in model.weights]
    for name in ("token_embedding", "segment_embedding", "position_embedding", "embedding_norm/gamma"):
        assert sum(name in p for p in paths) == 1, name
    shapes = {w.path: tuple(w.shape) for w in model.weights}
    assert shapes["generator_embedding_projection/kernel"] == (12, 4)
    assert shapes["generator_transformer_1/intermediate/kernel"] == (4, 10)
    assert shapes["generator_mlm_transform/kernel"] == (4, 12)  # back to E for the tied projection
    assert shapes["transformer_1/intermediate/kernel"] == (12, 29)
    assert shapes["rtd_logits/kernel"] == (12, 1)
    # The embeddings get gradients from both losses: one variable, trained by the generator's
    # masked LM and the discriminator's replaced-token detection.
    original, x = batch()
    model.compile(loss=None)
    with tf.GradientTape(persistent=True) as tape:
        out = model(x, training=True)
        mlm = tf.reduce_sum(out["mlm"])
        rtd = tf.reduce_sum(out["rtd"][..., 0])
    embedding = model.get_layer("token_embedding").embeddings
    assert tf.reduce_sum(tf.abs(tf.convert_to_tensor(tape.gradient(mlm, embedding)))) > 0
    assert tf.reduce_sum(tf.abs(tf.convert_to_tensor(tape.gradient(rtd, embedding)))) > 0


def test_the_generator_reads_the_stored_row_and_the_discriminator_its_samples():
    model = build()
    original, x = batch()
    restored, selected = place(x["input_ids"], x["masked_lm_positions"], x["masked_lm_ids"],
                               x["masked_lm_weights"])  # fmt: skip
    np.testing.assert_array_equal(restored, original)  # the stored 80/10/10 undone
    out = model(x)
    # The generator reads the row as stored, kept tokens included (not every selected one turned
    # into [MASK]: that kept it on the unigram plateau, docs/training.md). Masking the kept third
    # prediction of each row by hand changes its logits; the discriminator's row stays the same.
    hidden = dict(x, input_ids=x["input_ids"].copy())
    rows = np.arange(B)
    hidden["input_ids"][rows, x["masked_lm_positions"][:, 2]] = MASK
    other = model(hidden)
    assert np.abs(other["mlm"].numpy() - out["mlm"].numpy()).max() > 1e-4
    np.testing.assert_array_equal(other["rtd"][..., 1].numpy()[~selected.numpy()],
                                  out["rtd"][..., 1].numpy()[~selected.numpy()])  # fmt: skip
    shown = out["rtd"][..., 1].numpy().astype(int)
    # Unselected tokens, [CLS] and padding included, are the originals; the selected ones are
    # the generator's samples, never a special id.
    np.testing.assert_array_equal(shown[~selected.numpy()], original[~selected.numpy()])
    assert not np.isin(shown[selected.numpy()], SPECIALS).any()
    # The discriminator's input is the original row when the samples equal the originals: force
    # the generator to put all its mass on them (a huge logit at each original id).
    rows = x["masked_lm_ids"]
    logits = np.full((B, P, 37), -30.0, "float32")
    np.put_along_axis(logits, rows[..., None], 30.0, axis=-1)
    sampled = TokenSampler(SPECIALS, seed=1)(logits).numpy()
    valid = x["masked_lm_weights"] > 0
    np.testing.assert_array_equal(sampled[valid], rows[valid])


def test_samples_follow_the_softmax_skip_specials_and_depend_on_seed_and_step():
    logits = np.log(np.array([[[0.3, 0.0, 0.2, 0.1, 0.4, 0.6, 0.3, 0.1]]], "float32") + 1e-12)
    logits = np.repeat(logits, 4000, axis=1)  # (1, 4000, 8): 4000 draws of one distribution
    # Ids 0, 2, 4 carry most of the mass and are excluded: what remains is 0.6 : 0.3 : 0.1 on 5, 6, 7
    # (and id 3 at 0.1, id 1 never).
    sampler = TokenSampler(excluded_ids=(0, 2, 4), seed=11)
    first = sampler(logits).numpy().ravel()
    assert not np.isin(first, (0, 1, 2, 4)).any()
    share = np.bincount(first, minlength=8)[[3, 5, 6, 7]] / first.size
    np.testing.assert_allclose(share, [0.1 / 1.1, 0.6 / 1.1, 0.3 / 1.1, 0.1 / 1.1], atol=0.03)
    second = sampler(logits).numpy().ravel()
    assert (first != second).mean() > 0.3  # the state advanced: another draw at the next step
    again = TokenSampler(excluded_ids=(0, 2, 4), seed=11)
    np.testing.assert_array_equal(again(logits).numpy().ravel(), first)  # the same seed: the same draws
    np.testing.assert_array_equal(again(logits).numpy().ravel(), second)
    assert (TokenSampler(excluded_ids=(0, 2, 4), seed=12)(logits).numpy().ravel() != first).mean() > 0.3


def test_the_sampler_state_is_a_model_variable():
    """What a checkpoint holds (`state/i`): advancing it changes the next draw, restoring it
    brings the draw back."""
    model = build()
    _, x = batch()
    state = next(v for v in model.non_trainable_variables if "sampler_seed" in v.path)
    before = state.numpy().copy()
    first = model(x)["rtd"].numpy()
    assert not np.array_equal(state.numpy(), before)
    second = model(x)["rtd"].numpy()
    assert not np.array_equal(first[..., 1], second[..., 1])
    state.assign(before)
    np.testing.assert_array_equal(model(x)["rtd"].numpy(), first)


def test_the_target_is_replaced_where_the_shown_token_differs_and_padding_is_never_scored():
    original, _ = batch()
    shown = original.copy()
    shown[:, 2] = (original[:, 2] - 5 + 1) % 32 + 5  # replaced: another real id
    logits = np.random.default_rng(0).normal(size=(B, T)).astype("float32")
    y_pred = np.stack([logits, shown.astype("float32")], axis=-1)
    mask = (original != 0).astype("float32")
    target = (shown != original).astype("float64")
    loss = ReplacedTokenLoss()(original, y_pred, sample_weight=mask)
    per_token = np.logaddexp(0, logits) - target * logits  # sigmoid cross-entropy from logits
    np.testing.assert_allclose(loss, (per_token * mask).sum() / mask.sum(), rtol=1e-5)
    # A wrong logit on a padding token changes nothing.
    y_pred[:, -1, 0] = 50.0
    np.testing.assert_allclose(ReplacedTokenLoss()(original, y_pred, sample_weight=mask), loss, rtol=1e-6)
    fraction = ReplacedFraction()
    fraction.update_state(original, y_pred, sample_weight=mask)
    np.testing.assert_allclose(fraction.result(), B / mask.sum(), rtol=1e-6)  # one token a row
    calls = logits > 0
    precision, recall = ReplacedTokenPrecision(), ReplacedTokenRecall()
    for metric in (precision, recall):
        metric.update_state(original, np.stack([logits, shown.astype("float32")], -1), sample_weight=mask)
    real = mask > 0
    tp = (calls & (target > 0) & real).sum()
    np.testing.assert_allclose(precision.result(), tp / (calls & real).sum(), rtol=1e-6)
    np.testing.assert_allclose(recall.result(), tp / ((target > 0) & real).sum(), rtol=1e-6)


def test_config_clone_and_keras_file_give_identical_outputs(tmp_path):
    for layer in (TokenSampler((0, 3), seed=5, name="s"),):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model = build(seed=3)
    _, x = batch()
    path = tmp_path / "electra.keras"
    model.save(path)  # before any draw: the file holds the sampler's seed, a checkpoint its state
    loaded = keras.models.load_model(path)
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    expected = model(x)
    for other in (clone, loaded):
        for name, value in other(x).items():
            np.testing.assert_array_equal(value, expected[name])


def test_the_encoder_is_the_discriminator():
    model = build()
    encoder = encoder_from(model)
    mine = {id(w) for w in encoder.weights}
    discriminator = [w for w in model.weights if not w.path.startswith(("generator_", "rtd_"))]
    assert all(id(w) in mine for w in discriminator)
    assert not any(w.path.startswith("generator_") for w in encoder.weights)
    original, x = batch()
    features = {k: x[k] for k in ("input_ids", "input_mask", "segment_ids", "document_ids")}
    assert encoder(features)["sequence_output"].shape == (B, T, 12)


@pytest.mark.slow
def test_it_trains_under_xla_and_both_losses_fall():
    keras.utils.set_random_seed(0)
    model = build()
    ELECTRA.compile(model, keras.optimizers.AdamW(3e-3), jit_compile=True)
    original, x = batch()
    y = {"mlm": x["masked_lm_ids"], "rtd": original}
    w = {"mlm": x["masked_lm_weights"], "rtd": x["input_mask"].astype("float32")}
    history = model.fit(x, y, sample_weight=w, epochs=40, batch_size=B, verbose=0).history
    assert history["mlm_loss"][-1] < 0.8 * history["mlm_loss"][0]
    assert history["rtd_loss"][-1] < history["rtd_loss"][0]
    for name in ("rtd_accuracy", "rtd_precision", "rtd_recall", "rtd_replaced", "mlm_accuracy"):
        assert name in history
