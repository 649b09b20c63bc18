"""The first step of a run: the configuration resolved into what every later step shares (`Run`:
the phases' corpora, the model's shape, the strategy, batch sizes), with every mistake in it a
one-line error before a model exists (`launch/train.py` runs the steps).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile

import keras

from common.errors import BertbeamError
from launch import backend
from launch.checkpoints import CheckpointError, Checkpoints
from launch.config import TrainConfig
from launch.interop.formats import config_beside, read_bert_config
from launch.run_dir import BERT_CONFIG, RunDir
from launch.sources import Corpora, DataError, Phase, parse_phases, parse_sources, resolve, split_head_warmup
from launch.strategy import batch_sizes, check_tpu_paths, choose_strategy, describe, is_chief, worker_index
from launch.streams import dynamic_masking
from model.config import BertConfig
from pipeline import files
from pipeline.schema import Manifest


class TrainError(BertbeamError):
    """The run cannot go on as configured; the message is one line saying what to change."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """One phase of the run, resolved: its updates, corpora and batch sizes."""

    phase: Phase
    corpora: Corpora
    global_batch: int
    per_replica_batch: int
    eval_batches: tuple[int, ...]  # per corpus, per validation run during training (0: none)

    @property
    def manifest(self) -> Manifest:  # what the phase's model is built for (all corpora agree)
        return self.corpora.first

    def describe(self, grad_accum_steps: int) -> dict:
        examples = self.phase.steps * grad_accum_steps * self.global_batch
        return {
            "seq_len": self.manifest.seq_len,
            "max_predictions": self.manifest.max_predictions,
            "steps": [self.phase.start, self.phase.end],
            "global_batch_size": self.global_batch,
            "corpora": self.corpora.describe(examples),
            **({"head_only": True} if self.phase.head_only else {}),
        }


@dataclasses.dataclass
class Run:
    """What the steps of one run share, resolved once at the start."""

    config: TrainConfig
    run_dir: RunDir  # --model_dir: what a resumed run reads
    stages: list[Stage]  # one per phase, in order
    bert: BertConfig
    strategy: object  # a tf.distribute.Strategy, or on JAX a strategy.JaxStrategy
    model: keras.Model | None = None
    checkpoints: Checkpoints | None = None
    # Where this process writes: run_dir on the chief (and any single-worker run); on the other
    # workers of a multi-worker run, a local scratch folder, deleted at the end. They must still
    # save checkpoints and summaries (TF's collective saves need every worker), just not there.
    write_dir: RunDir | None = None

    def __post_init__(self):
        self.write_dir = self.write_dir or self.run_dir

    @property
    def chief(self) -> bool:
        return self.write_dir == self.run_dir

    def stage_at(self, step: int) -> Stage:
        """The phase that trains update `step + 1` (the last one once training is done)."""
        return next((s for s in self.stages if step < s.phase.end), self.stages[-1])

    @property
    def resolved(self) -> dict:
        """What --data and --phases resolved to, and the warnings about it, for config.json."""
        phases = [s.describe(self.config.grad_accum_steps) for s in self.stages]
        return {"phases": phases, "warnings": self._epoch_warnings(phases)}

    def _epoch_warnings(self, phases: list[dict]) -> list[str]:
        limit = self.config.max_epochs_warning
        return [
            f"{name} ({info['path']}) will be read {info['expected_epochs']:.1f} times in phase {n} "
            f"(> --max_epochs_warning {limit:g}); lower its weight, add data or train for fewer steps"
            for n, phase in enumerate(phases, 1)
            for name, info in phase["corpora"].items()
            if info["expected_epochs"] > limit
        ]


def prepare(config: TrainConfig, strategy=None) -> Run:
    """The configuration's mistakes, found before a model is built: one-line errors. (Only a
    resume point off the log interval waits for the checkpoint: `check_resume_point`.)"""
    backend.refuse_flags(config)
    if config.deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    try:
        sources = parse_sources(config.data)
        phases = parse_phases(config.phases, config.phase_batch_sizes, config.train_steps, config.log_every)
        phases = split_head_warmup(phases, config.head_warmup_steps)
    except DataError as e:
        raise TrainError(str(e)) from None
    paths = {"data": sources[0].path} if len(sources) == 1 else {f"data {s.name}=": s.path for s in sources}
    paths["model_dir"] = config.model_dir
    check_tpu_paths(config.strategy, strategy, paths)
    corpora = [read_corpora(config, sources, phase) for phase in phases]
    bert = resolve_bert_config(config, corpora)
    strategy = strategy or choose_strategy(config.strategy, config.tpu)
    check_tpu_paths(config.strategy, strategy, paths)  # --strategy auto may have found a TPU
    stages = []
    for phase, phase_corpora in zip(phases, corpora, strict=True):
        global_batch, per_replica = batch_sizes(
            strategy,
            global_batch_size=phase.global_batch_size or config.global_batch_size,
            per_replica_batch_size=0 if phase.global_batch_size else config.per_replica_batch_size,
        )
        eval_batches = tuple(validation_batches(config, m, global_batch) for m in phase_corpora.manifests)
        stages.append(Stage(phase, phase_corpora, global_batch, per_replica, eval_batches))
    files.make_dirs(config.model_dir)
    write_dir = None
    if not is_chief(strategy):  # a worker of a multi-worker run, not the chief
        task = worker_index(strategy)
        write_dir = RunDir(tempfile.mkdtemp(prefix=f"bertbeam-worker{task}-"))
        print(f"worker {task}: the chief writes {config.model_dir}; this worker's copies go to "
              f"{write_dir.path} (deleted at the end)", flush=True)  # fmt: skip
    run = Run(config, RunDir(config.model_dir), stages, bert, strategy, write_dir=write_dir)
    print(f"config: {config.to_json()}\nmodel: {bert.to_json()}", flush=True)
    print(f"backend: {backend.name()}, {describe(strategy)}", flush=True)
    report_data(run)
    return run


def read_corpora(config: TrainConfig, sources, phase: Phase) -> Corpora:
    """The phase's corpora (checked against each other), and its dynamic masking checked against
    them."""
    try:
        corpora = resolve(sources, phase.seq_len, config.mixture_temperature)
        dynamic_masking(config, corpora)
    except BertbeamError as e:
        raise TrainError(str(e)) from None
    return corpora


def report_data(run: Run) -> None:
    """Per phase: each corpus's rate and the epochs the run makes of it; a warning for a corpus
    read more than --max_epochs_warning times."""
    resolved = run.resolved
    for n, (stage, described) in enumerate(zip(run.stages, resolved["phases"], strict=True), 1):
        if len(run.stages) > 1 or stage.corpora.mixture:
            phase = stage.phase
            print(
                f"data, phase {n} (seq_len {stage.manifest.seq_len}, steps {phase.start}-{phase.end}), "
                f"global batch {stage.global_batch}:",
                flush=True,
            )
            for name, info in described["corpora"].items():
                print(
                    f"  {name:<16} rate {info['rate']:.3f}  records {info['records']:>12,}  "
                    f"epochs {info['expected_epochs']:.2f}  ({info['path']})",
                    flush=True,
                )
    for warning in resolved["warnings"]:
        print(f"warning: {warning}", file=sys.stderr, flush=True)


def resolve_bert_config(config: TrainConfig, corpora: list[Corpora]) -> BertConfig:
    """The model's shape from --bert_config (ours, Google's or Hugging Face's) or --preset, checked
    against the corpora: the same vocab (in every phase) and its size, positions for the longest
    phase's seq_len."""
    first = corpora[0].first
    for other in corpora[1:]:
        if other.first.vocab.sha256 != first.vocab.sha256 or other.first.pairs != first.pairs:
            raise TrainError(
                f"--data {other.first.folder}: another vocab or pair task than {first.folder}; every "
                "phase needs corpora built with the same vocab and --mode"
            )
    vocab_size = first.vocab.size
    bert_config = config.bert_config
    if not bert_config and config.init_checkpoint:  # a release's shape is the release's own
        try:
            bert_config = config_beside(config.init_checkpoint)
        except CheckpointError as e:
            raise TrainError(f"--init_checkpoint {e}") from None
        if bert_config:
            print(f"model: the shape of {config.init_checkpoint}, from {bert_config}", flush=True)
    if bert_config:
        bert = read_bert_config(bert_config)
        # A release may have more embedding rows than its tokenizer has tokens (ModernBERT pads
        # 50,285 to 50,368, a multiple of 64): warm-started from it, the corpus uses a prefix, and
        # the rows past it are masked as a padded vocab's.
        padded_release = config.init_checkpoint and bert.tokens > vocab_size
        # A vocab extended from the release's (--extend_vocab): the model grows to it, each new row
        # the mean of its pieces' rows (launch/interop/grow.py).
        release = first.vocab.release
        if config.init_checkpoint and release.get("base_size") == bert.vocab_size < vocab_size:
            print(f"model: {bert.vocab_size} token rows grow to {vocab_size} for the tokens the corpus added "
                  f"to {release['name']}'s vocab", flush=True)  # fmt: skip
            bert = dataclasses.replace(bert, vocab_size=vocab_size)
        elif bert.tokens != vocab_size and not padded_release:
            raise TrainError(
                f"--bert_config {bert_config}: vocab_size {bert.tokens}, the corpus vocab has "
                f"{vocab_size}; set vocab_size to {vocab_size} or rebuild the corpus"
            )
        if padded_release:
            print(f"note: the model has {bert.vocab_size} token rows, the corpus vocab {vocab_size}: rows "
                  f"{vocab_size}-{bert.vocab_size - 1} are never read or sampled", flush=True)  # fmt: skip
            bert = dataclasses.replace(bert, tokenizer_size=vocab_size)
    else:
        bert = BertConfig.preset(config.preset, vocab_size)
    # --vocab_multiple pads the shapes bertbeam derives (a preset's, a release's, padded on load);
    # a --bert_config for a fresh run keeps the rows it states.
    rows = bert.vocab_size
    if not config.bert_config or config.init_checkpoint:
        bert = bert.padded(config.vocab_multiple)
    run_dir = RunDir(config.model_dir)
    started = run_dir.read_bert_config() if run_dir.exists(BERT_CONFIG) else None  # a run to resume
    if started and started.tokens == bert.tokens and started.vocab_size != bert.vocab_size:
        # A run started at other rows (before --vocab_multiple, or with another) resumes at its own.
        print(f"model: {started.vocab_size} token rows, as {config.model_dir} was started (--vocab_multiple "
              "applies to new runs)", flush=True)  # fmt: skip
        bert = dataclasses.replace(bert, vocab_size=started.vocab_size, tokenizer_size=started.tokenizer_size)
    elif bert.vocab_size != rows and config.init_checkpoint:
        print(f"model: the release's {rows} token rows padded to {bert.vocab_size} (--vocab_multiple "
              f"{config.vocab_multiple}); the new rows are never read, their logits masked",
              flush=True)  # fmt: skip
    if config.attention_dropout is not None:
        bert = dataclasses.replace(bert, attention_dropout=config.attention_dropout)
    longest = max((c.first for c in corpora), key=lambda m: m.seq_len)
    if longest.seq_len > bert.max_position:
        raise TrainError(
            f"--data {longest.folder}: seq_len {longest.seq_len} exceeds the model's max_position "
            f"{bert.max_position}; rebuild the corpus with --seq_len <= {bert.max_position} "
            "or raise max_position"
        )
    return bert


def validation_batches(config: TrainConfig, manifest: Manifest, global_batch: int) -> int:
    """Batches per validation run: --eval_steps, capped by what the split holds."""
    if not config.eval_steps:
        return 0
    records = manifest.split("validation").instances
    if records < global_batch:
        raise TrainError(
            f"--data {manifest.folder}: the validation split has {records} records, fewer than one "
            f"global batch of {global_batch}; rebuild with a larger --validation_fraction or pass "
            "--eval_steps 0"
        )
    return min(config.eval_steps, records // global_batch)
