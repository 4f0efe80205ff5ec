"""Operations written once in delta-spark's Python API, run by delta-spark or by serialake.

An :class:`Op` is a snippet of delta-spark's API (SQL on ``delta.`path```,
``df.write.format("delta")``, ``DeltaTable``) that both engines run as it is: delta-spark in the
peer (``peer/worker.py``), serialake in a session configured for the drop-in API
(:func:`serialake_exec`); with it goes a Python model of its effect on the rows. A
:class:`Layout` is a small base table written the same way. A table's rows are :class:`Row`
(``id BIGINT, p INT, c STRING, x INT``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from peer.plain import plain_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from peer.client import DeltaSparkPeer

__all__ = [
    "COLUMNS",
    "OPTIMIZE",
    "SCHEMA",
    "SMALL_TABLES",
    "SPARK_SMALL_TABLES",
    "Layout",
    "Op",
    "Row",
    "Rows",
    "append",
    "base_row",
    "before_first_commit",
    "commit_hooks",
    "delete",
    "delta_spark_rows",
    "first_write",
    "insert_select",
    "merge_all",
    "merge_rows",
    "merge_sql",
    "merging",
    "same",
    "serialake_exec",
    "serialake_rows",
    "small_tables",
    "small_tables_session",
    "sql",
    "update",
    "upgrade",
]

SCHEMA = "id BIGINT, p INT, c STRING, x INT"
COLUMNS = ("id", "p", "c", "x")


class Row(NamedTuple):
    id: int
    p: int
    c: str
    x: int


Rows = list[Row]


def base_row(i: int) -> Row:
    """Row ``i`` of every base table: three values of ``p``, two of ``c``."""
    return Row(i, 1 + i % 3, "ab"[i % 2], i)


# -- tables ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """A base table: ``files`` rows per append (``coalesce(1)``: one file per partition each)."""

    name: str
    description: str
    files: tuple[tuple[Row, ...], ...]
    partition_by: tuple[str, ...] = ()
    deletion_vectors: bool = False

    @property
    def rows(self) -> Rows:
        return [r for f in self.files for r in f]

    def properties(self, level: str) -> str:
        dv = "true" if self.deletion_vectors else "false"
        return f"'delta.isolationLevel' = '{level}', 'delta.enableDeletionVectors' = '{dv}'"

    def build_code(self, path: str, level: str) -> str:
        """Python (delta-spark's API) that creates the table at ``path`` and writes its files."""
        parts = f" PARTITIONED BY ({', '.join(self.partition_by)})" if self.partition_by else ""
        create = f"CREATE TABLE delta.`{path}` ({SCHEMA}) USING delta{parts} TBLPROPERTIES ({self.properties(level)})"
        lines = [f"spark.sql({create!r})"]
        for rows in self.files:
            lines.append(_append_code(path, rows))
        return "\n".join(lines)


def _append_code(path: str, rows: Sequence[Row], options: dict[str, str] | None = None) -> str:
    data = [tuple(r) for r in rows]
    opts = "".join(f".option({k!r}, {v!r})" for k, v in (options or {}).items())
    return (
        f"spark.createDataFrame({data!r}, {SCHEMA!r}).coalesce(1)"
        f".write.format('delta').mode('append'){opts}.save({path!r})"
    )


# -- operations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One operation: ``label`` as shown (the table is ``t``), ``code(path)`` in delta-spark's
    Python API (run by either engine), ``model`` its effect on the rows."""

    label: str
    code: Callable[[str], str]
    model: Callable[[Rows], Rows]


def sql(text: str, model: Callable[[Rows], Rows]) -> Op:
    """A SQL statement on ``t`` (``{t}`` in ``text``)."""
    return Op(text.replace("{t}", "t"), lambda path: f"spark.sql({text.replace('{t}', f'delta.`{path}`')!r})", model)


def append(*rows: Row, app: tuple[str, int] | None = None) -> Op:
    """A blind append (``df.write.format("delta").mode("append")``), with ``txnAppId`` /
    ``txnVersion`` when ``app`` is given."""
    options = {"txnAppId": app[0], "txnVersion": str(app[1])} if app else None
    ids = ", ".join(str(r.id) for r in rows)
    label = f"append id {ids}" + (f" (txn {app[0]} v{app[1]})" if app else "")
    if len({r.p for r in rows}) == 1:
        label += f" (p={rows[0].p})"
    return Op(label, lambda path: _append_code(path, rows, options), lambda cur: cur + list(rows))


def first_write(*rows: Row) -> Op:
    """The first write to an empty path (``df.write.format("delta").save``), the level and the
    deletion vector setting as ``delta.*`` writer options: table properties in delta-spark;
    serialake ignores them (its table gets its default level, which check 1 does not use)."""

    def code(path: str) -> str:
        return (
            f"spark.createDataFrame({[tuple(r) for r in rows]!r}, {SCHEMA!r}).coalesce(1).write.format('delta')"
            ".option('delta.isolationLevel', args['level']).option('delta.enableDeletionVectors', 'false')"
            f".save({path!r})"
        )

    ids = ", ".join(str(r.id) for r in rows)
    label = f"write id {ids} to the empty path, the level as writer option delta.isolationLevel (serialake ignores it)"
    return Op(label, code, lambda cur: list(rows))


def upgrade(reader: int, writer: int) -> Op:
    return Op(
        f"upgradeTableProtocol({reader}, {writer})",
        lambda path: f"DeltaTable.forPath(spark, {path!r}).upgradeTableProtocol({reader}, {writer})",
        same,
    )


def same(cur: Rows) -> Rows:
    """The model of an operation that changes no row (OPTIMIZE, a property, a protocol)."""
    return list(cur)


def deleting(pred: Callable[[Row], bool]) -> Callable[[Rows], Rows]:
    return lambda cur: [r for r in cur if not pred(r)]


def updating(pred: Callable[[Row], bool], fn: Callable[[Row], Row]) -> Callable[[Rows], Rows]:
    return lambda cur: [fn(r) if pred(r) else r for r in cur]


def inserting(pred: Callable[[Row], bool], fn: Callable[[Row], Row]) -> Callable[[Rows], Rows]:
    """``INSERT INTO t SELECT fn(r) FROM t WHERE pred(r)``."""
    return lambda cur: cur + [fn(r) for r in cur if pred(r)]


def merging(
    source: Sequence[Row],
    on: Callable[[Row, Row], bool],
    update: Callable[[Row, Row], Row] | None,
    insert: bool,
) -> Callable[[Rows], Rows]:
    """MERGE of ``source`` (each target row matches at most one source row)."""

    def model(cur: Rows) -> Rows:
        out = list(cur)
        for s in source:
            hits = [i for i, t in enumerate(out) if on(t, s)]
            if hits and update is not None:
                for i in hits:
                    out[i] = update(out[i], s)
            elif not hits and insert:
                out.append(s)
        return out

    return model


def merge_sql(source: Sequence[Row], on: str, *, update_set: str | None, insert: bool) -> str:
    values = ", ".join(f"({r.id}L, {r.p}, '{r.c}', {r.x})" for r in source)
    text = f"MERGE INTO {{t}} AS t USING (SELECT * FROM VALUES {values} AS s(id, p, c, x)) s ON {on}"
    if update_set is not None:
        text += f" WHEN MATCHED THEN UPDATE SET {update_set}"
    if insert:
        text += " WHEN NOT MATCHED THEN INSERT *"
    return text


OPTIMIZE = sql("OPTIMIZE {t}", same)


def delete(cond: str, pred: Callable[[Row], bool]) -> Op:
    return sql(f"DELETE FROM {{t}} WHERE {cond}", deleting(pred))


def update(assign: str, fn: Callable[[Row], Row], cond: str, pred: Callable[[Row], bool]) -> Op:
    return sql(f"UPDATE {{t}} SET {assign} WHERE {cond}", updating(pred, fn))


def insert_select(select: str, fn: Callable[[Row], Row], cond: str, pred: Callable[[Row], bool]) -> Op:
    return sql(f"INSERT INTO {{t}} SELECT {select} FROM {{t}} WHERE {cond}", inserting(pred, fn))


def merge_rows(source: Sequence[Row], on: str, on_model: Callable[[Row, Row], bool], *, insert: bool) -> Op:
    """MERGE updating ``x`` of matched rows to the source's and (``insert``) inserting the rest."""
    return sql(
        merge_sql(source, on, update_set="t.x = s.x", insert=insert),
        merging(source, on_model, lambda t, s: t._replace(x=s.x), insert),
    )


def merge_all(source: Sequence[Row], on: str, on_model: Callable[[Row, Row], bool]) -> Op:
    """MERGE ... WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *."""
    return sql(merge_sql(source, on, update_set="*", insert=True), merging(source, on_model, lambda t, s: s, True))


# -- running them ------------------------------------------------------------------------------


#: Spark's settings for tables of a few rows, in both engines' sessions: one shuffle partition,
#: no adaptive re-planning (each saves a part of every small job).
SPARK_SMALL_TABLES = {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false"}
#: delta-spark's, in each of its requests' own session: a snapshot's state rebuilt in one
#: partition, not 50 (seconds for each fresh table otherwise); a MERGE source of literal rows
#: not materialized first.
SMALL_TABLES = {
    **SPARK_SMALL_TABLES,
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.databricks.delta.merge.materializeSource": "none",
}


@contextmanager
def small_tables_session(spark: SparkSession) -> Iterator[None]:
    """Inside, serialake's session ``spark`` has :data:`SPARK_SMALL_TABLES` (restored after)."""
    before = {key: spark.conf.get(key, None) for key in SPARK_SMALL_TABLES}
    for key, value in SPARK_SMALL_TABLES.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def small_tables(code: str, *, own_session: bool = True) -> str:
    """delta-spark's request ``code`` with :data:`SMALL_TABLES`, in a session of its own (the
    peer's is shared) unless ``own_session`` is False (a gated request already has one)."""
    lines = ["spark = spark.newSession()"] if own_session else []
    lines += [f"spark.conf.set({k!r}, {v!r})" for k, v in SMALL_TABLES.items()]
    return "\n".join([*lines, code])


def delta_spark_rows(peer: DeltaSparkPeer, path: str) -> list[list[Any]]:
    """The rows delta-spark reads from the table at ``path`` (``COLUMNS``), as ``plain_rows``."""
    code = f"result = rows(spark.read.format('delta').load({path!r}).select(*{list(COLUMNS)!r}))"
    result: list[list[Any]] = peer.run(small_tables(code))
    return result


def serialake_exec(spark: SparkSession, code: str, **args: Any) -> Any:
    """Run ``code`` (delta-spark's Python API, as the peer runs it) in serialake's session
    ``spark``: it sees ``spark``, ``DeltaTable`` (serialake's), ``F`` and ``args``; returns
    what it set as ``result``."""
    from pyspark.sql import functions as F

    from serialake import DeltaTable

    scope = {"spark": spark, "DeltaTable": DeltaTable, "F": F, "args": args, "result": None}
    exec(compile(code, "<parity operation>", "exec"), scope)
    return scope["result"]


def serialake_rows(spark: SparkSession, path: str) -> list[list[Any]]:
    """The rows serialake reads from the table at ``path`` (``COLUMNS``), as ``plain_rows``."""
    return plain_rows(spark.read.format("delta").load(path).select(*COLUMNS).collect())


_hooks = threading.local()


@contextmanager
def commit_hooks() -> Iterator[None]:
    """Inside, :func:`before_first_commit` works: serialake's commits look for a hook of their
    thread first (runs on other threads are not disturbed)."""
    from serialake.core.txn.transaction import OptimisticTransaction

    original = OptimisticTransaction.commit

    def commit(self: OptimisticTransaction, *args: Any, **kwargs: Any) -> int:
        hook = getattr(_hooks, "pending", None)
        if hook is not None:
            _hooks.pending = None
            hook()
        return original(self, *args, **kwargs)

    OptimisticTransaction.commit = commit  # type: ignore[method-assign]
    try:
        yield
    finally:
        OptimisticTransaction.commit = original  # type: ignore[method-assign]


@contextmanager
def before_first_commit(action: Callable[[], Any]) -> Iterator[list[bool]]:
    """Run ``action`` just before this thread's next serialake commit (the operation has planned
    and written its files), inside :func:`commit_hooks`; the list yielded holds True once it
    ran (``tests/helpers.before_first_commit`` is the tests' twin, for one thread)."""
    fired: list[bool] = []

    def hook() -> None:
        fired.append(True)
        action()

    _hooks.pending = hook
    try:
        yield fired
    finally:
        _hooks.pending = None
