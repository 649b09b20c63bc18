"""The sequence classifier: the encoder's pooled [CLS] output, or the mean of its real tokens'
outputs (through ModernBERT's head on a ModernBERT, `head.py`), through dropout to one logit per
label.

Shapes: B batch, T sequence (seq_len), H hidden, L labels.
"""

from __future__ import annotations

import keras

from model.config import BertConfig
from model.encoder import TASK_INPUTS
from model.tasks.head import prediction_head


def default_pooling(pooler_trained: bool, bert: BertConfig) -> str:
    """--pooling auto: the [CLS] pooler where pretraining trained it (NSP/SOP), else the mean of
    the real tokens' outputs: an untrained pooler is one more fresh layer between the encoder and
    the head (docs/finetune.md has the measurement). ModernBERT: the mean, as its own classifier
    (answerdotai/ModernBERT-*'s classifier_pooling)."""
    return "cls" if pooler_trained and not bert.modern else "mean"


def build_classifier(encoder: keras.Model, num_labels: int, dropout: float, seed: int,
                     pooling: str = "cls", config: BertConfig | None = None) -> keras.Model:  # fmt: skip
    """Encoder -> pooled output (B, H) or the mean over real tokens [-> ModernBERT's head, where
    `config` is one, as transformers' ModernBertForSequenceClassification] -> dropout -> dense
    logits (B, L), float32. Each example is one document: document_ids = input_mask, so real
    tokens attend to real tokens."""
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
    x = keras.layers.Dropout(dropout, name="classifier_dropout")(prediction_head(pooled, config, seed + 1))
    logits = keras.layers.Dense(
        num_labels,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02, seed=seed),
        dtype="float32",
        name="classifier",
    )(x)
    return keras.Model(inputs, logits, name="bert_classifier")


def compile_classifier(model: keras.Model, optimizer, jit_compile: bool = True) -> None:
    """Cross-entropy on the logits; accuracy weighted by the sample weights, so that the copies
    filling a last batch (weight 0) count in neither."""
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
