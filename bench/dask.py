"""The corpus build on three engines, on one machine: Beam's DirectRunner in process, the
DirectRunner with 1 and 2 worker processes (multi_processing), and a Dask cluster of 1 and 2
worker processes (bertbeam's DaskRunner, the local cluster it starts and stops).

    .venv/bin/python bench/dask.py                 # or: make bench-dask
    .venv/bin/python bench/dask.py --scales 1 --repeats 1

The Python docs (as bench/corpus.py: --doc_per_file, seq_len 128, 20 predictions, dupe 5, a vocab
of 8,000 pieces trained beforehand), at 1x and 4x (copies made distinct). Per engine: seconds of
the build in its own process (interpreter start and imports excluded; Dask's cluster start and
stop included), the median of --repeats runs taken in turns, and the peak RSS summed over the
whole process tree (launcher, scheduler, nannies, workers), sampled every 50 ms. Each result goes
to bench/results/dask.json as it finishes; a rerun skips what is there (--fresh starts over).
Every build's shards are compared with the in-process build's: the same bytes or the bench stops.

Targets: Dask with 2 workers within 1.3x of the best single-machine runner on a 2-core machine,
where the engine's overhead is all it can add (issue 26); each multi-worker engine faster with 2
workers than with 1 on 2 cores (issue 38: the speed-up is printed last).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.corpus import make_inputs, run_pipeline  # noqa: E402 (after sys.path gets the repository)
from pipeline.fetch_corpora import python_docs  # noqa: E402

RESULTS = REPO / "bench" / "results" / "dask.json"
ENGINES = {
    "direct in_memory": ["--direct_running_mode", "in_memory"],
    "direct multi_processing 1": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "1"],
    "direct multi_processing 2": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
    "dask 1 worker": ["--runner", "DaskRunner", "--dask_workers", "1"],
    "dask 2 workers": ["--runner", "DaskRunner", "--dask_workers", "2"],
}
# Issue 38's fourth target: a second worker makes each engine faster. Pairs (one worker, two).
SCALING = {"direct multi_processing": ("direct multi_processing 1", "direct multi_processing 2"),
           "dask": ("dask 1 worker", "dask 2 workers")}  # fmt: skip
COMMON = ["--doc_per_file", "--seq_len", "128", "--max_predictions", "20", "--dupe_factor", "5"]


def digest(folder: Path) -> str:
    """One hash of the build's files (shards, vocab, manifest), to compare engines."""
    h = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--scales", type=int, nargs="+", default=[1, 4])
    args.add_argument("--repeats", type=int, default=3)
    args.add_argument("--data", default=str(REPO / "data"))
    args.add_argument("--fresh", action="store_true", help="forget bench/results/dask.json's results")
    opts = args.parse_args()
    results = {} if opts.fresh or not RESULTS.exists() else json.loads(RESULTS.read_text())
    source = python_docs(opts.data)
    # Scales with every engine's result already there are skipped (no vocab trained if none is left).
    todo = [scale for scale in opts.scales if len(results.get(f"{scale}x", {})) != len(ENGINES)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs, files, size = make_inputs(source, tmp / "in1", 1)
        if todo:
            train = ["--input", inputs, "--output", str(tmp / "vocab_run"), "--vocab_size", "8000", *COMMON]
            seconds, _ = run_pipeline([*train, "--dupe_factor", "1"])
            vocab = str(tmp / "vocab_run" / "vocab.model")
            print(f"Python docs: {files} files, {size / 1e6:.1f} MB at 1x; vocab (8000) trained in "
                  f"{seconds:.1f} s; {os.cpu_count()} CPUs")  # fmt: skip
        for scale in todo:
            key = f"{scale}x"
            inputs, files, size = make_inputs(source, tmp / f"in{scale}", scale)
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in ENGINES}
            reference = None
            for _ in range(opts.repeats):  # in turns: the machine's speed drifts minute to minute
                for name, flags in ENGINES.items():
                    out = tmp / f"out_{scale}_{name.replace(' ', '_')}"
                    runs[name].append(
                        run_pipeline(
                            ["--input", inputs, "--output", str(out), "--vocab", vocab, *COMMON, *flags]
                        )
                    )
                    got = digest(out)
                    reference = reference or got
                    if got != reference:
                        raise SystemExit(f"{scale}x: {name} wrote other bytes than the in-process build")
            manifest = json.loads((out / "manifest.json").read_text())
            instances = sum(split["instances"] for split in manifest["splits"].values())
            results[key] = {
                name: {
                    "seconds": statistics.median(s for s, _ in timed),
                    "all_seconds": [round(s, 2) for s, _ in timed],
                    "peak_mib": max(m for _, m in timed),
                    "instances": instances,
                    "megabytes": round(size / 1e6, 2),
                }
                for name, timed in runs.items()
            }
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{'scale':>5} {'engine':>26} {'seconds':>8} {'instances/s':>11} {'peak MiB':>9} {'vs best':>7}")
    for key, engines in results.items():
        best = min(e["seconds"] for name, e in engines.items() if not name.startswith("dask"))
        for name, e in engines.items():
            print(f"{key:>5} {name:>26} {e['seconds']:8.1f} {e['instances'] / e['seconds']:11,.0f} "
                  f"{e['peak_mib']:9,.0f} {e['seconds'] / best:7.2f}")  # fmt: skip
    print(f"\n{'scale':>5} {'engine':>24} {'1 worker':>8} {'2 workers':>9} {'speed-up':>8}")
    for key, engines in results.items():
        for engine, (one, two) in SCALING.items():
            if one in engines and two in engines:
                a, b = engines[one]["seconds"], engines[two]["seconds"]
                print(f"{key:>5} {engine:>24} {a:8.1f} {b:9.1f} {a / b:7.2f}x")


if __name__ == "__main__":
    main()
