"""`launch.finetune --task span`: extractive question answering (SQuAD 1.1/2.0, CMRC 2018) on a
pretrained encoder, judged by exact match and F1.

Reads SQuAD-shaped JSON (`squad.py`), puts each question with its context into windows
(`spans.py`), trains the start/end head (`model/tasks/span.py`) with Keras `fit` under the run's
strategy and XLA, ranks answers over each question's windows, keeps the epoch with the best
validation F1, and writes to the output folder:
  eval.json     exact_match and f1 (SQuAD's rules, or CMRC 2018's for Chinese: --span_metric), by
                has_answer / no_answer where there are unanswerable questions, on validation and
                under "test"; the recipe; bad rows per split
  errors.jsonl  the first 50 questions answered wrong: the question, the gold answers, the answer
  span.keras    the model, uncompiled; hf/  a BERT one as transformers' BertForQuestionAnswering
                (a ModernBERT one as ModernBertForQuestionAnswering)
  serving/      a SavedModel: raw questions and contexts in, answers with character offsets out
                (span_serving.py), needing no bertbeam code to load
  config.json, history.jsonl
"""

from __future__ import annotations

import json
import time

import keras
import numpy as np
import tensorflow as tf

from launch.checkpoints import layers_of
from launch.serving import save_keras
from launch.tasks.config import FinetuneConfig
from launch.tasks.fitting import best_epoch, steps_per_epoch, task_strategy, training_batches, write_run_files
from launch.tasks.pretrained import Pretrained, head_layers, task_optimizer
from launch.tasks.spans import SpanData, best_answers, encode_spans
from launch.tasks.squad import read_squad, span_scores
from model.encoder import build_encoder
from model.tasks.span import build_span_model
from pipeline.files import write_atomically

SPAN = "span.keras"
SERVING = "serving"  # raw questions and contexts in, answers out (span_serving.py)


def answers_of(model: keras.Model, data: SpanData, config: FinetuneConfig, allow_null: bool) -> dict:
    """{question id: answer} from the model's logits on every window (full batches; the last padded
    with copies of the first window, dropped after)."""
    n, batch = len(data), config.global_batch_size
    take = np.concatenate([np.arange(n), np.zeros(-n % batch, np.int64)])
    x = {k: v[take] for k, v in data.features.items()}
    logits = model.predict(tf.data.Dataset.from_tensor_slices(x).batch(batch, drop_remainder=True), verbose=0)
    return best_answers(data, logits["start"][:n], logits["end"][:n], n_best=config.n_best,
                        max_answer_length=config.max_answer_length, allow_null=allow_null,
                        null_threshold=config.null_threshold)  # fmt: skip


class SpanF1(keras.callbacks.Callback):
    """Validation F1 after every epoch, as `val_f1` in the logs (put it before EarlyStopping)."""

    def __init__(self, data: SpanData, config: FinetuneConfig, allow_null: bool):
        super().__init__()
        self.data, self.config, self.allow_null = data, config, allow_null

    def on_epoch_end(self, epoch, logs=None):
        answers = answers_of(self.model, self.data, self.config, self.allow_null)
        figures = span_scores(answers, self.data.examples, self.config.span_metric)
        if logs is not None:
            logs["val_f1"] = figures["f1"]
        exact, f1 = figures["exact_match"], figures["f1"]
        print(f"epoch {epoch + 1}: validation exact match {exact:.4f}, F1 {f1:.4f}", flush=True)


def error_samples(data: SpanData, answers: dict, limit: int = 50) -> str:
    lines = []
    for example in data.examples:
        gold = [text for _, _, text in example.answers]
        if answers[example.id] not in (gold or [""]):
            row = {
                "id": example.id,
                "question": example.question,
                "gold": gold,
                "answer": answers[example.id],
            }
            lines.append(json.dumps(row, ensure_ascii=False) + "\n")
            if len(lines) == limit:
                break
    return "".join(lines)


def finetune_spans(config: FinetuneConfig, source: Pretrained) -> dict:
    started = time.time()
    paths = {"train": config.train, "validation": config.validation, "test": config.test}
    found = {split: read_squad(path, config.on_bad_row) for split, path in paths.items() if path}
    allow_null = found["train"].version_2  # SQuAD 2.0: the model learns to say "no answer"
    vocab = source.vocab_file.load()
    data = {
        split: encode_spans(spans.examples, vocab, config.seq_len, config.stride, config.max_query_length)
        for split, spans in found.items()
    }
    steps = steps_per_epoch(config, len(data["train"]), "windows")
    strategy = task_strategy(config)
    with strategy.scope():
        encoder = build_encoder(source.bert, config.seq_len)
        fresh = layers_of([w.path for w in encoder.weights]) if config.from_scratch else source.load(encoder)
        model = build_span_model(encoder, source.bert.dropout, config.seed, config=source.bert)
        optimizer, learning_rate, decay = task_optimizer(config, source, model, steps * config.epochs)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=optimizer, loss={"start": loss, "end": loss}, jit_compile=config.jit_compile)
    train = data["train"]
    train_ds = training_batches(train.features, {"start": train.starts, "end": train.ends}, config)
    validation = SpanF1(data["validation"], config, allow_null)
    best = best_epoch("val_f1", config.epochs)
    print(
        f"fine-tuning a span extractor from {'scratch' if config.from_scratch else source.weights} on "
        f"{config.train}: {len(found['train'])} questions ({len(train)} windows"
        f"{', some unanswerable' if allow_null else ''}), {config.epochs} epochs of {steps} steps; "
        f"learning rate {learning_rate:g}, layer decay {decay:g}",
        flush=True,
    )
    history = model.fit(
        train_ds, epochs=config.epochs, callbacks=[validation, best], shuffle=False, verbose=2
    )

    results, errors = {}, ""
    for split in ("validation", "test"):
        if split in data:
            answers = answers_of(model, data[split], config, allow_null)
            figures = span_scores(answers, data[split].examples, config.span_metric) | {
                "windows": len(data[split])
            }
            if split == "validation":
                results.update(figures)
            else:
                results["test"] = figures
            errors = error_samples(data[split], answers)
    results["best_epoch"] = int(best.best_epoch) + 1
    results["recipe"] = {
        "task": "span", "objective": None if config.from_scratch else source.objective,
        "learning_rate": learning_rate, "layer_decay": decay,
        "fresh": [layer for layer in fresh if layer != "pooler"] + head_layers(model),
        "unanswerable": allow_null,
        "doc_stride": config.stride, "max_query_length": config.max_query_length,
    }  # fmt: skip
    results["bad_rows"] = {split: spans.bad_rows for split, spans in found.items()}
    out = config.output_dir
    write_run_files(config, source, out, history, results, {})
    write_atomically(f"{out}/errors.jsonl", errors)
    if config.export:
        from launch.tasks.span_serving import save_span_extractor
        from launch.tasks.text_encoder import TextEncoder

        plain = save_keras(model, f"{out}/{SPAN}")
        save_span_extractor(plain, TextEncoder(source.vocab_file, config.seq_len), f"{out}/{SERVING}",
                            max_query_length=config.max_query_length, doc_stride=config.stride,
                            n_best=config.n_best, max_answer_length=config.max_answer_length,
                            allow_null=allow_null, null_threshold=config.null_threshold)  # fmt: skip
        export(source, plain, out)
    headline = results.get("test", results)
    return {"output": out, "exact_match": headline["exact_match"], "f1": headline["f1"],
            "split": "test" if "test" in results else "validation", "best_epoch": results["best_epoch"],
            "seconds": round(time.time() - started, 1)}  # fmt: skip


def export(source: Pretrained, model: keras.Model, out: str) -> None:
    """A span extractor also as transformers' BertForQuestionAnswering (a ModernBERT one as
    ModernBertForQuestionAnswering) in out/hf/."""
    from launch.interop.google import GoogleCheckpointError
    from launch.interop.hf_bert import save_hf_task
    from launch.interop.hf_folder import HFCheckpointError
    from launch.interop.hf_modernbert import save_hf_modernbert_task

    try:
        if source.bert.modern:
            save_hf_modernbert_task(model, source.bert, source.vocab_file, f"{out}/hf", scores="span",
                                    architecture="ModernBertForQuestionAnswering")  # fmt: skip
        else:
            save_hf_task(model, source.bert, source.vocab_file, f"{out}/hf", head="span",
                         architecture="BertForQuestionAnswering", hf_head="qa_outputs")  # fmt: skip
    except (HFCheckpointError, GoogleCheckpointError) as e:
        print(f"note: no Hugging Face export: {e}; span.keras holds the model", flush=True)
