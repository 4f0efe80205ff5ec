"""The parts of ``serialake.spark`` the driver (pyarrow) paths and the executors' reader use
import no pyspark, at module level or below, directly or through another serialake module
(issue #42: the driver DML code imported pyspark through ``spark/io.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PURE = [
    "serialake.spark.columns",
    "serialake.spark.partition_values",
    "serialake.spark.staging",
    "serialake.spark.footer_stats",
    "serialake.spark.arrow_reader",
]


def _imports(module: str) -> set[str]:
    """The modules ``module`` imports anywhere (``TYPE_CHECKING`` blocks left out)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module:
                out.add(child.module)
                out.update(f"{child.module}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    return out


def _closure(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for name in _imports(m):
            if name.startswith("serialake.") and (ROOT / (name.replace(".", "/") + ".py")).exists():
                todo.append(name)
            elif name.startswith("pyspark"):
                seen.add(name)
    return seen


@pytest.mark.parametrize("module", PURE)
def test_imports_no_pyspark(module: str) -> None:
    found = sorted(m for m in _closure(module) if m.startswith("pyspark"))
    assert not found, f"{module} imports {found}"


def test_driver_files_imports_no_pyspark() -> None:
    found = sorted(m for m in _closure("serialake.spark.dml.driver_files") if m.startswith("pyspark"))
    assert not found, found
