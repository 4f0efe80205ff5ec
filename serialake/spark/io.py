"""Data files in and out of Spark: the internals every Spark-side operation builds on.

Stable entry points (used by write/read and by DML: DELETE, UPDATE, MERGE, OPTIMIZE):

- ``write_data_files(df, table_path, partition_columns, *, data_change=True,
  max_records_per_file=None) -> list[AddFile]``: Parquet files written by Spark (staged and
  moved into a local table, or straight to their final names: ``spark.direct`` decides),
  fsynced, described by AddFiles with stats from the Parquet footers.
- ``read_files_df(spark, snapshot, files, columns=None, with_file_path=False) -> DataFrame``:
  the rows of exactly ``files`` with partition columns re-attached, in table-schema order.
- ``to_delta_schema`` / ``to_spark_schema``: schema conversion (both sides speak Spark's JSON).

Nothing here commits: callers put the AddFiles (and RemoveFiles) into a core transaction.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.model import column_mapping as cm
from serialake.core.model import properties as props
from serialake.core.model import uniform
from serialake.core.model.actions import AddFile, decode_path, encode_path
from serialake.core.model.constraints import GENERATION_EXPRESSION
from serialake.core.model.partition_values import hive_escape, parse_partition_value
from serialake.core.model.paths import absolute_path
from serialake.core.model.schema import (
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    physical_name,
)
from serialake.core.model.stats import stats_columns
from serialake.exceptions import (
    CorruptLogError,
    DeltaAnalysisException,
    StagingMismatchError,
    StorageWriteError,
    UnsupportedFeatureError,
)
from serialake.spark import direct
from serialake.storage import is_local_path

if TYPE_CHECKING:
    from serialake.core.log.snapshot import Snapshot

__all__ = [
    "FILE_COLUMN",
    "HIVE_DEFAULT_PARTITION",
    "format_partition_value",
    "session_zone",
    "ROW_INDEX_COLUMN",
    "STAGING_DIR",
    "STRING_STATS_PREFIX",
    "WIDENING",
    "WRITE_SIDE_METADATA",
    "absolute_path",
    "column_mapping_mode",
    "data_fields",
    "data_write_error",
    "file_stats",
    "fsync_dirs",
    "hive_partition_values",
    "is_hidden",
    "partition_row",
    "partition_schema",
    "typed_partition_value",
    "publish_staged",
    "quote_name",
    "conform",
    "has_spark_struct",
    "read_files_df",
    "select_fields",
    "staging_area",
    "stats_columns",
    "to_delta_schema",
    "to_spark_schema",
    "write_data_files",
]

STAGING_DIR = "_staging"
# Column metadata only writers use: a generated column's expression, an identity column's state.
WRITE_SIDE_METADATA = (GENERATION_EXPRESSION, "delta.identity.", "delta.columnMapping.")
# Widening casts Delta applies on write without mergeSchema (data type -> table types).
WIDENING: dict[str, frozenset[str]] = {
    "byte": frozenset({"short", "integer", "long"}),
    "short": frozenset({"integer", "long"}),
    "integer": frozenset({"long"}),
    "float": frozenset({"double"}),
}
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
FILE_COLUMN = "_file"
ROW_INDEX_COLUMN = "_row_index"
STRING_STATS_PREFIX = 32  # Delta's default: string min/max hold the first 32 characters
_MAX_CHAR = "\U0010ffff"  # appended to a truncated max so it stays an upper bound
_KEY_COLUMN = "__serialake_file_key"
_ROWS_METRIC = "rows"
_IO_THREADS = 8
_MIN_MAX_TYPES = frozenset({"byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz", "string"})


# ---------------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------------


def to_delta_schema(spark_schema: T.StructType) -> StructType:
    """The Delta schema of a Spark ``StructType``."""
    return StructType.from_json(spark_schema.json())


def to_spark_schema(schema: StructType) -> T.StructType:
    """The Spark ``StructType`` of a Delta schema, without Delta's write-side column metadata.

    A generated column's expression (and an identity column's state) stays in the table
    metadata: DataFrames read from the table do not carry it, as with Delta.
    """
    value = json.loads(schema.to_json())
    _drop_write_side_metadata(value)
    result = T.StructType.fromJson(value)
    assert isinstance(result, T.StructType)
    return result


def _drop_write_side_metadata(value: Any) -> None:
    """Remove ``WRITE_SIDE_METADATA`` keys from the fields of a schema's JSON value, at any depth."""
    if isinstance(value, dict):
        meta = value.get("metadata")
        if isinstance(meta, dict) and any(k.startswith(WRITE_SIDE_METADATA) for k in meta):
            value["metadata"] = {k: v for k, v in meta.items() if not k.startswith(WRITE_SIDE_METADATA)}
        for key in ("fields", "type", "elementType", "keyType", "valueType"):
            inner = value.get(key)
            if isinstance(inner, list):
                for item in inner:
                    _drop_write_side_metadata(item)
            elif isinstance(inner, dict):
                _drop_write_side_metadata(inner)


def conform(col: Column, given: T.DataType, target: T.DataType) -> Column:
    """``col`` (of type ``given``) as ``target``: struct fields matched by name at any depth, fields
    ``given`` lacks NULL, other types cast. Spark's own struct cast is positional and needs as
    many fields on both sides, which an evolved schema (new nested fields) does not have."""
    if given.simpleString().lower() == target.simpleString().lower():
        return col.cast(target)
    if isinstance(given, T.StructType) and isinstance(target, T.StructType):
        have = {f.name.lower(): f for f in given.fields}
        parts = []
        for f in target.fields:
            g = have.get(f.name.lower())
            parts.append(
                F.lit(None).cast(f.dataType) if g is None else conform(col.getField(g.name), g.dataType, f.dataType)
            )
        return F.when(col.isNull(), F.lit(None).cast(target)).otherwise(
            F.struct(*[v.alias(f.name) for v, f in zip(parts, target.fields)])
        )
    if isinstance(given, T.ArrayType) and isinstance(target, T.ArrayType) and has_spark_struct(target):
        return F.transform(col, lambda x: conform(x, given.elementType, target.elementType))
    if isinstance(given, T.MapType) and isinstance(target, T.MapType) and has_spark_struct(target.valueType):
        return F.transform_values(col, lambda _, v: conform(v, given.valueType, target.valueType))
    return col.cast(target)


def has_spark_struct(t: T.DataType) -> bool:
    """Whether a Spark type holds a struct (itself, or as array element or map value)."""
    if isinstance(t, T.StructType):
        return True
    if isinstance(t, T.ArrayType):
        return has_spark_struct(t.elementType)
    if isinstance(t, T.MapType):
        return has_spark_struct(t.valueType)
    return False


def column_mapping_mode(snapshot: Snapshot) -> str:
    """``none``, ``name`` or ``id`` (``delta.columnMapping.mode``)."""
    return str(props.get(snapshot.configuration, props.COLUMN_MAPPING_MODE)).lower()


def data_fields(schema: StructType, partition_columns: Sequence[str]) -> list[StructField]:
    """The fields stored in data files: the schema without its partition columns."""
    parts = {c.lower() for c in partition_columns}
    return [f for f in schema.fields if f.name.lower() not in parts]


def _has_struct(data_type: DataType) -> bool:
    if isinstance(data_type, StructType):
        return True
    if isinstance(data_type, ArrayType):
        return _has_struct(data_type.element_type)
    if isinstance(data_type, MapType):
        return _has_struct(data_type.key_type) or _has_struct(data_type.value_type)
    return False


# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------


def _glob_escape(path: str) -> str:
    """Escape Hadoop glob characters: Spark globs any path containing them."""
    out = []
    for ch in path:
        if ch in "{}[]*?\\":
            out.append("\\")
        out.append(ch)
    return "".join(out)


def _spark_file_key(file_path: Column) -> Column:
    """Spark's ``_metadata.file_path`` (a percent-encoded URI) as a decoded local path.

    ``+`` is protected first: ``url_decode`` would turn it into a space.
    """
    decoded = F.url_decode(F.replace(file_path, F.lit("+"), F.lit("%2B")))
    return F.regexp_replace(decoded, r"^file:(//)?", "")


# ---------------------------------------------------------------------------------------------
# Partition values: log strings <-> Python values
# ---------------------------------------------------------------------------------------------


def typed_partition_value(value: str | None, data_type: DataType, *, table: str = "", column: str = "") -> Any:
    """A partition value string from the log as the Python value Spark expects for the type.

    ``core.partition_values.parse_partition_value`` (timestamps without a zone are UTC; an
    empty string is NULL except for strings), with an error naming the table and column.
    """
    try:
        return parse_partition_value(value, data_type)
    except ValueError as e:
        raise CorruptLogError(f"Table {table}: partition column '{column}': {e}") from None


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


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


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
        jobs = [(rel_dir, name, values_of(rel_dir, staging)) for rel_dir, name in _staged_files(staging)]

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


def require_local_data(table_path: str, what: str) -> None:
    """Refuse, clearly, local-only data-file work (a staging directory) on a table on object storage.

    Without this, a staging path like ``s3://b/t/_staging`` would become a local directory
    named ``s3:``; S3 tables' files are written to their final names (``spark.remote``).
    """
    if not is_local_path(table_path):
        raise UnsupportedFeatureError(
            f"Table {table_path}: serialake cannot {what} on object storage yet (its transaction log "
            "works there: serialake.core commits, reads and checkpoints on S3, and delta-rs can write the data). "
            "Nothing was written."
        )


@contextmanager
def staging_area(table_path: str) -> Iterator[str]:
    """A fresh ``<table>/_staging/<uuid>`` for files being written, removed (with ``_staging`` if
    then empty) on exit: concurrent writers never collide and readers never see partial files."""
    require_local_data(table_path, "write data files")
    staging = os.path.join(table_path, STAGING_DIR, uuid.uuid4().hex)
    try:
        _make_staging_dir(staging)
    except OSError as e:
        raise data_write_error(table_path, staging, e) from e
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_if_empty(os.path.join(table_path, STAGING_DIR))


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


def _staged_files(staging: str) -> list[tuple[str, str]]:
    """``(relative dir, file name)`` of the Parquet files Spark wrote (no .crc, no markers)."""
    out = []
    for root, dirs, files in os.walk(staging):
        dirs.sort()
        rel = os.path.relpath(root, staging)
        for name in sorted(files):
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                out.append(("" if rel == "." else rel, name))
    return out


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


def hive_partition_values(segments: Sequence[str], partition_columns: Sequence[str]) -> dict[str, str | None]:
    """Unescaped values of ``col=value`` directory names, one per partition column in order.

    ``ValueError`` naming the directory that is not its column's partition.
    """
    values: dict[str, str | None] = {}
    for column, segment in zip(partition_columns, segments):
        key, sep, raw = segment.partition("=")
        if not sep or unquote(key).lower() != column.lower():
            raise ValueError(f"Directory '{segment}' is not a partition of column '{column}'")
        values[column] = None if raw == HIVE_DEFAULT_PARTITION else unquote(raw)
    return values


def is_hidden(name: str, partition_columns: Sequence[str]) -> bool:
    """Delta's rule: names starting with '_' or '.' are not data, except '_col=' partitions."""
    if not name.startswith(("_", ".")):
        return False
    return not any(name.startswith(f"{c}=") for c in partition_columns)


def publish_staged(
    table_path: str,
    staging: str,
    rel_dir: str,
    name: str,
    partition_values: dict[str, str | None],
    indexed: list[tuple[tuple[str, ...], DataType]],
    data_change: bool,
    target_dir: str | None = None,
) -> AddFile | None:
    """Move one staged file into the table, fsync it, and build its AddFile (None if empty).

    ``target_dir``: its directory in the table (default: ``rel_dir``, the staged one)."""
    source = os.path.join(staging, rel_dir, name)
    metadata = pq.read_metadata(source)
    if metadata.num_rows == 0:
        return None
    stats = file_stats(metadata, indexed)
    suffix = name[name.index(".") :] if "." in name else ".parquet"
    new_name = f"part-{uuid.uuid4()}{suffix}"
    rel_dir = rel_dir if target_dir is None else target_dir
    rel_path = posixpath.join(rel_dir.replace(os.sep, "/"), new_name) if rel_dir else new_name
    target = os.path.join(table_path, rel_path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.rename(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return AddFile(
        path=encode_path(rel_path),
        partition_values=partition_values,
        size=st.st_size,
        modification_time=int(st.st_mtime * 1000),
        data_change=data_change,
        stats=stats,
    )


def fsync_dirs(table_path: str, rel_dirs: Iterable[str]) -> None:
    """fsync every directory holding a new file and its ancestors up to the table root."""
    todo: set[str] = {table_path}
    for rel in rel_dirs:
        parts = [p for p in rel.split("/") if p]
        for i in range(1, len(parts) + 1):
            todo.add(os.path.join(table_path, *parts[:i]))
    for d in sorted(todo, key=len, reverse=True):
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def data_write_error(table: str, path: str, error: OSError) -> StorageWriteError:
    """The error for a data file the driver could not write: table, file, errno and what to do."""
    from serialake.storage.base import errno_text, os_error_advice

    return StorageWriteError(
        f"Table {table}: writing data file {path} failed ({errno_text(error)}); "
        f"{os_error_advice(error.errno, os.path.dirname(path))}. Nothing was committed.",
        table=table,
        path=path,
        errno=error.errno,
        strerror=error.strerror,
    )


def _make_staging_dir(staging: str) -> None:
    """Create ``staging`` (and ``_staging``). Another writer leaving its staging area removes
    ``_staging`` when it is empty, which can happen between our creating ``_staging`` and our
    directory inside it (ENOENT): create again. Once ours exists, ``_staging`` is not empty."""
    for _ in range(_STAGING_MKDIR_ATTEMPTS - 1):
        try:
            os.makedirs(staging)
            return
        except FileNotFoundError:
            continue
    os.makedirs(staging)


_STAGING_MKDIR_ATTEMPTS = 64


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Stats from Parquet footers
# ---------------------------------------------------------------------------------------------


def file_stats(metadata: pq.FileMetaData, indexed: list[tuple[tuple[str, ...], DataType]]) -> str:
    """Delta stats JSON (numRecords, minValues, maxValues, nullCount) from a Parquet footer.

    Row groups are combined; a column whose footer lacks min/max in any row group gets no
    min/max. Floats get no min/max (footers do not account for NaN, which Spark sorts
    last); booleans and binaries none either, as in Delta. Strings keep 32 characters, the
    max then followed by U+10FFFF; timestamp bounds are widened to whole milliseconds.
    """
    by_path = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for path, data_type in indexed:
        index = by_path.get(".".join(path))
        if index is None:
            continue
        lo, hi, null_count = _column_stats(metadata, index)
        if null_count is not None:
            _put(nulls, path, null_count)
        type_name = data_type.to_json_value() if isinstance(data_type, PrimitiveType) else "decimal"
        if lo is None or hi is None or not (type_name in _MIN_MAX_TYPES or type_name == "decimal"):
            continue
        lo_json, hi_json = _stat_value(lo, type_name, upper=False), _stat_value(hi, type_name, upper=True)
        if lo_json is not None and hi_json is not None:
            _put(mins, path, lo_json)
            _put(maxs, path, hi_json)
    stats = {"numRecords": metadata.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return _json(stats)


def _column_stats(metadata: pq.FileMetaData, index: int) -> tuple[Any, Any, int | None]:
    lo: Any = None
    hi: Any = None
    nulls: int | None = 0
    has_min_max = True
    for r in range(metadata.num_row_groups):
        column = metadata.row_group(r).column(index)
        st = column.statistics
        if st is None:
            return None, None, None
        if st.has_null_count and nulls is not None:
            nulls += st.null_count
        else:
            nulls = None
        if not st.has_min_max:
            if column.num_values > (st.null_count if st.has_null_count else -1):
                has_min_max = False
            continue
        lo = st.min if lo is None or st.min < lo else lo
        hi = st.max if hi is None or st.max > hi else hi
    return (lo, hi, nulls) if has_min_max else (None, None, nulls)


def _stat_value(value: Any, type_name: str, *, upper: bool) -> Any:
    """A footer min/max as Delta writes it in stats JSON (None: leave it out)."""
    if type_name == "string":
        if not isinstance(value, str):
            return None
        if len(value) <= STRING_STATS_PREFIX:
            return value
        prefix = value[:STRING_STATS_PREFIX]
        return prefix + _MAX_CHAR if upper else prefix
    if type_name == "date":
        return value.isoformat() if isinstance(value, dt.date) else None
    if type_name in ("timestamp", "timestamp_ntz"):
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        millis = value.replace(microsecond=value.microsecond - value.microsecond % 1000)
        if upper and millis != value:
            millis += dt.timedelta(milliseconds=1)
        text = millis.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis.microsecond // 1000:03d}"
        return text + "Z" if type_name == "timestamp" else text
    if type_name == "decimal":
        return value if isinstance(value, Decimal) and value.is_finite() else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def _json(value: Any) -> str:
    """Compact JSON that writes decimals as exact numbers."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")
    return json.dumps(value, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def read_files_df(
    spark: SparkSession,
    snapshot: Snapshot,
    files: Sequence[AddFile],
    columns: Sequence[str] | None = None,
    with_file_path: bool = False,
) -> DataFrame:
    """The rows of exactly ``files`` of ``snapshot``, columns in table-schema order.

    Partition columns are re-attached with their types by a broadcast join on the file
    path. ``with_file_path`` adds ``_file`` (the AddFile path as in the log) and
    ``_row_index`` (the row's position in its Parquet file, what deletion vectors refer
    to). Column-mapped tables are read by physical name and shown by logical name.
    ``columns`` selects (and orders) logical columns. No files: an empty DataFrame.
    Files on object storage Spark cannot open are read by the executors
    (``spark.remote.read_files``); those it can, by Spark under their ``s3a://`` names.
    """
    schema = snapshot.schema
    table = snapshot.table_path
    parts = list(snapshot.partition_columns)
    out_fields = select_fields(schema, columns, table)
    extra = [FILE_COLUMN, ROW_INDEX_COLUMN] if with_file_path else []
    if not files:
        return _empty_df(spark, out_fields, with_file_path)
    mode = column_mapping_mode(snapshot)
    route = direct.data_io(spark, table)
    if route == "python":  # object storage Spark cannot open: the executors read the objects
        from serialake.spark import remote

        spark_schema = to_spark_schema(StructType(tuple(out_fields)))
        if with_file_path:
            spark_schema = spark_schema.add(FILE_COLUMN, T.StringType(), False).add(
                ROW_INDEX_COLUMN, T.LongType(), False
            )
        return remote.read_files(
            spark, table, out_fields, spark_schema, parts, mode != "none", files, with_file_path=with_file_path
        )
    stored = data_fields(schema, parts)
    file_schema = StructType(tuple(stored))
    if mode != "none":
        file_schema = cm.physical_schema(file_schema)
    paths = [absolute_path(table, f.path) for f in files]
    if not is_local_path(table):  # Spark's own file system for the store (``s3a://``)
        paths = [direct.hadoop_uri(p) for p in paths]
    raw = spark.read.schema(to_spark_schema(file_schema)).parquet(*[_glob_escape(p) for p in paths])
    has_dvs = any(f.deletion_vector is not None for f in files)
    need_join = bool(parts) or with_file_path or has_dvs
    selected = [_logical_column(f, mode) for f in stored]
    if need_join:
        selected.append(_spark_file_key(F.col("_metadata.file_path")).alias(_KEY_COLUMN))
    if with_file_path or has_dvs:
        selected.append(F.col("_metadata.row_index").alias(ROW_INDEX_COLUMN))
    df = raw.select(*selected)
    if need_join:
        df = _attach_files(df, _files_df(spark, snapshot, files, paths, mode), table)
    if has_dvs:
        df = _drop_deleted_rows(spark, snapshot, df, files, paths)
    return df.select(*[F.col(quote_name(f.name)) for f in out_fields], *extra)


def select_fields(schema: StructType, columns: Sequence[str] | None, table: str) -> list[StructField]:
    """The fields named by ``columns`` (case-insensitive; all when None), or an error naming the column."""
    if columns is None:
        return list(schema.fields)
    out = []
    for name in columns:
        f = schema.field(name)
        if f is None:
            raise DeltaAnalysisException(
                f"Column '{name}' does not exist in table {table} (columns: {', '.join(schema.field_names)})"
            )
        out.append(f)
    return out


def _empty_df(spark: SparkSession, fields: list[StructField], with_file_path: bool) -> DataFrame:
    spark_schema = to_spark_schema(StructType(tuple(fields)))
    if with_file_path:
        spark_schema = spark_schema.add(FILE_COLUMN, T.StringType()).add(ROW_INDEX_COLUMN, T.LongType())
    return spark.createDataFrame([], spark_schema)


def quote_name(name: str) -> str:
    """``name`` as a backquoted Spark identifier."""
    return "`" + name.replace("`", "``") + "`"


def _logical_column(f: StructField, mode: str) -> Column:
    """The column of a stored field under its logical name (nested names via a struct cast)."""
    if mode == "none":
        return F.col(quote_name(f.name))
    col = F.col(quote_name(physical_name(f)))
    if _has_struct(f.data_type):
        col = col.cast(to_spark_schema(StructType((f,))).fields[0].dataType)
    return col.alias(f.name)


def _files_df(
    spark: SparkSession, snapshot: Snapshot, files: Sequence[AddFile], paths: Sequence[str], mode: str
) -> DataFrame:
    """A small DataFrame: file key, ``_file`` and the typed partition values of each file."""
    rows = [[path, add.path, *partition_row(snapshot, add, mode)] for add, path in zip(files, paths)]
    spark_schema = T.StructType(
        [T.StructField(_KEY_COLUMN, T.StringType(), False), T.StructField(FILE_COLUMN, T.StringType(), False)]
        + list(partition_schema(snapshot).fields)
    )
    return spark.createDataFrame(rows, spark_schema)


def partition_schema(snapshot: Snapshot) -> T.StructType:
    """The table's partition columns as a Spark schema, in ``partition_columns`` order."""
    fields = (snapshot.schema.field(c) for c in snapshot.partition_columns)
    return to_spark_schema(StructType(tuple(f for f in fields if f is not None)))


def partition_row(snapshot: Snapshot, add: AddFile, mode: str | None = None) -> list[Any]:
    """``add``'s partition values typed as Spark expects, in ``partition_schema`` order.

    A value is looked up by the column's physical name (column mapping ``mode``), its name,
    then its name ignoring case.
    """
    mode = column_mapping_mode(snapshot) if mode is None else mode
    pv = add.partition_values or {}
    row: list[Any] = []
    for f in (snapshot.schema.field(c) for c in snapshot.partition_columns):
        if f is None:
            continue
        raw = pv.get(physical_name(f)) if mode != "none" and physical_name(f) in pv else pv.get(f.name)
        if raw is None and f.name not in pv:
            raw = next((v for k, v in pv.items() if k.lower() == f.name.lower()), None)
        row.append(typed_partition_value(raw, f.data_type, table=snapshot.table_path, column=f.name))
    return row


def _attach_files(df: DataFrame, files_df: DataFrame, table: str) -> DataFrame:
    """Join each row to its file's columns; a row whose file path does not match fails the job.

    A left join plus a check rather than an inner join: a path-normalisation mismatch must
    be an error, never silently dropped rows.
    """
    # Joined on an expression, not a column name: a USING join's projection would hide Spark's
    # ``_metadata`` column from the result (``select("_metadata.file_path")``).
    right = files_df.withColumnRenamed(_KEY_COLUMN, _KEY_COLUMN + "_files")
    on = df[_KEY_COLUMN] == right[_KEY_COLUMN + "_files"]
    joined = df.join(F.broadcast(right), on, "left").drop(_KEY_COLUMN + "_files")
    message = F.concat(
        F.lit(f"Table {table}: Spark read data file '"), F.col(_KEY_COLUMN), F.lit("' that matches no file of the scan")
    )
    return joined.filter(F.when(F.col(FILE_COLUMN).isNull(), F.raise_error(message)).otherwise(F.lit(True)))


def _drop_deleted_rows(
    spark: SparkSession, snapshot: Snapshot, df: DataFrame, files: Sequence[AddFile], paths: Sequence[str]
) -> DataFrame:
    """Remove rows marked deleted by the files' deletion vectors: the one place DVs apply.

    ``df`` carries the file key and ``_row_index``; a left anti join against the deleted
    ``(file, row index)`` pairs drops them. The pairs travel as one Arrow batch (built
    from the vectors' numpy arrays), so large vectors cost little on the driver.
    """
    import numpy as np
    import pyarrow as pa

    from serialake.core.dv.deletion_vectors import read_deletion_vector

    keys: list[Any] = []
    indexes: list[Any] = []
    for add, path in zip(files, paths):
        if add.deletion_vector is None:
            continue
        rows = read_deletion_vector(snapshot.table_path, add.deletion_vector).to_numpy().astype(np.int64)
        if len(rows):
            keys.append(pa.repeat(pa.scalar(path, pa.string()), len(rows)))
            indexes.append(pa.array(rows, pa.int64()))
    if not keys:
        return df
    batch = pa.table({_KEY_COLUMN: pa.concat_arrays(keys), ROW_INDEX_COLUMN: pa.concat_arrays(indexes)})
    schema = T.StructType(
        [T.StructField(_KEY_COLUMN, T.StringType(), False), T.StructField(ROW_INDEX_COLUMN, T.LongType(), False)]
    )
    deleted = _arrow_to_df(spark, batch, schema)
    deleted = deleted.toDF(_KEY_COLUMN + "_dv", ROW_INDEX_COLUMN + "_dv")
    on = (df[_KEY_COLUMN] == deleted[_KEY_COLUMN + "_dv"]) & (df[ROW_INDEX_COLUMN] == deleted[ROW_INDEX_COLUMN + "_dv"])
    return df.join(F.broadcast(deleted), on, "left_anti")  # on an expression: ``_metadata`` stays reachable


def _arrow_to_df(spark: SparkSession, table: Any, schema: T.StructType) -> DataFrame:
    """A DataFrame from a pyarrow Table (Spark 4 takes Arrow directly; older: via pandas)."""
    try:
        return spark.createDataFrame(table, schema)
    except (TypeError, ValueError):
        return spark.createDataFrame(table.to_pandas(), schema)
