"""``read``: a Delta table (at a version or time) as a Spark DataFrame, skipping files by a filter."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, overload

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import dv_absolute_path
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import AddFile
from serialake.core.model.paths import absolute_path
from serialake.core.model.paths import file_exists as _exists
from serialake.core.predicates import expressions as P
from serialake.core.predicates import skipping
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException, DeltaTableNotFoundError
from serialake.spark import data_read, isolation, scans
from serialake.spark.backend import backend
from serialake.spark.columns import quote_name, select_fields

__all__ = ["check_version_readable", "read", "scan_files", "snapshot_df", "table_snapshot"]


@overload
def read(
    spark: SparkSession,
    path: str,
    version: int | None = None,
    timestamp: Any = None,
    filter: str | None = None,  # noqa: A002
    columns: Sequence[str] | None = None,
) -> DataFrame: ...


@overload
def read(
    spark: SparkSession,
    path: list[str] | tuple[str, ...],
    version: None = None,
    timestamp: None = None,
    filter: None = None,  # noqa: A002
    columns: None = None,
) -> list[DataFrame]: ...


def read(
    spark: SparkSession,
    path: str | list[str] | tuple[str, ...],
    version: int | None = None,
    timestamp: Any = None,
    filter: str | None = None,  # noqa: A002 - the name users know from delta-rs / Spark
    columns: Sequence[str] | None = None,
) -> DataFrame | list[DataFrame]:
    """The table at ``path`` (latest, or as of ``version`` / ``timestamp``) as a DataFrame.

    The version is chosen when this is called, at the session's read isolation level
    (``serialake.spark.isolation``): later commits do not change the result.
    ``path`` may be a list of tables: one DataFrame each, all read at one consistent cut
    (a state that existed at one instant), to be combined freely. Separate calls are
    separate reads; a DataFrame combining them is checked where serialake consumes it (a
    write, a MERGE source, a SQL query) and refused if their versions never held together.
    Inside ``with serialake.snapshot(spark, tables):`` the latest version is the snapshot's.
    A write computed from this DataFrame records it as a read of the table at that
    version (``serialake.spark.scans``).
    ``filter`` (a SQL condition) skips files whose partition values or stats rule it out,
    then filters the rows; ``columns`` selects columns.
    """
    if not isinstance(path, str):
        if version is not None or timestamp is not None or filter is not None or columns is not None:
            raise DeltaIllegalArgumentException(
                "serialake.read of several tables reads each at its latest version, whole: filter, select and "
                "time-travel the DataFrames it returns, or read a table alone"
            )
        paths = list(path)
        if not paths:
            raise DeltaIllegalArgumentException("serialake.read needs a table path, or a non-empty list of them")
        snaps = isolation.read_cut(spark, [(p, None) for p in paths])
        return [snapshot_df(spark, snaps[DeltaLog.for_table(p).table_path]) for p in paths]
    time_travel = version is not None or timestamp is not None
    if time_travel:
        snapshot = table_snapshot(path, version=version, timestamp=timestamp)
    else:
        snapshot = isolation.read_snapshot(spark, path)
    return snapshot_df(spark, snapshot, filter=filter, columns=columns, time_travel=time_travel)


def snapshot_df(
    spark: SparkSession,
    snapshot: Snapshot,
    *,
    filter: str | None = None,  # noqa: A002
    columns: Sequence[str] | None = None,
    time_travel: bool = False,
    rows: Column | None = None,
) -> DataFrame:
    """``snapshot``'s rows as a DataFrame (see ``read``); ``time_travel``: not the latest version.

    ``rows``: the condition the rows are filtered by, when it is a Column that ``filter``
    (its SQL text, used to skip files) only spells. A whole-table result remembers how it
    was read (``SCAN_ATTRIBUTE``): a later ``df.filter(...)`` in a configured session reads
    it again with the condition pushed into file skipping (``pushed_filter``).
    """
    files = scan_files(snapshot, filter)
    if time_travel:
        check_version_readable(snapshot, files)
    df = scans.mark(data_read.read_files_df(spark, snapshot, files), snapshot, filter=filter, time_travel=time_travel)
    if rows is not None:
        df = df.filter(rows)
    elif filter:
        df = df.filter(F.expr(filter))
    if columns is not None:
        names = [f.name for f in select_fields(snapshot.schema, columns, snapshot.table_path)]
        df = df.select(*[F.col(quote_name(n)) for n in names])
    else:
        df.__dict__[SCAN_ATTRIBUTE] = (snapshot, filter, time_travel, rows)
    return df


SCAN_ATTRIBUTE = "_serialake_scan"


def _column_sql(df: DataFrame, condition: Column) -> str | None:
    """A Column condition on ``df`` as SQL over the table's columns: Spark's analysis of the filter
    (through the JVM API: no Python wrapper runs), with the scan's alias taken off."""
    sql = backend(df.sparkSession).column_sql(df, condition)
    if sql is None:
        return None
    expr = P.parse_predicate(sql)
    for qualifier in {q for q, _ in P.column_refs(expr) if q is not None}:
        if not qualifier.startswith(scans.SCAN_PREFIX):
            return None
        stripped = P.strip_qualifier(expr, qualifier)
        if stripped is None:
            return None
        expr = stripped
    return P.to_sql(expr)


def pushed_filter(df: DataFrame, condition: str | Column) -> DataFrame | None:
    """``df.filter(condition)`` read again with ``condition`` skipping files, when ``df`` is a whole
    table as ``snapshot_df`` returned it and the core understands the condition; else None.

    The rows are the same as ``df.filter(condition)``'s (a Column stays the row filter; its SQL
    text only skips files), from the same snapshot; fewer files are read, and the read a
    write records is the narrower one.
    """
    scan = df.__dict__.get(SCAN_ATTRIBUTE)
    if scan is None:
        return None
    snapshot, old, time_travel, old_rows = scan
    try:
        text = condition if isinstance(condition, str) else _column_sql(df, condition)
        if text is None:
            return None
        combined = text if not old else f"({old}) AND ({text})"
        P.parse_predicate(combined)
    except Exception:  # noqa: BLE001 - a condition the core cannot read is filtered by Spark alone
        return None
    rows: Column | None = None
    if isinstance(condition, Column):
        rows = condition if old is None else (old_rows if old_rows is not None else F.expr(old)) & condition
    elif old_rows is not None:
        rows = old_rows & F.expr(text)
    pushed = snapshot_df(df.sparkSession, snapshot, filter=combined, time_travel=time_travel, rows=rows)
    if rows is not None:
        try:
            pushed.schema  # noqa: B018 - analysis: a Column bound to the first DataFrame (df["x"]) may not resolve here
        except AnalysisException:
            return None
    return pushed


def table_snapshot(path: str, *, version: int | None = None, timestamp: Any = None) -> Snapshot:
    """The snapshot of the table at ``path``; ``DeltaTableNotFoundError`` if there is none."""
    log = DeltaLog.for_table(path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table (no _delta_log commits found)")
    return log.snapshot(version=version, timestamp=timestamp)


def check_version_readable(snapshot: Snapshot, files: Sequence[AddFile] | None = None) -> None:
    """Refuse, naming the version and the cause, a past version whose data files are gone.

    VACUUM only deletes files the latest version no longer references, so only the files
    of ``snapshot`` that are not in the latest version are checked (usually few): a read
    of a vacuumed version then fails here, not later in Spark with a raw file-not-found.
    """
    log = DeltaLog.for_table(snapshot.table_path)
    latest = log.update()
    if latest.version == snapshot.version:
        return
    current = latest.files_by_path()
    candidates = [f for f in (snapshot.all_files if files is None else files) if f.path not in current]
    missing: list[str] = []
    for f in candidates:
        if not _exists(absolute_path(snapshot.table_path, f.path)):
            missing.append(f.path)
        elif f.deletion_vector is not None:
            dv = dv_absolute_path(snapshot.table_path, f.deletion_vector)
            if dv is not None and not _exists(dv):
                missing.append(f"{dv} (deletion vector of {f.path})")
    if not missing:
        return
    vacuums = [
        v
        for v, entry in log.history(limit=_VACUUM_LOOKBACK)
        if v > snapshot.version and (info := entry.commit_info) is not None
        and str(info.operation or "").startswith("VACUUM")
    ]
    cause = (
        f"VACUUM (version {min(vacuums)}) removed files this version needs"
        if vacuums
        else "the files were deleted, most likely by VACUUM, which removes files older versions need"
    )
    raise DeltaAnalysisException(
        f"Cannot read table {snapshot.table_path} at version {snapshot.version}: {len(missing)} of its data "
        f"file(s) no longer exist (e.g. {missing[0]}): {cause}. Versions older than the "
        f"retention period (delta.deletedFileRetentionDuration) cannot be read after VACUUM; "
        f"read a later version (the latest is {latest.version})."
    )


#: How many recent commits are searched for the VACUUM that removed a version's files.
_VACUUM_LOOKBACK = 1000


def scan_files(snapshot: Snapshot, filter: str | None = None) -> list[AddFile]:  # noqa: A002
    """The files of ``snapshot`` that may hold rows satisfying ``filter`` (all without one)."""
    files = snapshot.all_files
    if not filter:
        return files
    matches = skipping.compile_predicate(P.parse_predicate(filter), snapshot.schema, snapshot.partition_columns)
    return [f for f in files if matches(f.partition_values or {}, _stats(f))]


def _stats(add: AddFile) -> dict[str, Any] | None:
    if not add.stats:
        return None
    try:
        value = json.loads(add.stats)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
