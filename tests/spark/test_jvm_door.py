"""One module of serialake touches Spark's JVM: ``serialake.spark.backend.classic``.

Every other module asks ``serialake.spark.backend.backend(spark)`` for what it needs, so a
Spark Connect implementation (no py4j handle: no ``_jvm``, ``_jdf``, ``sparkContext``) can
sit beside the classic one. Every module under ``serialake/`` is parsed (not imported) with
``ast``: an attribute access to a JVM handle of PySpark's classic classes, a ``getattr`` of
one by name, or an import of py4j, anywhere else fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from serialake.exceptions import UnsupportedFeatureError
from serialake.spark.backend import Backend, backend

ROOT = Path(__file__).resolve().parents[2] / "serialake"
DOOR = ROOT / "spark" / "backend" / "classic.py"

#: PySpark's handles on the JVM: a session's, a DataFrame's, a Column's, a reader's or writer's.
JVM_ATTRIBUTES = frozenset(
    {
        "_jvm",
        "_jsc",
        "_jsparkSession",
        "sparkContext",
        "_jdf",
        "_jc",
        "_to_java_column",
        "_jwrite",
        "_jreader",
        "_jsq",
        "_jconf",
        "_gateway",
    }
)


def _jvm_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr in JVM_ATTRIBUTES:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in JVM_ATTRIBUTES:
            found.append(f"{node.lineno}: {node.id}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in JVM_ATTRIBUTES
        ):
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found.extend(f"{node.lineno}: import {n}" for n in names if n == "py4j" or n.startswith("py4j."))
    return found


def test_only_the_door_touches_spark_jvm() -> None:
    outside = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == DOOR:
            continue
        outside.extend(f"{path.relative_to(ROOT.parent)}:{use}" for use in _jvm_uses(path))
    assert not outside, "Spark's JVM outside serialake/spark/backend/classic.py:\n" + "\n".join(outside)


def test_the_check_sees_the_door() -> None:
    """The check is not vacuous: the classic backend is where those attributes are."""
    assert any("._jdf" in use for use in _jvm_uses(DOOR))
    assert any("py4j" in use for use in _jvm_uses(DOOR))


class _ConnectLikeSession:
    """A session with no py4j handle, as a Spark Connect session is."""


def test_a_session_without_a_jvm_is_refused_naming_the_capability() -> None:
    door = backend(_ConnectLikeSession())  # type: ignore[arg-type]
    with pytest.raises(UnsupportedFeatureError, match="default_parallelism") as e:
        door.default_parallelism()
    assert isinstance(e.value, NotImplementedError)
    with pytest.raises(UnsupportedFeatureError, match="column_sql"):
        door.column_sql(None, None)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        door.not_a_capability  # type: ignore[attr-defined]  # noqa: B018


def test_every_capability_is_implemented_by_the_classic_backend() -> None:
    from serialake.spark.backend.classic import Classic

    capabilities = {n for n in vars(Backend) if not n.startswith("_")}
    assert capabilities, "Backend lists no capability"
    assert capabilities <= set(vars(Classic)), sorted(capabilities - set(vars(Classic)))
