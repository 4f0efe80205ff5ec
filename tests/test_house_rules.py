"""Rules of the code's shape that keep it easy to read (issue #42), checked on the source.

- No module of ``serialake/`` is longer than ``MAX_LINES``: past that, a module has always
  turned out to mix concepts that read better apart.
- The driver-or-Spark choice of a DML step is made in one place: ``spark/dml/engine.py`` is
  the only module that catches ``NotExact`` and carries on (elsewhere a handler may only
  re-raise it, e.g. with a clearer message).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "serialake"
MAX_LINES = 900
ENGINE = ROOT / "spark" / "dml" / "engine.py"


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_no_module_is_longer_than_the_limit() -> None:
    sizes = {str(p.relative_to(ROOT.parent)): len(p.read_text().splitlines()) for p in _modules()}
    long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them along their concepts): {long}"


def _names(node: ast.expr | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Name):
        return {node.id}
    return set()


def _swallowers(path: Path) -> list[int]:
    """Lines of handlers of ``NotExact`` in ``path`` whose body does not end by raising."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ExceptHandler) and "NotExact" in _names(node.type):
            if not (node.body and isinstance(node.body[-1], ast.Raise)):
                out.append(node.lineno)
    return out


def test_only_the_engine_chooses_by_catching_not_exact() -> None:
    found = {str(p.relative_to(ROOT.parent)): lines for p in _modules() if p != ENGINE and (lines := _swallowers(p))}
    assert not found, (
        "NotExact caught and not re-raised outside spark/dml/engine.py (the one place that picks the "
        f"driver or Spark for a step): {found}"
    )
    assert _swallowers(ENGINE), "spark/dml/engine.py no longer catches NotExact: update this test"
