"""BERT pretraining throughput and MFU on one GPU: BERT-base and ModernBERT-base, seq_len 128 and
512, bf16, XLA.

    bash bench/gpu.sh [--presets base,modern-base] [--seq_lens 128,512] [--batch_sizes 256,64]

Each length is BERT's phase: 128 tokens with 20 predictions at batch 256, 512 with 80 at batch 64
(the same tokens per step), each its own model and XLA program, one after the other.

The model, loss, optimizer and compile call are `launch.pretrain`'s (bertbeam's Keras model, AdamW
with BERT's schedule, MaskedLMLoss, jit_compile=True); the batches are random token ids with the
corpus's static shapes, since throughput does not depend on their content and the point is the
accelerator, not the input pipeline. Keras runs on TensorFlow when it is installed, else on JAX
(the same Keras code; XLA compiles either). MFU = model FLOPs per step x steps/s / peak, with
the peak from the vendor's dense bf16 figure (`launch/flops.py`), and a large bf16 matmul timed
in the same process as the achievable reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        return out.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def synthetic_batches(batch: int, seq_len: int, max_predictions: int, vocab: int, count: int):
    import numpy as np

    rng = np.random.default_rng(0)
    n = batch * count
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq_len), max_predictions, replace=False)
                                  for _ in range(n)]), axis=1).astype("int32")  # fmt: skip
    x = {
        "input_ids": rng.integers(5, vocab, (n, seq_len), dtype="int32"),
        "input_mask": np.ones((n, seq_len), "int32"),
        "segment_ids": np.zeros((n, seq_len), "int32"),
        "document_ids": np.ones((n, seq_len), "int32"),
        "masked_lm_positions": positions,
    }
    y = {"mlm": rng.integers(5, vocab, (n, max_predictions), dtype="int32")}
    w = {"mlm": np.ones((n, max_predictions), "float32")}
    return x, y, w


def matmul_tflops(size: int = 8192, runs: int = 20) -> float:
    """Achievable bf16 matmul rate on this device, XLA-compiled through Keras's backend."""
    import keras

    a = keras.random.normal((size, size), dtype="bfloat16", seed=1)
    b = keras.random.normal((size, size), dtype="bfloat16", seed=2)
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        f = jax.jit(lambda x, y: x @ y)
        f(a, b).block_until_ready()
        start = time.perf_counter()
        for _ in range(runs):
            c = f(a, b)
        c.block_until_ready()
    else:
        import tensorflow as tf

        f = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)
        float(tf.cast(f(a, b)[0, 0], tf.float32))  # compile; a float waits for the result
        start = time.perf_counter()
        for _ in range(runs):
            c = f(a, b)
        float(tf.cast(c[0, 0], tf.float32))
    return 2 * size**3 * runs / (time.perf_counter() - start) / 1e12


def time_one_length(args, preset: str, seq_len: int, max_predictions: int, batch_size: int, peak) -> dict:
    """Build, compile (XLA) and time one preset at one sequence length, as `launch.pretrain` would."""
    from launch.optimizer import build_optimizer
    from model.config import BertConfig
    from model.losses import compile_pretraining
    from model.masked_lm import build_pretraining_model
    from model.pretraining import Objective

    overrides = {} if args.dropout is None else {"dropout": args.dropout}
    config = BertConfig.preset(preset, args.vocab_size, **overrides)
    model = build_pretraining_model(config, seq_len, max_predictions)
    optimizer = build_optimizer("adamw", learning_rate=1e-4, warmup_steps=100, total_steps=100_000)
    compile_pretraining(model, optimizer, jit_compile=True, steps_per_execution=args.steps_per_execution)
    spe = args.steps_per_execution
    x, y, w = synthetic_batches(batch_size, seq_len, max_predictions, args.vocab_size, 2 * spe)
    started = time.perf_counter()
    model.fit(x, y, sample_weight=w, batch_size=batch_size, epochs=1, verbose=0)  # compile + warm up
    compile_s = time.perf_counter() - started
    timed_steps = max(spe, args.steps // spe * spe)
    epochs = max(1, timed_steps // (2 * spe))
    start = time.perf_counter()
    history = model.fit(x, y, sample_weight=w, batch_size=batch_size, epochs=epochs, verbose=0)
    elapsed = time.perf_counter() - start
    steps = epochs * 2 * spe
    flops = Objective().training_flops_per_example(config, seq_len, max_predictions) * batch_size
    return {
        "preset": preset,
        "seq_len": seq_len,
        "max_predictions": max_predictions,
        "batch_size": batch_size,
        "precision": args.precision,
        "dropout": config.dropout,
        "compile_and_warmup_s": round(compile_s, 1),
        "steps": steps,
        "steps_per_s": steps / elapsed,
        "examples_per_s": steps * batch_size / elapsed,
        "tokens_per_s": steps * batch_size * seq_len / elapsed,
        "model_tflops_per_s": flops * steps / elapsed / 1e12,
        "peak_tflops": peak,
        "mfu": flops * steps / elapsed / (peak * 1e12) if peak else None,
        "final_loss": float(history.history["loss"][-1]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="base,modern-base", help="comma-separated; each timed in turn")
    parser.add_argument("--vocab_size", type=int, default=30522, help="BERT's English WordPiece size")
    parser.add_argument("--seq_lens", default="128,512", help="comma-separated; each timed in turn")
    parser.add_argument("--max_predictions", default="20,80", help="one per length (BERT's)")
    parser.add_argument("--batch_sizes", default="256,64", help="one per length")
    parser.add_argument("--steps", type=int, default=200, help="timed steps, after a compiling warm-up")
    parser.add_argument("--steps_per_execution", type=int, default=10)
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--dropout", type=float, help="default: the preset's (BERT 0.1, ModernBERT 0)")
    parser.add_argument(
        "--flash_attention",
        action="store_true",
        help="keras.config.enable_flash_attention() (cuDNN's fused attention on JAX)",
    )
    parser.add_argument("--peak_tflops", type=float, help="default: the GPU's dense bf16 figure")
    parser.add_argument("--matmul_size", type=int, default=8192, help="the reference matmul's side")
    parser.add_argument("--output", help="also write the figures as JSON here")
    args = parser.parse_args()

    lengths = [int(n) for n in args.seq_lens.split(",")]
    predictions = [int(n) for n in args.max_predictions.split(",")]
    batch_sizes = [int(n) for n in args.batch_sizes.split(",")]
    if not len(lengths) == len(predictions) == len(batch_sizes):
        parser.error("--seq_lens, --max_predictions and --batch_sizes: one value per length each")

    import keras

    from launch.mfu import peak_tflops_for

    name = gpu_name()
    peak = args.peak_tflops or peak_tflops_for(name)
    if args.precision == "bf16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    if args.flash_attention:
        keras.config.enable_flash_attention()
    achievable = matmul_tflops(args.matmul_size)
    results = []
    for preset in args.presets.split(","):
        for seq_len, max_predictions, batch_size in zip(lengths, predictions, batch_sizes, strict=True):
            result = {"device": name, "backend": keras.backend.backend(), "keras": keras.__version__,
                      **time_one_length(args, preset, seq_len, max_predictions, batch_size, peak),
                      "matmul_bf16_tflops": achievable}  # fmt: skip
            for key, value in result.items():
                print(f"{key:>22}: {value:.4g}" if isinstance(value, float) else f"{key:>22}: {value}")
            print(flush=True)
            results.append(result)
            keras.backend.clear_session()
    headline = ("examples_per_s", "tokens_per_s", "mfu")
    print(json.dumps({f"{r['preset']}@{r['seq_len']}": {k: r[k] for k in headline} for r in results}))
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
