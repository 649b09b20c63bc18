"""ModernBERT's task head: what transformers' ModernBertForSequenceClassification,
ModernBertForTokenClassification and ModernBertForQuestionAnswering put between the encoder (or
the pooling) and the scores (their `ModernBertPredictionHead`): a dense H -> H without bias, the
encoder's activation, a norm without bias. A classifier, tagger or span extractor on a ModernBERT
encoder has it, so that its Hugging Face export is theirs, weight for weight; BERT's heads have
none.

Shapes: B batch, T sequence (seq_len), H hidden.
"""

from __future__ import annotations

import keras

from model.config import BertConfig
from model.encoder import layer_norm
from model.layers import ACTIVATIONS

LAYERS = ("task_transform", "task_norm")  # what it adds to a task model, fresh


def prediction_head(x, config: BertConfig | None, seed: int):
    """(..., H) -> (..., H): the head above where `config` is a ModernBERT's, else `x` as it is
    (every position's output for a token task, the pooled one for the classifier)."""
    if config is None or not config.modern:
        return x
    h = keras.layers.Dense(
        config.hidden_size,
        activation=ACTIVATIONS[config.hidden_act],
        use_bias=False,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range, seed=seed),
        name=LAYERS[0],
    )(x)
    return layer_norm(config, LAYERS[1])(h)
