"""Data files written by Spark: the one writer every Spark-side operation builds on.

``write_data_files(df, table_path, partition_columns, *, data_change=True,
max_records_per_file=None) -> list[AddFile]``: Parquet files written by Spark (staged and moved
into a local table, or straight to their final names: ``spark.direct`` decides), fsynced,
described by AddFiles with stats from the Parquet footers. ``PhysicalWrite``: how rows of a
column-mapped table are written. Nothing here commits: callers put the AddFiles into a core
transaction.
"""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.model import column_mapping as cm
from serialake.core.model import uniform
from serialake.core.model.actions import AddFile, decode_path
from serialake.core.model.partition_values import hive_escape
from serialake.core.model.paths import absolute_path
from serialake.core.model.schema import StructField, StructType
from serialake.core.model.stats import stats_columns
from serialake.exceptions import CorruptLogError, DeltaAnalysisException, StagingMismatchError
from serialake.spark import direct
from serialake.spark.columns import quote_name
from serialake.spark.footer_stats import file_stats
from serialake.spark.partition_values import HIVE_DEFAULT_PARTITION, hive_partition_values
from serialake.spark.schemas import has_spark_struct, to_delta_schema, to_spark_schema
from serialake.spark.staging import fsync_dirs, publish_staged, staged_files, staging_area
from serialake.storage import is_local_path

__all__ = ["PhysicalWrite", "format_partition_value", "session_zone", "write_data_files"]

_ROWS_METRIC = "rows"
_IO_THREADS = 8


def write_data_files(
    df: DataFrame,
    table_path: str,
    partition_columns: Sequence[str],
    *,
    data_change: bool = True,
    max_records_per_file: int | None = None,
    configuration: Mapping[str, str] | None = None,
    schema: StructType | None = None,
) -> list[AddFile]:
    """Write ``df`` as Parquet data files of the table and describe them as AddFiles.

    Spark writes into a fresh ``<table>/_staging/<uuid>`` (so concurrent writers never
    collide and readers never see partial files); each file is then renamed to
    ``<table>/<p1=v1>/.../part-<uuid>.<codec>.parquet``, fsynced with its directories, and
    the staging directory removed. Stats come from the Parquet footers (no second pass).
    ``partition_columns`` are names of ``df`` columns (the files do not hold them). Files
    without rows are dropped. ``configuration`` (the table properties) decides which
    columns get stats (``delta.dataSkippingNumIndexedCols``). Nothing is committed: put
    the AddFiles in a transaction.

    The job counts the rows it writes (an ``Observation``); when the files the driver finds
    hold another number, ``StagingMismatchError`` is raised and the found files are deleted:
    executors that do not share the driver's file system must never commit an empty write.

    That is the ``staged`` route (``spark.direct.data_io`` decides, from
    ``spark.serialake.dataFiles.io``). On the ``spark`` route (object storage Spark has a file
    system for) Spark writes the files straight to their final names and the job's record
    lists them (``spark.direct.write_direct``); on the ``python`` route (object storage Spark
    cannot open) the executors write them with pyarrow and the job returns their
    descriptions (``spark.remote.write_files``).

    On a column-mapped table (``schema``: the table's, with its column-mapping metadata) the
    files hold the physical names and the ids as Parquet field ids, and stats and partition
    values are keyed by physical names; under IcebergCompatV2 the partition columns are kept
    in the files too (``PhysicalWrite``).
    """
    table_path = _local_path(table_path)
    spark = df.sparkSession
    _ensure_micros_timestamps(spark)
    partition_columns = [_resolve(df.schema, c, table_path) for c in partition_columns]
    physical = PhysicalWrite.of(df, schema, partition_columns, configuration or {}, table_path)
    if physical is not None:
        df, partition_columns = physical.df, physical.partition_by
    stored = [f for f in df.schema.fields if f.name not in set(partition_columns)]
    indexed = stats_columns(to_delta_schema(T.StructType(stored)), configuration or {})
    spark_types = {f.name: f.dataType for f in df.schema.fields}
    zone = session_zone(spark)

    def values_of(rel_dir: str, where: str) -> dict[str, str | None]:
        """The partition values, keyed as the log keys them, of a file Spark wrote in ``rel_dir``."""
        values = _partition_values(rel_dir, partition_columns, spark_types, zone, where)
        return physical.partition_values(values) if physical is not None else values

    route = direct.data_io(spark, table_path)
    if route == "spark":  # Spark's own writer, straight to final names (``spark.direct``)
        adds = direct.write_direct(
            df,
            table_path,
            partition_columns,
            indexed,
            data_change=data_change,
            max_records_per_file=max_records_per_file,
            describe=lambda rel_dir, name: values_of(rel_dir, f"{table_path} ({name})"),
            stats_of=file_stats,
        )
        if is_local_path(table_path):
            fsync_dirs(table_path, {posixpath.dirname(decode_path(a.path)) for a in adds})
        return physical.finish(adds, rekey=False) if physical is not None else adds
    if route == "python":  # object storage Spark cannot open: the executors write the objects
        from serialake.spark import remote

        types = {f.name: f.data_type for f in to_delta_schema(df.schema).fields}
        adds = remote.write_files(
            df,
            table_path,
            partition_columns,
            [types[c] for c in partition_columns],
            indexed,
            file_stats,
            data_change=data_change,
            max_records_per_file=max_records_per_file,
            field_ids=physical.stored_fields if physical is not None else None,
            directory_names=physical.directory_names if physical is not None else None,
        )
        return physical.finish(adds) if physical is not None else adds
    observation = Observation(f"serialake_write_{uuid.uuid4().hex}")
    observed = df.observe(observation, F.count(F.lit(1)).alias(_ROWS_METRIC))
    writer = observed.write.format("parquet").mode("append")  # into the fresh, empty staging dir
    if partition_columns:
        writer = writer.partitionBy(*partition_columns)
    if max_records_per_file:
        writer = writer.option("maxRecordsPerFile", int(max_records_per_file))
    with staging_area(table_path) as staging:
        writer.save(staging)
        jobs = [(rel_dir, name, values_of(rel_dir, staging)) for rel_dir, name in staged_files(staging)]

        def finish(job: tuple[str, str, dict[str, str | None]]) -> AddFile | None:
            rel_dir, name, values = job
            target_dir = physical.directory(rel_dir) if physical is not None else None
            return publish_staged(table_path, staging, rel_dir, name, values, indexed, data_change, target_dir)

        with ThreadPoolExecutor(_IO_THREADS) as pool:
            adds = [a for a in pool.map(finish, jobs) if a is not None]
        _check_written_rows(table_path, staging, adds, observation)
        fsync_dirs(table_path, {posixpath.dirname(decode_path(a.path)) for a in adds})
        return physical.finish(adds, rekey=False) if physical is not None else adds


class PhysicalWrite:
    """How rows of a column-mapped table are written (``write_data_files``).

    ``df`` has the rows under physical names, each column carrying its id as
    ``parquet.field.id`` (nested struct fields too), which Spark's Parquet writer stores as
    field ids. ``partition_by`` are the columns Spark partitions by: the physical partition
    columns, or, where partition values must be materialized in the files (IcebergCompatV2),
    copies of them under hidden names, which ``directory`` and ``partition_values`` turn back
    into the physical names. Files written under IcebergCompatV2 are tagged as such
    (``core.uniform.COMPAT_TAG``), as Delta's writers do.
    """

    _COPY = "serialake_partition_"  # not '_'-prefixed: Spark's direct writer leaves it as a directory name

    def __init__(
        self,
        df: DataFrame,
        partition_by: list[str],
        physical: dict[str, str],
        stored_fields: list[StructField],
        compat: bool = False,
    ) -> None:
        self.compat = compat
        self.df = df
        self.partition_by = partition_by
        self.directory_names = physical  # partition_by name -> physical name
        self.stored_fields = stored_fields  # the table fields stored in files, in file order

    @classmethod
    def of(
        cls,
        df: DataFrame,
        schema: StructType | None,
        partition_columns: Sequence[str],
        configuration: Mapping[str, str],
        table: str,
    ) -> PhysicalWrite | None:
        """The physical write of ``df`` (the table's logical columns), None when the table is not mapped."""
        if schema is None or cm.mapping_mode(configuration, table) == "none":
            return None
        physical = cm.physical_schema(schema, spark_field_ids=True)
        by_name = {f.name.lower(): (f, p) for f, p in zip(schema.fields, physical.fields)}
        columns: list[Column] = []
        names: dict[str, str] = {}
        table_fields: dict[str, StructField] = {}
        for given in df.schema.fields:
            pair = by_name.get(given.name.lower())
            if pair is None:
                raise DeltaAnalysisException(
                    f"Column '{given.name}' written to table {table} is not in its schema "
                    f"(columns: {', '.join(schema.field_names)})"
                )
            f, p = pair
            spark_field = to_spark_schema(StructType((p,))).fields[0]
            col = F.col(quote_name(given.name))
            if has_spark_struct(spark_field.dataType):
                col = col.cast(spark_field.dataType)  # positional: renames nested fields, keeps their ids
            columns.append(col.alias(p.name, metadata=dict(spark_field.metadata)))
            names[given.name] = p.name
            table_fields[p.name] = f
        parts = [names[c] for c in partition_columns]
        materialize = uniform.compat_v2(configuration)
        if materialize and parts:
            copies = [f"{cls._COPY}{i}" for i in range(len(parts))]
            columns.extend(F.col(quote_name(c)).alias(copy) for c, copy in zip(partition_columns, copies))
            partition_by, mapping = copies, dict(zip(copies, parts))
        else:
            partition_by, mapping = parts, {c: c for c in parts}
        kept = [p for p in names.values() if materialize or p not in set(parts)]
        return cls(df.select(*columns), partition_by, mapping, [table_fields[p] for p in kept], materialize)

    def directory(self, rel_dir: str) -> str:
        """A staged directory (``partition_by`` names) as the table's (physical names)."""
        out = []
        for segment in rel_dir.split(os.sep):
            key, sep, value = segment.partition("=")
            name = self.directory_names.get(unquote(key))
            out.append(f"{hive_escape(name)}={value}" if sep and name is not None else segment)
        return os.sep.join(out)

    def partition_values(self, values: Mapping[str, str | None]) -> dict[str, str | None]:
        """Partition values keyed by ``partition_by`` names, keyed by physical names."""
        return {self.directory_names.get(k, k): v for k, v in values.items()}

    def finish(self, adds: Sequence[AddFile], *, rekey: bool = True) -> list[AddFile]:
        """The written files' AddFiles: partition values keyed by physical names (``rekey``: the
        executors wrote them under ``partition_by`` names) and, under IcebergCompatV2, tagged."""
        out = list(adds)
        if rekey and any(k != v for k, v in self.directory_names.items()):
            out = [replace(a, partition_values=self.partition_values(a.partition_values or {})) for a in out]
        if self.compat:
            out = [replace(a, tags={**(a.tags or {}), uniform.COMPAT_TAG: uniform.COMPAT_VERSION}) for a in out]
        return out


def _check_written_rows(table_path: str, staging: str, adds: Sequence[AddFile], observation: Observation) -> None:
    """Raise ``StagingMismatchError`` (deleting ``adds``) unless they hold the rows the job wrote.

    Files without rows were dropped already, so the rows of ``adds`` are all the driver found.
    A job whose metrics did not arrive (an empty result) is not checked.
    """
    job_rows = observation.get.get(_ROWS_METRIC)
    found_rows = sum(a.num_records or 0 for a in adds)
    if job_rows is None or int(job_rows) == found_rows:
        return
    for add in adds:
        try:
            os.remove(absolute_path(table_path, add.path))
        except OSError:
            pass
    raise StagingMismatchError(
        table=table_path, staging=staging, job_rows=int(job_rows), found_rows=found_rows, found_files=len(adds)
    )


def _local_path(path: str) -> str:
    from serialake.storage import normalize_table_path

    return normalize_table_path(path)


def _ensure_micros_timestamps(spark: SparkSession) -> None:
    """Make Spark write INT64 micros timestamps: INT96 has no footer stats and is deprecated."""
    key = "spark.sql.parquet.outputTimestampType"
    if spark.conf.get(key, "INT96") != "TIMESTAMP_MICROS":
        spark.conf.set(key, "TIMESTAMP_MICROS")


def _resolve(schema: T.StructType, name: str, table: str) -> str:
    for f in schema.fields:
        if f.name.lower() == name.lower():
            return f.name
    raise DeltaAnalysisException(
        f"Partition column '{name}' is not a column of the data written to {table} "
        f"(columns: {', '.join(schema.fieldNames())})"
    )


def _partition_values(
    rel_dir: str,
    partition_columns: Sequence[str],
    spark_types: dict[str, T.DataType],
    zone: dt.tzinfo,
    where: str,
) -> dict[str, str | None]:
    """Partition values of a file Spark wrote, from its Hive-style directory names (``where``: for errors)."""
    segments = [s for s in rel_dir.split(os.sep) if s]
    if len(segments) != len(partition_columns):
        raise CorruptLogError(f"Unexpected directory '{rel_dir}' written by Spark in {where}")
    try:
        raw = hive_partition_values(segments, partition_columns)
    except ValueError as e:
        raise CorruptLogError(f"{e} (in {where})") from None
    return {c: format_partition_value(v, spark_types[c], zone) for c, v in raw.items()}


def format_partition_value(text: str | None, spark_type: T.DataType, zone: dt.tzinfo) -> str | None:
    """Spark's directory value (already unescaped) as the Delta log string."""
    if text is None or text == HIVE_DEFAULT_PARTITION:
        return None
    if isinstance(spark_type, T.TimestampType):
        value = dt.datetime.fromisoformat(text)
        if value.tzinfo is None:
            value = value.replace(tzinfo=zone)
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(spark_type, T.TimestampNTZType):
        return dt.datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(spark_type, T.BooleanType):
        return text.lower()
    return text


def session_zone(spark: SparkSession) -> dt.tzinfo:
    """The session time zone (Spark formats timestamp partition directories in it)."""
    name = (spark.conf.get("spark.sql.session.timeZone") or "UTC").strip()
    if name.upper() in ("UTC", "Z", "GMT", "ETC/UTC"):
        return dt.UTC
    if name[:1] in "+-":
        sign = -1 if name[0] == "-" else 1
        hours, _, minutes = name[1:].partition(":")
        return dt.timezone(sign * dt.timedelta(hours=int(hours), minutes=int(minutes or 0)))
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)
