"""Pretraining, as named steps that `train(config)` runs in order:

    resolve the corpus -> choose the strategy -> build model and optimizer in its scope
    -> resume (or warm start) -> model.fit, checkpointing / logging / validating at epoch ends
    -> final evaluation (eval.json) -> loss.png -> export/

Resume: every checkpoint holds the model's variables (dropout RNG states included) and the
optimizer's (slots, step counter, so also the schedule's position). The input position is the
step counter: a resumed run rebuilds the same deterministic stream and drops the records it
already trained on before parsing them (see `make_dataset(skip_batches=...)`). Keras's `fit` makes
its own iterator from the dataset it is given, and under a distribution strategy draws one batch
from a throwaway iterator to build the model, so a saved tf.data iterator could not be handed to
it; replaying the record stream is what keeps the data position exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from launch.config import TrainConfig
from launch.flops import detect_peak_tflops, training_flops_per_example
from launch.google_checkpoint import (
    GoogleCheckpointError,
    google_bert_config,
    is_google_checkpoint,
    load_google_checkpoint,
)
from launch.hf_checkpoint import HFCheckpointError, hf_bert_config, is_hf_config, load_hf_checkpoint
from launch.optimizer import build_optimizer
from launch.strategy import choose_strategy
from model.bert import build_pretraining_model
from model.config import BertConfig
from model.losses import compile_pretraining
from pipeline import schema
from pipeline.input import InputError, make_dataset, naming_bad_shards

HISTORY = "history.jsonl"
HF_PREFIX = "hf:"  # --init_checkpoint hf:DIR: a Hugging Face BERT folder
POLICIES = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


class TrainError(ValueError):
    """The run cannot start as configured; the message is one line saying what to change."""


# === The corpus ===


@dataclasses.dataclass(frozen=True)
class Corpus:
    folder: str
    manifest: dict
    seq_len: int
    max_predictions: int
    vocab_size: int
    vocab_file: str
    next_sentence: bool  # segment_pair corpora carry NSP/SOP labels
    validation_records: int

    @property
    def train_files(self) -> str:
        return f"{self.folder}/train-*"

    @property
    def validation_files(self) -> str:
        return f"{self.folder}/validation-*"


def resolve_corpus(data: str) -> Corpus:
    folder = data.rstrip("/")
    if not tf.io.gfile.exists(f"{folder}/{schema.MANIFEST_NAME}"):
        found = "does not exist" if not tf.io.gfile.exists(folder) else "has no manifest.json"
        raise TrainError(f"--data {data}: {found}; build a corpus first (make corpus OUTPUT={data})")
    manifest = schema.read_manifest(folder)
    build, splits = manifest["build"], manifest["splits"]
    check_vocab_file(folder, manifest["vocab"])
    return Corpus(
        folder=folder,
        manifest=manifest,
        seq_len=int(build["seq_len"]),
        max_predictions=int(build["max_predictions"]),
        vocab_size=int(manifest["vocab"]["size"]),
        vocab_file=f"{folder}/{manifest['vocab']['file']}",
        next_sentence=build.get("mode") == "segment_pair",
        validation_records=int(splits.get("validation", {}).get("instances", 0)),
    )


def check_vocab_file(folder: str, vocab: dict) -> None:
    """The vocab beside the shards is the one they were tokenized with (masking and export use it)."""
    path = f"{folder}/{vocab['file']}"
    if not tf.io.gfile.exists(path):
        raise TrainError(f"{path}: missing (the manifest names it); rebuild the corpus")
    with tf.io.gfile.GFile(path, "rb") as f:
        found = hashlib.sha256(f.read()).hexdigest()
    if found != vocab["sha256"]:
        raise TrainError(
            f"{path}: sha256 {found[:12]}..., the manifest says {vocab['sha256'][:12]}...; "
            "the shards were tokenized with another vocab, rebuild the corpus"
        )


def resolve_bert_config(config: TrainConfig, corpus: Corpus) -> BertConfig:
    if config.bert_config:
        with tf.io.gfile.GFile(config.bert_config) as f:
            text = f.read()
        # Hugging Face's config.json, google-research/bert's bert_config.json, or our BertConfig JSON.
        raw = json.loads(text)
        if is_hf_config(raw):
            bert = hf_bert_config(config.bert_config)
        elif "num_hidden_layers" in raw:
            bert = google_bert_config(config.bert_config)
        else:
            bert = BertConfig.from_json(text)
        if bert.vocab_size != corpus.vocab_size:
            raise TrainError(
                f"--bert_config {config.bert_config}: vocab_size {bert.vocab_size}, the corpus vocab has "
                f"{corpus.vocab_size}; set vocab_size to {corpus.vocab_size} or rebuild the corpus"
            )
    else:
        bert = BertConfig.preset(config.preset, corpus.vocab_size)
    if corpus.seq_len > bert.max_position:
        raise TrainError(
            f"--data {corpus.folder}: seq_len {corpus.seq_len} exceeds the model's max_position "
            f"{bert.max_position}; rebuild the corpus with --seq_len <= {bert.max_position} "
            "or raise max_position"
        )
    return bert


# === Hardware ===


def batch_sizes(config: TrainConfig, strategy: tf.distribute.Strategy) -> tuple[int, int]:
    """(global, per replica) examples per batch; the global batch must split evenly over replicas."""
    replicas = strategy.num_replicas_in_sync
    if config.per_replica_batch_size:
        return config.per_replica_batch_size * replicas, config.per_replica_batch_size
    if config.global_batch_size % replicas:
        raise TrainError(
            f"--global_batch_size {config.global_batch_size} does not divide over {replicas} replicas; "
            f"use a multiple of {replicas} or --per_replica_batch_size"
        )
    return config.global_batch_size, config.global_batch_size // replicas


def check_paths(config: TrainConfig, strategy: tf.distribute.Strategy | None) -> None:
    """TPU workers read and write only through GCS: a local path would be the TPU host's disk.
    Checked from the flags before a TPU is looked for, and again for a TPUStrategy passed in."""
    if config.strategy == "tpu" or isinstance(strategy, tf.distribute.TPUStrategy):
        for flag in ("data", "model_dir"):
            if not getattr(config, flag).startswith("gs://"):
                raise TrainError(
                    f"--{flag} {getattr(config, flag)}: a TPU reads and writes only gs:// paths; "
                    "copy the corpus to a bucket and pass gs://BUCKET/..."
                )


# === Checkpoints ===


class Checkpoints:
    """Model and optimizer variables, saved atomically by tf.train.CheckpointManager: a run killed
    mid-save leaves the previous checkpoint as the latest, since the `checkpoint` index file is
    replaced only after the new files are complete."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, folder: str, keep: int):
        self.optimizer = optimizer
        self.checkpoint = tf.train.Checkpoint(
            model=model_variables(model), optimizer=optimizer_variables(optimizer)
        )
        self.manager = tf.train.CheckpointManager(self.checkpoint, folder, max_to_keep=keep)

    def restore(self) -> int:
        """Restores the latest checkpoint, if any; returns the optimizer updates done so far."""
        if self.manager.latest_checkpoint:
            self.checkpoint.restore(self.manager.latest_checkpoint).assert_consumed()
        return int(self.optimizer.iterations.numpy())

    def save(self, step: int) -> str:
        try:
            return self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as e:
            if not _out_of_space(e):
                raise
            kept = self.manager.latest_checkpoint or "none yet"
            raise TrainError(
                f"{self.manager.directory}: no space left on the device writing checkpoint "
                f"{step}; the newest complete one ({kept}) is untouched: free space and re-run to resume"
            ) from None


def _out_of_space(error: Exception) -> bool:
    return getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error)


@contextlib.contextmanager
def out_of_space_is_one_line(model_dir: str):
    """A full disk under the logs or history (checkpoints say more, in `Checkpoints.save`)."""
    try:
        yield
    except (tf.errors.OpError, OSError) as e:
        if not _out_of_space(e):
            raise
        raise TrainError(
            f"--model_dir {model_dir}: no space left on the device; checkpoints already written are "
            "complete: free space and re-run to resume"
        ) from None


def model_variables(model: keras.Model) -> dict:
    """The model's tf.Variables under stable keys (Keras 3 objects are not tf.train trackables).

    Trainable weights go by their Keras path, stable because every layer is named. Other state
    (dropout RNG seeds) goes by position: its auto-generated names get a process-wide counter
    (`seed_generator_20`) that differs when a process builds a second model.
    """
    named = weights_by_path(model)
    named.update({f"state/{i}": v.value for i, v in enumerate(model.non_trainable_variables)})
    return _unique(named, model.variables)


def weights_by_path(model: keras.Model) -> dict:
    return {v.path: v.value for v in model.trainable_variables}


def optimizer_variables(optimizer: keras.optimizers.Optimizer) -> dict:
    """Step counter and slots, keyed by path without the counter suffix that a second optimizer
    in one process gets (`adam_w_1/...` -> `adam_w/...`)."""

    def key(path: str) -> str:
        owner, _, rest = path.partition("/")
        return f"{re.sub(r'_[0-9]+$', '', owner)}/{rest}"

    return _unique({key(v.path): v.value for v in optimizer.variables}, optimizer.variables)


def _unique(named: dict, variables) -> dict:
    if len(named) != len(variables):
        raise RuntimeError("two variables share a checkpoint key")
    return named


def warm_start(model: keras.Model, source: str) -> None:
    """Trainable weights only (no optimizer state, no step) from a bertbeam model_dir or
    checkpoint, a Google BERT release (its folder, or a bert_model.ckpt prefix), or `hf:DIR`, a
    Hugging Face BERT folder (config.json + model.safetensors)."""
    source = source.rstrip("/")
    if source.startswith(HF_PREFIX):
        try:
            fresh = load_hf_checkpoint(model, source.removeprefix(HF_PREFIX))
        except HFCheckpointError as e:
            raise TrainError(f"--init_checkpoint {e}") from None
        if fresh:
            print(f"warm start: {source} has no {', '.join(fresh)}; those start fresh", flush=True)
        return
    path = tf.train.latest_checkpoint(f"{source}/checkpoints") or tf.train.latest_checkpoint(source)
    if path is None and tf.io.gfile.exists(f"{source}/bert_model.ckpt.index"):
        path = f"{source}/bert_model.ckpt"  # an unpacked google-research/bert release
    if path is None and tf.io.gfile.exists(f"{source}.index"):
        path = source
    if path is None:
        raise TrainError(f"--init_checkpoint {source}: no checkpoint found there")
    if is_google_checkpoint(path):
        try:
            load_google_checkpoint(model, path)
        except GoogleCheckpointError as e:
            raise TrainError(f"--init_checkpoint {e}") from None
        return
    try:
        read_weights(model, path)
    except ValueError as e:
        raise TrainError(f"--init_checkpoint {path}: does not fit this model ({e})") from None


def read_weights(model: keras.Model, path: str) -> None:
    """Trainable weights from a bertbeam checkpoint; ValueError(first line of the cause) when the
    checkpoint does not fit the model."""
    try:
        status = tf.train.Checkpoint(model=weights_by_path(model)).read(path)
        status.expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
        raise ValueError(str(e).strip().splitlines()[0][:200]) from None


# === Input ===


def make_inputs(
    config: TrainConfig, corpus: Corpus, strategy: tf.distribute.Strategy, per_replica: int, start_batch: int
):
    """The distributed training stream, starting at batch `start_batch`."""
    trace = f"{config.model_dir}/trace" if config.trace_batches else None
    if trace:
        os.makedirs(trace, exist_ok=True)  # local only: TrainConfig refuses gs:// with tracing

    def train_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # A batch index counts per input pipeline; each feeds its share of the replicas per step.
        per_step = strategy.num_replicas_in_sync // context.num_input_pipelines
        on_batch = _trace_to(f"{trace}/{os.getpid()}-{context.input_pipeline_id}.tsv") if trace else None
        return make_dataset(
            corpus.train_files,
            manifest=corpus.manifest,
            per_replica_batch_size=per_replica,
            training=True,
            seed=config.seed,
            input_context=context,
            dynamic_masking=config.dynamic_masking,
            skip_batches=start_batch * per_step,
            on_batch=on_batch,
        )

    return strategy.distribute_datasets_from_function(train_fn)


def validation_dataset(corpus: Corpus, global_batch: int, seed: int) -> tf.data.Dataset:
    """The validation split in global batches, in file order (Keras splits them over replicas)."""
    return make_dataset(
        corpus.validation_files,
        manifest=corpus.manifest,
        per_replica_batch_size=global_batch,
        training=False,
        seed=seed,
    )


def _trace_to(path: str):
    """One line per batch, in stream order: its index, then a fingerprint of each example."""

    def write(step, fingerprints):
        rows = ",".join(bytes(row).hex() for row in fingerprints.numpy())
        with open(path, "a") as f:
            f.write(f"{int(step)}\t{rows}\n")
        return np.int64(0)

    def on_batch(step, batch):
        content = tf.concat(
            [batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_ids"]], axis=1
        )
        return tf.py_function(write, [step, tf.fingerprint(content)], tf.int64)

    return on_batch


def validation_batches(config: TrainConfig, corpus: Corpus, global_batch: int) -> int:
    """Batches per validation run: --eval_steps, capped by what the split holds."""
    if not config.eval_steps:
        return 0
    available = corpus.validation_records // global_batch
    if available == 0:
        raise TrainError(
            f"--data {corpus.folder}: the validation split has {corpus.validation_records} records, "
            f"fewer than one global batch of {global_batch}; rebuild with a larger --validation_fraction "
            "or pass --eval_steps 0"
        )
    return min(config.eval_steps, available)


# === Seeing what it does ===


class EpochLog(keras.callbacks.Callback):
    """At each epoch end (every log interval): TensorBoard scalars, a history row, a checkpoint
    when one is due, and step, learning rate, examples/s and MFU on Keras's progress line.
    Throughput covers training only, not validation."""

    def __init__(self, config: TrainConfig, history: History, checkpoints: Checkpoints, *,
                 global_batch: int, seq_len: int, flops_per_example: float, peak_tflops: float | None,
                 devices: int):  # fmt: skip
        super().__init__()
        self.config = config
        self.history = history
        self.checkpoints = checkpoints
        self.examples_per_epoch = config.batches_per_epoch * global_batch
        self.seq_len = seq_len
        self.flops_per_example = flops_per_example
        self.peak_flops = peak_tflops * 1e12 * devices if peak_tflops else None
        self.writers = {
            "train": tf.summary.create_file_writer(f"{config.model_dir}/logs/train"),
            "validation": tf.summary.create_file_writer(f"{config.model_dir}/logs/validation"),
        }

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.trained = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        step = int(self.model.optimizer.iterations.numpy())
        examples_per_s = self.examples_per_epoch / max(1e-9, self.trained - self.started)
        row = {
            "step": step,
            "loss": _mlm_loss(logs),
            "mlm_accuracy": _pick(logs, "mlm_accuracy", "accuracy"),
            "learning_rate": float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)),
            "examples_per_s": examples_per_s,
            "tokens_per_s": examples_per_s * self.seq_len,
        }
        if self.peak_flops:
            row["mfu"] = examples_per_s * self.flops_per_example / self.peak_flops
        if "val_loss" in logs:
            row["val_loss"] = _mlm_loss(logs, "val_")
            row["val_mlm_accuracy"] = _pick(logs, "val_mlm_accuracy", "val_accuracy")
        self._write(step, row)
        self.history.append(row)
        if step % self.config.checkpoint_every == 0 or step == self.config.train_steps:
            self.checkpoints.save(step)
        # The progress bar's epoch line is drawn after this callback, from the same dict.
        logs.update({"step": step, "lr": row["learning_rate"], "examples/s": examples_per_s})
        if "mfu" in row:
            logs["mfu"] = row["mfu"]

    def _write(self, step: int, row: dict) -> None:
        with self.writers["train"].as_default(step=step):
            for name in ("loss", "mlm_accuracy", "learning_rate", "examples_per_s", "tokens_per_s", "mfu"):
                if row.get(name) is not None:
                    tf.summary.scalar(name, row[name])
        if "val_loss" in row:
            with self.writers["validation"].as_default(step=step):
                tf.summary.scalar("loss", row["val_loss"])
                tf.summary.scalar("mlm_accuracy", row["val_mlm_accuracy"])
        for writer in self.writers.values():
            writer.flush()


def _pick(logs: dict, *names: str) -> float | None:
    return next((float(logs[n]) for n in names if n in logs), None)


def _mlm_loss(logs: dict, prefix: str = "") -> float | None:
    """The masked-LM loss: Keras logs it as `loss` when it is the only loss, else `mlm_loss`."""
    return _pick(logs, f"{prefix}mlm_loss", f"{prefix}loss")


class History:
    """model_dir/history.jsonl: one row per log interval. Rewritten whole each time (GCS objects
    cannot be appended to); rows past the resumed step, from a killed run, are dropped."""

    def __init__(self, model_dir: str, resumed_step: int):
        self.path = f"{model_dir}/{HISTORY}"
        self.rows = [r for r in read_history(model_dir) if r["step"] <= resumed_step]

    def append(self, row: dict) -> None:
        self.rows.append(row)
        _write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.rows))


def read_history(model_dir: str) -> list[dict]:
    path = f"{model_dir}/{HISTORY}"
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_text(path: str, text: str) -> None:
    """Write to a temporary name, then rename: readers never see half a file."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)


# === The run ===


@dataclasses.dataclass
class Run:
    """What the steps of one run share, resolved once at the start."""

    config: TrainConfig
    corpus: Corpus
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
        _write_text(f"{config.model_dir}/config.json", config.to_json())
        _write_text(f"{config.model_dir}/bert_config.json", run.bert.to_json())
        print(f"{'resuming at' if step else 'starting at'} step {step} of {config.train_steps}", flush=True)
        fit(run, step)
        results = final_evaluation(run)
        from launch.report import plot_loss

        plot_loss(read_history(config.model_dir), f"{config.model_dir}/loss.png")
        if config.export:
            from launch.export import export

            export(run.model, bert=run.bert, corpus=run.corpus, config=config)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    step = int(run.model.optimizer.iterations.numpy())
    summary = {"step": step, "eval": results, "model_dir": config.model_dir}
    _write_text(f"{config.model_dir}/summary.json", json.dumps(summary, indent=2, sort_keys=True))
    return summary


def prepare(config: TrainConfig, strategy: tf.distribute.Strategy | None) -> Run:
    """The configuration's mistakes, found before a model is built: one-line errors. (Only a
    resume point off the log interval waits for the checkpoint: `check_resume_point`.)"""
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(config.seed)
    check_paths(config, strategy)
    corpus = resolve_corpus(config.data)
    bert = resolve_bert_config(config, corpus)
    strategy = strategy or choose_strategy(config.strategy, config.tpu)
    check_paths(config, strategy)  # --strategy auto may have found a TPU
    global_batch, per_replica = batch_sizes(config, strategy)
    eval_batches = validation_batches(config, corpus, global_batch)
    tf.io.gfile.makedirs(config.model_dir)
    print(f"config: {config.to_json()}\nmodel: {bert.to_json()}", flush=True)
    return Run(config, corpus, bert, strategy, global_batch, per_replica, eval_batches)


def build(run: Run) -> int:
    """Model, optimizer and checkpoints in the strategy's scope; restores the latest checkpoint
    (or warm-starts a new run). Returns the optimizer updates already done."""
    config = run.config
    with run.strategy.scope():
        corpus = run.corpus
        run.model = build_pretraining_model(
            run.bert, corpus.seq_len, corpus.max_predictions, corpus.next_sentence
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
        folder = f"{config.model_dir}/checkpoints"
        run.checkpoints = Checkpoints(run.model, optimizer, folder, config.keep_checkpoints)
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


def fit(run: Run, step: int) -> None:
    """model.fit from `step` to train_steps; a Keras epoch is one log interval."""
    config, corpus = run.config, run.corpus
    if step >= config.train_steps:
        return
    start_batch = step * config.grad_accum_steps
    train_data = make_inputs(config, corpus, run.strategy, run.per_replica_batch, start_batch)
    validation = validation_dataset(corpus, run.global_batch, config.seed) if run.eval_batches else None
    log = EpochLog(
        config,
        History(config.model_dir, step),
        run.checkpoints,
        global_batch=run.global_batch,
        seq_len=corpus.seq_len,
        flops_per_example=training_flops_per_example(run.bert, corpus.seq_len, corpus.max_predictions),
        peak_tflops=config.peak_tflops or detect_peak_tflops(),
        devices=run.strategy.num_replicas_in_sync,
    )
    shards = tf.io.gfile.glob(corpus.train_files) + tf.io.gfile.glob(corpus.validation_files)
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


def final_evaluation(run: Run) -> dict:
    """The whole validation split, once: model_dir/eval.json (MLM loss, accuracy, perplexity;
    NSP/SOP accuracy when the corpus has pairs)."""
    config, corpus = run.config, run.corpus
    if not run.eval_batches:
        return {}
    validation = validation_dataset(corpus, run.global_batch, config.seed)
    batches = corpus.validation_records // run.global_batch
    with naming_bad_shards(tf.io.gfile.glob(corpus.validation_files)):
        logs = run.model.evaluate(validation, steps=batches, return_dict=True, verbose=0)
    mlm_loss = _mlm_loss(logs)
    results = {
        "step": int(run.model.optimizer.iterations.numpy()),
        "examples": batches * run.global_batch,
        "mlm_loss": mlm_loss,
        "mlm_accuracy": _pick(logs, "mlm_accuracy", "accuracy"),
        "perplexity": math.exp(min(mlm_loss, 700.0)),
    }
    if corpus.next_sentence:
        results["nsp_accuracy"] = _pick(logs, "nsp_accuracy")
    _write_text(f"{config.model_dir}/eval.json", json.dumps(results, indent=2, sort_keys=True))
    return results


__all__ = ["InputError", "TrainError", "train"]
