"""The training budget's flags: --epochs is the most, --patience stops sooner (the run itself:
tests/launch/test_finetune.py)."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from launch.finetune.config import FinetuneConfig


def config(**flags) -> FinetuneConfig:
    return FinetuneConfig(train="t", validation="v", output="o", init_checkpoint="hf:r", **flags)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"patience": -1}, "^--patience: expected >= 0, found -1$"),
        ({"epochs": 0}, "^--epochs: expected >= 1, found 0$"),
    ],
)
def test_budget_mistakes_are_one_line(flags, message):
    with pytest.raises(ConfigError, match=message):
        config(**flags)


def test_the_opening_line_says_when_the_run_may_stop_sooner():
    assert config(epochs=12, patience=3).budget(77) == (
        "up to 12 epochs of 77 steps (stopping after 3 without improvement)"
    )
    assert config(epochs=4, patience=0).budget(9) == "4 epochs of 9 steps"
    assert config(epochs=3, patience=2).budget(9) == "3 epochs of 9 steps"  # the soonest stop is epoch 3
    assert config(epochs=4, patience=2).budget(9).startswith("up to 4 epochs")
