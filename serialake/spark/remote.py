"""Spark jobs that write and read a table's data files on object storage, from the executors.

This pyspark has no S3 file system (no S3A connector), so Spark cannot open ``s3://``
paths itself. The executors do the I/O in Python instead, with pyarrow for Parquet and
``storage.datafiles`` (obstore) for the objects:

- **Writing** (``write_files``): the rows reach each task as Arrow batches
  (``mapInArrow``), sorted within the task by the partition columns as Spark's own writer
  sorts them; the task writes Parquet straight to final, unique object names
  ``<table>/<col>=<value>/part-<uuid>.c000.<codec>.parquet`` (S3 has no rename, so
  nothing is staged and moved) and returns one row per file: its path, partition values,
  size, row count and footer statistics. The driver takes the file list from the job's
  result, never from a listing: what it commits is exactly what the job wrote. Files of a
  failed or retried task attempt are never reported, so never committed (VACUUM removes
  them).
- **Reading** (``read_files``): the files to read (with their partition values and
  deletion vectors) are spread over tasks, each reading its files with pyarrow
  (``spark.arrow_reader``, the reader the streaming source uses too), dropping
  the rows its deletion vectors mark, adding the partition columns and, when asked, the
  file path and row index; columns a file lacks are NULL, column-mapped columns are found
  by their physical names.

The executors reach the store with the driver's resolved settings (``datafiles.Access``),
shipped with the job. Both run in the executors' Python, which must have pyarrow and
serialake (``spark.pyspark.python``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyspark.sql.functions as F
import pyspark.sql.types as T
from pyspark.sql import DataFrame, SparkSession

from serialake.core.model.actions import AddFile, encode_path
from serialake.core.model.partition_values import format_partition_value, hive_escape
from serialake.core.model.schema import DataType, StructField
from serialake.spark.arrow_reader import read_bins, read_task
from serialake.spark.backend import backend
from serialake.spark.errors import raising_executor_errors
from serialake.storage.datafiles import Access

__all__ = ["read_files", "write_files"]

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

_WRITTEN = T.StructType(
    [
        T.StructField("path", T.StringType(), False),
        T.StructField("partition_values", T.StringType(), False),
        T.StructField("size", T.LongType(), False),
        T.StructField("modification_time", T.LongType(), False),
        T.StructField("num_records", T.LongType(), False),
        T.StructField("stats", T.StringType(), True),
    ]
)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WriteTask:
    """What every write task needs (pickled into the job)."""

    access: Access
    table: str
    partition_columns: tuple[str, ...]
    partition_types: tuple[DataType, ...]
    data_columns: tuple[str, ...]
    indexed: tuple[tuple[tuple[str, ...], DataType], ...]
    max_records: int
    codec: str
    stats_of: Callable[[Any, list[tuple[tuple[str, ...], DataType]]], str]  # footer -> Delta stats JSON
    field_ids: tuple[StructField, ...] | None = None  # column-mapped: the table fields of data_columns
    directory_names: tuple[tuple[str, str], ...] = ()  # partition column -> name in directory names

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        written: list[dict[str, Any]] = []
        current: _OpenFile | None = None
        file_schema: Any = None  # the data columns' schema with field ids (column mapping), made once
        try:
            for batch in batches:
                data = batch.select(list(self.data_columns))
                if self.field_ids is not None:
                    if file_schema is None:
                        from serialake.core.model.column_mapping import arrow_with_field_ids

                        file_schema = arrow_with_field_ids(data.schema, list(self.field_ids))
                    data = pa.RecordBatch.from_arrays(data.columns, schema=file_schema)
                for key, piece in self._runs(batch, data):
                    start = 0
                    while start < piece.num_rows:
                        if current is not None and (
                            current.key != key or (self.max_records and current.rows >= self.max_records)
                        ):
                            written.append(current.close())
                            current = None
                        if current is None:
                            current = _OpenFile(self, key, piece.schema)
                        room = self.max_records - current.rows if self.max_records else piece.num_rows
                        part = piece.slice(start, min(room, piece.num_rows - start))
                        current.write(part)
                        start += part.num_rows
            if current is not None:
                written.append(current.close())
                current = None
        except BaseException:
            if current is not None:
                current.abandon()
            raise
        yield pa.RecordBatch.from_pylist(written, schema=_written_arrow_schema())

    def _runs(self, batch: Any, data: Any) -> Iterator[tuple[tuple[str | None, ...], Any]]:
        """``(partition key, rows of ``data``, the batch's data columns)`` for each run of equal
        partition values (the task's rows are sorted by them)."""
        if not self.partition_columns or batch.num_rows == 0:
            yield (), data
            return
        columns = [batch.column(c).to_pylist() for c in self.partition_columns]
        keys = list(zip(*columns))
        start = 0
        for i in range(1, len(keys) + 1):
            if i == len(keys) or keys[i] != keys[start]:
                values = tuple(format_partition_value(v, t) for v, t in zip(keys[start], self.partition_types))
                yield values, data.slice(start, i - start)
                start = i

    def location(self, key: tuple[str | None, ...]) -> str:
        name = f"part-{uuid.uuid4()}.c000.{self.codec}.parquet" if self.codec != "none" else (
            f"part-{uuid.uuid4()}.c000.parquet"
        )
        names = dict(self.directory_names)
        dirs = [
            f"{hive_escape(names.get(c, c))}="
            f"{HIVE_DEFAULT_PARTITION if v is None else hive_escape(v) or HIVE_DEFAULT_PARTITION}"
            for c, v in zip(self.partition_columns, key)
        ]
        return "/".join([*dirs, name])


class _OpenFile:
    """One data file being written by a task: a Parquet writer over a new object."""

    def __init__(self, task: _WriteTask, key: tuple[str | None, ...], schema: Any) -> None:
        import pyarrow.parquet as pq

        self.task = task
        self.key = key
        self.rows = 0
        self.relative = task.location(key)
        self.uri = f"{task.table}/{self.relative}"
        self._create = task.access.create(self.uri)
        self._sink = self._create.__enter__()
        compression = None if task.codec == "none" else task.codec
        self._writer = pq.ParquetWriter(self._sink, schema, compression=compression)

    def write(self, batch: Any) -> None:
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def close(self) -> dict[str, Any]:
        self._writer.close()
        size = self._sink.tell()
        self._create.__exit__(None, None, None)
        metadata = self._writer.writer.metadata
        return {
            "path": encode_path(self.relative),
            "partition_values": json.dumps(dict(zip(self.task.partition_columns, self.key))),
            "size": size,
            "modification_time": int(time.time() * 1000),
            "num_records": metadata.num_rows,
            "stats": self.task.stats_of(metadata, list(self.task.indexed)),
        }

    def abandon(self) -> None:
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - the write failed already
            pass
        error = RuntimeError("write abandoned")
        try:
            self._create.__exit__(RuntimeError, error, None)
        except Exception:  # noqa: BLE001
            pass


def _written_arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("path", pa.string(), False),
            pa.field("partition_values", pa.string(), False),
            pa.field("size", pa.int64(), False),
            pa.field("modification_time", pa.int64(), False),
            pa.field("num_records", pa.int64(), False),
            pa.field("stats", pa.string(), True),
        ]
    )


def write_files(
    df: DataFrame,
    table_path: str,
    partition_columns: Sequence[str],
    partition_types: Sequence[DataType],
    indexed: Sequence[tuple[tuple[str, ...], DataType]],
    stats_of: Callable[[Any, list[tuple[tuple[str, ...], DataType]]], str],
    *,
    data_change: bool,
    max_records_per_file: int | None,
    field_ids: Sequence[StructField] | None = None,
    directory_names: Mapping[str, str] | None = None,
) -> list[AddFile]:
    """Write ``df`` as the table's Parquet data files from the executors; their AddFiles.

    ``partition_columns`` are resolved names of ``df`` columns (not stored in the files), of
    types ``partition_types``; ``indexed`` the columns that get statistics, which
    ``stats_of`` computes from a written footer. Files without rows are not written.
    Nothing is committed. Column-mapped tables: ``field_ids`` are the table fields stored
    (the other columns of ``df``, in order), whose ids become Parquet field ids, and
    ``directory_names`` name the partition directories.
    """
    spark = df.sparkSession
    codec = (spark.conf.get("spark.sql.parquet.compression.codec", "snappy") or "snappy").lower()
    codec = {"uncompressed": "none", "lz4raw": "lz4", "lz4_raw": "lz4"}.get(codec, codec)
    task = _WriteTask(
        access=Access.here(table_path),
        table=table_path,
        partition_columns=tuple(partition_columns),
        partition_types=tuple(partition_types),
        data_columns=tuple(f.name for f in df.schema.fields if f.name not in set(partition_columns)),
        indexed=tuple(indexed),
        max_records=int(max_records_per_file or 0),
        codec=codec,
        stats_of=stats_of,
        field_ids=tuple(field_ids) if field_ids is not None else None,
        directory_names=tuple((directory_names or {}).items()),
    )
    if partition_columns:
        df = df.sortWithinPartitions(*[F.col(_quote(c)) for c in partition_columns])
    rows = raising_executor_errors(df.mapInArrow(task, _WRITTEN).collect)()
    return [
        AddFile(
            path=r["path"],
            partition_values=json.loads(r["partition_values"]),
            size=int(r["size"]),
            modification_time=int(r["modification_time"]),
            data_change=data_change,
            stats=r["stats"],
        )
        for r in rows
        if r["num_records"]
    ]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def read_files(
    spark: SparkSession,
    table_path: str,
    out_fields: Sequence[StructField],
    spark_schema: T.StructType,
    partition_columns: Sequence[str],
    mapped: bool,
    files: Sequence[AddFile],
    *,
    with_file_path: bool,
) -> DataFrame:
    """The rows of ``files`` (a non-empty list) as a DataFrame of ``spark_schema``: ``out_fields``
    (logical names, table types), then, when ``with_file_path``, the file path and row index
    columns. Read on the executors."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(spark_schema, timezone="UTC")
    task = read_task(
        Access.here(table_path),
        table_path,
        out_fields,
        arrow_schema,
        partition_columns,
        mapped,
        with_file_path=with_file_path,
    )
    bins = read_bins(files, table_path, backend(spark).default_parallelism())
    listing = spark.createDataFrame(
        [(i, json.dumps(b)) for i, b in enumerate(bins)],
        T.StructType([T.StructField("bin", T.IntegerType(), False), T.StructField("files", T.StringType(), False)]),
    ).repartition(len(bins))
    return listing.mapInArrow(task, spark_schema)
