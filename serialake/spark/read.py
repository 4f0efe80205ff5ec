"""``read``: a Delta table (at a version or time) as a Spark DataFrame, skipping files by a filter."""

from __future__ import annotations

import json
from typing import Any, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core import predicates as P
from serialake.core.actions import AddFile
from serialake.core.snapshot import Snapshot
from serialake.exceptions import DeltaTableNotFoundError
from serialake.spark import io, scans

__all__ = ["read", "scan_files", "table_snapshot"]


def read(
    spark: SparkSession,
    path: str,
    version: int | None = None,
    timestamp: Any = None,
    filter: str | None = None,  # noqa: A002 - the name users know from delta-rs / Spark
    columns: Sequence[str] | None = None,
) -> DataFrame:
    """The table at ``path`` (latest, or as of ``version`` / ``timestamp``) as a DataFrame.

    The file list is pinned when this is called: later commits do not change the result.
    A write computed from this DataFrame records it as a read of the table at that
    version (``serialake.spark.scans``).
    ``filter`` (a SQL condition) skips files whose partition values or stats rule it out,
    then filters the rows; ``columns`` selects columns.
    """
    snapshot = table_snapshot(path, version=version, timestamp=timestamp)
    files = scan_files(snapshot, filter)
    time_travel = version is not None or timestamp is not None
    df = scans.mark(io.read_files_df(spark, snapshot, files), snapshot, filter=filter, time_travel=time_travel)
    if filter:
        df = df.filter(F.expr(filter))
    if columns is not None:
        names = [f.name for f in io.select_fields(snapshot.schema, columns, snapshot.table_path)]
        df = df.select(*[F.col(io.quote_name(n)) for n in names])
    return df


def table_snapshot(path: str, *, version: int | None = None, timestamp: Any = None) -> Snapshot:
    """The snapshot of the table at ``path``; ``DeltaTableNotFoundError`` if there is none."""
    log = DeltaLog.for_table(path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table (no _delta_log commits found)")
    return log.snapshot(version=version, timestamp=timestamp)


def scan_files(snapshot: Snapshot, filter: str | None = None) -> list[AddFile]:  # noqa: A002
    """The files of ``snapshot`` that may hold rows satisfying ``filter`` (all without one)."""
    files = snapshot.all_files
    if not filter:
        return files
    matches = P.compile_predicate(P.parse_predicate(filter), snapshot.schema, snapshot.partition_columns)
    return [f for f in files if matches(f.partition_values or {}, _stats(f))]


def _stats(add: AddFile) -> dict[str, Any] | None:
    if not add.stats:
        return None
    try:
        value = json.loads(add.stats)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
