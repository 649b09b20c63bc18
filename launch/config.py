"""`TrainConfig`: every parameter of a pretraining run, validated once, written to model_dir/config.json.

The command line is generated from the fields, so a flag and its field can never drift apart:
`--global_batch_size 256` sets `global_batch_size`; booleans take `--jit_compile` / `--no-jit_compile`.
Step counts (train, warmup, checkpoint, eval, log) are optimizer updates; with
`--grad_accum_steps k` each update consumes k batches.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Literal

from common.cli import Parser, add_arguments, field
from common.errors import ConfigError, need
from launch.optimizer import OPTIMIZERS
from launch.strategy import KINDS
from model.config import PRESETS
from model.pretraining import OBJECTIVES, Objective
from pipeline.masking import MAX_MASKED_LM_PROB  # the builder's config brings curation's packages

MIXED_PRECISION = ("none", "bf16", "fp16")
__all__ = ["ConfigError", "TrainConfig", "parser"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    data: str = field(
        None,
        "corpus folder (manifest.json and shards, local or gs://); or a mixture: NAME=PATH[:WEIGHT],... "
        "or a .json file {NAME: {path, weight}}; with --phases, folders of a multi-length build",
        required=True,
    )
    mixture_temperature: float = field(
        1.0, "a mixture without weights: each corpus's rate ~ its records^(1/T) (1: by size)"
    )
    max_epochs_warning: float = field(4.0, "warn when the run will go over a corpus more times than this")
    phases: str | None = field(
        None,
        "SEQ_LEN:FRACTION,...: phases of the run at those lengths, e.g. 128:0.9,512:0.1 (BERT); "
        "boundaries rounded to --log_every",
    )
    phase_batch_sizes: str | None = field(None, "with --phases: a global batch size per phase, e.g. 256,64")
    restart_warmup: bool = field(
        False, "with --phases: warm up again at each phase start (else one schedule spans the run)"
    )
    model_dir: str = field(None, "checkpoints, logs, eval, export (local or gs://)", required=True)
    objective: str = field(
        "mlm",
        f"{'|'.join(OBJECTIVES)}: BERT's masked LM, or ELECTRA's replaced-token detection (a small "
        "generator fills the masks, the discriminator spots its tokens; the discriminator is the "
        "encoder kept)",
    )
    generator_size: float = field(
        0.25, "--objective electra: the generator's hidden size, heads and feed-forward as a fraction "
        "of the discriminator's (ELECTRA-Small 1/4, -Base 1/3)",
    )  # fmt: skip
    rtd_weight: float = field(50.0, "--objective electra: loss = masked LM + this x replaced-token detection")
    preset: str = field("tiny", f"model size: {'|'.join(PRESETS)}")
    bert_config: str | None = field(
        None,
        "instead of --preset: our BertConfig JSON, Google's bert_config.json or HF's config.json",
    )
    attention_dropout: float | None = field(
        None, "dropout on the attention probabilities (default: the preset's or config's); at 0 "
        "attention runs as one fused kernel where the device has one",
    )  # fmt: skip
    vocab_multiple: int = field(
        128, "a preset's token rows rounded up to a multiple of this (whole matmul tiles on a GPU or "
        "TPU; a release's too, padded on load; a --bert_config keeps its own); the extra rows are "
        "never read and their MLM logits are masked; 1 = the vocab's size",
    )  # fmt: skip
    strategy: str = field("auto", f"hardware: {'|'.join(KINDS)}")
    tpu: str | None = field(None, "TPU name or grpc:// address (default: $TPU_NAME, else local)")
    global_batch_size: int = field(32, "examples per optimizer step over all replicas")
    per_replica_batch_size: int = field(0, "instead of --global_batch_size: examples per replica")
    train_steps: int = field(1000, "optimizer updates in the whole run")
    warmup_steps: int = field(100, "updates of linear learning-rate warmup")
    learning_rate: float = field(1e-4, "peak learning rate")
    end_learning_rate: float = field(0.0, "learning rate at train_steps, reached linearly")
    optimizer: str = field("adamw", f"{'|'.join(OPTIMIZERS)}: Keras's AdamW, or Lamb (large batches)")
    weight_decay: float = field(0.01, "decoupled weight decay (never on LayerNorm or bias)")
    clipnorm: float = field(1.0, "clip each gradient to this norm; 0 = off")
    grad_accum_steps: int = field(1, "batches whose gradients are averaged into one update")
    mixed_precision: str = field(
        "none", f"{'|'.join(MIXED_PRECISION)}: compute in bfloat16 or float16 (fp16 adds loss scaling)"
    )
    jit_compile: bool = field(True, "compile the train step with XLA (as on a TPU)")
    steps_per_execution: int = field(1, "batches per compiled call (fewer host round trips)")
    checkpoint_every: int = field(500, "updates between checkpoints")
    keep_checkpoints: int = field(3, "newest checkpoints kept")
    eval_every: int = field(500, "updates between validation runs")
    eval_steps: int = field(20, "validation batches per run (capped by the split's size); 0 = none")
    log_every: int = field(100, "updates between log lines, TensorBoard points and history rows")
    dynamic_masking: bool = field(False, "draw a fresh mask per read (RoBERTa) instead of the stored one")
    dynamic_masked_lm_prob: float | None = field(
        None, "--dynamic_masking at this rate (up to 0.4; default: the corpus's --masked_lm_prob)"
    )
    seed: int = field(0, "initialisation, dropout and data order all derive from it")
    # CPU runs, XLA or not, are reproducible without it; on GPUs it costs speed and Keras turns XLA off.
    deterministic: bool = field(False, "TF op determinism (for bit-identical GPU resumes)")
    init_checkpoint: str | None = field(
        None, "warm start, weights only: a model_dir, checkpoint, Google BERT, or hf:DIR (Hugging Face)"
    )
    head_warmup_steps: int = field(
        0, "with --init_checkpoint: the first N updates train only the weights that start fresh (the "
        "heads a release lacks), then everything trains; a multiple of --log_every",
    )  # fmt: skip
    fresh_lr_multiplier: float = field(
        1.0, "with --init_checkpoint: the weights that start fresh learn at this multiple of the rate "
        "throughout (bert4keras's lr_multiplier: a fresh head at a release's low rate barely learns); adamw",
    )  # fmt: skip
    extension_init: Literal["pieces", "mean", "random"] = field(
        "pieces", "a vocab extended from the release's (build_corpus --extend_vocab): how added tokens the "
        "release knows only as [UNK] start; pieces: as every added token, the mean of its pieces' rows (here "
        "the [UNK] row); mean: the mean of the release's rows; random: random rows at their mean norm",
    )  # fmt: skip
    warmup_embeddings: bool = field(
        False, "with --head_warmup_steps: the token embeddings train in the warm-up too, at the fresh "
        "weights' rate; with a vocab extended from the release's, only the added tokens' rows (Artetxe et "
        "al. 2020: an extended vocab's rows learned under the frozen body first)",
    )  # fmt: skip
    peak_tflops: float | None = field(None, "device peak for MFU (default: known TPU/GPU types)")
    export: bool = field(True, "write model_dir/export/ at the end")
    trace_batches: bool = field(False, "debugging: a digest of every batch read, in model_dir/trace/")

    def __post_init__(self):
        Objective(self.objective, self.generator_size, self.rtd_weight)  # its own checks: one-line errors
        need(bool(self.data), "--data: required (a corpus folder with manifest.json)")
        need(bool(self.model_dir), "--model_dir: required")
        need(self.preset in PRESETS, f"--preset {self.preset}: expected one of {', '.join(PRESETS)}")
        need(self.strategy in KINDS, f"--strategy {self.strategy}: expected one of {', '.join(KINDS)}")
        need(
            self.optimizer in OPTIMIZERS,
            f"--optimizer {self.optimizer}: expected one of {', '.join(OPTIMIZERS)}",
        )
        need(
            self.mixed_precision in MIXED_PRECISION,
            f"--mixed_precision {self.mixed_precision}: expected one of {', '.join(MIXED_PRECISION)}",
        )
        for name in ("train_steps", "checkpoint_every", "eval_every", "log_every", "keep_checkpoints"):
            need(getattr(self, name) >= 1, f"--{name}: expected >= 1, found {getattr(self, name)}")
        for name in ("grad_accum_steps", "steps_per_execution", "vocab_multiple"):
            need(getattr(self, name) >= 1, f"--{name}: expected >= 1, found {getattr(self, name)}")
        need(
            self.global_batch_size >= 1 or self.per_replica_batch_size >= 1,
            "--global_batch_size: expected >= 1",
        )
        need(self.warmup_steps >= 0, f"--warmup_steps: expected >= 0, found {self.warmup_steps}")
        need(
            self.attention_dropout is None or 0 <= self.attention_dropout < 1,
            f"--attention_dropout: expected a rate in [0, 1), found {self.attention_dropout}",
        )
        if self.head_warmup_steps:
            steps = self.head_warmup_steps
            need(bool(self.init_checkpoint), "--head_warmup_steps needs --init_checkpoint (a release)")
            need(
                0 < steps < self.train_steps and steps % self.log_every == 0,
                f"--head_warmup_steps {self.head_warmup_steps}: expected a multiple of --log_every "
                f"{self.log_every} below --train_steps {self.train_steps}",
            )
        need(
            not self.warmup_embeddings or bool(self.head_warmup_steps),
            "--warmup_embeddings trains the token embeddings in the head warm-up: needs --head_warmup_steps",
        )
        if self.fresh_lr_multiplier != 1.0:
            need(
                bool(self.init_checkpoint) and self.optimizer == "adamw" and self.fresh_lr_multiplier > 0,
                f"--fresh_lr_multiplier {self.fresh_lr_multiplier}: expected > 0, with --init_checkpoint "
                f"and --optimizer adamw (found {self.init_checkpoint or 'no --init_checkpoint'}, "
                f"{self.optimizer})",
            )
        need(self.eval_steps >= 0, f"--eval_steps: expected >= 0, found {self.eval_steps}")
        need(self.learning_rate > 0, f"--learning_rate: expected > 0, found {self.learning_rate}")
        need(
            self.mixture_temperature > 0,
            f"--mixture_temperature: expected > 0, found {self.mixture_temperature}",
        )
        if self.dynamic_masked_lm_prob is not None:
            need(self.dynamic_masking, "--dynamic_masked_lm_prob needs --dynamic_masking")
            need(
                0 < self.dynamic_masked_lm_prob <= MAX_MASKED_LM_PROB,
                f"--dynamic_masked_lm_prob: expected in (0, {MAX_MASKED_LM_PROB}], "
                f"found {self.dynamic_masked_lm_prob}",
            )
        need(
            not (self.trace_batches and "://" in self.model_dir),
            "--trace_batches appends to local files: use a local --model_dir",
        )
        need(
            self.steps_per_execution == 1 or self.batches_per_epoch % self.steps_per_execution == 0,
            f"--steps_per_execution {self.steps_per_execution} must divide the {self.batches_per_epoch} "
            "batches between logs/checkpoints/evals; change --log_every or --steps_per_execution",
        )

    @property
    def pretraining_objective(self) -> Objective:
        return Objective(self.objective, self.generator_size, self.rtd_weight)

    @property
    def steps_per_epoch(self) -> int:
        """Updates per Keras epoch: the largest interval on which logging, checkpoints, validation
        and the end of training all fall, so each happens at an epoch end."""
        return math.gcd(self.log_every, self.checkpoint_every, self.eval_every, self.train_steps)

    @property
    def batches_per_epoch(self) -> int:
        return self.steps_per_epoch * self.grad_accum_steps

    def to_json(self, resolved: dict | None = None) -> str:
        """The flags; with `resolved`, also what they resolved to (mixture rates, phases) under
        "resolved", which `from_json` ignores."""
        values = dataclasses.asdict(self)
        if resolved:
            values["resolved"] = resolved
        return json.dumps(values, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "config.json") -> TrainConfig:
        values = json.loads(text)
        values.pop("resolved", None)
        known = {f.name for f in dataclasses.fields(cls)}
        need(not set(values) - known, f"{source}: unknown fields {sorted(set(values) - known)}")
        return cls(**values)

    @classmethod
    def from_args(cls, argv: list[str] | None = None) -> TrainConfig:
        return cls(**vars(parser().parse_args(argv)))


def parser() -> Parser:
    p = Parser(
        prog="python -m launch.pretrain",
        description="Pretrain BERT on a bertbeam corpus; re-run the same command to resume.",
        verbose_flag=True,
    )
    add_arguments(p, TrainConfig)
    return p
