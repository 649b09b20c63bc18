"""What the long benchmarks share: a grid of named cells, each written to RESULTS/CELL.json the moment
it is done and skipped by a rerun, so a study longer than a session runs in parts and its small
result files are committed (bench/quality.py, bench/adapt.py).

    cells = Cells(REPO / "bench" / "results" / "adapt")
    if (found := cells.done("ft-rt-release-seed0")) is None: ... cells.record(name, config, result, seconds)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class Cells:
    def __init__(self, folder: Path):
        self.folder = folder

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def done(self, name: str) -> dict | None:
        path = self.path(name)
        return json.loads(path.read_text())["result"] if path.exists() else None

    def record(self, name: str, config: dict, result: dict, seconds: float) -> dict:
        """The cell's result, written the moment it exists (a rerun skips it)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        git = ["git", "rev-parse", "--short", "HEAD"]
        commit = subprocess.run(git, cwd=REPO, capture_output=True, text=True)
        entry = {"cell": name, "config": config, "result": result, "seconds": round(seconds, 1),
                 "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit.stdout.strip()}  # fmt: skip
        tmp = self.path(name).with_suffix(".part")
        tmp.write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n")
        tmp.rename(self.path(name))
        print(f"[{name}] {json.dumps(result, sort_keys=True)[:300]} ({seconds:.0f} s)", flush=True)
        return result

    def results(self) -> dict[str, dict]:
        return {p.stem: json.loads(p.read_text())["result"] for p in sorted(self.folder.glob("*.json"))}


def run(args: list[str]) -> float:
    """A bertbeam command line in its own process; its wall seconds."""
    start = time.time()
    subprocess.run([sys.executable, *args], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.time() - start
