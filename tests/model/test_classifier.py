"""The classifier reads the encoder's [CLS] pooler or the mean of its real tokens; with the mean, the
pooler is not part of the model at all, so no weight goes untrained and no gradient is missing."""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest

from model.config import BertConfig
from model.encoder import build_encoder
from model.tasks.classifier import build_classifier

T, LABELS = 11, 3


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_only_the_pooling_that_is_read_has_weights(pooling, caplog):
    bert = BertConfig(53, hidden_size=12, num_layers=2, num_heads=3, intermediate_size=29, max_position=16)
    classifier = build_classifier(build_encoder(bert, T), LABELS, dropout=0.0, seed=0, pooling=pooling)
    layers = {w.path.split("/")[0] for w in classifier.trainable_weights}
    assert ("pooler" in layers) == (pooling == "cls")
    rng = np.random.default_rng(0)
    x = {"input_ids": rng.integers(5, 53, (7, T)).astype("int32"), "input_mask": np.ones((7, T), "int32"),
         "segment_ids": np.zeros((7, T), "int32")}  # fmt: skip
    classifier.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with caplog.at_level(logging.WARNING):
        classifier.fit(x, rng.integers(0, LABELS, 7), epochs=1, verbose=0)
    assert "Gradients do not exist" not in caplog.text
    restored = keras.models.clone_model(classifier)
    restored.set_weights(classifier.get_weights())
    np.testing.assert_allclose(restored.predict(x, verbose=0), classifier.predict(x, verbose=0), atol=1e-6)
