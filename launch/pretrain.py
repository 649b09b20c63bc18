"""Pretrain BERT on a bertbeam corpus. Re-running the same command resumes where the last run stopped.

    python -m launch.pretrain --data out/corpus --model_dir out/run --preset tiny --train_steps 2000

Thin on purpose: the steps live in `launch/train.py`, the flags in `launch/config.py`.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    from common.cli import run_cli

    return run_cli(_pretrain, argv)


def _pretrain(argv: list[str] | None) -> None:
    from launch import backend

    backend.check()  # KERAS_BACKEND=torch, say: one line before anything is read or built
    from launch.config import TrainConfig
    from launch.train import train

    summary = train(TrainConfig.from_args(argv))
    print(json.dumps(summary, indent=2, sort_keys=True))
    model_dir = summary["model_dir"]
    print_progress(model_dir, summary)
    print(
        f"done: checkpoints {model_dir}/checkpoints, TensorBoard logs {model_dir}/logs, eval "
        f"{model_dir}/eval.json, loss curve {model_dir}/loss.png, export {model_dir}/export"
    )


def print_progress(model_dir: str, summary: dict) -> None:
    """What the run learned: masked-LM accuracy (and ELECTRA's discriminator accuracy) at the first
    log line and in the final evaluation."""
    from launch.logs import read_history
    from launch.run_dir import RunDir

    rows = read_history(RunDir(model_dir))
    final = summary.get("eval", {})
    if not rows or final.get("mlm_accuracy") is None:
        return
    first = rows[0]
    generator = "generator's " if "rtd_accuracy" in final else ""
    print(
        f"{generator}masked-LM accuracy: {first['mlm_accuracy']:.3f} over steps 1-{first['step']} -> "
        f"{final['mlm_accuracy']:.3f} on the validation split at step {summary['step']}"
    )
    if "rtd_accuracy" in final:
        print(
            f"replaced-token detection: accuracy {first['rtd_accuracy']:.3f} -> {final['rtd_accuracy']:.3f}, "
            f"recall on replaced tokens {first['rtd_recall']:.3f} -> {final['rtd_recall']:.3f} "
            f"({final['replaced_fraction']:.1%} of tokens replaced)"
        )


if __name__ == "__main__":
    sys.exit(main())
