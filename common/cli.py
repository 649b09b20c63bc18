"""Command lines from config dataclasses, and the one way every entry point reports a user error.

    @dataclasses.dataclass(frozen=True)
    class TrainConfig:
        train_steps: int = field(1000, "optimizer updates in the whole run")

    parser = Parser(prog="python -m launch.pretrain", description="...")
    add_arguments(parser, TrainConfig)              # --train_steps N, with its help and default
    sys.exit(run_cli(main, argv))                   # BertbeamError -> "error: ..." and exit 2

A field's help lives in its metadata, so `--help` explains every flag and a flag can never drift
from its field. Booleans get `--flag` / `--no-flag`; `Literal` types become choices; `X | None`
takes an X. Abbreviated flags are refused (argparse would otherwise take `--seq 64` for
`--seq_len 64`, and a typo that happens to be a prefix would change a build silently).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from collections.abc import Callable

from common.errors import BertbeamError, ConfigError

# What Beam appends to an exception raised inside a transform: the stage, not the news.
_BEAM_STAGE = re.compile(r" \[while running '[^']*'\]$")


def first_paragraph(doc: str) -> str:
    """A module docstring's first paragraph as one line: the whole sentence a --help opens with
    (its first line alone may stop mid-sentence)."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def field(default, help: str, **metadata):
    """A dataclass field whose flag explains itself: `help` for --help; optional `flag` (the flag's
    name when it differs from the field's), `parse` (str -> value), `required`, `metavar`."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default, unless there is none to show (None, empty)."""

    def _get_help_string(self, action):
        if action.default in (None, (), "") or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse, with defaults in --help, no abbreviations, and mistakes raised as `ConfigError`
    (one line through `run_cli`) instead of a usage dump and `SystemExit`. `verbose_flag`: the
    command takes `--verbose`, which acts before parsing (the launch package reads it when it
    imports TensorFlow) and is not among the parsed values."""

    def __init__(self, *, verbose_flag: bool = False, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(allow_abbrev=False, **kwargs)
        if verbose_flag:
            self.add_argument(
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="show TensorFlow's start-up lines (absl, CUDA stubs), held back by default",
            )

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        parsed.__dict__.pop("verbose", None)
        return parsed, rest

    def error(self, message):
        raise ConfigError(f"{message} (see {self.prog} --help)")


def _flag_type(kind) -> tuple[type, tuple | None]:
    """(the type a flag's value converts to, its choices) for a field's annotation."""
    args = [t for t in typing.get_args(kind) if t is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return _flag_type(args[0])
    if typing.get_origin(kind) is typing.Literal:
        return type(args[0]), tuple(args)
    return kind, None


def add_arguments(parser: argparse.ArgumentParser, config_class: type, *, skip: tuple[str, ...] = ()) -> None:
    """One flag per field of `config_class` (except `skip`), each with its field's help."""
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        if f.name in skip:
            continue
        if "help" not in f.metadata:
            raise TypeError(
                f"{config_class.__name__}.{f.name}: no help text (declare it with common.cli.field)"
            )
        meta = f.metadata
        name = meta.get("flag", f.name)
        flag = f"--{name}"
        common = {"dest": f.name, "default": f.default, "help": meta["help"]}
        if hints[f.name] is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **common)
            continue
        kind, choices = _flag_type(hints[f.name])
        parser.add_argument(
            flag,
            type=meta.get("parse", kind),
            choices=choices,
            required=meta.get("required", False),
            metavar=meta.get("metavar", "|".join(map(str, choices)) if choices else name.upper()),
            **common,
        )


def user_error(error: BaseException) -> BertbeamError | None:
    """The `BertbeamError` behind `error` (itself, or what it was raised from), else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, BertbeamError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return _BEAM_STAGE.sub("", lines[0]) if lines else type(error).__name__


def run_cli(main: Callable[[list[str] | None], object], argv: list[str] | None = None) -> int:
    """Runs an entry point: 0 when it returns, 2 with "error: <one line>" on stderr for a user
    error. Any other exception propagates with its traceback: a bug is a bug."""
    try:
        main(argv)
    except Exception as e:
        error = user_error(e)
        if error is None:
            raise
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    return 0
