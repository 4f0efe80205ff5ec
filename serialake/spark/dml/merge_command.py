"""MERGE INTO with delta-spark's builder API: ``merge(source, condition).whenMatchedUpdate(...)...execute()``.

Semantics follow Delta: clauses of one kind are tried in order and the first whose
condition holds acts on the row; only the last clause of a kind may omit its condition; a
target row matched by several source rows that a MATCHED clause would change is an error
(unless the only MATCHED clause is an unconditional delete); unmatched source rows are
inserted by NOT MATCHED clauses; target rows no source row matches are handled by NOT
MATCHED BY SOURCE clauses.

What the transaction records as read is the target side of the ON condition: conjuncts
that reference only target columns (``t.date = '2024-01-01'``), plus, for equality keys
``t.k = s.k`` on data columns with few distinct source values, ``k IN (values)``. The
latter narrows files by stats and lets row-level conflict checks evaluate the read
exactly; it is not added for partition columns, so a condition that only says
``s.date = t.date`` still reads every partition (Delta's documented behaviour: spell the
partitions out to make concurrent MERGEs into different partitions commit).

With row-level concurrency (deletion vectors) the read is judged by rows: the MERGE declares
per candidate file the rows some source row matched and the rows a clause changed
(``txn.record_matched_rows``, the same on the driver and on Spark), and rows a concurrent
winner adds are checked against the ON condition itself: the read predicate above rules rows
out on the driver, and Spark joins the rest with the source (``_read_rows``; the predicate is
only a necessary condition for a UDF, a non-equi or a multi-key condition, so Spark confirms
its TRUE rows too). A new target row some source row matches conflicts: it could have changed
a matched clause's outcome or a NOT MATCHED insert.

Execution: one aggregate job finds the target rows each clause changes (and fails on
multiple matches), then one write job produces the new files: updated rows, inserted
rows, and (copy-on-write) the unchanged rows of touched files. With deletion vectors the
changed rows are marked deleted instead of copying the rest of their files.

On a table recording change data (``delta.enableChangeDataFeed``) the same write records
every change as Delta does: deleted rows (``delete``), updated rows before and after
(``update_preimage`` / ``update_postimage``) and inserted rows (``insert``), in change data
files of the same commit. A MERGE that only inserts, or (with deletion vectors) only
deletes, needs none: readers infer its rows from its files. Such a MERGE runs on Spark
unless it only inserts.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.log import cdf as core_cdf
from serialake.core.model import identity
from serialake.core.model.actions import Action, AddCDCFile, AddFile, now_ms
from serialake.core.model.schema import merge_schemas
from serialake.core.predicates import expressions as P
from serialake.core.predicates.values import NotExact
from serialake.core.txn import row_level
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import invariants, io, scans
from serialake.spark.arguments import check_assignments, check_condition
from serialake.spark.dml import driver_merge, engine
from serialake.spark.dml.kernel import (
    FILE_COL,
    ROW_COL,
    TARGET_ALIAS,
    DmlResult,
    Touched,
    analysis_error,
    assigned_column,
    assigned_in_row,
    change_type,
    condition_text,
    elapsed_ms,
    explicit_flags,
    file_bytes,
    file_rows_df,
    is_true,
    json_list,
    open_transaction,
    parse_condition,
    parse_or_true,
    read_target,
    records_changes,
    resolve_assignments,
    resolved_condition_sql,
    result_df,
    retire_touched,
    table_columns,
    target_conjuncts,
    to_column,
    updated_columns,
    write_rows,
    write_rows_and_changes,
)
from serialake.spark.errors import pyspark_errors
from serialake.spark.invariants import EXPLICIT_PREFIX
from serialake.spark.write import add_schema_features

__all__ = ["AUTO_MERGE_CONF", "DeltaMergeBuilder", "MAX_KEY_VALUES", "merge", "merge_result_df"]

AUTO_MERGE_CONF = "spark.databricks.delta.schema.autoMerge.enabled"
MAX_KEY_VALUES = 10_000  # distinct source key values turned into an IN list of the read predicate
_SOURCE_PRESENT = "__serialake_source_row"
_CLAUSE = "__serialake_clause"
_CODE = "__serialake_code"

MATCHED = "matched"
NOT_MATCHED = "notMatched"
NOT_MATCHED_BY_SOURCE = "notMatchedBySource"

# Kinds of change a fired clause makes (for metrics, deletion vectors and what is written).
_MATCHED_UPDATE, _MATCHED_DELETE, _NMBS_UPDATE, _NMBS_DELETE, _INSERT = 0, 1, 2, 3, 4

_RESULT_SCHEMA = T.StructType(
    [
        T.StructField(n, T.LongType(), False)
        for n in ("num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows")
    ]
)

_KEY_TYPES = (
    T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType, T.DateType, T.TimestampType,
    T.TimestampNTZType, T.DecimalType, T.BooleanType,
)  # fmt: skip


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause: its kind, action (update/delete/insert), condition and assignments."""

    kind: str
    action: str
    condition: str | Column | None = None
    assignments: Mapping[str, str | Column] | None = None
    star: bool = False  # updateAll / insertAll

    def describe(self) -> dict[str, str]:
        out = {"actionType": self.action}  # as delta-spark: INSERT * is "insert" too
        if self.condition is not None:
            out["predicate"] = condition_text(self.condition) or ""
        return out


@pyspark_errors
class DeltaMergeBuilder:
    """Builder returned by ``DeltaTable.merge(source, condition)``; ``execute()`` runs the MERGE."""

    def __init__(
        self,
        spark: SparkSession,
        table_path: str,
        source: DataFrame,
        condition: str | Column,
        *,
        alias: str | None = None,
    ) -> None:
        if not isinstance(source, DataFrame):
            raise DeltaIllegalArgumentException(f"MERGE source must be a DataFrame, not {type(source).__name__}")
        if not isinstance(condition, (str, Column)):
            raise DeltaIllegalArgumentException("MERGE condition must be a SQL string or a pyspark Column")
        self._spark = spark
        self._path = table_path
        self._source = source
        self._condition = condition
        self._alias = alias
        self._clauses: list[MergeClause] = []
        self._schema_evolution = False

    # -- clauses ------------------------------------------------------------------
    def _add(self, clause: MergeClause, values_name: str | None = None) -> DeltaMergeBuilder:
        # delta-spark's checks, in its order: the dict first, then the condition.
        if values_name is not None:
            check_assignments(clause.assignments, values_name)
        check_condition(clause.condition)
        self._clauses.append(clause)
        return self

    def whenMatchedUpdate(  # noqa: N802
        self, condition: str | Column | None = None, set: Mapping[str, str | Column] | None = None  # noqa: A002
    ) -> DeltaMergeBuilder:
        """Update matched target rows: ``set`` maps target columns to SQL strings or Columns."""
        return self._add(MergeClause(MATCHED, "update", condition, set), "'set' in whenMatchedUpdate")

    def whenMatchedUpdateAll(self, condition: str | Column | None = None) -> DeltaMergeBuilder:  # noqa: N802
        """Update every target column from the source column of the same name."""
        return self._add(MergeClause(MATCHED, "update", condition, None, star=True))

    def whenMatchedDelete(self, condition: str | Column | None = None) -> DeltaMergeBuilder:  # noqa: N802
        """Delete matched target rows."""
        return self._add(MergeClause(MATCHED, "delete", condition))

    def whenNotMatchedInsert(  # noqa: N802
        self, condition: str | Column | None = None, values: Mapping[str, str | Column] | None = None
    ) -> DeltaMergeBuilder:
        """Insert unmatched source rows: ``values`` maps target columns to expressions (others NULL)."""
        return self._add(MergeClause(NOT_MATCHED, "insert", condition, values), "'values' in whenNotMatchedInsert")

    def whenNotMatchedInsertAll(self, condition: str | Column | None = None) -> DeltaMergeBuilder:  # noqa: N802
        """Insert unmatched source rows, every target column from the source column of the same name."""
        return self._add(MergeClause(NOT_MATCHED, "insert", condition, None, star=True))

    def whenNotMatchedBySourceUpdate(  # noqa: N802
        self, condition: str | Column | None = None, set: Mapping[str, str | Column] | None = None  # noqa: A002
    ) -> DeltaMergeBuilder:
        """Update target rows no source row matches (expressions may use target columns only)."""
        clause = MergeClause(NOT_MATCHED_BY_SOURCE, "update", condition, set)
        return self._add(clause, "'set' in whenNotMatchedBySourceUpdate")

    def whenNotMatchedBySourceDelete(self, condition: str | Column | None = None) -> DeltaMergeBuilder:  # noqa: N802
        """Delete target rows no source row matches."""
        return self._add(MergeClause(NOT_MATCHED_BY_SOURCE, "delete", condition))

    def withSchemaEvolution(self) -> DeltaMergeBuilder:  # noqa: N802
        """Add to the table the source columns (and nested struct fields) the clauses assign.

        ``updateAll``/``insertAll`` bring every source column; ``set``/``values`` the ones they
        name. New columns come last and are nullable; existing columns keep their type. The
        same as setting ``spark.databricks.delta.schema.autoMerge.enabled``.
        """
        self._schema_evolution = True
        return self

    # -- execution ----------------------------------------------------------------
    def execute(self) -> DataFrame | None:
        """Run the MERGE; one row: num_affected_rows, num_updated_rows, num_deleted_rows, num_inserted_rows
        (None, with a warning, when building it fails after the commit: ``kernel.result_df``)."""
        return result_df(self._spark, self._path, "MERGE", self.run(), merge_result_df)

    def run(self, *, before_commit: BeforeCommit = None) -> DmlResult:
        """Run the MERGE and return its version and delta-spark's MERGE metrics."""
        self._validate_clauses()
        return _MergeRun(self, before_commit).run()

    def _validate_clauses(self) -> None:
        if not self._clauses:
            raise DeltaAnalysisException(
                f"MERGE into table {self._path} needs at least one WHEN clause (whenMatched..., whenNotMatched...)"
            )
        for c in self._clauses:
            if not c.star and c.action != "delete" and not c.assignments:
                what = "'values'" if c.action == "insert" else "'set'"
                raise DeltaIllegalArgumentException(
                    f"MERGE into table {self._path}: a {c.kind} {c.action} clause needs a non-empty {what} dict"
                )
        for kind in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE):
            group = [c for c in self._clauses if c.kind == kind]
            for c in group[:-1]:
                if c.condition is None:
                    raise DeltaAnalysisException(
                        f"MERGE into table {self._path}: when there is more than one {kind} clause, only the "
                        f"last one can omit its condition (a clause '{c.action}' without condition comes first)."
                    )

    def clauses(self, kind: str) -> list[MergeClause]:
        return [c for c in self._clauses if c.kind == kind]


class _MergeRun:
    """One execution of a MERGE: plan, find touched rows, write, commit."""

    def __init__(self, builder: DeltaMergeBuilder, before_commit: BeforeCommit) -> None:
        self.b = builder
        self.spark = builder._spark
        self.source = builder._source
        self.before_commit = before_commit
        self.start = time.monotonic()
        self.txn, self.snap = open_transaction(builder._path, "MERGE")
        # A source that reads the target (or other tables) is part of the transaction's reads.
        found = scans.record_scans(self.txn, self.source)
        # Then the rows MERGE matched are not all it read of the target: it declares none.
        self.source_reads_target = any(sc.table == self.txn.table_path and not sc.time_travel for sc in found)
        self.table = self.snap.table_path
        self.alias = builder._alias or TARGET_ALIAS
        self.cond = to_column(builder._condition, "MERGE condition")
        self.matched = builder.clauses(MATCHED)
        self.inserts = builder.clauses(NOT_MATCHED)
        self.by_source = builder.clauses(NOT_MATCHED_BY_SOURCE)
        self.source_names = {n.lower(): n for n in self.source.columns}
        self.local_source: Any = None  # the source as Arrow, once collected for the driver path
        self.files: list[AddFile] | None = None
        # Schema evolution asked for, and the schema did change.
        self.evolved = (builder._schema_evolution or _auto_merge(self.spark)) and self._evolve_schema()

    # -- planning -----------------------------------------------------------------
    def run(self) -> DmlResult:
        snap = self.snap
        empty = self.spark.createDataFrame([], io.to_spark_schema(snap.schema)).alias(self.alias)
        try:
            probe = empty.join(self.source, self.cond, "inner")
        except AnalysisException as e:
            raise analysis_error(self.table, "MERGE condition", e) from None
        self.on_sql = resolved_condition_sql(probe)
        # The ON condition parsed once: as given, or Spark's SQL for a Column (target columns qualified).
        self.on_parsed = parse_condition(self.b._condition if isinstance(self.b._condition, str) else self.on_sql)
        self.empty = empty
        # The driver path reads the files with their own schema: an evolving MERGE runs on Spark.
        driver = None if self.evolved else (lambda: self._run_on_driver(empty))
        return engine.for_dml(self.spark).run(None, driver=driver, spark=lambda: self._run_on_spark(empty))

    def _evolve_schema(self) -> bool:
        """Schema evolution: the source columns the clauses assign join the table's schema.

        Every source column with a star clause (``updateAll``/``insertAll``), else those an
        explicit assignment names; NOT MATCHED BY SOURCE clauses never see the source. The
        transaction commits the new schema with the MERGE, and the MERGE reads and writes
        the table under it (old files lack the new columns: NULL). True when it changed.
        """
        clauses = self.matched + self.inserts
        star = any(c.star for c in clauses)
        named = {assigned_column(k, self.alias).lower() for c in clauses if not c.star for k in (c.assignments or {})}
        wanted = [f for f in self.source.schema.fields if star or f.name.lower() in named]
        evolved = merge_schemas(self.snap.schema, io.to_delta_schema(T.StructType(wanted)))
        if evolved == self.snap.schema:
            return False
        self.txn.update_metadata(replace(self.snap.metadata, schema_string=evolved.to_json()))
        add_schema_features(self.txn, evolved)
        assert self.txn.metadata is not None
        self.snap = self.snap.with_metadata(self.txn.metadata)
        return True

    def _run_on_spark(self, empty: DataFrame) -> DmlResult:
        snap = self.snap
        cached: list[DataFrame] = []
        done: DmlResult | None = None
        try:
            # The source feeds several joins: cache it (this also keeps its rows identical between
            # finding the changed rows and writing them).
            if not self.source.is_cached:
                cached.append(self.source.persist(StorageLevel.MEMORY_AND_DISK))
            if self.files is None:
                self.files = self._record_read(empty)
            files = self.files
            self.target = read_target(self.spark, snap, files, self.alias).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(self.target)
            self._resolve_clauses()
            changes = self._changes().persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(changes)
            touched, counts = self._find_touched(changes)
            self._declare_matched(touched, self._matched_on_spark)
            self.scan_ms = elapsed_ms(self.start)
            done = self._write_and_commit(changes, touched, counts)
            return done
        except AnalysisException as e:
            raise analysis_error(self.table, "MERGE clause expressions", e) from None
        finally:
            version = done.version if done is not None else None  # committed: releasing is a later step
            for df in cached:
                after_commit("unpersist the cached DataFrames", self.table, version, df.unpersist, operation="MERGE")

    def _run_on_driver(self, empty_target: DataFrame) -> DmlResult:
        """The whole MERGE with pyarrow on the driver (``driver_merge``); ``NotExact`` to run it on Spark."""
        if records_changes(self.snap) and (self.matched or self.by_source):
            raise NotExact("change data to record")  # the driver MERGE writes no change data files
        budget = engine.for_dml(self.spark)
        source_schema = io.to_delta_schema(self.source.schema)
        mp = driver_merge.plan(self.snap, self.on_parsed, self.alias, source_schema, self.b._clauses)
        self.local_source = driver_merge.source_table(self.source, source_schema, budget.max_bytes)
        self.files = self._record_read(empty_target)
        if not budget.fits(self.files):
            raise NotExact(f"candidate files over {engine.DML_MAX_BYTES_CONF}")
        outcome = driver_merge.execute(
            mp, self.files, self.local_source, self._multiple_match_error, dvs=uses_deletion_vectors(self.snap)
        )
        self.scan_ms = elapsed_ms(self.start)
        touched = {p: Touched(add, len(rows), rows) for p, (add, rows) in outcome.touched.items()}
        self._declare_matched(touched, lambda: outcome.matched)
        c = outcome.counts
        counts = {_MATCHED_UPDATE: c["matched_update"], _MATCHED_DELETE: c["matched_delete"],
                  _NMBS_UPDATE: c["by_source_update"], _NMBS_DELETE: c["by_source_delete"], _INSERT: c["insert"]}
        return self._finish(touched, counts, outcome.adds, time.monotonic())

    def _is_target_name(self, name: str) -> bool:
        """For a condition written as text: an unqualified column is the target's if only the target has it."""
        return self.snap.schema.field(name) is not None and name.lower() not in self.source_names

    def _on_expr(self) -> tuple[P.Expr, Any]:
        """The ON condition parsed, and how to classify its unqualified columns."""
        expr = self.on_parsed if self.on_parsed is not None else P.TRUE
        if isinstance(self.b._condition, str):
            return expr, self._is_target_name
        # Spark's resolution qualified every target column with the target alias.
        return expr, lambda name: False

    def _record_read(self, empty_target: DataFrame) -> list[AddFile]:
        """Record this MERGE's read of the target (``txn.filter_files``); the candidate files.

        The read predicate (``_read_predicate``) is what the driver evaluates on rows in conflict
        checks; the read itself (the target rows some source row matches under the ON condition,
        and the rows NOT MATCHED BY SOURCE clauses read) is computed by Spark on the rows the
        driver leaves undecided (``_read_rows``), and on the rows it finds TRUE as well when the
        predicate is only a necessary condition (a UDF, a non-equi or multi-key ON condition).
        """
        pred, exact = self._read_predicate(empty_target)
        return self.txn.filter_files([pred], row_evaluator=self._read_rows, confirm_rows=not exact)

    def _read_rows(self, add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        """Live rows of ``add`` (among ``rows``; all when None) this MERGE reads: one Spark job.

        A row is read when some source row matches it under the ON condition, or a NOT MATCHED
        BY SOURCE clause's condition holds for it.
        """
        if rows is not None and not len(rows):
            return RowIndexSet.from_iter([])
        df = file_rows_df(self.spark, self.snap, self.alias, add, rows)
        if any(c.condition is None for c in self.by_source):
            hits = df.select(ROW_COL)
        else:
            # An inner join, not a semi join: Spark refuses Python UDFs in semi join conditions.
            hits = df.join(self.source, self.cond, "inner").select(ROW_COL)
            for clause in self.by_source:
                assert clause.condition is not None
                cond = to_column(clause.condition, "NOT MATCHED BY SOURCE condition")
                hits = hits.union(df.filter(is_true(cond)).select(ROW_COL))
        return RowIndexSet.from_iter(sorted({int(r[0]) for r in hits.collect()}))

    def _matched_on_spark(self) -> dict[str, RowIndexSet]:
        """Per candidate file, the target rows some source row matches (one aggregate job)."""
        # An inner join (Spark refuses Python UDFs in semi join conditions): each row once per file.
        found = self.target.join(self.source, self.cond, "inner").groupBy(FILE_COL).agg(
            F.collect_set(ROW_COL).alias("rows")
        )
        return {r[FILE_COL]: RowIndexSet.from_iter(sorted({int(i) for i in r["rows"]})) for r in found.collect()}

    def _declare_matched(
        self, touched: Mapping[str, Touched], matched: Callable[[], Mapping[str, RowIndexSet]]
    ) -> None:
        """Declare per candidate file the rows this MERGE read: those some source row matched, and
        those a clause changed (``txn.record_matched_rows``; with row-level concurrency only).

        A concurrent deletion of any other row changes nothing this MERGE did: not a clause's
        outcome, not which source rows went unmatched (inserted). ``matched`` is only asked
        when the changed rows may not include every matched row (a MATCHED clause does not fire
        for every matched row). Nothing is declared when the source reads the target itself.
        """
        if self.source_reads_target or not self.files or not row_level.enabled(self.snap.metadata):
            return
        every_match_changes = bool(self.matched) and self.matched[-1].condition is None
        found: Mapping[str, RowIndexSet] = {} if every_match_changes else matched()
        empty = RowIndexSet.from_iter([])
        rows: dict[str, RowIndexSet] = {}
        for f in self.files:
            r = found.get(f.path, empty)
            t = touched.get(f.path)
            if t is not None:
                if t.rows is None:
                    return
                r = r | t.rows
            rows[f.path] = r
        self.txn.record_matched_rows(rows)

    def _read_predicate(self, empty_target: DataFrame) -> tuple[P.Expr, bool]:
        """What this MERGE reads of the target (see module docstring), and whether exactly.

        Exact: the ON condition is target-only conjuncts and at most one equality key read as
        an IN list of source values; otherwise the predicate is only a necessary condition.
        """
        expr, is_target = self._on_expr()
        conjuncts = target_conjuncts(expr, self.alias, is_target)
        keys = self._key_in_lists(expr, is_target)
        exact = (
            len(keys) <= 1
            and all(isinstance(k, P.In) or k == P.FALSE for k in keys)
            and len(P.split_conjuncts(expr)) == len(conjuncts) + len(keys)
        )
        matched_read = P.conjunction([*conjuncts, *keys])
        if not self.by_source:
            return matched_read, exact
        # A target row no source row matches is read by NOT MATCHED BY SOURCE clauses.
        extra: list[P.Expr] = []
        for clause in self.by_source:
            if clause.condition is None:
                return P.TRUE, True
            part = self._target_only(clause.condition, empty_target)
            if part is None:
                return P.TRUE, False  # (a condition not understood here: Spark evaluates it)
            extra.append(part)
        return P.disjunction([matched_read, *extra]), exact

    def _target_only(self, condition: str | Column, empty_target: DataFrame) -> P.Expr | None:
        """A NOT MATCHED BY SOURCE condition as a target predicate (None if not understood)."""
        if isinstance(condition, str):
            expr = parse_or_true(condition)
            names: Any = lambda n: self.snap.schema.field(n) is not None  # noqa: E731
        else:
            try:
                expr = parse_or_true(resolved_condition_sql(empty_target.filter(condition)))
            except AnalysisException as e:
                raise analysis_error(self.table, "NOT MATCHED BY SOURCE condition", e) from None
            names = lambda n: False  # noqa: E731
        if expr == P.TRUE:
            return None
        kept = target_conjuncts(expr, self.alias, names)
        if len(kept) != len(P.split_conjuncts(expr)):
            return None
        return P.conjunction(kept)

    def _key_in_lists(self, expr: P.Expr, is_target: Any) -> list[P.Expr]:
        """``k IN (source values)`` for ON equalities ``t.k = s.k`` on target data columns."""
        parts = {c.lower() for c in self.snap.partition_columns}
        out: list[P.Expr] = []
        seen: set[str] = set()
        for c in P.split_conjuncts(expr):
            if not (isinstance(c, P.Comparison) and c.op == "="):
                continue
            for t_side, s_side in ((c.left, c.right), (c.right, c.left)):
                if not (isinstance(t_side, P.Column) and isinstance(s_side, P.Column)):
                    continue
                if not self._is_target_column(t_side, is_target) or self._is_target_column(s_side, is_target):
                    continue
                f = self.snap.schema.field(t_side.name)
                if f is None or f.name.lower() in parts or f.name.lower() in seen:
                    continue
                read = self._key_read(f.name, s_side)
                if read is not None:
                    seen.add(f.name.lower())
                    out.append(read)
        return out

    def _key_read(self, target: str, source_key: P.Column) -> P.Expr | None:
        """``target IN (source values)``, else ``target BETWEEN min AND max`` of the source key."""
        values = self._distinct_source_values(source_key)
        if values is not None:
            return P.In(P.Column(target), tuple(values)) if values else P.FALSE
        key_range = self._source_range(source_key)
        if key_range is None:
            return None
        low, high = key_range
        return P.conjunction([P.Comparison(">=", P.Column(target), low), P.Comparison("<=", P.Column(target), high)])

    def _source_range(self, col: P.Column) -> tuple[P.Literal, P.Literal] | None:
        """``(min, max)`` of a source key with too many values for an IN list: prunes target files by stats.

        Every target row a source row can match lies in the range, so the read it records
        stays exact enough for conflict detection while skipping files outside it.
        """
        if self.local_source is not None:
            return self._local_source_range(col)
        found = self._source_key(col)
        if found is None:
            return None
        keys, data_type = found
        row = keys.agg(F.min("k").alias("lo"), F.max("k").alias("hi")).collect()[0]
        if row["lo"] is None:
            return None
        return _literal(row["lo"], data_type), _literal(row["hi"], data_type)

    def _source_key(self, col: P.Column) -> tuple[DataFrame, T.DataType] | None:
        """The source key column as a one-column DataFrame ``k`` and its type (None: odd type or name)."""
        name = ".".join(io.quote_name(p) for p in [*(col.qualifier.split(".") if col.qualifier else []), col.name])
        try:
            keys = self.source.select(F.col(name).alias("k"))
        except AnalysisException:
            return None
        data_type = keys.schema.fields[0].dataType
        return (keys, data_type) if isinstance(data_type, _KEY_TYPES) else None

    def _is_target_column(self, col: P.Column, is_target: Any) -> bool:
        if col.qualifier is None:
            return bool(is_target(col.name))
        return P.strip_qualifier(col, self.alias) is not None

    def _distinct_source_values(self, col: P.Column) -> list[P.Literal] | None:
        """Distinct non-NULL values of a source column as literals, or None (too many, odd type)."""
        if self.local_source is not None:
            return self._local_distinct_values(col)
        found = self._source_key(col)
        if found is None:
            return None
        keys, data_type = found
        rows = keys.where(F.col("k").isNotNull()).distinct().limit(MAX_KEY_VALUES + 1).collect()
        if len(rows) > MAX_KEY_VALUES:
            return None
        return [_literal(r[0], data_type) for r in rows]

    def _local_key(self, col: P.Column) -> tuple[Any, T.DataType] | None:
        """A source key column of the collected source (Arrow) and its Spark type."""
        name = self.source_names.get(col.name.lower())
        if name is None:
            return None
        data_type = self.source.schema[name].dataType
        if not isinstance(data_type, _KEY_TYPES):
            return None
        return self.local_source.column(name), data_type

    def _local_distinct_values(self, col: P.Column) -> list[P.Literal] | None:
        import pyarrow.compute as pc

        found = self._local_key(col)
        if found is None:
            return None
        values = pc.unique(found[0].drop_null())
        if len(values) > MAX_KEY_VALUES:
            return None
        return [_literal(v, found[1]) for v in values.to_pylist()]

    def _local_source_range(self, col: P.Column) -> tuple[P.Literal, P.Literal] | None:
        import pyarrow.compute as pc

        found = self._local_key(col)
        if found is None:
            return None
        bounds = pc.min_max(found[0]).as_py()
        if bounds["min"] is None:
            return None
        return _literal(bounds["min"], found[1]), _literal(bounds["max"], found[1])

    # -- clauses as Spark expressions -----------------------------------------------
    def _resolve_clauses(self) -> None:
        """Each clause's guard Column and assignments (star clauses expanded to source columns)."""
        self.assignments: dict[int, dict[str, Column]] = {}
        for i, clause in enumerate(self.b._clauses):
            if clause.action == "delete":
                continue
            if clause.star:
                self.assignments[i] = self._star_assignments(clause)
            else:
                assert clause.assignments is not None
                self.assignments[i] = self._conformed(resolve_assignments(
                    self.snap, clause.assignments, self.alias, f"MERGE {clause.kind} {clause.action}"
                ))

    def _conformed(self, assigned: dict[str, Column]) -> dict[str, Column]:
        """Assignments to struct columns (at any depth) with their fields matched by name.

        Only needed when a struct's fields may differ from the value's (schema evolution):
        the values' types come from Spark's analysis of one empty query.
        """
        if not self.evolved:
            return assigned
        types = io.to_spark_schema(self.snap.schema)
        nested = [k for k in assigned if io.has_spark_struct(types[k].dataType)]
        if not nested:
            return assigned
        probe = self.empty.join(self.source, self.cond, "inner").select(*[assigned[k] for k in nested])
        out = dict(assigned)
        for k, f in zip(nested, probe.schema.fields):
            out[k] = io.conform(assigned[k], f.dataType, types[k].dataType)
        return out

    def _star_assignments(self, clause: MergeClause) -> dict[str, Column]:
        """Every table column from the source column of the same name.

        With schema evolution a table column the source lacks is left alone: kept by
        ``updateAll``, NULL for ``insertAll``. Without, it is an error. Identity columns are
        never required: one the source lacks (and every GENERATED ALWAYS one) is kept by
        ``updateAll`` and generated by ``insertAll``.
        """
        out: dict[str, Column] = {}
        missing = []
        idents = {c.name: c for c in identity.identity_columns(self.snap.schema)}
        for f in io.to_spark_schema(self.snap.schema).fields:
            name = self.source_names.get(f.name.lower())
            ident = idents.get(f.name)
            if ident is not None and (name is None or not ident.allow_explicit_insert):
                continue
            if name is None:
                missing.append(f.name)
                continue
            given = self.source.schema[name].dataType
            out[f.name] = io.conform(self.source[name], given, f.dataType) if self.evolved else self.source[name]
        if missing and not self.evolved:
            what = "updateAll" if clause.action == "update" else "insertAll"
            raise DeltaAnalysisException(
                f"MERGE {what} into table {self.table}: the source has no column(s) {', '.join(missing)} "
                f"(source columns: {', '.join(self.source.columns)}). Use explicit assignments instead."
            )
        return out

    def _index(self, clauses: Sequence[MergeClause]) -> Column:
        """The index (in the builder) of the first clause whose condition holds, else -1."""
        expr: Column | None = None
        for clause in clauses:
            i = self.b._clauses.index(clause)
            guard = F.lit(True)
            if clause.condition is not None:
                guard = is_true(to_column(clause.condition, "MERGE clause condition"))
            expr = F.when(guard, F.lit(i)) if expr is None else expr.when(guard, F.lit(i))
        assert expr is not None
        return expr.otherwise(F.lit(-1))

    def _ids(self, clauses: Sequence[MergeClause], action: str) -> list[int]:
        return [self.b._clauses.index(c) for c in clauses if c.action == action]

    # -- changes: every row this MERGE changes or inserts, computed once --------------
    def _changes(self) -> DataFrame:
        """``(file, row, code, table columns...)`` of each changed target row and each inserted row.

        Updated rows carry their new values, deleted rows their old ones (never written),
        inserted rows a NULL file and row. The joins run once: this is cached, then both
        aggregated (touched files, metrics, multiple matches) and written.
        """
        target = self.target
        kinds = [k for k, clauses in (("m", self.matched), ("b", self.by_source), ("i", self.inserts)) if clauses]
        if len(kinds) > 1:
            return self._changes_one_join(kinds)
        if self.matched:
            pairs = target.join(self.source, self.cond, "inner").withColumn(_CLAUSE, self._index(self.matched))
            return self._target_changes(pairs, self.matched, _MATCHED_UPDATE, _MATCHED_DELETE)
        if self.by_source:
            alone = target.join(self.source, self.cond, "left_anti").withColumn(_CLAUSE, self._index(self.by_source))
            return self._target_changes(alone, self.by_source, _NMBS_UPDATE, _NMBS_DELETE)
        new = self.source.join(target, self.cond, "left_anti").withColumn(_CLAUSE, self._index(self.inserts))
        return new.where(F.col(_CLAUSE) >= 0).select(
            F.lit(None).cast("string").alias(FILE_COL),
            F.lit(None).cast("long").alias(ROW_COL),
            F.lit(_INSERT).alias(_CODE),
            *self._inserted_columns(),
            *explicit_flags(self.snap, self._insert_branches()),
            *self._generate_flags(F.lit(True)),
        )

    def _changes_one_join(self, kinds: list[str]) -> DataFrame:
        """Several clause kinds: one outer join of target and source, each joined row classified.

        A row with both sides is a match, a source row alone is NOT MATCHED (insert), a
        target row alone NOT MATCHED BY SOURCE. Each joined row yields at most one change.
        """
        how = {"im": "right", "bm": "left", "bi": "full", "bim": "full"}["".join(sorted(kinds))]
        source = self.source.withColumn(_SOURCE_PRESENT, F.lit(True))
        joined = self.target.join(source, self.cond, how)
        is_insert = F.col(FILE_COL).isNull()
        is_by_source = F.col(_SOURCE_PRESENT).isNull()
        clause = F.lit(-1)
        for cond, clauses in ((is_by_source, self.by_source), (is_insert, self.inserts)):
            if clauses:
                clause = F.when(cond, self._index(clauses)).otherwise(clause)
        if self.matched:
            clause = F.when(~is_insert & ~is_by_source, self._index(self.matched)).otherwise(clause)
        joined = joined.withColumn(_CLAUSE, clause).where(F.col(_CLAUSE) >= 0)
        code: Column = F.lit(_INSERT)
        for clauses, update, delete in ((self.matched, _MATCHED_UPDATE, _MATCHED_DELETE),
                                        (self.by_source, _NMBS_UPDATE, _NMBS_DELETE)):
            for i in self._ids(clauses, "update"):
                code = F.when(F.col(_CLAUSE) == i, update).otherwise(code)
            for i in self._ids(clauses, "delete"):
                code = F.when(F.col(_CLAUSE) == i, delete).otherwise(code)
        branches = [(F.col(_CLAUSE) == i, self.assignments[i])
                    for i in self._ids(self.matched, "update") + self._ids(self.by_source, "update")]
        changed = updated_columns(self.snap, self.alias, branches)
        inserted = self._inserted_columns() if self.inserts else [None] * len(changed)
        columns = [c if n is None else F.when(is_insert, n).otherwise(c).alias(name)
                   for c, n, name in zip(changed, inserted, (f.name for f in self.snap.schema.fields))]
        # Which rows assign a generated column (checked) rather than leave it to be computed.
        flags = explicit_flags(self.snap, branches + self._insert_branches())
        generate = self._generate_flags(is_insert) if self.inserts else []
        return joined.select(FILE_COL, ROW_COL, code.alias(_CODE), *columns, *flags, *generate)

    def _target_changes(self, rows: DataFrame, clauses: Sequence[MergeClause], update: int, delete: int) -> DataFrame:
        """Target rows a clause of ``clauses`` fires for, with the change code and new values."""
        fired = rows.where(F.col(_CLAUSE) >= 0)
        updates = self._ids(clauses, "update")
        code = F.when(F.col(_CLAUSE).isin(self._ids(clauses, "delete")), delete).otherwise(update)
        branches = [(F.col(_CLAUSE) == i, self.assignments[i]) for i in updates]
        return fired.select(
            FILE_COL,
            ROW_COL,
            code.alias(_CODE),
            *updated_columns(self.snap, self.alias, branches),
            *explicit_flags(self.snap, branches),
        )

    def _find_touched(self, changes: DataFrame) -> tuple[dict[str, Touched], dict[int, int]]:
        """Touched files (with their changed rows) and the number of rows per change code."""
        counts = {k: 0 for k in (_MATCHED_UPDATE, _MATCHED_DELETE, _NMBS_UPDATE, _NMBS_DELETE, _INSERT)}
        # One aggregate per file; a row id seen in more pairs than once is a multiple match.
        aggs = [F.count(F.lit(1)).alias("pairs"), F.collect_set(ROW_COL).alias("ids")]
        aggs += [F.sum(F.when(F.col(_CODE) == k, 1).otherwise(0)).alias(f"k{k}") for k in counts]
        assert self.files is not None  # _run_on_spark reads them before computing the changes
        by_path = {f.path: f for f in self.files}
        touched: dict[str, Touched] = {}
        for r in changes.groupBy(FILE_COL).agg(*aggs).collect():
            if r[FILE_COL] is None:
                counts[_INSERT] += int(r[f"k{_INSERT}"])
                continue
            ids = sorted(int(i) for i in r["ids"])
            pairs = int(r["pairs"])
            add = by_path[r[FILE_COL]]
            if pairs > len(ids):
                if not self._single_unconditional_delete():
                    raise self._multiple_match_error(add.path, pairs - len(ids))
                counts[_MATCHED_DELETE] += len(ids)  # every pair deletes: count each row once
            else:
                for k in counts:
                    counts[k] += int(r[f"k{k}"])
            touched[add.path] = Touched(add, len(ids), RowIndexSet.from_iter(ids))
        return touched, counts

    def _single_unconditional_delete(self) -> bool:
        return len(self.matched) == 1 and self.matched[0].action == "delete" and self.matched[0].condition is None

    def _multiple_match_error(self, path: str, n: int) -> DeltaAnalysisException:
        return DeltaAnalysisException(
            f"Cannot perform Merge as multiple source rows matched and attempted to modify the same target row "
            f"in the Delta table {self.table}, possibly in conflicting ways ({n} extra source row match(es) on "
            f"rows of data file {path}). By SQL semantics of Merge, when multiple source rows match on the same "
            "target row, the result may be ambiguous as it is unclear which source row should be used to update "
            "or delete the matching target row.\nHelp: preprocess the source to eliminate multiple matches (e.g. "
            "dropDuplicates on the join keys), or make the ON condition more selective."
        )

    # -- output -------------------------------------------------------------------
    def _outputs(self, changes: DataFrame, touched: dict[str, Touched], copy_on_write: bool) -> DataFrame:
        """Rows to write: updated and inserted rows, and (copy-on-write) the unchanged rows of touched files."""
        names = [io.quote_name(f.name) for f in self.snap.schema.fields]
        flags = [c for c in changes.columns if c.startswith((EXPLICIT_PREFIX, invariants.GENERATE_PREFIX))]
        out = changes.where(F.col(_CODE).isin(_MATCHED_UPDATE, _NMBS_UPDATE, _INSERT)).select(*names, *flags)
        if copy_on_write and touched:
            rows = self.target.where(F.col(FILE_COL).isin(list(touched)))
            changed = changes.where(F.col(FILE_COL).isNotNull()).select(FILE_COL, ROW_COL)
            kept = rows.join(changed, [FILE_COL, ROW_COL], "left_anti")
            out = out.union(kept.select(*table_columns(self.snap, kept), *[F.lit(False).alias(f) for f in flags]))
        return out

    def _generate_flags(self, is_insert: Column) -> list[Column]:
        """Per identity column: whether this row is an insert whose firing clause leaves it to be generated."""
        inserts = self._insert_branches()
        return [
            (is_insert & ~assigned_in_row(c.name, inserts)).alias(invariants.generate_flag(c.name))
            for c in identity.identity_columns(self.snap.schema)
        ]

    def _insert_branches(self) -> list[tuple[Column, dict[str, Column]]]:
        return [(F.col(_CLAUSE) == i, self.assignments[i]) for i in self._ids(self.inserts, "insert")]

    def _inserted_columns(self) -> list[Column]:
        """Table columns of inserted rows: the first NOT MATCHED clause that holds assigns (others NULL)."""
        out: list[Column] = []
        for f in io.to_spark_schema(self.snap.schema).fields:
            value: Column = F.lit(None).cast(f.dataType)
            for clause in reversed(self.inserts):
                i = self.b._clauses.index(clause)
                assigned = self.assignments[i].get(f.name)
                if assigned is not None:
                    value = F.when(F.col(_CLAUSE) == i, assigned.cast(f.dataType)).otherwise(value)
            out.append(value.cast(f.dataType).alias(f.name))
        return out

    def _write_and_commit(self, changes: DataFrame, touched: dict[str, Touched], counts: dict[int, int]) -> DmlResult:
        rewrite_start = time.monotonic()
        adds: list[AddFile] = []
        cdc: list[AddCDCFile] = []
        dvs = uses_deletion_vectors(self.snap)
        new_rows = counts[_MATCHED_UPDATE] + counts[_NMBS_UPDATE] + counts[_INSERT]
        if touched and records_changes(self.snap) and (new_rows or not dvs):
            outputs = self._outputs_and_changes(changes, touched, copy_on_write=not dvs)
            adds, cdc = write_rows_and_changes(self.snap, outputs, new_values=True, txn=self.txn)
        elif touched or counts[_INSERT]:
            outputs = self._outputs(changes, touched, copy_on_write=not dvs)
            adds = write_rows(self.snap, outputs, new_values=True, txn=self.txn)
        return self._finish(touched, counts, adds, rewrite_start, cdc)

    def _outputs_and_changes(self, changes: DataFrame, touched: dict[str, Touched], copy_on_write: bool) -> DataFrame:
        """``_outputs`` with ``_change_type``, and the change rows no file stores: deleted rows and the
        old values of updated rows (``kernel.write_rows_and_changes`` splits them)."""
        names = [io.quote_name(f.name) for f in self.snap.schema.fields]
        flags = [c for c in changes.columns if c.startswith((EXPLICIT_PREFIX, invariants.GENERATE_PREFIX))]
        unflagged = [F.lit(False).alias(f) for f in flags]
        code = F.col(_CODE)
        kind = F.when(code == _INSERT, F.lit(core_cdf.INSERT)).otherwise(F.lit(core_cdf.UPDATE_POSTIMAGE))
        out = changes.where(code.isin(_MATCHED_UPDATE, _NMBS_UPDATE, _INSERT)).select(
            *names, *flags, kind.alias(core_cdf.CHANGE_TYPE)
        )
        deletes = changes.where(code.isin(_MATCHED_DELETE, _NMBS_DELETE))
        if self._single_unconditional_delete():
            deletes = deletes.dropDuplicates([FILE_COL, ROW_COL])  # a row matched by several source rows
        out = out.unionByName(deletes.select(*names, *unflagged, change_type(core_cdf.DELETE)))
        updated = changes.where(code.isin(_MATCHED_UPDATE, _NMBS_UPDATE)).select(FILE_COL, ROW_COL)
        before = self.target.join(updated, [FILE_COL, ROW_COL], "left_semi")
        out = out.unionByName(
            before.select(*table_columns(self.snap, before), *unflagged, change_type(core_cdf.UPDATE_PREIMAGE))
        )
        if copy_on_write and touched:
            rows = self.target.where(F.col(FILE_COL).isin(list(touched)))
            changed = changes.where(F.col(FILE_COL).isNotNull()).select(FILE_COL, ROW_COL)
            kept = rows.join(changed, [FILE_COL, ROW_COL], "left_anti")
            out = out.unionByName(kept.select(*table_columns(self.snap, kept), *unflagged, change_type(None)))
        return out

    def _finish(
        self,
        touched: dict[str, Touched],
        counts: dict[int, int],
        adds: list[AddFile],
        rewrite_start: float,
        cdc: Sequence[AddCDCFile] = (),
    ) -> DmlResult:
        """Commit the new files: remove the rewritten ones, or mark the changed rows in DVs."""
        dvs = uses_deletion_vectors(self.snap)
        updated = counts[_MATCHED_UPDATE] + counts[_NMBS_UPDATE]
        deleted = counts[_MATCHED_DELETE] + counts[_NMBS_DELETE]
        inserted = counts[_INSERT]
        written = sum(a.num_records or 0 for a in adds)
        changes = retire_touched(self.table, touched.values(), now_ms(), dvs=dvs)
        actions: list[Action] = [*changes.actions, *adds, *cdc]
        metrics: dict[str, Any] = {
            "numTargetRowsInserted": inserted,
            "numTargetRowsUpdated": updated,
            "numTargetRowsMatchedUpdated": counts[_MATCHED_UPDATE],
            "numTargetRowsNotMatchedBySourceUpdated": counts[_NMBS_UPDATE],
            "numTargetRowsDeleted": deleted,
            "numTargetRowsMatchedDeleted": counts[_MATCHED_DELETE],
            "numTargetRowsNotMatchedBySourceDeleted": counts[_NMBS_DELETE],
            "numTargetRowsCopied": written - updated - inserted,
            "numOutputRows": written,
            "numTargetFilesAdded": len(adds),
            "numTargetFilesRemoved": changes.files_removed,
            "numTargetBytesAdded": file_bytes(adds),
            "numTargetBytesRemoved": changes.bytes_removed,
            "numTargetDeletionVectorsAdded": changes.dvs_added,
            "numTargetDeletionVectorsUpdated": changes.dvs_updated,
            "numTargetDeletionVectorsRemoved": changes.dvs_removed,
            "numTargetChangeFilesAdded": len(cdc),
            "executionTimeMs": elapsed_ms(self.start),
            "scanTimeMs": self.scan_ms,
            "rewriteTimeMs": elapsed_ms(rewrite_start),
        }
        result = {**metrics, "num_affected_rows": updated + deleted + inserted}
        if not actions:
            return DmlResult(None, result)
        params = {
            "predicate": json_list([condition_text(self.b._condition, self.on_sql)]),
            "matchedPredicates": json_list([c.describe() for c in self.matched]),
            "notMatchedPredicates": json_list([c.describe() for c in self.inserts]),
            "notMatchedBySourcePredicates": json_list([c.describe() for c in self.by_source]),
        }
        version = commit_or_clean_up(
            self.txn, actions, "MERGE", params, metrics, new_files=[*adds, *cdc], new_dvs=changes.written,
            before_commit=self.before_commit,
        )
        return DmlResult(version, result)


def _literal(value: Any, data_type: T.DataType) -> P.Literal:
    """A collected Spark value as a predicate literal of the column's kind."""
    if isinstance(data_type, T.TimestampType) and isinstance(value, dt.datetime):
        # PySpark returns TIMESTAMP values as naive local times; literals are naive UTC.
        if value.tzinfo is None:
            value = value.astimezone()
        return P.Literal(value.astimezone(dt.UTC).replace(tzinfo=None), "timestamp")
    if isinstance(data_type, T.TimestampNTZType):
        return P.Literal(value, "timestamp_ntz")
    if isinstance(data_type, T.DecimalType) and not isinstance(value, Decimal):
        return P.Literal(Decimal(str(value)), "decimal")
    return P.Literal(value)


def _auto_merge(spark: SparkSession) -> bool:
    """``spark.databricks.delta.schema.autoMerge.enabled``: schema evolution for every MERGE."""
    value = spark.conf.get(AUTO_MERGE_CONF, None)
    return str(value).strip().lower() == "true"


def merge_result_df(spark: SparkSession, result: DmlResult) -> DataFrame:
    """delta-spark's MERGE result row from a ``DmlResult``."""
    m = result.metrics
    row = (m["num_affected_rows"], m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], m["numTargetRowsInserted"])
    return spark.createDataFrame([row], _RESULT_SCHEMA)


def merge(
    spark: SparkSession, table_path: str, source: DataFrame, condition: str | Column, *, alias: str | None = None
) -> DeltaMergeBuilder:
    """``MERGE INTO table USING source ON condition``: a ``DeltaMergeBuilder``."""
    return DeltaMergeBuilder(spark, table_path, source, condition, alias=alias)
