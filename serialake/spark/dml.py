"""Row-level operations on Delta tables with Spark: DELETE, UPDATE, RESTORE, ADD COLUMNS.

MERGE lives in ``serialake.spark.merge`` and OPTIMIZE in ``serialake.spark.optimize``; the
helpers they share are here. Every operation follows the same shape:

1. start a core transaction first (the snapshot every later step reads is pinned);
2. record exactly what it reads: ``txn.filter_files([condition])`` with the target-side
   part of its condition (partition conjuncts become the read predicate, data conjuncts
   narrow the files by stats and let row-level conflict checks evaluate the read), and the
   condition itself, which Spark evaluates on the rows those checks cannot decide (UDFs);
3. find the files holding at least one matching row with one cheap Spark aggregate on
   ``_file`` (untouched files are neither rewritten nor removed);
4. change them: copy-on-write (rewrite the touched files without the deleted rows and
   with the updated ones), or, when ``delta.enableDeletionVectors=true``, mark the changed
   rows in a deletion vector (``remove(F, old dv)`` + ``add(F, new dv)``) and write only the
   new versions of updated rows, and declare which rows of every candidate file matched
   (``txn.record_matched_rows``: a concurrent delete of other rows then never conflicts);
5. commit; on a conflict the files written are deleted again.

Spark evaluates conditions and expressions (SQL strings or Columns); the core only ever
sees parsed predicates. The source of a DML must be deterministic: the files are read
twice (find touched rows, then write).

An append whose rows were computed from the table itself (``INSERT INTO t SELECT ... FROM
t``) is not blind: use ``run_insert`` (it records the read) rather than ``write``.

Functions take ``(spark, table_path, ...)``; ``DeltaTable`` methods map onto them. The
``run_*`` variants return a ``DmlResult`` and accept ``before_commit``, a callback run just
before the commit (tests use it to interleave concurrent operations deterministically).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import pyarrow.parquet as pq
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core import features
from serialake.core import predicates as P
from serialake.core import row_level
from serialake.core import properties as props
from serialake.core.actions import Action, AddFile, now_ms
from serialake.core.deletion_vectors import (
    RowIndexSet,
    dv_absolute_path,
    read_deletion_vector,
    write_deletion_vector,
)
from serialake.core.schema import StructType
from serialake.core.snapshot import Snapshot
from serialake.core.transaction import OptimisticTransaction
from serialake.exceptions import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    InvalidTableError,
    DeltaAnalysisException,
    DeltaConcurrentModificationException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    UnsupportedFeatureError,
)
from serialake.spark import io, local_rewrite, scans
from serialake.spark.arrow_files import LocalTable, NotLocal, io_threads
from serialake.spark.write import align_to_schema, check_rows, write_checked_files

if TYPE_CHECKING:
    from serialake.spark.merge import DeltaMergeBuilder
    from serialake.spark.optimize import DeltaOptimizeBuilder

__all__ = [
    "DmlResult",
    "FILE_COL",
    "ROW_COL",
    "TARGET_ALIAS",
    "add_columns",
    "delete",
    "merge",
    "optimize",
    "restore",
    "restoreToTimestamp",
    "restoreToVersion",
    "run_delete",
    "run_insert",
    "run_restore",
    "run_update",
    "update",
]

FILE_COL = "__serialake_file"
ROW_COL = "__serialake_row"
TARGET_ALIAS = "__serialake_target"  # the target's alias when the caller gave none
DV_INLINE_MAX_BYTES = 0  # 'u' files, as Delta writes them (delta-rs reads both kinds)

# DELETE / UPDATE on the driver: when the condition is in the subset the core evaluates exactly
# as Spark does (``row_level.inexact_reason``) and the candidate files total at most this many
# bytes, the driver reads the condition's columns with pyarrow to find the matched rows instead
# of running a Spark job; and when the SET values are exact too (``core.values``), it rewrites
# the touched files itself (``local_rewrite``). 0 turns both off.
LOCAL_CONF = "spark.serialake.dml.local.maxBytes"
LOCAL_DEFAULT_BYTES = 1 << 30

ConditionLike = str | Column | None
BeforeCommit = Callable[[], None] | None


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


# ---------------------------------------------------------------------------------------------
# Opening a table for a write
# ---------------------------------------------------------------------------------------------


def open_transaction(table_path: str, operation: str) -> tuple[OptimisticTransaction, Snapshot]:
    """A transaction pinned to the latest snapshot; errors when the table cannot be rewritten here."""
    log = DeltaLog.for_table(table_path)
    txn = log.start_transaction()
    snap = txn.snapshot
    if snap is None:
        raise DeltaTableNotFoundError(f"Cannot {operation}: {log.table_path} is not a Delta table.")
    mode = io.column_mapping_mode(snap)
    if mode != "none":
        raise UnsupportedFeatureError(
            f"Cannot {operation} table {snap.table_path}: it uses column mapping (delta.columnMapping.mode="
            f"{mode}), which serialake reads but cannot write yet."
        )
    return txn, snap


def uses_deletion_vectors(snap: Snapshot) -> bool:
    """Whether changes mark rows in deletion vectors (property on and the protocol has the feature)."""
    return bool(props.get(snap.configuration, props.ENABLE_DELETION_VECTORS)) and features.has_feature(
        snap.protocol, "deletionVectors"
    )


# ---------------------------------------------------------------------------------------------
# Conditions: Spark columns for evaluation, parsed predicates for the transaction's reads
# ---------------------------------------------------------------------------------------------


def to_column(value: str | Column, what: str) -> Column:
    """A SQL expression string or a Column as a Column."""
    if isinstance(value, Column):
        return value
    if isinstance(value, str):
        return F.expr(value)
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
    return (resolved_sql or str(condition)).replace(TARGET_ALIAS + ".", "")


def resolved_condition_sql(df: DataFrame) -> str | None:
    """The analysed condition of a Filter or Join plan as SQL (columns qualified by their table).

    Spark's resolution says which side every column belongs to, which a Column object alone
    does not. None when the plan has another shape.
    """
    try:
        plan = df._jdf.queryExecution().analyzed()  # type: ignore[operator]
        name = plan.getClass().getSimpleName()
        if name == "Filter":
            return str(plan.condition().sql())
        if name == "Join":
            cond = plan.condition()
            return str(cond.get().sql()) if cond.isDefined() else None
    except Exception:  # noqa: BLE001 - a best effort: an unparsed condition is read conservatively
        return None
    return None


def parse_or_true(text: str | None) -> P.Expr:
    """``text`` parsed, or TRUE (read everything) when it is absent or not understood.

    Spark's SQL for a Python UDF given as a Column names it ``<lambda>(...)``: quoted, it
    parses (as an ``Unknown`` call), so the rest of the condition still counts.
    """
    if not text:
        return P.TRUE
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
    return P.TRUE


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


# ---------------------------------------------------------------------------------------------
# Reading the target and finding touched files
# ---------------------------------------------------------------------------------------------


def read_target(
    spark: SparkSession, snap: Snapshot, files: Sequence[AddFile], alias: str, *, with_rows: bool = True
) -> DataFrame:
    """The rows of ``files`` under ``alias``, with ``FILE_COL``/``ROW_COL`` (AddFile path, Parquet row)."""
    df = io.read_files_df(spark, snap, files, with_file_path=with_rows)
    if with_rows:
        df = df.withColumnRenamed(io.FILE_COLUMN, FILE_COL).withColumnRenamed(io.ROW_INDEX_COLUMN, ROW_COL)
    return df.alias(alias)


def target_col(alias: str, name: str) -> Column:
    """A target column referenced through its alias (unambiguous next to a source)."""
    return F.col(f"{io.quote_name(alias)}.{io.quote_name(name)}")


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
        if t is not None and t.rows is None:
            return  # rows not known: conflict checks evaluate the condition instead
        rows[f.path] = t.rows if t is not None else empty
    txn.record_matched_rows(rows)


ROWS_ISIN_MAX = 1000  # more rows to evaluate than this are selected by a semi join, not IN


def condition_row_evaluator(
    spark: SparkSession, snap: Snapshot, cond: Column, alias: str
) -> row_level.RowEvaluator:
    """``cond`` evaluated by Spark on some rows of one file, for rows conflict checks cannot decide."""

    def evaluate(add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        return evaluate_condition_rows(spark, snap, cond, alias, add, rows)

    return evaluate


def evaluate_condition_rows(
    spark: SparkSession, snap: Snapshot, cond: Column, alias: str, add: AddFile, rows: RowIndexSet | None
) -> RowIndexSet:
    """Live rows of ``add`` (among ``rows``; all when None) where ``cond`` is TRUE: one Spark job."""
    if rows is not None and not len(rows):
        return RowIndexSet.from_iter([])
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
    hits = df.filter(is_true(cond)).select(ROW_COL).collect()
    return RowIndexSet.from_iter(sorted(int(r[0]) for r in hits))


# ---------------------------------------------------------------------------------------------
# Writing: new files, deletion vectors, commit
# ---------------------------------------------------------------------------------------------


def table_columns(snap: Snapshot, df: DataFrame, alias: str | None = None) -> list[Column]:
    """The table's columns of ``df`` in table order, cast to the table types."""
    spark_schema = io.to_spark_schema(snap.schema)
    return [
        (target_col(alias, f.name) if alias else F.col(io.quote_name(f.name))).cast(f.dataType).alias(f.name)
        for f in spark_schema.fields
    ]


def write_rows(snap: Snapshot, df: DataFrame, *, data_change: bool = True) -> list[AddFile]:
    """Write ``df`` (exactly the table columns) as data files of the table; NOT NULL columns checked."""
    not_null = [f.name for f in snap.schema.fields if not f.nullable]
    if not_null:
        df = check_rows(
            df,
            [F.col(io.quote_name(c)).isNotNull() for c in not_null],
            [f"NOT NULL constraint violated for column '{c}' of table {snap.table_path}" for c in not_null],
        )
    return write_checked_files(
        df, snap.table_path, list(snap.partition_columns), data_change=data_change, configuration=snap.configuration
    )


def loose_stats(stats: str | None) -> str | None:
    """Stats of a file that gets a deletion vector: bounds may now be wider than the live rows."""
    if not stats:
        return stats
    try:
        value = json.loads(stats)
    except ValueError:
        return stats
    if not isinstance(value, dict):
        return stats
    value["tightBounds"] = False
    return json.dumps(value, separators=(",", ":"))


@dataclass
class DvChanges:
    """Actions and counters of marking rows deleted in deletion vectors."""

    actions: list[Action] = field(default_factory=list)
    written: list[AddFile] = field(default_factory=list)  # adds carrying a DV we wrote (for clean-up)
    files_removed: int = 0
    dvs_added: int = 0
    dvs_updated: int = 0
    dvs_removed: int = 0
    bytes_removed: int = 0


def mark_deleted(table: str, touched: Iterable[Touched], stamp: int) -> DvChanges:
    """``remove(F, old dv)`` + ``add(F, old ∪ new rows)`` per file; a file losing every row is removed."""
    out = DvChanges()
    for t in touched:
        add = _with_num_records(table, t.add)
        assert t.rows is not None
        old = read_deletion_vector(table, add.deletion_vector) if add.deletion_vector else RowIndexSet.from_iter([])
        merged = old | t.rows
        out.actions.append(t.add.remove(timestamp=stamp))
        total = add.num_records
        if total is not None and len(merged) >= total:
            out.files_removed += 1
            out.bytes_removed += add.size or 0
            out.dvs_removed += 1 if add.deletion_vector else 0
            continue
        dv = write_deletion_vector(table, merged, inline_max_bytes=DV_INLINE_MAX_BYTES)
        new = replace(add, deletion_vector=dv, data_change=True, stats=loose_stats(add.stats))
        out.actions.append(new)
        out.written.append(new)
        if add.deletion_vector:
            out.dvs_updated += 1
        else:
            out.dvs_added += 1
    return out


def _with_num_records(table: str, add: AddFile) -> AddFile:
    """``add`` with ``stats.numRecords`` (read from the Parquet footer if missing): a DV needs it."""
    if add.num_records is not None:
        return add
    n = pq.read_metadata(io.absolute_path(table, add.path)).num_rows
    try:
        stats = json.loads(add.stats) if add.stats else {}
    except ValueError:
        stats = {}
    stats = {**(stats if isinstance(stats, dict) else {}), "numRecords": n}
    return replace(add, stats=json.dumps(stats, separators=(",", ":")))


def remove_files(table: str, adds: Sequence[AddFile], dv_adds: Sequence[AddFile] = ()) -> None:
    """Delete data files and deletion-vector files a failed commit would have added."""
    for add in adds:
        _unlink(io.absolute_path(table, add.path))
    for add in dv_adds:
        if add.deletion_vector is not None and add.deletion_vector.storage_type == "u":
            path = dv_absolute_path(table, add.deletion_vector)
            if path:
                _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def commit(
    txn: OptimisticTransaction,
    actions: list[Action],
    operation: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, Any],
    *,
    new_files: Sequence[AddFile] = (),
    new_dvs: Sequence[AddFile] = (),
    before_commit: BeforeCommit = None,
) -> int:
    """Run ``before_commit``, commit; delete the files written that the commit does not reference.

    All of them when the commit certainly failed; after a commit, those that rebasing over
    concurrent commits dropped (``txn.committed_actions``), e.g. compaction outputs another
    compaction already made.
    """
    try:
        if before_commit is not None:
            before_commit()
        version = txn.commit(actions, operation, params, metrics)
    except CommitOutcomeUnknownError:
        raise  # the commit may have landed: the files it references must stay
    except (DeltaConcurrentModificationException, CommitFailedError, DeltaAnalysisException, InvalidTableError):
        remove_files(txn.table_path, new_files, new_dvs)
        raise
    _discard_unused(txn, new_files, new_dvs)
    return version


def _discard_unused(txn: OptimisticTransaction, new_files: Sequence[AddFile], new_dvs: Sequence[AddFile]) -> None:
    """Delete the data and deletion-vector files written for ``txn`` that its commit does not reference."""
    table = txn.table_path
    final = [a for a in txn.committed_actions or [] if isinstance(a, AddFile)]
    used = {a.path for a in final}
    used_dvs = {dv_absolute_path(table, a.deletion_vector) for a in final if a.deletion_vector is not None}
    remove_files(
        table,
        [f for f in new_files if f.path not in used],
        [
            d
            for d in new_dvs
            if d.deletion_vector is not None and dv_absolute_path(table, d.deletion_vector) not in used_dvs
        ],
    )


def json_list(values: Sequence[Any]) -> str:
    """A list as delta-spark writes it in operationParameters."""
    return json.dumps(list(values), separators=(",", ":"))


def elapsed_ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def file_bytes(files: Iterable[AddFile]) -> int:
    return sum(f.size or 0 for f in files)


def rows_of(files: Iterable[AddFile]) -> int:
    return sum(f.num_records or 0 for f in files)


# ---------------------------------------------------------------------------------------------
# DELETE
# ---------------------------------------------------------------------------------------------


def delete(
    spark: SparkSession, table_path: str, condition: ConditionLike = None, *, alias: str | None = None
) -> DataFrame:
    """``DELETE FROM table [WHERE condition]``; returns one row ``num_affected_rows`` (delta-spark SQL)."""
    result = run_delete(spark, table_path, condition, alias=alias)
    return affected_rows_df(spark, result)


def run_delete(
    spark: SparkSession,
    table_path: str,
    condition: ConditionLike = None,
    *,
    alias: str | None = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """DELETE (see module docstring); ``DmlResult.metrics`` are delta-spark's DELETE metrics."""
    start = time.monotonic()
    txn, snap = open_transaction(table_path, "DELETE")
    name = alias or TARGET_ALIAS
    plan = plan_condition(spark, txn, snap, condition, name, "DELETE")
    if condition is None:
        return _delete_files(txn, snap, plan.files, None, start, before_commit)
    if _only_partition_columns(snap, plan.expr, name):
        matched = _partition_matches(spark, snap, plan.files, name, plan.cond)
        if all(live_rows(snap.table_path, f) is not None for f in matched):
            return _delete_files(txn, snap, matched, plan.text, start, before_commit)
    return _delete_rows(spark, txn, snap, plan, name, start, before_commit)


@dataclass(frozen=True)
class PlannedCondition:
    """A DELETE/UPDATE condition: the Column Spark evaluates, its parsed form, the files it reads."""

    cond: Column
    expr: P.Expr
    files: list[AddFile]
    text: str | None
    exact: P.Expr | None = None  # the condition, unqualified, when the core evaluates it exactly


def plan_condition(
    spark: SparkSession,
    txn: OptimisticTransaction,
    snap: Snapshot,
    condition: ConditionLike,
    alias: str,
    operation: str,
) -> PlannedCondition:
    """Analyse ``condition`` against the table and record its read: ``txn.filter_files``.

    A missing condition reads the whole table.
    """
    if condition is None:
        return PlannedCondition(F.lit(True), P.TRUE, txn.filter_files([]), None)
    cond = to_column(condition, f"{operation} condition")
    # A condition the core evaluates exactly names only existing columns of plain types: Spark's
    # analysis (an empty query, tens of ms) has nothing to add. Others are analysed first, so a
    # bad condition fails naming the table before anything runs.
    exact = _exact_condition(snap, condition, None, alias) if isinstance(condition, str) else None
    sql = None if exact is not None else resolved_condition_sql(_probe(spark, snap, alias, cond, operation))
    if exact is None and not isinstance(condition, str):
        exact = _exact_condition(snap, condition, sql, alias)
    expr = parse_or_true(condition if isinstance(condition, str) else sql)
    target = P.conjunction(target_conjuncts(expr, alias, lambda n: snap.schema.field(n) is not None))
    files = txn.filter_files([target], row_evaluator=condition_row_evaluator(spark, snap, cond, alias))
    return PlannedCondition(cond, expr, files, condition_text(condition, sql), exact)


def _exact_condition(snap: Snapshot, condition: ConditionLike, sql: str | None, alias: str) -> P.Expr | None:
    """The condition without its alias, when the core computes exactly Spark's result for it."""
    text = condition if isinstance(condition, str) else sql
    if not text:
        return None
    try:
        expr = P.strip_qualifier(P.parse_predicate(text), alias)
    except (P.PredicateError, ValueError, TypeError):
        return None
    if expr is None or row_level.inexact_reason(expr, snap.schema) is not None:
        return None
    return expr


def find_touched(
    spark: SparkSession,
    snap: Snapshot,
    plan: PlannedCondition,
    matching: Callable[[], DataFrame],
    *,
    with_rows: bool,
) -> dict[str, Touched]:
    """The candidate files with rows the condition matches (and which rows, with deletion vectors).

    Evaluated by the driver when ``plan.exact`` allows and the files are small enough
    (``LOCAL_CONF``), else by one Spark aggregate job over the rows ``matching()`` builds.
    """
    local = local_touched(spark, snap, plan)
    if local is not None:
        return local
    return touched_files(matching(), plan.files, with_rows=with_rows)


def local_limit(spark: SparkSession) -> int:
    """``LOCAL_CONF``: the most candidate bytes a DML reads and rewrites on the driver (0 = never)."""
    raw = spark.conf.get(LOCAL_CONF, str(LOCAL_DEFAULT_BYTES))
    try:
        return int(raw or 0)
    except ValueError:
        raise DeltaAnalysisException(f"{LOCAL_CONF} must be a number of bytes, got {raw!r}") from None


def local_touched(spark: SparkSession, snap: Snapshot, plan: PlannedCondition) -> dict[str, Touched] | None:
    """The matched rows of each candidate file, found on the driver; None if Spark must find them.

    Every ``Touched`` carries its rows (physical positions, deleted rows excluded).
    """
    if plan.exact is None:
        return None
    limit = local_limit(spark)
    if limit <= 0 or sum(f.size or 0 for f in plan.files) > limit:
        return None
    reader = row_level.RowReader(snap.table_path, snap)
    try:
        found = row_level.scan_matching_rows(reader, plan.files, plan.exact, threads=io_threads())
    except row_level.CannotEvaluate:
        return None
    return {f.path: Touched(f, len(rows), rows) for f, rows in found}


def _only_partition_columns(snap: Snapshot, expr: P.Expr, alias: str) -> bool:
    """Whether every conjunct of the condition reads partition columns only (no data needs reading)."""
    parts = {c.lower() for c in snap.partition_columns}
    conjuncts = P.split_conjuncts(expr)
    if not parts or not conjuncts:
        return False
    kept = target_conjuncts(expr, alias, lambda n: n.lower() in parts)
    return len(kept) == len(conjuncts) and all(n.lower() in parts for c in kept for _, n in P.column_refs(c))


def _probe(spark: SparkSession, snap: Snapshot, alias: str, cond: Column, what: str) -> DataFrame:
    """An empty table-shaped DataFrame filtered by ``cond``: analysis only (no job), for errors and SQL."""
    try:
        empty = spark.createDataFrame([], io.to_spark_schema(snap.schema)).alias(alias)
        return empty.filter(cond)
    except AnalysisException as e:
        raise analysis_error(snap.table_path, f"{what} condition", e) from None


def _partition_matches(
    spark: SparkSession, snap: Snapshot, files: Sequence[AddFile], alias: str, cond: Column
) -> list[AddFile]:
    """Files whose partition values satisfy ``cond`` (evaluated by Spark on one row per file, no data read)."""
    if not files:
        return []
    fields = [snap.schema.field(c) for c in snap.partition_columns]
    rows = []
    for f in files:
        pv = {k.lower(): v for k, v in (f.partition_values or {}).items()}
        rows.append(
            [f.path]
            + [
                io.parse_partition_value(pv.get(p.name.lower()), p.data_type, table=snap.table_path, column=p.name)
                for p in fields
                if p is not None
            ]
        )
    part_schema = io.to_spark_schema(StructType(tuple(p for p in fields if p is not None)))
    schema = T.StructType([T.StructField(FILE_COL, T.StringType(), False), *part_schema.fields])
    df = spark.createDataFrame(rows, schema).alias(alias)
    hit = {r[0] for r in df.filter(is_true(cond)).select(FILE_COL).collect()}
    return [f for f in files if f.path in hit]


def _delete_files(
    txn: OptimisticTransaction,
    snap: Snapshot,
    files: Sequence[AddFile],
    text: str | None,
    start: float,
    before_commit: BeforeCommit,
) -> DmlResult:
    """Remove whole files (no condition, or a condition on partition columns only)."""
    stamp = now_ms()
    removed_rows = sum(live_rows(snap.table_path, f) or 0 for f in files)
    metrics = _delete_metrics(
        deleted=removed_rows,
        files_removed=len(files),
        bytes_removed=file_bytes(files),
        dvs_removed=sum(1 for f in files if f.deletion_vector),
        start=start,
        scan_ms=elapsed_ms(start),
    )
    if not files:
        return DmlResult(None, {**metrics, "num_affected_rows": 0})
    version = commit(
        txn,
        [f.remove(timestamp=stamp) for f in files],
        "DELETE",
        {"predicate": json_list([text] if text else [])},
        metrics,
        before_commit=before_commit,
    )
    return DmlResult(version, {**metrics, "num_affected_rows": removed_rows})


def _delete_rows(
    spark: SparkSession,
    txn: OptimisticTransaction,
    snap: Snapshot,
    plan: PlannedCondition,
    alias: str,
    start: float,
    before_commit: BeforeCommit,
) -> DmlResult:
    """Delete the matching rows of the candidate files: deletion vectors or rewrite."""
    table = snap.table_path
    cond, text = plan.cond, plan.text
    dvs = uses_deletion_vectors(snap)
    touched = find_touched(
        spark, snap, plan, lambda: read_target(spark, snap, plan.files, alias).filter(is_true(cond)), with_rows=dvs
    )
    scan_ms = elapsed_ms(start)
    deleted = sum(t.count for t in touched.values())
    params = {"predicate": json_list([text] if text else [])}
    if not touched:
        metrics = _delete_metrics(deleted=0, start=start, scan_ms=scan_ms)
        return DmlResult(None, {**metrics, "num_affected_rows": 0})
    stamp = now_ms()
    if dvs:
        changes = mark_deleted(table, touched.values(), stamp)
        declare_matched_rows(txn, plan.files, touched)
        metrics = _delete_metrics(
            deleted=deleted,
            files_removed=changes.files_removed,
            bytes_removed=changes.bytes_removed,
            dvs_added=changes.dvs_added,
            dvs_updated=changes.dvs_updated,
            dvs_removed=changes.dvs_removed,
            start=start,
            scan_ms=scan_ms,
        )
        version = commit(
            txn, changes.actions, "DELETE", params, metrics, new_dvs=changes.written, before_commit=before_commit
        )
        return DmlResult(version, {**metrics, "num_affected_rows": deleted})
    partial = [t for t in touched.values() if live_rows(table, t.add) != t.count]
    rewrite_start = time.monotonic()
    adds: list[AddFile] | None = None
    if not partial:
        adds = []
    elif all(t.rows is not None for t in partial) and (local := LocalTable.open(snap)) is not None:
        try:
            adds = local_rewrite.delete_rows(local, [(t.add, t.rows) for t in partial if t.rows is not None])
        except NotLocal:
            adds = None
    if adds is None:
        files = [t.add for t in partial]
        kept = read_target(spark, snap, files, alias, with_rows=False).filter(~is_true(cond))
        adds = write_rows(snap, kept.select(*table_columns(snap, kept, alias)))
    removed = [t.add for t in touched.values()]
    metrics = _delete_metrics(
        deleted=deleted,
        files_removed=len(removed),
        bytes_removed=file_bytes(removed),
        files_added=len(adds),
        bytes_added=file_bytes(adds),
        copied=rows_of(adds),
        dvs_removed=sum(1 for f in removed if f.deletion_vector),
        start=start,
        scan_ms=scan_ms,
        rewrite_ms=elapsed_ms(rewrite_start),
    )
    actions: list[Action] = [f.remove(timestamp=stamp) for f in removed] + list(adds)
    version = commit(txn, actions, "DELETE", params, metrics, new_files=adds, before_commit=before_commit)
    return DmlResult(version, {**metrics, "num_affected_rows": deleted})


def _rewrite_metrics(
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
        "numAddedChangeFiles": 0,
        "executionTimeMs": elapsed_ms(start),
        "scanTimeMs": scan_ms,
        "rewriteTimeMs": rewrite_ms,
    }


def _delete_metrics(*, deleted: int, **kw: Any) -> dict[str, int]:
    return {"numDeletedRows": deleted, **_rewrite_metrics(**kw)}


# ---------------------------------------------------------------------------------------------
# UPDATE
# ---------------------------------------------------------------------------------------------


def update(
    spark: SparkSession,
    table_path: str,
    condition: ConditionLike = None,
    set: Mapping[str, str | Column] | None = None,  # noqa: A002 - delta-spark's parameter name
    *,
    alias: str | None = None,
) -> DataFrame:
    """``UPDATE table SET col = expr, ... [WHERE condition]``; returns one row ``num_affected_rows``.

    ``set`` maps column names to SQL expression strings or Columns (delta-spark's
    ``update(condition, set)``, which also covers Scala's ``updateExpr``).
    """
    result = run_update(spark, table_path, condition, set, alias=alias)
    return affected_rows_df(spark, result)


def run_update(
    spark: SparkSession,
    table_path: str,
    condition: ConditionLike = None,
    set: Mapping[str, str | Column] | None = None,  # noqa: A002
    *,
    alias: str | None = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """UPDATE (see module docstring); ``DmlResult.metrics`` are delta-spark's UPDATE metrics."""
    start = time.monotonic()
    txn, snap = open_transaction(table_path, "UPDATE")
    name = alias or TARGET_ALIAS
    raw = assignment_values(snap, set, name, "UPDATE")
    assignments = {k: to_column(v, f"The value for column '{k}'") for k, v in raw.items()}
    plan = plan_condition(spark, txn, snap, condition, name, "UPDATE")
    dvs = uses_deletion_vectors(snap)
    touched: dict[str, Touched] | None = None
    # Driver path: condition and values exact, files small enough (no Spark job at all).
    compiled = local_rewrite.compile_assignments(snap, raw) if plan.exact is not None else None
    local = LocalTable.open(snap) if compiled is not None else None
    if local is not None and compiled is not None:
        touched = local_touched(spark, snap, plan)
        if touched is not None:
            jobs = [(t.add, t.rows) for t in touched.values() if t.rows is not None]
            rewrite_start = time.monotonic()
            try:
                adds = local_rewrite.update_rows(local, jobs, compiled, only_changed=dvs)
            except NotLocal:
                pass
            else:
                return _commit_update(txn, snap, touched, adds, dvs, start, rewrite_start, plan, before_commit)
    hit = is_true(plan.cond)
    target = read_target(spark, snap, plan.files, name)
    new_values = updated_columns(snap, name, [(hit, assignments)])
    try:
        target.select(*new_values)
    except AnalysisException as e:
        raise analysis_error(snap.table_path, "UPDATE SET expressions", e) from None
    if touched is None:
        matching = target.filter(hit)
        # When the driver already tried (and could not) find the rows, go straight to Spark.
        tried = local is not None and compiled is not None
        touched = touched_files(matching, plan.files, with_rows=dvs) if tried else find_touched(
            spark, snap, plan, lambda: matching, with_rows=dvs)
    rewrite_start = time.monotonic()
    rewritten = [t.add for t in touched.values()]
    adds = []
    if touched:
        source = read_target(spark, snap, rewritten, name, with_rows=False)
        # With deletion vectors only the new versions of the changed rows are written.
        adds = write_rows(snap, (source.filter(hit) if dvs else source).select(*new_values))
    return _commit_update(txn, snap, touched, adds, dvs, start, rewrite_start, plan, before_commit)


def _commit_update(
    txn: OptimisticTransaction,
    snap: Snapshot,
    touched: Mapping[str, Touched],
    adds: list[AddFile],
    dvs: bool,
    start: float,
    rewrite_start: float,
    plan: PlannedCondition,
    before_commit: BeforeCommit,
) -> DmlResult:
    """Commit an UPDATE's new files: remove the rewritten files, or mark the old rows in DVs."""
    scan_ms = int((rewrite_start - start) * 1000)
    updated = sum(t.count for t in touched.values())
    if not touched:
        return DmlResult(None, {**_update_metrics(updated=0, start=start, scan_ms=scan_ms), "num_affected_rows": 0})
    rewritten = [t.add for t in touched.values()]
    stamp = now_ms()
    if dvs:
        # The old versions of the changed rows get marked deleted.
        marks = mark_deleted(snap.table_path, touched.values(), stamp)
        declare_matched_rows(txn, plan.files, touched)
        actions: list[Action] = marks.actions + list(adds)
        new_dvs = marks.written
        counts = dict(files_removed=marks.files_removed, bytes_removed=marks.bytes_removed, copied=0,
                      dvs_added=marks.dvs_added, dvs_updated=marks.dvs_updated, dvs_removed=marks.dvs_removed)
    else:
        actions = [f.remove(timestamp=stamp) for f in rewritten] + list(adds)
        new_dvs = []
        counts = dict(files_removed=len(rewritten), bytes_removed=file_bytes(rewritten),
                      copied=rows_of(adds) - updated, dvs_removed=sum(1 for f in rewritten if f.deletion_vector))
    metrics = _update_metrics(
        updated=updated, files_added=len(adds), bytes_added=file_bytes(adds), start=start, scan_ms=scan_ms,
        rewrite_ms=elapsed_ms(rewrite_start), **counts,
    )  # fmt: skip
    params = {"predicate": json_list([plan.text] if plan.text else [])}
    version = commit(
        txn, actions, "UPDATE", params, metrics, new_files=adds, new_dvs=new_dvs, before_commit=before_commit
    )
    return DmlResult(version, {**metrics, "num_affected_rows": updated})


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
        name = key
        prefix = alias + "."
        if name.lower().startswith(prefix.lower()):
            name = name[len(prefix):]
        name = name.strip("`")
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
        out[f.name] = value
    return out


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
    for f in io.to_spark_schema(snap.schema).fields:
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


def _update_metrics(*, updated: int, **kw: Any) -> dict[str, int]:
    return {"numUpdatedRows": updated, **_rewrite_metrics(**kw)}


def affected_rows_df(spark: SparkSession, result: DmlResult) -> DataFrame:
    """delta-spark SQL's DELETE/UPDATE result: one row ``num_affected_rows``."""
    schema = T.StructType([T.StructField("num_affected_rows", T.LongType(), False)])
    return spark.createDataFrame([(result.num_affected_rows,)], schema)


# ---------------------------------------------------------------------------------------------
# RESTORE
# ---------------------------------------------------------------------------------------------

_RESTORE_SCHEMA = T.StructType(
    [
        T.StructField(n, T.LongType(), False)
        for n in (
            "table_size_after_restore",
            "num_of_files_after_restore",
            "num_removed_files",
            "num_restored_files",
            "removed_files_size",
            "restored_files_size",
        )
    ]
)


def restoreToVersion(spark: SparkSession, table_path: str, version: int) -> DataFrame:  # noqa: N802
    """``RESTORE TABLE ... TO VERSION AS OF version``; one row of delta-spark's restore metrics."""
    return restore_metrics_df(spark, run_restore(table_path, version=version))


def restoreToTimestamp(spark: SparkSession, table_path: str, timestamp: Any) -> DataFrame:  # noqa: N802
    """``RESTORE TABLE ... TO TIMESTAMP AS OF timestamp`` (datetime, date, ISO string or ms)."""
    return restore_metrics_df(spark, run_restore(table_path, timestamp=timestamp))


def restore(spark: SparkSession, table_path: str, version: int | None = None, timestamp: Any = None) -> DataFrame:
    """Restore to ``version`` or ``timestamp`` (exactly one)."""
    return restore_metrics_df(spark, run_restore(table_path, version=version, timestamp=timestamp))


def run_restore(
    table_path: str,
    *,
    version: int | None = None,
    timestamp: Any = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """Make the table's files (and metadata) those of an older version, as one data-changing commit.

    Files present then and missing now are added back, files present now and absent then
    are removed (a file is its ``(path, deletion vector)``). The whole table counts as read,
    so any concurrent data change conflicts. The protocol is never downgraded.
    """
    if (version is None) == (timestamp is None):
        raise DeltaIllegalArgumentException("RESTORE needs exactly one of version or timestamp")
    txn, current = open_transaction(table_path, "RESTORE")
    log = txn.delta_log
    table = current.table_path
    if version is not None:
        if version < 0 or version > current.version:
            raise DeltaAnalysisException(
                f"Cannot restore table {table} to version {version}: available versions are 0 to {current.version}."
            )
    try:
        old = log.snapshot(version=version, timestamp=timestamp)
    except (FileNotFoundError, DeltaTableNotFoundError) as e:
        raise DeltaAnalysisException(
            f"Cannot restore table {table} to version {version if version is not None else timestamp}: "
            f"that version's log is no longer available ({e})."
        ) from None
    now_files = {f.key: f for f in txn.read_whole_table()}
    then_files = {f.key: f for f in old.all_files}
    to_add = [f for k, f in then_files.items() if k not in now_files]
    to_remove = [f for k, f in now_files.items() if k not in then_files]
    missing = [f.path for f in to_add if not os.path.exists(io.absolute_path(table, f.path))]
    missing += [
        f"{f.path} (deletion vector)"
        for f in to_add
        if f.deletion_vector is not None
        and (dv := dv_absolute_path(table, f.deletion_vector)) is not None
        and not os.path.exists(dv)
    ]
    if missing:
        raise DeltaAnalysisException(
            f"Cannot restore table {table} to version {old.version}: {len(missing)} data file(s) it references "
            f"were deleted (e.g. {missing[0]}), probably by VACUUM. Restore to a later version."
        )
    if old.metadata != current.metadata:
        txn.update_metadata(old.metadata)
    stamp = now_ms()
    actions: list[Action] = [replace(f, data_change=True) for f in to_add]
    actions += [f.remove(timestamp=stamp) for f in to_remove]
    after = list(then_files.values())
    metrics = {
        "tableSizeAfterRestore": file_bytes(after),
        "numOfFilesAfterRestore": len(after),
        "numRemovedFiles": len(to_remove),
        "numRestoredFiles": len(to_add),
        "removedFilesSize": file_bytes(to_remove),
        "restoredFilesSize": file_bytes(to_add),
    }
    params = {"version": old.version, "timestamp": timestamp if timestamp is not None else None}
    params = {k: v for k, v in params.items() if v is not None}
    committed = commit(txn, actions, "RESTORE", params, metrics, before_commit=before_commit)
    return DmlResult(committed, metrics)


def restore_metrics_df(spark: SparkSession, result: DmlResult) -> DataFrame:
    m = result.metrics
    row = (
        m["tableSizeAfterRestore"],
        m["numOfFilesAfterRestore"],
        m["numRemovedFiles"],
        m["numRestoredFiles"],
        m["removedFilesSize"],
        m["restoredFilesSize"],
    )
    return spark.createDataFrame([row], _RESTORE_SCHEMA)


# ---------------------------------------------------------------------------------------------
# ALTER TABLE ADD COLUMNS
# ---------------------------------------------------------------------------------------------


def add_columns(
    spark: SparkSession | None,
    table_path: str,
    columns: str | T.StructType | Sequence[T.StructField],
    *,
    before_commit: BeforeCommit = None,
) -> int:
    """``ALTER TABLE ADD COLUMNS``: append nullable columns; a commit holding only metaData.

    ``columns`` is a DDL string (``"c1 INT, c2 STRING COMMENT 'x'"``), a Spark StructType or a
    list of StructFields. Every concurrent write to the table then fails with
    ``MetadataChangedException``. Returns the committed version.
    """
    del spark  # schema work only: no Spark job
    txn, snap = open_transaction(table_path, "ADD COLUMNS")
    table = snap.table_path
    if isinstance(columns, str):
        added = StructType.from_ddl(columns).fields
    else:
        struct = columns if isinstance(columns, T.StructType) else T.StructType(list(columns))
        added = io.to_delta_schema(struct).fields
    if not added:
        raise DeltaIllegalArgumentException(f"ADD COLUMNS on table {table}: no columns given")
    seen = {n.lower() for n in snap.schema.field_names}
    for f in added:
        if f.name.lower() in seen:
            raise DeltaAnalysisException(
                f"Cannot add column '{f.name}' to table {table}: a column with that name already exists "
                f"(columns: {', '.join(snap.schema.field_names)})"
            )
        if not f.nullable:
            raise DeltaAnalysisException(
                f"Cannot add column '{f.name}' to table {table} as NOT NULL: existing rows would hold NULL."
            )
        seen.add(f.name.lower())
    schema = StructType(snap.schema.fields + tuple(added))
    txn.update_metadata(replace(snap.metadata, schema_string=schema.to_json()))
    params = {
        "columns": json.dumps([{"column": f.to_json_value()} for f in added], separators=(",", ":")),
    }
    return commit(txn, [], "ADD COLUMNS", params, {}, before_commit=before_commit)


# ---------------------------------------------------------------------------------------------
# INSERT ... SELECT from the target (a non-blind append)
# ---------------------------------------------------------------------------------------------


def run_insert(
    spark: SparkSession,
    table_path: str,
    df: DataFrame,
    *,
    read_predicate: str | None = None,
    read_version: int | None = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """Append ``df``, which was computed from this table, recording that read.

    ``serialake.spark.write`` appends blindly (no read: never conflicts under
    WriteSerializable). When the rows come from the table itself (``INSERT INTO t SELECT
    ... FROM t``), the append is not blind and gets MERGE's concurrency: the read is
    ``read_predicate`` (a SQL condition on the table; its partition conjuncts decide which
    concurrent appends conflict) or the whole table, as of ``read_version`` (the version
    ``df`` was read at; latest when None).
    """
    log = DeltaLog.for_table(table_path)
    snap0 = log.snapshot(version=read_version) if read_version is not None else None
    txn = log.start_transaction(snap0)
    snap = txn.snapshot
    if snap is None:
        raise DeltaTableNotFoundError(f"Cannot INSERT: {log.table_path} is not a Delta table.")
    # What ``df`` reads (its scans); an explicit predicate, or the whole table if it names none.
    found = scans.record_scans(txn, df)
    if read_predicate is not None:
        txn.filter_files([parse_or_true(read_predicate)])
    elif not any(s.table == snap.table_path and not s.time_travel for s in found):
        txn.read_whole_table()
    data, _ = align_to_schema(df, snap.schema, table=snap.table_path)
    adds = write_rows(snap, data)
    metrics = {"numFiles": len(adds), "numOutputRows": rows_of(adds), "numOutputBytes": file_bytes(adds)}
    params = {"mode": "Append", "partitionBy": json_list(list(snap.partition_columns))}
    if read_predicate is not None:
        params["readPredicate"] = read_predicate
    if not adds:
        return DmlResult(None, {**metrics, "num_affected_rows": 0})
    version = commit(txn, list(adds), "WRITE", params, metrics, new_files=adds, before_commit=before_commit)
    return DmlResult(version, {**metrics, "num_affected_rows": rows_of(adds)})


# ---------------------------------------------------------------------------------------------
# Entry points defined in sibling modules
# ---------------------------------------------------------------------------------------------


def merge(
    spark: SparkSession, table_path: str, source: DataFrame, condition: str | Column, *, alias: str | None = None
) -> DeltaMergeBuilder:
    """``MERGE INTO table USING source ON condition``: a ``DeltaMergeBuilder``."""
    from serialake.spark.merge import DeltaMergeBuilder

    return DeltaMergeBuilder(spark, table_path, source, condition, alias=alias)


def optimize(spark: SparkSession, table_path: str, *, target_file_size: int | None = None) -> DeltaOptimizeBuilder:
    """``OPTIMIZE table``: a ``DeltaOptimizeBuilder``."""
    from serialake.spark.optimize import DeltaOptimizeBuilder

    return DeltaOptimizeBuilder(spark, table_path, target_file_size=target_file_size)
