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
out on the driver, and Spark joins the rest with the source (``SparkMerge.read_rows``; the predicate is
only a necessary condition for a UDF, a non-equi or a multi-key condition, so Spark confirms
its TRUE rows too). A new target row some source row matches conflicts: it could have changed
a matched clause's outcome or a NOT MATCHED insert.

Execution: this module plans (clauses resolved, schema evolution, the read predicate) and
commits; the data work is asked once of ``engine.for_dml(spark).merge(run)`` (``dml/engine.py``
picks the engine). The driver engine (``engines/driver.py``) joins the source with the
candidate files in pyarrow when the result is provably Spark's; otherwise the Spark engine
(``engines/spark_merge.py``) runs one aggregate job that finds the target rows each clause
changes (and fails on multiple matches), then one write job that produces the new files:
updated rows, inserted rows, and (copy-on-write) the unchanged rows of touched files. With
deletion vectors the changed rows are marked deleted instead of copying the rest of their files.

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
from functools import partial
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.model.actions import Action, AddCDCFile, AddFile, now_ms
from serialake.core.model.schema import merge_schemas
from serialake.core.predicates import expressions as P
from serialake.core.txn import row_level
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import scans
from serialake.spark.arguments import check_assignments, check_condition
from serialake.spark.columns import quote_name
from serialake.spark.dml import engine
from serialake.spark.dml.engines.spark_merge import (
    INSERT,
    MATCHED_DELETE,
    MATCHED_UPDATE,
    NMBS_DELETE,
    NMBS_UPDATE,
    SparkMerge,
)
from serialake.spark.dml.kernel import (
    TARGET_ALIAS,
    DmlResult,
    Touched,
    analysis_error,
    assigned_column,
    condition_text,
    elapsed_ms,
    file_bytes,
    json_list,
    open_transaction,
    parse_condition,
    parse_or_true,
    resolved_condition_sql,
    result_df,
    retire_touched,
    target_conjuncts,
    to_column,
)
from serialake.spark.errors import pyspark_errors
from serialake.spark.schemas import to_delta_schema, to_spark_schema
from serialake.spark.write import add_schema_features

__all__ = ["AUTO_MERGE_CONF", "DeltaMergeBuilder", "MAX_KEY_VALUES", "merge", "merge_result_df"]

AUTO_MERGE_CONF = "spark.databricks.delta.schema.autoMerge.enabled"
MAX_KEY_VALUES = 10_000  # distinct source key values turned into an IN list of the read predicate

MATCHED = "matched"
NOT_MATCHED = "notMatched"
NOT_MATCHED_BY_SOURCE = "notMatchedBySource"

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


class _MergeRun(SparkMerge):
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
        empty = self.spark.createDataFrame([], to_spark_schema(snap.schema)).alias(self.alias)
        try:
            probe = empty.join(self.source, self.cond, "inner")
        except AnalysisException as e:
            raise analysis_error(self.table, "MERGE condition", e) from None
        self.on_sql = resolved_condition_sql(probe)
        # The ON condition parsed once: as given, or Spark's SQL for a Column (target columns qualified).
        self.on_parsed = parse_condition(self.b._condition if isinstance(self.b._condition, str) else self.on_sql)
        self.empty = empty
        self.engine = engine.for_dml(self.spark)
        return self.engine.merge(self)

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
        evolved = merge_schemas(self.snap.schema, to_delta_schema(T.StructType(wanted)))
        if evolved == self.snap.schema:
            return False
        self.txn.update_metadata(replace(self.snap.metadata, schema_string=evolved.to_json()))
        add_schema_features(self.txn, evolved)
        assert self.txn.metadata is not None
        self.snap = self.snap.with_metadata(self.txn.metadata)
        return True

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
        and the rows NOT MATCHED BY SOURCE clauses read) is computed by the engine (``merge_reads``:
        Spark) on the rows the driver leaves undecided, and on the rows it finds TRUE as well when
        the predicate is only a necessary condition (a UDF, a non-equi or multi-key ON condition).
        """
        pred, exact = self._read_predicate(empty_target)
        evaluate = partial(self.engine.merge_reads, self)
        return self.txn.filter_files([pred], row_evaluator=evaluate, confirm_rows=not exact)

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
        name = ".".join(quote_name(p) for p in [*(col.qualifier.split(".") if col.qualifier else []), col.name])
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
        updated = counts[MATCHED_UPDATE] + counts[NMBS_UPDATE]
        deleted = counts[MATCHED_DELETE] + counts[NMBS_DELETE]
        inserted = counts[INSERT]
        written = sum(a.num_records or 0 for a in adds)
        changes = retire_touched(self.table, touched.values(), now_ms(), dvs=dvs)
        actions: list[Action] = [*changes.actions, *adds, *cdc]
        metrics: dict[str, Any] = {
            "numTargetRowsInserted": inserted,
            "numTargetRowsUpdated": updated,
            "numTargetRowsMatchedUpdated": counts[MATCHED_UPDATE],
            "numTargetRowsNotMatchedBySourceUpdated": counts[NMBS_UPDATE],
            "numTargetRowsDeleted": deleted,
            "numTargetRowsMatchedDeleted": counts[MATCHED_DELETE],
            "numTargetRowsNotMatchedBySourceDeleted": counts[NMBS_DELETE],
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
