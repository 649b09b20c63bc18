"""Masked-LM loss, accuracy and perplexity of a run's checkpoint on any corpus built with the run's
vocab: how well the model knows text it was not trained on (another domain, a held-out build).

    python -m launch.evaluate --model_dir out/demo/run --data out/other_corpus [--name NAME]

Reads every full global batch of the corpus's validation split (its static shapes), at the corpus's
own length and prediction count, and writes model_dir/eval-NAME.json (NAME: the corpus folder's
name): the run's objective's figures (examples, mlm_loss, mlm_accuracy, perplexity; nsp_accuracy
when both the run and the corpus have sentence pairs; for ELECTRA the generator's masked LM and
the discriminator's rtd_loss, rtd_accuracy, rtd_precision, rtd_recall, replaced_fraction); plus
the checkpoint, its step, the objective and the corpus.
"""

from __future__ import annotations

import json
import sys
from pathlib import PurePosixPath

import keras

from common.cli import Parser, first_paragraph, run_cli
from common.errors import BertbeamError
from launch import backend
from launch.checkpoints import read_weights
from launch.logs import figures
from launch.run_dir import RunDir
from launch.run_model import model_io, pretraining_model
from launch.strategy import KINDS, choose_strategy
from launch.streams import validation_dataset
from pipeline.schema import read_manifest


class EvaluateError(BertbeamError):
    """The corpus cannot be evaluated with this run's model; one line saying why."""


def evaluate_corpus(model_dir: str, data: str, *, name: str | None = None, checkpoint: str | None = None,
                    batch_size: int = 32, strategy: str = "auto") -> dict:  # fmt: skip
    run = RunDir(model_dir)
    bert = run.read_bert_config()
    own = run.read_corpus()
    corpus = read_manifest(data)
    if corpus.vocab.sha256 != own.vocab.sha256:
        raise EvaluateError(
            f"--data {data}: built with another vocab (sha256 {corpus.vocab.sha256[:12]}...); the run's is "
            f"{own.vocab.sha256[:12]}...: rebuild it with --vocab {run.corpus}/{own.vocab.file}"
        )
    if corpus.seq_len > bert.max_position:
        raise EvaluateError(
            f"--data {data}: seq_len {corpus.seq_len} is longer than the model's max_position "
            f"{bert.max_position}"
        )
    batches = corpus.split("validation").instances // batch_size
    if batches == 0:
        raise EvaluateError(
            f"--data {data}: {corpus.split('validation').instances} validation examples, fewer than one "
            f"batch of {batch_size} (--batch_size)"
        )
    path = checkpoint or run.latest_checkpoint()
    objective = run.read_config().pretraining_objective
    with choose_strategy(strategy).scope():
        # The run's own objective; an NSP/SOP head only when both the run and the corpus have pairs
        # (a head the corpus cannot score stays unread).
        model = pretraining_model(objective, bert, corpus, next_sentence=own.pairs and corpus.pairs)
        read_weights(model, path)
        objective.compile(model, keras.optimizers.SGD(), jit_compile=True)
    validation = validation_dataset([corpus], batch_size, 0, [batches], **model_io(model))
    logs = model.evaluate(validation, steps=batches, return_dict=True, verbose=0)
    results = {
        "checkpoint": path,
        "step": int(number) if (number := path.rsplit("-", 1)[-1]).isdigit() else None,
        "corpus": corpus.folder or data,
        "objective": objective.name,
        "examples": batches * batch_size,
        **figures(logs),
    }
    name = name or PurePosixPath(data.rstrip("/")).name
    run.write_json(f"eval-{name}.json", results)
    return {**results, "output": run.file(f"eval-{name}.json")}


def parser() -> Parser:
    p = Parser(prog="python -m launch.evaluate", description=first_paragraph(__doc__), verbose_flag=True)
    p.add_argument("--model_dir", required=True, help="a launch.pretrain run (local or gs://)")
    p.add_argument("--data", required=True, help="a corpus folder built with the run's vocab")
    p.add_argument(
        "--name", default=None, help="writes model_dir/eval-NAME.json (default: the corpus folder's name)"
    )
    p.add_argument("--checkpoint", default=None, help="a checkpoint prefix (default: the newest)")
    p.add_argument("--batch_size", type=int, default=32, help="examples per evaluation step")
    p.add_argument("--strategy", default="auto", choices=KINDS, help="hardware")
    return p


def _evaluate(argv: list[str] | None) -> None:
    backend.check()
    args = parser().parse_args(argv)
    results = evaluate_corpus(
        args.model_dir, args.data, name=args.name, checkpoint=args.checkpoint, batch_size=args.batch_size,
        strategy=args.strategy,
    )  # fmt: skip
    print(json.dumps(results, indent=2, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    return run_cli(_evaluate, argv)


if __name__ == "__main__":
    sys.exit(main())
