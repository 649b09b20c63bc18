"""Language identification of documents: CLD2 (pycld2), whose model ships inside its wheel.
Pure; nothing here knows about Beam (`filter_documents.py` applies it).

Why CLD2 (bench/language_id.py, on our corpora): it was the most accurate of the three measured
on Chinese (0.98-0.99 against fastText lid.176's 0.96-0.97), as accurate on English, one wheel
without dependencies, and faster on short documents. Its score, the share of the document's
text in the language it reports, is what `--min_language_score` compares: for a mixed document
it says how mixed it is.
"""

from __future__ import annotations

import pycld2

UNKNOWN = "un"  # CLD2's answer when it cannot tell (too little text)
_MAX_BYTES = 1 << 16  # CLD2 decides from the first 64 KiB as well as from a whole book: bounded time


def _printable(text: str) -> str:
    """CLD2 refuses some control characters (its "invalid UTF-8"): it gets the text without them."""
    return "".join(c for c in text if c in "\n\t" or c.isprintable())


def identify(text: str) -> tuple[str, float]:
    """(ISO 639-1 code, share of the text in it, 0..1). Chinese in either script is "zh"; text
    CLD2 cannot place is ("un", 0.0)."""
    data = text.encode("utf-8", "replace")[:_MAX_BYTES].decode("utf-8", "ignore")
    try:
        _, _, details = pycld2.detect(data)
    except pycld2.error:
        _, _, details = pycld2.detect(_printable(data))
    _, code, percent, _ = details[0]
    if code == UNKNOWN:
        return UNKNOWN, 0.0
    return ("zh" if code.startswith("zh") else code), percent / 100
