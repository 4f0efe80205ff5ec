"""The folders of ``serialake.core`` are layers: a module imports only from its own folder or below.

From the bottom: ``model`` (actions, schema, properties: what a table is), ``dv`` (deletion
vectors), ``predicates`` (expressions, skipping, evaluation on rows), ``log`` (replay,
snapshots, checkpoints, the change feed), ``iceberg`` (UniForm metadata), ``txn`` (commits and
conflicts), ``tables`` (several tables: catalog, cuts, derived tables). Edges are those of
``tests/test_import_circles.py`` (module and function level; ``TYPE_CHECKING`` left out).
"""

from __future__ import annotations

from tests.test_import_circles import import_graph

LAYERS = ["model", "dv", "predicates", "log", "iceberg", "txn", "tables"]

#: The one import that runs up, with why: ``DeltaLog.start_transaction`` is the table's door to
#: its transactions (used at every write), imported inside that method.
ALLOWED = {
    ("serialake.core.log.deltalog", "serialake.core.txn.transaction"),
}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[:2] != ["serialake", "core"] or parts[2] not in LAYERS:
        return None
    return LAYERS.index(parts[2])


def test_every_core_module_sits_in_a_layer() -> None:
    loose = sorted(
        {m for edge in import_graph() for m in edge if m.startswith("serialake.core.") and _layer(m) is None}
    )
    assert not loose, f"core modules outside the layers {LAYERS}: {loose}"


def test_core_imports_run_down_the_layers() -> None:
    up = []
    for (a, b), line in sorted(import_graph().items()):
        la, lb = _layer(a), _layer(b)
        if la is not None and lb is not None and lb > la and (a, b) not in ALLOWED:
            up.append(f"{a} -> {b} (line {line}): {LAYERS[la]} imports {LAYERS[lb]}, a layer above it")
    assert not up, "\n".join(up)
