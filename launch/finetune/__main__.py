"""`python -m launch.finetune`: the command line of fine-tuning (launch/finetune/__init__.py says
what it does; every flag is a `FinetuneConfig` field)."""

from __future__ import annotations

import json
import sys

import launch.finetune
from common.cli import Parser, add_arguments, first_paragraph, run_cli
from launch.finetune import finetune
from launch.finetune.config import FinetuneConfig


def parser() -> Parser:
    p = Parser(
        prog="python -m launch.finetune",
        description=first_paragraph(launch.finetune.__doc__),
        verbose_flag=True,
    )
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
