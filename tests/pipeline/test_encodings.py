"""Encodings Chinese text really comes in: BOMs (UTF-8/16/32) honoured per file, always;
--encoding for files without one; the manifest counts files by the encoding actually used."""

from __future__ import annotations

import codecs
import gzip
import io
from collections import Counter
from pathlib import Path

import pytest

from pipeline import text
from pipeline.config import CorpusConfig
from pipeline.stages.read import ReadFileDocuments
from pipeline.stages.stats import BadInputError
from tests.conftest import build
from tests.corpus_checks import expected_documents


def read(path: Path, **overrides) -> tuple[list[str], Counter]:
    """ReadFileDocuments on one file, outside Beam: its documents and its stats."""
    cfg = CorpusConfig(input_patterns=("unused",), output_dir="unused", vocab_size=100, **overrides)
    out = list(ReadFileDocuments(cfg).process(str(path)))
    return [d for d in out if isinstance(d, str)], out[-1].value


@pytest.fixture(scope="module")
def chinese(zh_sample) -> str:
    """Real Chinese reviews (with some English and digits) as text, Windows line ends."""
    return (zh_sample / "neg.txt").read_text(encoding="utf-8").replace("\n", "\r\n")


COPIES = {  # file -> (bytes from the text, the encoding the manifest should count)
    "gb18030.txt": (lambda t: t.encode("gb18030"), "gb18030"),
    "utf16.txt": (lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"), "utf-16-le with BOM"),
    "utf16be.txt": (lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"), "utf-16-be with BOM"),
    "utf32.txt.gz": (
        lambda t: gzip.compress(codecs.BOM_UTF32_BE + t.encode("utf-32-be")),
        "utf-32-be with BOM",
    ),
    "utf8bom.txt": (lambda t: codecs.BOM_UTF8 + t.encode("utf-8"), "utf-8 with BOM"),
}


def test_each_encoding_decodes_to_the_documents_of_the_utf8_copy(chinese, tmp_path):
    (tmp_path / "utf8.txt").write_bytes(chinese.encode("utf-8"))
    want, _ = read(tmp_path / "utf8.txt")
    assert len(want) == 240 and any("，" in d for d in want)
    for name, (encode, encoding) in COPIES.items():
        (tmp_path / name).write_bytes(encode(chinese))
        got, stats = read(tmp_path / name, encoding="gb18030")
        assert got == want, name
        assert stats[f"encoding/{encoding}"] == 1 and not any(k.startswith("repaired") for k in stats), name


def test_a_file_in_another_encoding_without_a_bom_is_refused_or_skipped_by_name(chinese, tmp_path):
    path = tmp_path / "gbk.txt"
    path.write_bytes(chinese.encode("gbk"))
    refused = rf"^{path}: looks binary, not utf-8 text \(text in another encoding needs --encoding NAME\)"
    with pytest.raises(BadInputError, match=refused + "; remove it or pass --on_bad_file=skip$"):
        read(path)
    docs, stats = read(path, on_bad_file="skip")
    assert docs == [] and stats["skipped/bad_file_binary"] == 1
    # UTF-16 without a BOM is not taken for UTF-8 either; declared, it reads.
    (tmp_path / "le.txt").write_bytes(chinese.encode("utf-16-le"))
    with pytest.raises(BadInputError, match="looks binary, not utf-8 text"):
        read(tmp_path / "le.txt")
    assert read(tmp_path / "le.txt", encoding="utf-16-le")[0] == read(path, encoding="GBK")[0]


def test_invalid_bytes_in_the_declared_encoding_are_repaired_and_counted(chinese, tmp_path):
    lines = chinese.encode("gb18030").split(b"\r\n")
    assert len(lines[4]) > 10  # a review, not the blank line between two
    lines[4] = lines[4][:4] + b"\xff" + lines[4][4:]  # 0xFF starts no GB18030 character
    (tmp_path / "bad.txt").write_bytes(b"\r\n".join(lines))
    docs, stats = read(tmp_path / "bad.txt", encoding="gb18030")
    assert stats["repaired/invalid_encoding_line"] == 1 and len(docs) == 240
    assert sum(d.count("\ufffd") for d in docs) == 1


def test_a_long_line_in_another_encoding_is_cut_and_counted():
    decoded = list(
        text.read_lines(io.BytesIO(("字" * 50 + "\n尾").encode("gb18030")), "gb18030", 16, stats := Counter())
    )
    assert decoded == ["字" * 16, "字" * 16, "字" * 16, "字" * 2, "尾"]
    assert stats["repaired/long_line_split"] == 3


@pytest.mark.slow
def test_the_manifest_counts_files_by_encoding(chinese, tmp_path):
    """Five encodings of the same text and a UTF-8 copy: one set of documents, five duplicates each."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "utf8.txt").write_bytes(chinese.encode("utf-8"))
    for name, (encode, _) in COPIES.items():
        if name != "gb18030.txt":  # --encoding is for files without a BOM: the UTF-8 copy is one
            (folder / name).write_bytes(encode(chinese))
    manifest = build(tmp_path / "out", "--input", f"{folder}/*", "--vocab_size", "3000",
                     "--vocab_model_type", "wordpiece", "--seq_len", "33", "--max_predictions", "5",
                     "--dupe_factor", "1")  # fmt: skip
    distinct = len(expected_documents([folder / "utf8.txt"], doc_per_file=False))  # some reviews repeat
    assert manifest["input"]["encodings"] == {
        "utf-8": 1,
        "utf-8 with BOM": 1,
        "utf-16-le with BOM": 1,
        "utf-16-be with BOM": 1,
        "utf-32-be with BOM": 1,
    }
    assert manifest["input"]["documents"] == 5 * 240
    assert manifest["input"]["skipped"]["duplicate_document"] == 5 * 240 - distinct
    splits = manifest["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == distinct
