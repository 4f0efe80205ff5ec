"""Read-only multi-statement transactions: one consistent cut of several tables for many reads.

``serialake.snapshot(spark, ["orders", "/data/customers"])`` reads the tables (names
registered in the catalog, or paths) at one consistent cut, at the session's isolation
level (``isolation.read_cut``), and pins it:

    with serialake.snapshot(spark, ["orders", "customers"]) as snap:
        totals = serialake.sql(spark, "SELECT ... FROM orders JOIN customers ...")
        recent = snap.read("orders", filter="day >= '2026-11-01'")

Every ``serialake.sql`` statement and every ``serialake.read`` of the session run in
the block read exactly those versions, however many commits land meanwhile, so
DataFrames combining several tables (and writes computed from them) see one state;
reading a table outside the snapshot fails with ``ConsistentReadError``. ``snap.sql``
and ``snap.read`` pin the cut on their own (no block needed), and ``snap.versions`` says
which versions were read. DataFrames are pinned when
they are built: a DataFrame built inside the block keeps its versions after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from serialake.core import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.core.tables import catalog, cut
from serialake.exceptions import DeltaIllegalArgumentException
from serialake.spark import isolation
from serialake.spark.read import snapshot_df
from serialake.sql.execute import execute
from serialake.sql.parser import parse_statement
from serialake.storage import normalize_table_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ReadSnapshot", "snapshot"]


class ReadSnapshot:
    """Several tables at one consistent cut (see module docstring)."""

    def __init__(self, spark: SparkSession, tables: dict[str, str], snaps: dict[str, Snapshot]) -> None:
        self._spark = spark
        self._paths = tables  # as given -> normalized path
        self._snaps = snaps  # normalized path -> snapshot
        self._pins: list[Any] = []

    @property
    def versions(self) -> dict[str, int]:
        """The version read of each table, keyed as given."""
        return {given: self._snaps[path].version for given, path in self._paths.items()}

    def snapshot_of(self, table: str) -> Snapshot:
        """The pinned snapshot of ``table`` (a name or path given to ``snapshot``, or its path)."""
        path = self._paths.get(table) or _location(table)
        if path not in self._snaps:
            raise DeltaIllegalArgumentException(
                f"{table} is not part of this snapshot (its tables: {', '.join(self._paths)})"
            )
        return self._snaps[path]

    def read(self, table: str, *, filter: str | None = None, columns: Sequence[str] | None = None) -> DataFrame:  # noqa: A002
        """``table`` at its pinned version as a DataFrame (``filter`` / ``columns`` as ``serialake.read``)."""
        return snapshot_df(self._spark, self.snapshot_of(table), filter=filter, columns=columns)

    def sql(self, statement: str) -> DataFrame | None:
        """Run a read-only ``serialake.sql`` statement at this snapshot (``serialake.sql``'s result)."""
        with cut.pin(self._spark, self._snaps):
            return execute(self._spark, parse_statement(statement))

    def __enter__(self) -> ReadSnapshot:
        pin = cut.pin(self._spark, self._snaps)
        pin.__enter__()
        self._pins.append(pin)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._pins.pop().__exit__(kind, error, tb)


def snapshot(spark: SparkSession, tables: Sequence[str]) -> ReadSnapshot:
    """Read ``tables`` (registered names or paths) at one consistent cut and pin it."""
    if isinstance(tables, str) or not tables:
        raise DeltaIllegalArgumentException("serialake.snapshot needs a list of table names or paths")
    located = {t: _location(t) for t in tables}
    snaps = isolation.read_cut(spark, [(path, given if given != path else None) for given, path in located.items()])
    return ReadSnapshot(spark, located, snaps)


def _location(table: str) -> str:
    path = catalog.lookup(table)
    return DeltaLog.for_table(path if path is not None else normalize_table_path(table)).table_path
