"""Does pretraining pay off for token tagging? A pretrained tiny encoder against the same model from
scratch on People's Daily NER, softmax and CRF heads, 3 seeds each (issue 37's proof).

    .venv/bin/python bench/tagging.py [--only PATTERN] [--dry_run] [--report]
    make bench-tagging           # the same; about an hour and a half on 2 cores, in cells

The grid:
- **Task**: pd_ner (`python -m pipeline.fetch_corpora pd_ner`: People's Daily 1998, PER / LOC / ORG, a
  character per line). Fine-tuning reads 2,000 training sentences (a fixed draw), picks its best
  epoch on 1,000 validation sentences (a fixed draw), and reports entity F1 on the whole test
  split (6,575 sentences). Nothing is tuned on test.
- **Pretraining**: the from-scratch study's recipe (bench/quality.py: tiny preset, seq_len 64,
  WordPiece 8,000 trained on the corpus, jieba whole-word masking, dynamic masking, 30 minutes of
  this machine counted in steps at its calibrated rate, 5.49 steps/s: 9,600 steps) on zh_news
  with every validation and test sentence of pd_ner taken out. zh_news is the same month of
  People's Daily as pd_ner, so the study's own run read the test sentences' text; this one reads
  only the training split's (`corpus` records how many held-out sentences are still found in
  it: 0 is the check).
- **Fine-tuning**: `launch.finetune --task tag`, seq_len 64, doc_stride 32, batch 32, 8 epochs,
  the default rate for the width (5e-4), layer decay 0.8; `--crf` with its default transition
  rate (100x). Pretrained and `--from_scratch` (the run's vocab and shape, random weights) with
  the same budget, seeds 0, 1, 2.
- **The CRF's rate** (`crf-rate` cells): the pretrained CRF tagger, seed 0, its transitions at
  1, 10, 100 (the default) and 1000 x the rate, compared on validation only.
- **A release**: all-MiniLM-L6-v2 (data/releases; English-trained; its uncased WordPiece holds
  only 244 CJK characters, so most of pd_ner's characters are [UNK] to it), fine-tuned the same
  way, 3 seeds, CRF: the one release this machine has, where a Chinese one would be the fair
  reference.
- **Span extraction** (`span` cells): no reading-comprehension set was found on a registry this
  machine reaches, so pd_ner's same draws are asked as one (the MRC framing of NER, Li et al.
  2020): for each sentence and type, "which person (place, organisation) does it name?", any of
  its entities of that type a right answer (SQuAD's best over gold answers), unanswerable
  (SQuAD 2.0) where it names none. `launch.finetune --task span`, the same seq_len, stride,
  batch, epochs and rate, CMRC 2018's character-level exact match and F1; pretrained and
  scratch, seeds 0, 1, 2.
- Cells write bench/results/tagging/CELL.json as each finishes and a rerun skips them; the report
  gives entity F1 per type, the mean, the seed spread and the gap to scratch.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.cells import Cells, command_line, run, summary  # noqa: E402

RESULTS = REPO / "bench" / "results" / "tagging"
CELLS = Cells(RESULTS)
done, record = CELLS.done, CELLS.record

SEEDS = (0, 1, 2)
SPAN_QUESTIONS = {
    "PER": "句中提到的人名是什么？",
    "LOC": "句中提到的地名是什么？",
    "ORG": "句中提到的机构名是什么？",
}
CRF_RATES = (1, 10, 1000)  # and 100, the default: ft-pretrained-crf-seed0
HEADS = ("softmax", "crf")
TRAIN_SENTENCES, VALIDATION_SENTENCES = 2000, 1000
SEQ_LEN, DOC_STRIDE, BATCH, EPOCHS = 64, 32, 32, 8
# bench/quality.py's Chinese MLM run: its calibrated rate (calibrate-zh-mlm) x 30 minutes, in the
# 100-step units its schedule uses
PRETRAIN_STEPS, PRETRAIN_LR = 9600, 1e-3


def conll_sentences(path: Path) -> list[str]:
    return [block for block in path.read_text(encoding="utf-8").split("\n\n") if block.strip()]


def sentence_text(block: str) -> str:
    return "".join(line.split(" ")[0] for line in block.splitlines())


def subsets(data: Path, out: Path) -> dict[str, Path]:
    """The training and validation draws (fixed seeds) and the whole test split, as CoNLL files."""
    folder = out / "pd_ner"
    files = {split: folder / f"{split}.conll" for split in ("train", "validation", "test")}
    if all(path.exists() for path in files.values()):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", TRAIN_SENTENCES), ("validation", VALIDATION_SENTENCES), ("test", None)):
        blocks = conll_sentences(data / "pd_ner" / f"{split}.conll")
        if count is not None:
            blocks = random.Random(0).sample(blocks, count)
        files[split].write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return files


def span_sets(data: Path, out: Path) -> dict[str, Path]:
    """The same draws as SQuAD 2.0 files: a question per sentence and type (SPAN_QUESTIONS), its
    answers every entity of that type in the sentence, none (unanswerable) where there is none."""
    from launch.finetune.tag.data import read_tagged

    folder = out / "pd_ner_span"
    files = {split: folder / f"{split}.json" for split in ("train", "validation", "test")}
    if all(path.exists() for path in files.values()):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    for split, conll in subsets(data, out).items():
        paragraphs = []
        for i, example in enumerate(read_tagged(str(conll)).examples):
            qas = []
            for kind, question in SPAN_QUESTIONS.items():
                answers = [{"text": example.text[start:end], "answer_start": start}
                           for found, start, end in example.entities if found == kind]  # fmt: skip
                qas.append({"id": f"{split}-{i}-{kind}", "question": question, "answers": answers,
                            "is_impossible": not answers})  # fmt: skip
            paragraphs.append({"context": example.text, "qas": qas})
        squad = {"version": "v2.0", "data": [{"title": "pd_ner", "paragraphs": paragraphs}]}
        files[split].write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    return files


def corpus(data: Path, out: Path, cells: Cells = CELLS) -> Path:
    """zh_news without pd_ner's validation and test sentences: each paragraph cut into sentences
    after 。！？ (pd_ner's cut), those of a held-out sentence's text dropped. `cells`: the bench
    that records it (bench/budget.py rebuilds it as its own)."""
    folder = out / "corpus"
    if cells.done("corpus") is not None and (folder / "manifest.json").exists():
        return folder
    start = time.time()
    source, found = training_text(data, out)
    seconds = run(["-m", "pipeline.build_corpus", "--input", str(source), "--output", str(folder),
                   "--seq_len", str(SEQ_LEN), "--max_predictions", "10", "--dupe_factor", "1",
                   "--vocab_size", "8000", "--vocab_model_type", "wordpiece",
                   "--word_segmenter", "jieba", "--whole_word_mask"])  # fmt: skip
    found = {**found, "build_seconds": round(seconds, 1)}
    cells.record("corpus", {"source": "zh_news minus pd_ner validation and test"}, found, time.time() - start)
    return folder


def training_text(data: Path, out: Path) -> tuple[Path, dict]:
    """out/zh_news_train_split.txt, zh_news without pd_ner's validation and test sentences (the
    pretraining's text: bench/gap.py adapts a release on it too), and what was dropped."""
    held_out = {
        sentence_text(block)
        for split in ("validation", "test")
        for block in conll_sentences(data / "pd_ner" / f"{split}.conll")
    }
    paragraphs, dropped = [], 0
    news = (data / "zh_news" / "peoples_daily_199801.txt").read_text(encoding="utf-8")
    for paragraph in news.split("\n\n"):
        sentences = [s for s in re.split(r"(?<=[。！？])", paragraph.strip()) if s]
        kept = [s for s in sentences if s not in held_out]
        dropped += len(sentences) - len(kept)
        if kept:
            paragraphs.append("".join(kept))
    text = "\n\n".join(paragraphs) + "\n"
    still = sum(s in text for s in held_out if len(s) >= 10)  # a held-out sentence another cut kept
    source = out / "zh_news_train_split.txt"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(text, encoding="utf-8")
    found = {"paragraphs": len(paragraphs), "sentences_dropped": dropped, "characters": len(text),
             "held_out_sentences_of_10_or_more_still_in_it": still}  # fmt: skip
    return source, found


def pretrain(data: Path, out: Path, cells: Cells = CELLS, name: str = "pretrain", flags: tuple = (),
             steps: int = PRETRAIN_STEPS) -> Path:  # fmt: skip
    """The pretraining run, as cell `name` of `cells` in out/run (another name: out/NAME, with
    `flags` added to launch.pretrain's: bench/dropout.py's arm without attention dropout; other
    `steps`, warmed up for a tenth of them: bench/gap.py's own run at the adaptations' budget).
    The cell keeps the held-out figures of every evaluation (`curve`) beside the last ones."""
    model_dir = out / ("run" if name == "pretrain" else name)
    if cells.done(name) is None:
        start = time.time()
        corpus_dir = corpus(data, out, cells)
        run(["-m", "launch.pretrain", "--data", str(corpus_dir), "--model_dir", str(model_dir),
             "--objective", "mlm", "--preset", "tiny", "--strategy", "cpu", "--global_batch_size", "32",
             "--learning_rate", str(PRETRAIN_LR), "--train_steps", str(steps),
             "--warmup_steps", str(steps // 10), "--dynamic_masking", "--log_every", "200",
             "--checkpoint_every", "1600", "--eval_every", "1600", "--eval_steps", "20",
             "--keep_checkpoints", "2", "--no-export", *flags])  # fmt: skip
        found = {"eval": json.loads((model_dir / "eval.json").read_text()), "curve": curve_of(model_dir)}
        config = {
            "steps": steps,
            "preset": "tiny",
            "seq_len": SEQ_LEN,
            **({"flags": list(flags)} if flags else {}),
        }
        cells.record(name, config, found, time.time() - start)
    elif run_lost(out, cells, name):
        sys.exit(
            f"{model_dir}: the pretraining run that {cells.path(name).name} records is not here, and a "
            "new one would be another encoder than the finished cells'; to start the pretrained cells over, "
            f"remove {cells.path(name)} and the cells fine-tuned from it"
        )
    return model_dir


def curve_of(run_dir: Path) -> list[dict]:
    """A run's held-out masked-LM figures at each of its evaluations (history.jsonl)."""
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    keys = ("step", "val_mlm_accuracy", "val_loss")
    return [{k: r[k] for k in keys} for r in rows if "val_mlm_accuracy" in r]


def run_lost(out: Path, cells: Cells = CELLS, name: str = "pretrain") -> bool:
    """NAME.json is here but its run is not: out/ is not committed, so a new checkout lacks it."""
    model_dir = out / ("run" if name == "pretrain" else name)
    return cells.done(name) is not None and not (model_dir / "eval.json").exists()


def finetune(name: str, data: Path, out: Path, head: str, seed: int, from_scratch: bool = False,
             cells: Cells = CELLS, **source) -> dict:  # fmt: skip
    """One tagging cell, recorded in `cells` (bench/gap.py's own); `source`: the encoder's
    FinetuneConfig fields (default: this bench's pretraining)."""
    if (found := cells.done(name)) is not None:
        return found
    import keras

    from launch.finetune import finetune as run_finetune
    from launch.finetune.config import FinetuneConfig

    files = subsets(data, out)
    config = FinetuneConfig(
        task="tag", crf=head == "crf", from_scratch=from_scratch,
        **(source or {"model_dir": str(pretrain(data, out))}),
        train=str(files["train"]), validation=str(files["validation"]), test=str(files["test"]),
        output=str(out / "finetune" / name), seq_len=SEQ_LEN, doc_stride=DOC_STRIDE, global_batch_size=BATCH,
        epochs=EPOCHS, patience=0, strategy="cpu", seed=seed, export=False,
    )  # fmt: skip
    start = time.time()
    summary_ = run_finetune(config)
    keras.backend.clear_session()
    figures = json.loads((out / "finetune" / name / "eval.json").read_text())
    test = figures["test"]
    result = {"test_entity_f1": summary_["entity_f1"], "validation_entity_f1": figures["entity_f1"],
              "test_per_type": {k: v["f1"] for k, v in test["per_type"].items()},
              "unaligned_entities": test["unaligned_entities"], "best_epoch": summary_["best_epoch"],
              "recipe": figures["recipe"]}  # fmt: skip
    config_json = {k: v for k, v in vars(config).items() if v is not None and k != "output"}
    return cells.record(name, config_json, result, time.time() - start)


def cells(data: Path, out: Path) -> dict:
    grid = {"corpus": lambda: corpus(data, out), "pretrain": lambda: pretrain(data, out)}
    lost = run_lost(out)
    if lost:  # --from_scratch takes the run's vocab and shape too
        print(
            "the pretraining run is not in this checkout: the pretrained and scratch cells are left out "
            "(pretrain() says more)"
        )
    for seed in SEEDS:  # seed 0 of every model first: a first comparison soonest
        for head in HEADS:
            for source in () if lost else ("pretrained", "scratch"):
                name = f"ft-{source}-{head}-seed{seed}"
                grid[name] = lambda n=name, h=head, s=seed, src=source: finetune(
                    n, data, out, h, s, from_scratch=src == "scratch"
                )
    for seed in SEEDS:
        for source in () if lost else ("pretrained", "scratch"):
            name = f"ft-{source}-span-seed{seed}"
            grid[name] = lambda n=name, s=seed, src=source: finetune_span(n, data, out, s, src == "scratch")
    for multiplier in () if lost else CRF_RATES:
        name = f"crf-rate-{multiplier}"
        grid[name] = lambda n=name, m=multiplier: finetune(n, data, out, "crf", 0, crf_lr_multiplier=m,
                                                             model_dir=str(pretrain(data, out)))  # fmt: skip
    release = data / "releases" / "all-MiniLM-L6-v2"
    for seed in SEEDS:
        name = f"ft-release-crf-seed{seed}"
        grid[name] = lambda n=name, s=seed: finetune(n, data, out, "crf", s, init_checkpoint=f"hf:{release}")
    return grid


def finetune_span(name: str, data: Path, out: Path, seed: int, from_scratch: bool) -> dict:
    if (found := done(name)) is not None:
        return found
    import keras

    from launch.finetune import finetune as run_finetune
    from launch.finetune.config import FinetuneConfig

    files = span_sets(data, out)
    config = FinetuneConfig(
        task="span", from_scratch=from_scratch, model_dir=str(pretrain(data, out)),
        train=str(files["train"]), validation=str(files["validation"]), test=str(files["test"]),
        output=str(out / "finetune" / name), seq_len=SEQ_LEN, doc_stride=DOC_STRIDE, max_query_length=16,
        global_batch_size=BATCH, epochs=EPOCHS, patience=0, strategy="cpu", seed=seed, export=False,
    )  # fmt: skip
    start = time.time()
    run_finetune(config)
    keras.backend.clear_session()
    figures = json.loads((out / "finetune" / name / "eval.json").read_text())
    keep = ("metric", "questions", "exact_match", "f1", "has_answer_exact_match", "has_answer_f1",
            "no_answer_exact_match", "no_answer_f1")  # fmt: skip
    result = {"test": {k: figures["test"][k] for k in keep if k in figures["test"]},
              "validation": {k: figures[k] for k in keep if k in figures},
              "best_epoch": figures["best_epoch"], "recipe": figures["recipe"]}  # fmt: skip
    config_json = {k: v for k, v in vars(config).items() if v is not None and k != "output"}
    return record(name, config_json, result, time.time() - start)


def report(results: dict[str, dict]) -> dict:
    """Per model: test entity F1 by seed, mean and spread, per type (span: F1 and exact match, and
    on answerable and unanswerable questions); the gap to scratch."""
    table = {}
    for head in HEADS:
        for source in ("pretrained", "scratch", "release"):
            found = [results[n] for n in (f"ft-{source}-{head}-seed{s}" for s in SEEDS) if n in results]
            if found:
                table[f"{source}-{head}"] = {
                    "test_entity_f1": [round(r["test_entity_f1"], 4) for r in found],
                    **summary([r["test_entity_f1"] for r in found]),
                    "validation_mean": summary([r["validation_entity_f1"] for r in found])["mean"],
                    "per_type_mean": {
                        kind: round(sum(r["test_per_type"][kind] for r in found) / len(found), 4)
                        for kind in found[0]["test_per_type"]
                    },
                }
    gaps = {}
    for head in HEADS:
        a, b = table.get(f"pretrained-{head}"), table.get(f"scratch-{head}")
        if a and b and a["n"] == b["n"] == len(SEEDS):
            gaps[head] = {"gap": a["mean"] - b["mean"], "larger_spread": max(a["spread"], b["spread"])}
    for source in ("pretrained", "scratch"):
        found = [results[n] for n in (f"ft-{source}-span-seed{s}" for s in SEEDS) if n in results]
        if found:
            table[f"{source}-span"] = {
                "test_f1": [round(r["test"]["f1"], 4) for r in found],
                **summary([r["test"]["f1"] for r in found]),
                "test_exact_match_mean": summary([r["test"]["exact_match"] for r in found])["mean"],
                "has_answer_f1_mean": summary([r["test"]["has_answer_f1"] for r in found])["mean"],
                "no_answer_f1_mean": summary([r["test"]["no_answer_f1"] for r in found])["mean"],
                "validation_mean": summary([r["validation"]["f1"] for r in found])["mean"],
            }
    a, b = table.get("pretrained-span"), table.get("scratch-span")
    if a and b and a["n"] == b["n"] == len(SEEDS):
        gaps["span"] = {"gap": a["mean"] - b["mean"], "larger_spread": max(a["spread"], b["spread"])}
    named = {**{m: f"crf-rate-{m}" for m in CRF_RATES}, 100: "ft-pretrained-crf-seed0"}
    rates = {
        m: round(results[n]["validation_entity_f1"], 4) for m, n in sorted(named.items()) if n in results
    }
    return {"models": table, "pretrained_minus_scratch": gaps, "crf_rate_validation_f1": rates,
            "corpus": results.get("corpus"), "pretrain": results.get("pretrain")}  # fmt: skip


def main() -> int:
    from pipeline.fetch.corpora import minilm, pd_ner, zh_news

    out = REPO / "out" / "bench-tagging"
    return command_line(__doc__, CELLS, cells, report, out, fetch=(pd_ner, zh_news, minilm))


if __name__ == "__main__":
    sys.exit(main())
