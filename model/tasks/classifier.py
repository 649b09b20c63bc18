"""The sequence classifier: the encoder's pooled [CLS] output, or the mean of its real tokens'
outputs, through dropout to one logit per label.

Shapes: B batch, T sequence (seq_len), H hidden, L labels.
"""

from __future__ import annotations

import keras

from model.config import BertConfig
from model.encoder import TASK_INPUTS


def default_pooling(pooler_trained: bool, bert: BertConfig) -> str:
    """--pooling auto: the [CLS] pooler where pretraining trained it (NSP/SOP), else the mean of
    the real tokens' outputs: an untrained pooler is one more fresh layer between the encoder and
    the head (docs/finetune.md has the measurement). ModernBERT: the mean, as its own classifier
    (answerdotai/ModernBERT-*'s classifier_pooling)."""
    return "cls" if pooler_trained and not bert.modern else "mean"


def build_classifier(encoder: keras.Model, num_labels: int, dropout: float, seed: int,
                     pooling: str = "cls") -> keras.Model:  # fmt: skip
    """Encoder -> pooled output (B, H) or the mean over real tokens -> dropout -> dense logits
    (B, L), float32. Each example is one document: document_ids = input_mask, so real tokens
    attend to real tokens."""
    seq_len = encoder.input["input_ids"].shape[1]
    inputs = {name: keras.Input((seq_len,), dtype="int32", name=name) for name in TASK_INPUTS}
    if pooling == "mean":  # the encoder without its pooler: no weight that nothing reads (and no gradient)
        sequence = {"sequence_output": encoder.output["sequence_output"]}
        encoder = keras.Model(encoder.input, sequence, name=encoder.name)
    encoded = encoder({**inputs, "document_ids": inputs["input_mask"]})
    if pooling == "mean":
        mask = keras.ops.cast(inputs["input_mask"], "bool")
        pooled = keras.layers.GlobalAveragePooling1D(name="mean_pool")(encoded["sequence_output"], mask=mask)
    else:
        pooled = encoded["pooled_output"]
    x = keras.layers.Dropout(dropout, name="classifier_dropout")(pooled)
    logits = keras.layers.Dense(
        num_labels,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02, seed=seed),
        dtype="float32",
        name="classifier",
    )(x)
    return keras.Model(inputs, logits, name="bert_classifier")
