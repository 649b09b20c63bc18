"""ModernBERT's block against BERT's on this machine: pretraining step time and MFU at equal
parameter count, and time and memory against sequence length.

    .venv/bin/python bench/modern.py [--only steps,lengths,blocks] [--steps 12]
    make bench-modern

Three tables, each row written to bench/results/modernbert.json as soon as it is measured (a
rerun skips the rows it has; delete the file to measure again):

steps    presets tiny/mini/small against modern-tiny/-mini/-small (within 10 % of each other's
         parameters), seq_len 128 (batch 16, 20 predictions) and 512 (batch 4, 80): the same
         tokens per step. `launch.pretrain`'s model, AdamW and XLA; synthetic batches with the
         corpus's static shapes (speed does not depend on the ids). MFU against a large XLA
         float32 matmul timed in the same process (this CPU's achievable peak), with FLOPs
         counted as `launch.flops` does: a local layer's scores over its window only.
lengths  the tiny presets at seq_len 128 to 2,048 with 8,192 tokens per step (batch 64 to 4):
         the projections' work is the same at every length, so what grows is attention. Each
         length in a process of its own, so its peak resident memory is its own.
blocks   one block alone, forward and backward under XLA, at the same 8,192 tokens: BERT's, a
         ModernBERT global layer and a ModernBERT local layer (window 128, chunked), H 256,
         4 heads. The local layer's time per token should stay flat as T grows, the others'
         grow with T.
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
RESULTS = REPO / "bench" / "results" / "modernbert.json"
VOCAB = 8000  # the demo corpus's vocab
SIZES = ("tiny", "mini", "small")
LENGTHS = (128, 256, 512, 1024, 2048)
TOKENS_PER_STEP = 8192


def load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def save(table: str, key: str, row: dict) -> None:
    results = load()
    results.setdefault(table, {})[key] = row
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"[{table} {key}] {json.dumps(row, sort_keys=True)}", flush=True)


def synthetic(batch: int, seq_len: int, predictions: int, count: int = 2):
    import numpy as np

    rng = np.random.default_rng(0)
    n = batch * count
    positions = np.sort(rng.random((n, seq_len - 1)).argsort(axis=1)[:, :predictions] + 1, axis=1)
    x = {
        "input_ids": rng.integers(5, VOCAB, (n, seq_len), dtype="int32"),
        "input_mask": np.ones((n, seq_len), "int32"),
        "segment_ids": np.zeros((n, seq_len), "int32"),
        "document_ids": np.ones((n, seq_len), "int32"),
        "masked_lm_positions": positions.astype("int32"),
    }
    y = {"mlm": rng.integers(5, VOCAB, (n, predictions), dtype="int32")}
    w = {"mlm": np.ones((n, predictions), "float32")}
    return x, y, w


def time_training(preset: str, seq_len: int, batch: int, predictions: int, steps: int) -> dict:
    """Compile, warm up, then time `steps` training steps (best of two halves' rate)."""
    import keras

    from launch.optimizer import build_optimizer
    from model.config import BertConfig
    from model.losses import compile_pretraining
    from model.masked_lm import build_pretraining_model
    from model.pretraining import Objective

    keras.utils.set_random_seed(0)
    config = BertConfig.preset(preset, VOCAB)
    if seq_len > config.max_position:  # BERT's table: 512 positions in the presets, here as many as T
        config = BertConfig.preset(preset, VOCAB, max_position=seq_len)
    model = build_pretraining_model(config, seq_len, predictions)
    optimizer = build_optimizer("adamw", learning_rate=1e-4, warmup_steps=10, total_steps=10_000)
    compile_pretraining(model, optimizer, jit_compile=True)
    x, y, w = synthetic(batch, seq_len, predictions)
    started = time.perf_counter()
    model.fit(x, y, sample_weight=w, batch_size=batch, epochs=1, verbose=0)  # compile + 2 steps
    compile_s = time.perf_counter() - started
    rates = []
    for _ in range(2):
        start = time.perf_counter()
        model.fit(x, y, sample_weight=w, batch_size=batch, epochs=steps // 4, verbose=0)
        rates.append((steps // 4) * 2 / (time.perf_counter() - start))
    steps_per_s = max(rates)
    flops = Objective().training_flops_per_example(config, seq_len, predictions) * batch
    return {
        "parameters": model.count_params(),
        "compile_s": round(compile_s, 1),
        "ms_per_step": 1000 / steps_per_s,
        "tokens_per_s": steps_per_s * batch * seq_len,
        "model_gflops_per_step": flops / 1e9,
        "model_tflops_per_s": flops * steps_per_s / 1e12,
    }


def steps_table(args) -> None:
    from launch.mfu import measure_matmul_tflops

    done = load().get("steps", {})
    peak = None
    for size in SIZES:
        for seq_len, batch, predictions in ((128, 16, 20), (512, 4, 80)):
            for preset in (size, f"modern-{size}"):
                key = f"{preset}@{seq_len}"
                if key in done:
                    continue
                peak = peak or measure_matmul_tflops()
                row = time_training(preset, seq_len, batch, predictions, args.steps)
                row.update(batch=batch, peak_tflops=peak, mfu=row["model_tflops_per_s"] / peak)
                save("steps", key, row)


def lengths_table(args) -> None:
    """Each (preset, length) in its own process: its peak RSS is that length's alone."""
    done = load().get("lengths", {})
    for seq_len in LENGTHS:
        for preset in ("tiny", "modern-tiny"):
            key = f"{preset}@{seq_len}"
            if key in done:
                continue
            out = subprocess.run([sys.executable, __file__, "--one_length", preset, str(seq_len),
                                  "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            save("lengths", key, json.loads(out.stdout.strip().splitlines()[-1]))


def one_length(preset: str, seq_len: int, steps: int) -> None:
    batch = TOKENS_PER_STEP // seq_len
    row = time_training(preset, seq_len, batch, seq_len * 20 // 128, steps)
    row.update(batch=batch, peak_rss_mb=peak_rss_mb())
    print(json.dumps(row))


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM, which starts afresh at exec (getrusage's
    ru_maxrss does not: a child inherits the peak of the parent it was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def blocks_table(args) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    from model.bert import TransformerBlock, attention_mask
    from model.modernbert import ModernBlock, attention_ids

    done = load().get("blocks", {})
    hidden, heads = 256, 4
    kinds = {
        # No dropout in any: ModernBERT's blocks have none, and BERT's attention dropout on a
        # (B, heads, T, T) tensor would be timed as attention.
        "bert": lambda: TransformerBlock(hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden,
                                         dropout=0.0),
        "modern_global": lambda: ModernBlock(hidden_size=hidden, num_heads=heads, intermediate_size=384,
                                             rope_theta=160_000.0),
        "modern_local": lambda: ModernBlock(hidden_size=hidden, num_heads=heads, intermediate_size=384,
                                            rope_theta=10_000.0, local_attention=128),
    }  # fmt: skip
    for seq_len in LENGTHS:
        batch = TOKENS_PER_STEP // seq_len
        x = tf.random.normal((batch, seq_len, hidden), seed=1)
        ones = np.ones((batch, seq_len), "int32")
        for kind, make in kinds.items():
            key = f"{kind}@{seq_len}"
            if key in done:
                continue
            keras.utils.set_random_seed(0)
            block = make()
            mask = attention_mask(ones, ones) if kind == "bert" else attention_ids(ones, ones)
            block(x, attention_mask=mask)

            @tf.function(jit_compile=True)
            def step(x, mask, block=block):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(block(x, attention_mask=mask, training=True) ** 2)
                return tape.gradient(loss, block.trainable_variables)

            step(x, mask)  # compile
            runs, start = 0, time.perf_counter()
            while time.perf_counter() - start < 3.0:
                tf.nest.map_structure(lambda g: g.numpy(), step(x, mask))
                runs += 1
            ms = 1000 * (time.perf_counter() - start) / runs
            save(
                "blocks",
                key,
                {"ms_per_step": ms, "us_per_token": 1000 * ms / TOKENS_PER_STEP, "batch": batch},
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="steps,lengths,blocks", help="comma list of tables")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per row (two halves)")
    parser.add_argument("--one_length", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_length:
        one_length(args.one_length[0], int(args.one_length[1]), args.steps)
        return 0
    tables = {"steps": steps_table, "lengths": lengths_table, "blocks": blocks_table}
    for name in args.only.split(","):
        tables[name](args)
    results = load()
    for table, rows in results.items():
        print(f"\n{table}")
        for key, row in rows.items():
            print(f"  {key:<22} " + "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                            for k, v in sorted(row.items())))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
