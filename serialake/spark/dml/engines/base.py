"""The data work of an operation, engine-neutral: what DELETE, UPDATE, MERGE and OPTIMIZE ask
of an engine. ``driver.DriverEngine`` (pyarrow) and ``spark.SparkEngine`` implement it;
``dml.engine.Engine`` implements it too, by picking one of them per step (the one place).

A driver method raises ``NotExact`` (after removing whatever it wrote) when it would not
compute exactly Spark's result; the Spark method then does the step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.sql import Column

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import AddCDCFile, AddFile
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.spark.dml.kernel import DmlResult, PlannedCondition, Touched

if TYPE_CHECKING:
    from serialake.spark.dml.merge_command import _MergeRun as MergeRun

__all__ = [
    "COMPACTION_MAX_BYTES_CONF",
    "COMPACTION_MAX_BYTES_DEFAULT",
    "DML_MAX_BYTES_CONF",
    "DML_MAX_BYTES_DEFAULT",
    "DataEngine",
    "Rewritten",
    "UpdateJob",
]

DML_MAX_BYTES_CONF = "spark.serialake.dml.local.maxBytes"
DML_MAX_BYTES_DEFAULT = 1 << 30
COMPACTION_MAX_BYTES_CONF = "spark.serialake.optimize.local.maxBytes"
COMPACTION_MAX_BYTES_DEFAULT = 64 << 20

#: New data files and change data files of a rewrite.
Rewritten = tuple[list[AddFile], list[AddCDCFile]]


@dataclass
class UpdateJob:
    """One UPDATE: what it sets, where, and the rows found so far (a driver attempt's, reused)."""

    txn: OptimisticTransaction
    snap: Snapshot
    plan: PlannedCondition
    alias: str
    raw: Mapping[str, Any]  # the SET values as given (SQL text or Columns)
    assignments: Mapping[str, Column]
    dvs: bool
    touched: dict[str, Touched] | None = None
    rewrite_start: float = field(default=0.0)  # when the rows were found


class DataEngine(Protocol):
    """Where the rows of an operation are read, matched, rewritten and written."""

    def find_rows(self, snap: Snapshot, plan: PlannedCondition, alias: str, *, with_rows: bool) -> dict[str, Touched]:
        """The candidate files with rows the condition matches (rows known when ``with_rows``)."""
        ...

    def delete_rows(
        self, snap: Snapshot, touched: Sequence[Touched], cond: Column, alias: str, *, record: bool
    ) -> Rewritten:
        """Copy-on-write DELETE: ``touched`` rewritten without the rows ``cond`` matches
        (``record``: those rows written as change data, every touched file rewritten)."""
        ...

    def update(self, job: UpdateJob) -> Rewritten:
        """UPDATE: the matched rows (``job.touched``, found here when None) with their new values."""
        ...

    def merge(self, run: MergeRun) -> DmlResult:
        """The whole MERGE: find the changed rows, write, commit (``run._finish``)."""
        ...

    def merge_reads(self, run: MergeRun, add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        """Live rows of ``add`` (among ``rows``; all when None) the MERGE reads: the row evaluator
        of its read in conflict checks (see ``evaluate``)."""
        ...

    def compact(self, snap: Snapshot, inputs: Sequence[AddFile]) -> list[AddFile]:
        """The live rows of ``inputs`` (path order) in one new file, ``dataChange=false``."""
        ...

    def evaluate(
        self, snap: Snapshot, cond: Column, alias: str, add: AddFile, rows: RowIndexSet | None
    ) -> RowIndexSet:
        """Live rows of ``add`` (among ``rows``; all when None) where ``cond`` is TRUE: what
        conflict checks ask of rows the core cannot decide (``row_eval.RowEvaluator``)."""
        ...
