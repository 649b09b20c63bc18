"""A corpus build SIGKILLed at random moments, three times: no file under a final shard name is
ever partial, and the re-run's shards, vocab and manifest are byte-identical to an uninterrupted
build's."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf

from tests.conftest import REPO

SHARD_GLOBS = ("train-*-of-*.tfrecord", "validation-*-of-*.tfrecord")

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


def command(python_docs: Path, vocab: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "pipeline.build_corpus",
        "--input", f"{python_docs}/library/b*.rst.txt,{python_docs}/library/co*.rst.txt", "--doc_per_file",
        "--output", str(out), "--vocab", str(vocab), "--seq_len", "48", "--max_predictions", "7",
        "--dupe_factor", "3", "--num_shards", "4", "--validation_fraction", "0.2",
    ]  # fmt: skip


def outputs(folder: Path) -> dict[str, bytes]:
    names = [p for pattern in SHARD_GLOBS for p in folder.glob(pattern)]
    names += [folder / n for n in ("manifest.json", "vocab.model") if (folder / n).exists()]
    return {p.name: p.read_bytes() for p in names}


def start(argv: list[str], log: Path) -> tuple[subprocess.Popen, float]:
    """Starts a build; returns it once its pipeline starts (the config line: imports are done),
    with that moment."""
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    while "corpus config" not in log.read_text(errors="replace") and process.poll() is None:
        time.sleep(0.01)
    return process, time.monotonic()


def test_killed_three_times_then_identical(python_docs, botchan_vocab, tmp_path, report):
    reference = tmp_path / "reference"
    process, began = start(command(python_docs, botchan_vocab, reference), tmp_path / "reference.log")
    assert process.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-2000:]
    work = time.monotonic() - began  # the pipeline's own time, after the imports
    expected = outputs(reference)
    assert len(expected) == 4 + 1 + 2  # 4 train shards, a validation shard, manifest, vocab

    seed = int(os.environ.get("KILL_TEST_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    out = tmp_path / "killed"
    kills = []
    for n in range(3):
        log = tmp_path / f"killed{n}.log"
        process, began = start(command(python_docs, botchan_vocab, out), log)
        delay = rng.uniform(0.05, 0.95) * work
        time.sleep(max(0.0, began + delay - time.monotonic()))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        shards_done = log.read_text(errors="replace").count(" wrote ")
        kills.append(f"{delay:.1f}s ({shards_done} shards written)")
        # Whatever is under a final name is complete and correct: never a partial shard.
        for name, data in outputs(out).items():
            if name.endswith(".tfrecord"):
                assert sum(1 for _ in tf.data.TFRecordDataset(str(out / name))) > 0, f"seed {seed}: {name}"
            assert data == expected[name], f"seed {seed}, kill {n} at {delay:.1f}s: {name} differs"

    subprocess.run(command(python_docs, botchan_vocab, out), cwd=REPO, check=True, capture_output=True,
                   timeout=600)  # fmt: skip
    found = outputs(out)
    assert found.keys() == expected.keys()
    for name in expected:
        assert found[name] == expected[name], f"seed {seed}: {name} differs after the re-run"
    assert not (out / "_tmp").exists() and not list(out.glob("*.tmp"))
    report(
        "corpus build SIGKILLed 3 times, then re-run",
        detail=f"seed {seed}; kills {', '.join(kills)} into a {work:.1f}s pipeline; "
        f"{len(expected)} files byte-identical",
    )
