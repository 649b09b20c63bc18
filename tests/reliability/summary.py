"""The reliability suite's summary: each case reports what went in and what came out, and the
suite prints one table at the end (`make test-reliability`; copied into docs/reliability.md).
A plugin of tests/conftest.py, so that the process printing the table has its hooks also when
workers run the tests (pytest-xdist): a sub-folder's conftest is not loaded there.

    def test_x(report):
        report("nasty text corpus, --on_bad_file skip", docs_in=14, docs_out=14,
               skipped={"bad_file_binary": 1}, detail="...")
"""

from __future__ import annotations

import re

import pytest

_ROWS: list[dict] = []
_OUTCOMES: dict[str, str] = {}


@pytest.fixture
def report(request):
    """Adds the case's row to its test report's user_properties, which reach the process that
    prints the summary also when the suite runs on several workers (pytest-xdist)."""

    def add(case: str, *, docs_in=None, docs_out=None, skipped=None, detail: str = "") -> None:
        row = {
            "case": case,
            "docs_in": docs_in,
            "docs_out": docs_out,
            "skipped": skipped or {},
            # The case, not the machine: the session's folder, its worker's and the case's own.
            "detail": re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/(popen-gw\d+/)?([^/\s]+/)?", "…/", detail),
        }
        request.node.user_properties.append(("reliability", row))

    return add


def pytest_runtest_logreport(report):
    if report.when == "call":
        _ROWS.extend(
            {"nodeid": report.nodeid, **row} for name, row in report.user_properties if name == "reliability"
        )
    if report.when == "call" or report.failed:
        _OUTCOMES[report.nodeid] = "FAIL" if report.failed else report.outcome


def summary_table() -> str:
    def cell(value) -> str:
        return "" if value is None else f"{value:,}" if isinstance(value, int) else str(value)

    lines = [
        "| case | result | documents in | documents out | skipped by reason | detail |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for row in _ROWS:
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(row["skipped"].items()))
        result = _OUTCOMES.get(row["nodeid"], "?")
        lines.append(
            f"| {row['case']} | {result} | {cell(row['docs_in'])} | {cell(row['docs_out'])} | "
            f"{skipped} | {row['detail']} |"
        )
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter):
    if _ROWS:
        terminalreporter.write_sep("=", "reliability summary")
        terminalreporter.write_line(summary_table())
