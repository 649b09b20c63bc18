"""One base for every error a user can fix: bad input, a bad flag, a corpus or checkpoint that does
not fit. Every command line catches `BertbeamError` and prints its message as one line (exit code
2); anything else is a bug and keeps its traceback."""

from __future__ import annotations


class BertbeamError(ValueError):
    """Something the user can fix; the message is one line naming the cause (file, field, flag)
    and, where it helps, what to change."""


class ConfigError(BertbeamError):
    """A setting or flag that cannot work."""


def need(ok: bool, message: str, error: type[BertbeamError] = ConfigError) -> None:
    """Raise `error(message)` unless `ok`: the validators of the config dataclasses."""
    if not ok:
        raise error(message)
