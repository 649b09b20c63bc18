"""The span extractor (reading comprehension): every position's encoder output to a start and an
end score (BERT's run_squad head; transformers' `qa_outputs`), through ModernBERT's head first on a
ModernBERT (`head.py`).

Shapes: B batch, T sequence (seq_len), H hidden.
"""

from __future__ import annotations

import keras

from model.config import BertConfig
from model.encoder import task_sequence
from model.tasks.head import prediction_head


def build_span_model(encoder: keras.Model, dropout: float, seed: int,
                     config: BertConfig | None = None) -> keras.Model:  # fmt: skip
    """Encoder -> sequence output (B, T, H) [-> ModernBERT's head, where `config` is one] ->
    dropout -> dense (B, T, 2) -> {"start": (B, T), "end": (B, T)} logits, float32. Each row is one
    document (question and context): document_ids = input_mask."""
    inputs, encoded = task_sequence(encoder)
    x = keras.layers.Dropout(dropout, name="span_dropout")(prediction_head(encoded, config, seed + 1))
    scores = keras.layers.Dense(
        2,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02, seed=seed),
        dtype="float32",
        name="span",
    )(x)
    return keras.Model(inputs, {"start": scores[..., 0], "end": scores[..., 1]}, name="bert_span")


def compile_span_model(model: keras.Model, optimizer, jit_compile: bool = True) -> None:
    """Cross-entropy of the start position and of the end position, summed (run_squad averages
    them: the same gradients at half the scale, which AdamW does not see)."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss={"start": loss, "end": loss}, jit_compile=jit_compile)
