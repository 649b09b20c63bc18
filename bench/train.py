"""Training throughput and MFU on this host, and the same model trained side by side with keras-hub.

    .venv/bin/python bench/train.py [--corpus out/demo/corpus] [--presets tiny,mini,small]
    make bench-train          # installs the bench extra (keras-hub) first

For each preset at seq_len 128: steps/s, examples/s, tokens/s and MFU of bertbeam's pretraining
model (XLA, AdamW, as `launch.pretrain` compiles it; GELU's tanh flavour, as keras-hub's
encoder). The peak for MFU is measured in the same
process: a large XLA float32 matmul. keras-hub's `BertMaskedLM` with the same sizes, optimizer,
loss weighting and XLA then trains on the very same batches (real corpus batches, cached in
memory so neither side waits on input), alternating with ours, best of three runs each; the ratio
is ours / keras-hub's. Target: >= 1.3x.

    .venv/bin/python bench/train.py --backends tensorflow,jax [--presets tiny,mini]

Keras's backends against each other instead: the same model, optimizer and batches (read once by
the numpy reader) trained under TensorFlow and under JAX, each round a fresh process per backend
(a process holds one backend) in turns, median of `--rounds`; the ratio is JAX's steps/s over
TensorFlow's. On 2 CPU cores this is no promise about an accelerator (docs/benchmarks/backends.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def batches(corpus: str, batch_size: int, count: int):
    """`count` real batches from the corpus, read once into memory, then repeated from there (so
    neither model waits on the input pipeline, and both see the very same tensors)."""
    import tensorflow as tf

    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.schema import read_manifest

    ds = make_dataset(read_manifest(corpus), "train", InputConfig(batch_size, training=True, seed=0))
    stacked = tf.nest.map_structure(lambda *parts: tf.stack(parts), *list(ds.take(count)))
    return tf.data.Dataset.from_tensor_slices(stacked).repeat().prefetch(tf.data.AUTOTUNE)


def as_keras_hub(ds):
    """Our batches in BertMaskedLM's input names (same tensors)."""
    import tensorflow as tf

    def convert(features, labels, weights):
        x = {
            "token_ids": features["input_ids"],
            "segment_ids": features["segment_ids"],
            "padding_mask": tf.cast(features["input_mask"], tf.bool),
            "mask_positions": features["masked_lm_positions"],
        }
        return x, labels["mlm"], weights["mlm"]

    return ds.map(convert)


def ours(config, seq_len: int, max_predictions: int):
    import keras

    from launch.optimizer import build_optimizer
    from model.losses import compile_pretraining
    from model.masked_lm import build_pretraining_model

    model = build_pretraining_model(config, seq_len, max_predictions)
    optimizer = build_optimizer("adamw", learning_rate=1e-4, warmup_steps=10, total_steps=10_000)
    compile_pretraining(model, optimizer, jit_compile=True)
    assert isinstance(model, keras.Model)
    return model


def keras_hub_model(config, seq_len: int):
    import keras
    import keras_hub

    from launch.optimizer import build_optimizer

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.dropout,
        max_sequence_length=max(seq_len, 512),
    )
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    optimizer = build_optimizer("adamw", learning_rate=1e-4, warmup_steps=10, total_steps=10_000)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=True,
    )
    return model


def steps_per_s(model, ds, steps: int) -> float:
    """Trained steps per second after a first epoch that compiles and warms up."""
    model.fit(ds, steps_per_epoch=3, epochs=1, verbose=0, shuffle=False)
    start = time.perf_counter()
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
    return steps / (time.perf_counter() - start)


def backend_steps_per_s(corpus: str, preset: str, batch_size: int, steps: int) -> float:
    """This process's backend: bertbeam's pretraining model trained on `steps` real batches."""
    import itertools

    import numpy as np

    from model.config import BertConfig
    from pipeline.reader.batches import make_batches
    from pipeline.reader.config import InputConfig
    from pipeline.schema import read_manifest

    manifest = read_manifest(corpus)
    read = list(itertools.islice(make_batches(manifest, "train", InputConfig(batch_size, seed=0)), 8))
    x, y, w = ({k: np.concatenate([b[i][k] for b in read]) for k in read[0][i]} for i in range(3))
    config = BertConfig.preset(preset, manifest.vocab.size)
    model = ours(config, manifest.seq_len, manifest.max_predictions)
    fit = dict(batch_size=batch_size, verbose=0, shuffle=False)  # 8 batches, in turn
    model.fit(x, y, sample_weight=w, epochs=1, **fit)  # compiles and warms up
    start, done = time.perf_counter(), 0
    while done < steps:
        model.fit(x, y, sample_weight=w, epochs=1, **fit)
        done += len(read)
    return done / (time.perf_counter() - start)


def compare_backends(args) -> int:
    """Each round, each backend in a process of its own, in turns; the median per backend."""
    import json
    import statistics
    import subprocess

    print(f"corpus {args.corpus}; batch {args.batch_size}; {os.cpu_count()} cores; backends {args.backends}")
    print(
        f"{'preset':<7} " + " ".join(f"{b + ' steps/s':>20}" for b in args.backends.split(",")) + "   jax/tf"
    )
    for preset in args.presets.split(","):
        rates = {b: [] for b in args.backends.split(",")}
        for _ in range(args.rounds):
            for backend in rates:
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", "--corpus", args.corpus, "--presets", preset,
                     "--batch_size", str(args.batch_size), "--steps", str(args.steps)],
                    env={**os.environ, "KERAS_BACKEND": backend}, capture_output=True, text=True,
                )  # fmt: skip
                if done.returncode:
                    raise SystemExit(f"{backend} {preset}: {done.stderr.strip().splitlines()[-1]}")
                rates[backend].append(json.loads(done.stdout.strip().splitlines()[-1])["steps_per_s"])
        medians = {b: statistics.median(r) for b, r in rates.items()}
        ratio = medians.get("jax", 0) / medians["tensorflow"] if "tensorflow" in medians else float("nan")
        rounds = "; ".join(f"{b} " + " ".join(f"{r:.2f}" for r in rs) for b, rs in rates.items())
        print(f"{preset:<7} " + " ".join(f"{m:20.2f}" for m in medians.values()) + f"   {ratio:.2f}x  "
              f"(rounds: {rounds})", flush=True)  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(REPO / "out/demo/corpus"), help="a corpus at seq_len 128")
    parser.add_argument("--presets", default="tiny,mini,small")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0, help="rough time per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurements per model")
    parser.add_argument("--backends", help="tensorflow,jax: Keras's backends against each other")
    parser.add_argument("--steps", type=int, default=48, help="with --backends: timed steps per round")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import json

        rate = backend_steps_per_s(args.corpus, args.presets, args.batch_size, args.steps)
        print(json.dumps({"steps_per_s": rate}))
        return 0
    if args.backends:
        return compare_backends(args)

    import tensorflow as tf

    from launch.mfu import measure_matmul_tflops
    from model.config import BertConfig
    from model.pretraining import Objective
    from pipeline.schema import read_manifest

    manifest = read_manifest(args.corpus)
    seq_len, max_predictions, vocab = manifest.seq_len, manifest.max_predictions, manifest.vocab.size
    peak = measure_matmul_tflops()
    print(f"corpus {args.corpus}: seq_len {seq_len}, {max_predictions} predictions, vocab {vocab}; "
          f"batch {args.batch_size}; {os.cpu_count()} cores; TF {tf.__version__}")  # fmt: skip
    print(f"peak (2048x2048 float32 matmul, XLA): {peak * 1000:.1f} GFLOP/s\n")
    print(f"{'preset':<7} {'steps/s':>8} {'ex/s':>8} {'tokens/s':>9} {'MFU':>6} | "
          f"{'keras-hub steps/s':>17} {'ours/keras-hub':>14}")  # fmt: skip
    data = batches(args.corpus, args.batch_size, 8)
    for preset in args.presets.split(","):
        # keras-hub's encoder uses GELU's tanh approximation: the same flavour here, like for like.
        config = BertConfig.preset(preset, vocab, hidden_act="gelu_approximate")
        flops = Objective().training_flops_per_example(config, seq_len, max_predictions) * args.batch_size
        mine, hub = ours(config, seq_len, max_predictions), keras_hub_model(config, seq_len)
        hub_data = as_keras_hub(data)
        steps = max(5, int(args.seconds * steps_per_s(mine, data, 3)))  # size the runs to ~seconds
        # Alternating rounds, best of each: on a shared 2-core machine single runs vary by +-30 %.
        ours_rates, hub_rates = [], []
        for _ in range(args.rounds):
            ours_rates.append(steps_per_s(mine, data, steps))
            hub_rates.append(steps_per_s(hub, hub_data, steps))
        ours_rate, hub_rate = max(ours_rates), max(hub_rates)
        rounds = " ".join(f"{a / b:.2f}" for a, b in zip(ours_rates, hub_rates, strict=True))
        mfu = ours_rate * flops / (peak * 1e12)
        print(f"{preset:<7} {ours_rate:8.2f} {ours_rate * args.batch_size:8.1f} "
              f"{ours_rate * args.batch_size * seq_len:9.0f} {100 * mfu:5.1f}% | "
              f"{hub_rate:17.2f} {ours_rate / hub_rate:13.2f}x  (rounds: {rounds})", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
