"""Corpus pipeline throughput and memory on the Python 3.11 docs, at 1x, 4x and 8x the corpus, and
the cost of a word segmenter on Chinese text.

    .venv/bin/python bench/corpus.py            # or: make bench-corpus
    .venv/bin/python bench/corpus.py --scales 1 --modes in_memory --corpora docs

Prints, per scale and DirectRunner mode: documents/s, instances/s, MB of text per minute per core
and peak RSS of the whole process tree (runner and workers), at seq_len 128, dupe_factor 5, with a
vocab trained once beforehand (its training time is printed on its own). The reference in the same
process: sentencepiece encoding alone of the same text on the same cores, and the ratio of the
pipeline's per-core text rate to it. Copies of the corpus get a distinct first line each, so
deduplication keeps them.

Side by side with google-research/bert (`--corpora google`): its create_pretraining_data.py (PyPI's
bert-tensorflow 1.0.4, TF1 code run through tf.compat.v1) and bertbeam on the same work: the
Python docs as technical documentation in BERT's input format (a paragraph per line, a blank line
between files), a lower-cased 30,522-piece WordPiece vocab.txt (trained by bertbeam beforehand:
Google's uncased vocab cannot be downloaded here), seq_len 128, 20 predictions, dupe 5, NSP.
Per builder: seconds (the median of --repeats runs, 3, taken in turns: this machine's speed drifts
by 15 % from minute to minute), peak RSS, rows, real tokens per row (fill) and full rows; the ratio
is Google's time over ours. Target: >= 5x, and a fill at least Google's. In the same turns, the
tokenizer alone (`tokenizers`, the same vocab, every core) encodes every line of the same file:
"tokenizer/ours" is its time over the build's (issue 38's target: >= 0.5). The medians and runs
are written to bench/results/corpus_google.json.

Chinese (zh_reviews, ~7.4 MB): per DirectRunner mode, the whole-word build with a trained
character WordPiece vocab, without a segmenter and with jieba, beside jieba alone on the same
sentences on as many processes. Target: the jieba build takes at most 1.2x (build without a
segmenter + jieba alone), i.e. segmentation runs in the pipeline at jieba's own speed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))

from pipeline.fetch.corpora import python_docs, zh_reviews  # noqa: E402
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


GOOGLE = """
import sys, time
from absl import app
from bert import create_pretraining_data as builder
start = time.perf_counter()
try:
    app.run(builder.main, argv=["create_pretraining_data.py", *sys.argv[1:]])
except SystemExit:
    pass
print("BENCH " + json.dumps({"seconds": time.perf_counter() - start}))
""".replace("import sys, time", "import json, sys, time")


# The tokenizer alone (issue 38's reference): `tokenizers`' WordPiece with the same vocab and
# lower-casing, its own thread pool on every core, encoding every non-blank line of the same file
# (offsets included, as a user would call it), timed from after the file is read.
ENCODE_ONE = """
import json, sys, time
from tokenizers import BertWordPieceTokenizer
tokenizer = BertWordPieceTokenizer(sys.argv[2], lowercase=True)
with open(sys.argv[1], encoding="utf-8") as f:
    lines = [line for line in f.read().split("\\n") if line.strip()]
start = time.perf_counter()
tokenizer.encode_batch(lines, add_special_tokens=False)
print("BENCH " + json.dumps({"seconds": time.perf_counter() - start}))
"""


def run_pipeline(args: list[str], script: str = RUN_ONE, workers: dict | None = None) -> tuple[float, float]:
    """(seconds, peak RSS in MiB of the process and all its children) of a build: bertbeam's
    (`script` RUN_ONE, `args` its flags) or google-research/bert's (GOOGLE). With `workers` (a
    dict), also the peak RSS in MiB of the largest worker process there (a child started by
    multiprocessing's spawn: Dask's workers, the DirectRunner's) under "peak_mib"."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    peak, worker_peak, spawned = 0, 0, {}
    stop = threading.Event()

    def watch():
        nonlocal peak, worker_peak
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
                rss = {p.pid: p.memory_info().rss for p in tree if p.is_running()}
                peak = max(peak, sum(rss.values()))
                for p in tree[1:]:
                    if p.pid not in spawned:
                        spawned[p.pid] = "spawn_main" in " ".join(p.cmdline())
                    if spawned[p.pid]:
                        worker_peak = max(worker_peak, rss.get(p.pid, 0))
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
    if workers is not None:
        workers["peak_mib"] = worker_peak / 2**20
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


def _segment_chunk(documents: list[str]) -> int:
    import logging

    import jieba

    from pipeline.text import document_sentences

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    return sum(
        len(tokenizer.lcut(s, cut_all=False, HMM=True)) for d in documents for s in document_sentences(d)
    )


def segment_only(folder: Path, processes: int) -> tuple[float, int]:
    """Seconds for jieba alone to segment every sentence of the distinct documents under `folder`
    on `processes` processes (its dictionary load included, as each pipeline worker pays it)."""
    # Distinct documents only: the pipeline deduplicates before it segments.
    texts = (p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt")))
    documents = sorted({d.strip() for t in texts for d in t.split("\n\n") if d.strip()})
    jobs = [documents[i::processes] for i in range(processes)]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        words = sum(pool.map(_segment_chunk, jobs))
    return time.perf_counter() - start, words


def chinese(data: str, modes: list[str], cores: int) -> None:
    source = zh_reviews(data)
    size = sum(p.stat().st_size for p in source.glob("*.txt"))
    common = ["--whole_word_mask", "--seq_len", "128", "--max_predictions", "20", "--dupe_factor", "5"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs = str(source / "*.txt")
        train = ["--input", inputs, "--output", str(tmp / "vocab_run"), "--vocab_size", "8000",
                 "--vocab_model_type", "wordpiece", *common, "--dupe_factor", "1"]  # fmt: skip
        seconds, _ = run_pipeline(train)
        vocab = str(tmp / "vocab_run" / "vocab.txt")
        print(f"\ncorpus: zh_reviews (Chinese), {size / 1e6:.1f} MB; "
              f"WordPiece vocab (8000) trained in {seconds:.1f} s")  # fmt: skip
        header = f"{'mode':>16} {'no segmenter s':>14} {'jieba s':>8} {'jieba alone s':>13} "
        header += f"{'jieba/(none+alone)':>18} {'MB/min/core':>11} {'peak MiB':>8}"
        print(header)
        for mode in modes:
            workers = 1 if mode == "in_memory" else cores
            timed = {}
            for segmenter in ("none", "jieba"):
                out = tmp / f"zh_{mode}_{segmenter}"
                timed[segmenter] = run_pipeline(
                    ["--input", inputs, "--output", str(out), "--vocab", vocab, *common, "--word_segmenter",
                     segmenter, "--direct_running_mode", mode, "--direct_num_workers", str(workers)]
                )  # fmt: skip
            alone, _ = segment_only(source, workers)
            (none, _), (jieba, peak) = timed["none"], timed["jieba"]
            rate = size / 1e6 / (jieba / 60) / workers
            print(f"{mode:>16} {none:>14.1f} {jieba:>8.1f} {alone:>13.1f} {jieba / (none + alone):>18.2f} "
                  f"{rate:>11.1f} {peak:>8.0f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--modes", nargs="+", default=["in_memory", "multi_processing"])
    parser.add_argument("--data", default=str(REPO / "data"))
    parser.add_argument("--repeats", type=int, default=3, help="runs per builder against Google (median)")
    parser.add_argument(
        "--corpora", nargs="+", default=["docs", "google", "zh"], choices=["docs", "google", "zh"]
    )
    args = parser.parse_args()
    cores = psutil.cpu_count(logical=True)
    if "docs" in args.corpora:
        docs(args, cores)
    if "google" in args.corpora:
        against_google(args.data, cores, args.repeats)
    if "zh" in args.corpora:
        chinese(args.data, args.modes, cores)
    return 0


def google_format(source: Path, path: Path) -> int:
    """The docs in BERT's input format: a paragraph per line, a blank line between files; bytes."""
    with path.open("w", encoding="utf-8") as out:
        for file in sorted(source.rglob("*.rst.txt")):
            text = file.read_text(encoding="utf-8", errors="replace")
            paragraphs = [
                " ".join(line.strip() for line in p.splitlines() if line.strip()) for p in text.split("\n\n")
            ]
            out.write("\n".join(p for p in paragraphs if p) + "\n\n")
    return path.stat().st_size


def fill(files: list[str], seq_len: int = 128) -> tuple[int, float, float]:
    """(rows, mean real tokens per row, share of full rows) of TFRecord files of BERT examples."""
    import numpy as np
    import tensorflow as tf

    spec = {"input_mask": tf.io.FixedLenFeature([seq_len], tf.int64)}
    parsed = tf.data.TFRecordDataset(files).batch(8192).map(lambda r: tf.io.parse_example(r, spec))
    real = np.concatenate([batch["input_mask"].numpy().sum(axis=1) for batch in parsed])
    return len(real), float(real.mean()), float(np.mean(real == seq_len))


def against_google(data: str, cores: int, repeats: int) -> None:
    source = python_docs(data)
    work = ["--seq_len", "128", "--max_predictions", "20", "--dupe_factor", "5"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text = tmp / "docs.txt"
        size = google_format(source, text)
        seconds, _ = run_pipeline(
            [
                "--input",
                str(text),
                "--output",
                str(tmp / "vocab_run"),
                *work,
                "--vocab_model_type",
                "wordpiece",
                "--do_lower_case",
                "--vocab_size",
                "30522",
                "--dupe_factor",
                "1",
            ]
        )
        vocab = tmp / "vocab_run" / "vocab.txt"
        print(
            f"\nagainst google-research/bert: the docs in its input format, {size / 1e6:.1f} MB; lower-cased "
            f"WordPiece vocab (30,522, trained in {seconds:.1f} s); seq 128, 20 predictions, dupe 5, NSP"
        )
        google = [
            "--input_file",
            str(text),
            "--output_file",
            str(tmp / "google.tfrecord"),
            "--vocab_file",
            str(vocab),
            "--do_lower_case=True",
            "--max_seq_length=128",
            "--max_predictions_per_seq=20",
            "--masked_lm_prob=0.15",
            "--random_seed=12345",
            "--dupe_factor=5",
            "--short_seq_prob=0.1",
        ]
        rows = []
        builds = [("google-research/bert", 1, google, GOOGLE, tmp / "google.tfrecord")]
        for mode, workers in (("in_memory", 1), ("multi_processing", cores)):
            out = tmp / f"ours_{mode}"
            ours = [
                "--input",
                str(text),
                "--output",
                str(out),
                "--vocab",
                str(vocab),
                "--do_lower_case",
                "--mode",
                "segment_pair",
                "--nsp",
                *work,
                "--validation_fraction",
                "0",
                "--direct_running_mode",
                mode,
                "--direct_num_workers",
                str(workers),
            ]
            builds.append((f"bertbeam {mode}", workers, ours, RUN_ONE, out))
        builds.append(("tokenizer alone", cores, [str(text), str(vocab)], ENCODE_ONE, None))
        # Each builder `repeats` times, in turns (a slow minute on a shared machine hits them all):
        # the median, and the spread.
        times: dict[str, list[float]] = {name: [] for name, *_ in builds}
        peaks: dict[str, float] = {name: 0.0 for name, *_ in builds}
        for _ in range(repeats):
            for name, _, flags, script, _ in builds:
                seconds, peak = run_pipeline(flags, script)
                times[name].append(seconds)
                peaks[name] = max(peaks[name], peak)
        for name, workers, _, _, out in builds:
            if out is None:
                continue
            files = [str(out)] if name.startswith("google") else read_manifest(str(out)).files("train")
            rows.append((name, workers, statistics.median(times[name]), peaks[name], *fill(files)))
        spread = "; ".join(f"{name} {min(t):.1f}-{max(t):.1f} s" for name, t in times.items())
        print(f"seconds: the median of {repeats} runs each, in turns ({spread})")
        reference, encode = rows[0][2], statistics.median(times["tokenizer alone"])
        print(
            f"{'builder':>28} {'workers':>7} {'seconds':>7} {'peak MiB':>8} {'rows':>8} {'real/row':>8} "
            f"{'fill':>6} {'full':>6} {'google/ours':>11} {'tokenizer/ours':>14}"
        )
        for name, workers, seconds, peak, n, real, full in rows:
            print(
                f"{name:>28} {workers:>7} {seconds:>7.1f} {peak:>8.0f} {n:>8,} {real:>8.1f} "
                f"{real / 128:>6.1%} {full:>6.1%} {reference / seconds:>10.2f}x {encode / seconds:>14.2f}"
            )
        print(f"{'tokenizer alone':>28} {cores:>7} {encode:>7.1f} {peaks['tokenizer alone']:>8.0f}")
        result = {
            name: {
                "seconds": round(s, 2),
                "runs": [round(t, 2) for t in times[name]],
                "peak_mib": round(p),
                "rows": n,
                "real_per_row": round(r, 2),
                "full": round(f, 4),
                "speedup": round(reference / s, 2),
                "of_tokenizer": round(encode / s, 3),
            }
            for name, _, s, p, n, r, f in rows
        }
        result["tokenizer alone"] = {
            "seconds": round(encode, 2),
            "runs": [round(t, 2) for t in times["tokenizer alone"]],
        }
        print(json.dumps(result))
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "corpus_google.json").write_text(json.dumps(result, indent=1) + "\n")


def docs(args, cores: int) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
