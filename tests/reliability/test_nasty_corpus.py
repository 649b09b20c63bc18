"""Nasty corpora through the whole corpus build: every repairable file repaired and counted,
every unreadable one skipped and counted (or, by default, a one-line error naming it), every valid
document present in the output by content, and bounded memory on a 100 MB line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pipeline import text
from pipeline.config import CorpusConfig
from pipeline.vocab import SentencePieceVocab
from tests.conftest import REPO, build, read_records
from tests.corpus_checks import assert_covers, pieces_of

pytestmark = pytest.mark.slow  # the reliability suite: `make test` and `make test-reliability`

NASTY_ARGS = ("--seq_len", "96", "--max_predictions", "5", "--dupe_factor", "1", "--validation_fraction", "0")


def nasty_corpus(folder: Path) -> list[str]:
    """Files a real crawl contains; returns the valid documents, normalised, that must survive."""
    folder.mkdir()
    (folder / "bom_crlf.txt").write_bytes(
        b"\xef\xbb\xbfWindows line one.\r\nWindows line two.\r\n\r\nOld Mac.\rLine two.\r"
    )
    (folder / "bad_utf8_nul.txt").write_bytes(
        b"Caf\xe9 au lait.\nNUL\x00 inside.\n\nEmoji \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd ok.\n"
    )
    (folder / "scripts.txt").write_text(
        "שלום עולם. مرحبا بالعالم.\n\n東京は晴れです。大阪は雨です。\n\n" + "x" * 3000 + " long word.\n"
    )
    long_line = "The same words again and again " * 72_000  # ~2.2 MB, no newline: 3 pieces
    (folder / "long_line.txt").write_text(long_line)
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blank.txt").write_bytes(b"   \n\t\n\r\n")
    (folder / "archive.txt").write_bytes(gzip.compress(b"compressed but named .txt " * 400))
    cut = gzip.compress("".join(f"Cut short {i}. " for i in range(5000)).encode())
    (folder / "cut.txt.gz").write_bytes(cut[: len(cut) // 2])
    (folder / "dup.txt").write_text("Windows line one.\nWindows line two.\n")
    piece = CorpusConfig(input_patterns=("x",), output_dir="y", vocab_size=100).max_line_bytes
    pieces = [long_line.encode()[i : i + piece].decode() for i in range(0, len(long_line.encode()), piece)]
    return [
        "Windows line one.\nWindows line two.",
        "Old Mac.\nLine two.",
        "Caf\ufffd au lait.\nNUL inside.",
        "Emoji 👍🏽 ok.",
        "שלום עולם. مرحبا بالعالم.",
        "東京は晴れです。大阪は雨です。",
        "x" * 3000 + " long word.",
        *pieces,
    ]


def test_nasty_text_corpus_skip_completes_and_keeps_every_valid_document(tmp_path, botchan_vocab, report):
    expected = nasty_corpus(tmp_path / "nasty")
    out = tmp_path / "out"
    manifest = build(
        out, "--input", str(tmp_path / "nasty" / "*"), "--vocab", str(botchan_vocab), "--on_bad_file", "skip",
        *NASTY_ARGS,
    )  # fmt: skip
    assert manifest["input"]["skipped"] == {
        "bad_file_binary": 1,
        "bad_file_unreadable": 1,
        "duplicate_document": 1,
        "empty_file": 2,
    }
    repaired = manifest["input"]["repaired"]
    assert repaired["invalid_utf8_line"] == 1 and repaired["control_chars"] == 1 and "bom" not in repaired
    # bom_crlf.txt's BOM says UTF-8 (not a repair); every file but the binary one was read as UTF-8.
    assert manifest["input"]["encodings"] == {"utf-8 with BOM": 1, "utf-8": 7}
    assert repaired["long_line_split"] == len(expected) - 7 - 1
    vocab = SentencePieceVocab(botchan_vocab.read_bytes())
    documents = [[t for ids in vocab.encode(text.document_sentences(d)) for t in ids] for d in expected]
    assert_covers(pieces_of(read_records(out, "train")), documents, dupes=1)
    assert manifest["splits"]["train"]["documents"] == len(expected)
    report(
        "nasty text files, --on_bad_file skip",
        docs_in=len(expected),
        docs_out=manifest["splits"]["train"]["documents"],
        skipped=manifest["input"]["skipped"],
        detail="repaired: " + ", ".join(f"{k} {v}" for k, v in sorted(repaired.items())),
    )


def test_nasty_text_corpus_fail_names_the_unreadable_file(tmp_path, botchan_vocab, report):
    nasty_corpus(tmp_path / "nasty")
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.build_corpus", "--input", str(tmp_path / "nasty" / "*"),
         "--output", str(tmp_path / "out"), "--vocab", str(botchan_vocab), *NASTY_ARGS],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr[-2000:]
    named = [name for name in ("archive.txt", "cut.txt.gz") if f"{tmp_path / 'nasty' / name}:" in line]
    assert line.startswith("error: ") and len(named) == 1 and "while running" not in line, line
    assert not (tmp_path / "out" / "manifest.json").exists()
    report("nasty text files, --on_bad_file fail (default)", detail=f"`{line}`")


def test_nasty_jsonl_corpus(tmp_path, botchan_vocab, report):
    """A malformed line, a missing or non-string text field, a non-object line, invalid UTF-8, a
    BOM, CRLF: valid records all kept (the first one, behind the BOM, too), the rest counted."""
    good = [f"Record {i}: a sentence. Another one with émoji 👍 and שלום and 東京。" for i in range(30)]
    lines = [json.dumps({"text": t, "id": i}).encode() for i, t in enumerate(good)]
    lines[3:3] = [b"{broken", b'{"id": 1}', b'{"text": 7}', b"[1, 2]", b"   "]
    lines.insert(10, json.dumps({"text": "caf\u00e9 BAD"}).encode().replace(b"\\u00e9", b"\xe9"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n")
    manifest = build(
        tmp_path / "out", "--input", str(tmp_path / "in" / "*.jsonl"), "--format", "jsonl",
        "--vocab", str(botchan_vocab), *NASTY_ARGS,
    )  # fmt: skip
    assert manifest["input"]["skipped"] == {"jsonl_malformed_line": 1, "jsonl_missing_text_field": 3}
    assert manifest["input"]["repaired"] == {"invalid_utf8_line": 1}
    assert manifest["input"]["encodings"] == {"utf-8 with BOM": 1}
    expected = [text.normalize_line(t, Counter()) for t in good] + ["caf\ufffd BAD"]
    vocab = SentencePieceVocab(botchan_vocab.read_bytes())
    documents = [[t for ids in vocab.encode(text.document_sentences(d)) for t in ids] for d in expected]
    assert_covers(pieces_of(read_records(tmp_path / "out", "train")), documents, dupes=1)
    report(
        "nasty JSONL (malformed lines, missing field)",
        docs_in=len(expected),
        docs_out=manifest["splits"]["train"]["documents"],
        skipped=manifest["input"]["skipped"],
        detail="repaired: " + ", ".join(f"{k} {v}" for k, v in sorted(manifest["input"]["repaired"].items())),
    )


def test_a_100_mb_line_through_the_whole_pipeline(tmp_path, botchan_vocab, report):
    """The full build over one 100 MB line without a newline (~20 s): completes, bounded memory."""
    import time

    import psutil

    words = "The quick brown fox jumps over the lazy dog near the river bank. "
    with open(tmp_path / "long.txt", "w") as f:
        for _ in range(100 * (1 << 20) // len(words) // 1000):
            f.write(words * 1000)
    size = (tmp_path / "long.txt").stat().st_size
    command = [sys.executable, "-m", "pipeline.build_corpus", "--input", str(tmp_path / "long.txt"),
               "--output", str(tmp_path / "out"), "--vocab", str(botchan_vocab), "--dupe_factor", "1",
               "--validation_fraction", "0"]  # fmt: skip
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, psutil.Process(proc.pid).memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.1)
    assert proc.returncode == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["input"]["repaired"]["long_line_split"] == size // (1 << 20)
    assert manifest["splits"]["train"]["instances"] > 100_000
    assert peak < 4 << 30  # bounded: the document shuffle holds the text, nothing holds the instances
    report(
        "one 100 MB line, no newline",
        docs_in=1,
        docs_out=manifest["splits"]["train"]["documents"],
        detail=f"cut into {manifest['input']['repaired']['long_line_split']} line pieces, "
        f"{manifest['splits']['train']['documents']} documents; "
        f"{manifest['splits']['train']['instances']:,} instances; "
        f"peak RSS {peak / 2**20:,.0f} MiB (bound 4 GiB)",
    )
