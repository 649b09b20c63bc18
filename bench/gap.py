"""A release across a vocabulary gap: adapt an English release to Chinese, or pretrain your own? At
equal compute, on People's Daily NER with a CRF and on Chinese sentiment, 3 seeds (issue 58).

    .venv/bin/python bench/gap.py [--only PATTERN] [--dry_run] [--report]
    make bench-gap               # the same; many hours on 2 cores, in cells that resume

The release: all-MiniLM-L6-v2 (English, uncased WordPiece; 69 % of pd_ner's CJK characters are
[UNK] to it). The rows, each adapted with `launch.adapt`'s recipe (RECIPE there: rate 3e-5, the
fresh MLM head at 300x, a tenth of the run head warm-up) on the tagging bench's pretraining text
(zh_news without pd_ner's validation and test sentences), at the tagging bench's corpus settings
(seq_len 64, 10 predictions, jieba whole-word masking, dynamic masking, batch 32):
- `noext`: the release's vocab as it is;
- `ext-pieces`, `ext-mean`, `ext-random`: every token the text uses at least MIN_COUNT times added
  (`--extend_min_count`: the CJK characters, [UNK] to the release, and a few more), the rows of
  those the release knows only as [UNK] starting as its [UNK] row, as the mean of its rows, or
  random at their mean norm (`--extension_init`);
- `ext-mean-ef`, `ext-random-ef`: the same with the added rows trained first under the frozen
  encoder (`--embeddings_first`, Artetxe et al. 2020), in the head warm-up (the release's own rows
  frozen too; bench/results/gap/allrows/ holds the first runs, which trained the whole matrix).
Compute: the same wall clock as the tagging bench's own pretraining (bench/results/tagging/
pretrain.json: 1,621 s for 9,600 tiny steps), counted in steps at the adaptation's rate on this
machine (a `calibrate` cell: 200 steps, the rate over the last 100), so that a busy machine
changes the time a cell takes, not what it computes. But that 1,621 s was not the own run's
time on this machine as the rows ran (the same run took 784 s alone on it, cell `own`): timed back
to back with the adaptation (cell `pace`: 12.3 own steps in the time of one adaptation step; the
machine's speed drifts), those rows had 2.4 times the own run's compute.
Equal time both ways, at that exchange rate:
- `ext-mean-eq` (EQUAL_TIME): `ext-mean` given the own run's 9,600 steps' time;
- `own-budget`: the own pretraining given a VARIANTS row's 1,860 steps' time (its schedule
  stretched with them, warm-up a tenth), fine-tuned as every row is.

Fine-tuning, as the other benches measure, so the figures sit beside theirs:
- `tag-VARIANT-seedS`: bench/tagging.py's CRF cells (its draws of 2,000 / 1,000 sentences, whole
  test split, 8 epochs, the rate for the width). The release as it is, bertbeam's own pretraining
  and scratch are the tagging bench's committed cells (ft-release-crf, ft-pretrained-crf,
  ft-scratch-crf).
- `classify-VARIANT-seedS` and `classify-release-seedS`: bench/budget.py's `rule` cells on
  zh_sentiment (2,000 reviews, up to 12 epochs, patience 3), mean-pooled in every row, as `auto`
  chose for the own pretraining (its pooler never trained); own and scratch are budget's
  committed rule-classify cells.
Learning curves: each adaptation's held-out masked-LM accuracy at its evaluations (a quarter of
the run apart), beside the own pretraining's (every 1,600 steps; the `own-curve` cell runs it again,
last, as its committed cell kept only the final figures): both character-level, each on its own
corpus's held-out rows (the release's vocab without extension makes most characters [UNK], easy
to predict: `unk_share` says how many).

Each cell writes bench/results/gap/CELL.json when done; a rerun skips it (bench/cells.py).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench import budget, tagging  # noqa: E402
from bench.cells import Cells, command_line, run, summary  # noqa: E402

CELLS = Cells(REPO / "bench" / "results" / "gap")
SEEDS = (0, 1, 2)
MIN_COUNT = 3  # --extend_min_count: a character seen 3 times in the text comes in
CORPUS_ARGS = "--seq_len 64 --max_predictions 10 --word_segmenter jieba --whole_word_mask"
EXTEND = ["--extend_min_count", str(MIN_COUNT)]
VARIANTS = {  # name -> launch.adapt flags; in the order the grid runs them
    "ext-random-ef": [*EXTEND, "--extension_init", "random", "--embeddings_first"],
    "noext": [],
    "ext-mean-ef": [*EXTEND, "--extension_init", "mean", "--embeddings_first"],
    "ext-random": [*EXTEND, "--extension_init", "random"],
    "ext-mean": [*EXTEND, "--extension_init", "mean"],
    "ext-pieces": [*EXTEND, "--extension_init", "pieces"],
}
EQUAL_TIME = {"ext-mean-eq": "ext-mean"}  # a row given the own run's time -> the row whose flags it takes
MODELS = (*VARIANTS, *EQUAL_TIME, "own-budget")  # every row this bench trains, in the grid's order


def release(data: Path) -> Path:
    return data / "releases" / "all-MiniLM-L6-v2"


def own_seconds() -> float:
    """The wall clock of the tagging bench's own pretraining: the budget every VARIANTS row gets."""
    return json.loads(tagging.CELLS.path("pretrain").read_text())["seconds"]


def own_budget_steps(data: Path, out: Path) -> int:
    """The own pretraining's steps in the time of a VARIANTS row's steps, at `pace`'s exchange
    rate, in the 20-step units the adaptations' budgets use."""
    exchange = pace(data, out)["own_steps_per_adapt_step"]
    return round(grid_steps(data, out) * exchange / 20) * 20


def own_budget(data: Path, out: Path) -> Path:
    """The own pretraining given the time each VARIANTS row had."""
    return tagging.pretrain(data, out, CELLS, "own-budget", steps=own_budget_steps(data, out))


def in_seconds(curve: list[dict], seconds_per_step: float) -> list[tuple[float, float]]:
    """A curve as (seconds of the idle machine, held-out masked-LM accuracy) at each evaluation."""
    return [(row["step"] * seconds_per_step, row["val_mlm_accuracy"]) for row in curve]


def crossing(first: list[tuple[float, float]], second: list[tuple[float, float]], points: int = 3) -> dict:
    """Where two learning curves, [(seconds, accuracy)], would cross: each one's last `points`
    evaluations fitted as accuracy = a + b ln(seconds) (such curves, past their start, rise about
    as much per doubling of time), and the fits set equal. An extrapolation, so it says which
    points it rests on. `cross_seconds` is None where the curve behind at the last common time
    gains no faster per doubling than the one ahead: on these fits they never meet."""
    if min(len(first), len(second)) < 2:
        raise ValueError(f"a fit needs 2 evaluations or more per curve, found {len(first)} and {len(second)}")
    fits = []
    for curve in (first, second):
        seconds, accuracy = zip(*curve[-points:], strict=True)
        slope, intercept = np.polyfit(np.log(seconds), accuracy, 1)
        fits.append((float(intercept), float(slope)))
    end = min(first[-1][0], second[-1][0])  # the last time both curves have reached

    def at(fit, t):
        return fit[0] + fit[1] * math.log(t)

    ahead = 0 if at(fits[0], end) >= at(fits[1], end) else 1
    behind = 1 - ahead
    result = {
        "fit_points": points,
        "per_doubling": [round(b * math.log(2), 4) for _, b in fits],  # accuracy per doubling of time
        "ahead_at_end": ahead,
        "end_seconds": round(end, 1),
        "gap_at_end": round(at(fits[ahead], end) - at(fits[behind], end), 4),
        "cross_seconds": None,
    }
    if fits[behind][1] > fits[ahead][1]:
        t = math.exp((fits[ahead][0] - fits[behind][0]) / (fits[behind][1] - fits[ahead][1]))
        result["cross_seconds"] = round(t, 1)
    return result


def own_curve(data: Path, out: Path) -> dict:
    """The own pretraining's curve: the tagging bench's run made again with its command and corpus
    recipe (cells `corpus` and `own` here; its committed cell keeps only the final figures), its
    held-out figures every 1,600 steps, for where an adaptation's curve would cross it."""
    if (found := CELLS.done("own-curve")) is not None:
        return found
    start = time.time()
    model_dir = tagging.pretrain(data, out, CELLS, "own")
    result = {"curve": tagging.curve_of(model_dir), "recorded_eval": tagging.CELLS.done("pretrain")["eval"]}
    config = {"run": "bench/tagging.py's pretrain, again"}
    return CELLS.record("own-curve", config, result, time.time() - start)


def steps_per_s(run_dir: Path, after: int) -> float:
    """A run's training steps per second over its logged rows past step `after` (batch 32)."""
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    rates = [r["examples_per_s"] / 32 for r in rows if r["step"] > after and "examples_per_s" in r]
    if not rates:
        raise ValueError(f"{run_dir}/history.jsonl: no training rows past step {after} to time")
    return sum(rates) / len(rates)


def adaptation_rate(data: Path, out: Path, folder: Path) -> float:
    """Adaptation steps/s here, at this bench's corpus settings: 200 steps of `noext`'s recipe in
    `folder`, the rate over the last 100."""
    source, _ = tagging.training_text(data, out)
    logs = "--log_every 20 --checkpoint_every 200 --eval_every 200 --eval_steps 2 --no-export"
    run(["-m", "launch.adapt", "--release", str(release(data)), "--input", str(source),
         "--output", str(folder), "--train_steps", "200", "--corpus_args", CORPUS_ARGS,
         "--train_args", logs])  # fmt: skip
    return steps_per_s(folder / "run", after=100)


def calibrate(data: Path, out: Path) -> dict:
    """Adaptation steps/s here: the rate that turns the committed own run's seconds into steps."""
    if (found := CELLS.done("calibrate")) is not None:
        return found
    start = time.time()
    rate = adaptation_rate(data, out, out / "calibrate")
    return CELLS.record("calibrate", {"steps": 200, "corpus_args": CORPUS_ARGS}, {"steps_per_s": rate},
                        time.time() - start)  # fmt: skip


PACE_OWN_STEPS = 1600  # an own run's steps when `pace` times it; its rate over the last 1,200


def pace(data: Path, out: Path) -> dict:
    """How many own pretraining steps take the time of one adaptation step on this machine,
    measured back to back (own, adaptation, own) because the machine's speed drifts between
    cells: the adaptation ran at 1.12 steps/s one morning and 0.8 the same afternoon, alone on
    it. `calibrate` and the own run's seconds came from different days, so "equal time" rests on
    this rate, not on their quotient."""
    if (found := CELLS.done("pace")) is not None:
        return found
    start, folder = time.time(), out / "pace"
    shutil.rmtree(folder, ignore_errors=True)  # a measurement of now: nothing from an earlier try

    def own_rate(name: str) -> float:
        run_dir = tagging.pretrain(data, folder, Cells(folder / "cells"), name, steps=PACE_OWN_STEPS)
        return steps_per_s(run_dir, after=PACE_OWN_STEPS // 4)

    own = [own_rate("own-1")]
    adapted = adaptation_rate(data, out, folder / "adapt")
    own.append(own_rate("own-2"))
    result = {"own_steps_per_s": own, "adapt_steps_per_s": adapted,
              "own_steps_per_adapt_step": sum(own) / len(own) / adapted}  # fmt: skip
    config = {"own_steps": PACE_OWN_STEPS, "adapt_steps": 200, "order": ["own", "adapt", "own"]}
    return CELLS.record("pace", config, result, time.time() - start)


def grid_steps(data: Path, out: Path) -> int:
    """A VARIANTS row's steps: the committed own run's 1,621 s at the calibrated rate (1,860)."""
    return max(100, round(calibrate(data, out)["steps_per_s"] * own_seconds() / 20) * 20)


def budget_steps(variant: str, data: Path, out: Path) -> int:
    """An adaptation's steps: grid_steps(), or for an EQUAL_TIME row the own run's 9,600 steps at
    `pace`'s exchange rate."""
    if variant in EQUAL_TIME:
        exchange = pace(data, out)["own_steps_per_adapt_step"]
        return round(tagging.PRETRAIN_STEPS / exchange / 20) * 20
    return grid_steps(data, out)


def adapt(variant: str, data: Path, out: Path) -> Path:
    """The adapted release's export; the run's held-out figures and curve go in its cell. A cell
    whose export is gone (out/ is not committed) stops the bench rather than train another one."""
    folder, name = out / "adapt" / variant, f"adapt-{variant}"
    if CELLS.done(name) is not None:
        if not (folder / "export" / "config.json").exists():
            sys.exit(f"{folder}/export: {CELLS.path(name)} records an adaptation whose export is not here; "
                     "remove that file and the cells fine-tuned from it to run it again")  # fmt: skip
        return folder / "export"
    steps, start = budget_steps(variant, data, out), time.time()
    source, _ = tagging.training_text(data, out)
    flags = [*VARIANTS[EQUAL_TIME.get(variant, variant)]]
    flags += ["--corpus_args", CORPUS_ARGS, "--train_args", "--eval_steps 20"]
    run(["-m", "launch.adapt", "--release", str(release(data)), "--input", str(source),
         "--output", str(folder), "--train_steps", str(steps), *flags])  # fmt: skip
    manifest = json.loads((folder / "corpus" / "manifest.json").read_text())
    curve = tagging.curve_of(folder / "run")
    added = manifest["vocab"]["release"].get("added") or []
    unk = manifest["vocab"]["special_ids"]["unk"]
    result = {"eval": json.loads((folder / "run" / "eval.json").read_text()), "curve": curve,
              "added": len(added), "added_unknown": sum(a["pieces"] == [unk] for a in added),
              "unk_share": unk_share(folder, unk)}  # fmt: skip
    # its steps in the idle seconds `calibrate` measured: the axis every curve goes on
    config = {"steps": steps, "budget_seconds": steps / calibrate(data, out)["steps_per_s"], "flags": flags}
    CELLS.record(name, config, result, time.time() - start)
    return folder / "export"


def unk_share(folder: Path, unk: int) -> float:
    """The share of the corpus's real tokens that are [UNK] (its validation split's)."""
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.schema import read_manifest

    manifest = read_manifest(str(folder / "corpus"))
    unknown = real = 0
    for x, _, _ in make_dataset(manifest, "validation", InputConfig(32, training=False)):
        ids, mask = np.asarray(x["input_ids"]), np.asarray(x["input_mask"])
        unknown, real = unknown + int(((ids == unk) & (mask > 0)).sum()), real + int(mask.sum())
    return round(unknown / max(real, 1), 4)


def cells(data: Path, out: Path) -> dict:
    """Each row trained with its first tagging seed, then the other seeds, then the sentence task:
    the headline comparison soonest."""
    grid = {"calibrate": lambda: calibrate(data, out), "pace": lambda: pace(data, out)}
    tagging_out = out / "tagging"  # the draws: bench/tagging.py's files, made the same way

    def encoder(model: str) -> dict:
        """Where a fine-tuning starts (FinetuneConfig's fields): a release folder or a run."""
        if model == "own-budget":
            return {"model_dir": str(own_budget(data, out))}
        return {"init_checkpoint": f"hf:{release(data) if model == 'release' else adapt(model, data, out)}"}

    def tag(model: str, seed: int):
        name = f"tag-{model}-seed{seed}"
        grid[name] = lambda: tagging.finetune(name, data, tagging_out, "crf", seed,
                                              cells=CELLS, **encoder(model))  # fmt: skip

    def classify(model: str, seed: int):
        name = f"classify-{model}-seed{seed}"
        grid[name] = lambda: budget.finetune(name, "classify", "pretrained", seed, "rule", data, out, CELLS,
                                             pooling="mean", **encoder(model))  # fmt: skip

    for model in MODELS:
        if model == "own-budget":
            grid[model] = lambda: own_budget(data, out)
        else:
            grid[f"adapt-{model}"] = lambda v=model: adapt(v, data, out)
        tag(model, 0)
    for seed in SEEDS[1:]:
        for model in MODELS:
            tag(model, seed)
    for seed in SEEDS:
        for model in ("release", *MODELS):
            classify(model, seed)
    grid["own-curve"] = lambda: own_curve(data, out)
    return grid


def report(results: dict[str, dict]) -> dict:
    """Per model and task: test figures by seed, mean and spread; gaps against the larger spread:
    the best VARIANTS row to the release as it is, to bertbeam's own pretraining (the committed
    cells, trained for less time than the row) and to `own-budget` (as long), and `ext-mean-eq`
    to the own pretraining (as long); the adaptations' masked-LM curves beside the own runs', all
    on `calibrate`'s seconds, and where each would cross the longest own curve (`crossing`: index
    0 the adaptation, 1 the own run)."""
    tagged, budgeted = tagging.CELLS.results(), budget.CELLS.results()
    rows = {
        "tag": {"release": [tagged.get(f"ft-release-crf-seed{s}") for s in SEEDS],
                "own": [tagged.get(f"ft-pretrained-crf-seed{s}") for s in SEEDS],
                "scratch": [tagged.get(f"ft-scratch-crf-seed{s}") for s in SEEDS]},
        "classify": {"release": [results.get(f"classify-release-seed{s}") for s in SEEDS],
                     "own": [budgeted.get(f"rule-classify-pretrained-seed{s}") for s in SEEDS],
                     "scratch": [budgeted.get(f"rule-classify-scratch-seed{s}") for s in SEEDS]},
    }  # fmt: skip
    for model in MODELS:
        rows["tag"][model] = [results.get(f"tag-{model}-seed{s}") for s in SEEDS]
        rows["classify"][model] = [results.get(f"classify-{model}-seed{s}") for s in SEEDS]
    figure = {"tag": lambda r: r["test_entity_f1"], "classify": lambda r: r["test"]}
    table = {}
    for task, models in rows.items():
        table[task] = {}
        for model, found in models.items():
            found = [figure[task](r) for r in found if r is not None]
            if found:
                table[task][model] = {"test": [round(x, 4) for x in found], **summary(found)}
        complete = {m: v for m, v in table[task].items() if v["n"] == len(SEEDS)}
        adapted = [m for m in complete if m in VARIANTS]
        pairs = {}
        if adapted:
            best = max(adapted, key=lambda m: complete[m]["mean"])
            table[task]["best_adapted"] = best
            pairs = {f"best_minus_{other}": (best, other) for other in ("release", "own", "own-budget")}
        pairs["ext-mean-eq_minus_own"] = ("ext-mean-eq", "own")
        for key, (first, second) in pairs.items():
            if first in complete and second in complete:
                table[task][key] = {
                    "gap": round(complete[first]["mean"] - complete[second]["mean"], 4),
                    "larger_spread": round(max(complete[first]["spread"], complete[second]["spread"]), 4),
                }
    adaptations = [m for m in (*VARIANTS, *EQUAL_TIME) if f"adapt-{m}" in results]
    curves = {m: results[f"adapt-{m}"]["curve"] for m in adaptations}
    crossings = {}
    # One axis, the seconds of `calibrate`'s machine: an adaptation's steps at its rate; an own
    # run's at `pace`'s exchange rate to it, or, before pace has run, its wall clock here (cell
    # `own`, on a machine whose speed drifts).
    seconds = {m: _seconds_per_step(f"adapt-{m}") for m in adaptations}
    own_pace = None  # own steps per second of that machine
    if "pace" in results and "calibrate" in results:
        own_pace = results["calibrate"]["steps_per_s"] * results["pace"]["own_steps_per_adapt_step"]
    for own, cell in (("own", "own-curve"), ("own-budget", "own-budget")):
        if cell in results:
            curves[own] = results[cell]["curve"]
            seconds[own] = 1 / own_pace if own_pace else _seconds_per_step(own)
    longest = "own-budget" if "own-budget" in curves else "own" if "own" in curves else None
    if longest:
        own = in_seconds(curves[longest], seconds[longest])
        for model in adaptations:
            if model != "noext":  # its accuracy counts [UNK], most of what it predicts
                adapted = in_seconds(curves[model], seconds[model])
                crossings[model] = {"with": longest, **crossing(adapted, own)}
    return {"tasks": table, "curves": curves, "crossings": crossings,
            "adaptations": {m: {k: results[f"adapt-{m}"][k] for k in ("added", "added_unknown", "unk_share")}
                            for m in adaptations},
            "calibrate": results.get("calibrate"), "pace": results.get("pace")}  # fmt: skip


def _seconds_per_step(cell: str) -> float:
    """An adaptation's budget over its steps, or a pretraining cell's wall clock over its steps."""
    found = json.loads(CELLS.path(cell).read_text())
    return found["config"].get("budget_seconds", found["seconds"]) / found["config"]["steps"]


def main() -> int:
    from pipeline.fetch.corpora import minilm, pd_ner, zh_news, zh_sentiment

    out = REPO / "out" / "bench-gap"
    return command_line(__doc__, CELLS, cells, report, out, fetch=(pd_ner, zh_news, zh_sentiment, minilm))


if __name__ == "__main__":
    sys.exit(main())
