"""Fine-tune a pretrained encoder on a labelled text task, and measure it: the question everyone who
pretrains asks next ("does it fine-tune well?"), answered with one command.

    python -m launch.finetune --model_dir out/demo/run --train data/rt_reviews/train.jsonl \\
        --validation data/rt_reviews/validation.jsonl --test data/rt_reviews/test.jsonl
    python -m launch.finetune ... --from_scratch          # the same model from random weights
    python -m launch.finetune --init_checkpoint hf:out/hf --output out/ft ...   # no bertbeam run

Data: JSONL, TSV or CSV with a header row (by extension, or --format), fields named by
--text_field / --text_pair_field / --label_field; or, with --tfds_name NAME, --train/--validation/
--test name splits of a prepared tensorflow-datasets dataset. Bad rows are
counted in eval.json and skipped (launch/labelled.py). Text is tokenised with the run's own vocab
and rules (model_dir/corpus/, kept by the run), in the graph (launch/text_encoder.py), statically
padded to --seq_len.

Model: the pretrained encoder (a BERT run's, an ELECTRA run's discriminator, or a Hugging Face or
Google release), a dropout and a dense layer on its pooled [CLS] output or the mean of its tokens
(--pooling); Keras `fit` under the same strategy factory as pretraining, AdamW with linear warmup
and decay and layer-wise learning-rate decay (--layer_decay), XLA. Validation after every epoch;
the best epoch's weights are kept (Keras's EarlyStopping with restore_best_weights). What starts
fresh (the head; a pooler pretraining never trained) is printed and listed in eval.json.

Output in model_dir/finetune/NAME/ (NAME: --name, else the training file's stem, plus "-scratch"
with --from_scratch), or --output:
  eval.json       accuracy, macro_f1, per_class, loss, examples, bad_rows, best_epoch on the
                  validation split, and the same under "test" with --test (the headline figure:
                  validation chose the epoch); recipe: objective, pooling, layer_decay, fresh
  confusion.png   the confusion matrix (test when given, else validation)
  classifier.keras  the classifier, uncompiled (`import model` registers its layers)
  serving/        a SavedModel: signature "serving_default" takes raw strings, `text` (and
                  `text_pair` for pair tasks), and returns label, label_id, probabilities, logits;
                  "tokenize" returns the model inputs. Loading it needs `import tensorflow_text`.
  config.json     the flags, the label set and where the encoder came from; history.jsonl per epoch
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import PurePosixPath
from typing import Literal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402 - after the log level
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from common.cli import Parser, add_arguments, field, run_cli  # noqa: E402
from common.errors import BertbeamError, ConfigError, need  # noqa: E402
from launch.checkpoints import layers_of, read_bert_config, read_weights, warm_start  # noqa: E402
from launch.hf_checkpoint import hf_model_type  # noqa: E402
from launch.labelled import Examples, LabelledFormat, label_names, read_examples  # noqa: E402
from launch.optimizer import build_optimizer, layer_decay_multipliers  # noqa: E402
from launch.run_dir import RunDir  # noqa: E402
from launch.strategy import KINDS, choose_strategy  # noqa: E402
from launch.text_encoder import INPUTS, TextEncoder  # noqa: E402
from model.config import BertConfig  # noqa: E402
from model.encoder import build_encoder
from model.tasks.classifier import build_classifier, default_pooling  # noqa: E402
from pipeline.files import write_atomically  # noqa: E402
from pipeline.vocab import VocabFile, kind_of  # noqa: E402

HF_PREFIX = "hf:"
CLASSIFIER = "classifier.keras"
SERVING = "serving"
# A release's vocab, first found first: BERT's, sentencepiece's, then a tokenizer.json alone
# (ModernBERT's BPE; bertbeam's own exports hold one beside the vocab they were built with).
VOCAB_FILES = ("vocab.txt", "vocab.model", "tokenizer.json")


class FinetuneError(BertbeamError):
    """Fine-tuning cannot start or its data cannot be used; one line saying why."""


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    train: str = field(
        None, "labelled training file (JSONL, TSV, CSV), or a split with --tfds_name", required=True
    )
    validation: str = field(None, "labelled file (or split) that picks the best epoch", required=True)
    test: str | None = field(None, "labelled file (or split) reported as the headline figure")
    model_dir: str | None = field(None, "a launch.pretrain run: its newest checkpoint, vocab and shape")
    checkpoint: str | None = field(None, "with --model_dir: this checkpoint prefix instead of the newest")
    init_checkpoint: str | None = field(
        None, "instead of --model_dir: hf:DIR (Hugging Face) or a google-research/bert folder"
    )
    bert_config: str | None = field(
        None, "with --init_checkpoint: the model's config (default: the folder's)"
    )
    lower_case: Literal["auto", "true", "false"] = field(
        "auto", "with --init_checkpoint and a vocab.txt: lower-case first (auto: tokenizer_config.json, "
        "or 'uncased' in a Google folder's name)"
    )  # fmt: skip
    output: str | None = field(None, "output folder (default: model_dir/finetune/NAME)")
    name: str | None = field(
        None, "the output's name under model_dir/finetune/ (default: the training file's stem)"
    )
    format: Literal["auto", "jsonl", "tsv", "csv"] = field("auto", "labelled files' format (auto: extension)")
    tfds_name: str | None = field(
        None, "--train/--validation/--test are splits of this tensorflow-datasets set"
    )
    text_field: str = field("text", "field or column holding the text")
    text_pair_field: str | None = field(None, "field or column holding the second text of a pair task")
    label_field: str = field("label", "field or column holding the label (string or int)")
    tfds_data_dir: str | None = field(None, "with --tfds_name: where the prepared dataset lives")
    from_scratch: bool = field(False, "the same architecture from random weights (the baseline)")
    pooling: Literal["auto", "cls", "mean"] = field(
        "auto",
        "the head reads the pooled [CLS] output (BERT), or the mean of the real tokens' outputs; auto: "
        "cls when the source trained its pooler (NSP/SOP), else mean (measured: docs/finetune.md)",
    )
    layer_decay: float = field(
        0.8, "layer-wise learning-rate decay: each layer learns at this times the rate of the one above "
        "(the head at --learning_rate, the embeddings slowest; ELECTRA's recipe); 1 = off; never "
        "with --from_scratch",
    )  # fmt: skip
    seq_len: int = field(128, "tokens per example, [CLS] and [SEP] included")
    global_batch_size: int = field(32, "examples per step over all replicas")
    epochs: int = field(3, "passes over the training examples")
    learning_rate: float = field(5e-5, "peak learning rate")
    warmup_fraction: float = field(0.1, "share of the steps spent warming up")
    weight_decay: float = field(0.01, "AdamW's decoupled weight decay (never on LayerNorm or bias)")
    strategy: str = field("auto", f"hardware: {'|'.join(KINDS)}")
    tpu: str | None = field(None, "TPU name or grpc:// address")
    jit_compile: bool = field(True, "compile the train step with XLA (as on a TPU)")
    seed: int = field(0, "initialisation, dropout and example order all derive from it")
    export: bool = field(True, "write classifier.keras and the raw-string SavedModel")

    def __post_init__(self):
        need(
            bool(self.model_dir) != bool(self.init_checkpoint), "pass one of --model_dir or --init_checkpoint"
        )
        need(bool(self.model_dir) or bool(self.output), "--init_checkpoint needs --output DIR")
        need(self.checkpoint is None or bool(self.model_dir), "--checkpoint goes with --model_dir")
        need(self.seq_len >= 8, f"--seq_len: expected >= 8, found {self.seq_len}")
        for name in ("global_batch_size", "epochs"):
            need(getattr(self, name) >= 1, f"--{name}: expected >= 1, found {getattr(self, name)}")
        need(self.learning_rate > 0, f"--learning_rate: expected > 0, found {self.learning_rate}")
        need(0 < self.layer_decay <= 1, f"--layer_decay: expected in (0, 1], found {self.layer_decay}")
        need(
            0 <= self.warmup_fraction < 1, f"--warmup_fraction: expected [0, 1), found {self.warmup_fraction}"
        )
        need(self.strategy in KINDS, f"--strategy {self.strategy}: expected one of {', '.join(KINDS)}")

    @property
    def run_name(self) -> str:
        name = self.name or (
            self.tfds_name.split(":")[0] if self.tfds_name else PurePosixPath(self.train).stem
        )
        name = name.replace("/", "_")
        return f"{name}-scratch" if self.from_scratch and not self.name else name

    @property
    def output_dir(self) -> str:
        if self.output:
            return self.output.rstrip("/")
        return RunDir(self.model_dir).file(f"finetune/{self.run_name}")

    @property
    def labelled_format(self) -> LabelledFormat:
        fmt = "tfds" if self.tfds_name else self.format
        return LabelledFormat(
            self.text_field, self.text_pair_field, self.label_field, fmt, self.tfds_data_dir
        )

    def source(self, split: str) -> str:
        """What read_examples reads for --train/--validation/--test: the file, or NAME:SPLIT."""
        return f"{self.tfds_name}:{split}" if self.tfds_name else split


# === Where the encoder comes from ===


@dataclasses.dataclass(frozen=True)
class Pretrained:
    bert: BertConfig
    vocab_file: VocabFile
    weights: str  # a bertbeam checkpoint prefix, hf:DIR, or a Google checkpoint
    objective: str = "mlm"  # what trained it (a bertbeam run's --objective; hf: the model type)

    def load(self, encoder: keras.Model) -> list[str]:
        """The source's weights into `encoder` (`build_encoder`'s); returns the layers it has no
        weights for, which keep their fresh values (a pooler a run without NSP never trained)."""
        if self.weights.startswith(HF_PREFIX) or not tf.io.gfile.exists(f"{self.weights}.index"):
            return warm_start(encoder, self.weights)
        return layers_of(read_weights(encoder, self.weights, partial=True))


def pretrained(config: FinetuneConfig) -> Pretrained:
    if config.model_dir:
        run = RunDir(config.model_dir)
        manifest = run.read_corpus()  # the run's own copy: a moved corpus folder does not matter
        path = config.checkpoint or run.latest_checkpoint()
        objective = run.read_config().objective
        return Pretrained(run.read_bert_config(), VocabFile.of_corpus(manifest), path, objective)
    source = config.init_checkpoint.rstrip("/")
    hf = source.startswith(HF_PREFIX)
    folder = source.removeprefix(HF_PREFIX)
    bert_config = config.bert_config or f"{folder}/{'config.json' if hf else 'bert_config.json'}"
    if not tf.io.gfile.exists(bert_config):
        raise FinetuneError(f"--init_checkpoint {source}: no {bert_config}; pass --bert_config FILE")
    vocab_path = next((f"{folder}/{n}" for n in VOCAB_FILES if tf.io.gfile.exists(f"{folder}/{n}")), None)
    if vocab_path is None:
        raise FinetuneError(f"--init_checkpoint {source}: no {', '.join(VOCAB_FILES)} in {folder}")
    with tf.io.gfile.GFile(vocab_path, "rb") as f:
        data = f.read()
    kind = kind_of(vocab_path)
    lower = _lower_case(config.lower_case, folder, hf) if kind == "wordpiece" else False
    objective = "electra" if hf and hf_model_type(folder) == "electra" else "mlm"
    return Pretrained(read_bert_config(bert_config), VocabFile(kind, data, lower), source, objective)


def _lower_case(flag: str, folder: str, hf: bool) -> bool:
    if flag != "auto":
        return flag == "true"
    if hf and tf.io.gfile.exists(f"{folder}/tokenizer_config.json"):
        with tf.io.gfile.GFile(f"{folder}/tokenizer_config.json") as f:
            return bool(json.load(f).get("do_lower_case", False))
    return "uncased" in PurePosixPath(folder).name


# === Model ===


def build_model(config: FinetuneConfig, source: Pretrained, num_labels: int, total_steps: int):
    """The classifier on `source`'s encoder (random weights with --from_scratch), compiled, and
    the recipe it resolved: the pretraining objective, pooling (--pooling auto:
    `default_pooling`), layer decay (off from scratch: there is nothing to keep), and the layers
    that start fresh (the head always; the pooler when it is read and was never trained)."""
    encoder = build_encoder(source.bert, config.seq_len)
    fresh = layers_of([w.path for w in encoder.weights]) if config.from_scratch else source.load(encoder)
    pooling = (
        default_pooling("pooler" not in fresh, source.bert) if config.pooling == "auto" else config.pooling
    )
    classifier = build_classifier(encoder, num_labels, source.bert.dropout, config.seed, pooling)
    decay = 1.0 if config.from_scratch else config.layer_decay
    multipliers = None
    if decay != 1.0:
        layers = layers_of([w.path for w in classifier.trainable_weights])
        multipliers = layer_decay_multipliers(layers, source.bert.num_layers, decay)
    optimizer = build_optimizer(
        "adamw",
        learning_rate=config.learning_rate,
        warmup_steps=int(total_steps * config.warmup_fraction),
        total_steps=total_steps,
        weight_decay=config.weight_decay,
        lr_multipliers=multipliers,
    )
    classifier.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=config.jit_compile,
    )
    used = [layer for layer in fresh if layer != "pooler" or pooling == "cls"]
    recipe = {
        "objective": None if config.from_scratch else source.objective,
        "pooling": pooling,
        "layer_decay": decay,
        "fresh": used + ["classifier"],
    }
    return classifier, recipe


# === Data ===


def encode(text_encoder: TextEncoder, examples: Examples, chunk: int = 1024) -> dict[str, np.ndarray]:
    """The model inputs of every example, (N, seq_len) int32 each, by the graph's own tokeniser."""
    parts = []
    for start in range(0, len(examples), chunk):
        texts = tf.constant(examples.texts[start : start + chunk])
        pairs = None if examples.pairs is None else tf.constant(examples.pairs[start : start + chunk])
        parts.append({k: v.numpy() for k, v in text_encoder(texts, pairs).items()})
    return {name: np.concatenate([p[name] for p in parts]) for name in INPUTS}


def padded(features: dict[str, np.ndarray], label_ids: np.ndarray, batch: int) -> tf.data.Dataset:
    """Every example once, in order, in full batches: the last one is filled with weight-0 copies
    of the first example (static shapes; padding counts in no metric)."""
    n = len(label_ids)
    extra = -n % batch
    take = np.concatenate([np.arange(n), np.zeros(extra, np.int64)])
    x = {name: value[take] for name, value in features.items()}
    weights = np.concatenate([np.ones(n, np.float32), np.zeros(extra, np.float32)])
    return tf.data.Dataset.from_tensor_slices((x, label_ids[take], weights)).batch(batch, drop_remainder=True)


# === Figures ===


def figures(label_ids: np.ndarray, logits: np.ndarray, names: list[str], bad_rows: dict) -> dict:
    """accuracy, macro_f1, per_class {label: precision, recall, f1, support}, loss (mean
    cross-entropy), examples, bad_rows; and the confusion matrix (rows: true, columns: predicted)."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    predicted = logits.argmax(axis=1)
    k = len(names)
    confusion = np.zeros((k, k), np.int64)
    np.add.at(confusion, (label_ids, predicted), 1)
    per_class = {}
    for i, name in enumerate(names):
        tp = confusion[i, i]
        precision = tp / confusion[:, i].sum() if confusion[:, i].sum() else 0.0
        recall = tp / confusion[i].sum() if confusion[i].sum() else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {
            "precision": float(precision),
            "recall": float(recall),
            "f1": float(f1),
            "support": int(confusion[i].sum()),
        }
    return {
        "accuracy": float((predicted == label_ids).mean()),
        "macro_f1": float(np.mean([c["f1"] for c in per_class.values()])),
        "per_class": per_class,
        "loss": float(-log_probs[np.arange(len(label_ids)), label_ids].mean()),
        "examples": int(len(label_ids)),
        "bad_rows": bad_rows,
        "confusion": confusion.tolist(),
    }


def plot_confusion(confusion: list[list[int]], names: list[str], title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix = np.asarray(confusion)
    size = max(3.5, 0.6 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    for (i, j), count in np.ndenumerate(matrix):
        color = "white" if count > matrix.max() / 2 else "black"
        ax.text(j, i, str(count), ha="center", va="center", color=color)
    fig.tight_layout()
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    with tf.io.gfile.GFile(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


# === Export ===


def save_serving(
    classifier: keras.Model, text_encoder: TextEncoder, names: list[str], pairs: bool, path: str
):
    """A SavedModel whose serving signature takes raw strings: the tokeniser runs inside it. A
    tokenizer.json vocab has no graph tokeniser (launch/text_encoder.py): its signature takes the
    model inputs instead, which `tokenizers` with the vocab beside it gives."""
    label_names_tensor = tf.constant(names)

    def predict(inputs):
        logits = tf.cast(classifier(inputs, training=False), tf.float32)
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits),
            "label_id": label_id,
            "label": tf.gather(label_names_tensor, label_id),
        }

    text = tf.TensorSpec((None,), tf.string, name="text")
    archive = keras.export.ExportArchive()
    archive.track(classifier)
    if not text_encoder.graph_tokenizer:
        seq_len = text_encoder.seq_len
        specs = [tf.TensorSpec((None, seq_len), tf.int32, name=name) for name in INPUTS]
        archive.add_endpoint(
            "serving_default",
            lambda ids, mask, segments: predict(
                {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
            ),
            input_signature=specs,
        )
        archive.write_out(path, verbose=False)
        print(f"note: {path} takes input_ids, input_mask, segment_ids: tensorflow-text has no byte-level "
              "BPE to run a tokenizer.json inside it", file=sys.stderr)  # fmt: skip
        return
    archive.track(text_encoder)
    if pairs:
        pair = tf.TensorSpec((None,), tf.string, name="text_pair")
        archive.add_endpoint(
            "serving_default", lambda t, p: predict(text_encoder(t, p)), input_signature=[text, pair]
        )
        archive.add_endpoint("tokenize", lambda t, p: text_encoder(t, p), input_signature=[text, pair])
    else:
        archive.add_endpoint("serving_default", lambda t: predict(text_encoder(t)), input_signature=[text])
        archive.add_endpoint("tokenize", lambda t: text_encoder(t), input_signature=[text])
    archive.write_out(path, verbose=False)


# === The run ===


def finetune(config: FinetuneConfig, source: Pretrained | None = None) -> dict:
    """Trains, evaluates and writes everything; returns the headline figures. `source` overrides
    where the encoder comes from (bench/race.py: weights converted from keras-hub)."""
    started = time.time()
    source = source or pretrained(config)
    if config.seq_len > source.bert.max_position:
        raise FinetuneError(
            f"--seq_len {config.seq_len}: longer than the model's max_position {source.bert.max_position}"
        )
    spec = config.labelled_format
    train_ex = read_examples(config.source(config.train), spec)
    names = label_names(train_ex.labels)
    if len(names) < 2:
        raise FinetuneError(
            f"--train {config.train}: {len(names)} label(s) found; a classifier needs 2 or more"
        )
    validation_ex = read_examples(config.source(config.validation), spec, keep_labels=names)
    test_ex = read_examples(config.source(config.test), spec, keep_labels=names) if config.test else None
    for flag, ex in (("validation", validation_ex), ("test", test_ex)):
        if ex is not None and len(ex) == 0:
            raise FinetuneError(f"--{flag} {getattr(config, flag)}: no usable rows ({ex.bad_rows})")
    batch = config.global_batch_size
    steps_per_epoch = len(train_ex) // batch
    if steps_per_epoch == 0:
        raise FinetuneError(
            f"--train {config.train}: {len(train_ex)} usable rows, fewer than one batch of {batch}"
        )

    keras.utils.set_random_seed(config.seed)
    strategy = choose_strategy(config.strategy, config.tpu)
    if batch % strategy.num_replicas_in_sync:
        raise ConfigError(
            f"--global_batch_size {batch}: not divisible by the {strategy.num_replicas_in_sync} replicas"
        )
    text_encoder = TextEncoder(source.vocab_file, config.seq_len)
    index = {name: i for i, name in enumerate(names)}
    data = {}
    for split, ex in (("train", train_ex), ("validation", validation_ex), ("test", test_ex)):
        if ex is not None:
            data[split] = (encode(text_encoder, ex), np.array([index[y] for y in ex.labels], np.int32))

    with strategy.scope():
        classifier, recipe = build_model(config, source, len(names), steps_per_epoch * config.epochs)
    x, y = data["train"]
    train_ds = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(y), seed=config.seed, reshuffle_each_iteration=True)
        .batch(batch, drop_remainder=True)  # static shapes: every step the same (B, T)
        .prefetch(tf.data.AUTOTUNE)
    )
    validation_ds = padded(*data["validation"], batch)
    best = keras.callbacks.EarlyStopping(
        monitor="val_accuracy", mode="max", patience=config.epochs, restore_best_weights=True
    )
    print(
        f"fine-tuning {'from scratch' if config.from_scratch else source.weights} on {config.train}: "
        f"{len(train_ex)} examples, {len(names)} labels, {config.epochs} epochs of {steps_per_epoch} steps; "
        f"{recipe['pooling']} pooling, layer decay {recipe['layer_decay']:g}"
        + ("" if config.from_scratch else f"; starting fresh: {', '.join(recipe['fresh'])}"),
        flush=True,
    )
    history = classifier.fit(
        train_ds,
        epochs=config.epochs,
        validation_data=validation_ds,
        callbacks=[best],
        shuffle=False,
        verbose=2,
    )

    results = evaluate_splits(classifier, data, names, batch, {"validation": validation_ex, "test": test_ex})
    results["best_epoch"] = int(best.best_epoch) + 1
    results["recipe"] = recipe
    splits = {"train": train_ex, "validation": validation_ex, "test": test_ex}
    results["bad_rows"] = {split: ex.bad_rows for split, ex in splits.items() if ex is not None}
    out = config.output_dir
    confusion_of = results["test"] if "test" in results else results
    plot_confusion(
        confusion_of.pop("confusion"),
        names,
        f"{config.run_name}: {'test' if 'test' in results else 'validation'}",
        f"{out}/confusion.png",
    )
    results.pop("confusion", None)
    write_atomically(f"{out}/eval.json", json.dumps(results, indent=2, sort_keys=True))
    rows = [
        {"epoch": e + 1, **{k: float(v[e]) for k, v in history.history.items()}}
        for e in range(len(history.history["loss"]))
    ]
    write_atomically(f"{out}/history.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    write_atomically(
        f"{out}/config.json",
        json.dumps(
            {"config": dataclasses.asdict(config), "labels": names, "encoder": source.weights,
             "vocab": {"kind": source.vocab_file.kind, "lower_case": source.vocab_file.lower_case}},
            indent=2, sort_keys=True,
        ),
    )  # fmt: skip
    if config.export:
        plain = keras.Model.from_config(classifier.get_config())
        plain.set_weights(classifier.get_weights())
        plain.save(f"{out}/{CLASSIFIER}")
        save_serving(plain, text_encoder, names, config.text_pair_field is not None, f"{out}/{SERVING}")
    headline = results.get("test", results)
    return {
        "output": out,
        "accuracy": headline["accuracy"],
        "macro_f1": headline["macro_f1"],
        "split": "test" if "test" in results else "validation",
        "best_epoch": results["best_epoch"],
        "seconds": round(time.time() - started, 1),
    }


def evaluate_splits(classifier, data, names, batch, examples) -> dict:
    """Validation figures at the top level, test figures under "test"."""
    results = {}
    for split in ("validation", "test"):
        if split not in data:
            continue
        features, label_ids = data[split]
        logits = classifier.predict(padded(features, label_ids, batch).map(lambda x, y, w: x), verbose=0)
        found = figures(label_ids, np.asarray(logits)[: len(label_ids)], names, examples[split].bad_rows)
        if split == "validation":
            found.pop("bad_rows")  # the top level's bad_rows covers every split
            results.update(found)
        else:
            results["test"] = found
    return results


def parser() -> Parser:
    p = Parser(prog="python -m launch.finetune", description=__doc__.splitlines()[0], verbose_flag=True)
    add_arguments(p, FinetuneConfig)
    return p


def _finetune(argv: list[str] | None) -> None:
    args = parser().parse_args(argv)
    summary = finetune(FinetuneConfig(**vars(args)))
    print(json.dumps(summary, indent=2, sort_keys=True))
    print(
        f"done: {summary['split']} accuracy {summary['accuracy']:.4f}, macro-F1 {summary['macro_f1']:.4f} "
        f"(best epoch {summary['best_epoch']}); {summary['output']}/eval.json"
    )


def main(argv: list[str] | None = None) -> int:
    return run_cli(_finetune, argv)


if __name__ == "__main__":
    sys.exit(main())
