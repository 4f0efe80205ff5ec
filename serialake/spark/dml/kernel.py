"""What every DML operation shares: the transaction, its condition, the target's rows, new files.

Each operation (``delete_command``, ``update_command``, ``merge_command``, ... one module
each) has the same shape:

1. start a core transaction first (``open_transaction``: the snapshot every later step
   reads is pinned);
2. record exactly what it reads: ``txn.filter_files([condition])`` with the target-side
   part of its condition (``plan_condition``: partition conjuncts become the read
   predicate, data conjuncts narrow the files by stats and let row-level conflict checks
   evaluate the read), and the condition itself, which the engine evaluates on the rows
   those checks cannot decide (``plan_condition``'s ``evaluate``: ``engine.Engine.evaluate``);
3. find the files holding at least one matching row (``engine.Engine.find_rows``: on the
   driver when it may, else one cheap Spark aggregate on ``FILE_COL``); untouched files are
   neither rewritten nor removed;
4. change them: copy-on-write (rewrite the touched files without the deleted rows and
   with the updated ones), or, with deletion vectors (``core.dv.dv_policy``), mark the changed
   rows deleted and write only the new versions of updated rows, and declare which rows
   of every candidate file matched (``declare_matched_rows``: a concurrent delete of other
   rows then never conflicts);
5. commit through ``core.written.commit_or_clean_up``: on a conflict the files written
   are deleted again.

Spark evaluates conditions and expressions (SQL strings or Columns); the core only ever
sees parsed predicates. The source of a DML must be deterministic: the files are read
twice (find touched rows, then write).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import DvChanges, mark_deleted
from serialake.core.log import cdf as core_cdf
from serialake.core.log.snapshot import Snapshot
from serialake.core.model import constraints, identity
from serialake.core.model.actions import AddCDCFile, AddFile
from serialake.core.model.schema import PrimitiveType, StructField, StructType
from serialake.core.predicates import expressions as P
from serialake.core.predicates import row_eval
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import remove_written
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
)
from serialake.spark import cdf, data_read, invariants, scans, transaction
from serialake.spark.backend import backend
from serialake.spark.columns import quote_name
from serialake.spark.schemas import to_spark_schema
from serialake.spark.streaming import batch_txn
from serialake.spark.write import check_not_null, write_checked_files

__all__ = [
    "RowsWhere",
    "FILE_COL",
    "ROW_COL",
    "TARGET_ALIAS",
    "ConditionLike",
    "DmlResult",
    "PlannedCondition",
    "Touched",
    "affected_rows_df",
    "analysis_error",
    "change_type",
    "assigned_column",
    "assigned_in_row",
    "assignment_values",
    "condition_text",
    "declare_matched_rows",
    "elapsed_ms",
    "explicit_flags",
    "file_bytes",
    "file_rows_df",
    "is_true",
    "json_list",
    "live_rows",
    "retire_touched",
    "open_transaction",
    "parse_condition",
    "parse_or_true",
    "plan_condition",
    "probe",
    "read_target",
    "resolve_assignments",
    "resolved_condition_sql",
    "rewrite_metrics",
    "rows_of",
    "records_changes",
    "table_columns",
    "target_col",
    "target_conjuncts",
    "to_column",
    "touched_files",
    "updated_columns",
    "write_rows",
    "write_rows_and_changes",
]


FILE_COL = "__serialake_file"


ROW_COL = "__serialake_row"


TARGET_ALIAS = "__serialake_target"  # the target's alias when the caller gave none


ConditionLike = str | Column | P.ParsedCondition | None  # SQL text, a Column, or text parsed once


@dataclass
class DmlResult:
    """What an operation did: the version it committed (None: nothing to commit) and its metrics.

    ``work_already_done_in``: the operation committed nothing because concurrent commits had
    already done its work (e.g. an OPTIMIZE of files another OPTIMIZE compacted); the version
    that reflects it. ``version`` is then None.
    """

    version: int | None
    metrics: dict[str, Any] = field(default_factory=dict)
    work_already_done_in: int | None = None

    @property
    def num_affected_rows(self) -> int:
        return int(self.metrics.get("num_affected_rows", 0))


#: The operations that commit with the micro-batch's txn inside ``serialake.streaming.idempotent``.
_BATCH_OPERATIONS = frozenset({"DELETE", "UPDATE", "MERGE"})


def open_transaction(table_path: str, operation: str) -> tuple[OptimisticTransaction, Snapshot]:
    """A transaction pinned to the latest snapshot; errors when the table cannot be rewritten here."""
    log = DeltaLog.for_table(table_path)
    # Inside serialake.transaction: the table's transaction there (other operations are refused).
    txn = transaction.start(log, operation)
    snap = txn.snapshot
    if snap is None:
        raise DeltaTableNotFoundError(f"Cannot {operation}: {log.table_path} is not a Delta table.")
    if operation in _BATCH_OPERATIONS:
        batch_txn.join(txn)  # inside serialake.streaming.idempotent: commits with the micro-batch's txn
    return txn, snap


def to_column(value: str | Column | P.ParsedCondition, what: str) -> Column:
    """A SQL expression string (also parsed) or a Column as a Column."""
    if isinstance(value, Column):
        return value
    if isinstance(value, str):
        return F.expr(value)
    if isinstance(value, P.ParsedCondition):
        return F.expr(value.text)
    raise DeltaIllegalArgumentException(f"{what} must be a SQL string or a pyspark Column, not {type(value).__name__}")


def is_true(column: Column) -> Column:
    """TRUE where ``column`` is TRUE (NULL counts as not satisfied, as in SQL WHERE)."""
    return F.coalesce(column, F.lit(False))


def condition_text(condition: ConditionLike, resolved_sql: str | None = None) -> str | None:
    """The condition as SQL text for the log's operationParameters (internal alias left out)."""
    if condition is None:
        return None
    if isinstance(condition, str):
        return condition
    if isinstance(condition, P.ParsedCondition):
        return condition.shown or condition.text
    return (resolved_sql or str(condition)).replace(TARGET_ALIAS + ".", "")


def resolved_condition_sql(df: DataFrame) -> str | None:
    """The analysed condition of ``df``'s top Filter or Join as SQL (``Backend.condition_sql``)."""
    return backend(df.sparkSession).condition_sql(df)


def parse_or_true(text: str | None) -> P.Expr:
    """``text`` parsed, or TRUE (read everything) when it is absent or not understood."""
    parsed = parse_condition(text)
    return parsed if parsed is not None else P.TRUE


def parse_condition(text: str | None) -> P.Expr | None:
    """``text`` parsed; None when it is absent or not understood.

    Spark's SQL for a Python UDF given as a Column names it ``<lambda>(...)``: quoted, it
    parses (as an ``Unknown`` call), so the rest of the condition still counts.
    """
    if not text:
        return None
    try:
        return P.parse_predicate(text)
    except (P.PredicateError, ValueError, TypeError):
        pass
    quoted = _PYTHON_UDF_CALL.sub(lambda m: m.group(1) or f"`<{m.group(2)}>`(", text)
    if quoted != text:
        try:
            return P.parse_predicate(quoted)
        except (P.PredicateError, ValueError, TypeError):
            pass
    return None


# A quoted string or identifier (kept as is), or a Python UDF call as Spark prints it: <name>(
_PYTHON_UDF_CALL = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`)|<(\w+)>\(""")


def target_conjuncts(
    expr: P.Expr, alias: str, is_target_name: Callable[[str], bool]
) -> list[P.Expr]:
    """Conjuncts of ``expr`` about the target only, with the target alias stripped.

    A conjunct qualifies when each column is qualified by ``alias`` or is unqualified and
    ``is_target_name`` says it is a target column. Others are dropped, which only widens
    the read.
    """
    out: list[P.Expr] = []
    for c in P.split_conjuncts(expr):
        refs = P.column_refs(c)
        if not refs:
            continue
        if any(q is None and not is_target_name(n) for q, n in refs):
            continue
        stripped = P.strip_qualifier(c, alias)
        if stripped is None:
            continue
        out.append(stripped)
    return out


def analysis_error(table: str, what: str, error: Exception) -> DeltaAnalysisException:
    """Spark's analysis error as a ``DeltaAnalysisException`` naming the table and the operation."""
    text = str(error).split("\n", 1)[0]
    return DeltaAnalysisException(f"{what} on table {table} cannot be analysed: {text}")


def read_target(
    spark: SparkSession, snap: Snapshot, files: Sequence[AddFile], alias: str, *, with_rows: bool = True
) -> DataFrame:
    """The rows of ``files`` under ``alias``, with ``FILE_COL``/``ROW_COL`` (AddFile path, Parquet row)."""
    df = data_read.read_files_df(spark, snap, files, with_file_path=with_rows)
    if with_rows:
        df = df.withColumnRenamed(data_read.FILE_COLUMN, FILE_COL)
        df = df.withColumnRenamed(data_read.ROW_INDEX_COLUMN, ROW_COL)
    return df.alias(alias)


def target_col(alias: str, name: str) -> Column:
    """A target column referenced through its alias (unambiguous next to a source)."""
    return F.col(f"{quote_name(alias)}.{quote_name(name)}")


def live_rows(table: str, add: AddFile) -> int | None:
    """Rows of ``add`` not deleted by its deletion vector (None when its stats lack numRecords)."""
    n = add.num_records
    if n is None:
        return None
    return n - (add.deletion_vector.cardinality if add.deletion_vector else 0)


@dataclass
class Touched:
    """A file with rows this operation changes: how many, and (with deletion vectors) which."""

    add: AddFile
    count: int
    rows: RowIndexSet | None = None


def touched_files(
    matching: DataFrame, files: Sequence[AddFile], *, with_rows: bool
) -> dict[str, Touched]:
    """Files with at least one row of ``matching`` (one aggregate job on ``FILE_COL``)."""
    aggs = [F.count(F.lit(1)).alias("n")]
    if with_rows:
        aggs.append(F.collect_list(ROW_COL).alias("rows"))
    by_path = {f.path: f for f in files}
    out: dict[str, Touched] = {}
    for r in matching.groupBy(FILE_COL).agg(*aggs).collect():
        add = by_path[r[FILE_COL]]
        rows = RowIndexSet.from_iter(sorted(int(i) for i in r["rows"])) if with_rows else None
        out[add.path] = Touched(add, int(r["n"]), rows)
    return out


def declare_matched_rows(
    txn: OptimisticTransaction, files: Sequence[AddFile], touched: Mapping[str, Touched]
) -> None:
    """Declare to ``txn`` the live rows of each of ``files`` its condition matched (none if untouched).

    Only for an operation that evaluated its full condition on every row of ``files`` (all
    the files its read returned) and knows the rows (deletion vectors): concurrent deletions
    of other rows of those files then never conflict with its read.
    """
    empty = RowIndexSet.from_iter([])
    rows: dict[str, RowIndexSet] = {}
    for f in files:
        t = touched.get(f.path)
        if t is None:
            rows[f.path] = empty
        elif t.rows is None:
            return  # rows not known: conflict checks evaluate the condition instead
        else:
            rows[f.path] = t.rows
    txn.record_matched_rows(rows)


#: An engine's row evaluation for conflict checks: ``(snap, cond, alias, add, rows)`` -> the live
#: rows of ``add`` (among ``rows``; all when None) where ``cond`` is TRUE (``engine.Engine.evaluate``).
RowsWhere = Callable[[Snapshot, Column, str, AddFile, "RowIndexSet | None"], RowIndexSet]

ROWS_ISIN_MAX = 1000  # more rows to evaluate than this are selected by a semi join, not IN


def file_rows_df(
    spark: SparkSession, snap: Snapshot, alias: str, add: AddFile, rows: RowIndexSet | None
) -> DataFrame:
    """The live rows of ``add`` (among ``rows``; all when None) under ``alias``, with ``ROW_COL``."""
    df = read_target(spark, snap, [add], alias)
    if rows is not None:
        wanted = [int(i) for i in rows.to_numpy()]
        if len(wanted) <= ROWS_ISIN_MAX:
            df = df.filter(F.col(ROW_COL).isin(wanted))
        else:
            keys = spark.createDataFrame(
                [(i,) for i in wanted], T.StructType([T.StructField(ROW_COL, T.LongType(), False)])
            )
            df = df.join(F.broadcast(keys), ROW_COL, "left_semi").alias(alias)
    return df


def table_columns(snap: Snapshot, df: DataFrame, alias: str | None = None) -> list[Column]:
    """The table's columns of ``df`` in table order, cast to the table types."""
    spark_schema = to_spark_schema(snap.schema)
    return [
        (target_col(alias, f.name) if alias else F.col(quote_name(f.name))).cast(f.dataType).alias(f.name)
        for f in spark_schema.fields
    ]


def write_rows(
    snap: Snapshot,
    df: DataFrame,
    *,
    data_change: bool = True,
    new_values: bool = False,
    txn: OptimisticTransaction | None = None,
) -> list[AddFile]:
    """Write ``df`` (the table columns) as data files of the table; NOT NULL columns checked.

    ``new_values``: rows carry values an operation computed (UPDATE, MERGE): generated
    columns are recomputed from them, or checked where ``df``'s ``invariants.explicit_flag``
    columns say the operation assigned them, and CHECK constraints are checked. Identity
    columns keep their values except where ``invariants.generate_flag`` columns ask for new
    ones (MERGE's inserts); ``txn`` then commits the high-water marks they raise. Rows
    copied unchanged (DELETE, OPTIMIZE) satisfy all of this already.
    """
    identity_values = None
    if new_values:
        names = [c.name for c in identity.identity_columns(snap.schema)]
        identity_values = invariants.IdentityValues(snap.schema, snap.table_path, given=names, from_user=False)
        df = invariants.enforce(df, snap.schema, snap.configuration, snap.table_path, identity_values=identity_values)
    df = check_not_null(df, [f.name for f in snap.schema.fields if not f.nullable], snap.table_path)
    adds = write_checked_files(
        df,
        snap.table_path,
        list(snap.partition_columns),
        data_change=data_change,
        configuration=snap.configuration,
        schema=snap.schema,
    )
    if identity_values is not None:
        if txn is not None:
            identity_values.record(txn)
        elif identity_values.high_water_marks():
            raise DeltaAnalysisException(f"Table {snap.table_path}: identity values generated outside a transaction")
    return adds


def records_changes(snap: Snapshot) -> bool:
    """Whether the table records change data (``delta.enableChangeDataFeed``): rewrites write it."""
    return core_cdf.enabled(snap.metadata)


def change_type(kind: str | None) -> Column:
    """A ``_change_type`` value as a Column (None: a row only stored, copied unchanged)."""
    return F.lit(kind).cast("string").alias(core_cdf.CHANGE_TYPE)


_STORED_CHANGES = (core_cdf.UPDATE_POSTIMAGE, core_cdf.INSERT)


def write_rows_and_changes(
    snap: Snapshot,
    df: DataFrame,
    *,
    new_values: bool = False,
    txn: OptimisticTransaction | None = None,
) -> tuple[list[AddFile], list[AddCDCFile]]:
    """``write_rows`` for a table recording change data: the data files and the change data files.

    ``df`` holds the table's columns (and flag columns, as for ``write_rows``) and
    ``_change_type``: NULL for a row only stored (copied unchanged), ``update_postimage`` or
    ``insert`` for a row stored and recorded, ``update_preimage`` or ``delete`` for a row
    recorded only (old values, stored no longer). Constraints, generated and identity
    values apply to every row before the split, so the recorded rows are the stored ones;
    with ``new_values`` the rows are computed once (persisted) and written twice.
    """
    table = snap.table_path
    identity_values = None
    with_type = StructType((*snap.schema.fields, StructField(core_cdf.CHANGE_TYPE, PrimitiveType("string"))))
    if new_values:
        names = [c.name for c in identity.identity_columns(snap.schema)]
        identity_values = invariants.IdentityValues(snap.schema, table, given=names, from_user=False)
        df = invariants.enforce(df, with_type, snap.configuration, table, identity_values=identity_values)
    df = check_not_null(df, [f.name for f in snap.schema.fields if not f.nullable], table)
    cached = df.persist(StorageLevel.MEMORY_AND_DISK) if new_values else None
    rows = cached if cached is not None else df
    kind = F.col(core_cdf.CHANGE_TYPE)
    try:
        stored = rows.where(kind.isNull() | kind.isin(*_STORED_CHANGES)).drop(core_cdf.CHANGE_TYPE)
        adds = write_checked_files(
            stored, table, list(snap.partition_columns), configuration=snap.configuration, schema=snap.schema
        )
        try:
            changes = cdf.write_change_files(rows.where(kind.isNotNull()), snap)
        except BaseException:
            remove_written(table, adds)
            raise
    finally:
        if cached is not None:
            cached.unpersist()
    if identity_values is not None:
        if txn is not None:
            identity_values.record(txn)
        elif identity_values.high_water_marks():
            remove_written(table, [*adds, *changes])
            raise DeltaAnalysisException(f"Table {table}: identity values generated outside a transaction")
    return adds, changes


def json_list(values: Sequence[Any]) -> str:
    """A list as delta-spark writes it in operationParameters."""
    return json.dumps(list(values), separators=(",", ":"))


def elapsed_ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def file_bytes(files: Iterable[AddFile]) -> int:
    return sum(f.size or 0 for f in files)


def rows_of(files: Iterable[AddFile]) -> int:
    return sum(f.num_records or 0 for f in files)


@dataclass(frozen=True)
class PlannedCondition:
    """A DELETE/UPDATE condition: the Column Spark evaluates, its parsed form, the files it reads."""

    cond: Column
    expr: P.Expr
    files: list[AddFile]
    text: str | None
    exact: P.Expr | None = None  # the condition, unqualified, when the core evaluates it exactly
    by_files: bool = False  # conflicts are resolved by files, not rows (a condition with subqueries)


def plan_condition(
    spark: SparkSession,
    txn: OptimisticTransaction,
    snap: Snapshot,
    condition: ConditionLike,
    alias: str,
    operation: str,
    evaluate: RowsWhere,
) -> PlannedCondition:
    """Analyse ``condition`` against the table and record its read: ``txn.filter_files``.

    A missing condition reads the whole table. ``evaluate`` (the engine's) decides the rows
    conflict checks cannot decide on the driver.
    """
    if condition is None:
        return PlannedCondition(F.lit(True), P.TRUE, txn.filter_files([]), None)
    cond = to_column(condition, f"{operation} condition")
    # The condition is parsed once: given parsed (SQL), from its text, or from Spark's SQL for a Column.
    if isinstance(condition, P.ParsedCondition):
        parsed: P.Expr | None = condition.expr
    else:
        parsed = parse_condition(condition) if isinstance(condition, str) else None
    # A condition the core evaluates exactly names only existing columns of plain types: Spark's
    # analysis (an empty query, tens of ms) has nothing to add. Others are analysed first, so a
    # bad condition fails naming the table before anything runs.
    exact = _exact_condition(snap, parsed, alias)
    sql = None if exact is not None else resolved_condition_sql(probe(spark, snap, alias, cond, operation))
    if isinstance(condition, Column):
        parsed = parse_condition(sql)
        exact = _exact_condition(snap, parsed, alias)
    expr = parsed if parsed is not None else P.TRUE
    target = P.conjunction(target_conjuncts(expr, alias, lambda n: snap.schema.field(n) is not None))
    if isinstance(condition, P.ParsedCondition) and condition.subquery:
        # Subqueries read other tables (or this one): those reads are the transaction's
        # (``scans.record_scans``), and conflicts are resolved by files, as Delta does: a
        # winner's rows cannot be judged against a subquery's result.
        scans.record_scans(txn, probe(spark, snap, alias, cond, operation))
        files = txn.filter_files([target])
        return PlannedCondition(cond, expr, files, condition_text(condition, sql), None, by_files=True)
    files = txn.filter_files([target], row_evaluator=partial(evaluate, snap, cond, alias))
    return PlannedCondition(cond, expr, files, condition_text(condition, sql), exact)


def _exact_condition(snap: Snapshot, parsed: P.Expr | None, alias: str) -> P.Expr | None:
    """The condition without its alias, when the core computes exactly Spark's result for it."""
    if parsed is None:
        return None
    expr = P.strip_qualifier(parsed, alias)
    if expr is None or row_eval.inexact_reason(expr, snap.schema) is not None:
        return None
    return expr


def retire_touched(table: str, touched: Iterable[Touched], stamp: int, *, dvs: bool) -> DvChanges:
    """How the touched files leave the table, with the counters delta-spark reports.

    ``dvs``: their touched rows are marked deleted in deletion vectors
    (``core.dv_policy.mark_deleted``); otherwise (copy-on-write) each file is removed whole.
    """
    if dvs:
        marks = []
        for t in touched:
            assert t.rows is not None, "deletion vectors need the touched rows"
            marks.append((t.add, t.rows))
        return mark_deleted(table, marks, stamp)
    removed = [t.add for t in touched]
    return DvChanges(
        actions=[f.remove(timestamp=stamp) for f in removed],
        files_removed=len(removed),
        bytes_removed=file_bytes(removed),
        dvs_removed=sum(1 for f in removed if f.deletion_vector),
    )


def probe(spark: SparkSession, snap: Snapshot, alias: str, cond: Column, what: str) -> DataFrame:
    """An empty table-shaped DataFrame filtered by ``cond``: analysis only (no job), for errors and SQL."""
    try:
        empty = spark.createDataFrame([], to_spark_schema(snap.schema)).alias(alias)
        return empty.filter(cond)
    except AnalysisException as e:
        raise analysis_error(snap.table_path, f"{what} condition", e) from None


def assignment_values(
    snap: Snapshot, assignments: Mapping[str, str | Column] | None, alias: str, operation: str
) -> dict[str, str | Column]:
    """``{table column name: value as given}`` from a ``set``/``values`` dict (keys may carry the alias)."""
    if not assignments:
        raise DeltaIllegalArgumentException(f"{operation} on table {snap.table_path} needs a non-empty 'set' dict")
    out: dict[str, str | Column] = {}
    for key, value in assignments.items():
        if not isinstance(key, str):
            raise DeltaIllegalArgumentException(f"{operation}: column names must be strings, not {key!r}")
        name = assigned_column(key, alias)
        f = snap.schema.field(name)
        if f is None:
            raise DeltaAnalysisException(
                f"{operation} on table {snap.table_path}: column '{key}' does not exist "
                f"(columns: {', '.join(snap.schema.field_names)}). Nested fields cannot be assigned."
            )
        if f.name in out:
            raise DeltaAnalysisException(
                f"{operation} on table {snap.table_path}: column '{f.name}' is assigned more than once"
            )
        if any(c.name == f.name and not c.allow_explicit_insert for c in identity.identity_columns(snap.schema)):
            raise DeltaAnalysisException(
                f"{operation} on table {snap.table_path}: column '{f.name}' is GENERATED ALWAYS AS IDENTITY; "
                "its values cannot be set."
            )
        out[f.name] = value
    return out


def assigned_column(key: str, alias: str) -> str:
    """The column a ``set``/``values`` key names: the target alias and backquotes taken off."""
    prefix = alias + "."
    name = key[len(prefix):] if key.lower().startswith(prefix.lower()) else key
    return name.strip("`")


def resolve_assignments(
    snap: Snapshot, assignments: Mapping[str, str | Column] | None, alias: str, operation: str
) -> dict[str, Column]:
    """``{table column name: Column}`` from a ``set``/``values`` dict (keys may carry the target alias)."""
    raw = assignment_values(snap, assignments, alias, operation)
    return {k: to_column(v, f"The value for column '{k}'") for k, v in raw.items()}


def updated_columns(
    snap: Snapshot, alias: str, branches: Sequence[tuple[Column, Mapping[str, Column]]]
) -> list[Column]:
    """Table columns where the first branch whose guard holds assigns its values (others keep theirs)."""
    out: list[Column] = []
    for f in to_spark_schema(snap.schema).fields:
        current = target_col(alias, f.name)
        value: Column | None = None
        for guard, assigned in reversed(branches):
            if f.name in assigned:
                new = assigned[f.name].cast(f.dataType)
                value = F.when(guard, new).otherwise(value if value is not None else current)
            elif value is not None:
                value = F.when(guard, current).otherwise(value)
        out.append((value if value is not None else current).cast(f.dataType).alias(f.name))
    return out


def explicit_flags(snap: Snapshot, branches: Sequence[tuple[Column, Mapping[str, Column]]]) -> list[Column]:
    """Per generated column some branch assigns: whether, in this row, the branch that holds first assigns it.

    ``invariants.explicit_flag`` columns to write beside ``updated_columns``: ``write_rows``
    (``new_values=True``) checks the values assigned and recomputes the others.
    """
    return [
        assigned_in_row(g.name, branches).alias(invariants.explicit_flag(g.name))
        for g in constraints.generated_columns(snap.schema)
        if any(g.name in assigned for _, assigned in branches)
    ]


def assigned_in_row(column: str, branches: Sequence[tuple[Column, Mapping[str, Column]]]) -> Column:
    """Whether, in this row, the first branch whose guard holds assigns ``column`` (FALSE: none holds)."""
    flag: Column = F.lit(False)
    for guard, assigned in reversed(branches):
        flag = F.when(guard, F.lit(column in assigned)).otherwise(flag)
    return flag


def rewrite_metrics(
    *,
    start: float,
    scan_ms: int,
    files_removed: int = 0,
    bytes_removed: int = 0,
    files_added: int = 0,
    bytes_added: int = 0,
    copied: int = 0,
    dvs_added: int = 0,
    dvs_updated: int = 0,
    dvs_removed: int = 0,
    rewrite_ms: int = 0,
    change_files: int = 0,
) -> dict[str, int]:
    """delta-spark's file and timing metrics shared by DELETE and UPDATE."""
    return {
        "numCopiedRows": copied,
        "numRemovedFiles": files_removed,
        "numAddedFiles": files_added,
        "numRemovedBytes": bytes_removed,
        "numAddedBytes": bytes_added,
        "numDeletionVectorsAdded": dvs_added,
        "numDeletionVectorsUpdated": dvs_updated,
        "numDeletionVectorsRemoved": dvs_removed,
        "numAddedChangeFiles": change_files,
        "executionTimeMs": elapsed_ms(start),
        "scanTimeMs": scan_ms,
        "rewriteTimeMs": rewrite_ms,
    }


def result_df(
    spark: SparkSession,
    table: str,
    operation: str,
    result: DmlResult,
    build: Callable[[SparkSession, DmlResult], DataFrame],
) -> DataFrame | None:
    """``build(spark, result)``: the DataFrame an operation that committed ``result.version`` returns.

    Building it is a step after the commit (``core.txn.post_commit``): when it fails, a warning
    names the table, version and cause, and None is returned instead of raising.
    """
    return after_commit(
        "build the result DataFrame", table, result.version, build, spark, result, operation=operation,
        instead="(None instead of the result DataFrame)",
    )  # fmt: skip


def affected_rows_df(spark: SparkSession, result: DmlResult) -> DataFrame:
    """delta-spark SQL's DELETE/UPDATE result: one row ``num_affected_rows``."""
    schema = T.StructType([T.StructField("num_affected_rows", T.LongType(), False)])
    return spark.createDataFrame([(result.num_affected_rows,)], schema)
