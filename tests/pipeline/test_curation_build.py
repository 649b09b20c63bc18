"""Curation inside the real corpus build (DirectRunner): planted near-copies of real documents
are removed, counted in the manifest and sampled for review, the same bytes with 1 or 2 workers
and any file order; without curation flags the graph has none of its stages."""

from __future__ import annotations

import glob
import gzip
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest

from pipeline import build_corpus
from pipeline.config import CorpusConfig
from pipeline.curation import filter_documents as fd
from pipeline.curation import minhash, quality
from pipeline.curation import report as curation_report
from tests.conftest import build
from tests.pipeline.test_quality import planted

ARGS = ("--vocab_size", "700", "--seq_len", "47", "--max_predictions", "7", "--dupe_factor", "1",
        "--num_shards", "2", "--near_dedup_threshold", "0.8", "--curation_samples", "3")  # fmt: skip
PLANTED = 9


@pytest.fixture(scope="module")
def planted_input(python_docs, tmp_path_factory) -> str:
    """Python docs' library/a*.rst.txt, and a file of near-copies of 9 of their paragraphs of 80
    words or more: each with 1 % of its words replaced."""
    folder = tmp_path_factory.mktemp("planted")
    paragraphs = [
        " ".join(p.split())
        for path in sorted(glob.glob(str(python_docs / "library" / "a*.rst.txt")))
        for p in Path(path).read_text(encoding="utf-8").split("\n\n")
        if len(p.split()) >= 80
    ]
    rng = random.Random(4)
    copies = []
    for n, paragraph in enumerate(rng.sample(paragraphs, PLANTED)):
        words = paragraph.split()
        for i in rng.sample(range(len(words)), max(1, len(words) // 100)):
            words[i] = f"planted{n}word{i}"
        copies.append(" ".join(words))
    (folder / "copies.txt").write_text("\n\n".join(copies) + "\n", encoding="utf-8")
    return f"{python_docs / 'library' / 'a*.rst.txt'},{folder / 'copies.txt'}"


@pytest.fixture(scope="module")
def curated(planted_input, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("curated")
    build(out, "--input", planted_input, *ARGS)
    return out


@pytest.mark.slow
def test_near_copies_are_removed_counted_and_sampled(curated):
    manifest = json.loads((curated / "manifest.json").read_text())
    near = manifest["curation"]["near_dedup"]
    assert near["documents_removed"] >= PLANTED  # the planted ones, and any the docs have
    assert near["documents_removed"] == sum((int(size) - 1) * n for size, n in near["cluster_sizes"].items())
    assert near["bytes_removed"] > 80 * 4 * PLANTED
    assert near["signature"] == minhash.SIGNATURE  # which signatures decided: v1 builds differ
    for stage in ("quality", "language"):
        assert manifest["curation"][stage]["documents_removed"] == 0  # off
    splits = manifest["splits"]
    assert manifest["input"]["documents"] == (
        splits["train"]["documents"] + splits["validation"]["documents"]
        + manifest["input"]["skipped"].get("duplicate_document", 0) + near["documents_removed"]
    )  # fmt: skip
    assert [p.name for p in (curated / "curation").iterdir()] == ["near_duplicate.jsonl.gz"]
    rows = [json.loads(line) for line in gzip.decompress((curated / "curation" / "near_duplicate.jsonl.gz")
                                                         .read_bytes()).decode().splitlines()]  # fmt: skip
    assert len(rows) == 3  # --curation_samples
    for row in rows:
        assert row["reason"] == "near_duplicate" and row["value"] >= 2
        assert row["text"] and row["kept_text"] and row["text"] != row["kept_text"]
        assert row["kept_key"] < row["key"]  # the cluster keeps its smallest content key


@pytest.mark.slow
def test_curated_bytes_are_the_same_for_2_workers_and_another_file_order(curated, planted_input, tmp_path):
    reordered = ",".join(reversed(planted_input.split(",")))
    build(tmp_path / "two", "--input", planted_input, *ARGS, "--direct_num_workers", "2",
          "--direct_running_mode", "multi_processing")  # fmt: skip
    build(tmp_path / "reordered", "--input", reordered, *ARGS)
    reference = contents(curated, "input_patterns")
    assert "curation/near_duplicate.jsonl.gz" in reference
    for other in ("two", "reordered"):
        assert contents(tmp_path / other, "input_patterns") == reference, other


def contents(folder: Path, unlike: str) -> dict:
    """Every file's bytes, the manifest parsed and without the one build flag that differs."""
    found = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    manifest = json.loads(found.pop("manifest.json"))
    manifest["build"].pop(unlike)
    return {**found, "manifest": manifest}


def stage_names(*args: str) -> set[str]:
    cfgs = build_corpus.parse_args(
        ["--input", "unused/*.txt", "--output", "unused", "--vocab_size", "99", *args]
    )[0]
    p = beam.Pipeline()
    build_corpus.build_pipeline(p, cfgs, None, {})
    return {t.unique_name for t in p.to_runner_api().components.transforms.values()}


def test_without_curation_flags_the_graph_has_no_curation_stage():
    plain, curating = stage_names(), stage_names("--near_dedup_threshold", "0.7")
    added = {"CurateDocuments", "DropRemoved", "RereadForCuration", "SampleRemoved", "WriteRemovedSamples"}
    assert not added & plain
    assert added <= curating
    assert CorpusConfig(input_patterns=("x",), output_dir="y", vocab_size=99).curating is False


@pytest.mark.slow
def test_language_and_quality_rules_remove_what_was_planted_and_count_it(botchan, zh_reviews, tmp_path):
    words = botchan.read_text(encoding="utf-8").split()
    passages = [
        "\n".join(re.split(r"(?<=[.!?])\s+", " ".join(words[i : i + 400]))) for i in range(0, 24_000, 400)
    ]
    good = [p for p in passages if quality.first_failure(p, ("gopher", "c4"), quality.Thresholds()) is None]
    assert len(good) >= 40  # the premise: most of Botchan is good prose by both rule sets
    base = re.split(r"(?<=[.!?])\s+", " ".join(words[3000:3400]))
    bad = planted(base)
    reviews = (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n")
    chinese = ["\n".join(r.strip() for r in reviews[i : i + 6]) for i in range(0, 42, 6)]  # 7 documents
    documents = good[:40] + list(bad.values()) + chinese
    (tmp_path / "in.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    args = ("--vocab_size", "300", "--seq_len", "41", "--dupe_factor", "1", "--quality_filters", "gopher,c4",
            "--languages", "en", "--curation_samples", "1")  # fmt: skip
    manifest = build(tmp_path / "out", "--input", str(tmp_path / "in.txt"), *args)
    removed = manifest["curation"]["quality"]
    assert {rule: n["documents_removed"] for rule, n in removed["rules"].items()} == dict.fromkeys(bad, 1)
    assert removed["documents_removed"] == len(bad)
    assert removed["bytes_removed"] == sum(len(t.encode()) for t in bad.values())
    assert manifest["curation"]["near_dedup"]["documents_removed"] == 0  # off
    by_language = manifest["curation"]["language"]
    assert by_language["documents_removed"] == 7 and by_language["removed_by_language"] == {"zh": 7}
    assert by_language["kept"] == {"en": 40 + len(bad)}  # language first: the bad ones are English
    assert by_language["bytes_removed"] == sum(len(t.encode()) for t in chinese)
    samples = sorted(p.name for p in (tmp_path / "out" / "curation").iterdir())
    assert samples == sorted([f"{rule}.jsonl.gz" for rule in bad] + ["language.jsonl.gz"])
    row = json.loads(
        gzip.decompress((tmp_path / "out" / "curation" / "c4_curly_brace.jsonl.gz").read_bytes())
    )
    curly = bad["c4_curly_brace"]
    assert row["stage"] == "quality" and row["value"] == 1 and row["bytes"] == len(curly.encode())
    assert curly.startswith(row["text"]) and len(row["text"]) == 2000  # cut: bounded however long
    # The rules on 3 spawned processes (a batch in uneven thirds) and in the build's own process:
    # every decision, count and byte the same as by default (processes_for's choice).
    for name, processes in (("pooled", "3"), ("in_process", "0")):
        build(tmp_path / name, "--input", str(tmp_path / "in.txt"), *args, "--filter_processes", processes)
        assert contents(tmp_path / name, "filter_processes") == contents(tmp_path / "out", "filter_processes")


def test_filter_processes_by_default_where_the_build_runs_in_its_own_process(monkeypatch):
    """-1 (the default): the cores, up to AUTO_PROCESSES, in the build's own process (the in-memory
    runner); 0 on a runner's worker (another process) and on one core. A number is taken as given."""
    here, elsewhere = os.getpid(), os.getpid() + 1
    for cores, launcher, expected in [
        (2, here, 2),
        (8, here, fd.AUTO_PROCESSES),
        (2, elsewhere, 0),
        (1, here, 0),
    ]:
        monkeypatch.setattr(os, "cpu_count", lambda n=cores: n)
        assert fd.processes_for(-1, launcher) == expected, (cores, launcher == here)
        assert fd.processes_for(3, launcher) == 3 and fd.processes_for(0, launcher) == 0


def test_the_rules_processes_do_not_run_the_script_again(tmp_path):
    """multiprocessing has a spawned process import the script that started it; a script without
    `if __name__ == "__main__":` would then run again in each (here: print again, and start
    processes of its own, which multiprocessing refuses). start_processes hides it from them."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import os\n"
        "print('top level', os.getpid(), flush=True)\n"
        "from pipeline.curation import filter_documents, quality\n"
        "from pipeline.curation.rules import Rules\n"
        "pool = filter_documents.start_processes(2)\n"
        "rules = Rules((), 0.0, ('c4',), quality.Thresholds())\n"
        "parts = [pool.submit(rules.decide_all, ['Too short.'] * 3) for _ in range(4)]\n"
        "print('decided', [part.result()[0][0][1] for part in parts], flush=True)\n"
        "pool.shutdown()\n"
    )
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert sum(line.startswith("top level") for line in lines) == 1, lines
    assert f"decided {['c4_too_few_sentences'] * 4}" in lines, lines  # the work was done, in them


@pytest.mark.slow
def test_the_report_reads_the_manifest_and_the_samples(curated, capsys):
    assert curation_report.main([str(curated), "--samples", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    near = json.loads((curated / "manifest.json").read_text())["curation"]["near_dedup"]
    row = next(line for line in out if line.startswith("near_dedup "))
    assert (
        row.split()[1] == f"{near['documents_removed']:,}" and row.split()[3] == f"{near['bytes_removed']:,}"
    )
    assert any(line.startswith("quality (off)") for line in out)
    manifest = json.loads((curated / "manifest.json").read_text())
    copies = manifest["input"]["skipped"].get("duplicate_document", 0)
    assert manifest["curation"]["exact_dedup"] == {"documents_removed": copies}
    assert next(line for line in out if line.startswith("exact_dedup")).split()[3] == f"{copies:,}"
    assert "-- near_duplicate.jsonl.gz: 3 sampled" in out
    assert sum(line.strip().startswith("kept instead:") for line in out) == 1


def test_the_report_on_a_folder_without_a_corpus_is_one_line(tmp_path, capsys):
    assert curation_report.main([str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: {tmp_path}: no manifest.json here or in seq*/; build the corpus first"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--quality_filters", "gopher,c5"),
            "--quality_filters: unknown c5; expected gopher, c4 or gopher,c4",
        ),
        (
            ("--quality_filters", "c4", "--quality_thresholds", "c4_min_sentence=3"),
            "unknown threshold 'c4_min_sentence'",
        ),
        (("--quality_thresholds", "c4_min_sentences=3"), "--quality_thresholds needs --quality_filters"),
        (
            ("--near_dedup_threshold", "1.5"),
            "--near_dedup_threshold: expected 0 (off) or in (0, 1), found 1.5",
        ),
        (
            ("--near_dedup_threshold", "0.8", "--shingle_size", "11"),
            "--shingle_size: expected 1..10, found 11",
        ),
        (("--shingle_unit", "segmenter"), "--shingle_unit segmenter needs --word_segmenter"),
        (("--near_dedup_threshold", "0.8", "--seed", "-5"), "--seed: expected 0 <= seed < 2**63, found -5"),
        (("--languages", "English"), "--languages: expected ISO 639-1 codes like en,zh, found English"),
        (("--min_language_score", "0.5"), "--min_language_score needs --languages"),
        (("--filter_processes", "-2"), "--filter_processes: expected >= 0, or -1 (automatic), found -2"),
    ],
)
def test_curation_mistakes_are_one_line_errors(flags, message):
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        build_corpus.parse_args(["--input", "x/*.txt", "--output", "out", "--vocab_size", "99", *flags])


@pytest.mark.slow
def test_chinese_near_copies_by_characters(zh_sample, tmp_path):
    reviews = [r.strip() for r in (zh_sample / "pos.txt").read_text(encoding="utf-8").split("\n\n")]
    long_ones = [r for r in reviews if len(r) > 120][:5]
    copies = [r[:60] + "好" + r[61:] for r in long_ones]  # one character changed in each
    (tmp_path / "copies.txt").write_text("\n\n".join(copies) + "\n", encoding="utf-8")
    args = ("--vocab_size", "400", "--vocab_model_type", "wordpiece", "--seq_len", "37", "--dupe_factor", "1",
            "--near_dedup_threshold", "0.8", "--shingle_unit", "chars",
            "--curation_samples", "0")  # fmt: skip
    inputs = f"{zh_sample / '*.txt'},{tmp_path / 'copies.txt'}"
    manifest = build(tmp_path / "out", "--input", inputs, *args)
    near = manifest["curation"]["near_dedup"]
    assert near["documents_removed"] >= len(copies) == 5
    assert not (tmp_path / "out" / "curation").exists()  # --curation_samples 0: no samples


@pytest.mark.slow
def test_curation_that_removes_every_document_says_so(botchan, tmp_path):
    from tests.pipeline.test_build_corpus import run_cli

    lines = [line for line in botchan.read_text(encoding="utf-8").splitlines() if line.strip()]
    paragraphs = [" ".join(lines[i : i + 5]) for i in range(100, 300, 5)]  # 40 documents of English
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    (tmp_path / "in" / "b.txt").write_text("\n\n".join(paragraphs[:3]) + "\n", encoding="utf-8")  # copies
    done = run_cli("--input", str(tmp_path / "in" / "*.txt"), "--output", str(tmp_path / "out"),
                   "--vocab_size", "99", "--languages", "zh")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: curation removed every document: 43 read, 3 exact copies dropped, removed by language 40, "
        "quality 0, near_dedup 0; loosen the curation flags (--languages, --quality_filters, "
        "--near_dedup_threshold) or check --input"
    )
