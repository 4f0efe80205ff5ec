"""No import circle between the modules of serialake: the import graph has no cycle.

Every module under ``serialake/`` is parsed (not imported) with ``ast``. An edge A -> B is
any ``import``/``from ... import`` in A of B, at module level or inside a function, relative
or absolute; ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else
to ``pkg``. Imports under ``if TYPE_CHECKING:`` are for type checkers only and are left out.
"""

from __future__ import annotations

import ast
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "serialake"

#: (module A, module B) -> line of A's first import of B.
Edges = dict[tuple[str, str], int]


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package.

    A directory of modules without ``__init__.py`` is a (namespace) package all the same:
    it maps to the directory, and has no imports of its own.
    """
    mods: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
        for i in range(1, len(parts)):
            mods.setdefault(".".join(parts[:i]), ROOT.parent.joinpath(*parts[:i]))
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The serialake modules one module imports, with the line of each first import."""

    def __init__(self, module: str, is_package: bool, modules: dict[str, Path]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.modules = modules
        self.found: dict[str, int] = {}

    def _resolve(self, name: str) -> str | None:
        """The module ``name`` names, or the nearest enclosing module of ours; None if not ours."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None

    def _add(self, name: str | None, line: int) -> None:
        if name is not None and name != self.module:
            self.found.setdefault(name, line)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "serialake" or alias.name.startswith("serialake."):
                self._add(self._resolve(alias.name), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            package = self.package
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        if not (base == "serialake" or base.startswith("serialake.")):
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            self._add(sub if sub in self.modules else self._resolve(base), node.lineno)


def import_graph() -> Edges:
    """Every import edge between two modules of serialake."""
    modules = _modules()
    edges: Edges = {}
    for module, path in modules.items():
        if path.is_dir():
            continue
        visitor = _Imports(module, path.name == "__init__.py", modules)
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        for target, line in visitor.found.items():
            edges[(module, target)] = line
    return edges


def _components(edges: Edges) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    succ: dict[str, list[str]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def _cycle(edges: Edges, component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, as modules (first repeated last)."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for a in frontier:
            for (x, b) in edges:
                if x != a or b not in members:
                    continue
                if b == start:
                    path = [a]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if b not in came_from:
                    came_from[b] = a
                    nxt.append(b)
        frontier = nxt
    raise AssertionError(f"no cycle in component {component}")


def describe_cycles(edges: Edges) -> list[str]:
    """One line per import circle: a cycle in it, with the line of each import."""
    lines = []
    for component in _components(edges):
        cyc = _cycle(edges, component)
        steps = " -> ".join(f"{b} (line {edges[(a, b)]} of {a})" for a, b in pairwise(cyc))
        lines.append(f"{{{', '.join(component)}}}: {cyc[0]} -> {steps}")
    return lines


def test_the_graph_sees_module_and_function_level_imports() -> None:
    """The graph is not vacuous: module-level, function-level and submodule imports are edges."""
    edges = import_graph()
    assert ("serialake.cli", "serialake.tableinfo") in edges  # module level
    assert ("serialake.cli", "serialake.demo") in edges  # inside main()
    assert ("serialake.verify.rows", "serialake.verify.txn") in edges
    assert ("serialake.verify.workload", "serialake.verify.rows") in edges  # `from serialake.verify import rows`
    assert ("serialake.demo", "serialake.cli") not in edges
    assert ("serialake.verify.rows", "serialake.verify.workload") not in edges


def test_type_checking_imports_are_left_out_and_relative_ones_resolved() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from serialake.cli import main\n"
        "else:\n    from serialake import demo\n"
        "def f():\n    from . import timeline\n    from .verify.rows import execute_txn\n"
        "    import serialake.storage.faulty\n"
    )
    visitor = _Imports("serialake.extras", False, _modules())
    visitor.visit(ast.parse(source))
    assert set(visitor.found) == {
        "serialake.demo", "serialake.timeline", "serialake.verify.rows", "serialake.storage.faulty"
    }


def test_no_import_circles() -> None:
    cycles = describe_cycles(import_graph())
    assert not cycles, "import circles between serialake modules:\n" + "\n".join(cycles)
