"""The token tagger: every position's encoder output (through ModernBERT's head on a ModernBERT,
`head.py`) and dropout to one score per label, and for `crf` a linear-chain CRF on top (`crf.py`)
that holds the label transitions.

Shapes: B batch, T sequence (seq_len), H hidden, L labels.
"""

from __future__ import annotations

import keras

from model.config import BertConfig
from model.encoder import task_sequence
from model.tasks import IGNORE
from model.tasks.crf import CRF, CRFLoss
from model.tasks.head import prediction_head


def build_tagger(encoder: keras.Model, num_labels: int, dropout: float, seed: int, crf: bool = False,
                 config: BertConfig | None = None) -> keras.Model:  # fmt: skip
    """Encoder -> sequence output (B, T, H) [-> ModernBERT's head, where `config` is one] ->
    dropout -> dense scores (B, T, L), float32 (the CRF's emissions with `crf`). Each row is one
    document: document_ids = input_mask. The pooler is not part of it: nothing reads [CLS] alone."""
    inputs, encoded = task_sequence(encoder)
    x = keras.layers.Dropout(dropout, name="tagger_dropout")(prediction_head(encoded, config, seed + 1))
    scores = keras.layers.Dense(
        num_labels,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02, seed=seed),
        dtype="float32",
        name="tagger",
    )(x)
    if crf:
        scores = CRF(num_labels, name="crf")(scores)
    return keras.Model(inputs, scores, name="bert_tagger")


def compile_tagger(model: keras.Model, optimizer, jit_compile: bool = True) -> None:
    """A CRF tagger's loss is the CRF's negative log-likelihood; a softmax tagger's the
    cross-entropy of each labelled piece. IGNORE (the pieces after a word's first, [CLS], [SEP],
    padding) counts in neither."""
    if "crf" in {layer.name for layer in model.layers}:
        loss = CRFLoss(model.get_layer("crf"))
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
