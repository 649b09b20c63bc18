"""Write a fine-tuned model's raw-string SavedModel again from what its run left in OUTPUT
(config.json, eval.json and the `.keras` model), under TensorFlow.

A run on JAX calls it in a TensorFlow process of its own: the SavedModel's graph holds
tensorflow-text's ops beside the model, which jax2tf cannot carry.

    python -m launch.finetune.serve out/demo/run/finetune/rt_reviews   # writes .../serving/
"""

from __future__ import annotations

import json
import sys

from common.cli import Parser, first_paragraph, run_cli
from common.errors import ConfigError


def serve(output: str) -> str:
    """Writes OUTPUT/serving from the run's files; returns its path."""
    import keras

    import model  # noqa: F401 - registers the layers the .keras file names
    from launch.finetune import task_for
    from launch.finetune.config import FinetuneConfig
    from launch.finetune.pretrained import pretrained
    from launch.finetune.skeleton import SERVING, save_serving
    from pipeline import files

    if keras.backend.backend() != "tensorflow":
        raise ConfigError(
            f"KERAS_BACKEND={keras.backend.backend()}: a SavedModel is written under tensorflow"
        )
    output = output.rstrip("/")
    for name in ("config.json", "eval.json"):
        if not files.exists(f"{output}/{name}"):
            raise ConfigError(f"{output}: no {name}; expected the folder of a launch.finetune run")
    run = json.loads(files.read_text(f"{output}/config.json"))
    results = json.loads(files.read_text(f"{output}/eval.json"))
    config = FinetuneConfig(**run["config"])
    task = task_for(config, pretrained(config))
    task.restore(run, results)
    path = f"{output}/{SERVING}"
    save_serving(task, keras.saving.load_model(f"{output}/{task.model_file}"), path)
    return path


def parser() -> Parser:
    p = Parser(prog="python -m launch.finetune.serve", description=first_paragraph(__doc__))
    p.add_argument("output", help="the folder a launch.finetune run wrote")
    return p


def _serve(argv: list[str] | None) -> None:
    print(f"wrote {serve(parser().parse_args(argv).output)}")


def main(argv: list[str] | None = None) -> int:
    return run_cli(_serve, argv)


if __name__ == "__main__":
    sys.exit(main())
