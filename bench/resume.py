"""Resume cost: how long a resumed run's input pipeline takes to give its first batch, by position.

    .venv/bin/python bench/resume.py [--corpus out/demo/corpus]     # or: make bench-resume

Batch 256 on a real corpus (built once into a temporary folder unless --corpus is given: the
Python docs at seq_len 128). For resume points of 10^2, 10^4 and 10^6 batches, set directly as
`make_dataset(skip_batches=N)`, as a resumed run sets it, the time from building the dataset to
holding its first batch (median of 3). Target: flat, the largest within 1.5x (or 2 s) of the
smallest. Beside each, what replaying the stream cost before it became seekable: reading N x 256
raw records (measured up to 10^4 batches, extrapolated past that). Then one end-to-end figure for
context: a tiny run resumed from its checkpoint, process start to its first trained step.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.input import docs_corpus  # noqa: E402 (after sys.path gets the repository)

BATCH = 256
POINTS = (10**2, 10**4, 10**6)
REPLAY_MEASURED_UP_TO = 10**4


def first_batch_seconds(manifest, skip_batches: int, repeats: int = 3) -> float:
    from pipeline.reader.dataset import InputConfig, make_dataset

    config = InputConfig(per_replica_batch_size=BATCH, training=True, seed=0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        next(iter(make_dataset(manifest, "train", config, skip_batches=skip_batches)))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def replay_seconds(manifest, skip_batches: int) -> float:
    """Reading skip_batches x BATCH raw records, as a resume did before the position was seekable."""
    import tensorflow as tf

    records = tf.data.TFRecordDataset(manifest.files("train"), buffer_size=1 << 20).repeat()
    start = time.perf_counter()
    for _ in records.skip(skip_batches * BATCH).take(1):
        pass
    return time.perf_counter() - start


def end_to_end(corpus: str, tmp: str) -> float:
    """Process start to the first trained step of a resumed tiny run (batch BATCH, CPU)."""
    model_dir = f"{tmp}/run"
    flags = [sys.executable, "-m", "launch.pretrain", f"--data={corpus}", f"--model_dir={model_dir}",
             "--preset=tiny", "--strategy=cpu", f"--global_batch_size={BATCH}", "--log_every=1",
             "--checkpoint_every=1", "--eval_steps=0", "--warmup_steps=1"]  # fmt: skip
    subprocess.run([*flags, "--train_steps=2"], cwd=REPO, check=True, capture_output=True)
    history = Path(model_dir) / "history.jsonl"
    rows = len(history.read_text().splitlines())
    start = time.perf_counter()
    process = subprocess.Popen([*flags, "--train_steps=4"], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        while len(history.read_text().splitlines()) <= rows:
            if process.poll() is not None:
                raise RuntimeError(f"the resumed run ended before a step: {process.stderr.read()[-500:]}")
            time.sleep(0.05)
        return time.perf_counter() - start
    finally:
        process.kill()
        process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="a built corpus; default: build the Python docs one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus or docs_corpus(tmp)
        from pipeline.schema import read_manifest

        manifest = read_manifest(corpus)
        split = manifest.split("train")
        print(f"corpus {corpus}: {split.instances:,} train records in {len(split.shards)} shards, "
              f"batch {BATCH}, {os.cpu_count()} cores")  # fmt: skip
        first_batch_seconds(manifest, 0, repeats=1)  # warm-up: TensorFlow's first dataset
        rows, replay_rate = [], None
        print(
            f"{'resume at batch':>16} {'records skipped':>16} {'epochs':>9} {'first batch':>12} "
            f"{'replay (before)':>16}"
        )
        for point in POINTS:
            seconds = first_batch_seconds(manifest, point)
            if point <= REPLAY_MEASURED_UP_TO:
                replay = replay_seconds(manifest, point)
                replay_rate = point / replay
                replay_text = f"{replay:.2f} s"
            else:
                replay = point / replay_rate
                replay_text = f"~{replay:,.0f} s (extrap.)"
            epochs = point * BATCH / split.instances
            print(f"{point:>16,} {point * BATCH:>16,} {epochs:>9,.1f} {seconds:>10.2f} s {replay_text:>16}")
            rows.append({"batches": point, "first_batch_s": round(seconds, 3), "replay_s": round(replay, 2)})
        smallest, largest = rows[0]["first_batch_s"], rows[-1]["first_batch_s"]
        flat = largest <= 1.5 * smallest or largest - smallest <= 2.0
        print(
            f"largest / smallest: {largest / smallest:.2f}x (target: within 1.5x or 2 s): "
            f"{'met' if flat else 'NOT met'}"
        )
        e2e = end_to_end(corpus, tmp)
        print(
            f"end to end: a tiny run resumed at step 2, process start to its first trained step: {e2e:.1f} s"
        )
    print(
        json.dumps(
            {
                "points": rows,
                "flat": flat,
                "ratio": round(largest / smallest, 3),
                "end_to_end_s": round(e2e, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
