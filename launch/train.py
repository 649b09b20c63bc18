"""Pretraining, as named steps that `train(config)` runs in order:

    prepare: the corpora (one, a mixture, one per phase), the model's shape, the strategy, batch
             sizes (every mistake in the configuration is a one-line error here, before a model
             exists)
    build:   model, optimizer and checkpoints of a phase in the strategy's scope; resume or warm
             start
    fit:     model.fit from the restored step to the phase's end; an epoch is one log interval
    finish:  evaluation over the whole validation split (eval.json), loss.png, export/

Phases (`--phases 128:0.9,512:0.1`): each builds the static-shape model for its length and
restores the previous phase's checkpoint, written at its last step, into it: weights, optimizer
slots and step counter carry over (a checkpoint's keys are the variables' paths, the same at
every length), and the learning-rate schedule spans the run.

What each step uses lives beside it: `prepare.py` (the first step), `data.py` (--data, mixtures,
phases), `checkpoints.py` (resume), `interop/` (warm start), `inputs.py` (the streams), `logs.py`
(TensorBoard, history), `run_dir.py` (the files of model_dir), `export.py`.

Resume: every checkpoint holds the model's variables (dropout RNG states included) and the
optimizer's (slots, step counter, so also the schedule's position). The input position is the
step counter: a resumed run rebuilds the same deterministic stream of its phase, started at the
batch it reached (`make_dataset(skip_batches=...)` seeks there by arithmetic, no replay). Keras's
`fit` makes its own iterator from the dataset it is given, and under a distribution strategy draws
one batch from a throwaway iterator to build the model, so a saved tf.data iterator could not be
handed to it; a seekable stream is what keeps the data position exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys

import keras
import numpy as np

from launch import backend
from launch.checkpoints import Checkpoints, layers_of, out_of_space_is_one_line
from launch.config import TrainConfig
from launch.export import export
from launch.interop.formats import config_beside, read_bert_config, warm_start
from launch.interop.grow import grow_into
from launch.logs import EpochLog, History, figures, plot_loss, read_history
from launch.mfu import detect_peak_tflops
from launch.optimizer import build_optimizer
from launch.prepare import Run, Stage, TrainError, prepare
from launch.run_dir import BERT_CONFIG, CONFIG, EVAL, LOSS_PLOT, SUMMARY, WARM_START
from launch.run_model import model_io, pretraining_model
from launch.strategy import JaxStrategy
from launch.streams import train_inputs, validation_dataset
from pipeline import files
from pipeline.reader.shards import naming_bad_shards
from pipeline.schema import Manifest

POLICIES = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def train(config: TrainConfig, strategy=None) -> dict:
    """Runs (or resumes, or finishes) the pretraining `config` describes, on the Keras backend
    this process runs (TensorFlow or JAX, `launch/backend.py`); returns the summary that is also
    written to model_dir/summary.json. `strategy`: a `tf.distribute.Strategy` or `JaxStrategy`
    (default: --strategy's)."""
    run = prepare(config, strategy)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(POLICIES[config.mixed_precision])
    try:
        stage = run.stage_at(Checkpoints.latest_step(run.run_dir.checkpoints))
        step = build(run, stage)
        check_resume_point(config, step)
        run.write_dir.write(CONFIG, config.to_json(run.resolved))
        run.write_dir.write(BERT_CONFIG, run.bert.to_json())
        print(f"{'resuming at' if step else 'starting at'} step {step} of {config.train_steps}", flush=True)
        with lost_worker_is_one_line(run):
            while True:
                fit(run, stage, step)
                step = updates(run)
                if stage is run.stages[-1]:
                    break
                length, stage = stage.manifest.seq_len, run.stage_at(step)
                if stage.manifest.seq_len != length:  # (a head warm-up's end says so itself)
                    print(f"phase at seq_len {stage.manifest.seq_len} from step {step}", flush=True)
                build(run, stage)  # restores the checkpoint written at the previous phase's end
            results = finish(run, stage)
        summary = {
            "step": updates(run),
            "eval": results,
            "model_dir": config.model_dir,
        }
        run.write_dir.write_json(SUMMARY, summary)
    finally:
        keras.config.set_dtype_policy(previous_policy)
        if not run.chief:
            files.remove_tree(run.write_dir.path)
    return summary


def updates(run: Run) -> int:
    """The optimizer updates done so far."""
    return int(backend.to_numpy(run.model.optimizer.iterations))


@contextlib.contextmanager
def lost_worker_is_one_line(run: Run):
    """A multi-worker run whose peer died: TF's coordination service stops the others with an
    error listing the tasks that stopped sending heartbeats (or a collective that was aborted).
    Turned into one line naming the lost worker and its address, and how to resume."""
    if isinstance(run.strategy, JaxStrategy):  # jax.distributed reports a lost process itself
        yield
        return
    import tensorflow as tf

    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError) as e:
        if not isinstance(run.strategy, tf.distribute.MultiWorkerMirroredStrategy):
            raise
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}).get("worker", [])
        tasks = sorted({int(t) for t in re.findall(r"/job:worker/replica:\d+/task:(\d+)", e.message or "")})
        me = run.strategy.cluster_resolver.task_id
        lost = [t for t in tasks if t != me] or tasks
        named = ", ".join(f"worker {t} ({cluster[t]})" if t < len(cluster) else f"worker {t}" for t in lost)
        cause = (
            f"{named} stopped" if named else f"a worker stopped ({(e.message or '').splitlines()[0][:200]})"
        )
        step = Checkpoints.latest_step(run.run_dir.checkpoints)
        raise TrainError(
            f"--strategy multi_worker: {cause}, and the job cannot go on without it; start every "
            f"worker again with the same command to resume from the last checkpoint (step {step})"
        ) from None


# === build ===


def build(run: Run, stage: Stage | None = None) -> int:
    """Model, optimizer and checkpoints for `stage` (default: the first phase) in the strategy's
    scope; restores the latest checkpoint (or warm-starts a new run). Returns the optimizer
    updates already done."""
    config = run.config
    stage = stage or run.stages[0]
    manifest = stage.manifest
    objective = config.pretraining_objective
    with run.strategy.scope():
        run.model = pretraining_model(objective, run.bert, manifest, seed=config.seed)
        # The warm-up's freezing on JAX and its row mask (--warmup_embeddings): LayerwiseAdamW's
        in_optimizer = backend.is_jax() or config.warmup_embeddings
        freezes_in_optimizer = bool(config.head_warmup_steps) and in_optimizer
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
            warmup_start=stage.phase.start if config.restart_warmup else 0,
            # the layers are known after the warm start (below): `learn_fresh_faster`
            lr_multipliers={} if config.fresh_lr_multiplier != 1.0 or freezes_in_optimizer else None,
            # the same checkpoint keys as AdamW's where it only stands in for it (`freeze`)
            variables_name="adam_w" if freezes_in_optimizer and config.fresh_lr_multiplier == 1.0 else None,
        )
        optimizer.build(run.model.trainable_variables)  # slots exist before a restore fills them
        objective.compile(
            run.model,
            optimizer,
            jit_compile=config.jit_compile,
            steps_per_execution=config.steps_per_execution,
        )
        run.checkpoints = Checkpoints(
            run.model,
            optimizer,
            run.write_dir.checkpoints,
            config.keep_checkpoints,
            restore_from=run.run_dir.checkpoints,
        )
        step = run.checkpoints.restore()
        if step == 0 and config.init_checkpoint:
            fresh = start_from_release(run, stage)
            run.write_dir.write_json(WARM_START, {"source": config.init_checkpoint, "fresh": fresh})
        if config.fresh_lr_multiplier != 1.0:
            learn_fresh_faster(run, stage, optimizer)
        if config.head_warmup_steps:
            train_fresh_only(run, stage)
    run.write_dir.keep_corpus(manifest)  # export and fine-tuning read the vocab from the run
    return step


def start_from_release(run: Run, stage: Stage) -> list[str]:
    """--init_checkpoint's weights into the new run's model (`warm_start`); returns the paths of
    the weights it had none for. Where the model has more token rows than the release (a vocab
    extended from the release's, or padded to --vocab_multiple), the release goes into a model of
    its own rows first, then every weight is copied over, the token rows grown (`interop/grow.py`):
    an added token's row the mean of its pieces', a padded row zeros (never read)."""
    config, manifest = run.config, stage.manifest
    added = manifest.vocab.release.get("added") or []
    rows = release_rows(run, stage)
    if not added and rows == run.bert.vocab_size:
        return warm_start(run.model, config.init_checkpoint)
    source = run.model
    if rows != run.bert.vocab_size:  # a model at the release's own rows
        at_release = dataclasses.replace(run.bert, vocab_size=rows, tokenizer_size=None)
        source = pretraining_model(config.pretraining_objective, at_release, manifest, seed=config.seed)
    fresh = warm_start(source, config.init_checkpoint)
    unk = manifest.vocab.special_ids["unk"]
    grown = grow_into(run.model, source, added, config.extension_init, unk, config.seed)
    if added:
        unknown = sum(a["pieces"] == [unk] for a in added)
        print(f"vocab extension: {len(added) - unknown} new tokens' rows in {', '.join(grown)} start as the "
              f"mean of their pieces' rows in the release; {unknown} it knows only as [UNK] start as "
              f"{UNKNOWN_STARTS[config.extension_init]}", flush=True)  # fmt: skip
    return fresh


UNKNOWN_STARTS = {  # --extension_init, as the log says it
    "pieces": "its [UNK] row",
    "mean": "the mean of its rows",
    "random": "random rows at its rows' mean norm",
}


def release_rows(run: Run, stage: Stage) -> int:
    """The token rows --init_checkpoint holds: an extended vocab's base size; else those of the
    config beside it, or of --bert_config; else the corpus vocab's size (a bare checkpoint)."""
    release = stage.manifest.vocab.release
    if release.get("added"):
        return release["base_size"]
    shape = config_beside(run.config.init_checkpoint) or run.config.bert_config
    return read_bert_config(shape).vocab_size if shape else run.bert.tokens


def fresh_weights(run: Run) -> set[str]:
    """The paths of the weights the warm start had none for: this process's own record (a fresh
    run's, on any worker), else the chief's (a resumed run)."""
    record = run.write_dir if run.write_dir.exists(WARM_START) else run.run_dir
    return set(json.loads(record.read(WARM_START))["fresh"])


def warmed_up(run: Run, stage: Stage) -> set[str]:
    """The paths of the weights that train in `stage`'s head warm-up: those that started fresh,
    and with --warmup_embeddings the token embeddings (ELECTRA's generator's too); none outside it."""
    if not stage.phase.head_only:
        return set()
    embeddings = set()
    if run.config.warmup_embeddings:
        embeddings = {v.path for v in token_embeddings(run.model.trainable_variables)}
    return fresh_weights(run) | embeddings


def token_embeddings(variables) -> list:
    """The token embedding matrices among `variables` (ELECTRA's generator's too)."""
    return [v for v in variables if v.path.split("/")[0].endswith("token_embedding")]


def learn_fresh_faster(run: Run, stage: Stage, optimizer) -> None:
    """--fresh_lr_multiplier: the layers that started fresh learn at that multiple of the rate for
    the whole run, in the head warm-up and after it; with --warmup_embeddings the token embeddings
    too, in the warm-up only (a release's own rows then go on at its rate)."""
    layers = layers_of(sorted(fresh_weights(run) | warmed_up(run, stage)))
    factor = run.config.fresh_lr_multiplier
    getattr(optimizer, "inner_optimizer", optimizer).set_lr_multipliers(dict.fromkeys(layers, factor))
    if layers:
        print(f"{', '.join(layers)} (fresh) learn at {factor:g} x the rate", flush=True)


def train_fresh_only(run: Run, stage: Stage) -> None:
    """--head_warmup_steps: in the head-only phase, every weight the warm start filled is frozen,
    but the token embeddings with --warmup_embeddings (`warmed_up`; the optimizer was built with
    all of them, so its slots and checkpoints are the same in both phases); the count that trains
    is logged in each phase."""
    trainable = run.model.trainable_variables
    total = sum(int(np.prod(v.shape)) for v in trainable)
    phase = stage.phase
    if not phase.head_only:
        print(f"steps {phase.start}-{phase.end}: all {len(trainable)} weights train ({total:,} parameters)",
              flush=True)  # fmt: skip
        return
    fresh = warmed_up(run, stage)
    training = [v for v in trainable if v.path in fresh]
    if not training:
        source = run.config.init_checkpoint
        print(f"head warm-up: {source} had every weight, none is fresh; all train from step 0", flush=True)
        return
    if backend.is_jax():
        optimizer = run.model.optimizer
        frozen = [v.path for v in trainable if v.path not in fresh]
        getattr(optimizer, "inner_optimizer", optimizer).freeze(frozen)
    else:
        for variable in trainable:
            variable.trainable = variable.path in fresh
    if run.config.warmup_embeddings and (rows := added_rows(run, stage)) is not None:
        getattr(run.model.optimizer, "inner_optimizer", run.model.optimizer).train_rows(
            {v.path: rows for v in token_embeddings(training)}
        )
        added = int(rows.sum())
        print(f"head warm-up: of the token embeddings, only the {added:,} rows of the tokens the vocab "
              f"extension added learn; the other {len(rows) - added:,} stay as they are",
              flush=True)  # fmt: skip
    kept = sum(int(np.prod(v.shape)) for v in training)
    print(f"head warm-up, steps {phase.start}-{phase.end}: {len(training)} of {len(trainable)} weights train "
          f"({kept:,} of {total:,} parameters), those that started fresh"
          f"{' and the token embeddings' if run.config.warmup_embeddings else ''}: "
          f"{', '.join(layers_of([v.path for v in training]))}", flush=True)  # fmt: skip


def added_rows(run: Run, stage: Stage) -> np.ndarray | None:
    """1 for each token row a vocab extension added (`manifest.vocab.release["added"]`), 0 for
    the release's own rows and any padding; None without an extension (every row is the run's own
    or the release's as it is, and --warmup_embeddings trains them all)."""
    added = (stage.manifest.vocab.release or {}).get("added")
    if not added:
        return None
    rows = np.zeros(run.bert.vocab_size, "float32")
    rows[[a["id"] for a in added]] = 1.0
    return rows


def check_resume_point(config: TrainConfig, step: int) -> None:
    """Keras resumes at an epoch start, so the restored step must be on this run's log interval."""
    if step < config.train_steps and step % config.steps_per_epoch:
        raise TrainError(
            f"--model_dir {config.model_dir}: its checkpoint at step {step} falls inside this run's "
            f"{config.steps_per_epoch}-step log interval; resume with the --log_every, --checkpoint_every "
            "and --eval_every it was started with (model_dir/config.json)"
        )


# === fit ===


def bad_shards_named(paths: list[str]):
    """tf.data reports a corrupt shard by offset only: name it. (The numpy reader a JAX run reads
    with names it itself.)"""
    return contextlib.nullcontext() if backend.is_jax() else naming_bad_shards(paths)


def fit(run: Run, stage: Stage, step: int) -> None:
    """model.fit from `step` to the end of `stage`'s phase; a Keras epoch is one log interval."""
    config, manifest, phase = run.config, stage.manifest, stage.phase
    if step >= phase.end:
        return
    accum = config.grad_accum_steps
    io = model_io(run.model)
    train_data = train_inputs(
        config,
        stage.corpora,
        run.strategy,
        stage.per_replica_batch,
        (step - phase.first_streamed) * accum,
        first_batch_of_phase=phase.first_streamed * accum,
        batches_in_phase=(phase.end - phase.first_streamed) * accum,
        model_io=io,
    )
    evaluating = any(stage.eval_batches)
    validation = None
    if evaluating:
        validation = validation_dataset(
            list(stage.corpora.manifests), stage.global_batch, config.seed, list(stage.eval_batches), **io
        )
    per_source = {}
    if evaluating and stage.corpora.mixture:  # curves per corpus beside the mixture's
        for name, m, batches in zip(
            stage.corpora.names, stage.corpora.manifests, stage.eval_batches, strict=True
        ):
            per_source[name] = (
                validation_dataset([m], stage.global_batch, config.seed, [batches], **io),
                batches,
            )
    log = EpochLog(
        config,
        History(run.write_dir, step),
        run.checkpoints,
        global_batch=stage.global_batch,
        seq_len=manifest.seq_len,
        flops_per_example=config.pretraining_objective.training_flops_per_example(
            run.bert, manifest.seq_len, manifest.max_predictions
        ),
        peak_tflops=config.peak_tflops or detect_peak_tflops(),
        devices=run.strategy.num_replicas_in_sync,
        phase_end=phase.end,
        sources=per_source,
    )
    shards = [f for m in stage.corpora.manifests for f in m.files("train") + m.files("validation")]
    with bad_shards_named(shards), out_of_space_is_one_line(config.model_dir):
        run.model.fit(
            train_data,
            initial_epoch=step // config.steps_per_epoch,
            epochs=phase.end // config.steps_per_epoch,
            steps_per_epoch=config.batches_per_epoch,
            validation_data=validation,
            validation_steps=sum(stage.eval_batches) or None,
            validation_freq=config.eval_every // config.steps_per_epoch,
            callbacks=[log],
            shuffle=False,  # the dataset is already shuffled, by seed
            verbose=1 if sys.stdout.isatty() else 2,  # a line per epoch in logs and pipes
        )


# === finish ===


def finish(run: Run, stage: Stage) -> dict:
    """The final evaluation, the loss plot and, unless --no-export, model_dir/export/."""
    results = final_evaluation(run, stage)
    plot_loss(read_history(run.write_dir), run.write_dir.file(LOSS_PLOT))
    if run.config.export and run.chief:  # a local copy of the weights: no other worker takes part
        export(run.model, bert=run.bert, manifest=stage.manifest, config=run.config)
    return results


def final_evaluation(run: Run, stage: Stage) -> dict:
    """The whole validation split of the last phase's corpora, once: model_dir/eval.json (MLM
    loss, accuracy, perplexity; NSP/SOP accuracy when the model has that head; ELECTRA's
    discriminator figures). A mixture's figures
    are over all its corpora's validation records, and each corpus's under `sources`."""
    corpora = stage.corpora
    if not any(stage.eval_batches):
        return {}
    batches = [m.split("validation").instances // stage.global_batch for m in corpora.manifests]
    results = {
        "step": updates(run),
        **evaluate(run, stage, list(corpora.manifests), batches),
    }
    if corpora.mixture:
        results["sources"] = {
            name: evaluate(run, stage, [m], [n])
            for name, m, n in zip(corpora.names, corpora.manifests, batches, strict=True)
        }
    run.write_dir.write_json(EVAL, results)
    return results


def evaluate(run: Run, stage: Stage, manifests: list[Manifest], batches: list[int]) -> dict:
    """The objective's figures (`logs.figures`: masked-LM loss, accuracy and perplexity; NSP/SOP
    accuracy; ELECTRA's discriminator figures) over `batches[i]` global batches of each corpus's
    validation split."""
    validation = validation_dataset(
        manifests, stage.global_batch, run.config.seed, batches, **model_io(run.model)
    )
    with bad_shards_named([f for m in manifests for f in m.files("validation")]):
        logs = run.model.evaluate(validation, steps=sum(batches), return_dict=True, verbose=0)
    return {"examples": sum(batches) * stage.global_batch, **figures(logs)}
