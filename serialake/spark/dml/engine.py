"""Where the data work of a DML runs: on the driver with pyarrow, or on Spark. The one choice.

Spark reads, filters, joins and writes the rows of every operation on big data. Small
operations are dominated by Spark's fixed costs (job scheduling, planning, a shuffle join),
so each step of an operation (``engines.base.DataEngine``: find rows, delete rows, update,
merge, compact) runs on the driver engine (``engines.driver``) when

1. the files it reads are small enough: at most ``DML_MAX_BYTES_CONF`` bytes of candidate
   files for DELETE / UPDATE / MERGE, ``COMPACTION_MAX_BYTES_CONF`` per OPTIMIZE bin
   (0 turns a driver path off), and
2. the driver computes exactly Spark's result. Driver code that meets anything it does not
   reproduce exactly (a type, an expression, a NULL for a NOT NULL column, a value that
   would move rows to another partition, an integral overflow) raises ``NotExact``, after
   removing whatever it wrote; ``Engine._pick`` catches it and the same step runs on the
   Spark engine (``engines.spark``), which then reports errors in its own words.

Nothing else decides: operations call the methods of ``for_dml(spark)`` / ``for_compaction(spark)``,
and conflict checks evaluate rows with its ``evaluate`` / ``merge_reads`` (Spark's: the core
decides on the driver what it can before asking).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pyspark.sql import Column, SparkSession

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import AddFile
from serialake.core.predicates.values import NotExact
from serialake.exceptions import DeltaIllegalArgumentException
from serialake.spark.dml.engines.base import (
    COMPACTION_MAX_BYTES_CONF,
    COMPACTION_MAX_BYTES_DEFAULT,
    DML_MAX_BYTES_CONF,
    DML_MAX_BYTES_DEFAULT,
    DataEngine,
    Rewritten,
    UpdateJob,
)
from serialake.spark.dml.engines.driver import DriverEngine
from serialake.spark.dml.engines.spark import SparkEngine
from serialake.spark.dml.kernel import DmlResult, PlannedCondition, Touched

if TYPE_CHECKING:
    from serialake.spark.dml.merge_command import _MergeRun as MergeRun

__all__ = [
    "COMPACTION_MAX_BYTES_CONF",
    "COMPACTION_MAX_BYTES_DEFAULT",
    "DML_MAX_BYTES_CONF",
    "DML_MAX_BYTES_DEFAULT",
    "Engine",
    "NotExact",
    "UpdateJob",
    "for_compaction",
    "for_dml",
    "parse_size",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class Engine:
    """A ``DataEngine`` that runs each step on ``driver`` when allowed and exact, else on ``spark``."""

    driver: DriverEngine
    spark: SparkEngine

    @property
    def max_bytes(self) -> int:
        """The driver's budget: the most bytes of input files it may read (0: none)."""
        return self.driver.max_bytes

    def _pick(self, files: Iterable[AddFile] | None, step: Callable[[DataEngine], _T]) -> _T:
        """``step`` on the driver when ``files`` fit (None: the driver step checks what it reads)
        and it is exact, else on Spark. The one place a step's engine is chosen."""
        if self.max_bytes > 0 and (files is None or self.driver.fits(files)):
            try:
                return step(self.driver)
            except NotExact as e:
                _log.debug("driver path not exact (%s): running on Spark", e)
        return step(self.spark)

    def find_rows(self, snap: Snapshot, plan: PlannedCondition, alias: str, *, with_rows: bool) -> dict[str, Touched]:
        return self._pick(plan.files, lambda e: e.find_rows(snap, plan, alias, with_rows=with_rows))

    def delete_rows(
        self, snap: Snapshot, touched: Sequence[Touched], cond: Column, alias: str, *, record: bool
    ) -> Rewritten:
        # The touched files were found within the budget.
        return self._pick(None, lambda e: e.delete_rows(snap, touched, cond, alias, record=record))

    def update(self, job: UpdateJob) -> Rewritten:
        return self._pick(job.plan.files, lambda e: e.update(job))

    def merge(self, run: MergeRun) -> DmlResult:
        # The candidate files are known once the driver has the source: it checks them itself.
        return self._pick(None, lambda e: e.merge(run))

    def merge_reads(self, run: MergeRun, add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        return self.spark.merge_reads(run, add, rows)  # the core decided on the driver what it could

    def compact(self, snap: Snapshot, inputs: Sequence[AddFile]) -> list[AddFile]:
        return self._pick(inputs, lambda e: e.compact(snap, inputs))

    def evaluate(
        self, snap: Snapshot, cond: Column, alias: str, add: AddFile, rows: RowIndexSet | None
    ) -> RowIndexSet:
        return self.spark.evaluate(snap, cond, alias, add, rows)  # the core decided on the driver what it could


def _engine(spark: SparkSession, max_bytes: int) -> Engine:
    return Engine(DriverEngine(max_bytes), SparkEngine(spark))


def for_dml(spark: SparkSession) -> Engine:
    """The budget of DELETE / UPDATE / MERGE (``DML_MAX_BYTES_CONF``)."""
    return _engine(spark, _setting(spark, DML_MAX_BYTES_CONF, DML_MAX_BYTES_DEFAULT))


def for_compaction(spark: SparkSession) -> Engine:
    """The budget of one OPTIMIZE / REORG bin (``COMPACTION_MAX_BYTES_CONF``)."""
    return _engine(spark, _setting(spark, COMPACTION_MAX_BYTES_CONF, COMPACTION_MAX_BYTES_DEFAULT))


def _setting(spark: SparkSession, key: str, default: int) -> int:
    text = spark.conf.get(key, None)
    if text is None or not str(text).strip():
        return default
    try:
        return parse_size(str(text))
    except ValueError:
        raise DeltaIllegalArgumentException(
            f"{key} must be a size in bytes (e.g. 67108864 or 64m; 0 turns the driver path off), got {text!r}"
        ) from None


def parse_size(text: str) -> int:
    """``"1073741824"``, ``"128m"``, ``"1g"``, ``"512kb"``: a size in bytes (Spark's byte-string forms).

    ValueError when ``text`` is none of these.
    """
    value = text.strip().lower().rstrip("b")
    if value and value[-1] in _UNITS:
        return int(float(value[:-1]) * _UNITS[value[-1]])
    return int(value)
