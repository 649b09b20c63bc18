"""`launch.finetune --task tag`: a token tagger (NER) on a pretrained encoder, judged by entity F1.

Reads CoNLL or JSONL (`tagged.py`), puts the character-level entities onto the vocab's pieces as
BIO (`alignment.py`, `tagging.py`), trains the tagger (`model/tasks/tagger.py`; `--crf` adds a
CRF whose transitions learn at --crf_lr_multiplier x the rate) with Keras `fit` under the run's
strategy and XLA, keeps the epoch with the best validation entity F1, and writes to the output
folder:
  eval.json      entity F1, precision, recall, per type, unaligned entities, bad rows, on the
                 validation split and under "test"; the recipe (labels, scheme, crf, rate, ...)
  errors.jsonl   the first 50 examples (test, else validation) with an entity missed or wrong
  tagger.keras   the tagger, uncompiled (`import model` registers its layers)
  serving/       a SavedModel: raw strings in, entities out (type, character start and end,
                 text; tag_serving.py), needing no bertbeam code to load
  hf/            a softmax tagger as transformers' BertForTokenClassification (a ModernBERT one
                 as ModernBertForTokenClassification; labels in its config's id2label), with the
                 tokenizer
  config.json, history.jsonl  as for classification
"""

from __future__ import annotations

import time

import keras

from launch.checkpoints import layers_of
from launch.serving import save_keras
from launch.tasks.alignment import IGNORE
from launch.tasks.config import FinetuneConfig, FinetuneError
from launch.tasks.fitting import best_epoch, steps_per_epoch, task_strategy, training_batches, write_run_files
from launch.tasks.pretrained import Pretrained, head_layers, task_optimizer
from launch.tasks.tagged import read_tagged
from launch.tasks.tagging import (
    EntityF1,
    decoded_labels,
    decoder,
    encode_tagged,
    error_samples,
    predicted_entities,
    tag_figures,
)
from launch.tasks.tags import bio_labels
from model.encoder import build_encoder
from model.tasks.crf import CRFLoss
from model.tasks.tagger import build_tagger
from pipeline.files import write_atomically

TAGGER = "tagger.keras"
SERVING = "serving"  # raw strings in, entities out (tag_serving.py)
HF_FOLDER = "hf"  # BertForTokenClassification or ModernBertForTokenClassification


def build_tagger_model(config: FinetuneConfig, source: Pretrained, num_labels: int, total_steps: int):
    """The tagger on `source`'s encoder (random weights with --from_scratch), compiled; the recipe."""
    encoder = build_encoder(source.bert, config.seq_len)
    fresh = layers_of([w.path for w in encoder.weights]) if config.from_scratch else source.load(encoder)
    tagger = build_tagger(encoder, num_labels, source.bert.dropout, config.seed, crf=config.crf,
                          config=source.bert)  # fmt: skip
    faster = {"crf": config.crf_lr_multiplier} if config.crf else None
    optimizer, learning_rate, decay = task_optimizer(config, source, tagger, total_steps, faster)
    if config.crf:
        loss = CRFLoss(tagger.get_layer("crf"))
    else:  # the unlabelled pieces, [CLS], [SEP] and padding count nowhere
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE)
    tagger.compile(optimizer=optimizer, loss=loss, jit_compile=config.jit_compile)
    recipe = {
        "task": "tag",
        "objective": None if config.from_scratch else source.objective,
        "crf": config.crf,
        "layer_decay": decay,
        "learning_rate": learning_rate,
        "fresh": [layer for layer in fresh if layer != "pooler"] + head_layers(tagger),
    }
    return tagger, recipe


def export(
    config: FinetuneConfig, source: Pretrained, tagger: keras.Model, labels: list[str], out: str
) -> None:
    """A softmax tagger also as transformers' BertForTokenClassification (a ModernBERT one as
    ModernBertForTokenClassification) in out/hf/; what has no such form (a CRF, a projected
    embedding) says so in one line."""
    from launch.interop.google import GoogleCheckpointError
    from launch.interop.hf_bert import save_hf_task
    from launch.interop.hf_folder import HFCheckpointError
    from launch.interop.hf_modernbert import save_hf_modernbert_task

    names = {"id2label": dict(enumerate(labels)), "label2id": {k: i for i, k in enumerate(labels)}}
    folder = f"{out}/{HF_FOLDER}"
    try:
        if source.bert.modern:
            save_hf_modernbert_task(tagger, source.bert, source.vocab_file, folder, scores="tagger",
                                    architecture="ModernBertForTokenClassification",
                                    config=names)  # fmt: skip
        else:
            save_hf_task(tagger, source.bert, source.vocab_file, folder, head="tagger",
                         architecture="BertForTokenClassification", hf_head="classifier",
                         config=names)  # fmt: skip
    except (HFCheckpointError, GoogleCheckpointError) as e:
        print(f"note: no Hugging Face export: {e}; tagger.keras holds the tagger", flush=True)


def finetune_tags(config: FinetuneConfig, source: Pretrained) -> dict:
    started = time.time()
    paths = {"train": config.train, "validation": config.validation, "test": config.test}
    found = {split: read_tagged(path, on_bad_row=config.on_bad_row) for split, path in paths.items() if path}
    train = found["train"]
    if not train.types:
        raise FinetuneError(f"--train {config.train}: no entity in it; a tagger needs at least one type")
    labels = bio_labels(train.types)
    vocab = source.vocab_file.load()
    data = {
        split: encode_tagged(
            tagged.examples, vocab, labels, config.seq_len, config.stride, config.label_all_pieces
        )
        for split, tagged in found.items()
    }
    batch = config.global_batch_size
    steps = steps_per_epoch(config, len(data["train"]), "windows")
    strategy = task_strategy(config)
    with strategy.scope():
        tagger, recipe = build_tagger_model(config, source, len(labels), steps * config.epochs)
    windows = {split: len(d) for split, d in data.items()}
    recipe |= {"labels": labels, "scheme": train.scheme, "label_all_pieces": config.label_all_pieces,
               "doc_stride": config.stride, "windows": windows}  # fmt: skip
    train_data = data["train"]
    train_ds = training_batches(train_data.features, train_data.labels, config)
    decode = decoder(tagger, labels, config.crf, config.jit_compile)
    validation = EntityF1(decode, data["validation"], found["validation"].examples, labels, batch)
    best = best_epoch("val_entity_f1", config.epochs)
    print(
        f"fine-tuning a tagger{' with a CRF' if config.crf else ''} from "
        f"{'scratch' if config.from_scratch else source.weights} on {config.train}: {len(train)} examples "
        f"({len(train_data)} windows), {len(labels)} labels ({train.scheme}), {config.epochs} epochs of "
        f"{steps} steps; learning rate {recipe['learning_rate']:g}, "
        f"layer decay {recipe['layer_decay']:g}",
        flush=True,
    )
    history = tagger.fit(
        train_ds, epochs=config.epochs, callbacks=[validation, best], shuffle=False, verbose=2
    )

    results, errors_of = {}, None
    for split in ("validation", "test"):
        if split in data:
            predicted = predicted_entities(data[split], decoded_labels(decode, data[split], batch), labels)
            figures = tag_figures(found[split].examples, predicted, data[split].lost)
            if split == "validation":
                results.update(figures)
            else:
                results["test"] = figures
            errors_of = (found[split].examples, predicted)
    results["best_epoch"] = int(best.best_epoch) + 1
    results["recipe"] = recipe
    results["bad_rows"] = {split: tagged.bad_rows for split, tagged in found.items()}
    out = config.output_dir
    write_run_files(config, source, out, history, results, {"labels": labels})
    write_atomically(f"{out}/errors.jsonl", error_samples(*errors_of))
    if config.export:
        from launch.tasks.tag_serving import save_tagger
        from launch.tasks.text_encoder import TextEncoder

        plain = save_keras(tagger, f"{out}/{TAGGER}")
        save_tagger(plain, TextEncoder(source.vocab_file, config.seq_len), labels, config.crf,
                    config.label_all_pieces, config.stride, f"{out}/{SERVING}")  # fmt: skip
        export(config, source, plain, labels, out)
    headline = results.get("test", results)
    return {
        "output": out,
        "entity_f1": headline["entity_f1"],
        "split": "test" if "test" in results else "validation",
        "best_epoch": results["best_epoch"],
        "seconds": round(time.time() - started, 1),
    }
