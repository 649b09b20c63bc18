"""bench/gpu.sh, the device check a lent GPU runs first (issue 57), dry-run here as the GPU image
runs it: Keras on JAX, TensorFlow not importable, the tiny preset at tiny batches. Every kind of
row times, each is written as it finishes, a rerun skips them, and a bad row is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from model.config import BertConfig

REPO = Path(__file__).resolve().parents[1]
ROWS = ("tiny@128", "tiny@128:attention_dropout=0", "tiny@128:attention_dropout=0+fused=off+vocab_multiple=1",
        "tiny@128:dropout_rng=rbg16", "modern-tiny@128")  # fmt: skip
SMALL = ["--batch_sizes", "128:4,512:2", "--steps", "2", "--steps_per_execution", "1", "--matmul_size", "64"]


def gpu_sh(args: list[str], env: dict) -> subprocess.CompletedProcess:
    env = {**env, "KERAS_BACKEND": "jax", "PYTHON": sys.executable}
    return subprocess.run(["bash", "bench/gpu.sh", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip


@pytest.mark.slow
def test_the_device_check_dry_runs_without_tensorflow(without_tensorflow, tmp_path):
    output = tmp_path / "gpu.json"
    done = gpu_sh(["--rows", ",".join(ROWS), *SMALL, "--output", str(output)], without_tensorflow)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    rows = {r["row"]: r for r in json.loads(output.read_text())}
    assert list(rows) == list(ROWS)
    assert all(r["backend"] == "jax" and r["steps"] >= 2 and r["examples_per_s"] > 0 for r in rows.values())
    base, fused = rows["tiny@128"], rows["tiny@128:attention_dropout=0"]
    configured = BertConfig.preset("tiny", 30522).attention_probs_dropout  # as the preset says
    assert base["vocab_rows"] == 30592 and base["attention_dropout"] == configured
    assert base["attention"] == ("fused" if configured == 0 else "written out")
    assert fused["attention_dropout"] == 0.0 and fused["attention"] == "fused"
    unpadded = rows["tiny@128:attention_dropout=0+fused=off+vocab_multiple=1"]
    assert unpadded["vocab_rows"] == 30522 and unpadded["attention"] == "xla"
    assert rows["tiny@128:dropout_rng=rbg16"]["dropout_rng"] == "rbg16"

    again = gpu_sh(["--rows", ",".join(ROWS[:2]), *SMALL, "--output", str(output)], without_tensorflow)
    assert again.returncode == 0 and again.stdout.count("already in") == 2
    assert [r["row"] for r in json.loads(output.read_text())] == list(ROWS)


def test_a_bad_row_is_one_line(without_tensorflow):
    for row, message in (
        ("base@256", "expected PRESET@SEQ_LEN with SEQ_LEN one of [128, 512]"),
        ("base@128:speed=11", "expected KEY=VALUE with KEY one of attention_dropout"),
        ("base@128:fused=on+attention_dropout=0.1", "fused attention needs attention dropout 0"),
        ("huge@128", "unknown preset 'huge'"),
    ):
        done = gpu_sh(["--rows", row], without_tensorflow)
        assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]
