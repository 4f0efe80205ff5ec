"""Data files read by Spark: ``read_files_df``, the one reader every Spark-side operation builds on.

``read_files_df(spark, snapshot, files, columns=None, with_file_path=False) -> DataFrame``: the
rows of exactly ``files`` with partition columns re-attached, in table-schema order, rows
deleted by deletion vectors dropped. Also the typed partition values of a file as a Spark row
(``partition_schema``, ``partition_row``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.model import column_mapping as cm
from serialake.core.model.actions import AddFile
from serialake.core.model.paths import absolute_path
from serialake.core.model.schema import StructField, StructType, physical_name
from serialake.spark import direct
from serialake.spark.columns import column_mapping_mode, data_fields, has_struct, quote_name, select_fields
from serialake.spark.partition_values import typed_partition_value
from serialake.spark.schemas import to_spark_schema
from serialake.storage import is_local_path

if TYPE_CHECKING:
    from serialake.core.log.snapshot import Snapshot

__all__ = [
    "FILE_COLUMN",
    "ROW_INDEX_COLUMN",
    "partition_row",
    "partition_schema",
    "read_files_df",
]

FILE_COLUMN = "_file"
ROW_INDEX_COLUMN = "_row_index"
_KEY_COLUMN = "__serialake_file_key"


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


def _empty_df(spark: SparkSession, fields: list[StructField], with_file_path: bool) -> DataFrame:
    spark_schema = to_spark_schema(StructType(tuple(fields)))
    if with_file_path:
        spark_schema = spark_schema.add(FILE_COLUMN, T.StringType()).add(ROW_INDEX_COLUMN, T.LongType())
    return spark.createDataFrame([], spark_schema)


def _logical_column(f: StructField, mode: str) -> Column:
    """The column of a stored field under its logical name (nested names via a struct cast)."""
    if mode == "none":
        return F.col(quote_name(f.name))
    col = F.col(quote_name(physical_name(f)))
    if has_struct(f.data_type):
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
