"""Attention dropout, decided by measurement (issue 57): the same pretraining with BERT's 0.1 on the
attention probabilities and with 0 (hidden dropout 0.1 kept in both), each fine-tuned on a
sentence-level and a token-level task, 3 seeds.

    .venv/bin/python bench/dropout.py [--only PATTERN] [--dry_run] [--report]
    make bench-dropout           # about 40 minutes on 2 cores, in cells

Why it matters: at 0 the attention runs through keras.ops.dot_product_attention as one fused
kernel on a GPU (cuDNN) or TPU, which Keras allows only without attention dropout; on an H200 that
made BERT-base's step 2.5x faster at seq_len 512 (docs/benchmarks/gpu.md). MosaicBERT and
ModernBERT pretrain with it at 0.

The grid:
- **0.1, BERT's**: bench/budget.py's pretraining and its `rule` cells, pretrained, as committed
  (bench/results/budget/): the tagging bench's recipe (tiny preset, seq_len 64, WordPiece 8,000,
  jieba whole-word masking, 9,600 steps on zh_news without pd_ner's validation and test
  sentences), fine-tuned with launch.finetune's defaults (up to 12 epochs, patience 3).
- **0**: the same corpus and command with `--attention_dropout 0` (cell `pretrain-attn0`), then
  the same fine-tuning cells (`rule-TASK-attn0-seedS`): classify (zh_sentiment, 2,000 reviews,
  accuracy) and tag (pd_ner with softmax, 2,000 sentences, entity F1), seeds 0, 1, 2. Fine-tuning
  keeps the pretrained config's dropouts, as any user's run would.
- Cells write bench/results/dropout/CELL.json as each finishes and a rerun skips them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench import budget, tagging  # noqa: E402
from bench.cells import Cells, command_line, summary  # noqa: E402

RESULTS = REPO / "bench" / "results" / "dropout"
CELLS = Cells(RESULTS)
TASKS = ("classify", "tag")
ARM = "pretrain-attn0"


def finetune(name: str, task: str, seed: int, data: Path, out: Path) -> dict:
    """One cell: budget.finetune's run, from the pretraining without attention dropout."""
    model_dir = tagging.pretrain(data, out, CELLS, ARM, ("--attention_dropout", "0"))
    return budget.finetune(name, task, "pretrained", seed, "rule", data, out, CELLS, model_dir)


def cells(data: Path, out: Path) -> dict:
    grid = {
        "corpus": lambda: tagging.corpus(data, out, CELLS),
        ARM: lambda: tagging.pretrain(data, out, CELLS, ARM, ("--attention_dropout", "0")),
    }
    for seed in budget.SEEDS:
        for task in TASKS:
            name = f"rule-{task}-attn0-seed{seed}"
            grid[name] = lambda n=name, t=task, s=seed: finetune(n, t, s, data, out)
    return grid


def report(results: dict[str, dict]) -> dict:
    """Per task, the test figure by seed, mean and spread at 0.1 (bench/results/budget/) and at 0;
    the difference of the means against the larger spread; the pretraining's held-out MLM figures."""
    baseline = budget.CELLS.results()
    table = {}
    for task in TASKS:
        arms = {
            "0.1": [baseline.get(f"rule-{task}-pretrained-seed{s}") for s in budget.SEEDS],
            "0": [results.get(f"rule-{task}-attn0-seed{s}") for s in budget.SEEDS],
        }
        rows = {}
        for arm, found in arms.items():
            found = [r for r in found if r is not None]
            if found:
                figures = [r["test"] for r in found]
                rows[arm] = {"test": [round(x, 4) for x in figures], **summary(figures),
                             "epochs_run": [r["epochs_run"] for r in found]}  # fmt: skip
        if len(rows) == 2 and rows["0"]["n"] == rows["0.1"]["n"] == len(budget.SEEDS):
            rows["0 minus 0.1"] = round(rows["0"]["mean"] - rows["0.1"]["mean"], 4)
            rows["larger_spread"] = max(rows["0"]["spread"], rows["0.1"]["spread"])
        table[task] = rows
    pretraining = {"0.1": baseline.get("pretrain"), "0": results.get(ARM)}
    return {"tasks": table, "pretraining": {arm: (r or {}).get("eval") for arm, r in pretraining.items()}}


def main() -> int:
    from pipeline.fetch.corpora import pd_ner, zh_news, zh_sentiment

    out = REPO / "out" / "bench-dropout"
    return command_line(__doc__, CELLS, cells, report, out, fetch=(pd_ner, zh_news, zh_sentiment))


if __name__ == "__main__":
    sys.exit(main())
