"""The packages of ``serialake`` are layers: a module imports only from its own package or below.

From the bottom: ``exceptions``, ``storage`` (log stores, data files), ``core`` (the
transaction log, in layers of its own: ``tests/core/test_layers.py``), ``spark`` (PySpark:
DataFrames in and out, the operations; ``spark.backend`` is its one door to Spark's JVM),
``sql`` (the SQL front end over ``spark``), ``dropin`` (delta-spark's entry points in a plain
SparkSession, which hand ``spark.sql`` to ``sql``). The front ends (``cli``, ``demo``...) and
``verify`` sit above them all. Edges are those of ``tests/test_import_circles.py`` (module and
function level; ``TYPE_CHECKING`` left out).
"""

from __future__ import annotations

from tests.test_import_circles import import_graph

LAYERS = ["exceptions", "storage", "core", "spark", "sql", "dropin"]

#: The one import that runs up, with why: ``spark_session()`` hands back a session configured
#: for delta-spark's idioms (``serialake.configure``), imported inside that function.
ALLOWED = {
    ("serialake.spark.session", "serialake.dropin"),
}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "serialake" or parts[1] not in LAYERS:
        return None
    return LAYERS.index(parts[1])


def test_imports_run_down_the_layers() -> None:
    up = []
    for (a, b), line in sorted(import_graph().items()):
        la, lb = _layer(a), _layer(b)
        if la is not None and lb is not None and lb > la and (a, b) not in ALLOWED:
            up.append(f"{a} -> {b} (line {line}): {LAYERS[la]} imports {LAYERS[lb]}, a layer above it")
    assert not up, "\n".join(up)


def test_dropin_sits_above_sql() -> None:
    """The drop-in hands ``spark.sql`` statements to ``sql``: it is a layer above it, not in ``spark``."""
    graph = import_graph()
    assert ("serialake.dropin", "serialake.sql") in graph or any(
        a.startswith("serialake.dropin") and b.startswith("serialake.sql") for a, b in graph
    )
    assert _layer("serialake.dropin") == LAYERS.index("sql") + 1
    assert not any(m.startswith("serialake.spark.dropin") for edge in graph for m in edge)


def test_allowed_edges_exist() -> None:
    """An allowance for an edge that is gone is stale: remove it."""
    graph = import_graph()
    assert not [edge for edge in ALLOWED if edge not in graph]
