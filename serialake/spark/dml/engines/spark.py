"""The Spark engine: an operation's data work as Spark jobs, for any size and any expression.

Spark reads the candidate files (``kernel.read_target``: the file and row of each row beside
its columns), filters, joins and writes through ``kernel.write_rows`` /
``write_rows_and_changes`` (constraints, generated and identity values, change data);
errors come in Spark's words. MERGE's joins are ``spark_merge``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.errors import AnalysisException
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.log import cdf as core_cdf
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import AddCDCFile, AddFile
from serialake.spark.columns import quote_name
from serialake.spark.dml.engines.base import Rewritten, UpdateJob
from serialake.spark.dml.kernel import (
    FILE_COL,
    ROW_COL,
    DmlResult,
    PlannedCondition,
    Touched,
    analysis_error,
    change_type,
    explicit_flags,
    file_rows_df,
    is_true,
    read_target,
    records_changes,
    table_columns,
    touched_files,
    updated_columns,
    write_rows,
    write_rows_and_changes,
)
from serialake.spark.invariants import EXPLICIT_PREFIX

if TYPE_CHECKING:
    from serialake.spark.dml.merge_command import _MergeRun as MergeRun

__all__ = ["SparkEngine"]

COMPACT_ALIAS = "__serialake_optimize"


@dataclass(frozen=True)
class SparkEngine:
    """Spark jobs in ``spark``."""

    spark: SparkSession

    def find_rows(self, snap: Snapshot, plan: PlannedCondition, alias: str, *, with_rows: bool) -> dict[str, Touched]:
        """One aggregate job on ``FILE_COL`` over the matching rows (and their rows when ``with_rows``)."""
        matching = read_target(self.spark, snap, plan.files, alias).filter(is_true(plan.cond))
        return touched_files(matching, plan.files, with_rows=with_rows)

    def delete_rows(
        self, snap: Snapshot, touched: Sequence[Touched], cond: Column, alias: str, *, record: bool
    ) -> Rewritten:
        """One write job: the other rows of each file (``record``: the deleted ones as change data)."""
        rows = read_target(self.spark, snap, [t.add for t in touched], alias, with_rows=False)
        if record:
            kind = F.when(is_true(cond), F.lit(core_cdf.DELETE)).alias(core_cdf.CHANGE_TYPE)
            return write_rows_and_changes(snap, rows.select(*table_columns(snap, rows, alias), kind))
        kept = rows.filter(~is_true(cond))
        return write_rows(snap, kept.select(*table_columns(snap, kept, alias))), []

    def update(self, job: UpdateJob) -> Rewritten:
        """The SET values analysed, the rows found (unless a driver attempt did), one write job."""
        snap, name, dvs = job.snap, job.alias, job.dvs
        hit = is_true(job.plan.cond)
        target = read_target(self.spark, snap, job.plan.files, name)
        branches = [(hit, job.assignments)]
        new_values = updated_columns(snap, name, branches) + explicit_flags(snap, branches)
        try:
            target.select(*new_values)
        except AnalysisException as e:
            raise analysis_error(snap.table_path, "UPDATE SET expressions", e) from None
        if job.touched is None:
            job.touched = touched_files(target.filter(hit), job.plan.files, with_rows=dvs)
        job.rewrite_start = time.monotonic()
        touched = job.touched
        adds: list[AddFile] = []
        cdc: list[AddCDCFile] = []
        if touched:
            source = read_target(self.spark, snap, [t.add for t in touched.values()], name, with_rows=False)
            # With deletion vectors only the new versions of the changed rows are written.
            stored = source.filter(hit) if dvs else source
            if records_changes(snap):
                post = stored.select(
                    *new_values, F.when(hit, F.lit(core_cdf.UPDATE_POSTIMAGE)).alias(core_cdf.CHANGE_TYPE)
                )
                flags = [c for c in post.columns if c.startswith(EXPLICIT_PREFIX)]
                pre = source.filter(hit).select(
                    *table_columns(snap, source, name), *[F.lit(False).alias(f) for f in flags],
                    change_type(core_cdf.UPDATE_PREIMAGE),
                )  # fmt: skip
                adds, cdc = write_rows_and_changes(snap, post.unionByName(pre), new_values=True)
            else:
                adds = write_rows(snap, stored.select(*new_values), new_values=True)
        return adds, cdc

    def merge(self, run: MergeRun) -> DmlResult:
        """The joins of ``spark_merge.SparkMerge``: one aggregate job, one write job."""
        return run.run_on_spark()

    def merge_reads(self, run: MergeRun, add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        """One join of the file's rows with the source (``SparkMerge.read_rows``)."""
        return run.read_rows(add, rows)

    def compact(self, snap: Snapshot, inputs: Sequence[AddFile]) -> list[AddFile]:
        """One job: the live rows in file and row order, coalesced into one file."""
        df = read_target(self.spark, snap, inputs, COMPACT_ALIAS)
        # Partition columns lead the sort: the writer then keeps this order (it sorts by them itself otherwise).
        parts = [F.col(quote_name(c)) for c in snap.partition_columns]
        ordered = df.coalesce(1).sortWithinPartitions(*parts, F.col(FILE_COL), F.col(ROW_COL))
        return write_rows(snap, ordered.select(*table_columns(snap, ordered)), data_change=False)

    def evaluate(
        self, snap: Snapshot, cond: Column, alias: str, add: AddFile, rows: RowIndexSet | None
    ) -> RowIndexSet:
        """One job over the rows of ``add``: those where ``cond`` is TRUE."""
        if rows is not None and not len(rows):
            return RowIndexSet.from_iter([])
        hits = file_rows_df(self.spark, snap, alias, add, rows).filter(is_true(cond)).select(ROW_COL).collect()
        return RowIndexSet.from_iter(sorted(int(r[0]) for r in hits))
