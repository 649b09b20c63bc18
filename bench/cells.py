"""What the long benchmarks share: a grid of named cells, each written to RESULTS/CELL.json the moment
it is done and skipped by a rerun, so a study longer than a session runs in parts and its small
result files are committed (bench/quality.py, bench/adapt.py).

    cells = Cells(REPO / "bench" / "results" / "adapt")
    if (found := cells.done("ft-rt-release-seed0")) is None: ... cells.record(name, config, result, seconds)
"""

from __future__ import annotations

import json
import statistics
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

    def run_grid(self, grid: dict, only: str = "", dry_run: bool = False, shard: str = "0/1") -> None:
        """Computes the cells of `grid` (name -> thunk) not done yet, in order; `only`: those whose
        name holds one of its comma-separated parts; `dry_run`: lists them, done or to do; `shard`
        I/N: every Nth of them from the Ith, so that N processes share a grid without a cell twice."""
        parts = [part for part in only.split(",") if part]
        index, count = (int(x) for x in shard.split("/"))
        chosen = [name for name in grid if not parts or any(part in name for part in parts)]
        for name in chosen[index::count]:
            compute = grid[name]
            if dry_run:
                print(f"{'done' if self.path(name).exists() else 'todo'}  {name}")
            elif not self.path(name).exists():
                compute()

    def finetune(self, name: str, config) -> dict:
        """A fine-tuning cell: `launch.finetune` with `config` (a FinetuneConfig) in this process;
        test and validation accuracy, the best epoch and the recipe it resolved."""
        if (found := self.done(name)) is not None:
            return found
        import keras

        from launch.finetune import finetune

        start = time.time()
        summary = finetune(config)
        keras.backend.clear_session()
        figures = json.loads((Path(config.output) / "eval.json").read_text())
        result = {"test_accuracy": summary["accuracy"], "validation_accuracy": figures["accuracy"],
                  "best_epoch": summary["best_epoch"], "recipe": figures["recipe"]}  # fmt: skip
        config_json = {k: v for k, v in vars(config).items() if v is not None and k != "output"}
        return self.record(name, config_json, result, time.time() - start)


def command_line(doc: str, cells: Cells, grid, report, out: Path, fetch=()) -> int:
    """A cell bench's command line: --data, --out, --only, --dry_run, --report. Runs the cells of
    `grid(data, out)` not done yet (after each of `fetch` (data) fetched its corpus), then prints
    `report(results)` as JSON."""
    import argparse

    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO / "data"))
    p.add_argument("--out", default=str(out), help="runs and corpora (not committed)")
    p.add_argument(
        "--only", default="", help="run the cells whose name contains any of these (comma-separated)"
    )
    p.add_argument("--dry_run", action="store_true", help="list the cells, done or to do")
    p.add_argument(
        "--shard",
        default="0/1",
        help="I/N: this process runs every Nth cell from the Ith (N processes at once)",
    )
    p.add_argument("--report", action="store_true", help="only print the report of the cells done")
    args = p.parse_args()
    data, out = Path(args.data), Path(args.out)
    if not args.report:
        for fetcher in fetch:
            fetcher(data)
        cells.run_grid(grid(data, out), args.only, args.dry_run, args.shard)
    print(json.dumps(report(cells.results()), indent=2, sort_keys=True))
    return 0


def summary(values: list[float]) -> dict:
    """Mean, spread (max - min) and count of a cell group's figures (seeds)."""
    return {"mean": statistics.mean(values), "spread": max(values) - min(values), "n": len(values)}


def run(args: list[str]) -> float:
    """A bertbeam command line in its own process; its wall seconds."""
    start = time.time()
    subprocess.run([sys.executable, *args], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.time() - start
