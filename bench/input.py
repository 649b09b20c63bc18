"""Input function throughput: examples/s at seq_len 128, batch 256, static and dynamic masking,
and a three-corpus mixture, for both readers: tf.data's and numpy's (no TensorFlow).

    .venv/bin/python bench/input.py [--corpus out/corpus]     # or: make bench-input

Builds (once, into a temporary folder unless --corpus is given) the Python docs corpus at
seq_len 128, then times `make_dataset(training=True)` end to end (read, parse, shuffle, batch,
cast, optionally re-mask) after a warm-up, as `model.fit` would consume it, then the same batches
from `make_batches` (the reader where TensorFlow is not installed; one thread, as the JAX run's
prefetch thread drives it). Targets on 2 cores, for each reader:
>= 25,000 examples/s static, >= 10,000 dynamic. The mixture row reads the corpus as three sources
at rates 1/3 (chosen per record in blocks, `choose_from_datasets` over three record streams): the cost of
mixing itself.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BATCH = 256


def measure(corpus: str, masking, seconds: float = 10.0, sources: int = 1, reader: str = "tf.data") -> float:
    from pipeline.reader.batches import make_batches
    from pipeline.reader.config import InputConfig
    from pipeline.schema import read_manifest

    config = InputConfig(per_replica_batch_size=BATCH, training=True, seed=0, dynamic_masking=masking)
    manifests, rates = [read_manifest(corpus)] * sources, [1 / sources] * sources
    if reader == "tf.data":
        from pipeline.reader.dataset import make_dataset

        iterator = iter(make_dataset(manifests, "train", config, rates=rates))
    else:
        iterator = make_batches(manifests, "train", config, rates=rates)
    for _ in range(20):  # warm-up: fill the shuffle buffer and the prefetch queue
        next(iterator)
    batches, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(iterator)
        batches += 1
    return batches * BATCH / (time.perf_counter() - start)


def docs_corpus(folder: str) -> str:
    """The Python docs corpus at seq_len 128 (the demo's), built into `folder`; returns its path."""
    from pipeline import build_corpus
    from pipeline.fetch.corpora import python_docs

    docs = python_docs(REPO / "data")
    corpus = f"{folder}/corpus"
    build_corpus.run([f"--input={docs}/*.rst.txt,{docs}/*/*.rst.txt", f"--output={corpus}",
                      "--doc_per_file", "--vocab_size=8000", "--dupe_factor=2"])  # fmt: skip
    return corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="a built corpus (seq_len 128); default: build the Python docs one")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--readers", default="tf.data,numpy", help="which readers, in turn: tf.data, numpy")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus or docs_corpus(tmp)
        from pipeline.reader.config import DynamicMasking

        print(f"corpus {corpus}, batch {BATCH}, seq_len 128, {os.cpu_count()} cores")
        for reader in args.readers.split(","):
            print(f"-- {reader} reader")
            static = measure(corpus, None, args.seconds, reader=reader)
            print(f"static masking:              {static:>9,.0f} examples/s   (target >= 25,000)")
            mixed = measure(corpus, None, args.seconds, sources=3, reader=reader)
            print(
                f"static, mixture of 3:        {mixed:>9,.0f} examples/s   ({mixed / static:.2f} of static)"
            )
            for whole_word in (False, True):
                masking = DynamicMasking.from_vocab_file(f"{corpus}/vocab.model", whole_word=whole_word)
                rate = measure(corpus, masking, args.seconds, reader=reader)
                label = "dynamic, whole-word" if whole_word else "dynamic masking"
                ratio = rate / static
                print(
                    f"{label + ':':<28} {rate:>9,.0f} examples/s   (target >= 10,000; {ratio:.2f} of static)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
