"""Pretraining losses and metrics, used through `model.compile` (no add_loss / add_metric)."""

from __future__ import annotations

import keras
from keras import ops

from model.layers import PACKAGE


class GlobalMeanLoss(keras.losses.Loss):
    """A per-element loss (`call`), weighted by the sample weights and divided by their sum over
    the *global* batch.

    Keras sums gradients over replicas, so each replica returns its own weighted sum divided by
    the all-replica weight total: the sum over replicas is then exactly the global mean, whatever
    the per-replica counts (dividing per replica, or by batch size, would not be).
    """

    def __init__(self, name, reduction="sum", **kwargs):
        if reduction != "sum":  # the global normalisation above relies on it
            raise ValueError(f"{type(self).__name__}: reduction must be 'sum', found {reduction!r}")
        super().__init__(name=name, reduction=reduction, **kwargs)

    def __call__(self, y_true, y_pred, sample_weight=None):
        losses = self.call(y_true, y_pred)
        weights = ops.ones_like(losses) if sample_weight is None else ops.cast(sample_weight, "float32")
        local_total = ops.sum(losses * weights)
        global_count = _sum_over_replicas(ops.sum(weights))
        return ops.divide_no_nan(local_total, global_count)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedLMLoss(GlobalMeanLoss):
    """Cross-entropy from logits over the masked positions, weighted by masked_lm_weights and
    divided by the number of real masked tokens in the global batch."""

    def __init__(self, name="masked_lm_loss", reduction="sum", **kwargs):
        super().__init__(name=name, reduction=reduction, **kwargs)

    def call(self, y_true, y_pred):  # (B, P), (B, P, V) -> (B, P)
        return keras.losses.sparse_categorical_crossentropy(
            ops.cast(y_true, "int32"), ops.cast(y_pred, "float32"), from_logits=True
        )


def replaced_token_target(y_true, y_pred):
    """ELECTRA's "rtd" output (B, T, 2) and the original row (B, T) -> the discriminator's logits
    (B, T) and its target (B, T) float32: 1 where the token it saw is not the original."""
    logits = ops.cast(y_pred[..., 0], "float32")
    shown = ops.cast(y_pred[..., 1], "int32")
    return logits, ops.cast(ops.not_equal(shown, ops.cast(y_true, "int32")), "float32")


@keras.saving.register_keras_serializable(package=PACKAGE)
class ReplacedTokenLoss(GlobalMeanLoss):
    """ELECTRA's replaced-token detection: sigmoid cross-entropy of "was this token replaced?"
    on every token, weighted by input_mask ([PAD] is never scored) and divided by the global
    batch's real tokens."""

    def __init__(self, name="replaced_token_loss", reduction="sum", **kwargs):
        super().__init__(name=name, reduction=reduction, **kwargs)

    def call(self, y_true, y_pred):  # (B, T), (B, T, 2) -> (B, T)
        logits, target = replaced_token_target(y_true, y_pred)
        return ops.binary_crossentropy(target, logits, from_logits=True)


class _OnReplacedTokens:
    """Feeds a Keras binary metric ELECTRA's target and the discriminator's probability."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        logits, target = replaced_token_target(y_true, y_pred)
        return super().update_state(target, ops.sigmoid(logits), sample_weight=sample_weight)


class ReplacedTokenAccuracy(_OnReplacedTokens, keras.metrics.BinaryAccuracy):
    """Discriminator accuracy over the real tokens."""


class ReplacedTokenPrecision(_OnReplacedTokens, keras.metrics.Precision):
    """Of the tokens the discriminator calls replaced, the share that were."""


class ReplacedTokenRecall(_OnReplacedTokens, keras.metrics.Recall):
    """Of the replaced tokens, the share the discriminator finds."""


class ReplacedFraction(keras.metrics.Mean):
    """The share of real tokens the generator's samples replaced: falls as the generator
    learns (a sample equal to the original is no replacement)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        _, target = replaced_token_target(y_true, y_pred)
        return super().update_state(target, sample_weight=sample_weight)


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


def compile_pretraining(model: keras.Model, optimizer, *, jit_compile: bool = False,
                        steps_per_execution: int = 1, rtd_weight: float = 50.0):  # fmt: skip
    """Standard compile, by the model's outputs: the masked-LM loss and weighted accuracy; NSP/SOP
    when the model has that head; ELECTRA's replaced-token detection, weighted `rtd_weight`
    (ELECTRA's 50), with discriminator accuracy, precision, recall and the replaced fraction."""
    losses = {"mlm": MaskedLMLoss()}
    metrics = {"mlm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
    loss_weights = {"mlm": 1.0}
    if "nsp" in model.output:
        losses["nsp"] = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name="nsp_loss")
        metrics["nsp"] = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        loss_weights["nsp"] = 1.0
    if "rtd" in model.output:
        losses["rtd"] = ReplacedTokenLoss()
        metrics["rtd"] = [
            ReplacedTokenAccuracy(name="accuracy"),
            ReplacedTokenPrecision(name="precision"),
            ReplacedTokenRecall(name="recall"),
            ReplacedFraction(name="replaced"),
        ]
        loss_weights["rtd"] = rtd_weight
    model.compile(
        optimizer=optimizer,
        loss=losses,
        loss_weights=loss_weights,
        weighted_metrics=metrics,  # weighted by the sample weights: padding counts in none
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    return model
