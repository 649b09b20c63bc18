"""The layout's rules, read from the source of every module at any depth (imports inside functions
included): common/ imports nothing of ours; pipeline/ knows no model or launch; model/ knows no
files, strategies or data pipeline; nothing but bench/ imports bench/; no module imports itself
back through others; no module in pipeline/, model/ or launch/ outgrows 450 lines; docs/modules.md
names every module and no other; and every error a user can cause is a `BertbeamError`, the one
class the command lines catch."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

from common.errors import BertbeamError

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "pipeline", "model", "launch")
# The rooms inside the packages; the scan must reach each of them.
ROOMS = ("pipeline/stages", "pipeline/curation", "pipeline/runners", "pipeline/reader", "pipeline/vocab",
         "pipeline/fetch", "launch/interop", "launch/finetune", "launch/finetune/classify",
         "launch/finetune/tag", "launch/finetune/span", "model/tasks")  # fmt: skip
# Each fine-tuning task's folder holds the same steps under the same names.
TASK_FILES = ("data.py", "encoding.py", "metrics.py", "run.py", "serving.py")
MAX_LINES = 450


def name_of(path: Path) -> str:
    """`pipeline/curation/quality.py` -> `pipeline.curation.quality`; a package's __init__.py is
    the package itself."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(folders=PACKAGES) -> dict[str, Path]:
    """Every module of `folders`, at any depth, by dotted name."""
    return {name_of(path): path for folder in folders for path in sorted((REPO / folder).rglob("*.py"))}


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


def our_imports(path: Path, ours: dict[str, Path]) -> set[str]:
    return {name for name in imports(path) if name in ours and name != name_of(path)}


def test_the_scan_sees_every_room_and_function_level_imports():
    found = modules()
    for room in ROOMS:
        assert any(path.parent == REPO / room for path in found.values()), room
    assert "launch.logs" in our_imports(REPO / "launch" / "pretrain.py", found)  # inside print_progress
    assert "pipeline.runners.dask_runner" in our_imports(REPO / "pipeline/runners/options.py", found)


def test_each_finetuning_task_has_its_room_with_the_same_steps():
    """`launch/finetune/{classify,tag,span}/`: the reader, the figures, the run and the serving
    under the same names; nothing of one task imports another's room."""
    tasks = ("classify", "tag", "span")
    for task in tasks:
        assert {p.name for p in (REPO / "launch/finetune" / task).glob("*.py")} >= set(TASK_FILES), task
    found = modules(("launch",))
    crossing = sorted(
        f"{name} imports {other}"
        for name, path in found.items()
        if name.startswith("launch.finetune.") and name.split(".")[2] in tasks
        for other in our_imports(path, found)
        if other.startswith("launch.finetune.") and other.split(".")[2] in set(tasks) - {name.split(".")[2]}
    )
    assert crossing == []


def test_no_import_cycle():
    ours = modules((*PACKAGES, "bench"))
    graph = {name: our_imports(path, ours) for name, path in ours.items()}
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
        ("common", ("pipeline", "model", "launch", "bench", "apache_beam", "keras")),
        ("pipeline", ("model", "launch", "bench", "keras")),
        ("model", ("pipeline", "launch", "bench", "apache_beam")),
        ("launch", ("bench",)),
    ],
)
def test_each_room_imports_only_what_it_may(package, forbidden):
    offenders = sorted(
        f"{name} imports {other}"
        for name, path in modules((package,)).items()
        for other in imports(path)
        if other.split(".")[0] in forbidden
    )
    assert offenders == []


def test_model_uses_tensorflow_only_to_sum_a_loss_over_replicas():
    """model/ is Keras code (it runs on JAX too, bench/gpu.py); its one TensorFlow import is the
    loss's cross-replica sum, justified in model/losses.py."""
    users = {name for name, path in modules(("model",)).items() if "tensorflow" in imports(path)}
    assert users == {"model.losses"}
    tree = ast.parse((REPO / "model" / "losses.py").read_text())
    importing = [
        fn.name
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        and any(isinstance(n, ast.Import) and n.names[0].name == "tensorflow" for n in ast.walk(fn))
    ]
    assert importing == ["_sum_over_replicas"]


def test_no_module_outgrows_its_room():
    long = {
        name: n
        for name, path in modules(("pipeline", "model", "launch")).items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_docs_modules_names_every_module_and_no_other():
    """docs/modules.md's tables list each module by its path (`pipeline/curation/quality.py`), a
    package by its folder (`pipeline/curation/`): the page and the tree cannot drift apart."""
    listed = set(re.findall(r"^\| `([\w/]+(?:\.py|/))` \|", (REPO / "docs/modules.md").read_text(), re.M))
    tree = {
        str(path.relative_to(REPO).parent) + "/"
        if path.name == "__init__.py"
        else str(path.relative_to(REPO))
        for path in modules().values()
    }
    assert sorted(listed - tree) == [] and sorted(tree - listed) == []


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


def entry_points() -> list[str]:
    """Modules with a top-level `if __name__ == "__main__":`, not those that only mention it."""

    def guarded(path: Path) -> bool:
        body = ast.parse(path.read_text()).body
        return any(isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'" for n in body)

    return [name for name, path in modules().items() if guarded(path)]


def test_every_command_line_reports_errors_through_run_cli():
    """`python -m` entry points: their main() goes through common.cli.run_cli (one line, exit 2)."""
    assert {"pipeline.build_corpus", "pipeline.curation_report", "launch.pretrain", "launch.export",
            "launch.finetune.__main__"} <= set(entry_points())  # fmt: skip
    for name in entry_points():
        if name == "pipeline.fetch_corpora":  # fetches packages; argparse's own errors suffice
            continue
        assert "run_cli(" in inspect.getsource(importlib.import_module(name).main), name


def test_every_help_opens_with_a_whole_sentence():
    """The description under `--help`'s usage line, of every entry point (a thin one's is where
    its main() lives; launch.pretrain's flags are launch/config.py's)."""
    for name in entry_points():
        module = importlib.import_module(name)
        home = "launch.config" if name == "launch.pretrain" else module.main.__module__
        description = sys.modules[home].parser().description
        assert re.fullmatch(r"[A-Z].*[.!?)]", description, re.S), (name, description)


def test_the_model_tests_import_no_launch_code():
    """tests/model/ checks the Keras models alone (with real tokens from pipeline/ at most):
    what launch/ adds is tested under tests/launch/."""
    found = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in sorted((REPO / "tests" / "model").rglob("*.py"))
        for name in imports(path)
        if name.split(".")[0] == "launch"
    }
    assert found == set()
