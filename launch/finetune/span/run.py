"""`launch.finetune --task span`: extractive question answering (SQuAD 1.1/2.0, CMRC 2018) on a
pretrained encoder, judged by exact match and F1.

Reads SQuAD-shaped JSON (`data.py`), puts each question with its context into windows and ranks
answers over a question's windows (`encoding.py`), trains the start/end head
(`model/tasks/span.py`) and keeps the epoch with the best validation F1 (`metrics.py`). Writes,
beside what every task writes (`launch/finetune/skeleton.py`):
  eval.json     exact_match and f1 (SQuAD's rules, or CMRC 2018's for Chinese: --span_metric), by
                has_answer / no_answer where there are unanswerable questions, on validation and
                under "test"; the recipe
  errors.jsonl  the first 50 questions answered wrong: the question, the gold answers, the answer
  span.keras, serving/ (raw questions and contexts in, answers with character offsets out:
                `serving.py`)
  hf/           transformers' BertForQuestionAnswering (a ModernBERT one as
                ModernBertForQuestionAnswering)
"""

from __future__ import annotations

import json

import keras

from launch.finetune.skeleton import Task, full_batches
from launch.finetune.span.data import read_squad
from launch.finetune.span.encoding import SpanData, best_answers, encode_spans
from launch.finetune.span.metrics import span_scores
from model.tasks.span import build_span_model, compile_span_model
from pipeline.files import write_atomically


class SpanTask(Task):
    name, model_file, monitor, rows = "span", "span.keras", "val_f1", "windows"
    scores = "span"
    hf = ("BertForQuestionAnswering", "qa_outputs", "ModernBertForQuestionAnswering")

    def read(self, split: str, path: str):
        found = read_squad(path, self.config.on_bad_row)
        if split == "train":
            self.allow_null = found.version_2  # SQuAD 2.0: the model learns to say "no answer"
        return found

    def encode(self, found: dict) -> dict:
        config, vocab = self.config, self.source.vocab_file.load()
        return {
            split: encode_spans(spans.examples, vocab, config.seq_len, config.stride, config.max_query_length)
            for split, spans in found.items()
        }

    def build(self, encoder: keras.Model, fresh: list[str]) -> keras.Model:
        return build_span_model(encoder, self.source.bert.dropout, self.config.seed, config=self.source.bert)

    def compile(self, model: keras.Model, optimizer) -> None:
        compile_span_model(model, optimizer, self.config.jit_compile)

    def recipe(self) -> dict:
        config = self.config
        return {"unanswerable": self.allow_null, "doc_stride": config.stride,
                "max_query_length": config.max_query_length}  # fmt: skip

    def validation(self, model: keras.Model) -> dict:
        return {"callbacks": [SpanF1(self)]}

    def describe(self, steps: int, recipe: dict) -> str:
        config = self.config
        return (
            f"fine-tuning a span extractor from {'scratch' if config.from_scratch else self.source.weights} "
            f"on {config.train}: {len(self.found['train'])} questions ({len(self.data['train'])} windows"
            f"{', some unanswerable' if self.allow_null else ''}), {config.budget(steps)}; "
            f"learning rate {recipe['learning_rate']:g}, layer decay {recipe['layer_decay']:g}"
        )

    def answers(self, model: keras.Model, data: SpanData) -> dict:
        """{question id: answer} from the model's logits on every window."""
        config, n = self.config, len(data)
        logits = model.predict(full_batches(data.features, config.global_batch_size), verbose=0)
        return best_answers(data, logits["start"][:n], logits["end"][:n], n_best=config.n_best,
                            max_answer_length=config.max_answer_length, allow_null=self.allow_null,
                            null_threshold=config.null_threshold)  # fmt: skip

    def evaluate(self, model: keras.Model, split: str) -> dict:
        data = self.data[split]
        answers = self.answers(model, data)
        self.errors = error_samples(data, answers)  # the last split's: test
        return span_scores(answers, data.examples, self.config.span_metric) | {"windows": len(data)}

    def write_extras(self, out: str, results: dict) -> None:
        write_atomically(f"{out}/errors.jsonl", self.errors)

    def headline(self, figures: dict) -> dict:
        return {"exact_match": figures["exact_match"], "f1": figures["f1"]}

    def restore(self, run: dict, results: dict) -> None:
        self.allow_null = results["recipe"]["unanswerable"]

    # --- exports ---

    def ids_outputs(self, model: keras.Model, inputs: dict) -> dict:
        return model(inputs, training=False)

    def raw_endpoints(self, model: keras.Model, text_encoder) -> dict:
        from launch.finetune.span.serving import raw_endpoints

        config = self.config
        return raw_endpoints(model, text_encoder, max_query_length=config.max_query_length,
                             doc_stride=config.stride, n_best=config.n_best,
                             max_answer_length=config.max_answer_length, allow_null=self.allow_null,
                             null_threshold=config.null_threshold)  # fmt: skip


class SpanF1(keras.callbacks.Callback):
    """Validation F1 after every epoch, as `val_f1` in the logs (before the best-epoch callback)."""

    def __init__(self, task: SpanTask):
        super().__init__()
        self.task = task

    def on_epoch_end(self, epoch, logs=None):
        task = self.task
        data = task.data["validation"]
        figures = span_scores(task.answers(self.model, data), data.examples, task.config.span_metric)
        if logs is not None:
            logs["val_f1"] = figures["f1"]
        exact, f1 = figures["exact_match"], figures["f1"]
        print(f"epoch {epoch + 1}: validation exact match {exact:.4f}, F1 {f1:.4f}", flush=True)


def error_samples(data: SpanData, answers: dict, limit: int = 50) -> str:
    """JSONL of the first `limit` questions answered wrong: the question, the gold answers, the
    answer."""
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
