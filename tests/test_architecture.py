"""The layout's rules, read from the source (imports inside functions included):
common/ imports nothing of ours; pipeline/ knows no model or launch; model/ knows no files,
strategies or data pipeline; no module imports itself back through others; and every error a user
can cause is a `BertbeamError`, the one class the command lines catch."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from common.errors import BertbeamError

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "pipeline", "model", "launch")


def modules() -> dict[str, Path]:
    return {
        ".".join(path.relative_to(REPO).with_suffix("").parts): path
        for package in PACKAGES
        for path in sorted((REPO / package).glob("*.py"))
        if path.name != "__init__.py"
    }


def imports(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def our_imports(path: Path) -> set[str]:
    ours = modules()
    return {name for name in imports(path) if name in ours}


def test_the_scan_sees_function_level_imports():
    assert "launch.logs" in our_imports(REPO / "launch" / "pretrain.py")  # imported inside print_progress


def test_no_import_cycle():
    graph = {name: our_imports(path) for name, path in modules().items()}
    cycles = []

    def visit(name: str, stack: list[str]) -> None:
        for other in sorted(graph[name]):
            if other in stack:
                cycles.append(" -> ".join(stack[stack.index(other) :] + [other]))
            elif other not in done:
                visit(other, stack + [other])
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize(
    "package, forbidden",
    [
        ("common", ("pipeline", "model", "launch", "apache_beam", "keras")),
        ("pipeline", ("model", "launch", "keras")),
        ("model", ("pipeline", "launch", "apache_beam")),
    ],
)
def test_each_room_imports_only_what_it_may(package, forbidden):
    offenders = sorted(
        f"{name} imports {other}"
        for name, path in modules().items()
        if name.startswith(f"{package}.")
        for other in imports(path)
        if other.split(".")[0] in forbidden
    )
    assert offenders == []


def test_model_uses_tensorflow_only_to_sum_a_loss_over_replicas():
    """model/ is Keras code (it runs on JAX too, bench/gpu.py); its one TensorFlow import is the
    loss's cross-replica sum, justified in model/losses.py."""
    users = {
        name
        for name, path in modules().items()
        if name.startswith("model.") and "tensorflow" in imports(path)
    }
    assert users == {"model.losses"}
    source = (REPO / "model" / "losses.py").read_text()
    tree = ast.parse(source)
    importing = [
        fn.name
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        and any(isinstance(n, ast.Import) and n.names[0].name == "tensorflow" for n in ast.walk(fn))
    ]
    assert importing == ["_sum_over_replicas"]


def test_every_error_a_user_can_cause_is_a_bertbeam_error():
    """The command lines catch `BertbeamError` and nothing else: an error class outside it would
    reach a user as a traceback."""
    errors = []
    for name in modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, Exception):
                errors.append(cls)
    assert len(errors) >= 10
    assert [e.__qualname__ for e in errors if not issubclass(e, BertbeamError)] == []


def test_every_command_line_reports_errors_through_run_cli():
    """`python -m` entry points: their main() goes through common.cli.run_cli (one line, exit 2)."""
    entry_points = [name for name, path in modules().items() if "__main__" in path.read_text()]
    assert {"pipeline.build_corpus", "launch.pretrain", "launch.export"} <= set(entry_points)
    for name in entry_points:
        if name == "pipeline.fetch_corpora":  # fetches packages; argparse's own errors suffice
            continue
        assert "run_cli(" in inspect.getsource(importlib.import_module(name).main), name
