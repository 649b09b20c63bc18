"""A training budget fair to what was pretrained (issue 56): how many epochs fine-tuning gets, and
layer decay's default per task, measured on all three tasks, pretrained and from scratch alike.

    .venv/bin/python bench/budget.py [--only PATTERN] [--dry_run] [--report]
    make bench-budget            # the same; 2.6 cell-hours on 2 cores (SHARD=0/2 and 1/2 halve it)

The grid:
- **Encoder**: bench/tagging.py's pretraining, rebuilt here as this bench's own cells (tiny preset,
  seq_len 64, WordPiece 8,000, jieba whole-word masking, 9,600 steps on zh_news without pd_ner's
  validation and test sentences). Scratch: the same vocab and shape from random weights.
- **Tasks**, Chinese all three, each on bench/tagging.py's or bench/quality.py's fixed draws:
  - classify: zh_sentiment, 2,000 training reviews (bench/quality.py's draw), the whole
    validation (1,729) and test (2,598) splits; accuracy.
  - tag: pd_ner with softmax, 2,000 training and 1,000 validation sentences, the whole test split
    (6,575); entity F1.
  - span: the same pd_ner draws asked as SQuAD 2.0 (three questions per sentence, one per entity
    type); CMRC 2018's F1.
  Every task at seq_len 64 (span: doc_stride 32, questions of up to 16 pieces), batch 32, the
  rate for the width (5e-4), its own default head.
- **Budgets** (cell name `BUDGET-TASK-SOURCE-seedS`, seeds 0, 1, 2):
  - `fixed3`: the old default, 3 epochs, the best of them kept.
  - `rule`: up to MAX_EPOCHS, stopping once PATIENCE epochs have not improved on validation
    (launch.finetune's default since this bench: docs/benchmarks/budget.md). The
    rate's schedule spans MAX_EPOCHS whatever the patience, so a smaller patience's run is this
    run's prefix: the report gives what patience 1 and 2 would have chosen from the history,
    with no run of their own.
  - `decay1`: the rule, pretrained, layer decay 1.0 (off) against the rule's 0.8.
- Cells write bench/results/budget/CELL.json as each finishes and a rerun skips them; seed 0 of
  every cell comes first, so a first comparison is there soonest.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench import tagging  # noqa: E402
from bench.cells import Cells, command_line, summary  # noqa: E402

RESULTS = REPO / "bench" / "results" / "budget"
CELLS = Cells(RESULTS)

SEEDS = (0, 1, 2)
TASKS = ("classify", "tag", "span")
SOURCES = ("pretrained", "scratch")
MAX_EPOCHS, PATIENCE = 12, 3
SEQ_LEN, DOC_STRIDE, BATCH, LABELLED = 64, 32, 32, 2000
# the validation figure each task's run picks its epoch by (history.jsonl), and eval.json's name
MONITOR = {"classify": ("val_accuracy", "accuracy"), "tag": ("val_entity_f1", "entity_f1"),
           "span": ("val_f1", "f1")}  # fmt: skip
BUDGETS = {
    "fixed3": {"epochs": 3, "patience": 0},
    "rule": {"epochs": MAX_EPOCHS, "patience": PATIENCE},
    "decay1": {"epochs": MAX_EPOCHS, "patience": PATIENCE, "layer_decay": 1.0},
}


def sentiment_files(data: Path, out: Path) -> dict[str, Path]:
    """zh_sentiment: bench/quality.py's draw of 2,000 training reviews, whole validation and test."""
    from launch.finetune.classify.data import LabelledFormat, read_examples

    folder = data / "zh_sentiment"
    train = out / "zh_sentiment" / f"train-{LABELLED}.jsonl"
    if not train.exists():
        found = read_examples(str(folder / "train.tsv"), LabelledFormat())
        rows = list(zip(found.texts, found.labels, strict=True))
        random.Random(0).shuffle(rows)
        lines = [json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in rows[:LABELLED]]
        train.parent.mkdir(parents=True, exist_ok=True)
        train.write_text("".join(lines), encoding="utf-8")
    return {"train": train, "validation": folder / "validation.tsv", "test": folder / "test.tsv"}


def task_files(task: str, data: Path, out: Path) -> dict[str, Path]:
    if task == "classify":
        return sentiment_files(data, out)
    return tagging.subsets(data, out) if task == "tag" else tagging.span_sets(data, out)


def finetune(name: str, task: str, source: str, seed: int, budget: str, data: Path, out: Path,
             cells: Cells = CELLS, model_dir: Path | None = None,
             init_checkpoint: str | None = None, pooling: str = "auto") -> dict:  # fmt: skip
    """One cell: launch.finetune in this process; the test figure at the chosen epoch, and the
    validation figure of every epoch run. `cells` records it; `model_dir`: the encoder (default:
    this bench's pretraining; bench/dropout.py's other arm), or `init_checkpoint` (a release:
    bench/gap.py, which also fixes `pooling`)."""
    if (found := cells.done(name)) is not None:
        return found
    import keras

    from launch.finetune import finetune as run_finetune
    from launch.finetune.config import FinetuneConfig

    files = task_files(task, data, out)
    task_flags = {"doc_stride": DOC_STRIDE} if task != "classify" else {"pooling": pooling}
    if task == "span":
        task_flags["max_query_length"] = 16
    config = FinetuneConfig(
        task=task, from_scratch=source == "scratch",
        **({"init_checkpoint": init_checkpoint} if init_checkpoint else
           {"model_dir": str(model_dir or tagging.pretrain(data, out, CELLS))}),
        train=str(files["train"]), validation=str(files["validation"]), test=str(files["test"]),
        output=str(out / "finetune" / name), seq_len=SEQ_LEN, global_batch_size=BATCH, strategy="cpu",
        seed=seed, export=False, **task_flags, **BUDGETS[budget],
    )  # fmt: skip
    start = time.time()
    headline = run_finetune(config)
    keras.backend.clear_session()
    folder = out / "finetune" / name
    figures = json.loads((folder / "eval.json").read_text())
    history = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    monitor, figure = MONITOR[task]
    result = {
        "test": figures["test"][figure],
        "validation": figures[figure],
        "validation_by_epoch": [round(row[monitor], 4) for row in history],
        "best_epoch": headline["best_epoch"],
        "epochs_run": figures["epochs_run"],
        "recipe": figures["recipe"],
    }
    config_json = {k: v for k, v in vars(config).items() if v is not None and k != "output"}
    return cells.record(name, config_json, result, time.time() - start)


def cells(data: Path, out: Path) -> dict:
    grid = {
        "corpus": lambda: tagging.corpus(data, out, CELLS),
        "pretrain": lambda: tagging.pretrain(data, out, CELLS),
    }
    for seed in SEEDS:  # seed 0 of every cell first: a first comparison soonest
        for budget in BUDGETS:
            for task in TASKS:
                for source in SOURCES if budget != "decay1" else ("pretrained",):
                    name = f"{budget}-{task}-{source}-seed{seed}"
                    grid[name] = lambda n=name, t=task, src=source, s=seed, b=budget: finetune(
                        n, t, src, s, b, data, out
                    )
    return grid


# === The report ===


def stopped(values: list[float], patience: int) -> tuple[int, int]:
    """What a run whose validation figures are `values` keeps and how long it runs, with
    `patience`: (the best epoch, the epochs run), both from 1; Keras's EarlyStopping's rule (a
    strictly higher figure is an improvement)."""
    best, best_epoch, wait = float("-inf"), 0, 0
    for epoch, value in enumerate(values):
        if value > best:
            best, best_epoch, wait = value, epoch, 0
            continue
        wait += 1
        if wait >= patience and epoch > 0:
            return best_epoch + 1, epoch + 1
    return best_epoch + 1, len(values)


def report(results: dict[str, dict]) -> dict:
    """Per task, source and budget: the test figure by seed, mean and spread, the epochs run and
    the seconds; pretrained minus scratch per budget; what patience 1, 2 and 3 keep from the rule's
    runs (validation), and the test figure lost against layer decay off."""
    table, gaps, patience = {}, {}, {}
    for task in TASKS:
        for budget in BUDGETS:
            for source in SOURCES:
                names = [f"{budget}-{task}-{source}-seed{s}" for s in SEEDS]
                found = [results[n] for n in names if n in results]
                if not found:
                    continue
                table[f"{task}-{budget}-{source}"] = {
                    "test": [round(r["test"], 4) for r in found],
                    **summary([r["test"] for r in found]),
                    "best_epoch": [r["best_epoch"] for r in found],
                    "epochs_run": [r["epochs_run"] for r in found],
                }
            a, b = table.get(f"{task}-{budget}-pretrained"), table.get(f"{task}-{budget}-scratch")
            if a and b and a["n"] == b["n"] == len(SEEDS):
                gaps[f"{task}-{budget}"] = {"gap": a["mean"] - b["mean"],
                                            "larger_spread": max(a["spread"], b["spread"])}  # fmt: skip
        for source in SOURCES:
            runs = [results[n] for n in (f"rule-{task}-{source}-seed{s}" for s in SEEDS) if n in results]
            if runs:
                patience[f"{task}-{source}"] = {
                    k: [
                        {"best_epoch": e, "epochs_run": n, "validation": r["validation_by_epoch"][e - 1]}
                        for r in runs
                        for e, n in [stopped(r["validation_by_epoch"], k)]
                    ]
                    for k in range(1, PATIENCE + 1)
                }
    return {"models": table, "pretrained_minus_scratch": gaps, "patience": patience,
            "pretrain": (results.get("pretrain") or {}).get("eval")}  # fmt: skip


def main() -> int:
    from pipeline.fetch.corpora import pd_ner, zh_news, zh_sentiment

    out = REPO / "out" / "bench-budget"
    return command_line(__doc__, CELLS, cells, report, out, fetch=(pd_ner, zh_news, zh_sentiment))


if __name__ == "__main__":
    sys.exit(main())
