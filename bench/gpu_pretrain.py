"""The real pretraining loop on one GPU (Keras on JAX, as the lent GPU image has no TensorFlow):
its MFU beside bench/gpu.py's synthetic one, a SIGKILL and a resume, and a Hugging Face export.

    bash bench/gpu_pretrain.sh [--preset base] [--steps 200] [--output bench/results/gpu_pretrain.json]

Parts, each written to --output as it finishes (a rerun skips the finished ones):
1. synthetic: bench/gpu.py, the same preset, length, batch, vocab and steps per execution, on
   random batches (the model and its compile alone);
2. reference: `launch.pretrain` on the carried corpus, uninterrupted: the real loop's MFU is the
   median of its logged intervals after the first (which compiles), against the synthetic one
   (target >= 0.95: the numpy reader never starves the device);
3. resumed: the same command into another model_dir, SIGKILLed once its first checkpoint is
   written and half an interval is logged past it, then run again to the end: its losses after
   the resume and its final weights against the reference's;
4. export: the reference run exported for Hugging Face, loaded by transformers where the image
   has it (logits against the Keras model's), else read back by bertbeam's own importer.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def history(model_dir: Path) -> list[dict]:
    path = model_dir / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def pretrain_argv(args, model_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "launch.pretrain", "--data", args.corpus, "--model_dir", str(model_dir),
        "--preset", args.preset, "--global_batch_size", str(args.batch_size),
        "--train_steps", str(args.steps), "--warmup_steps", str(args.steps // 10), "--learning_rate", "1e-4",
        "--strategy", args.strategy,
        "--mixed_precision", args.precision, "--steps_per_execution", str(args.steps_per_execution),
        "--log_every", str(args.log_every), "--checkpoint_every", str(args.checkpoint_every),
        "--eval_every", str(args.steps), "--eval_steps", "5", "--no-export",
        *(["--peak_tflops", str(args.peak_tflops)] if args.peak_tflops else []),
    ]  # fmt: skip


def run(argv: list[str], log: Path) -> None:
    with log.open("w") as out:
        code = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT).returncode
    if code:
        raise SystemExit(
            f"{' '.join(argv[:4])} failed ({code}); the end of {log}:\n{log.read_text()[-3000:]}"
        )


def synthetic(args, manifest, out: Path) -> dict:
    result = out / "synthetic.json"
    run([sys.executable, str(REPO / "bench" / "gpu.py"), "--presets", args.preset,
         "--seq_lens", str(manifest.seq_len), "--max_predictions", str(manifest.max_predictions),
         "--batch_sizes", str(args.batch_size), "--steps", str(args.steps),
         "--steps_per_execution", str(args.steps_per_execution), "--vocab_size", str(manifest.vocab.size),
         "--precision", args.precision, "--output", str(result), "--matmul_size", str(args.matmul_size),
         *(["--peak_tflops", str(args.peak_tflops)] if args.peak_tflops else [])],
        out / "synthetic.log")  # fmt: skip
    row = json.loads(result.read_text())[0]
    return {k: row[k] for k in ("device", "backend", "examples_per_s", "mfu", "steps_per_s", "peak_tflops")}


def reference(args, out: Path) -> dict:
    model_dir = out / "reference"
    started = time.perf_counter()
    run(pretrain_argv(args, model_dir), out / "reference.log")
    rows = history(model_dir)[1:]  # the first interval compiles
    return {
        "wall_s": round(time.perf_counter() - started, 1),
        "examples_per_s": statistics.median(r["examples_per_s"] for r in rows),
        "mfu": statistics.median(r["mfu"] for r in rows) if rows and "mfu" in rows[0] else None,
        "final_loss": history(model_dir)[-1]["loss"],
    }


def resumed(args, out: Path) -> dict:
    import numpy as np

    from launch.checkpoints import Checkpoints, latest, read_checkpoint

    model_dir = out / "resumed"
    argv = pretrain_argv(args, model_dir)
    with (out / "resumed-killed.log").open("w") as log:
        process = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        target = args.checkpoint_every + args.log_every // 2
        while process.poll() is None and (
            Checkpoints.latest_step(str(model_dir / "checkpoints")) < args.checkpoint_every
            or (history(model_dir) or [{"step": 0}])[-1]["step"] < target
        ):
            time.sleep(0.05)
        if process.poll() is not None:
            raise SystemExit(f"the run ended before its kill: {out / 'resumed-killed.log'}")
        process.send_signal(signal.SIGKILL)
        process.wait()
    killed_at = history(model_dir)[-1]["step"]
    resumed_from = Checkpoints.latest_step(str(model_dir / "checkpoints"))
    run(argv, out / "resumed.log")
    ours = {r["step"]: r["loss"] for r in history(model_dir) if r["step"] > resumed_from}
    theirs = {r["step"]: r["loss"] for r in history(out / "reference") if r["step"] > resumed_from}
    a, _ = read_checkpoint(latest(str(model_dir / "checkpoints")))
    b, _ = read_checkpoint(latest(str(out / "reference" / "checkpoints")))
    weights = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)
    return {
        "killed_at_step": killed_at,
        "resumed_from_step": resumed_from,
        "losses_after_resume_equal": ours == theirs,
        "largest_loss_difference": max(abs(ours[s] - theirs[s]) for s in theirs)
        if ours.keys() == theirs.keys()
        else None,
        "largest_weight_difference": weights,
    }


def exported(args, out: Path) -> dict:
    import numpy as np

    folder = out / "hf"
    run([sys.executable, "-m", "launch.export", "--model_dir", str(out / "reference"), "--format", "hf",
         "--output", str(folder)], out / "export.log")  # fmt: skip
    from launch.export import restore
    from model.config import BertConfig
    from model.masked_lm import build_pretraining_model
    from pipeline.reader.batches import make_batches
    from pipeline.reader.config import InputConfig
    from pipeline.schema import read_manifest

    model = restore(str(out / "reference"))[0]
    manifest = read_manifest(args.corpus)
    x, _, _ = next(make_batches(manifest, "validation", InputConfig(4, training=False)))
    x = {**x, "document_ids": x["input_mask"]}  # one document per row, as Hugging Face sees a row
    ours = np.asarray(model(x, training=False)["mlm"], np.float32)
    try:
        import torch
        import transformers
    except ImportError:  # read back by bertbeam's own importer instead
        from launch.interop.formats import warm_start

        config = BertConfig.from_json((out / "reference" / "bert_config.json").read_text())
        other = build_pretraining_model(config, manifest.seq_len, manifest.max_predictions)
        warm_start(other, f"hf:{folder}")
        theirs = np.asarray(other(x, training=False)["mlm"], np.float32)
        return {"loaded_by": "bertbeam's hf importer (no transformers here)",
                "largest_logit_difference": float(np.abs(theirs - ours).max())}  # fmt: skip
    hf_model = transformers.BertForMaskedLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        logits = hf_model(
            input_ids=torch.from_numpy(x["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(x["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(x["segment_ids"].astype(np.int64)),
        ).logits.numpy()
    positions = x["masked_lm_positions"].astype(np.int64)[:, :, None]
    theirs = np.take_along_axis(logits, positions, axis=1)
    return {"loaded_by": f"transformers {transformers.__version__}",
            "largest_logit_difference": float(np.abs(theirs - ours).max())}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(REPO / "out" / "demo" / "corpus"))
    parser.add_argument("--preset", default="base")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--log_every", type=int, default=50)
    parser.add_argument("--checkpoint_every", type=int, default=100)
    parser.add_argument("--steps_per_execution", type=int, default=10)
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--strategy", default="gpu")
    parser.add_argument("--peak_tflops", type=float, help="default: the device's, looked up")
    parser.add_argument("--matmul_size", type=int, default=8192, help="bench/gpu.py's reference matmul")
    parser.add_argument("--out", default=str(REPO / "out" / "gpu_pretrain"), help="the runs' folder")
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "gpu_pretrain.json"))
    args = parser.parse_args()

    from pipeline.schema import read_manifest

    manifest = read_manifest(args.corpus)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    output = Path(args.output)
    results = json.loads(output.read_text()) if output.exists() else {}
    setup = {
        k: getattr(args, k) for k in ("preset", "batch_size", "steps", "steps_per_execution", "precision")
    }
    if results.get("setup") != {**setup, "seq_len": manifest.seq_len}:
        results = {"setup": {**setup, "seq_len": manifest.seq_len}}  # another configuration: start over
    for name, part in (("synthetic", synthetic), ("reference", reference), ("resumed", resumed),
                       ("export", exported)):  # fmt: skip
        if name in results:
            print(f"{name}: done before, skipped")
            continue
        started = time.perf_counter()
        results[name] = part(args, manifest, out) if name == "synthetic" else part(args, out)
        results[name]["part_s"] = round(time.perf_counter() - started, 1)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=2))
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    real, synth = results["reference"]["mfu"], results["synthetic"]["mfu"]
    if real and synth:
        results["real_over_synthetic"] = real / synth
        output.write_text(json.dumps(results, indent=2))
        print(f"real loop MFU {100 * real:.1f} % against synthetic {100 * synth:.1f} %: {real / synth:.2f} "
              "(target >= 0.95)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
