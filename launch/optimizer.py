"""The optimizer from Keras built-ins: AdamW or Lamb on a warmup-then-linear-decay schedule, weight
decay never on LayerNorm or biases, optional clipping, gradient accumulation and fp16 loss scaling."""

from __future__ import annotations

import keras
from keras import ops

PACKAGE = "bertbeam"
OPTIMIZERS = ("adamw", "lamb")
NO_WEIGHT_DECAY = ["bias", "gamma", "beta"]  # biases, and LayerNormalization's scale and offset


@keras.saving.register_keras_serializable(package=PACKAGE)
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """0 -> peak linearly over warmup_steps, then linearly to end_learning_rate at total_steps
    (BERT's schedule). The decay is Keras's PolynomialDecay with power 1. `warmup_start` > 0 (a
    later phase with --restart_warmup): the warmup starts at that update, and the decay ends at
    total_steps still."""

    def __init__(
        self,
        peak_learning_rate: float,
        warmup_steps: int,
        total_steps: int,
        end_learning_rate: float = 0.0,
        batches_per_update: int = 1,
        warmup_start: int = 0,
    ):
        self.peak_learning_rate = peak_learning_rate
        self.batches_per_update = batches_per_update
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.end_learning_rate = end_learning_rate
        self.warmup_start = warmup_start
        self._decay = keras.optimizers.schedules.PolynomialDecay(
            peak_learning_rate,
            max(1, total_steps - warmup_start - warmup_steps),
            end_learning_rate,
            power=1.0,
        )

    def __call__(self, step):  # step: batches seen (Keras's counter), so updates = step // batches_per_update
        step = ops.cast(ops.floor_divide(step, self.batches_per_update) - self.warmup_start, "float32")
        warmup = self.peak_learning_rate * step / max(1, self.warmup_steps)
        return ops.where(step < self.warmup_steps, warmup, self._decay(step - self.warmup_steps))

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "end_learning_rate": self.end_learning_rate,
            "batches_per_update": self.batches_per_update,
            "warmup_start": self.warmup_start,
        }


def build_optimizer(
    name: str,
    *,
    learning_rate: float,
    warmup_steps: int,
    total_steps: int,
    end_learning_rate: float = 0.0,
    weight_decay: float = 0.01,
    clipnorm: float | None = 1.0,
    grad_accum_steps: int = 1,
    mixed_precision: str = "none",
    warmup_start: int = 0,
) -> keras.optimizers.Optimizer:
    """AdamW or Lamb; wrapped in LossScaleOptimizer for fp16 (bf16 needs no loss scaling).

    Steps are optimizer updates. Keras (3.15) evaluates a schedule at its batch counter
    (`BaseOptimizer._get_current_learning_rate` passes `_iterations`, not `iterations`), which with
    gradient accumulation runs grad_accum_steps times faster than updates; the schedule divides it
    back, so all batches of one update share one learning rate. Drop `batches_per_update` once
    Keras passes the update counter (`iterations`) instead.
    """
    schedule = WarmupLinearDecay(
        learning_rate,
        warmup_steps,
        total_steps,
        end_learning_rate,
        batches_per_update=max(1, grad_accum_steps),
        warmup_start=warmup_start,
    )
    common = {
        "learning_rate": schedule,
        "weight_decay": weight_decay or None,
        "clipnorm": clipnorm or None,
        "gradient_accumulation_steps": grad_accum_steps if grad_accum_steps > 1 else None,
        "epsilon": 1e-6,
    }
    if name == "adamw":
        optimizer = keras.optimizers.AdamW(**common)
    elif name == "lamb":
        optimizer = keras.optimizers.Lamb(**common)
    else:
        raise ValueError(f"--optimizer {name}: expected adamw or lamb")
    if weight_decay:
        optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    if mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
