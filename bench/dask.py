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

`--memory` (make bench-dask-memory): only Dask with 2 workers, one build at each of 1x, 4x and
16x, and the largest worker process's peak RSS beside the tree's, under `--label` (the code
measured; run the script from another checkout to compare) in bench/results/dask_memory.json.

Targets: Dask with 2 workers within 1.3x of the best single-machine runner on a 2-core machine,
where the engine's overhead is all it can add (issue 26); each multi-worker engine faster with 2
workers than with 1 on 2 cores (issue 38: the speed-up is printed last); a Dask worker's peak
within 1.25x from 1x to 16x (issue 38, `--memory`).
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
from pipeline.fetch.corpora import python_docs  # noqa: E402

RESULTS = REPO / "bench" / "results" / "dask.json"
MEMORY = REPO / "bench" / "results" / "dask_memory.json"
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


def memory(opts) -> None:
    """Issue 38's third target: one Dask build with 2 workers per scale (1x, 4x, 16x by default),
    the largest worker process's peak RSS and the whole tree's, under `--label` (the code measured:
    run it from another checkout to compare). Each scale is written as it finishes; a rerun skips
    the scales its label has."""
    results = json.loads(MEMORY.read_text()) if MEMORY.exists() else {}
    done = results.setdefault(opts.label, {})
    source = python_docs(opts.data)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs, _, _ = make_inputs(source, tmp / "in1", 1)
        train = ["--input", inputs, "--output", str(tmp / "vocab_run"), "--vocab_size", "8000", *COMMON]
        run_pipeline([*train, "--dupe_factor", "1"])
        vocab = str(tmp / "vocab_run" / "vocab.model")
        for scale in opts.scales:
            if f"{scale}x" in done:
                continue
            inputs, _, size = make_inputs(source, tmp / f"in{scale}", scale)
            out, workers = tmp / f"out{scale}", {}
            flags = ["--input", inputs, "--output", str(out), "--vocab", vocab, *COMMON]
            seconds, peak = run_pipeline([*flags, *ENGINES["dask 2 workers"]], workers=workers)
            done[f"{scale}x"] = {
                "megabytes": round(size / 1e6, 1),
                "seconds": round(seconds, 1),
                "worker_peak_mib": round(workers["peak_mib"]),
                "tree_peak_mib": round(peak),
            }
            print(opts.label, f"{scale}x", done[f"{scale}x"], flush=True)
            MEMORY.parent.mkdir(parents=True, exist_ok=True)
            MEMORY.write_text(json.dumps(results, indent=1) + "\n")
    header = f"{'code':>28} {'scale':>5} {'MB':>6} {'seconds':>7} {'worker MiB':>10} {'all MiB':>8}"
    print(f"{header} {'worker vs 1x':>12}")
    for label, scales in results.items():
        first = scales.get("1x", {}).get("worker_peak_mib")
        for key, r in scales.items():
            ratio = f"{r['worker_peak_mib'] / first:.2f}" if first else ""
            figures = f"{r['megabytes']:6.1f} {r['seconds']:7.1f} {r['worker_peak_mib']:10,}"
            figures += f" {r['tree_peak_mib']:8,}"
            print(f"{label:>28} {key:>5} {figures} {ratio:>12}")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--memory", action="store_true", help="only Dask's worker memory at --scales (1 4 16)")
    args.add_argument("--label", default="this checkout", help="--memory: the name of the code measured")
    args.add_argument("--scales", type=int, nargs="+", default=None)
    args.add_argument("--repeats", type=int, default=3)
    args.add_argument("--data", default=str(REPO / "data"))
    args.add_argument("--fresh", action="store_true", help="forget bench/results/dask.json's results")
    opts = args.parse_args()
    if opts.memory:
        opts.scales = opts.scales or [1, 4, 16]
        memory(opts)
        return
    opts.scales = opts.scales or [1, 4]
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
