"""The CRF against brute force on a tiny case: its log-likelihood is the path score less the log
of the sum over every path, and Viterbi's path is the best of them, over masked positions that
are not a prefix (a word's first pieces), an empty row included; and both compile with XLA."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.tasks.crf import CRF, IGNORE, CRFLoss

B, T, L = 4, 6, 3


def brute_force(emissions, positions, transitions, start, end):
    """{path: score} over every labelling of `positions`."""
    scores = {}
    for path in itertools.product(range(L), repeat=len(positions)):
        score = sum(emissions[p, y] for p, y in zip(positions, path, strict=True))
        score += sum(transitions[a, b] for a, b in itertools.pairwise(path))
        scores[path] = score + (start[path[0]] + end[path[-1]] if path else 0.0)
    return scores


@pytest.fixture
def case():
    rng = np.random.default_rng(3)
    emissions = rng.normal(size=(B, T, L)).astype("float32")
    masks = np.array([[1, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0]], bool)
    crf = CRF(L, name="crf")
    crf.build((B, T, L))
    for weight, shape in ((crf.transitions, (L, L)), (crf.start, (L,)), (crf.end, (L,))):
        weight.assign(rng.normal(size=shape).astype("float32"))
    return crf, emissions, masks


def test_log_likelihood_and_viterbi_equal_brute_force(case):
    crf, emissions, masks = case
    transitions, start, end = (w.numpy() for w in (crf.transitions, crf.start, crf.end))
    rng = np.random.default_rng(5)
    tags = np.where(masks, rng.integers(0, L, size=(B, T)), IGNORE).astype("int32")
    losses = keras.ops.convert_to_numpy(CRFLoss(crf).call(tags, emissions))
    decoded = keras.ops.convert_to_numpy(crf.decode(emissions, masks))
    for row in range(B):
        positions = list(np.flatnonzero(masks[row]))
        scores = brute_force(emissions[row], positions, transitions, start, end)
        truth = tuple(tags[row, positions])
        log_z = np.log(np.sum(np.exp(list(scores.values())))) if positions else 0.0
        expected = (scores[truth] - log_z) if positions else 0.0
        np.testing.assert_allclose(-losses[row], expected, rtol=1e-5, atol=1e-5)
        best = max(scores, key=scores.get)
        assert list(decoded[row, positions]) == list(best)
        assert (decoded[row, ~masks[row]] == IGNORE).all()


def test_the_loss_trains_the_transitions_under_xla(case):
    """Compiled with jit_compile, the loss reaches the transitions: a model that must learn that
    label 2 never follows label 0 does."""
    crf, _, _ = case
    inputs = keras.Input((T, L))
    layer = CRF(L, name="crf")
    model = keras.Model(inputs, layer(keras.layers.Dense(L)(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=CRFLoss(layer), jit_compile=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, T, L)).astype("float32")
    y = np.tile(np.array([[0, 1, 2, IGNORE, 0, 1]], "int32"), (64, 1))
    before = layer.transitions.numpy().copy()
    history = model.fit(x, y, epochs=30, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] / 4
    moved = layer.transitions.numpy() - before
    assert moved[0, 1] > 0 and moved[1, 2] > 0 and moved[0, 2] < 0
    decoded = tf.function(layer.decode, jit_compile=True)(model(x[:2]), y[:2] != IGNORE)
    assert decoded.numpy().tolist() == y[:2].tolist()


def test_the_loss_and_the_decoder_hold_no_sort(case):
    """`compact` orders the labelled positions by a running count, not an argsort: with a sort in
    the compiled train step, dropout's random bits cost several times more on CPU (the tagger's
    step 7x slower; model/tasks/crf.py). The traced graphs of both hold none."""
    crf, emissions, masks = case
    tags = np.where(masks, 1, IGNORE).astype("int32")
    graphs = [
        tf.function(CRFLoss(crf).call).get_concrete_function(tf.constant(tags), tf.constant(emissions)).graph,
        tf.function(crf.decode).get_concrete_function(tf.constant(emissions), tf.constant(masks)).graph,
    ]
    for graph in graphs:
        kinds = {op.type for op in graph.get_operations()}
        assert "TakeAlongAxis" in kinds or "GatherV2" in kinds or "GatherNd" in kinds, sorted(kinds)
        assert not kinds & {"TopKV2", "XlaSort", "Sort", "XlaVariadicSort"}, sorted(kinds)
