"""MERGE on Spark: the joins that find the rows each clause changes, and the one write.

``SparkMerge`` is the Spark half of a MERGE run (``merge_command._MergeRun`` inherits it);
``engines.spark.SparkEngine.merge`` runs it. One aggregate job finds the target rows each
clause changes (and fails on multiple matches), then one write job produces the new files:
updated rows, inserted rows, and (copy-on-write) the unchanged rows of touched files.
``read_rows`` is the row evaluator of MERGE's read in conflict checks (one Spark join).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.log import cdf as core_cdf
from serialake.core.log.snapshot import Snapshot
from serialake.core.model import identity
from serialake.core.model.actions import AddCDCFile, AddFile
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import DeltaAnalysisException
from serialake.spark import invariants
from serialake.spark.columns import quote_name
from serialake.spark.dml.kernel import (
    FILE_COL,
    ROW_COL,
    DmlResult,
    Touched,
    analysis_error,
    assigned_in_row,
    change_type,
    elapsed_ms,
    explicit_flags,
    file_rows_df,
    is_true,
    read_target,
    records_changes,
    resolve_assignments,
    table_columns,
    to_column,
    updated_columns,
    write_rows,
    write_rows_and_changes,
)
from serialake.spark.invariants import EXPLICIT_PREFIX
from serialake.spark.schemas import conform, has_spark_struct, to_spark_schema

if TYPE_CHECKING:
    from serialake.spark.dml.merge_command import DeltaMergeBuilder, MergeClause

__all__ = [
    "CLAUSE_COL", "CODE_COL", "INSERT", "MATCHED_DELETE", "MATCHED_UPDATE", "NMBS_DELETE", "NMBS_UPDATE",
    "SOURCE_PRESENT_COL", "SparkMerge",
]  # fmt: skip

SOURCE_PRESENT_COL = "__serialake_source_row"
CLAUSE_COL = "__serialake_clause"
CODE_COL = "__serialake_code"

# Kinds of change a fired clause makes (for metrics, deletion vectors and what is written).
MATCHED_UPDATE, MATCHED_DELETE, NMBS_UPDATE, NMBS_DELETE, INSERT = 0, 1, 2, 3, 4


class SparkMerge:
    """The Spark half of a MERGE run; the attributes and the three methods below are the run's."""

    b: DeltaMergeBuilder
    spark: SparkSession
    source: DataFrame
    txn: OptimisticTransaction
    snap: Snapshot
    table: str
    alias: str
    cond: Column
    matched: list[MergeClause]
    inserts: list[MergeClause]
    by_source: list[MergeClause]
    source_names: dict[str, str]
    files: list[AddFile] | None
    evolved: bool
    empty: DataFrame
    target: DataFrame
    start: float
    scan_ms: int

    if TYPE_CHECKING:

        def _record_read(self, empty_target: DataFrame) -> list[AddFile]: ...

        def _declare_matched(
            self, touched: Mapping[str, Touched], matched: Callable[[], Mapping[str, RowIndexSet]]
        ) -> None: ...

        def _finish(
            self,
            touched: dict[str, Touched],
            counts: dict[int, int],
            adds: list[AddFile],
            rewrite_start: float,
            cdc: Sequence[AddCDCFile] = (),
        ) -> DmlResult: ...

    def run_on_spark(self) -> DmlResult:
        """The whole MERGE on Spark: one aggregate job finds the changed rows, one write job writes."""
        snap = self.snap
        cached: list[DataFrame] = []
        done: DmlResult | None = None
        try:
            # The source feeds several joins: cache it (this also keeps its rows identical between
            # finding the changed rows and writing them).
            if not self.source.is_cached:
                cached.append(self.source.persist(StorageLevel.MEMORY_AND_DISK))
            if self.files is None:
                self.files = self._record_read(self.empty)
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

    def read_rows(self, add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
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
        types = to_spark_schema(self.snap.schema)
        nested = [k for k in assigned if has_spark_struct(types[k].dataType)]
        if not nested:
            return assigned
        probe = self.empty.join(self.source, self.cond, "inner").select(*[assigned[k] for k in nested])
        out = dict(assigned)
        for k, f in zip(nested, probe.schema.fields):
            out[k] = conform(assigned[k], f.dataType, types[k].dataType)
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
        for f in to_spark_schema(self.snap.schema).fields:
            name = self.source_names.get(f.name.lower())
            ident = idents.get(f.name)
            if ident is not None and (name is None or not ident.allow_explicit_insert):
                continue
            if name is None:
                missing.append(f.name)
                continue
            given = self.source.schema[name].dataType
            out[f.name] = conform(self.source[name], given, f.dataType) if self.evolved else self.source[name]
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
            pairs = target.join(self.source, self.cond, "inner").withColumn(CLAUSE_COL, self._index(self.matched))
            return self._target_changes(pairs, self.matched, MATCHED_UPDATE, MATCHED_DELETE)
        if self.by_source:
            alone = target.join(self.source, self.cond, "left_anti").withColumn(CLAUSE_COL, self._index(self.by_source))
            return self._target_changes(alone, self.by_source, NMBS_UPDATE, NMBS_DELETE)
        new = self.source.join(target, self.cond, "left_anti").withColumn(CLAUSE_COL, self._index(self.inserts))
        return new.where(F.col(CLAUSE_COL) >= 0).select(
            F.lit(None).cast("string").alias(FILE_COL),
            F.lit(None).cast("long").alias(ROW_COL),
            F.lit(INSERT).alias(CODE_COL),
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
        source = self.source.withColumn(SOURCE_PRESENT_COL, F.lit(True))
        joined = self.target.join(source, self.cond, how)
        is_insert = F.col(FILE_COL).isNull()
        is_by_source = F.col(SOURCE_PRESENT_COL).isNull()
        clause = F.lit(-1)
        for cond, clauses in ((is_by_source, self.by_source), (is_insert, self.inserts)):
            if clauses:
                clause = F.when(cond, self._index(clauses)).otherwise(clause)
        if self.matched:
            clause = F.when(~is_insert & ~is_by_source, self._index(self.matched)).otherwise(clause)
        joined = joined.withColumn(CLAUSE_COL, clause).where(F.col(CLAUSE_COL) >= 0)
        code: Column = F.lit(INSERT)
        for clauses, update, delete in ((self.matched, MATCHED_UPDATE, MATCHED_DELETE),
                                        (self.by_source, NMBS_UPDATE, NMBS_DELETE)):
            for i in self._ids(clauses, "update"):
                code = F.when(F.col(CLAUSE_COL) == i, update).otherwise(code)
            for i in self._ids(clauses, "delete"):
                code = F.when(F.col(CLAUSE_COL) == i, delete).otherwise(code)
        branches = [(F.col(CLAUSE_COL) == i, self.assignments[i])
                    for i in self._ids(self.matched, "update") + self._ids(self.by_source, "update")]
        changed = updated_columns(self.snap, self.alias, branches)
        inserted = self._inserted_columns() if self.inserts else [None] * len(changed)
        columns = [c if n is None else F.when(is_insert, n).otherwise(c).alias(name)
                   for c, n, name in zip(changed, inserted, (f.name for f in self.snap.schema.fields))]
        # Which rows assign a generated column (checked) rather than leave it to be computed.
        flags = explicit_flags(self.snap, branches + self._insert_branches())
        generate = self._generate_flags(is_insert) if self.inserts else []
        return joined.select(FILE_COL, ROW_COL, code.alias(CODE_COL), *columns, *flags, *generate)

    def _target_changes(self, rows: DataFrame, clauses: Sequence[MergeClause], update: int, delete: int) -> DataFrame:
        """Target rows a clause of ``clauses`` fires for, with the change code and new values."""
        fired = rows.where(F.col(CLAUSE_COL) >= 0)
        updates = self._ids(clauses, "update")
        code = F.when(F.col(CLAUSE_COL).isin(self._ids(clauses, "delete")), delete).otherwise(update)
        branches = [(F.col(CLAUSE_COL) == i, self.assignments[i]) for i in updates]
        return fired.select(
            FILE_COL,
            ROW_COL,
            code.alias(CODE_COL),
            *updated_columns(self.snap, self.alias, branches),
            *explicit_flags(self.snap, branches),
        )

    def _find_touched(self, changes: DataFrame) -> tuple[dict[str, Touched], dict[int, int]]:
        """Touched files (with their changed rows) and the number of rows per change code."""
        counts = {k: 0 for k in (MATCHED_UPDATE, MATCHED_DELETE, NMBS_UPDATE, NMBS_DELETE, INSERT)}
        # One aggregate per file; a row id seen in more pairs than once is a multiple match.
        aggs = [F.count(F.lit(1)).alias("pairs"), F.collect_set(ROW_COL).alias("ids")]
        aggs += [F.sum(F.when(F.col(CODE_COL) == k, 1).otherwise(0)).alias(f"k{k}") for k in counts]
        assert self.files is not None  # run_on_spark reads them before computing the changes
        by_path = {f.path: f for f in self.files}
        touched: dict[str, Touched] = {}
        for r in changes.groupBy(FILE_COL).agg(*aggs).collect():
            if r[FILE_COL] is None:
                counts[INSERT] += int(r[f"k{INSERT}"])
                continue
            ids = sorted(int(i) for i in r["ids"])
            pairs = int(r["pairs"])
            add = by_path[r[FILE_COL]]
            if pairs > len(ids):
                if not self._single_unconditional_delete():
                    raise self._multiple_match_error(add.path, pairs - len(ids))
                counts[MATCHED_DELETE] += len(ids)  # every pair deletes: count each row once
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
        names = [quote_name(f.name) for f in self.snap.schema.fields]
        flags = [c for c in changes.columns if c.startswith((EXPLICIT_PREFIX, invariants.GENERATE_PREFIX))]
        out = changes.where(F.col(CODE_COL).isin(MATCHED_UPDATE, NMBS_UPDATE, INSERT)).select(*names, *flags)
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
        return [(F.col(CLAUSE_COL) == i, self.assignments[i]) for i in self._ids(self.inserts, "insert")]

    def _inserted_columns(self) -> list[Column]:
        """Table columns of inserted rows: the first NOT MATCHED clause that holds assigns (others NULL)."""
        out: list[Column] = []
        for f in to_spark_schema(self.snap.schema).fields:
            value: Column = F.lit(None).cast(f.dataType)
            for clause in reversed(self.inserts):
                i = self.b._clauses.index(clause)
                assigned = self.assignments[i].get(f.name)
                if assigned is not None:
                    value = F.when(F.col(CLAUSE_COL) == i, assigned.cast(f.dataType)).otherwise(value)
            out.append(value.cast(f.dataType).alias(f.name))
        return out

    def _write_and_commit(self, changes: DataFrame, touched: dict[str, Touched], counts: dict[int, int]) -> DmlResult:
        rewrite_start = time.monotonic()
        adds: list[AddFile] = []
        cdc: list[AddCDCFile] = []
        dvs = uses_deletion_vectors(self.snap)
        new_rows = counts[MATCHED_UPDATE] + counts[NMBS_UPDATE] + counts[INSERT]
        if touched and records_changes(self.snap) and (new_rows or not dvs):
            outputs = self._outputs_and_changes(changes, touched, copy_on_write=not dvs)
            adds, cdc = write_rows_and_changes(self.snap, outputs, new_values=True, txn=self.txn)
        elif touched or counts[INSERT]:
            outputs = self._outputs(changes, touched, copy_on_write=not dvs)
            adds = write_rows(self.snap, outputs, new_values=True, txn=self.txn)
        return self._finish(touched, counts, adds, rewrite_start, cdc)

    def _outputs_and_changes(self, changes: DataFrame, touched: dict[str, Touched], copy_on_write: bool) -> DataFrame:
        """``_outputs`` with ``_change_type``, and the change rows no file stores: deleted rows and the
        old values of updated rows (``kernel.write_rows_and_changes`` splits them)."""
        names = [quote_name(f.name) for f in self.snap.schema.fields]
        flags = [c for c in changes.columns if c.startswith((EXPLICIT_PREFIX, invariants.GENERATE_PREFIX))]
        unflagged = [F.lit(False).alias(f) for f in flags]
        code = F.col(CODE_COL)
        kind = F.when(code == INSERT, F.lit(core_cdf.INSERT)).otherwise(F.lit(core_cdf.UPDATE_POSTIMAGE))
        out = changes.where(code.isin(MATCHED_UPDATE, NMBS_UPDATE, INSERT)).select(
            *names, *flags, kind.alias(core_cdf.CHANGE_TYPE)
        )
        deletes = changes.where(code.isin(MATCHED_DELETE, NMBS_DELETE))
        if self._single_unconditional_delete():
            deletes = deletes.dropDuplicates([FILE_COL, ROW_COL])  # a row matched by several source rows
        out = out.unionByName(deletes.select(*names, *unflagged, change_type(core_cdf.DELETE)))
        updated = changes.where(code.isin(MATCHED_UPDATE, NMBS_UPDATE)).select(FILE_COL, ROW_COL)
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
