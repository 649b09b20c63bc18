"""bench/gap.py (issue 58): where an adaptation's held-out accuracy would meet the own
pretraining's, from fits to each curve's last evaluations; the rows at equal time, their budgets
and what the report compares them with, on cells written here."""

from __future__ import annotations

import json
import math

import pytest

from bench import gap
from bench.cells import Cells
from bench.gap import SEEDS, crossing, in_seconds


def on_line(intercept: float, per_log: float, seconds: list[float]) -> list[tuple[float, float]]:
    return [(t, intercept + per_log * math.log(t)) for t in seconds]


def test_curves_on_log_lines_cross_where_the_lines_do():
    # 0.10 + 0.02 ln t and 0.15 + 0.01 ln t meet at ln t = 5; the second is ahead until then.
    slow_start = on_line(0.10, 0.02, [13.0, 29.0, 61.0])
    ahead = on_line(0.15, 0.01, [7.0, 17.0, 37.0, 71.0])
    found = crossing(slow_start, ahead)
    assert found["ahead_at_end"] == 1
    assert found["end_seconds"] == 61.0  # the last time both have reached
    assert found["cross_seconds"] == pytest.approx(math.exp(5), abs=0.06)
    assert found["per_doubling"] == [round(0.02 * math.log(2), 4), round(0.01 * math.log(2), 4)]
    assert found["gap_at_end"] == pytest.approx(0.05 - 0.01 * math.log(61.0), abs=1e-4)
    assert crossing(ahead, slow_start)["cross_seconds"] == pytest.approx(math.exp(5), abs=0.06)


def test_only_the_last_points_are_fitted_and_curves_drawing_apart_never_cross():
    # An early evaluation far off the line changes nothing with 3 points fitted, and everything with 4.
    bent = [(3.0, 0.9), *on_line(0.10, 0.02, [13.0, 29.0, 61.0])]
    ahead = on_line(0.15, 0.01, [7.0, 17.0, 37.0, 71.0])
    assert crossing(bent, ahead)["cross_seconds"] == pytest.approx(math.exp(5), abs=0.06)
    assert crossing(bent, ahead, points=4)["cross_seconds"] != pytest.approx(math.exp(5), rel=1e-2)
    # Behind and gaining more slowly per doubling: no crossing ahead, whichever order they come in.
    behind = on_line(0.05, 0.005, [13.0, 29.0, 61.0])
    assert crossing(behind, ahead)["cross_seconds"] is None
    assert crossing(ahead, behind)["cross_seconds"] is None


def test_a_curve_of_one_evaluation_is_an_error_and_steps_become_seconds():
    with pytest.raises(ValueError, match="2 evaluations or more per curve, found 1 and 3"):
        crossing([(5.0, 0.1)], on_line(0.1, 0.01, [1.0, 2.0, 3.0]))
    curve = [{"step": 465, "val_mlm_accuracy": 0.16}, {"step": 930, "val_mlm_accuracy": 0.18}]
    assert in_seconds(curve, 1621.3 / 1860) == [(465 * 1621.3 / 1860, 0.16), (930 * 1621.3 / 1860, 0.18)]


def write_cell(cells, name: str, result: dict, config: dict | None = None, seconds: float = 1.0) -> None:
    cells.folder.mkdir(parents=True, exist_ok=True)
    entry = {"cell": name, "config": config or {}, "result": result, "seconds": seconds}
    cells.path(name).write_text(json.dumps(entry))


def curve(steps: list[int], accuracy: list[float]) -> list[dict]:
    return [{"step": s, "val_mlm_accuracy": a, "val_loss": 1.0} for s, a in zip(steps, accuracy, strict=True)]


@pytest.fixture
def benches(tmp_path, monkeypatch):
    """gap's, tagging's and budget's result folders, empty, in tmp_path."""
    folders = {name: Cells(tmp_path / name) for name in ("gap", "tagging", "budget")}
    monkeypatch.setattr(gap, "CELLS", folders["gap"])
    monkeypatch.setattr(gap.tagging, "CELLS", folders["tagging"])
    monkeypatch.setattr(gap.budget, "CELLS", folders["budget"])
    return folders


def test_equal_time_rows_are_compared_with_the_own_run_of_their_time_and_never_count_as_the_best(benches):
    tagged, cells = benches["tagging"], benches["gap"]
    figures = {"release": (0.41, 0.43, 0.42), "pretrained": (0.70, 0.71, 0.72), "scratch": (0.6, 0.6, 0.6)}
    for model, f1 in figures.items():
        for seed in SEEDS:
            write_cell(tagged, f"ft-{model}-crf-seed{seed}", {"test_entity_f1": f1[seed]})
    rows = {
        "ext-mean": (0.73, 0.71, 0.72),
        "ext-random": (0.69, 0.69, 0.69),
        "ext-pieces": (0.99, 0.99),  # two seeds: not a candidate for the best row
        "ext-mean-eq": (0.80, 0.80, 0.80),  # at another budget: never the best of the grid's rows
        "own-budget": (0.75, 0.77, 0.76),
    }
    for model, f1 in rows.items():
        for seed, value in enumerate(f1):
            write_cell(cells, f"tag-{model}-seed{seed}", {"test_entity_f1": value})
    table = gap.report(cells.results())["tasks"]["tag"]
    assert table["best_adapted"] == "ext-mean"
    assert table["best_minus_release"]["gap"] == pytest.approx(0.72 - 0.42, abs=1e-4)
    assert table["best_minus_own"] == {"gap": pytest.approx(0.01, abs=1e-4), "larger_spread": 0.02}
    assert table["best_minus_own-budget"]["gap"] == pytest.approx(0.72 - 0.76, abs=1e-4)
    assert table["ext-mean-eq_minus_own"] == {"gap": pytest.approx(0.09, abs=1e-4), "larger_spread": 0.02}
    assert table["ext-pieces"]["n"] == 2 and "classify" not in table


def test_curves_share_the_idle_machines_seconds_and_cross_the_longest_own_run(benches):
    cells = benches["gap"]
    info = {"added": 3, "added_unknown": 2, "unk_share": 0.1}
    # ext-mean: 60 s over 40 steps; ext-mean-eq: 30 s over 20 (the same rate, half the budget).
    write_cell(cells, "adapt-ext-mean", {"curve": curve([10, 20, 30, 40], [0.1, 0.12, 0.13, 0.14]), **info},
               {"steps": 40, "budget_seconds": 60.0}, seconds=999.0)  # fmt: skip
    eq_curve = curve([5, 10, 15, 20], [0.1, 0.11, 0.12, 0.125])
    write_cell(cells, "adapt-ext-mean-eq", {"curve": eq_curve, **info},
               {"steps": 20, "budget_seconds": 30.0}, seconds=999.0)  # fmt: skip
    # The own run here: 96 steps in 30 s; own-curve holds its curve.
    write_cell(cells, "own", {"eval": {}}, {"steps": 96}, seconds=30.0)
    write_cell(cells, "own-curve", {"curve": curve([32, 64, 96], [0.15, 0.18, 0.2])})
    found = gap.report(cells.results())
    assert found["crossings"]["ext-mean"]["with"] == "own"
    assert found["crossings"]["ext-mean"]["end_seconds"] == pytest.approx(30.0)  # the own run's last
    assert found["crossings"]["ext-mean-eq"]["end_seconds"] == pytest.approx(30.0)
    assert set(found["adaptations"]) == {"ext-mean", "ext-mean-eq"}
    # With the own run at the rows' budget (192 steps in 60 s), that curve is the one crossed.
    write_cell(cells, "own-budget", {"eval": {}, "curve": curve([64, 128, 192], [0.16, 0.2, 0.23])},
               {"steps": 192}, seconds=60.0)  # fmt: skip
    found = gap.report(cells.results())
    assert found["crossings"]["ext-mean"]["with"] == "own-budget"
    assert found["crossings"]["ext-mean"]["end_seconds"] == pytest.approx(60.0)
    assert found["crossings"]["ext-mean-eq"]["end_seconds"] == pytest.approx(30.0)  # its own last
    assert found["curves"]["own-budget"][-1]["step"] == 192
    # Once `pace` has run, an own step is 1 / (calibrated adaptation steps/s x own steps per
    # adaptation step) seconds: 1 / (2/3 x 6) = 0.25, so own-budget ends at 48 s, not its 60 s here.
    write_cell(cells, "calibrate", {"steps_per_s": 2 / 3})
    write_cell(cells, "pace", {"own_steps_per_adapt_step": 6.0})
    found = gap.report(cells.results())
    assert found["crossings"]["ext-mean"]["end_seconds"] == pytest.approx(48.0)
    assert found["crossings"]["ext-mean-eq"]["end_seconds"] == pytest.approx(30.0)


def test_the_budgets_come_from_the_calibrated_rate_and_the_measured_exchange_rate(benches, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    write_cell(benches["tagging"], "pretrain", {"eval": {}}, {"steps": 96}, seconds=610.0)
    write_cell(benches["gap"], "calibrate", {"steps_per_s": 1.5})
    write_cell(benches["gap"], "pace", {"own_steps_per_adapt_step": 7.0})
    assert gap.budget_steps("ext-mean", data, out) == 920  # 1.5/s x 610 s = 915, in 20-step units
    # the own run's steps (9,600) over 7 own steps per adaptation step: 1,371.4
    assert gap.budget_steps("ext-mean-eq", data, out) == 1380
    assert gap.own_budget_steps(data, out) == 6440  # the rows' 920 steps x 7
    write_cell(benches["gap"], "calibrate", {"steps_per_s": 0.1})
    assert gap.budget_steps("ext-mean", data, out) == 100  # 61 steps, but never under 100


def test_a_runs_rate_leaves_out_its_first_steps_and_the_evaluation_rows(tmp_path):
    rows = [{"step": 100, "examples_per_s": 320.0}, {"step": 200, "examples_per_s": 64.0},
            {"step": 200, "val_mlm_accuracy": 0.1}, {"step": 300, "examples_per_s": 96.0}]  # fmt: skip
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert gap.steps_per_s(tmp_path, after=100) == pytest.approx(2.5)  # (2 + 3) / 2 steps of 32
    assert gap.steps_per_s(tmp_path, after=0) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="history.jsonl: no training rows past step 300 to time"):
        gap.steps_per_s(tmp_path, after=300)
