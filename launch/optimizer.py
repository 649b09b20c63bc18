"""The optimizer from Keras built-ins: AdamW or Lamb on a warmup-then-linear-decay schedule, weight
decay never on LayerNorm or biases, optional clipping, gradient accumulation and fp16 loss scaling."""

from __future__ import annotations

import keras
import numpy as np
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


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerwiseAdamW(keras.optimizers.AdamW):
    """AdamW with a learning rate scaled per layer: `lr_multipliers` {layer name: factor}, the
    layer being a variable path's first part (`transformer_3/attention/query/kernel` ->
    `transformer_3`); layers it does not name get 1. ELECTRA fine-tunes with layer-wise decay:
    the head at the full rate, each layer below at `decay` times the one above it.

    Keras optimizers take one learning rate; the factor goes into `update_step`, the one call
    per variable every backend makes. Weight decay keeps the unscaled rate, which at fine-tuning's
    1e-2 x lr is a difference in the fourth digit of a weight over a whole run."""

    def __init__(self, lr_multipliers: dict[str, float] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.lr_multipliers = dict(lr_multipliers or {})

    def build(self, variables):
        super().build(variables)
        self._factors = [self.lr_multipliers.get(v.path.split("/", 1)[0], 1.0) for v in variables]

    def set_lr_multipliers(self, lr_multipliers: dict[str, float]) -> None:
        """New factors for a built optimizer, before the train step is traced (pretraining learns
        which layers start fresh only after the warm start, which comes after `build`)."""
        self.lr_multipliers = dict(lr_multipliers)
        self._factors = [
            self.lr_multipliers.get(v.path.split("/", 1)[0], 1.0) for v in self._trainable_variables
        ]

    def update_step(self, gradient, variable, learning_rate):
        factor = self._factors[self._get_variable_index(variable)]
        return super().update_step(gradient, variable, learning_rate * factor)

    def freeze(self, paths) -> None:
        """The variables at `paths` stay as they are, slots included, until the model is built
        again: the head warm-up on JAX. There the train step passes the optimizer every variable
        it was built with (`stateless_apply`), so a variable set to `trainable = False`, as the
        warm-up does on TensorFlow, cannot leave the update; it leaves it here instead, before
        weight decay, as on TensorFlow."""
        self._frozen = frozenset(paths)

    def train_rows(self, rows: dict[str, np.ndarray]) -> None:
        """Only some rows of the variables at `rows`' paths learn ({path: a 0/1 value per row}),
        until the model is built again: an extended vocab's added tokens in the head warm-up
        (--warmup_embeddings), the release's own rows kept as they are.

        The gradient of every other row is zeroed before clipping, so Adam's moments stay 0 there
        and its step is exactly 0. That matters with the MLM output tied to the embedding: the
        softmax sends every row a small gradient, and Adam, which divides by its size, would turn
        it into a full step at the warm-up's high rate. Weight decay skips these variables while
        the rows are set, so the kept rows stay bit for bit."""
        self._row_masks = {path: np.asarray(mask, "float32")[:, None] for path, mask in rows.items()}
        self._undecayed = {self._var_key(v) for v in self._trainable_variables if v.path in rows}

    def apply(self, grads, trainable_variables=None):
        frozen, masks = getattr(self, "_frozen", None), getattr(self, "_row_masks", None)
        if frozen or masks:
            variables = self._trainable_variables if trainable_variables is None else trainable_variables
            kept = [(g, v) for g, v in zip(grads, variables, strict=True) if v.path not in (frozen or ())]
            grads = [g if g is None or v.path not in (masks or {}) else self._masked(g, masks[v.path])
                     for g, v in kept]  # fmt: skip
            trainable_variables = [v for _, v in kept]
        return super().apply(grads, trainable_variables)

    @staticmethod
    def _masked(gradient, rows):
        gradient = ops.convert_to_tensor(gradient)  # a lookup's sparse gradient, dense
        return gradient * ops.cast(rows, gradient.dtype)

    def _use_weight_decay(self, variable):  # TF passes the backend's variable: matched by key, not path
        undecayed = getattr(self, "_undecayed", ())
        return self._var_key(variable) not in undecayed and super()._use_weight_decay(variable)

    def get_config(self):
        return {**super().get_config(), "lr_multipliers": self.lr_multipliers}


def layer_decay_multipliers(layer_names: list[str], num_layers: int, decay: float) -> dict[str, float]:
    """ELECTRA's layer-wise decay for an encoder of `num_layers` blocks: the embeddings (depth 0),
    block i (depth i + 1), everything above (the pooler, the head: depth L + 1) get
    decay ** (L + 1 - depth), so the head learns at the full rate and the embeddings slowest."""
    embeddings = ("token_embedding", "segment_embedding", "position_embedding", "embedding_norm",
                  "embedding_projection")  # fmt: skip

    def depth(name: str) -> int:
        if name in embeddings:
            return 0
        if name.startswith("transformer_") and name.removeprefix("transformer_").isdigit():
            return int(name.removeprefix("transformer_")) + 1
        return num_layers + 1

    return {name: decay ** (num_layers + 1 - depth(name)) for name in layer_names}


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
    lr_multipliers: dict[str, float] | None = None,
    variables_name: str | None = None,
) -> keras.optimizers.Optimizer:
    """AdamW or Lamb; wrapped in LossScaleOptimizer for fp16 (bf16 needs no loss scaling). With
    `lr_multipliers` (AdamW only; {} too, for factors set after `build`), a learning rate per layer
    (`LayerwiseAdamW`; `variables_name`: the prefix of its variables' paths, another class's).

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
        # AdamW refuses None (keras 3 raises "must be a float"); 0.0 decays nothing.
        "weight_decay": float(weight_decay),
        "clipnorm": clipnorm or None,
        "gradient_accumulation_steps": grad_accum_steps if grad_accum_steps > 1 else None,
        "epsilon": 1e-6,
    }
    if lr_multipliers is not None and name != "adamw":
        raise ValueError(f"--optimizer {name}: per-layer learning rates are built for adamw")
    if name == "adamw" and lr_multipliers is not None:
        named = {"name": variables_name} if variables_name else {}
        optimizer = LayerwiseAdamW(lr_multipliers, **common, **named)
    elif name == "adamw":
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
