"""ModernBERT's token-task head: what transformers' ModernBertForTokenClassification and
ModernBertForQuestionAnswering put between the encoder and the scores (their
`ModernBertPredictionHead`): a dense H -> H without bias, the encoder's activation, a norm without
bias. A tagger or span extractor on a ModernBERT encoder has it, so that its Hugging Face export is
theirs, weight for weight; BERT's token heads (BertForTokenClassification) have none.

Shapes: B batch, T sequence (seq_len), H hidden.
"""

from __future__ import annotations

import keras

from model.config import BertConfig
from model.encoder import layer_norm
from model.layers import ACTIVATIONS

LAYERS = ("task_transform", "task_norm")  # what it adds to a task model, fresh


def prediction_head(x, config: BertConfig | None, seed: int):
    """(B, T, H) -> (B, T, H): the head above where `config` is a ModernBERT's, else `x` as it is."""
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
