"""The run every fine-tuning task shares, written once: read, encode, build, fit, choose the best
epoch, evaluate, write eval.json and the figures, export. A task (classify/, tag/, span/) fills in
one method per step, as datatrove's readers and filters fill in a base that owns the loop.

    class TagTask(Task):
        name, model_file, monitor = "tag", "tagger.keras", "val_entity_f1"
        def read(self, split, path): ...          # its files -> examples and bad-row counts
        def encode(self, found): ...              # examples -> static arrays (.features, .targets)
        def build(self, encoder, fresh): ...      # the head on the encoder (model/tasks/)
        def compile(self, model, optimizer): ...  # the head's own compile (model/tasks/)
        def evaluate(self, model, split): ...     # eval.json's figures for one split
    summary = run(TagTask(config, source))

What every task gets from here alike: the batch check, the strategy, AdamW with layer decay, the
best validation epoch's weights, eval.json (figures on validation at the top level and under
"test", `best_epoch`, `recipe`, `bad_rows` per split), history.jsonl, config.json, the `.keras`
model, the raw-string SavedModel (or, for a vocab with no graph tokeniser, one that takes ids) and
the Hugging Face export, or one line saying why there is none.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import keras
import numpy as np

from common.errors import ConfigError
from launch.backend import has_tensorflow
from launch.checkpoints import layers_of
from launch.finetune.config import FinetuneConfig, FinetuneError
from launch.finetune.pretrained import Pretrained, head_layers, task_optimizer
from launch.serving import id_specs, save_keras, write_saved_model
from launch.strategy import choose_strategy
from model.encoder import TASK_INPUTS, build_encoder
from pipeline.files import write_atomically

SERVING = "serving"  # the raw-string SavedModel's folder
HF_FOLDER = "hf"  # the Hugging Face export's


class Task:
    """One fine-tuning task. Class attributes name it; the methods are its steps (see the module's
    docstring). `self.config` and `self.source` are the run's flags and the encoder's origin."""

    name: str  # --task
    model_file: str  # the .keras file's name
    monitor: str  # the validation figure that picks the best epoch
    rows: str = "examples"  # what a training row is ("windows"), for the batch check's error
    scores: str  # the dense layer that gives the task's scores
    hf: tuple[str, str, str]  # transformers' BERT class, its name for `scores`, ModernBERT's class
    hf_pooler: bool = False  # the BERT class reads the pooler (BertForSequenceClassification)

    def __init__(self, config: FinetuneConfig, source: Pretrained):
        self.config, self.source = config, source

    # --- the steps each task fills in ---

    def read(self, split: str, path: str):
        """The split's examples, with `bad_rows` {reason: count} and a length."""
        raise NotImplementedError

    def encode(self, found: dict) -> dict:
        """{split: encoded}: each with `features` {name: (N, T) int32}, `targets` and a length."""
        raise NotImplementedError

    def build(self, encoder: keras.Model, fresh: list[str]) -> keras.Model:
        """The task model on `encoder`, whose layers in `fresh` were not read from the source."""
        raise NotImplementedError

    def compile(self, model: keras.Model, optimizer) -> None:
        raise NotImplementedError

    def evaluate(self, model: keras.Model, split: str) -> dict:
        """eval.json's figures for `split` (the best epoch's weights are in `model`)."""
        raise NotImplementedError

    def headline(self, figures: dict) -> dict:
        """The figures the command line prints and returns, from one split's."""
        raise NotImplementedError

    def ids_outputs(self, model: keras.Model, inputs: dict) -> dict:
        """What the SavedModel that takes ids returns for a batch of model inputs."""
        raise NotImplementedError

    def raw_endpoints(self, model: keras.Model, text_encoder) -> dict:
        """The raw-string SavedModel's signatures: {name: (function, input specs)}."""
        raise NotImplementedError

    # --- what a task may refine ---

    def faster_layers(self) -> dict[str, float] | None:
        """{layer: factor} that learn faster than the rate (a CRF's transitions)."""
        return None

    def fresh_layers(self, fresh: list[str], model: keras.Model) -> list[str]:
        """What starts from random weights: the encoder's unread layers the model uses (never the
        pooler, which only a [CLS] classifier reads) and the head's layers."""
        return [layer for layer in fresh if layer != "pooler"] + head_layers(model)

    def recipe(self) -> dict:
        """The task's own entries of eval.json's recipe."""
        return {}

    def validation(self, model: keras.Model) -> dict:
        """Keras `fit` arguments that put `self.monitor` into the logs after each epoch:
        `callbacks` before the best-epoch one, or `validation_data`."""
        raise NotImplementedError

    def describe(self, steps: int, recipe: dict) -> str:
        """The line that opens the run."""
        raise NotImplementedError

    def write_extras(self, out: str, results: dict) -> None:
        """Files beside eval.json (errors.jsonl, confusion.png); may take entries out of `results`."""

    def hf_config(self) -> dict:
        """Entries for the Hugging Face config.json (the label names)."""
        return {}

    def hf_refusal(self, model: keras.Model) -> str | None:
        """Why the model has no transformers form, or None."""
        return None

    def run_config(self) -> dict:
        """Entries for config.json beside the flags (the label set)."""
        return {}

    def restore(self, run: dict, results: dict) -> None:
        """What `read` and `build` found (the labels, the pooling), from a finished run's
        config.json and eval.json: enough to serve its model again (`launch/finetune/serve.py`)."""


def run(task: Task) -> dict:
    """Trains, evaluates and writes everything for `task`; returns the headline figures."""
    config, source = task.config, task.source
    started = time.time()
    paths = {"train": config.train, "validation": config.validation, "test": config.test}
    task.found = {split: task.read(split, path) for split, path in paths.items() if path}
    for split in ("validation", "test"):
        if split in task.found and len(task.found[split]) == 0:
            raise FinetuneError(f"--{split} {paths[split]}: no usable rows ({task.found[split].bad_rows})")
    task.data = task.encode(task.found)
    steps = steps_per_epoch(config, len(task.data["train"]), task.rows)
    strategy = task_strategy(config)
    with strategy.scope():
        encoder = build_encoder(source.bert, config.seq_len)
        fresh = layers_of([w.path for w in encoder.weights]) if config.from_scratch else source.load(encoder)
        model = task.build(encoder, fresh)
        optimizer, learning_rate, decay = task_optimizer(
            config, source, model, steps * config.epochs, task.faster_layers()
        )
        task.compile(model, optimizer)
    recipe = {
        "task": task.name,
        "objective": None if config.from_scratch else source.objective,
        "learning_rate": learning_rate,
        "layer_decay": decay,
        "fresh": task.fresh_layers(fresh, model),
        **task.recipe(),
    }
    train = task.data["train"]
    train_ds = training_batches(train.features, train.targets, config)
    validation = task.validation(model)
    best = best_epoch(task.monitor, config.patience or config.epochs)
    print(task.describe(steps, recipe), flush=True)
    history = model.fit(
        train_ds,
        epochs=config.epochs,
        validation_data=validation.get("validation_data"),
        callbacks=[*validation.get("callbacks", []), best],
        shuffle=False,
        verbose=2,
    )

    results = {}
    for split in ("validation", "test"):
        if split in task.data:
            figures = task.evaluate(model, split)
            if split == "validation":
                results.update(figures)
            else:
                results["test"] = figures
    results["best_epoch"] = int(best.best_epoch) + 1
    results["epochs_run"] = len(history.history["loss"])
    results["recipe"] = recipe
    results["bad_rows"] = {split: found.bad_rows for split, found in task.found.items()}
    out = config.output_dir
    task.write_extras(out, results)
    write_run_files(config, source, out, history, results, task.run_config())
    if config.export:
        plain = save_keras(model, f"{out}/{task.model_file}")
        save_serving(task, plain, f"{out}/{SERVING}")
        save_hf(task, plain, f"{out}/{HF_FOLDER}")
    return {
        "output": out,
        **task.headline(results.get("test", results)),
        "split": "test" if "test" in results else "validation",
        "best_epoch": results["best_epoch"],
        "seconds": round(time.time() - started, 1),
    }


def label_config(labels: list[str]) -> dict:
    """transformers' config entries for a task's label names, in id order."""
    return {"id2label": dict(enumerate(labels)), "label2id": {k: i for i, k in enumerate(labels)}}


# === The loop's parts ===


def steps_per_epoch(config: FinetuneConfig, rows: int, what: str) -> int:
    """Full batches per epoch; a one-line error when the training rows fill none."""
    steps = rows // config.global_batch_size
    if steps == 0:
        raise FinetuneError(
            f"--train {config.train}: {rows} {what}, fewer than one batch of {config.global_batch_size}"
        )
    return steps


def task_strategy(config: FinetuneConfig):
    """The seed set, then the strategy of --strategy; the global batch must split evenly over it."""
    keras.utils.set_random_seed(config.seed)
    strategy = choose_strategy(config.strategy, config.tpu)
    replicas = strategy.num_replicas_in_sync
    if config.global_batch_size % replicas:
        raise ConfigError(
            f"--global_batch_size {config.global_batch_size}: not divisible by the {replicas} replicas"
        )
    return strategy


def training_batches(features, targets, config: FinetuneConfig):
    """Every row once per epoch, reshuffled each epoch from --seed, in full batches: tf.data's
    shuffle, or without TensorFlow numpy's (another order from the same seed)."""
    if not has_tensorflow():
        return ArrayBatches((features, targets), config.global_batch_size, seed=config.seed)
    import tensorflow as tf

    rows = len(next(iter(features.values())))
    return (
        tf.data.Dataset.from_tensor_slices((features, targets))
        .shuffle(rows, seed=config.seed, reshuffle_each_iteration=True)
        .batch(config.global_batch_size, drop_remainder=True)  # static shapes: every step the same (B, T)
        .prefetch(tf.data.AUTOTUNE)
    )


def filled(n: int, batch: int) -> np.ndarray:
    """Row indices that cover `n` rows in full batches: each row once, in order, then copies of
    row 0 to fill the last batch (static shapes: every call the same (B, T)); the caller drops or
    weights out the copies."""
    return np.concatenate([np.arange(n), np.zeros(-n % batch, np.int64)])


def full_batches(features: dict[str, np.ndarray], batch: int, targets: np.ndarray | None = None):
    """`features` in order, in full batches (`filled`); with `targets`, (features, targets,
    weights): the weights count each row once and the filling copies not at all."""
    n = len(next(iter(features.values())))
    take = filled(n, batch)
    x = {name: value[take] for name, value in features.items()}
    items = x if targets is None else (x, targets[take], (np.arange(len(take)) < n).astype(np.float32))
    if not has_tensorflow():
        return ArrayBatches(items, batch)
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(items).batch(batch, drop_remainder=True)


class ArrayBatches(keras.utils.PyDataset):
    """Full batches of numpy arrays (any structure: features, targets, weights), for a machine
    without TensorFlow: in order, or with `seed` reshuffled every epoch (numpy's generator, seeded
    by the seed and the epoch); the last partial batch dropped (static shapes)."""

    def __init__(self, items, batch: int, seed: int | None = None):
        super().__init__()
        self.items, self.batch, self.seed = items, batch, seed
        self.rows = len(keras.tree.flatten(items)[0])
        self.epoch, self.order = -1, None
        self.on_epoch_end()

    def __len__(self) -> int:
        return self.rows // self.batch

    def __getitem__(self, index: int):
        rows = self.order[index * self.batch : (index + 1) * self.batch]
        return keras.tree.map_structure(lambda array: array[rows], self.items)

    def on_epoch_end(self) -> None:
        self.epoch += 1
        rng = None if self.seed is None else np.random.default_rng([self.seed, self.epoch])
        self.order = np.arange(self.rows) if rng is None else rng.permutation(self.rows)


def best_epoch(monitor: str, patience: int) -> keras.callbacks.EarlyStopping:
    """Keeps the weights of the epoch with the highest `monitor` (validation), restored at the end;
    stops once `patience` epochs have not improved on it."""
    return keras.callbacks.EarlyStopping(
        monitor=monitor, mode="max", patience=patience, restore_best_weights=True
    )


def write_run_files(config: FinetuneConfig, source, out: str, history, results: dict, extra: dict) -> None:
    """eval.json, history.jsonl (a row per epoch) and config.json (the flags, where the encoder
    and its vocab came from, plus `extra`)."""
    write_atomically(f"{out}/eval.json", json.dumps(results, indent=2, sort_keys=True))
    rows = [
        {"epoch": e + 1, **{k: float(v[e]) for k, v in history.history.items()}}
        for e in range(len(history.history["loss"]))
    ]
    write_atomically(f"{out}/history.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    vocab = {"kind": source.vocab_file.kind, "lower_case": source.vocab_file.lower_case}
    run = {"config": dataclasses.asdict(config), "encoder": source.weights, "vocab": vocab, **extra}
    write_atomically(f"{out}/config.json", json.dumps(run, indent=2, sort_keys=True))


# === Exports ===


def save_serving(task: Task, model: keras.Model, path: str) -> None:
    """The task's SavedModel: raw strings in (`task.raw_endpoints`). A tokenizer.json vocab has no
    graph tokeniser (text_encoder.py): its "serving_default" takes input_ids, input_mask and
    segment_ids instead (`task.ids_outputs`), which `tokenizers` with the vocab beside it gives."""
    if keras.backend.backend() != "tensorflow":
        serve_under_tensorflow(path)
        return
    from launch.finetune.text_encoder import TextEncoder

    text_encoder = TextEncoder(task.source.vocab_file, task.config.seq_len)
    if text_encoder.graph_tokenizer:
        write_saved_model(path, [model, text_encoder], task.raw_endpoints(model, text_encoder))
        return

    def serve(*ids):
        return task.ids_outputs(model, dict(zip(TASK_INPUTS, ids, strict=True)))

    write_saved_model(path, [model], {"serving_default": (serve, id_specs(task.config.seq_len))})
    print(f"note: {path} takes input_ids, input_mask, segment_ids: tensorflow-text has no byte-level "
          "BPE to run a tokenizer.json inside it", file=sys.stderr)  # fmt: skip


def serve_under_tensorflow(path: str) -> None:
    """On another backend, the SavedModel is written by a TensorFlow process from the run's files
    (`launch/finetune/serve.py`); where TensorFlow is not installed, one line says so."""
    import os
    import subprocess

    from launch.backend import has_tensorflow

    out = path.rsplit("/", 1)[0]
    if not has_tensorflow():
        print(f"note: no {path}: the raw-string SavedModel needs TensorFlow, not installed here; the .keras "
              f"model and hf/ are written (python -m launch.finetune.serve {out} writes it where TensorFlow "
              "is)", file=sys.stderr, flush=True)  # fmt: skip
        return
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run([sys.executable, "-m", "launch.finetune.serve", out], env=env, capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        raise FinetuneError(f"writing {path} under TensorFlow failed: {lines[-1]}")


def save_hf(task: Task, model: keras.Model, folder: str) -> None:
    """The model as transformers' class for the task (`task.hf`), the vocab beside it; where it
    has no such form, one line says why and the .keras file is the export."""
    from launch.interop.google import GoogleCheckpointError
    from launch.interop.hf_bert import save_hf_task
    from launch.interop.hf_folder import HFCheckpointError
    from launch.interop.hf_modernbert import save_hf_modernbert_task

    bert, vocab_file = task.source.bert, task.source.vocab_file
    bert_class, hf_head, modern_class = task.hf
    try:
        refusal = task.hf_refusal(model)
        if refusal:
            raise HFCheckpointError(refusal)
        if bert.modern:
            save_hf_modernbert_task(model, bert, vocab_file, folder, scores=task.scores,
                                    architecture=modern_class, config=task.hf_config())  # fmt: skip
        else:
            save_hf_task(model, bert, vocab_file, folder, head=task.scores, architecture=bert_class,
                         hf_head=hf_head, config=task.hf_config(), pooler=task.hf_pooler)  # fmt: skip
    except (HFCheckpointError, GoogleCheckpointError) as e:
        print(f"note: no Hugging Face export: {e}; {task.model_file} holds the model", flush=True)
