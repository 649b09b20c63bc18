"""Pure text functions: encodings (BOMs, a declared codec), bounded line reading, normalisation,
documents, sentence splitting.

Nothing here knows about Beam; the stages in `stages/` call these and count what they
report. Every function takes bytes or str and a `Counter` for what it repaired or skipped.
"""

from __future__ import annotations

import codecs
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import BinaryIO

# C0 and C1 control characters except tab and newline (CR is turned into newline first).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BOM = "\ufeff"

# Sentence ends: Latin terminal punctuation (plus closing quotes) before whitespace; CJK and
# full-width terminal punctuation anywhere, since CJK text does not put a space after it.
SENTENCE_END_PLAIN = r"[.!?…]+[\"'”’»)\]]*(?=\s)|[。！？｡．]+[」』）”’〕］)]*"
# The same matches, written to start with one character set: `re` then skips ahead to the next
# terminal mark in C instead of trying both branches at every character (4x faster to scan;
# the two sets are disjoint, so the look-behind picks the branch the first mark began).
# tests/pipeline/test_text.py holds it to the plain pattern.
_SENTENCE_END = re.compile(
    r"[.!?…。！？｡．](?:(?<=[.!?…])[.!?…]*[\"'”’»)\]]*(?=\s)|(?<=[。！？｡．])[。！？｡．]*[」』）”’〕］)]*)"
)

# Unicode's CJK blocks, (first, last) code point: the one definition every rule that treats CJK
# text apart is built from (masking's words, curation's tokens, BERT's splits, the tagger's words).
KANA = (0x3040, 0x30FF)  # Hiragana and Katakana
CJK_SYMBOLS = (0x3000, 0x303F)  # CJK punctuation: 、。「」
CJK_EXT_A = (0x3400, 0x4DBF)
CJK_UNIFIED = (0x4E00, 0x9FFF)
HANGUL = (0xAC00, 0xD7AF)
CJK_COMPATIBILITY = (0xF900, 0xFAFF)
FULLWIDTH = (0xFF00, 0xFFEF)
CJK_EXT_B = (0x20000, 0x2A6DF)
CJK_EXT_C_D = (0x2A700, 0x2B81F)  # Extensions C and D
CJK_EXT_E = (0x2B820, 0x2CEAF)
CJK_COMPATIBILITY_SUPPLEMENT = (0x2F800, 0x2FA1F)
# BERT's CJK ideographs, each one a word of its own, as `tokenizers`' BertNormalizer (what the
# pipeline tokenises with) has them: google-research/bert's _is_chinese_char, except that its
# Extension E starts at U+2B920, not U+2B820 (so 256 of E's characters are not split off). The ids
# a served string gets must be the pipeline's, so the graph follows `tokenizers`;
# tests/launch/finetune/test_text_encoder.py holds the graph's splitter (text_encoder.BERT_SPLITS)
# and the tagger's words to it on every code point.
BERT_CJK = (CJK_UNIFIED, CJK_EXT_A, CJK_EXT_B, CJK_EXT_C_D, (0x2B920, CJK_EXT_E[1]), CJK_COMPATIBILITY,
            CJK_COMPATIBILITY_SUPPLEMENT)  # fmt: skip
# Unspaced scripts: a piece with one of these is a word of its own for whole-word masking.
UNSPACED = (KANA, CJK_EXT_A, CJK_UNIFIED, CJK_COMPATIBILITY, CJK_SYMBOLS, FULLWIDTH)


def char_class(ranges, re2: bool = False) -> str:
    """The body of a regex character class holding `ranges`: for Python's `re`, or RE2's
    (TensorFlow's regex ops) with `re2`, whose escapes name code points past the BMP."""
    if re2:
        return "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in ranges)
    return "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges)


_CJK = re.compile(f"[{char_class(UNSPACED)}]")

SNIFF_BYTES = 8192
BINARY_FRACTION = 0.10  # more than this share of bad characters in the first 8 KiB: not text

# Byte-order marks, UTF-32 first: its little-endian mark begins with UTF-16's.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def is_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def codec_name(encoding: str) -> str:
    """Python's canonical name of an encoding ("GBK" -> "gbk", "utf8" -> "utf-8"); LookupError if
    unknown."""
    return codecs.lookup(encoding).name


def sniff_encoding(head: bytes, declared: str) -> tuple[str, int]:
    """(codec, BOM length) of a file from its first bytes: a UTF-8/16/32 BOM decides, always;
    without one the file is in the `declared` encoding."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    return codec_name(declared), 0


def looks_binary(head: bytes, encoding: str = "utf-8") -> bool:
    """True for data that is not text: many NULs, controls or invalid bytes (in `encoding`) in the
    first bytes.

    A text file with a few stray NULs passes (they are stripped later); a gzip stream, an image or
    an executable does not, and neither does a UTF-16 or GB18030 file read as UTF-8.
    """
    if not head:
        return False
    text = head.decode(encoding, "replace")
    bad = text.count("\ufffd") + len(_CONTROL.findall(text.replace("\r", "")))
    return bad > BINARY_FRACTION * len(text)


def read_lines(f: BinaryIO, encoding: str, max_line_bytes: int, stats: Counter) -> Iterator[bytes | str]:
    """Lines of a binary stream in `encoding` (past any BOM): UTF-8 lines stay bytes (decoded
    line by line, cheapest); any other encoding is decoded as a stream, invalid bytes replaced
    by U+FFFD, and a line is cut every `max_line_bytes` characters."""
    if encoding == "utf-8":
        yield from iter_lines(f, max_line_bytes, stats)
        return
    # newline="\n": only LF ends a line, CRs stay for normalize_line, as on the UTF-8 path.
    decoded = io.TextIOWrapper(f, encoding=encoding, errors="replace", newline="\n")
    while piece := decoded.readline(max_line_bytes):
        if piece.endswith("\n"):
            piece = piece[:-1]
        elif len(piece) == max_line_bytes:
            stats["repaired/long_line_split"] += 1
        yield piece
    decoded.detach()  # the caller's stream stays open (a collected wrapper would close it)


def iter_lines(f: BinaryIO, max_line_bytes: int, stats: Counter) -> Iterator[bytes]:
    """Lines without their newline, none longer than `max_line_bytes`.

    A longer line (a 100 MB line without a newline) is cut into pieces at a UTF-8 character
    boundary and counted as `repaired/long_line_split`, so memory stays bounded by the limit.
    """
    carry = b""
    while True:
        piece = f.readline(max_line_bytes - len(carry))
        if not piece:
            if carry:
                yield carry
            return
        piece = carry + piece
        carry = b""
        if piece.endswith(b"\n"):
            yield piece[:-1]
            continue
        if len(piece) < max_line_bytes:  # last line of the file, no newline
            yield piece
            continue
        # Cut at a character boundary: back over UTF-8 continuation bytes (0b10xxxxxx).
        cut = len(piece)
        while cut > len(piece) - 4 and cut > 0 and (piece[cut - 1] & 0xC0) == 0x80:
            cut -= 1
        if cut > 0 and piece[cut - 1] >= 0xC0:  # a lead byte whose continuation is not here yet
            cut -= 1
        if cut <= 0:
            cut = len(piece)
        stats["repaired/long_line_split"] += 1
        yield piece[:cut]
        carry = piece[cut:]


def decode_line(raw: bytes | str, stats: Counter) -> str:
    """A line as text; invalid bytes become U+FFFD, and the line is counted as repaired. A line
    decoded already (`read_lines` in another encoding) is counted when it holds a U+FFFD."""
    if isinstance(raw, str):
        if "\ufffd" in raw:
            stats["repaired/invalid_encoding_line"] += 1
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats["repaired/invalid_utf8_line"] += 1
        return raw.decode("utf-8", "replace")


def normalize_line(line: str, stats: Counter) -> str:
    """Strip a BOM, CR line ends and control characters (counted); keep everything else."""
    if line.startswith(_BOM):
        line = line[1:]
        stats["repaired/bom"] += 1
    if "\r" in line:
        # A CRLF end leaves a trailing CR once the LF is split off; a lone CR is a line end of
        # its own (old Mac files).
        line = line.removesuffix("\r").replace("\r\n", "\n").replace("\r", "\n")
    if line.isprintable():  # no control character (the common case, checked in C): nothing to strip
        return line
    cleaned = _CONTROL.sub("", line)
    if len(cleaned) != len(line):
        stats["repaired/control_chars"] += 1
    return cleaned


def _split_long(text: str, max_chars: int, stats: Counter) -> Iterator[str]:
    if len(text) <= max_chars:
        yield text
        return
    stats["repaired/long_document_split"] += 1
    for start in range(0, len(text), max_chars):
        yield text[start : start + max_chars]


def _finish(lines: list[str], max_chars: int, stats: Counter) -> Iterator[str]:
    text = "\n".join(line for line in lines if line.strip())
    if not text.strip():
        stats["skipped/empty_document"] += 1
        return
    yield from _split_long(text, max_chars, stats)


def text_documents(
    raw_lines: Iterator[bytes | str], *, doc_per_file: bool, max_document_chars: int, stats: Counter
) -> Iterator[str]:
    """Documents from google-research/bert's text format: blank line between documents.

    A document is its non-blank lines joined with "\\n"; each line is a sentence or a paragraph.
    With `doc_per_file` the whole file is one document and blank lines only separate paragraphs.
    """
    lines: list[str] = []
    size = 0
    for raw in raw_lines:
        for line in normalize_line(decode_line(raw, stats), stats).split("\n"):
            if line.strip():
                if lines and size + len(line) > max_document_chars:  # bound a document's memory
                    stats["repaired/long_document_split"] += 1
                    yield from _finish(lines, max_document_chars, stats)
                    lines, size = [], 0
                lines.append(line)
                size += len(line) + 1
            elif not doc_per_file and lines:
                yield from _finish(lines, max_document_chars, stats)
                lines, size = [], 0
    if lines:
        yield from _finish(lines, max_document_chars, stats)


def jsonl_documents(
    raw_lines: Iterator[bytes | str], *, text_field: str, max_document_chars: int, stats: Counter
) -> Iterator[str]:
    """One document per JSON line, its text in `text_field`; bad lines are skipped and counted."""
    for raw in raw_lines:
        if not raw.strip():
            continue
        line = decode_line(raw, stats)
        if line.startswith(_BOM):  # a BOM on the first line is not JSON: the record must survive it
            line = line[1:]
            stats["repaired/bom"] += 1
        try:
            record = json.loads(line)
        except ValueError:
            stats["skipped/jsonl_malformed_line"] += 1
            continue
        value = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(value, str):
            stats["skipped/jsonl_missing_text_field"] += 1
            continue
        yield from field_document(value, max_document_chars=max_document_chars, stats=stats)


def field_document(value: str, *, max_document_chars: int, stats: Counter) -> Iterator[str]:
    """A document held in one field (jsonl, tfds): normalised, paragraphs kept as lines."""
    lines = normalize_line(value, stats).split("\n")
    yield from _finish(lines, max_document_chars, stats)


def split_sentences(line: str) -> list[str]:
    """Sentences of one line; CJK text splits at 。！？ even without a following space."""
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(line):
        sentence = line[start : match.end()].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end()
    rest = line[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def document_sentences(document: str) -> list[str]:
    return [s for line in document.split("\n") for s in split_sentences(line)]
