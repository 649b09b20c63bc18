"""The pretraining objectives, one module each over the shared encoder: what `--objective` builds
and how it is compiled. The one place that branches on the objective.

    objective = Objective("electra", generator_size=0.25)
    model = objective.build(config, seq_len=128, max_predictions=20, excluded_ids=(0, 1, 2, 3, 4))
    objective.compile(model, keras.optimizers.AdamW(1e-4), jit_compile=True)

mlm      BERT's masked LM (model/masked_lm.py), with an NSP/SOP head on pair corpora
electra  ELECTRA's replaced-token detection, a generator feeding a discriminator (model/electra.py)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras

from common.errors import need
from model.config import BertConfig
from model.electra import build_electra_model, generator_config
from model.losses import compile_pretraining
from model.masked_lm import build_pretraining_model

OBJECTIVES = ("mlm", "electra")


@dataclasses.dataclass(frozen=True)
class Objective:
    name: str = "mlm"  # one of OBJECTIVES
    generator_size: float = 0.25  # electra: generator width, heads, feed-forward / the discriminator's
    rtd_weight: float = 50.0  # electra: loss = masked LM + rtd_weight x replaced-token detection

    def __post_init__(self):
        need(self.name in OBJECTIVES, f"--objective {self.name}: expected one of {', '.join(OBJECTIVES)}")
        need(
            0 < self.generator_size <= 1,
            f"--generator_size: expected in (0, 1], found {self.generator_size}",
        )
        need(self.rtd_weight > 0, f"--rtd_weight: expected > 0, found {self.rtd_weight}")

    def build(self, config: BertConfig, seq_len: int, max_predictions: int, *, next_sentence: bool = False,
              excluded_ids: Sequence[int] = (),
              seed: int | None = None) -> keras.Model:  # fmt: skip
        """The pretraining model. ELECTRA needs the ids its generator must never sample; it has
        no NSP/SOP head (pair corpora train it on their rows alone)."""
        if self.name == "electra":
            return build_electra_model(
                config, seq_len, max_predictions, excluded_ids=excluded_ids,
                generator_size=self.generator_size, seed=seed,
            )  # fmt: skip
        return build_pretraining_model(config, seq_len, max_predictions, next_sentence)

    def compile(self, model: keras.Model, optimizer, *, jit_compile: bool = False,
                steps_per_execution: int = 1) -> keras.Model:  # fmt: skip
        return compile_pretraining(
            model, optimizer, jit_compile=jit_compile, steps_per_execution=steps_per_execution,
            rtd_weight=self.rtd_weight,
        )  # fmt: skip

    def training_flops_per_example(self, config: BertConfig, seq_len: int, max_predictions: int) -> float:
        """Matmul FLOPs of one training example: 3x the forward pass (forward, then two backward),
        2 per multiply-add. BERT: the encoder, the MLM head on P positions and the pooler. ELECTRA:
        the discriminator and its head on all T tokens, plus the generator and its MLM head. The
        vocab is the tokenizer's: a padded vocab's extra rows are speed bought, not model work."""
        t, p, e, v = seq_len, max_predictions, config.embedding_width, config.tokens
        if self.name == "mlm":
            heads = 2 * p * config.hidden_size * e + 2 * p * e * v + 2 * config.hidden_size**2
            return 3.0 * (_encoder_flops(config, t) + heads)
        small = generator_config(config, self.generator_size)
        h, g = config.hidden_size, small.hidden_size
        discriminator = _encoder_flops(config, t) + 2 * t * h * h + 2 * t * h
        generator = _encoder_flops(small, t) + 2 * p * g * e + 2 * p * e * v
        return 3.0 * (discriminator + generator)


def _encoder_flops(config: BertConfig, t: int) -> float:
    """Forward matmul FLOPs of an encoder on T tokens: the embedding projection (when E != H);
    per block the Q, K, V and output projections, the two feed-forward matmuls (GeGLU's input is
    two), attention scores and context. A ModernBERT local layer's scores count only the keys in
    its window (local_attention + 1 of them, at most T): the model needs no more, whatever a
    backend computes."""
    h, i, e = config.hidden_size, config.intermediate_size, config.embedding_width
    feed_forward = 2 * t * (3 if config.modern else 2) * h * i
    total = 0.0
    for layer in range(config.num_layers):
        keys = t
        if config.modern and not config.is_global(layer):
            keys = min(t, config.local_attention + 1)
        total += 2 * t * 4 * h * h + feed_forward + 2 * 2 * t * keys * h
    return total + (2 * t * e * h if e != h else 0)
