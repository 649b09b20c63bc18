"""Adapt a released checkpoint to your domain in one command: build a corpus with the release's own
vocab (extended with the domain's words if asked), continue its masked-LM pretraining with a head
warm-up, and export the result in the release's own format. Re-running the same command resumes.

    python -m launch.adapt --release data/releases/all-MiniLM-L6-v2 --input 'domain/*.txt' --output out/adapt
    make adapt RELEASE=DIR INPUT='domain/*.txt' [OUT=out/adapt] [TRAIN_STEPS=N] [EXTEND=N] [EXTEND_MIN=K]

The steps, each skipped when its output is already there:
  1. OUTPUT/corpus   `pipeline.build_corpus --vocab RELEASE [--extend_vocab N] [--extend_min_count K]`
                     (plus --corpus_args)
  2. OUTPUT/run      `launch.pretrain --init_checkpoint RELEASE --head_warmup_steps ...
                     [--extension_init pieces|mean|random] [--warmup_embeddings]` (resumes; plus
                     --train_args, which override the defaults below)
  3. OUTPUT/export   `launch.export --format hf` for a Hugging Face release, `google` for a
                     google-research/bert one: ready for `launch.finetune --init_checkpoint` and
                     for transformers

Replay of general text against forgetting is a mixture: --train_args "--data domain=OUTPUT/corpus:3,
general=GENERAL_CORPUS:1" (docs/adapt.md). bench/adapt.py measures the defaults (RECIPE) against
the alternatives; docs/benchmarks/adapt.md has the grid and where it stands.
"""

from __future__ import annotations

import shlex
import sys

from common.cli import Parser, first_paragraph, run_cli
from common.errors import ConfigError

# Continued pretraining's defaults: a release's encoder is protected by a low peak rate and by the
# head warm-up, a tenth of the run each; the fresh head learns 300x faster, or at 3e-5 it barely
# learns at all (docs/benchmarks/adapt.md: 34 head-only steps leave it at a uniform guess at 1x,
# masked-LM loss 10.6, and at 7.0 at 300x; 1000x gains 0.08 more). bench/adapt.py's cells tapt
# (these), tapt-lr1e-4 (the rate that lost 5 points in issue 36's first attempt), tapt-nohw (no
# warm-up) and tapt-m1 (no multiplier) test them.
RECIPE = {
    "learning_rate": 3e-5,
    "fresh_lr_multiplier": 300,  # the MLM head a release lacks: 9e-3 at the peak
    "warmup_fraction": 0.1,  # of --train_steps: the learning rate's linear warm-up
    "head_warmup_fraction": 0.1,  # of --train_steps: only what the release lacks trains
    "global_batch_size": 32,
}
CORPUS_DEFAULTS = ["--seq_len", "128", "--max_predictions", "20", "--dupe_factor", "1"]
LOG_INTERVALS = 20  # log lines per run; the head warm-up and checkpoints fall on them


def release_source(release: str) -> tuple[str, str]:
    """(--init_checkpoint, --format of the export) for a release folder: a Hugging Face folder
    (config.json, a sentence-transformers one included) or a google-research/bert one."""
    from launch.interop.formats import HF_PREFIX, locate
    from pipeline import files

    release = release.removeprefix(HF_PREFIX).rstrip("/")  # the folder, however it is named
    if files.exists(f"{release}/bert_model.ckpt.index"):
        return release, "google"
    if not (files.exists(f"{release}/config.json") or files.exists(f"{release}/modules.json")):
        raise ConfigError(
            f"--release {release}: neither a Hugging Face folder (config.json) nor a google-research/bert "
            "one (bert_model.ckpt.index)"
        )
    fmt, _ = locate(f"hf:{release}")
    if fmt.export is None:
        raise ConfigError(f"--release {release}: no export format for a {fmt.model_type} release")
    return f"hf:{release}", fmt.export


def small_validation(corpus: str) -> list[str]:
    """--eval_steps 0 where a small domain's validation split holds less than one batch (the run
    still trains; its masked-LM figures are then only the training ones)."""
    from pipeline.schema import read_manifest

    records = read_manifest(corpus).split("validation").instances
    if records >= RECIPE["global_batch_size"]:
        return []
    print(f"note: {corpus}'s validation split holds {records} records, less than a batch: no validation "
          "during the run (more text, or --corpus_args '--validation_fraction F', gives one)",
          flush=True)  # fmt: skip
    return ["--eval_steps", "0"]


def train_args(args, init_checkpoint: str, extra: list[str] = ()) -> list[str]:
    steps = args.train_steps
    interval = max(1, steps // LOG_INTERVALS)
    head = max(interval, round(RECIPE["head_warmup_fraction"] * steps / interval) * interval)
    return [
        "--data", f"{args.output}/corpus", "--model_dir", f"{args.output}/run",
        "--init_checkpoint", init_checkpoint, "--train_steps", str(steps),
        "--learning_rate", str(RECIPE["learning_rate"]),
        "--fresh_lr_multiplier", str(RECIPE["fresh_lr_multiplier"]),
        "--warmup_steps", str(round(RECIPE["warmup_fraction"] * steps)),
        "--head_warmup_steps", str(head), "--global_batch_size", str(RECIPE["global_batch_size"]),
        "--dynamic_masking", "--log_every", str(interval), "--checkpoint_every", str(interval * 5),
        "--eval_every", str(interval * 5), "--extension_init", args.extension_init,
        *(["--warmup_embeddings"] if args.embeddings_first else []), *extra,
        *shlex.split(args.train_args),
    ]  # fmt: skip


def adapt(argv: list[str] | None) -> None:
    from launch import backend, export, pretrain

    backend.check()
    from pipeline import build_corpus, files

    args = parser().parse_args(argv)
    if args.train_steps < LOG_INTERVALS:
        raise ConfigError(f"--train_steps {args.train_steps}: expected >= {LOG_INTERVALS}")
    init_checkpoint, export_format = release_source(args.release)
    args.release = init_checkpoint.removeprefix("hf:")
    corpus = f"{args.output}/corpus"
    if files.exists(f"{corpus}/manifest.json"):
        print(f"1/3 corpus: {corpus} is built; skipped (remove it to rebuild)", flush=True)
    else:
        print(f"1/3 corpus: {args.input} with {args.release}'s vocab -> {corpus}", flush=True)
        extend = ["--extend_vocab", str(args.extend_vocab)] if args.extend_vocab else []
        extend += ["--extend_min_count", str(args.extend_min_count)] if args.extend_min_count else []
        corpus_argv = ["--input", args.input, "--output", corpus, "--vocab", args.release, *extend]
        status = build_corpus.main([*corpus_argv, *CORPUS_DEFAULTS, *shlex.split(args.corpus_args)])
        if status:
            sys.exit(status)
    print(f"2/3 continued pretraining from {init_checkpoint} -> {args.output}/run", flush=True)
    status = pretrain.main(train_args(args, init_checkpoint, small_validation(corpus)))
    if status:
        sys.exit(status)
    print(f"3/3 export ({export_format}, the release's format) -> {args.output}/export", flush=True)
    status = export.main(["--model_dir", f"{args.output}/run", "--format", export_format,
                          "--output", f"{args.output}/export"])  # fmt: skip
    if status:
        sys.exit(status)
    print(f"adapted: {args.output}/export; fine-tune it with python -m launch.finetune --init_checkpoint "
          f"{'hf:' if export_format == 'hf' else ''}{args.output}/export ...", flush=True)  # fmt: skip


def parser() -> Parser:
    p = Parser(prog="python -m launch.adapt", description=first_paragraph(__doc__))
    p.add_argument("--release", required=True, help="a released model's folder (Hugging Face or Google)")
    p.add_argument("--input", required=True, help="the domain's text: what build_corpus --input takes")
    p.add_argument("--output", default="out/adapt", help="corpus/, run/ and export/ go here")
    p.add_argument("--train_steps", type=int, default=1000, help="continued pretraining updates")
    p.add_argument("--extend_vocab", type=int, default=0, help="add up to N domain tokens to the vocab")
    p.add_argument(
        "--extend_min_count",
        type=int,
        default=0,
        help="add every domain token used at least K times (a script the release lacks)",
    )
    p.add_argument(
        "--extension_init",
        choices=("pieces", "mean", "random"),
        default="pieces",
        help="how added tokens the release knows only as [UNK] start (launch.pretrain's flag)",
    )
    p.add_argument(
        "--embeddings_first",
        action="store_true",
        help="the head warm-up trains the token embeddings too, under the frozen encoder",
    )
    p.add_argument("--corpus_args", default="", help="more pipeline.build_corpus flags, one string")
    p.add_argument("--train_args", default="", help="more launch.pretrain flags (they win), one string")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(adapt, argv)


if __name__ == "__main__":
    sys.exit(main())
