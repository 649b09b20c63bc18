"""Reading and normalising text: literal inputs, literal expectations."""

import io
import tracemalloc
from collections import Counter

from pipeline import text


def lines_of(data: bytes, max_line_bytes=1 << 20):
    stats = Counter()
    return list(text.iter_lines(io.BytesIO(data), max_line_bytes, stats)), stats


def test_lines_split_on_newline_and_keep_last_line_without_newline():
    lines, stats = lines_of(b"one\ntwo\n\nthree")
    assert lines == [b"one", b"two", b"", b"three"]
    assert stats == Counter()


def test_long_line_is_cut_at_a_character_boundary_and_counted():
    # 7-byte limit over "aé€b": é is 2 bytes, € is 3; a cut inside € would corrupt it.
    data = "aaaaé€bbbb\nx".encode()
    lines, stats = lines_of(data, max_line_bytes=7)
    assert b"".join(lines[:-1]) == "aaaaé€bbbb".encode()
    for piece in lines:
        piece.decode("utf-8")  # every piece is valid UTF-8 on its own
        assert len(piece) <= 7
    assert lines[-1] == b"x"
    assert stats["repaired/long_line_split"] == len(lines) - 2


def test_a_100_mb_line_streams_in_bounded_memory(tmp_path):
    path = tmp_path / "long.txt"
    with open(path, "wb") as f:
        for _ in range(100):
            f.write(b"word " * 200_000 + "ünïcödé ".encode())  # ~1 MB, no newline at all
    tracemalloc.start()
    stats = Counter()
    documents = 0
    total = 0
    with open(path, "rb") as f:
        for doc in text.text_documents(
            text.iter_lines(f, 1 << 20, stats),
            doc_per_file=False,
            max_document_chars=1 << 20,
            stats=stats,
        ):
            documents += 1
            total += len(doc)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB while reading a 100 MB line"
    assert stats["repaired/long_line_split"] == path.stat().st_size // (1 << 20)
    # Each 1 MiB piece fills a document of its own: split 95 times, never cut inside a piece.
    assert stats["repaired/long_document_split"] == stats["repaired/long_line_split"]
    assert stats["repaired/invalid_utf8_line"] == 0  # no cut went through a character
    assert total == path.stat().st_size - 100 * len("ünïcödé ".encode()) + 100 * len("ünïcödé ")
    assert documents == stats["repaired/long_line_split"] + 1


def test_normalisation_strips_bom_control_chars_and_cr():
    stats = Counter()
    assert text.normalize_line("\ufeffHi\x00 there\x07", stats) == "Hi there"
    assert text.normalize_line("a\r", stats) == "a"  # the CR of a CRLF end
    assert text.normalize_line("a\r\nb", stats) == "a\nb"
    assert text.normalize_line("a\rb", stats) == "a\nb"
    assert text.normalize_line("tab\tkept", stats) == "tab\tkept"
    assert stats == Counter({"repaired/bom": 1, "repaired/control_chars": 1})


def test_invalid_utf8_is_replaced_and_counted():
    stats = Counter()
    assert text.decode_line(b"caf\xe9 ok", stats) == "caf\ufffd ok"
    assert text.decode_line("café".encode(), stats) == "café"
    assert stats == Counter({"repaired/invalid_utf8_line": 1})


def test_text_documents_blank_line_separates_and_crlf_is_handled():
    stats = Counter()
    raw = [
        b"\xef\xbb\xbfFirst doc line one.\r",
        b"line two.\r",
        b"\r",
        b"  \t ",
        b"Second doc.",
        b"",
    ]
    docs = list(text.text_documents(iter(raw), doc_per_file=False, max_document_chars=1000, stats=stats))
    assert docs == ["First doc line one.\nline two.", "Second doc."]
    assert stats["repaired/bom"] == 1


def test_doc_per_file_keeps_paragraphs_in_one_document():
    stats = Counter()
    raw = [b"Para one.", b"", b"Para two."]
    docs = list(text.text_documents(iter(raw), doc_per_file=True, max_document_chars=1000, stats=stats))
    assert docs == ["Para one.\nPara two."]


def test_long_document_is_split_and_counted():
    stats = Counter()
    raw = [b"abcdefghij"] * 5
    docs = list(text.text_documents(iter(raw), doc_per_file=True, max_document_chars=25, stats=stats))
    assert "".join(docs).replace("\n", "") == "abcdefghij" * 5
    assert all(len(d) <= 25 for d in docs)
    assert stats["repaired/long_document_split"] >= 1


def test_jsonl_skips_malformed_and_missing_field_lines():
    stats = Counter()
    raw = [
        b'{"text": "Good one."}',
        b"{not json",
        b'{"body": "no text field"}',
        b'{"text": 7}',
        b"",
        b'["list"]',
    ]
    docs = list(text.jsonl_documents(iter(raw), text_field="text", max_document_chars=1000, stats=stats))
    assert docs == ["Good one."]
    assert stats == Counter({"skipped/jsonl_malformed_line": 1, "skipped/jsonl_missing_text_field": 3})


def test_whitespace_only_field_document_is_skipped():
    stats = Counter()
    assert list(text.field_document(" \n\t ", max_document_chars=100, stats=stats)) == []
    assert stats == Counter({"skipped/empty_document": 1})


def test_sentence_split_latin_and_cjk():
    assert text.split_sentences('He said "Go." Then left! Why? ok') == [
        'He said "Go."',
        "Then left!",
        "Why?",
        "ok",
    ]
    assert text.split_sentences("version 3.11 is out") == ["version 3.11 is out"]
    assert text.split_sentences("今日は晴れです。明日は雨？「はい。」そうです") == [
        "今日は晴れです。",
        "明日は雨？",
        "「はい。」",
        "そうです",
    ]
    assert text.split_sentences("你好！我很好。") == ["你好！", "我很好。"]


def test_the_fast_sentence_end_matches_exactly_where_the_plain_pattern_does(botchan, zh_sample, python_docs):
    """`_SENTENCE_END` is the plain pattern rewritten for speed: the same (start, end) of every
    match on real English, Chinese and reStructuredText, and on random strings of terminal marks,
    closers, spaces and letters (where the branches' back-tracking differs, if anywhere)."""
    import random
    import re

    plain = re.compile(text.SENTENCE_END_PLAIN)
    texts = [botchan.read_text("utf-8"), (zh_sample / "pos.txt").read_text("utf-8")]
    texts += [path.read_text("utf-8") for path in sorted(python_docs.rglob("*.txt"))[:40]]
    draw = random.Random(7)
    alphabet = ".!?…。！？｡．\"'”’»)]」』）〕］ \n\tab1字"
    texts += ["".join(draw.choice(alphabet) for _ in range(draw.randrange(1, 40))) for _ in range(20_000)]
    matches = 0
    for sample in texts:
        fast = [m.span() for m in text._SENTENCE_END.finditer(sample)]
        assert fast == [m.span() for m in plain.finditer(sample)], sample[:80]
        matches += len(fast)
    assert matches > 50_000  # the samples hold many sentence ends, of both kinds


def test_binary_detection():
    import gzip

    assert text.looks_binary(gzip.compress(b"hello world " * 1000))
    assert text.looks_binary(bytes(range(256)) * 8)
    assert not text.looks_binary("plain text with one\x00 NUL, emoji 👍🏽 and עברית".encode())
    assert not text.looks_binary(b"")
