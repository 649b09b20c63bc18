"""Pretraining losses and metrics, used through `model.compile` (no add_loss / add_metric)."""

from __future__ import annotations

import keras
from keras import ops

from model.bert import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedLMLoss(keras.losses.Loss):
    """Cross-entropy from logits over the masked positions, weighted by masked_lm_weights and
    divided by the number of real masked tokens in the *global* batch.

    Keras sums gradients over replicas, so each replica returns its own weighted sum divided by
    the all-replica weight total: the sum over replicas is then exactly the global mean, whatever
    the per-replica counts (dividing per replica, or by batch size, would not be).
    """

    def __init__(self, name="masked_lm_loss", reduction="sum", **kwargs):
        if reduction != "sum":  # the global normalisation above relies on it
            raise ValueError(f"MaskedLMLoss: reduction must be 'sum', found {reduction!r}")
        super().__init__(name=name, reduction=reduction, **kwargs)

    def call(self, y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)  # (B, P)

    def __call__(self, y_true, y_pred, sample_weight=None):
        losses = self.call(ops.cast(y_true, "int32"), ops.cast(y_pred, "float32"))
        weights = ops.ones_like(losses) if sample_weight is None else ops.cast(sample_weight, "float32")
        local_total = ops.sum(losses * weights)
        global_count = _sum_over_replicas(ops.sum(weights))
        return ops.divide_no_nan(local_total, global_count)


def _sum_over_replicas(value):
    """`value` summed over the replicas of the current step.

    The one place model/ touches tf.distribute, on purpose: the global-batch normalisation is a
    property of the loss, and a loss is where Keras itself consults the strategy (its own losses
    divide by `num_replicas_in_sync` in keras/src/losses/loss.py, scale_loss_for_distribution).
    Moving it to launch/ would need a custom train_step or a second loss class for the same
    arithmetic. Outside a replica context, on one replica, or on another backend, it is `value`.
    """
    if keras.backend.backend() != "tensorflow":  # JAX/torch: no tf.distribute replicas to sum over
        return value
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def compile_pretraining(
    model: keras.Model, optimizer, *, jit_compile: bool = False, steps_per_execution: int = 1
):
    """Standard compile: MLM loss and weighted accuracy, plus NSP/SOP when the model has that head."""
    losses = {"mlm": MaskedLMLoss()}
    metrics = {"mlm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
    if "nsp" in model.output:
        losses["nsp"] = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name="nsp_loss")
        metrics["nsp"] = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    model.compile(
        optimizer=optimizer,
        loss=losses,
        weighted_metrics=metrics,  # weighted by masked_lm_weights: padding predictions do not count
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    return model
