"""bench/gap.py's learning-curve crossing (issue 58): where an adaptation's held-out accuracy
would meet the own pretraining's, from fits to each curve's last evaluations."""

from __future__ import annotations

import math

import pytest

from bench.gap import crossing, in_seconds


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
