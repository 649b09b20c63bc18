"""How varied are NSP's random next segments when they come from a packing group cut from the
input as it is read, against google-research/bert's, drawn from the whole corpus (issue 59)?

    .venv/bin/python bench/nsp_groups.py [--data data] [--docs FILE]

A random next segment B for a segment A of document d comes from another document d' of A's
packing group (bertbeam) or of the corpus (google-research/bert). Contiguous text is on related
topics, so d' from a run of the input resembles d more than one from anywhere: the NSP task gets
harder, and a model learns less topic and more coherence from it. The measure: the mean TF-IDF
cosine similarity of d and d' over every d and every d' it can draw (exact, no sampling), for
groups cut as `stages/groups.py` cuts them from each corpus, as one file in input order, at
several sizes; and the default's size. A file is the hard case: batches of many small files mix
files from anywhere (by their keys), single big files are cut into runs.

"As varied as google's" here: a group's negatives are at most 10 % more similar to A's document
than google's, sim_group <= 1.1 * sim_google. Prints per corpus and group size the similarity, its
ratio to google's and whether that holds; results in bench/results/nsp_groups.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.config import CorpusConfig  # noqa: E402
from pipeline.stages.read import ReadFileDocuments  # noqa: E402

RESULTS = REPO / "bench" / "results" / "nsp_groups.json"
WORDS = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]", re.IGNORECASE)  # words; CJK characters one each
TOLERANCE = 1.1  # a group's negatives at most 10 % more similar than google's


def documents(path: Path) -> list[str]:
    """The file's documents as the builder reads them (a blank line between documents)."""
    cfg = CorpusConfig(input_patterns=(str(path),), output_dir="unused", vocab_size=100)
    return list(ReadFileDocuments(cfg)._documents(str(path), Counter(), progress=False))


def tfidf(docs: list[str]) -> sp.csr_matrix:
    """Rows of unit length: log-scaled term counts times inverse document frequency."""
    vocab: dict[str, int] = {}
    rows, cols, vals = [], [], []
    for i, doc in enumerate(docs):
        for word, n in Counter(w.lower() for w in WORDS.findall(doc)).items():
            rows.append(i)
            cols.append(vocab.setdefault(word, len(vocab)))
            vals.append(1 + np.log(n))
    m = sp.csr_matrix((vals, (rows, cols)), shape=(len(docs), len(vocab)))
    df = np.bincount(m.indices, minlength=len(vocab))
    m = m @ sp.diags(np.log(len(docs) / df))
    norms = np.sqrt(m.multiply(m).sum(axis=1)).A.ravel()
    return sp.diags(1 / np.maximum(norms, 1e-12)) @ m


def mean_other_similarity(sims: np.ndarray, members: np.ndarray) -> float:
    """Mean over documents of their mean similarity to the other documents of `members`."""
    block = sims[np.ix_(members, members)]
    n = len(members)
    if n < 2:
        return float("nan")
    return float(((block.sum(axis=1) - np.diag(block)) / (n - 1)).mean())


def groups_of(sizes: list[int], group: int) -> list[np.ndarray]:
    """Runs of consecutive documents closed at `group` characters, the last taking a rest under
    half a group (as `CutGroups` closes them in tokens)."""
    total, seen, out, current, size = sum(sizes), 0, [], [], 0
    for i, n in enumerate(sizes):
        current.append(i)
        size += n
        seen += n
        if size >= group and total - seen >= group / 2:
            out.append(np.array(current))
            current, size = [], 0
    if current:
        out.append(np.array(current))
    return out


def study(name: str, path: Path, chars_per_token: float, default_tokens: int) -> dict:
    docs = documents(path)
    sizes = [len(d) for d in docs]
    vectors = tfidf(docs)
    sims = (vectors @ vectors.T).toarray()
    google = mean_other_similarity(sims, np.arange(len(docs)))
    allowed = TOLERANCE * google
    total = sum(sizes)
    print(f"\n{name}: {len(docs):,} documents, {total / 1e6:.2f} M characters in one file; google (whole "
          f"corpus): {google:.4f}; as varied: <= {allowed:.4f}")  # fmt: skip
    header = ("group (MB)", "tokens", "groups", "docs/group", "similarity", "/ google", "as varied")
    print(" ".join(f"{h:>10}" for h in header))
    rows = []
    default = default_tokens * chars_per_token
    for group in sorted({*(int(total * f) for f in (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1)),
                         int(default_tokens / 2 * chars_per_token), int(default)}):  # fmt: skip
        cut = groups_of(sizes, group)
        weights = np.array([len(g) for g in cut], float)
        per_group = np.array([mean_other_similarity(sims, g) for g in cut])
        ok = ~np.isnan(per_group)
        similarity = float((per_group[ok] * weights[ok]).sum() / weights[ok].sum())
        rows.append({"group_chars": group, "group_tokens": round(group / chars_per_token), "groups": len(cut),
                     "similarity": round(similarity, 4), "ratio": round(similarity / google, 3),
                     "as_varied": similarity <= allowed})  # fmt: skip
        verdict = "yes" if similarity <= allowed else "no"
        ratio = similarity / google
        cells = (f"{group / 1e6:.2f}", f"{group / chars_per_token:,.0f}", len(cut),
                 f"{len(docs) / len(cut):.1f}", f"{similarity:.4f}", f"{ratio:.3f}", verdict)  # fmt: skip
        print(" ".join(f"{c:>10}" for c in cells))
    print(f"the default, --group_tokens {default_tokens:,}: about {default / 1e6:.2f} MB of this text")
    return {"documents": len(docs), "chars": total, "google": round(google, 4), "allowed": round(allowed, 4),
            "default_chars": round(default), "rows": rows}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(REPO / "data"))
    parser.add_argument("--docs", default=None, help="the Python docs in BERT's format (made if not given)")
    args = parser.parse_args()
    data = Path(args.data)
    default_tokens = CorpusConfig.__dataclass_fields__["group_tokens"].default
    corpora = {  # name -> (file, characters per token of the builder's vocab on it)
        "English Wikipedia sample": (data / "en_general" / "wiki.txt", 4.3),
        "People's Daily 1998-01": (data / "zh_news" / "peoples_daily_199801.txt", 1.5),
    }
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(args.docs) if args.docs else Path(tmp) / "docs.txt"
        if not args.docs:  # bench/corpus.py's file: a paragraph per line, a blank line between pages
            from bench.corpus import google_format
            from pipeline.fetch.corpora import python_docs

            google_format(python_docs(str(data)), docs)
        corpora["Python docs, BERT's format"] = (docs, 3.54)
        results = {name: study(name, path, cpt, default_tokens) for name, (path, cpt) in corpora.items()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
