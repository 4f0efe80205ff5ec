"""Finding Delta tables in statements: names and paths to locations, and queries bound to snapshots.

A query that reads Delta tables runs in Spark against temporary views, one per table
reference, each holding the rows of the snapshot read (the session's isolation level
decides which). Every reference to the same table and version in one statement uses the
same snapshot, so a statement never mixes versions of a table.

``table_changes('t', start[, end])`` (a registered name or ``delta.`/path```) and
``table_changes_by_path('/path', start[, end])`` read the table's change data feed
(``spark.cdf.changes_df``): a whole-number start or end is a version, anything else a
timestamp Spark casts.

Temporary views created through ``serialake.sql`` resolve when a statement runs, not when
they were created: their query is expanded into every statement that names them
(``expand_views``), so a view's tables are read at the statement's consistent cut, at the
session's level.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp

from serialake.core import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.core.tables import catalog
from serialake.exceptions import DeltaTableNotFoundError
from serialake.spark import data_read, scans
from serialake.spark.isolation import read_cut, read_snapshot
from serialake.spark.read import check_version_readable
from serialake.sql.errors import SqlError
from serialake.sql.parser import DIALECT, table_ref_of
from serialake.sql.statements import TableRef
from serialake.sql.syntax import looks_like_path
from serialake.storage import normalize_table_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from serialake.core.txn.transaction import OptimisticTransaction

__all__ = [
    "Binding",
    "bind_query",
    "define_view",
    "delta_tables_in",
    "expand_views",
    "resolve",
    "run_query",
    "timestamp_millis",
    "try_resolve",
]

VIEW_PREFIX = "__serialake_"
_MAX_VIEW_DEPTH = 32

# Per session: temporary views created through serialake.sql, by lower-case name, and their query.
_views: weakref.WeakKeyDictionary[Any, dict[str, exp.Query]] = weakref.WeakKeyDictionary()
_views_lock = threading.Lock()


def define_view(spark: SparkSession, name: str, query: exp.Query) -> None:
    """Remember the query of temporary view ``name``: statements naming it expand it (``expand_views``)."""
    with _views_lock:
        _views.setdefault(spark, {})[name.lower()] = query.copy()


def expand_views(spark: SparkSession, tree: exp.Expr) -> exp.Expr:
    """``tree`` with each reference to a view ``define_view`` knows replaced by the view's query.

    Views over views expand too. A name a CTE of the statement defines, a qualified name, or
    a view since dropped in Spark is left alone.
    """
    with _views_lock:
        views = dict(_views.get(spark, {}))
    if not views:
        return tree
    tree = tree.copy()
    for _ in range(_MAX_VIEW_DEPTH):
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        changed = False
        for node in list(tree.find_all(exp.Table)):
            if node.args.get("db") or node.args.get("catalog") or not isinstance(node.this, exp.Identifier):
                continue
            key = node.name.lower()
            if key not in views or key in ctes:
                continue
            if not spark.catalog.tableExists(node.name):  # dropped (DROP VIEW): forget it
                with _views_lock:
                    _views.get(spark, {}).pop(key, None)
                views.pop(key)
                continue
            alias = exp.TableAlias(this=exp.to_identifier(node.alias or node.name))
            node.replace(exp.Subquery(this=views[key].copy(), alias=alias))
            changed = True
        if not changed:
            return tree
    raise SqlError(f"Temporary views nest more than {_MAX_VIEW_DEPTH} deep (a view that refers to itself?).")


def try_resolve(ref: TableRef) -> str | None:
    """The location of ``ref`` (a path, or a registered name), or None for names we do not know."""
    if ref.path is not None:
        return normalize_table_path(ref.path)
    assert ref.name is not None
    return catalog.lookup(ref.name)


def resolve(ref: TableRef) -> str:
    """The location of ``ref``; a clear error when the name is not registered."""
    path = try_resolve(ref)
    if path is None:
        raise DeltaTableNotFoundError(
            f"Table '{ref.name}' is not a known Delta table (catalog {catalog.catalog_file()}). Register it with "
            f"serialake.register('{ref.name}', '/path/to/table'), create it with CREATE TABLE {ref.name} ... "
            f"LOCATION '/path', or name it by path: delta.`/path/to/table`."
        )
    return path


def delta_tables_in(tree: exp.Expr) -> list[tuple[exp.Table, TableRef, str]]:
    """Each table reference in ``tree`` that is a Delta table: (node, ref, location); CTE names excluded."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    out = []
    for node in tree.find_all(exp.Table):
        if not isinstance(node.this, exp.Identifier):
            continue  # table-valued functions, e.g. range(10)
        if not node.args.get("db") and node.name.lower() in ctes:
            continue
        try:
            ref = table_ref_of(node)
        except SqlError:
            continue
        path = try_resolve(ref)
        if path is not None:
            out.append((node, ref, path))
    return out


@dataclass
class Binding:
    """Temporary views created for one statement; ``drop()`` once the DataFrame is built.

    ``inline``: the views are not the session's but travel in the query's own plan
    (``sql``: ``spark.sql(text, **dataframes)``). A Spark Connect server analyses a query
    lazily, each time it runs: a temporary view dropped once the DataFrame is built would be
    gone by then, a view in the plan lives as long as the DataFrame.
    """

    spark: SparkSession
    views: list[str] = field(default_factory=list)
    snapshots: dict[tuple[str, Any, Any], Snapshot] = field(default_factory=dict)
    inline: bool = False
    frames: dict[str, DataFrame] = field(default_factory=dict)

    def view_of(self, df: DataFrame) -> str:
        name = f"{VIEW_PREFIX}{uuid.uuid4().hex}"
        if self.inline:
            self.frames[name] = df
        else:
            df.createOrReplaceTempView(name)
        self.views.append(name)
        return name

    def sql(self, text: str) -> DataFrame:
        """``text`` (which names this binding's views) as a DataFrame."""
        if not self.frames:
            return self.spark.sql(text)
        # PySpark's formatter: ``{name}`` is the DataFrame passed as ``name``, other braces doubled.
        template = text.replace("{", "{{").replace("}", "}}")
        for name in self.frames:
            template = template.replace(name, "{" + name + "}")
        frames: dict[str, Any] = dict(self.frames)
        return self.spark.sql(template, **frames)

    def drop(self) -> None:
        """Drop the views; DataFrames built from them keep working (their plans are resolved)."""
        for name in self.views:
            if name not in self.frames:
                self.spark.catalog.dropTempView(name)
        self.views.clear()
        self.frames.clear()


def bind_query(
    spark: SparkSession,
    tree: exp.Expr,
    binding: Binding,
    *,
    pinned: dict[str, tuple[OptimisticTransaction, list[Any]]] | None = None,
) -> exp.Expr:
    """A copy of ``tree`` whose Delta tables read temp views of their snapshots.

    ``pinned`` maps a location to a transaction and the files it recorded as read: that
    table is read from the transaction's snapshot, those files only (INSERT ... SELECT
    from its own target).
    """
    tree = tree.copy()
    _bind_table_changes(spark, tree, binding)
    found = delta_tables_in(tree)
    # Every table read at its latest version is read at one consistent cut (``isolation.read_cut``).
    latest = [
        (path, ref.name)
        for node, ref, path in found
        if node.args.get("version") is None and not (pinned is not None and path in pinned)
    ]
    if latest:
        cut = read_cut(spark, latest)
        for path, _ in latest:
            binding.snapshots.setdefault((path, None, None), cut[DeltaLog.for_table(path).table_path])
    for node, ref, path in found:
        version_node = node.args.get("version")
        version = timestamp = None
        if version_node is not None:
            kind = str(version_node.this).upper()
            value = version_node.expression
            if kind == "VERSION":
                version = int(value.this) if isinstance(value, exp.Literal) and not value.is_string else None
                if version is None:
                    got = value.sql(DIALECT)
                    raise SqlError(f"VERSION AS OF needs a whole number, got {got!r} (table {ref.text}).")
            else:
                timestamp = timestamp_millis(spark, value)
        if pinned is not None and path in pinned and version is None and timestamp is None:
            txn, files = pinned[path]
            assert txn.snapshot is not None
            df = scans.mark(data_read.read_files_df(spark, txn.snapshot, files), txn.snapshot)
        else:
            key = (path, version, timestamp)
            snap = binding.snapshots.get(key)
            if snap is None:
                snap = read_snapshot(spark, path, version=version, timestamp=timestamp, name=ref.name)
                binding.snapshots[key] = snap
            time_travel = version is not None or timestamp is not None
            if time_travel:
                check_version_readable(snap)
            df = scans.mark(data_read.read_files_df(spark, snap, snap.all_files), snap, time_travel=time_travel)
        view = exp.to_table(binding.view_of(df))
        alias = node.args.get("alias")
        if alias is not None:
            view.set("alias", alias.copy())
        elif ref.name is not None:
            view.set("alias", exp.TableAlias(this=exp.to_identifier(ref.short_name)))
        node.replace(view)
    return tree


TABLE_CHANGES = ("table_changes", "table_changes_by_path")


def _bind_table_changes(spark: SparkSession, tree: exp.Expr, binding: Binding) -> None:
    """Replace each ``table_changes(...)`` / ``table_changes_by_path(...)`` in ``tree`` by a view of the changes."""
    from serialake.spark.cdf import changes_df

    for node in list(tree.find_all(exp.Table)):
        call = node.this
        if not isinstance(call, exp.Anonymous) or str(call.this).lower() not in TABLE_CHANGES:
            continue
        function = str(call.this).lower()
        args = list(call.expressions)
        if len(args) not in (2, 3) or not (isinstance(args[0], exp.Literal) and args[0].is_string):
            raise SqlError(
                f"{function} takes a table {'path' if function.endswith('path') else 'name'} (a string), a start "
                f"version or timestamp and an optional end: {function}('t', 0[, 5]); got {call.sql(DIALECT)!r}."
            )
        path = _changes_table(str(args[0].this), by_path=function.endswith("path"))
        bounds: list[tuple[int | None, int | None]] = []
        for arg in args[1:]:
            if isinstance(arg, exp.Literal) and not arg.is_string:
                try:
                    bounds.append((int(str(arg.this)), None))
                except ValueError:
                    raise SqlError(f"{function}: a version must be a whole number, got {arg.sql(DIALECT)}.") from None
            else:
                bounds.append((None, timestamp_millis(spark, arg)))
        (start_v, start_ts), (end_v, end_ts) = bounds[0], (bounds[1] if len(bounds) > 1 else (None, None))
        df = changes_df(spark, path, start_v, end_v, start_timestamp=start_ts, end_timestamp=end_ts)
        view = exp.to_table(binding.view_of(df))
        alias = node.args.get("alias")
        if alias is not None:
            view.set("alias", alias.copy())
        node.replace(view)


def _changes_table(text: str, *, by_path: bool) -> str:
    """The location a ``table_changes`` argument names: a registered name, ``delta.`/path```, or a path."""
    if by_path or looks_like_path(text.strip()) and not text.strip().lower().startswith("delta."):
        return normalize_table_path(text.strip())
    try:
        parsed = sqlglot.parse_one(f"SELECT * FROM {text}", read=DIALECT)
        table = parsed.find(exp.Table)
    except sqlglot.errors.ParseError:
        table = None
    if table is None:
        raise SqlError(f"table_changes: {text!r} is not a table name.")
    return resolve(table_ref_of(table))


def timestamp_millis(spark: SparkSession, value: exp.Expr | str) -> int:
    """A TIMESTAMP AS OF value in epoch ms, evaluated by Spark (session time zone, Spark's casts)."""
    sql = value if isinstance(value, str) else value.sql(DIALECT)
    row = spark.sql(f"SELECT unix_millis(CAST({sql} AS TIMESTAMP)) AS ms").first()
    if row is None or row["ms"] is None:
        raise SqlError(f"TIMESTAMP AS OF {sql}: not a timestamp.")
    return int(row["ms"])


def run_query(spark: SparkSession, tree: exp.Expr, **bind: Any) -> DataFrame:
    """A query as a DataFrame, its Delta tables (also those of its views) read at the session's level."""
    from serialake.spark.backend.connect import is_connect

    binding = Binding(spark, inline=is_connect(spark))
    try:
        bound = bind_query(spark, expand_views(spark, tree), binding, **bind)
        df = binding.sql(bound.sql(DIALECT))
        if _reads_other_views(bound, binding):
            # A Spark temp view may hold a serialake DataFrame read earlier: one state with the rest.
            scans.check_consistent(scans.scans_of(df), what="This query")
        return df
    finally:
        binding.drop()


def _reads_other_views(tree: exp.Expr, binding: Binding) -> bool:
    """Whether ``tree`` names a table that is neither one of ``binding``'s views nor a CTE."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    ours = {v.lower() for v in binding.views}
    return any(t.name.lower() not in ours and t.name.lower() not in ctes for t in tree.find_all(exp.Table))

