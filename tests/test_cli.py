"""common/cli.py: flags from a config dataclass, with their help; mistakes as one-line errors."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from common.cli import Parser, add_arguments, field, one_line, run_cli, user_error
from common.errors import BertbeamError, ConfigError


@dataclasses.dataclass(frozen=True)
class Tiny:
    steps: int = field(7, "updates in the run")
    rate: float | None = field(None, "peak learning rate")
    mode: Literal["fast", "exact"] = field("exact", "how to run")
    compile: bool = field(True, "compile with XLA")
    paths: tuple[str, ...] = field((), "inputs", flag="input", parse=lambda v: tuple(v.split(",")))


def parse(*argv: str) -> Tiny:
    parser = Parser(prog="tiny")
    add_arguments(parser, Tiny)
    return Tiny(**vars(parser.parse_args(list(argv))))


def test_fields_become_flags_with_types_choices_and_negations():
    assert parse() == Tiny()
    assert parse(
        "--steps", "13", "--rate", "3e-4", "--mode", "fast", "--no-compile", "--input", "a,b"
    ) == Tiny(13, 3e-4, "fast", False, ("a", "b"))
    parser = Parser(prog="tiny")
    add_arguments(parser, Tiny)
    help_text = " ".join(parser.format_help().split())
    for phrase in (
        "updates in the run (default: 7)",
        "--mode fast|exact",
        "--compile, --no-compile",
        "inputs",
    ):
        assert phrase in help_text
    assert "peak learning rate (default" not in help_text  # no "(default: None)" noise


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "x"], "argument --steps: invalid int value: 'x' (see tiny --help)"),
        (["--mode", "slow"], "argument --mode: invalid choice: 'slow'"),
        (["--ste", "3"], "unrecognized arguments: --ste 3"),  # no abbreviations
    ],
)
def test_flag_mistakes_are_config_errors(argv, message):
    with pytest.raises(ConfigError, match=f"^{message}".replace("(", r"\(").replace(")", r"\)")):
        parse(*argv)


def test_a_field_without_help_is_refused():
    @dataclasses.dataclass
    class Silent:
        steps: int = 3

    with pytest.raises(TypeError, match="Silent.steps: no help text"):
        add_arguments(Parser(prog="x"), Silent)


def test_run_cli_prints_one_line_for_user_errors_and_keeps_tracebacks_for_bugs(capsys):
    def fails(argv):
        raise ConfigError("--steps: expected >= 1, found 0\nsecond line")

    assert run_cli(fails, []) == 2
    assert capsys.readouterr().err == "error: --steps: expected >= 1, found 0\n"
    assert run_cli(lambda argv: None, []) == 0

    def buggy(argv):
        raise ValueError("an internal bug, not the user's")

    with pytest.raises(ValueError, match="internal bug"):
        run_cli(buggy, [])


def test_a_user_error_is_found_behind_a_wrapper_and_beams_stage_is_dropped():
    class Wrapped(RuntimeError):
        pass

    try:
        try:
            raise BertbeamError("in.txt: looks binary [while running 'ReadDocuments/ReadFiles']")
        except BertbeamError as inner:
            raise Wrapped("worker failed") from inner
    except Wrapped as e:
        found = user_error(e)
    assert one_line(found) == "in.txt: looks binary"
    assert user_error(RuntimeError("no user error here")) is None


def test_verbose_is_taken_and_dropped_from_the_values():
    parser = Parser(prog="tiny", verbose_flag=True)
    add_arguments(parser, Tiny)
    assert Tiny(**vars(parser.parse_args(["--verbose", "--steps", "3"]))) == Tiny(steps=3)
    assert "--verbose" in parser.format_help()
    with pytest.raises(ConfigError, match="unrecognized arguments: --verbose"):
        parse("--verbose")  # only where the command takes it


@pytest.mark.slow  # four fresh processes, each importing TensorFlow
@pytest.mark.parametrize("command", ["pretrain", "finetune", "export", "evaluate"])
def test_every_launch_command_starts_quiet_and_verbose_brings_the_lines_back(command):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    quiet = subprocess.run([sys.executable, "-m", f"launch.{command}", "--help"], cwd=repo,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert quiet.returncode == 0 and quiet.stdout.startswith(f"usage: python -m launch.{command}")
    assert quiet.stderr == ""
    if command == "finetune":  # the one whose noise came twice: the lines are held, not gone
        verbose = subprocess.run([sys.executable, "-m", "launch.finetune", "--help", "--verbose"], cwd=repo,
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
        assert verbose.returncode == 0 and verbose.stdout.startswith("usage:")
        assert "absl::InitializeLog" in verbose.stderr or "cuda" in verbose.stderr.lower()
