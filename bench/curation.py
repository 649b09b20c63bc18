"""Curation, measured: near-duplicate recall and false positives against brute-force Jaccard, the
same text and parameters through datatrove, and what the stages cost a build.

    .venv/bin/python bench/curation.py                 # (make bench-curation) every part
    .venv/bin/python bench/curation.py --parts near_dedup,datatrove

Parts, each written to bench/results/curation.json as it finishes (a rerun skips finished parts
unless --rerun):
- near_dedup: real English text (the fetched news and Wikipedia articles, 399 distinct documents) and 300
  planted copies of 300 of them: 200 with 1-30 % of their words replaced, inserted or deleted (25
  at each of 8 rates), 50 with their lines or sentences shuffled, 50 with boilerplate added at
  both ends. Every pair's true Jaccard of word 5-gram shingles (the builder's normalisation) by
  brute force; the builder's NearDeduplicate stage (14 x 8 bands, threshold 0.8) on a DirectRunner.
  Recall of pairs with J >= 0.8 (both in one cluster), and pairs below 0.5 put in one cluster.
  Target: recall >= 0.95, pairs below 0.5 removed <= 1 %.
- datatrove: the same documents through datatrove 0.10.1's MinHash dedup (its 4 stages, the same
  5-grams, 14 x 8 buckets), and its Gopher repetition, Gopher quality and C4 filters beside ours,
  on the same documents plus the Python docs (one document per file). datatrove runs in its own
  virtual environment (.venv-datatrove: its dill and cloudpickle would replace Beam's), through
  bench/curation_datatrove.py. Wall time, the overlap of removed sets, agreement per rule.
  Target: faster than datatrove on 2 cores, and >= 0.95 agreement on what is removed.
- cost: the Python docs build (seq 128, dupe 5) without curation and with every stage on; peak
  memory with every stage on at 1x and 8x the text (copies made distinct word by word, so that
  they are not near-duplicates). Targets: <= 1.4x the time; 8x memory <= 1.25x of 1x.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results" / "curation.json"
DATATROVE_PYTHON = REPO / ".venv-datatrove" / "bin" / "python"
THRESHOLD = 0.8
EDIT_RATES = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3)
BOILERPLATE = (
    "Sign up for our newsletter to get the latest stories delivered to your inbox every morning. "
    "Follow us on social media and share this article with your friends."
)


# === The documents ===


def base_documents(data: Path) -> list[str]:
    from pipeline.fetch_corpora import en_general

    folder = en_general(data)
    docs = []
    for name in ("news.txt", "wiki.txt"):
        docs += [p.strip() for p in (folder / name).read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return list(dict.fromkeys(docs))  # distinct: the builder drops exact copies before this stage


def edit(text: str, rate: float, rng: random.Random) -> str:
    """`rate` of the words replaced, deleted or preceded by a new word, a third each."""
    words = text.split(" ")
    for i in sorted(rng.sample(range(len(words)), max(1, round(rate * len(words)))), reverse=True):
        kind = rng.randrange(3)
        if kind == 0:
            words[i] = f"w{rng.randrange(10**6)}"
        elif kind == 1:
            del words[i]
        else:
            words.insert(i, f"w{rng.randrange(10**6)}")
    return " ".join(words)


def shuffle_parts(text: str, rng: random.Random) -> str:
    """Lines shuffled (sentences, for a one-line document)."""
    lines = text.split("\n")
    if len(lines) < 3:
        lines = re.split(r"(?<=[.!?])\s+", text)
    shuffled = list(lines)
    while len(set(lines)) > 1 and shuffled == lines:
        rng.shuffle(shuffled)
    return "\n".join(shuffled)


def planted(docs: list[str]) -> list[tuple[str, str, int]]:
    """(kind, text, index of its original) for 300 copies; seeded."""
    rng = random.Random(0)
    chosen = rng.sample(range(len(docs)), 300)
    copies = []
    for n, i in enumerate(chosen[:200]):
        rate = EDIT_RATES[n // 25]
        copies.append((f"edit {rate:.0%}", edit(docs[i], rate, rng), i))
    for i in chosen[200:250]:
        copies.append(("reordered", shuffle_parts(docs[i], rng), i))
    for i in chosen[250:]:
        copies.append(("boilerplate", f"{BOILERPLATE}\n{docs[i]}\n{BOILERPLATE}", i))
    return copies


def true_jaccards(texts: list[str]) -> dict[tuple[int, int], float]:
    """Every pair's Jaccard that shares a shingle (the rest are 0), from an inverted index."""
    from collections import Counter, defaultdict

    from pipeline import minhash

    sets = [set(minhash.shingle_hashes(minhash.units(t, "words"), 5).tolist()) for t in texts]
    holders = defaultdict(list)
    for n, shingles in enumerate(sets):
        for s in shingles:
            holders[s].append(n)
    shared = Counter()
    for docs in holders.values():
        shared.update(combinations(docs, 2))
    return {(a, b): n / (len(sets[a]) + len(sets[b]) - n) for (a, b), n in shared.items()}


# === Near-duplicates: ours ===


def our_clusters(texts: list[str]) -> tuple[dict[int, int], float]:
    """(document index -> cluster id, wall seconds) from the builder's NearDeduplicate stage."""
    import apache_beam as beam

    from pipeline.build_corpus import pipeline_options
    from pipeline.config import CorpusConfig
    from pipeline.keys import content_key
    from pipeline.stages import NearDeduplicate

    cfg = CorpusConfig(
        input_patterns=("unused",), output_dir="unused", vocab_size=99, near_dedup_threshold=THRESHOLD
    )
    keys = [content_key(t) for t in texts]
    found: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "removed.jsonl"
        start = time.perf_counter()
        with beam.Pipeline(options=pipeline_options([])) as p:
            removed, _ = p | beam.Create(list(zip(keys, texts, strict=True))) | NearDeduplicate(cfg)
            _ = (
                removed
                | beam.Map(lambda kr: json.dumps([kr[0], kr[1].kept]))
                | beam.io.WriteToText(str(out), shard_name_template="")
            )
        seconds = time.perf_counter() - start
        for line in out.read_text().splitlines():
            key, kept = json.loads(line)
            found[key] = kept
    index = {k: n for n, k in enumerate(keys)}
    cluster = {n: n for n in range(len(texts))}
    for key, kept in found.items():
        cluster[index[key]] = index[kept]
    return cluster, seconds


def score(cluster: dict[int, int], jaccard: dict[tuple[int, int], float], n: int) -> dict:
    """Recall of pairs at or above the threshold, by similarity band, and pairs below 0.5 joined."""
    bands = {
        "0.80-0.85": (0.8, 0.85),
        "0.85-0.90": (0.85, 0.9),
        "0.90-0.95": (0.9, 0.95),
        "0.95-1.00": (0.95, 1.01),
    }
    out = {}
    above = [(pair, j) for pair, j in jaccard.items() if j >= THRESHOLD]
    for name, (lo, hi) in bands.items():
        pairs = [p for p, j in above if lo <= j < hi]
        found = sum(cluster[a] == cluster[b] for a, b in pairs)
        out[f"recall {name}"] = {"pairs": len(pairs), "found": found}
    found = sum(cluster[a] == cluster[b] for (a, b), _ in above)
    out["recall at >= 0.8"] = round(found / len(above), 4) if above else None
    middle = [p for p, j in jaccard.items() if 0.5 <= j < THRESHOLD]
    out["pairs 0.5-0.8 joined"] = {
        "pairs": len(middle),
        "joined": sum(cluster[a] == cluster[b] for a, b in middle),
    }
    below_total = n * (n - 1) // 2 - len(above) - len(middle)
    joined_below = sum(cluster[a] == cluster[b] for (a, b), j in jaccard.items() if j < 0.5)
    # pairs sharing no shingle (J = 0) are never candidates: only their count enters the share
    out["pairs below 0.5 joined"] = {"pairs": below_total, "joined": joined_below,
                                     "share": round(joined_below / below_total, 6)}  # fmt: skip
    out["documents removed"] = sum(cluster[i] != i for i in range(n))
    return out


def near_dedup(data: Path) -> dict:
    docs = base_documents(data)
    copies = planted(docs)
    texts = docs + [t for _, t, _ in copies]
    assert len(set(texts)) == len(texts), "exact copies: the builder removes those before this stage"
    jaccard = true_jaccards(texts)
    cluster, seconds = our_clusters(texts)
    result = {"documents": len(texts), "originals": len(docs), "copies": len(copies), "threshold": THRESHOLD,
              "bands x rows": "14 x 8", "seconds": round(seconds, 1),
              **score(cluster, jaccard, len(texts))}  # fmt: skip
    by_kind = {}
    for n, (kind, _, original) in enumerate(copies):
        entry = by_kind.setdefault(kind, {"copies": 0, "true J": [], "joined to original": 0})
        entry["copies"] += 1
        entry["true J"].append(jaccard.get((original, len(docs) + n), 0.0))
        entry["joined to original"] += cluster[original] == cluster[len(docs) + n]
    result["by kind"] = {
        kind: {"copies": e["copies"], "mean true J": round(sum(e["true J"]) / e["copies"], 3),
               "joined to original": e["joined to original"]}
        for kind, e in by_kind.items()
    }  # fmt: skip
    return result


# === Runner ===


def load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def save(results: dict) -> None:
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="near_dedup,datatrove,cost")
    parser.add_argument("--rerun", action="store_true", help="run finished parts again")
    args = parser.parse_args()
    data = REPO / "data"
    parts = {"near_dedup": near_dedup, "datatrove": datatrove, "cost": cost}
    results = load()
    for name in args.parts.split(","):
        if name in results and not args.rerun:
            print(f"[{name}] done before (--rerun to measure again)")
            continue
        print(f"[{name}] ...", flush=True)
        results[name] = parts[name](data)
        save(results)
        print(json.dumps(results[name], indent=1), flush=True)
    return 0


def datatrove(data: Path) -> dict:
    raise NotImplementedError


def cost(data: Path) -> dict:
    raise NotImplementedError


if __name__ == "__main__":
    sys.exit(main())
