"""Pretraining, as named steps that `train(config)` runs in order:

    prepare: the corpus's manifest, the model's shape, the strategy, batch sizes (every mistake in
             the configuration is a one-line error here, before a model exists)
    build:   model, optimizer and checkpoints in the strategy's scope; resume or warm start
    fit:     model.fit from the restored step; an epoch is one log interval (launch/logs.py)
    finish:  evaluation over the whole validation split (eval.json), loss.png, export/

What each step uses lives beside it: `checkpoints.py` (resume, warm start), `inputs.py` (the
streams), `logs.py` (TensorBoard, history), `run_dir.py` (the files of model_dir), `export.py`.

Resume: every checkpoint holds the model's variables (dropout RNG states included) and the
optimizer's (slots, step counter, so also the schedule's position). The input position is the
step counter: a resumed run rebuilds the same deterministic stream and drops the records it
already trained on before parsing them (`make_dataset(skip_batches=...)`). Keras's `fit` makes its
own iterator from the dataset it is given, and under a distribution strategy draws one batch from
a throwaway iterator to build the model, so a saved tf.data iterator could not be handed to it;
replaying the record stream is what keeps the data position exact.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import keras
import tensorflow as tf

from common.errors import BertbeamError
from launch.checkpoints import Checkpoints, out_of_space_is_one_line, read_bert_config, warm_start
from launch.config import TrainConfig
from launch.export import export
from launch.flops import detect_peak_tflops, training_flops_per_example
from launch.inputs import train_inputs, validation_dataset
from launch.logs import EpochLog, History, mlm_loss, pick, plot_loss, read_history
from launch.optimizer import build_optimizer
from launch.run_dir import BERT_CONFIG, CONFIG, EVAL, LOSS_PLOT, SUMMARY, RunDir
from launch.strategy import batch_sizes, check_tpu_paths, choose_strategy
from model.bert import build_pretraining_model
from model.config import BertConfig
from model.losses import compile_pretraining
from pipeline.input import naming_bad_shards
from pipeline.schema import Manifest, ManifestError, read_manifest
from pipeline.vocab import VocabFile

POLICIES = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


class TrainError(BertbeamError):
    """The run cannot go on as configured; the message is one line saying what to change."""


@dataclasses.dataclass
class Run:
    """What the steps of one run share, resolved once at the start."""

    config: TrainConfig
    run_dir: RunDir
    manifest: Manifest  # the corpus
    bert: BertConfig
    strategy: tf.distribute.Strategy
    global_batch: int
    per_replica_batch: int
    eval_batches: int  # per validation run during training
    model: keras.Model | None = None
    checkpoints: Checkpoints | None = None


def train(config: TrainConfig, strategy: tf.distribute.Strategy | None = None) -> dict:
    """Runs (or resumes, or finishes) the pretraining `config` describes; returns the summary
    that is also written to model_dir/summary.json."""
    run = prepare(config, strategy)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(POLICIES[config.mixed_precision])
    try:
        step = build(run)
        check_resume_point(config, step)
        run.run_dir.write(CONFIG, config.to_json())
        run.run_dir.write(BERT_CONFIG, run.bert.to_json())
        print(f"{'resuming at' if step else 'starting at'} step {step} of {config.train_steps}", flush=True)
        fit(run, step)
        results = finish(run)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    summary = {
        "step": int(run.model.optimizer.iterations.numpy()),
        "eval": results,
        "model_dir": config.model_dir,
    }
    run.run_dir.write_json(SUMMARY, summary)
    return summary


# === prepare ===


def prepare(config: TrainConfig, strategy: tf.distribute.Strategy | None) -> Run:
    """The configuration's mistakes, found before a model is built: one-line errors. (Only a
    resume point off the log interval waits for the checkpoint: `check_resume_point`.)"""
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    paths = {"data": config.data, "model_dir": config.model_dir}
    check_tpu_paths(config.strategy, strategy, paths)
    manifest = read_corpus(config.data)
    bert = resolve_bert_config(config, manifest)
    strategy = strategy or choose_strategy(config.strategy, config.tpu)
    check_tpu_paths(config.strategy, strategy, paths)  # --strategy auto may have found a TPU
    global_batch, per_replica = batch_sizes(
        strategy,
        global_batch_size=config.global_batch_size,
        per_replica_batch_size=config.per_replica_batch_size,
    )
    eval_batches = validation_batches(config, manifest, global_batch)
    tf.io.gfile.makedirs(config.model_dir)
    print(f"config: {config.to_json()}\nmodel: {bert.to_json()}", flush=True)
    return Run(
        config, RunDir(config.model_dir), manifest, bert, strategy, global_batch, per_replica, eval_batches
    )


def read_corpus(data: str) -> Manifest:
    """The corpus at --data: its manifest, and its vocab checked against it (masking and export
    read that vocab)."""
    try:
        manifest = read_manifest(data)
    except ManifestError as e:
        raise TrainError(f"--data {e}") from None
    VocabFile.of_corpus(manifest)
    return manifest


def resolve_bert_config(config: TrainConfig, manifest: Manifest) -> BertConfig:
    """The model's shape from --bert_config (ours, Google's or Hugging Face's) or --preset, checked
    against the corpus: the same vocab size, positions for its seq_len."""
    vocab_size = manifest.vocab.size
    if config.bert_config:
        bert = read_bert_config(config.bert_config)
        if bert.vocab_size != vocab_size:
            raise TrainError(
                f"--bert_config {config.bert_config}: vocab_size {bert.vocab_size}, the corpus vocab has "
                f"{vocab_size}; set vocab_size to {vocab_size} or rebuild the corpus"
            )
    else:
        bert = BertConfig.preset(config.preset, vocab_size)
    if manifest.seq_len > bert.max_position:
        raise TrainError(
            f"--data {manifest.folder}: seq_len {manifest.seq_len} exceeds the model's max_position "
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


# === build ===


def build(run: Run) -> int:
    """Model, optimizer and checkpoints in the strategy's scope; restores the latest checkpoint
    (or warm-starts a new run). Returns the optimizer updates already done."""
    config, manifest = run.config, run.manifest
    with run.strategy.scope():
        run.model = build_pretraining_model(
            run.bert, manifest.seq_len, manifest.max_predictions, manifest.pairs
        )
        optimizer = build_optimizer(
            config.optimizer,
            learning_rate=config.learning_rate,
            warmup_steps=config.warmup_steps,
            total_steps=config.train_steps,
            end_learning_rate=config.end_learning_rate,
            weight_decay=config.weight_decay,
            clipnorm=config.clipnorm,
            grad_accum_steps=config.grad_accum_steps,
            mixed_precision=config.mixed_precision,
        )
        optimizer.build(run.model.trainable_variables)  # slots exist before a restore fills them
        compile_pretraining(
            run.model,
            optimizer,
            jit_compile=config.jit_compile,
            steps_per_execution=config.steps_per_execution,
        )
        run.checkpoints = Checkpoints(run.model, optimizer, run.run_dir.checkpoints, config.keep_checkpoints)
        step = run.checkpoints.restore()
        if step == 0 and config.init_checkpoint:
            warm_start(run.model, config.init_checkpoint)
    return step


def check_resume_point(config: TrainConfig, step: int) -> None:
    """Keras resumes at an epoch start, so the restored step must be on this run's log interval."""
    if step < config.train_steps and step % config.steps_per_epoch:
        raise TrainError(
            f"--model_dir {config.model_dir}: its checkpoint at step {step} falls inside this run's "
            f"{config.steps_per_epoch}-step log interval; resume with the --log_every, --checkpoint_every "
            "and --eval_every it was started with (model_dir/config.json)"
        )


# === fit ===


def fit(run: Run, step: int) -> None:
    """model.fit from `step` to train_steps; a Keras epoch is one log interval."""
    config, manifest = run.config, run.manifest
    if step >= config.train_steps:
        return
    start_batch = step * config.grad_accum_steps
    train_data = train_inputs(config, manifest, run.strategy, run.per_replica_batch, start_batch)
    validation = validation_dataset(manifest, run.global_batch, config.seed) if run.eval_batches else None
    log = EpochLog(
        config,
        History(run.run_dir, step),
        run.checkpoints,
        global_batch=run.global_batch,
        seq_len=manifest.seq_len,
        flops_per_example=training_flops_per_example(run.bert, manifest.seq_len, manifest.max_predictions),
        peak_tflops=config.peak_tflops or detect_peak_tflops(),
        devices=run.strategy.num_replicas_in_sync,
    )
    shards = manifest.files("train") + manifest.files("validation")
    with naming_bad_shards(shards), out_of_space_is_one_line(config.model_dir):
        run.model.fit(
            train_data,
            initial_epoch=step // config.steps_per_epoch,
            epochs=config.train_steps // config.steps_per_epoch,
            steps_per_epoch=config.batches_per_epoch,
            validation_data=validation,
            validation_steps=run.eval_batches or None,
            validation_freq=config.eval_every // config.steps_per_epoch,
            callbacks=[log],
            shuffle=False,  # the dataset is already shuffled, by seed
            verbose=1 if sys.stdout.isatty() else 2,  # a line per epoch in logs and pipes
        )


# === finish ===


def finish(run: Run) -> dict:
    """The final evaluation, the loss plot and, unless --no-export, model_dir/export/."""
    results = final_evaluation(run)
    plot_loss(read_history(run.run_dir), run.run_dir.file(LOSS_PLOT))
    if run.config.export:
        export(run.model, bert=run.bert, manifest=run.manifest, config=run.config)
    return results


def final_evaluation(run: Run) -> dict:
    """The whole validation split, once: model_dir/eval.json (MLM loss, accuracy, perplexity;
    NSP/SOP accuracy when the corpus has pairs)."""
    config, manifest = run.config, run.manifest
    if not run.eval_batches:
        return {}
    validation = validation_dataset(manifest, run.global_batch, config.seed)
    batches = manifest.split("validation").instances // run.global_batch
    with naming_bad_shards(manifest.files("validation")):
        logs = run.model.evaluate(validation, steps=batches, return_dict=True, verbose=0)
    loss = mlm_loss(logs)
    results = {
        "step": int(run.model.optimizer.iterations.numpy()),
        "examples": batches * run.global_batch,
        "mlm_loss": loss,
        "mlm_accuracy": pick(logs, "mlm_accuracy", "accuracy"),
        "perplexity": math.exp(min(loss, 700.0)),
    }
    if manifest.pairs:
        results["nsp_accuracy"] = pick(logs, "nsp_accuracy")
    run.run_dir.write_json(EVAL, results)
    return results
