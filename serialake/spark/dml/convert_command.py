"""CONVERT TO DELTA: a directory of Parquet files becomes a Delta table, in place.

No data is rewritten: version 0 adds every Parquet file under the directory as it is, with
statistics read from its footer (row count, min/max/null counts, as a write records them).
Partition directories (``col=value/...``) must match the partition schema given, in order.
Files and directories whose names start with ``_`` or ``.`` are not data (Spark's rule), so
``_SUCCESS`` markers and ``_delta_log`` are skipped.

The commit is version 0 by put-if-absent: of two concurrent conversions one wins, the other
fails with a conflict; converting a directory that already holds a Delta table changes
nothing.
"""

from __future__ import annotations

import os
import posixpath
import re

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.actions import AddFile, Metadata, encode_path
from serialake.core.schema import StructType
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import io
from serialake.spark.dml.kernel import json_list
from serialake.spark.write import add_schema_features

__all__ = ["convert_to_delta", "parquet_identifier_path"]

_IDENTIFIER = re.compile(r"^\s*parquet\s*\.\s*`(?P<path>(?:[^`]|``)+)`\s*$", re.IGNORECASE)


def parquet_identifier_path(identifier: str) -> str:
    """The directory of ``parquet.`/path``` (delta-spark's identifier form), or of a plain path."""
    m = _IDENTIFIER.match(identifier)
    if m:
        return m.group("path").replace("``", "`")
    if "`" in identifier or identifier.strip().lower().startswith(("delta.", "iceberg.")):
        raise DeltaIllegalArgumentException(
            f"CONVERT TO DELTA takes parquet.`/path/to/dir` (or the path), not {identifier!r}"
        )
    return identifier


def convert_to_delta(
    spark: SparkSession, directory: str, partition_schema: str | T.StructType | None = None
) -> tuple[str, int | None]:
    """Make the Parquet files under ``directory`` a Delta table; (table path, committed version or None).

    ``partition_schema``: the partition columns, as a Spark ``StructType`` or DDL text
    (``"year INT, month INT"``), in directory order. None when the data is not partitioned.
    """
    log = DeltaLog.for_table(directory)
    table = log.table_path
    if log.table_exists():
        return table, None
    if not os.path.isdir(table):
        raise DeltaAnalysisException(f"Cannot CONVERT TO DELTA: {table} is not a directory")
    parts = _partition_fields(spark, partition_schema)
    files = _data_files(table, parts.fieldNames())
    if not files:
        raise DeltaAnalysisException(
            f"Cannot CONVERT TO DELTA: no Parquet data files under {table}. Write the data with "
            "df.write.format('delta') instead."
        )
    data_schema = spark.read.option("mergeSchema", "true").parquet(
        *[os.path.join(table, rel) for rel, _ in files]
    ).schema
    clash = {f.name.lower() for f in data_schema.fields} & {f.name.lower() for f in parts.fields}
    if clash:
        raise DeltaAnalysisException(
            f"Cannot CONVERT TO DELTA {table}: partition column(s) {', '.join(sorted(clash))} are also stored "
            "in the data files"
        )
    schema = io.to_delta_schema(T.StructType(list(data_schema.fields) + list(parts.fields)))
    part_names = [f.name for f in parts.fields]
    indexed = io.stats_columns(StructType(tuple(io.data_fields(schema, part_names))), {})
    zone = io.session_zone(spark)
    spark_types = {f.name: f.dataType for f in parts.fields}
    adds = []
    for rel, values in files:
        full = os.path.join(table, rel)
        st = os.stat(full)
        typed = {
            name: io.format_partition_value(value, spark_types[name], zone) for name, value in values.items()
        }
        adds.append(
            AddFile(
                path=encode_path(rel.replace(os.sep, "/")),
                partition_values=typed,
                size=st.st_size,
                modification_time=int(st.st_mtime * 1000),
                data_change=True,
                stats=io.file_stats(pq.read_metadata(full), indexed),
            )
        )
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=schema.to_json(), partition_columns=tuple(part_names)))
    add_schema_features(txn, schema)
    params = {"numFiles": len(adds), "partitionedBy": json_list(part_names), "collectStats": True}
    return table, txn.commit(adds, "CONVERT", params)


def _partition_fields(spark: SparkSession, given: str | T.StructType | None) -> T.StructType:
    if given is None:
        return T.StructType([])
    if isinstance(given, T.StructType):
        return given
    if isinstance(given, str):
        from pyspark.sql.types import _parse_datatype_string

        parsed = _parse_datatype_string(given)
        assert isinstance(parsed, T.StructType)
        return parsed
    raise TypeError(f"partitionSchema must be a StructType or a DDL string, found {type(given).__name__}")


def _data_files(table: str, partition_columns: list[str]) -> list[tuple[str, dict[str, str | None]]]:
    """``(path relative to the table, raw partition values)`` of every data file, sorted."""
    out: list[tuple[str, dict[str, str | None]]] = []
    depth = len(partition_columns)
    for root, dirs, names in os.walk(table):
        dirs[:] = sorted(d for d in dirs if not io.is_hidden(d, partition_columns))
        rel_dir = os.path.relpath(root, table)
        segments = [] if rel_dir == "." else rel_dir.split(os.sep)
        for name in sorted(names):
            if io.is_hidden(name, partition_columns) or name.endswith(".crc"):
                continue
            rel = posixpath.join(*segments, name) if segments else name
            if len(segments) != depth:
                raise DeltaAnalysisException(
                    f"Cannot CONVERT TO DELTA {table}: file {rel} is {len(segments)} directories deep, but the "
                    f"partition schema has {depth} column(s) ({', '.join(partition_columns) or 'none'}). Give "
                    "the partition columns in directory order (PARTITIONED BY (...))."
                )
            try:
                out.append((rel, io.hive_partition_values(segments, partition_columns)))
            except ValueError as e:
                raise DeltaAnalysisException(f"Cannot CONVERT TO DELTA {table}: file {rel}: {e}") from None
    return out
