"""Corrupt shards, a missing shard, a manifest that disagrees with its shards, and the configuration
mistakes users really make: each stops `launch.pretrain` with one line naming the cause, and what
the data or manifest gets wrong is caught before the first step."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model.config import BertConfig
from pipeline.schema import read_manifest
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


@pytest.fixture(scope="module")
def bert_json(small_corpus, tmp_path_factory) -> Path:
    vocab = read_manifest(str(small_corpus)).vocab.size
    path = tmp_path_factory.mktemp("bert") / "bert.json"
    path.write_text(BertConfig(vocab, 24, 1, 3, 44, max_position=40).to_json())
    return path


def pretrain(corpus: Path, model_dir: Path, bert_json: Path, *extra: str) -> tuple[int, str]:
    """`python -m launch.pretrain` in a fresh process: (exit code, last stderr line)."""
    done = subprocess.run(
        [sys.executable, "-m", "launch.pretrain", "--data", str(corpus), "--model_dir", str(model_dir),
         "--bert_config", str(bert_json), "--global_batch_size", "8", "--train_steps", "40",
         "--log_every", "20", "--checkpoint_every", "20", "--eval_every", "20", "--eval_steps", "1",
         "--no-export", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def copy_of(small_corpus: Path, folder: Path) -> Path:
    shutil.copytree(small_corpus, folder)
    return folder


def first_shard(corpus: Path) -> Path:
    return Path(read_manifest(str(corpus)).files("train")[0])


def truncate(corpus: Path) -> str:
    shard = first_shard(corpus)
    shard.write_bytes(shard.read_bytes()[:-37])  # the last record cut short
    return shard.name


def flip_bytes(corpus: Path) -> str:
    shard = first_shard(corpus)
    data = bytearray(shard.read_bytes())
    for at in (300, 301, 2000):  # inside early records' payloads: same size, bad CRC
        data[at] ^= 0xFF
    shard.write_bytes(bytes(data))
    return shard.name


def remove_shard(corpus: Path) -> str:
    shard = first_shard(corpus)
    shard.unlink()
    return shard.name


def edit_manifest(corpus: Path, change) -> str:
    manifest = json.loads((corpus / "manifest.json").read_text())
    change(manifest)
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    return "manifest.json"


def miscount(corpus: Path) -> str:
    return edit_manifest(corpus, lambda m: m["splits"]["train"]["shards"][1].update(records=5))


def old_schema(corpus: Path) -> str:
    return edit_manifest(corpus, lambda m: m.update(schema_version=m["schema_version"] + 1))


def other_vocab(corpus: Path) -> str:
    (corpus / "vocab.model").write_bytes((corpus / "vocab.model").read_bytes() + b"\n")
    return "vocab.model"


CASES = {
    # case: (damage, what the one line must say, caught before the first step)
    "a truncated shard": (truncate, "bytes, the manifest says", True),
    "flipped bytes inside a shard": (flip_bytes, "corrupt", False),
    "a missing shard": (remove_shard, "in the manifest but missing", True),
    "manifest record count disagrees": (miscount, "instances but its shards list", True),
    "manifest from another schema version": (old_schema, "schema_version expected", True),
    "vocab file not the manifest's (hash)": (other_vocab, "sha256", True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_data_stops_with_one_line_naming_the_file(case, small_corpus, bert_json, tmp_path, report):
    damage, message, before_first_step = CASES[case]
    corpus = copy_of(small_corpus, tmp_path / "corpus")
    name = damage(corpus)
    code, line = pretrain(corpus, tmp_path / "run", bert_json)
    assert code == 2, line
    assert line.startswith("error: ") and name in line and message in line, line
    if before_first_step:
        assert not (tmp_path / "run" / "history.jsonl").exists()
        assert not (tmp_path / "run" / "checkpoints").exists()
    report(f"bad data: {case}", detail=f"`{line}`")


def test_configuration_mistakes_say_what_to_change(
    small_corpus, mixture_corpora, bert_json, tmp_path, report
):
    empty = tmp_path / "empty"
    empty.mkdir()
    bert = BertConfig.from_json(bert_json.read_text())
    short, other = tmp_path / "short.json", tmp_path / "other.json"
    short.write_text(BertConfig(bert.vocab_size, 24, 1, 3, 44, max_position=16).to_json())
    other.write_text(BertConfig(bert.vocab_size + 7, 24, 1, 3, 44, max_position=40).to_json())
    cases = {
        "seq_len > the model's max_position": (
            (small_corpus, short),
            "rebuild the corpus with --seq_len <= 16",
        ),
        "vocab size mismatch": ((small_corpus, other), f"set vocab_size to {bert.vocab_size}"),
        "--data an empty folder": ((empty, bert_json), "has no manifest.json; build a corpus first"),
        "a TPU run with local paths": (
            (small_corpus, bert_json, "--strategy", "tpu"),
            "a TPU reads and writes only gs:// paths; copy the corpus to a bucket",
        ),
        "a mixture of corpora that differ": (
            (f"a={small_corpus},b={mixture_corpora / 'docs' / 'seq33'}", bert_json),
            "seq_len 33, but a has 32; every corpus of a run needs the same vocab",
        ),
        "a phase without a corpus of its length": (
            (mixture_corpora / "docs", bert_json, "--phases", "33:0.5,40:0.5"),
            "no seq40/ corpus (found lengths 33, 45); rebuild it with --seq_len 33,40,45",
        ),
    }
    for case, ((corpus, config, *extra), hint) in cases.items():
        code, line = pretrain(corpus, tmp_path / "run", config, *extra)
        assert code == 2 and line.startswith("error: ") and hint in line, (case, line)
        report(f"config: {case}", detail=f"`{line}`")


DIVISIBLE = """
import sys
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from launch.config import TrainConfig
from common.errors import BertbeamError
from launch.prepare import prepare

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
try:
    data, model_dir, bert = sys.argv[1:4]
    prepare(TrainConfig(data=data, model_dir=model_dir, bert_config=bert, global_batch_size=9), strategy)
except BertbeamError as e:
    print(f"error: {e}")
"""


def test_a_global_batch_that_does_not_split_over_replicas(small_corpus, bert_json, tmp_path, report):
    done = subprocess.run(
        [sys.executable, "-c", DIVISIBLE, str(small_corpus), str(tmp_path / "run"), str(bert_json)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    line = done.stdout.strip().splitlines()[-1]
    assert line == (
        "error: --global_batch_size 9 does not divide over 2 replicas; use a multiple of 2 or "
        "--per_replica_batch_size"
    ), done.stderr[-2000:]
    report("config: global batch not divisible by replicas (2)", detail=f"`{line}`")
