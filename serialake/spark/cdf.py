"""The change data feed in Spark: reading the changes of versions as a DataFrame, writing change files.

``changes_df(spark, path, start_version, end_version)`` is the one reader: what
``spark.read.format("delta").option("readChangeFeed", "true")``, the SQL ``table_changes``
function and change-feed streams call. It returns the table's columns (as of the ending
version, in schema order) then ``_change_type``, ``_commit_version`` (long) and
``_commit_timestamp`` (timestamp), ordered by ``_commit_version``.

The plan (which rows of which files are which changes) comes from ``core.log.cdf``; the rows
are read by ``data_read.read_files_df`` (local files by Spark's Parquet reader, S3 objects by the
executors). Up to ``_MAX_VERSION_SCANS`` versions are read one version after the other
(a scan per role, the version and change type as literals, rows in version order without
a sort); longer ranges in a few scans whatever the number of versions, then sorted:

- change data files (``cdc`` actions) read with their ``_change_type`` column;
- whole data files read as inserts (adds) or deletes (removes), each through its own
  deletion vector; a file both added and removed within the range is read once per role
  (one scan per repetition, usually none);
- rows whose deletion-vector mark changed in a version (a DELETE with deletion vectors
  writes no change files) selected by a join on ``(file, row index)``.

The commit version, its timestamp and a file's change type travel as extra partition
values of the files read, so no per-version scan is needed.

``write_change_files`` writes the change rows a DML computed under ``_change_data/``.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.log import cdf as core_cdf
from serialake.core.log.deltalog import to_millis
from serialake.core.log.snapshot import Snapshot, TableState
from serialake.core.model.actions import AddCDCFile, AddFile, Metadata
from serialake.core.model.schema import PrimitiveType, StructField, StructType
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException, DeltaTableNotFoundError
from serialake.spark import data_read, data_write
from serialake.spark.columns import quote_name
from serialake.spark.schemas import to_spark_schema
from serialake.spark.staging import fsync_dirs
from serialake.storage import is_local_path

__all__ = [
    "CHANGE_TYPE",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "changes_df",
    "changes_schema",
    "as_change_file",
    "plan_df",
    "timestamp_ms",
    "write_change_files",
]

CHANGE_TYPE = core_cdf.CHANGE_TYPE
COMMIT_VERSION = core_cdf.COMMIT_VERSION
COMMIT_TIMESTAMP = core_cdf.COMMIT_TIMESTAMP

_VERSION = "__serialake_cdf_version"
_MS = "__serialake_cdf_ms"
_LONG = PrimitiveType("long")
_STRING = PrimitiveType("string")


def changes_df(
    spark: SparkSession,
    table_path: str,
    start_version: int | str | None = None,
    end_version: int | str | None = None,
    *,
    start_timestamp: Any = None,
    end_timestamp: Any = None,
) -> DataFrame:
    """The changes of versions ``start_version`` to ``end_version`` (inclusive; None: the latest).

    Or by time: ``start_timestamp`` (the first version committed at or after it) and
    ``end_timestamp`` (the last version committed at or before it), as strings Spark casts
    to TIMESTAMP in the session time zone, datetimes, or epoch ms. Errors as Delta's: no
    start, a start past the latest version, an end before the start, a timestamp out of the
    table's history, or versions in which the table did not record change data
    (``delta.enableChangeDataFeed`` unset). An ending version past the latest reads to the
    latest. The changes are read at call time: later commits do not change the result.
    """
    log = DeltaLog.for_table(table_path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table (no _delta_log commits found)")
    start, end = core_cdf.resolve_range(
        log,
        start_version=_version(start_version, "startingVersion"),
        start_timestamp=None if start_timestamp is None else timestamp_ms(spark, start_timestamp),
        end_version=_version(end_version, "endingVersion"),
        end_timestamp=None if end_timestamp is None else timestamp_ms(spark, end_timestamp),
    )
    if end < start:
        return _empty(spark, log.update().metadata)
    return plan_df(spark, core_cdf.plan_changes(log, start, end))


def _version(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise DeltaIllegalArgumentException(f"{name} must be a version number, got {value!r}")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise DeltaIllegalArgumentException(f"{name} must be a version number, got {value!r}") from None


def timestamp_ms(spark: SparkSession, value: Any) -> int:
    """A timestamp option as epoch ms: a string is cast to TIMESTAMP by Spark (session time zone)."""
    if isinstance(value, (dt.datetime, dt.date, int, float)) and not isinstance(value, bool):
        return to_millis(value)
    text = str(value)
    row = spark.range(1).select(F.unix_millis(F.lit(text).try_cast("timestamp")).alias("ms")).first()
    if row is None or row["ms"] is None:
        raise DeltaIllegalArgumentException(
            f"The provided timestamp {text!r} cannot be converted to a valid timestamp "
            "(e.g. '2024-05-01', '2024-05-01 10:30:00')"
        )
    return int(row["ms"])


def changes_schema(schema: StructType) -> T.StructType:
    """The change feed's Spark schema for a table schema: its columns, then the three change columns."""
    return (
        to_spark_schema(schema)
        .add(CHANGE_TYPE, T.StringType())
        .add(COMMIT_VERSION, T.LongType())
        .add(COMMIT_TIMESTAMP, T.TimestampType())
    )


def plan_df(spark: SparkSession, plan: core_cdf.ChangePlan) -> DataFrame:
    """The rows of ``plan`` (``core.log.cdf.plan_changes``) as the change feed's DataFrame."""
    reads = plan.reads
    base = _snapshot(plan)
    if not reads:
        return _empty(spark, plan.metadata)
    schema = base.schema
    _check_reserved(plan.table, schema)
    parts: list[DataFrame] = []
    few = len(plan.versions) <= _MAX_VERSION_SCANS
    if few:
        # Each version's files scanned apart, in version order: the union keeps that order (no sort).
        for version in plan.versions:
            parts.extend(_version_parts(spark, plan, base, version.reads))
    else:
        change_files = [r for r in reads if r.is_change_file]
        whole = [r for r in reads if not r.is_change_file and r.rows is None]
        rows = [r for r in reads if r.rows is not None]
        if change_files:
            parts.append(_read_whole(spark, plan, base, change_files, change_files=True))
        for layer in _layers(whole):
            parts.append(_read_whole(spark, plan, base, layer, change_files=False))
        if rows:
            parts.append(_read_rows(spark, base, rows))
    out_columns = [F.col(quote_name(f.name)) for f in schema.fields] + [
        F.col(CHANGE_TYPE),
        F.col(_VERSION).alias(COMMIT_VERSION),
        F.timestamp_millis(F.col(_MS)).alias(COMMIT_TIMESTAMP),
    ]
    df = parts[0].select(*out_columns)
    for p in parts[1:]:
        df = df.unionByName(p.select(*out_columns))
    if not few:
        df = df.orderBy(COMMIT_VERSION)
    return df


#: Reads of up to this many versions scan each version's files apart (one to three scans a
#: version, their rows in version order without a sort); longer ranges share a few scans
#: (the version, time and change type given per file by a join) and are sorted.
_MAX_VERSION_SCANS = 16


def _version_parts(
    spark: SparkSession, plan: core_cdf.ChangePlan, base: Snapshot, reads: Sequence[core_cdf.FileRead]
) -> list[DataFrame]:
    """The rows of one version's ``reads``: one scan per role (change files, inserts, deletes),
    the version, time and change type as literals, and the rows of re-marked files."""
    groups: dict[str | None, list[core_cdf.FileRead]] = {}
    for r in reads:
        if r.rows is None:
            groups.setdefault(r.change_type, []).append(r)
    parts = [_read_group(spark, plan, base, g) for g in groups.values()]
    rows = [r for r in reads if r.rows is not None]
    if rows:
        parts.append(_read_rows(spark, base, rows))
    return parts


def _read_group(
    spark: SparkSession, plan: core_cdf.ChangePlan, base: Snapshot, reads: Sequence[core_cdf.FileRead]
) -> DataFrame:
    """Every live row of ``reads``: files of one version and one role (paths distinct)."""
    first = reads[0]
    files = [_as_add(r, with_dv=True, extra={}) for r in reads]
    if first.is_change_file:
        df = data_read.read_files_df(spark, _with_fields(plan, base, [StructField(CHANGE_TYPE, _STRING)], []), files)
    else:
        df = data_read.read_files_df(spark, base, files).withColumn(CHANGE_TYPE, F.lit(first.change_type))
    return df.withColumn(_VERSION, F.lit(first.version).cast("long")).withColumn(
        _MS, F.lit(first.timestamp).cast("long")
    )


def _empty(spark: SparkSession, metadata: Any) -> DataFrame:
    return spark.createDataFrame([], changes_schema(metadata.schema))


def _check_reserved(table: str, schema: StructType) -> None:
    clash = core_cdf.reserved_columns_used(schema)
    if clash:
        raise DeltaAnalysisException(
            f"Table {table} has column(s) {', '.join(clash)}, which the change data feed reserves for its own "
            "columns: its changes cannot be read."
        )


def _snapshot(plan: core_cdf.ChangePlan, metadata: Metadata | None = None) -> Snapshot:
    """The table under the plan's read metadata, without files (the plan says which to read)."""
    state = TableState(plan.protocol, metadata or plan.metadata)
    return Snapshot(plan.table, max(plan.end, 0), state, None, 0)


def _with_fields(
    plan: core_cdf.ChangePlan, base: Snapshot, data: Sequence[StructField], partitions: Sequence[StructField]
) -> Snapshot:
    """``base`` whose schema has ``data`` columns added (read from the files) and ``partitions``
    (constants per file, given as partition values)."""
    schema = StructType(tuple(base.schema.fields) + tuple(data) + tuple(partitions))
    meta = replace(
        base.metadata,
        schema_string=schema.to_json(),
        partition_columns=tuple(base.partition_columns) + tuple(f.name for f in partitions),
    )
    return _snapshot(plan, meta)


def _as_add(read: core_cdf.FileRead, *, with_dv: bool, extra: dict[str, str | None]) -> AddFile:
    return AddFile(
        path=read.path,
        partition_values={**read.partition_values, **extra},
        size=read.size,
        data_change=False,
        deletion_vector=read.deletion_vector if with_dv else None,
    )


def _constants(read: core_cdf.FileRead) -> dict[str, str | None]:
    out: dict[str, str | None] = {_VERSION: str(read.version), _MS: str(read.timestamp)}
    if read.change_type is not None:
        out[CHANGE_TYPE] = read.change_type
    return out


def _read_whole(
    spark: SparkSession,
    plan: core_cdf.ChangePlan,
    base: Snapshot,
    reads: Sequence[core_cdf.FileRead],
    *,
    change_files: bool,
) -> DataFrame:
    """Every live row of ``reads`` (paths distinct), with the version, time and change type of its read."""
    constants = [StructField(_VERSION, _LONG), StructField(_MS, _LONG)]
    if change_files:
        snap = _with_fields(plan, base, [StructField(CHANGE_TYPE, _STRING)], constants)
    else:
        snap = _with_fields(plan, base, [], [StructField(CHANGE_TYPE, _STRING), *constants])
    files = [_as_add(r, with_dv=True, extra=_constants(r)) for r in reads]
    return data_read.read_files_df(spark, snap, files)


def _read_rows(spark: SparkSession, base: Snapshot, reads: Sequence[core_cdf.FileRead]) -> DataFrame:
    """The chosen rows of ``reads`` (rows whose deletion-vector mark changed): one scan of their
    files, joined on ``(file, row index)`` with the rows' versions, times and change types."""
    import numpy as np
    import pyarrow as pa

    paths: dict[str, core_cdf.FileRead] = {}
    for r in reads:
        paths.setdefault(r.path, r)
    files = [_as_add(r, with_dv=False, extra={}) for r in paths.values()]
    rows = data_read.read_files_df(spark, base, files, with_file_path=True)
    pieces = []
    for r in reads:
        assert r.rows is not None
        idx = r.rows.to_numpy().astype(np.int64)
        n = len(idx)
        pieces.append(
            pa.table(
                {
                    "_sel_file": pa.repeat(pa.scalar(r.path, pa.string()), n),
                    "_sel_row": pa.array(idx, pa.int64()),
                    CHANGE_TYPE: pa.repeat(pa.scalar(r.change_type, pa.string()), n),
                    _VERSION: pa.repeat(pa.scalar(r.version, pa.int64()), n),
                    _MS: pa.repeat(pa.scalar(r.timestamp, pa.int64()), n),
                }
            )
        )
    selection_schema = T.StructType(
        [
            T.StructField("_sel_file", T.StringType(), False),
            T.StructField("_sel_row", T.LongType(), False),
            T.StructField(CHANGE_TYPE, T.StringType(), False),
            T.StructField(_VERSION, T.LongType(), False),
            T.StructField(_MS, T.LongType(), False),
        ]
    )
    selection = _arrow_df(spark, pa.concat_tables(pieces), selection_schema)
    on = (rows[data_read.FILE_COLUMN] == selection["_sel_file"]) & (
        rows[data_read.ROW_INDEX_COLUMN] == selection["_sel_row"]
    )
    return rows.join(selection, on, "inner")


def _arrow_df(spark: SparkSession, table: Any, schema: T.StructType) -> DataFrame:
    try:
        return spark.createDataFrame(table, schema)
    except (TypeError, ValueError):
        return spark.createDataFrame(table.to_pandas(), schema)


def _layers(reads: Sequence[core_cdf.FileRead]) -> list[list[core_cdf.FileRead]]:
    """``reads`` split so that no path repeats within a part (a file added then removed in the range
    is read once as inserts and once as deletes)."""
    layers: list[list[core_cdf.FileRead]] = []
    seen: list[set[str]] = []
    for r in reads:
        for layer, paths in zip(layers, seen):
            if r.path not in paths:
                layer.append(r)
                paths.add(r.path)
                break
        else:
            layers.append([r])
            seen.append({r.path})
    return layers


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def write_change_files(df: DataFrame, snap: Snapshot) -> list[AddCDCFile]:
    """Write ``df`` (the table's columns and ``_change_type``) as change data files of the table.

    The files go to ``<table>/_change_data/<partition dirs>/`` (partition columns in the
    path and the action's partition values, as for data files), written by
    ``data_write.write_data_files`` (locally staged and renamed, on S3 straight to their names).
    Nothing is committed: put the actions in the DML's commit.
    """
    table = snap.table_path
    written = data_write.write_data_files(
        df,
        posixpath.join(table, core_cdf.CHANGE_DATA_DIR),
        list(snap.partition_columns),
        data_change=False,
        configuration=snap.configuration,
        schema=StructType((*snap.schema.fields, StructField(core_cdf.CHANGE_TYPE, PrimitiveType("string")))),
    )
    if written and is_local_path(table):
        fsync_dirs(table, [core_cdf.CHANGE_DATA_DIR])  # the table directory's new entry
    return [as_change_file(a) for a in written]


def as_change_file(add: AddFile) -> AddCDCFile:
    """A file written under ``_change_data/`` (its path relative to that directory) as a ``cdc`` action."""
    return AddCDCFile(
        path=f"{core_cdf.CHANGE_DATA_DIR}/{add.path}",
        partition_values=dict(add.partition_values or {}),
        size=add.size or 0,
        data_change=False,
    )
