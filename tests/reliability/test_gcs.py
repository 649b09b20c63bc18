"""gs:// end to end, against a real GCS emulator on 127.0.0.1 (see tests/reliability/gcs.py):
raw text on gs:// -> corpus on gs:// -> training from it with checkpoints on gs://, SIGKILLed and
resumed -> export to gs://. Every byte is compared with the same pipeline run on local paths."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from launch.checkpoints import latest, read_checkpoint
from tests.conftest import REPO
from tests.dask_cluster import loopback_cluster
from tests.reliability.gcs import GCS, AnonymousGcs, download, objects, upload

CORPUS_ARGS = ("--doc_per_file", "--vocab_size", "300", "--seq_len", "32", "--max_predictions", "5",
               "--dupe_factor", "2", "--num_shards", "3", "--validation_fraction", "0.3")  # fmt: skip
TRAIN_STEPS = 30

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`


def run(argv: list[str], env: dict | None, log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def pretrain(data: str, model_dir: str) -> list[str]:
    return [sys.executable, "-m", "launch.pretrain", "--data", data, "--model_dir", model_dir,
            "--preset", "tiny", "--global_batch_size", "8", "--train_steps", str(TRAIN_STEPS),
            "--warmup_steps", "5", "--learning_rate", "1e-3", "--log_every", "5", "--checkpoint_every", "5",
            "--eval_every", "10", "--eval_steps", "1"]  # fmt: skip


def fetch(gcs: GCS, prefix: str, into: Path) -> Path:
    """Copies every object under `prefix` to a local folder (the emulator's own API, not TF)."""
    for name in objects(gcs.url, gcs.bucket, prefix):
        if not name.endswith("/"):
            target = into / name[len(prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(download(gcs.url, gcs.bucket, name))
    return into


def latest_variables(checkpoints: Path) -> dict[str, np.ndarray]:
    tensors, _ = read_checkpoint(latest(str(checkpoints)))
    return {n: t for n, t in tensors.items() if n.startswith("model/")}


def wait(process: subprocess.Popen, log: Path) -> None:
    assert process.wait(timeout=600) == 0, log.read_text()[-3000:]


def test_gs_corpus_training_kill_resume_export(python_docs, tmp_path, report):
    raw = sorted((python_docs / "library").glob("b*.rst.txt"))
    local = tmp_path / "local"
    with GCS(tmp_path / "gcs") as gcs:
        env = gcs.env()
        for path in raw:
            upload(gcs.url, gcs.bucket, f"raw/{path.name}", path.read_bytes())

        # Corpus: gs:// in and out (Beam's GcsIO for the inputs, TF's filesystem for the outputs).
        started = time.monotonic()
        corpus = run([sys.executable, "-m", "tests.reliability.gcs", "pipeline.build_corpus",
                      "--input", "gs://bertbeam/raw/*.rst.txt", "--output", "gs://bertbeam/corpus",
                      *CORPUS_ARGS], env, tmp_path / "corpus.log")  # fmt: skip
        wait(corpus, tmp_path / "corpus.log")
        corpus_seconds = time.monotonic() - started
        wait(run([sys.executable, "-m", "pipeline.build_corpus",
                  "--input", f"{python_docs}/library/b*.rst.txt", "--output", str(local / "corpus"),
                  *CORPUS_ARGS], None, tmp_path / "local_corpus.log"),
             tmp_path / "local_corpus.log")  # fmt: skip
        remote = fetch(gcs, "corpus/", tmp_path / "fetched" / "corpus")
        local_files = sorted(p.name for p in (local / "corpus").iterdir())
        assert sorted(p.name for p in remote.iterdir()) == local_files
        for name in local_files:
            if name != "manifest.json":  # it records the input and output paths
                assert (remote / name).read_bytes() == (local / "corpus" / name).read_bytes(), name
        manifests = [
            json.loads((folder / "manifest.json").read_text()) for folder in (remote, local / "corpus")
        ]
        assert manifests[0]["splits"] == manifests[1]["splits"] and manifests[0]["input"]["files"] == len(raw)

        # Training from gs://, checkpoints to gs://, killed once a checkpoint is there, resumed.
        command = pretrain("gs://bertbeam/corpus", "gs://bertbeam/run")
        first = run(command, env, tmp_path / "train0.log")
        while first.poll() is None and "run/checkpoints/ckpt-10.safetensors" not in objects(
            gcs.url, gcs.bucket, "run/checkpoints/"
        ):
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=60) == -signal.SIGKILL, "the run finished before its kill"
        killed_at = json.loads(download(gcs.url, gcs.bucket, "run/history.jsonl").splitlines()[-1])["step"]
        resumed = run(command, env, tmp_path / "train1.log")
        wait(resumed, tmp_path / "train1.log")
        resumed_at = int(re.search(r"resuming at step (\d+)", (tmp_path / "train1.log").read_text())[1])
        assert 5 <= resumed_at <= killed_at  # from a checkpoint on gs://, not from scratch

        # The same run on local paths, uninterrupted: the same weights, bit for bit.
        wait(run(pretrain(str(local / "corpus"), str(local / "run")), None, tmp_path / "local_train.log"),
             tmp_path / "local_train.log")  # fmt: skip
        run_files = fetch(gcs, "run/", tmp_path / "fetched" / "run")
        ours, expected = (
            latest_variables(run_files / "checkpoints"),
            latest_variables(local / "run" / "checkpoints"),
        )
        assert ours.keys() == expected.keys()
        for name in expected:
            np.testing.assert_array_equal(ours[name], expected[name], err_msg=name)
        for name in ("eval.json", "loss.png", "export/pretraining.keras", "export/encoder/saved_model.pb"):
            assert (run_files / name).stat().st_size > 0, name
        assert (
            len(list((run_files / "logs" / "train").glob("events.out.tfevents.*"))) == 2
        )  # killed + resumed

        # Export from the gs:// run to gs://, as from the local one: the same safetensors bytes.
        export = [sys.executable, "-m", "launch.export", "--format", "hf"]
        wait(run([*export, "--model_dir", "gs://bertbeam/run", "--output", "gs://bertbeam/hf"], env,
                 tmp_path / "export.log"), tmp_path / "export.log")  # fmt: skip
        wait(run([*export, "--model_dir", str(local / "run"), "--output", str(local / "hf")], None,
                 tmp_path / "local_export.log"), tmp_path / "local_export.log")  # fmt: skip
        hf = fetch(gcs, "hf/", tmp_path / "fetched" / "hf")
        assert (hf / "model.safetensors").read_bytes() == (local / "hf" / "model.safetensors").read_bytes()
        relayed = gcs.relay.requests
        # tf.data read the shards with TF's own GCS client, through the relay; checkpoints, logs
        # and the export went through pipeline.files (Beam's client, to the emulator directly).
        assert relayed > 50

    report(
        "gs:// end to end on a GCS emulator",
        docs_in=len(raw),
        docs_out=sum(s["documents"] for s in manifests[0]["splits"].values()),
        detail=f"corpus gs://→gs:// in {corpus_seconds:.0f}s, byte-identical to a local build; training from "
        f"gs:// SIGKILLed at step {killed_at}, resumed from step {resumed_at}, weights bit-identical to a "
        f"local run; HF export "
        f"to gs:// identical; {relayed:,} requests of tf.data's reads through the relay",
    )


def test_gs_corpus_on_a_dask_cluster(python_docs, tmp_path, report):
    """The multi-host layout on loopback: input and output on gs:// (the emulator), read and
    written by 2 Dask worker processes; the same bytes as a local DirectRunner build."""
    import distributed

    raw = sorted((python_docs / "library").glob("b*.rst.txt"))
    local = tmp_path / "local"
    build = [sys.executable, "-m", "pipeline.build_corpus", *CORPUS_ARGS]
    wait(run([*build, "--input", f"{python_docs}/library/b*.rst.txt", "--output", str(local)], None,
             tmp_path / "local.log"), tmp_path / "local.log")  # fmt: skip
    with GCS(tmp_path / "gcs") as gcs:
        env = gcs.env()
        for path in raw:
            upload(gcs.url, gcs.bucket, f"raw/{path.name}", path.read_bytes())
        with loopback_cluster(tmp_path / "cluster", config=env) as address:
            with distributed.Client(address) as client:
                client.register_plugin(AnonymousGcs(), name="anonymous-gcs")
            started = time.monotonic()
            on_dask = [sys.executable, "-m", "tests.reliability.gcs", *build[2:], "--runner", "DaskRunner",
                       "--dask_client_address", address]  # fmt: skip
            gs = ["--input", "gs://bertbeam/raw/*.rst.txt", "--output", "gs://bertbeam/dask"]
            wait(run([*on_dask, *gs], env, tmp_path / "dask.log"), tmp_path / "dask.log")
            seconds = time.monotonic() - started
        remote = fetch(gcs, "dask/", tmp_path / "fetched")
    names = sorted(p.name for p in local.iterdir())
    assert sorted(p.name for p in remote.rglob("*") if p.is_file()) == names  # no _tmp/ left on gs://
    for name in names:
        if name != "manifest.json":  # it records the input and output paths
            assert (remote / name).read_bytes() == (local / name).read_bytes(), name
    manifest = json.loads((remote / "manifest.json").read_text())
    assert manifest["splits"] == json.loads((local / "manifest.json").read_text())["splits"]
    report(
        "gs:// corpus on a Dask cluster (2 workers, GCS emulator)",
        docs_in=len(raw),
        docs_out=sum(s["documents"] for s in manifest["splits"].values()),
        detail=f"gs://→gs:// in {seconds:.0f}s, the workers reading and writing; byte-identical to a local "
        "DirectRunner build",
    )
