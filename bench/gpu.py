"""BERT pretraining throughput and MFU on one GPU, bf16, XLA: each row a preset at one of BERT's
lengths, as configured or with one change switched off, so that one run measures each change.

    bash bench/gpu.sh [--rows plan|extra|base@128,base@512:fused=off,...] [--steps 100] [--output FILE]

A row is PRESET@SEQ_LEN[:CHANGE+CHANGE...]; 128 tokens run with 20 predictions at batch 256,
512 with 80 at batch 64 (the same tokens per step), each its own model and XLA program. The
changes (issue 57), each against the presets as configured:
  attention_dropout=R   attention dropout R (0: the fused kernel's path; Keras allows none above 0)
  fused=off             keras.config.disable_flash_attention(): attention as plain XLA ops
  vocab_multiple=N      the vocab's rows rounded up to a multiple of N (1: BERT's 30,522 as is)
  dropout_rng=KIND      Dropout's random bits (model.layers.DROPOUT_RNGS; as configured: keras)
  dropout=R             the hidden dropout R
The default rows (`plan`: DEVICE_PLAN) are issue 57's device check, the headline rows first;
`extra` (EXTRA_ROWS) the second-order ones. Each row is appended to --output the moment it is
timed, and a rerun with the same --output skips the rows already there, so a run cut short by a
device's time limit resumes.

The model, loss, optimizer and compile call are `launch.pretrain`'s (bertbeam's Keras model, AdamW
with BERT's schedule, MaskedLMLoss, jit_compile=True) with its --vocab_multiple default; the
batches are random token ids with the corpus's static shapes, since throughput does not depend on
their content and the point is the accelerator, not the input pipeline. Keras runs on TensorFlow
when it is installed, else on JAX (the same Keras code; XLA compiles either). MFU = model FLOPs per
step (on the tokenizer's vocab, so padding counts as overhead) x steps/s / peak, with the peak from
the vendor's dense bf16 figure (`launch/mfu.py`), and a large bf16 matmul timed in the same
process as the achievable reference.
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
from common.errors import ConfigError  # noqa: E402

# launch.pretrain's --vocab_multiple default, stated here so that the device script imports only
# the model, the optimizer and the loss (launch.config brings the pipeline's imports)
VOCAB_MULTIPLE = 128


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


# Issue 57's device check, within 8 minutes (a compile and 100 steps are about a minute a row):
# the headline rows as configured (attention dropout 0.1, kept by docs/benchmarks/dropout.md),
# then each change on its own. `--rows extra`: the second-order rows, for a second call.
DEVICE_PLAN = (
    "base@128", "base@512", "modern-base@128", "large@128",
    "base@128:attention_dropout=0", "base@512:attention_dropout=0",
    "base@128:vocab_multiple=1", "base@128:dropout_rng=rbg16",
)  # fmt: skip
EXTRA_ROWS = (
    "base@512:attention_dropout=0+fused=off", "modern-base@128:fused=off", "large@128:attention_dropout=0",
    "base@128:dropout_rng=threefry16", "base@128:dropout_rng=rbg32", "modern-base@512",
)  # fmt: skip
LENGTHS = {128: (20, 256), 512: (80, 64)}  # seq_len: (max_predictions, batch), BERT's phases
CHANGES = {"attention_dropout": float, "dropout": float, "fused": str, "vocab_multiple": int,
           "dropout_rng": str}  # fmt: skip


def parse_row(row: str) -> dict:
    """PRESET@SEQ_LEN[:KEY=VALUE+...] -> {preset, seq_len, max_predictions, batch_size, changes}."""
    head, _, tail = row.partition(":")
    preset, _, length = head.partition("@")
    if not length.isdigit() or int(length) not in LENGTHS:
        raise ValueError(f"row {row!r}: expected PRESET@SEQ_LEN with SEQ_LEN one of {sorted(LENGTHS)}")
    changes = {}
    for change in filter(None, tail.split("+")):
        key, _, value = change.partition("=")
        if key not in CHANGES or not value:
            raise ValueError(
                f"row {row!r}: {change!r}; expected KEY=VALUE with KEY one of {', '.join(CHANGES)}"
            )
        changes[key] = CHANGES[key](value)
    predictions, batch = LENGTHS[int(length)]
    return {"row": row, "preset": preset, "seq_len": int(length), "max_predictions": predictions,
            "batch_size": batch, "changes": changes}  # fmt: skip


def row_config(args, row: dict):
    """The row's BertConfig, as `launch.pretrain` builds a preset (--vocab_multiple 128), with
    its changes; a fused kernel asked of attention dropout above 0 is a one-line error."""
    from model.config import BertConfig

    changes = row["changes"]
    overrides = {k: changes[k] for k in ("attention_dropout", "dropout") if k in changes}
    config = BertConfig.preset(row["preset"], args.vocab_size, **overrides)
    config = config.padded(changes.get("vocab_multiple", VOCAB_MULTIPLE))
    if changes.get("fused", "on") not in ("on", "off"):
        raise ValueError(f"row {row['row']!r}: fused={changes['fused']}; expected on or off")
    if changes.get("fused") == "on" and config.attention_probs_dropout > 0:
        raise ValueError(
            f"row {row['row']!r}: fused attention needs attention dropout 0 (Keras computes attention "
            f"dropout only on written-out scores), found {config.attention_probs_dropout}"
        )
    return config


def attention_path(config, changes: dict) -> str:
    """How the row's attention runs: "written out" (attention dropout above 0), "xla" (the fused
    kernel switched off), or "fused" (keras.ops.dot_product_attention, a fused kernel where Keras
    finds one fits)."""
    if config.attention_probs_dropout > 0:
        return "written out"
    return "xla" if changes.get("fused") == "off" else "fused"


def time_row(args, row: dict, peak) -> dict:
    """Build, compile (XLA) and time one row, as `launch.pretrain` would."""
    import keras

    from launch.optimizer import build_optimizer
    from model import layers
    from model.losses import compile_pretraining
    from model.masked_lm import build_pretraining_model
    from model.pretraining import Objective

    changes = row["changes"]
    config = row_config(args, row)
    keras.config.enable_flash_attention()
    if changes.get("fused") == "off":
        keras.config.disable_flash_attention()
    layers.dropout_rng["kind"] = changes.get("dropout_rng", "keras")
    seq_len, max_predictions, batch_size = row["seq_len"], row["max_predictions"], row["batch_size"]
    model = build_pretraining_model(config, seq_len, max_predictions)
    optimizer = build_optimizer("adamw", learning_rate=1e-4, warmup_steps=100, total_steps=100_000)
    compile_pretraining(model, optimizer, jit_compile=True, steps_per_execution=args.steps_per_execution)
    spe = args.steps_per_execution
    x, y, w = synthetic_batches(batch_size, seq_len, max_predictions, config.tokens, 2 * spe)
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
        **{k: row[k] for k in ("row", "preset", "seq_len", "max_predictions", "batch_size")},
        "precision": args.precision,
        "dropout": config.dropout,
        "attention_dropout": config.attention_probs_dropout,
        "attention": attention_path(config, changes),
        "vocab_rows": config.vocab_size,
        "dropout_rng": layers.dropout_rng["kind"],
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
    parser.add_argument(
        "--rows",
        default="plan",
        help="comma-separated rows, each timed in turn; plan: DEVICE_PLAN, extra: EXTRA_ROWS",
    )
    parser.add_argument(
        "--vocab_size", type=int, default=30522, help="the tokenizer's (BERT's English WordPiece)"
    )
    parser.add_argument(
        "--batch_sizes", help="SEQ:BATCH,... instead of 128:256,512:64 (the dry run's small ones)"
    )
    parser.add_argument("--steps", type=int, default=100, help="timed steps, after a compiling warm-up")
    parser.add_argument("--steps_per_execution", type=int, default=10)
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--peak_tflops", type=float, help="default: the GPU's dense bf16 figure")
    parser.add_argument("--matmul_size", type=int, default=8192, help="the reference matmul's side")
    parser.add_argument(
        "--output", help="append each row's figures here (JSON); rows already there are skipped"
    )
    args = parser.parse_args()
    for pair in filter(None, (args.batch_sizes or "").split(",")):
        length, batch = (int(n) for n in pair.split(":"))
        LENGTHS[length] = (LENGTHS[length][0], batch)
    named = {"plan": DEVICE_PLAN, "extra": EXTRA_ROWS}
    try:
        rows = [parse_row(row) for part in args.rows.split(",") for row in named.get(part, (part,))]
        for row in rows:
            row_config(args, row)
    except (ValueError, ConfigError) as e:
        parser.error(str(e))

    import keras

    from launch.mfu import peak_tflops_for

    name = gpu_name()
    peak = args.peak_tflops or peak_tflops_for(name)
    if args.precision == "bf16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    output = Path(args.output) if args.output else None
    # --output: a JSON list of rows, or an object with them under "runs" (bench/results/gpu.json,
    # whose earlier runs, from before rows had names, stay as they are)
    record = json.loads(output.read_text()) if output and output.exists() else []
    results = record["runs"] if isinstance(record, dict) else record
    finished = {(r["device"], r.get("row")) for r in results}
    achievable = None
    for row in rows:
        if (name, row["row"]) in finished:
            print(f"{row['row']}: already in {output}, skipped", flush=True)
            continue
        achievable = achievable or matmul_tflops(args.matmul_size)
        result = {"device": name, "backend": keras.backend.backend(), "keras": keras.__version__,
                  **time_row(args, row, peak), "matmul_bf16_tflops": achievable}  # fmt: skip
        for key, value in result.items():
            print(f"{key:>22}: {value:.4g}" if isinstance(value, float) else f"{key:>22}: {value}")
        print(flush=True)
        results.append(result)
        if output:
            output.write_text(json.dumps(record, indent=2) + "\n")
        keras.backend.clear_session()
    headline = ("examples_per_s", "tokens_per_s", "mfu")
    print(
        json.dumps(
            {r["row"]: {k: r[k] for k in headline} for r in results if r["device"] == name and "row" in r}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
