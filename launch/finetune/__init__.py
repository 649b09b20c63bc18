"""Fine-tune a pretrained encoder on a labelled text task, and measure it: the question everyone who
pretrains asks next ("does it fine-tune well?"), answered with one command for three tasks.

    python -m launch.finetune --model_dir out/demo/run --train data/rt_reviews/train.jsonl \\
        --validation data/rt_reviews/validation.jsonl --test data/rt_reviews/test.jsonl
    python -m launch.finetune --task tag --train pd/train.conll ...     # NER, entity F1
    python -m launch.finetune --task span --train squad/train.json ...  # SQuAD / CMRC, EM and F1
    python -m launch.finetune ... --from_scratch          # the same model from random weights
    python -m launch.finetune --init_checkpoint hf:out/hf --output out/ft ...   # no bertbeam run

One folder per task, each with its data reader (`data.py`), its encoding, its figures
(`metrics.py`), its run (`run.py`, a `Task`) and its raw-string serving (`serving.py`):
  classify/  a label per text or pair (JSONL, TSV, CSV, tfds): accuracy, macro-F1
  tag/       a label per word, entities (CoNLL, JSONL): entity F1
  span/      the answer's span in a context (SQuAD-shaped JSON: SQuAD, CMRC 2018): EM and F1
What all three share sits beside them: the flags (`config.py`), where the encoder comes from and
the optimizer (`pretrained.py`), raw strings to model inputs in the TensorFlow graph
(`text_encoder.py`), windows over long texts (`windows.py`), serving's shared graph ops
(`graph_ops.py`) and the run (`skeleton.py`): read, encode, build, fit, keep the best validation
epoch, evaluate, write eval.json, export. The heads and their compile are `model/tasks/`.

Model: the pretrained encoder (a BERT run's, an ELECTRA run's discriminator, a ModernBERT's, or a
Hugging Face or Google release) under the task's head; Keras `fit` under the same strategy
factory as pretraining, AdamW with linear warmup and decay and layer-wise learning-rate decay
(--layer_decay), XLA. Validation after every epoch: up to --epochs, stopping once --patience
epochs have not improved on it, the best epoch's weights kept (one rule for every task). What starts
fresh (the head; a pooler pretraining never trained) is printed and listed in eval.json. A bad
row stops the run with one line naming the file and line, or with --on_bad_row skip is skipped and
counted in eval.json.

Output in model_dir/finetune/NAME/ (NAME: --name, else the training file's stem, plus "-scratch"
with --from_scratch), or --output:
  eval.json       the task's figures on the validation split, and under "test" with --test (the
                  headline figure: validation chose the epoch); best_epoch, recipe, bad_rows
  MODEL.keras     classifier.keras, tagger.keras or span.keras, uncompiled (`import model`
                  registers its layers)
  serving/        a SavedModel taking raw strings (needs `import tensorflow_text` to load); for a
                  tokenizer.json vocab, the model inputs
  hf/             the transformers class for the task and encoder, with the tokenizer, or a
                  one-line note saying why there is none
  config.json     the flags, the label set and where the encoder came from; history.jsonl per epoch
  and each task's own: confusion.png (classify), errors.jsonl (tag, span)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launch.finetune.config import FinetuneConfig
    from launch.finetune.pretrained import Pretrained


def finetune(config: FinetuneConfig, source: Pretrained | None = None) -> dict:
    """Trains, evaluates and writes everything for --task; returns the headline figures. `source`
    overrides where the encoder comes from (bench/race.py: weights converted from keras-hub)."""
    from launch.finetune.config import FinetuneError
    from launch.finetune.pretrained import pretrained
    from launch.finetune.skeleton import run

    source = source or pretrained(config)
    if config.seq_len > source.bert.max_position:
        raise FinetuneError(
            f"--seq_len {config.seq_len}: longer than the model's max_position {source.bert.max_position}"
        )
    return run(task_for(config, source))


def task_for(config: FinetuneConfig, source: Pretrained):
    """The `Task` of --task."""
    from launch.finetune.classify.run import ClassifyTask
    from launch.finetune.span.run import SpanTask
    from launch.finetune.tag.run import TagTask

    return {"classify": ClassifyTask, "tag": TagTask, "span": SpanTask}[config.task](config, source)
