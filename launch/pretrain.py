"""Pretrain BERT on a bertbeam corpus. Re-running the same command resumes where the last run stopped.

    python -m launch.pretrain --data out/corpus --model_dir out/run --preset tiny --train_steps 2000

Thin on purpose: the steps live in `launch/train.py`, the flags in `launch/config.py`.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: list[str] | None = None) -> int:
    from launch.config import ConfigError, TrainConfig
    from launch.strategy import StrategyError
    from launch.train import InputError, TrainError, train
    from pipeline.schema import ManifestError

    try:
        summary = train(TrainConfig.from_args(argv))
    except (ConfigError, StrategyError, TrainError, InputError, ManifestError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2, sort_keys=True))
    model_dir = summary["model_dir"]
    print_progress(model_dir, summary)
    print(
        f"done: checkpoints {model_dir}/checkpoints, TensorBoard logs {model_dir}/logs, eval "
        f"{model_dir}/eval.json, loss curve {model_dir}/loss.png, export {model_dir}/export"
    )
    return 0


def print_progress(model_dir: str, summary: dict) -> None:
    """What the run learned: masked-LM accuracy at the first log line and in the final evaluation."""
    from launch.train import read_history

    rows = read_history(model_dir)
    final = summary.get("eval", {}).get("mlm_accuracy")
    if rows and final is not None:
        first = rows[0]
        print(
            f"masked-LM accuracy: {first['mlm_accuracy']:.3f} over steps 1-{first['step']} -> "
            f"{final:.3f} on the validation split at step {summary['step']}"
        )


if __name__ == "__main__":
    sys.exit(main())
