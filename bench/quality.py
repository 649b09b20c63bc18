"""Does pretraining pay off at the compute this machine has? MLM and ELECTRA against from-scratch,
on an English and a Chinese task, as a curve over pretraining minutes.

    .venv/bin/python bench/quality.py [--only PATTERN] [--dry_run]
    make bench-quality          # the same; hours on 2 cores, in cells (below)

The grid (issue 23):
- Pretraining text is general text in the task's language, none of the task's texts
  (`pipeline/fetch/corpora.py`): en_general (Wikipedia articles, news, a novel) and zh_news (People's
  Daily, 1998). One run per objective {mlm, electra} x language, `--minutes` (30) of this machine,
  tiny preset, seq_len 64, dynamic masking; checkpoints at 5, 10, 20 and 30 minutes.
- Minutes are steps: each (language, objective) first measures its training steps/s here
  (`calibrate` cells: a 600-step run, the rate over the last 400), and a run's minute m is
  m x 60 x that rate. The grid's results then do not depend on what else the machine did while
  it ran. `step-cost` cells time an ELECTRA step against an MLM step in one process, in turns.
- Fine-tuning: 2,000 labelled examples (a fixed draw from the task's train split), seq_len 64,
  batch 32, 8 epochs, AdamW, the best epoch on validation; `launch.finetune` with its defaults
  (--pooling auto, --layer_decay 0.8; `recipe` cells compare them on validation at 30 minutes).
  Every checkpoint with seed 0; the 30-minute one with seeds 0, 1, 2; and `--from_scratch` with the
  same budget, seeds 0, 1, 2.
- Self-pretraining: the same runs on the task's own training texts without labels (Krishna et al.
  2023), 30 minutes, seeds 0, 1, 2.
- The block (issue 24): `mlm-modern` is the MLM run with ModernBERT's block (modern-tiny: 3 layers,
  GeGLU 192, RoPE, window 128 > seq_len 64, so every layer sees the whole row) and `mlm-bert` the
  same run with BERT's (tiny), both calibrated and trained in one session on one machine (minutes
  from another machine's calibration would not be the same minutes), English only: masked-LM
  accuracy on the general corpus's validation split at each checkpoint, and fine-tuned accuracy
  at each, 3 seeds at 30 minutes.

Each cell writes its result to bench/results/quality/CELL.json as soon as it is done, and a rerun
skips the cells that have one: the study runs in parts, across sessions, and its small result
files are committed, so the figures in docs/benchmarks/quality.md trace to them. `--only` runs the cells
whose name contains any of its comma-separated parts. At the end (and with `--report`): the
tables, the targets, and quality.png (the gap to from-scratch against pretraining minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.cells import Cells, run, summary  # noqa: E402

RESULTS = REPO / "bench" / "results" / "quality"

MINUTES = (5, 10, 20, 30)
OBJECTIVES = ("mlm", "electra")
# A run's name -> (objective, preset): the objectives on BERT's block, and MLM on ModernBERT's.
RUNS = {
    "mlm": ("mlm", "tiny"),
    "electra": ("electra", "tiny"),
    "mlm-bert": ("mlm", "tiny"),
    "mlm-modern": ("mlm", "modern-tiny"),
}
SEEDS = (0, 1, 2)
LANGUAGES = {
    # name: general text (fetcher, files), task (fetcher, extension), the vocab trained on the
    # general text (the self-pretraining corpus reuses it: one tokenizer per language, so one
    # from-scratch baseline), masking flags
    "en": {
        "general": ("en_general", "*.txt"),
        "task": ("rt_reviews", "jsonl"),
        "vocab": ["--vocab_size", "8000"],
        "masking": [],
    },
    "zh": {
        "general": ("zh_news", "*.txt"),
        "task": ("zh_sentiment", "tsv"),
        "vocab": ["--vocab_size", "8000", "--vocab_model_type", "wordpiece"],
        "masking": ["--word_segmenter", "jieba", "--whole_word_mask"],
    },
}
SEQ_LEN, MAX_PREDICTIONS, BATCH, LEARNING_RATE = 64, 10, 32, 1e-3
LABELLED, EPOCHS, FINETUNE_LR = 2000, 8, 5e-4
# recipe cells: what --pooling and --layer_decay are decided on (validation accuracy, seed 0)
RECIPES = {f"{pooling}-{decay}": (pooling, decay) for decay in (1.0, 0.8) for pooling in ("cls", "mean")}


# === Cells: a name, what it needs, how to compute it ===


CELLS = Cells(RESULTS)
done, record = CELLS.done, CELLS.record


# === Text ===


def read_split(lang: str, data: Path, split: str) -> list[tuple[str, str]]:
    from launch.finetune.classify.data import LabelledFormat, read_examples

    fetcher, ext = LANGUAGES[lang]["task"]
    ex = read_examples(str(data / fetcher / f"{split}.{ext}"), LabelledFormat())
    return list(zip(ex.texts, ex.labels, strict=True))


def corpus(lang: str, source: str, data: Path, out: Path) -> Path:
    """The pretraining corpus: `general` text, or `self`: the task's training texts without their
    labels (a document each; no validation or test text)."""
    folder = out / "corpora" / f"{lang}-{source}"
    if (folder / "manifest.json").exists():
        return folder
    if source == "general":
        fetcher, pattern = LANGUAGES[lang]["general"]
        inputs, vocab = str(data / fetcher / pattern), LANGUAGES[lang]["vocab"]
    else:
        path = out / "corpora" / f"{lang}-self.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        texts = [" ".join(t.split()) for t, _ in read_split(lang, data, "train")]
        path.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
        general = corpus(lang, "general", data, out)
        vocab_file = json.loads((general / "manifest.json").read_text())["vocab"]["file"]
        inputs, vocab = str(path), ["--vocab", str(general / vocab_file)]
    seconds = run(["-m", "pipeline.build_corpus", "--input", inputs, "--output", str(folder),
                   "--seq_len", str(SEQ_LEN), "--max_predictions", str(MAX_PREDICTIONS), "--dupe_factor", "1",
                   *vocab, *LANGUAGES[lang]["masking"]])  # fmt: skip
    print(f"[corpus {lang}-{source}] built in {seconds:.0f} s", flush=True)
    return folder


def labelled_subset(lang: str, data: Path, out: Path) -> Path:
    """`LABELLED` training examples drawn with a fixed seed, as a file launch.finetune reads."""
    rows = read_split(lang, data, "train")
    random.Random(0).shuffle(rows)
    path = out / f"{lang}-train-{LABELLED}.jsonl"
    if not path.exists():
        lines = [json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in rows[:LABELLED]]
        path.write_text("".join(lines), encoding="utf-8")
    return path


# === Pretraining ===


def pretrain_args(corpus_dir: Path, model_dir: Path, run_name: str, steps: int, checkpoint_every: int,
                  log_every: int) -> list[str]:  # fmt: skip
    objective, preset = RUNS[run_name]
    return ["-m", "launch.pretrain", "--data", str(corpus_dir), "--model_dir", str(model_dir),
            "--objective", objective, "--preset", preset, "--strategy", "cpu",
            "--global_batch_size", str(BATCH), "--learning_rate", str(LEARNING_RATE),
            "--train_steps", str(steps), "--warmup_steps", str(min(1000, steps // 10)),
            "--dynamic_masking", "--log_every", str(log_every), "--checkpoint_every", str(checkpoint_every),
            "--eval_every", str(checkpoint_every), "--eval_steps", "20", "--keep_checkpoints", "10",
            "--no-export"]  # fmt: skip


def calibrate(lang: str, objective: str, data: Path, out: Path) -> dict:
    """Training steps/s of `objective` here: 600 steps, the rate over the last 400 (the first 200
    include XLA's compile)."""
    name = f"calibrate-{lang}-{objective}"
    if (found := done(name)) is not None:
        return found
    model_dir = out / "calibrate" / name
    subprocess.run(["rm", "-rf", str(model_dir)], check=True)
    start = time.time()
    run(pretrain_args(corpus(lang, "general", data, out), model_dir, objective, 600, 600, 200))
    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    examples_per_s = statistics.mean(r["examples_per_s"] for r in rows[1:])
    return record(name, {"steps": 600, "batch": BATCH, "seq_len": SEQ_LEN},
                  {"steps_per_s": examples_per_s / BATCH}, time.time() - start)  # fmt: skip


def step_cost(lang: str, data: Path, out: Path) -> dict:
    """An ELECTRA step against an MLM step of the same discriminator (tiny), in one process: both
    train on the same 50 real batches held in memory (no input pipeline in the way), in turns, 3
    rounds of 150 steps; each side's best round."""
    name = f"step-cost-{lang}"
    if (found := done(name)) is not None:
        return found
    import keras
    import tensorflow as tf

    from launch.optimizer import build_optimizer
    from launch.run_model import model_io, pretraining_model
    from model.config import BertConfig
    from model.pretraining import Objective
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.reader.dynamic_masking import DynamicMasking
    from pipeline.schema import read_manifest

    start = time.time()
    manifest = read_manifest(str(corpus(lang, "general", data, out)))
    bert = BertConfig.preset("tiny", manifest.vocab.size)
    masking = DynamicMasking.for_corpus(manifest)
    models, streams = {}, {}
    for objective in OBJECTIVES:
        keras.utils.set_random_seed(0)
        spec = Objective(objective)
        model = pretraining_model(spec, bert, manifest, seed=0)
        optimizer = build_optimizer("adamw", learning_rate=LEARNING_RATE, warmup_steps=100, total_steps=10**6)
        spec.compile(model, optimizer, jit_compile=True)
        config = InputConfig(BATCH, seed=0, dynamic_masking=masking, **model_io(model))
        batches = list(make_dataset(manifest, "train", config).take(50))
        stacked = tf.nest.map_structure(lambda *parts: tf.stack(parts), *batches)
        streams[objective] = tf.data.Dataset.from_tensor_slices(stacked).repeat()
        model.fit(streams[objective], steps_per_epoch=50, epochs=1, verbose=0)  # compile
        models[objective] = model
    best = dict.fromkeys(OBJECTIVES, float("inf"))
    for _ in range(3):
        for objective, model in models.items():
            began = time.perf_counter()
            model.fit(streams[objective], steps_per_epoch=150, epochs=1, verbose=0)
            best[objective] = min(best[objective], (time.perf_counter() - began) / 150)
    result = {"ms_per_step": {o: 1000 * t for o, t in best.items()}, "ratio": best["electra"] / best["mlm"]}
    return record(name, {"preset": "tiny", "batch": BATCH, "seq_len": SEQ_LEN, "rounds": 3, "steps": 150},
                  result, time.time() - start)  # fmt: skip


def schedule(lang: str, objective: str, data: Path, out: Path) -> dict[int, int]:
    """Minute -> step of the run's checkpoints: 5 minutes at the calibrated rate, rounded to 100
    steps, and its multiples (so one checkpoint interval serves every minute)."""
    rate = calibrate(lang, objective, data, out)["steps_per_s"]
    five = max(100, round(rate * 300 / 100) * 100)
    return {m: five * m // 5 for m in MINUTES}


def pretrain(lang: str, objective: str, source: str, data: Path, out: Path) -> tuple[Path, dict[int, int]]:
    """The run (resumed if it was stopped) and its minute -> step schedule; its masked-LM figures
    at each checkpoint go into the cell."""
    steps = schedule(lang, objective, data, out)
    name = f"pretrain-{lang}-{objective}-{source}"
    model_dir = out / "runs" / f"{lang}-{objective}-{source}"
    if done(name) is None:
        start = time.time()
        corpus_dir = corpus(lang, source, data, out)
        run(pretrain_args(corpus_dir, model_dir, objective, steps[MINUTES[-1]], steps[MINUTES[0]], 100))
        rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
        at = {r["step"]: r for r in rows}
        curve = {str(m): {k: at[s].get(k) for k in ("val_loss", "val_mlm_accuracy", "val_rtd_accuracy",
                                                      "val_replaced_fraction")}
                 for m, s in steps.items()}  # fmt: skip
        record(name, {"steps": steps, "corpus": str(corpus_dir.relative_to(out))},
               {"validation": curve, "eval": json.loads((model_dir / "eval.json").read_text())},
               time.time() - start)  # fmt: skip
    return model_dir, steps


# === Fine-tuning ===


def finetune(name: str, lang: str, data: Path, out: Path, seed: int, **source) -> dict:
    """One fine-tuning cell: launch.finetune on the labelled subset; test and validation accuracy."""
    from launch.finetune.config import FinetuneConfig

    fetcher, ext = LANGUAGES[lang]["task"]
    config = FinetuneConfig(
        train=str(labelled_subset(lang, data, out)),
        validation=str(data / fetcher / f"validation.{ext}"),
        test=str(data / fetcher / f"test.{ext}"),
        output=str(out / "finetune" / name),
        seq_len=SEQ_LEN, epochs=EPOCHS, patience=0, learning_rate=FINETUNE_LR, global_batch_size=BATCH,
        strategy="cpu", seed=seed, export=False, **source,
    )  # fmt: skip
    return CELLS.finetune(name, config)


def checkpoint(model_dir: Path, step: int) -> str:
    return str(model_dir / "checkpoints" / f"ckpt-{step}")


# === The grid ===


def cells(data: Path, out: Path):
    """Every cell, in the order that reaches first results soonest: name -> thunk."""
    grid = {}
    for lang in LANGUAGES:
        grid[f"step-cost-{lang}"] = lambda lang=lang: step_cost(lang, data, out)
        for objective in OBJECTIVES:
            name = f"calibrate-{lang}-{objective}"
            grid[name] = lambda lang=lang, o=objective: calibrate(lang, o, data, out)
    for lang in LANGUAGES:
        for objective in OBJECTIVES:
            grid[f"pretrain-{lang}-{objective}-general"] = lambda lang=lang, o=objective: pretrain(
                lang, o, "general", data, out
            )
        for seed in SEEDS:  # the run supplies the vocab and shape; its weights stay unread
            grid[f"ft-{lang}-scratch-seed{seed}"] = lambda lang=lang, s=seed: finetune(
                f"ft-{lang}-scratch-seed{s}", lang, data, out, s,
                model_dir=str(pretrain(lang, "mlm", "general", data, out)[0]), from_scratch=True,
            )  # fmt: skip
        for objective in OBJECTIVES:
            for recipe, (pooling, decay) in RECIPES.items():
                name = f"recipe-{lang}-{objective}-{recipe}"
                grid[name] = lambda n=name, lang=lang, o=objective, p=pooling, d=decay: finetune(
                    n, lang, data, out, 0, pooling=p, layer_decay=d,
                    **_source(lang, o, "general", MINUTES[-1], data, out),
                )  # fmt: skip
            for minutes in MINUTES:
                for seed in SEEDS if minutes == MINUTES[-1] else SEEDS[:1]:
                    name = f"ft-{lang}-{objective}-general-{minutes}min-seed{seed}"
                    grid[name] = lambda n=name, lang=lang, o=objective, m=minutes, s=seed: finetune(
                        n, lang, data, out, s, **_source(lang, o, "general", m, data, out)
                    )
    blocks = ("mlm-bert", "mlm-modern")
    for run_name in blocks:
        grid[f"calibrate-en-{run_name}"] = lambda r=run_name: calibrate("en", r, data, out)
    for run_name in blocks:
        grid[f"pretrain-en-{run_name}-general"] = lambda r=run_name: pretrain("en", r, "general", data, out)
    for minutes in reversed(MINUTES):  # the 30-minute seeds first: the headline comparison
        for seed in SEEDS if minutes == MINUTES[-1] else SEEDS[:1]:
            for run_name in blocks:
                name = f"ft-en-{run_name}-general-{minutes}min-seed{seed}"
                grid[name] = lambda n=name, r=run_name, m=minutes, s=seed: finetune(
                    n, "en", data, out, s, **_source("en", r, "general", m, data, out)
                )
    for lang in LANGUAGES:
        for objective in reversed(OBJECTIVES):  # ELECTRA first: the one Krishna et al. measured
            grid[f"pretrain-{lang}-{objective}-self"] = lambda lang=lang, o=objective: pretrain(
                lang, o, "self", data, out
            )
            for seed in SEEDS:
                name = f"ft-{lang}-{objective}-self-30min-seed{seed}"
                grid[name] = lambda n=name, lang=lang, o=objective, s=seed: finetune(
                    n, lang, data, out, s, **_source(lang, o, "self", 30, data, out)
                )
    return grid


def _source(lang: str, objective: str, source: str, minutes: int, data: Path, out: Path) -> dict:
    model_dir, steps = pretrain(lang, objective, source, data, out)
    return {"model_dir": str(model_dir), "checkpoint": checkpoint(model_dir, steps[minutes])}


# === Report ===


def load_results() -> dict[str, dict]:
    return CELLS.results()


def report(results: dict[str, dict]) -> dict:
    """Tables and targets from whatever cells exist (missing ones are named, not guessed)."""
    out = {"missing": [], "languages": {}}
    for lang in LANGUAGES:
        scratch = [results[f"ft-{lang}-scratch-seed{s}"]["test_accuracy"]
                   for s in SEEDS if f"ft-{lang}-scratch-seed{s}" in results]  # fmt: skip
        entry = {"scratch": summary(scratch) if scratch else None, "objectives": {}}
        for objective in OBJECTIVES:
            rows = {}
            for source in ("general", "self"):
                for minutes in MINUTES:
                    names = [f"ft-{lang}-{objective}-{source}-{minutes}min-seed{s}" for s in SEEDS]
                    found = [results[n]["test_accuracy"] for n in names if n in results]
                    if found:
                        rows[f"{source}-{minutes}"] = summary(found)
            entry["objectives"][objective] = rows
        calibrated = {o: results.get(f"calibrate-{lang}-{o}", {}).get("steps_per_s") for o in OBJECTIVES}
        entry["steps_per_s"] = calibrated  # whole runs, input pipeline included: what minutes are
        if f"step-cost-{lang}" in results:
            entry["electra_step_cost"] = results[f"step-cost-{lang}"]["ratio"]
        out["languages"][lang] = entry
    out["targets"] = targets(out)
    out["blocks"] = blocks(results)
    return out


def targets(table: dict) -> dict:
    """The issue's three targets, where their cells exist."""
    found = {}
    beats = {}
    for lang, entry in table["languages"].items():
        scratch = entry["scratch"]
        best = None
        for objective, rows in entry["objectives"].items():
            for key, row in rows.items():
                if row["n"] == len(SEEDS) and (best is None or row["mean"] > best[1]["mean"]):
                    best = (f"{objective}-{key}", row)
        if scratch and best and scratch["n"] == len(SEEDS):
            margin = max(best[1]["spread"], scratch["spread"])
            gap = best[1]["mean"] - scratch["mean"]
            beats[lang] = {"best": best[0], "gap": gap, "larger_spread": margin, "met": gap > margin}
    found["best_recipe_beats_scratch"] = beats
    equal_time = {}
    for lang, entry in table["languages"].items():
        rows = entry["objectives"]
        if all("general-30" in rows[o] for o in OBJECTIVES):
            e, m = rows["electra"]["general-30"]["mean"], rows["mlm"]["general-30"]["mean"]
            equal_time[lang] = {"electra": e, "mlm": m, "met": e >= m}
    found["electra_at_least_mlm"] = equal_time
    found["electra_step_cost"] = {
        lang: {"ratio": entry["electra_step_cost"], "met": entry["electra_step_cost"] <= 1.35}
        for lang, entry in table["languages"].items()
        if "electra_step_cost" in entry
    }
    return found


def blocks(results: dict[str, dict]) -> dict:
    """BERT's block against ModernBERT's at equal pretraining minutes (English, MLM): steps/s,
    masked-LM accuracy on the general corpus's validation split, fine-tuned test accuracy."""
    out = {}
    for block, run_name in (("bert", "mlm-bert"), ("modernbert", "mlm-modern")):
        pretrained = results.get(f"pretrain-en-{run_name}-general", {}).get("validation", {})
        finetuned = {}
        for minutes in MINUTES:
            found = [results[n]["test_accuracy"] for s in SEEDS
                     if (n := f"ft-en-{run_name}-general-{minutes}min-seed{s}") in results]  # fmt: skip
            if found:
                finetuned[minutes] = summary(found)
        out[block] = {
            "steps_per_s": results.get(f"calibrate-en-{run_name}", {}).get("steps_per_s"),
            "val_mlm_accuracy": {int(m): row["val_mlm_accuracy"] for m, row in pretrained.items()},
            "finetuned": finetuned,
        }
    return out


def plot(table: dict, path: Path) -> None:
    """The gap to from-scratch (test accuracy, mean over the seeds there are) against pretraining
    minutes, per language and objective; the self-pretrained runs as single marks at 30."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LANGUAGES), figsize=(11, 4.2), sharey=True)
    for ax, (lang, entry) in zip(axes, table["languages"].items(), strict=True):
        scratch = entry["scratch"]
        if not scratch:
            continue
        ax.axhline(0, color="grey", lw=1)
        ax.axhspan(-scratch["spread"] / 2, scratch["spread"] / 2, color="grey", alpha=0.15,
                   label="from scratch (band: its seed spread)")  # fmt: skip
        for objective, rows in entry["objectives"].items():
            points = [
                (m, rows[f"general-{m}"]["mean"] - scratch["mean"]) for m in MINUTES if f"general-{m}" in rows
            ]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=f"{objective}, general text")
            if "self-30" in rows:
                ax.plot([30], [rows["self-30"]["mean"] - scratch["mean"]], marker="*", ms=12, ls="none",
                        label=f"{objective}, the task's own text")  # fmt: skip
        ax.set_title(f"{lang}: fine-tuned test accuracy - from scratch ({scratch['mean']:.3f})")
        ax.set_xlabel("pretraining minutes on 2 CPU cores (tiny model)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("gap (accuracy points / 100)")
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(REPO / "out/quality"), help="runs and corpora (not committed)")
    parser.add_argument("--data", default=str(REPO / "data"))
    parser.add_argument("--only", default="", help="comma list: run the cells whose names contain one")
    parser.add_argument("--report", action="store_true", help="only the tables and plot, from the results")
    parser.add_argument("--dry_run", action="store_true", help="list the cells and whether each is done")
    args = parser.parse_args()
    data, out = Path(args.data), Path(args.out)
    if not args.report:
        from pipeline.fetch.corpora import FETCHERS

        for lang in LANGUAGES.values():
            for fetcher, _ in (lang["general"], lang["task"]):
                FETCHERS[fetcher](data)
        CELLS.run_grid(cells(data, out), args.only, args.dry_run)
    table = report(load_results())
    if any(entry["scratch"] for entry in table["languages"].values()):
        plot(table, RESULTS / "quality.png")
    print(json.dumps(table, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
