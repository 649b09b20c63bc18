"""Fine-tune a pretrained encoder on a labelled text task, and measure it: the question everyone who
pretrains asks next ("does it fine-tune well?"), answered with one command.

    python -m launch.finetune --model_dir out/demo/run --train data/rt_reviews/train.jsonl \\
        --validation data/rt_reviews/validation.jsonl --test data/rt_reviews/test.jsonl
    python -m launch.finetune ... --from_scratch          # the same model from random weights
    python -m launch.finetune --init_checkpoint hf:out/hf --output out/ft ...   # no bertbeam run

Data: JSONL, TSV or CSV with a header row (by extension, or --format), fields named by
--text_field / --text_pair_field / --label_field; or, with --tfds_name NAME, --train/--validation/
--test name splits of a prepared tensorflow-datasets dataset. Bad rows are
counted in eval.json and skipped (launch/tasks/labelled.py). Text is tokenised with the run's own vocab
and rules (model_dir/corpus/, kept by the run), in the graph (launch/tasks/text_encoder.py), statically
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

import json
import sys
import time

import keras
import numpy as np

from common.cli import Parser, add_arguments, first_paragraph, run_cli
from launch.checkpoints import layers_of
from launch.serving import save_keras, save_task
from launch.tasks.classification import evaluate_splits, padded, plot_confusion, predictions
from launch.tasks.config import FinetuneConfig, FinetuneError
from launch.tasks.fitting import best_epoch, steps_per_epoch, task_strategy, training_batches, write_run_files
from launch.tasks.labelled import label_names, read_examples
from launch.tasks.pretrained import Pretrained, pretrained, task_optimizer
from launch.tasks.text_encoder import TextEncoder
from model.encoder import build_encoder
from model.tasks.classifier import build_classifier, default_pooling

CLASSIFIER = "classifier.keras"
SERVING = "serving"


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
    optimizer, learning_rate, decay = task_optimizer(config, source, classifier, total_steps)
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
        "learning_rate": learning_rate,
        "fresh": used + ["classifier"],
    }
    return classifier, recipe


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
    if config.task == "tag":
        from launch.tasks.tag_finetune import finetune_tags

        return finetune_tags(config, source)
    if config.task == "span":
        from launch.tasks.span_finetune import finetune_spans

        return finetune_spans(config, source)
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
    steps = steps_per_epoch(config, len(train_ex), "usable rows")
    strategy = task_strategy(config)
    text_encoder = TextEncoder(source.vocab_file, config.seq_len)
    index = {name: i for i, name in enumerate(names)}
    data = {}
    for split, ex in (("train", train_ex), ("validation", validation_ex), ("test", test_ex)):
        if ex is not None:
            features = text_encoder.encode_all(ex.texts, ex.pairs)
            data[split] = (features, np.array([index[y] for y in ex.labels], np.int32))

    with strategy.scope():
        classifier, recipe = build_model(config, source, len(names), steps * config.epochs)
    train_ds = training_batches(*data["train"], config)
    validation_ds = padded(*data["validation"], batch)
    best = best_epoch("val_accuracy", config.epochs)
    print(
        f"fine-tuning {'from scratch' if config.from_scratch else source.weights} on {config.train}: "
        f"{len(train_ex)} examples, {len(names)} labels, {config.epochs} epochs of {steps} steps; "
        f"learning rate {recipe['learning_rate']:g}{'' if config.learning_rate else ' (by width)'}, "
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
    write_run_files(config, source, out, history, results, {"labels": names})
    if config.export:
        plain = save_keras(classifier, f"{out}/{CLASSIFIER}")
        pairs = config.text_pair_field is not None
        save_task(plain, text_encoder, predictions(plain, names), pairs, f"{out}/{SERVING}")
    headline = results.get("test", results)
    return {
        "output": out,
        "accuracy": headline["accuracy"],
        "macro_f1": headline["macro_f1"],
        "split": "test" if "test" in results else "validation",
        "best_epoch": results["best_epoch"],
        "seconds": round(time.time() - started, 1),
    }


def parser() -> Parser:
    p = Parser(prog="python -m launch.finetune", description=first_paragraph(__doc__), verbose_flag=True)
    add_arguments(p, FinetuneConfig)
    return p


def _finetune(argv: list[str] | None) -> None:
    args = parser().parse_args(argv)
    summary = finetune(FinetuneConfig(**vars(args)))
    print(json.dumps(summary, indent=2, sort_keys=True))
    if "entity_f1" in summary:
        figures = f"entity F1 {summary['entity_f1']:.4f}"
    elif "exact_match" in summary:
        figures = f"exact match {summary['exact_match']:.4f}, F1 {summary['f1']:.4f}"
    else:
        figures = f"accuracy {summary['accuracy']:.4f}, macro-F1 {summary['macro_f1']:.4f}"
    best = f"best epoch {summary['best_epoch']}"
    print(f"done: {summary['split']} {figures} ({best}); {summary['output']}/eval.json")


def main(argv: list[str] | None = None) -> int:
    return run_cli(_finetune, argv)


if __name__ == "__main__":
    sys.exit(main())
