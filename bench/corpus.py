"""Corpus pipeline throughput and memory on the Python 3.11 docs, at 1x, 4x and 8x the corpus.

    .venv/bin/python bench/corpus.py            # or: make bench-corpus
    .venv/bin/python bench/corpus.py --scales 1 --modes in_memory

Prints, per scale and DirectRunner mode: documents/s, instances/s, MB of text per minute per core
and peak RSS of the whole process tree (runner and workers), at seq_len 128, dupe_factor 5, with a
vocab trained once beforehand (its training time is printed on its own). The reference in the same
process: sentencepiece encoding alone of the same text on the same cores, and the ratio of the
pipeline's per-core text rate to it. Copies of the corpus get a distinct first line each, so
deduplication keeps them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.fetch_corpora import python_docs  # noqa: E402
from pipeline.schema import read_manifest  # noqa: E402

RUN_ONE = """
import json, sys, time
from pipeline import build_corpus
start = time.perf_counter()
build_corpus.run(sys.argv[1:])
print("BENCH " + json.dumps({"seconds": time.perf_counter() - start}))
"""


def make_inputs(source: Path, folder: Path, copies: int) -> tuple[str, int, int]:
    """`copies` copies of every docs file, each made distinct; returns (glob, files, bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    files, size = 0, 0
    for path in sorted(source.rglob("*.rst.txt")):
        body = path.read_bytes()
        for c in range(copies):
            data = f"Copy {c} of {path.name}.\n\n".encode() + body
            (folder / f"c{c}_{path.parent.name}_{path.name}").write_bytes(data)
            files += 1
            size += len(data)
    return str(folder / "*.rst.txt"), files, size


def run_pipeline(args: list[str]) -> tuple[float, float]:
    """(pipeline seconds, peak RSS in MiB of the process and all its children)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_ONE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    peak = 0
    stop = threading.Event()

    def watch():
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    stop.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"pipeline failed ({proc.returncode}): {args}")
    line = next(line for line in out.splitlines() if line.startswith("BENCH "))
    return json.loads(line[6:])["seconds"], peak / 2**20


def _encode_chunk(job):
    model_path, paths = job
    import sentencepiece as spm

    from pipeline.text import document_sentences

    processor = spm.SentencePieceProcessor(model_file=model_path)
    tokens = 0
    for path in paths:
        document = Path(path).read_text(encoding="utf-8", errors="replace")
        tokens += sum(len(ids) for ids in processor.encode(document_sentences(document)))
    return tokens


def encode_only(model_path: str, folder: Path, cores: int) -> tuple[float, int]:
    """Seconds to split and sentencepiece-encode every file in `folder` on `cores` processes."""
    paths = sorted(str(p) for p in folder.glob("*.rst.txt"))
    jobs = [(model_path, paths[i :: cores * 8]) for i in range(cores * 8)]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(cores) as pool:
        tokens = sum(pool.map(_encode_chunk, jobs))
    return time.perf_counter() - start, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--modes", nargs="+", default=["in_memory", "multi_processing"])
    parser.add_argument("--data", default=str(REPO / "data"))
    args = parser.parse_args()
    cores = psutil.cpu_count(logical=True)
    source = python_docs(args.data)
    common = ["--doc_per_file", "--seq_len", "128", "--max_predictions", "20", "--dupe_factor", "5"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base_glob, base_files, base_bytes = make_inputs(source, tmp / "in1", 1)
        seconds, peak = run_pipeline(
            [
                "--input",
                base_glob,
                "--output",
                str(tmp / "vocab_run"),
                "--vocab_size",
                "8000",
                *common,
                "--direct_running_mode",
                "in_memory",
            ]
        )
        vocab = str(tmp / "vocab_run" / "vocab.model")
        print(f"corpus: Python 3.11 docs, {base_files} files, {base_bytes / 1e6:.1f} MB; {cores} cores")
        print(f"1x with vocab training (8000 pieces), in_memory: {seconds:.1f} s, peak {peak:.0f} MiB\n")

        enc_seconds, enc_tokens = encode_only(vocab, tmp / "in1", cores)
        enc_rate = base_bytes / 1e6 / (enc_seconds / 60) / cores
        print(
            f"reference, sentencepiece encode only ({cores} processes): {enc_seconds:.2f} s, "
            f"{enc_tokens / enc_seconds:,.0f} tokens/s, {enc_rate:.1f} MB/min/core\n"
        )

        header = f"{'scale':>5} {'mode':>16} {'docs':>7} {'instances':>9} {'seconds':>7} {'docs/s':>8} "
        header += f"{'inst/s':>8} {'MB/min/core':>11} {'vs encode':>9} {'peak MiB':>8}"
        print(header)
        for scale in args.scales:
            glob, _, size = (
                make_inputs(source, tmp / f"in{scale}", scale) if scale > 1 else (base_glob, 0, base_bytes)
            )
            for mode in args.modes:
                workers = 1 if mode == "in_memory" else cores
                out = tmp / f"out{scale}_{mode}"
                seconds, peak = run_pipeline(
                    [
                        "--input",
                        glob,
                        "--output",
                        str(out),
                        "--vocab",
                        vocab,
                        *common,
                        "--direct_running_mode",
                        mode,
                        "--direct_num_workers",
                        str(workers),
                    ]
                )
                manifest = read_manifest(str(out))
                docs = manifest.input["documents"]
                instances = sum(split.instances for split in manifest.splits.values())
                rate = size / 1e6 / (seconds / 60) / workers
                print(
                    f"{scale:>4}x {mode:>16} {docs:>7} {instances:>9} {seconds:>7.1f} {docs / seconds:>8.1f} "
                    f"{instances / seconds:>8.0f} {rate:>11.1f} {rate / enc_rate:>9.2f} {peak:>8.0f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
