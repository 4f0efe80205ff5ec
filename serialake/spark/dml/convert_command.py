"""CONVERT TO DELTA: a directory of Parquet files becomes a Delta table, in place.

No data is rewritten: version 0 adds every Parquet file under the directory as it is, with
statistics read from its footer (row count, min/max/null counts, as a write records them).
Partition directories (``col=value/...``) must match the partition schema given, in order.
Files and directories whose names start with ``_`` or ``.`` are not data (Spark's rule), so
``_SUCCESS`` markers and ``_delta_log`` are skipped.

The commit is version 0 by put-if-absent: of two concurrent conversions one wins, the other
fails with a conflict; converting a directory that already holds a Delta table changes
nothing.

An ``s3://`` location (``storage.datafiles``) is listed as objects, and its data schema is
read from the Parquet footers (fetched by range; Spark's own schema when a footer carries
it), merged across files as Spark's ``mergeSchema`` does: this Spark reads no S3 itself.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata, encode_path
from serialake.core.model.paths import parquet_metadata
from serialake.core.model.schema import StructType
from serialake.core.model.stats import stats_columns
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import data_write, transaction
from serialake.spark.columns import data_fields
from serialake.spark.dml.kernel import json_list
from serialake.spark.footer_stats import file_stats
from serialake.spark.partition_values import hive_partition_values, is_hidden
from serialake.spark.schemas import to_delta_schema
from serialake.spark.write import add_schema_features, nullable_type
from serialake.storage.datafiles import Access, DataFileStatus, is_remote

__all__ = ["convert_to_delta", "parquet_identifier_path"]

_SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"  # Spark's schema in a footer it wrote
_FOOTER_THREADS = 8
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
    remote = is_remote(table)
    if not remote and not os.path.isdir(table):
        raise DeltaAnalysisException(f"Cannot CONVERT TO DELTA: {table} is not a directory")
    parts = _partition_fields(spark, partition_schema)
    listing = {f.path: f for f in Access().walk(table)} if remote else None
    files = _data_files(table, parts.fieldNames(), listing)
    if not files:
        raise DeltaAnalysisException(
            f"Cannot CONVERT TO DELTA: no Parquet data files under {table}. Write the data with "
            "df.write.format('delta') instead."
        )
    footers: dict[str, Any] = {}
    if listing is not None:
        footers = _remote_footers(table, [listing[rel] for rel, _ in files])
        data_schema = _footer_schema(table, [(rel, footers[rel]) for rel, _ in files])
    else:
        data_schema = spark.read.option("mergeSchema", "true").parquet(
            *[os.path.join(table, rel) for rel, _ in files]
        ).schema
    clash = {f.name.lower() for f in data_schema.fields} & {f.name.lower() for f in parts.fields}
    if clash:
        raise DeltaAnalysisException(
            f"Cannot CONVERT TO DELTA {table}: partition column(s) {', '.join(sorted(clash))} are also stored "
            "in the data files"
        )
    schema = to_delta_schema(T.StructType(list(data_schema.fields) + list(parts.fields)))
    part_names = [f.name for f in parts.fields]
    indexed = stats_columns(StructType(tuple(data_fields(schema, part_names))), {})
    zone = data_write.session_zone(spark)
    spark_types = {f.name: f.dataType for f in parts.fields}
    adds = []
    for rel, values in files:
        if listing is not None:
            size, mtime, footer = listing[rel].size, listing[rel].modification_time, footers[rel]
        else:
            full = os.path.join(table, rel)
            st = os.stat(full)
            size, mtime, footer = st.st_size, int(st.st_mtime * 1000), pq.read_metadata(full)
        typed = {
            name: data_write.format_partition_value(value, spark_types[name], zone) for name, value in values.items()
        }
        adds.append(
            AddFile(
                path=encode_path(rel.replace(os.sep, "/")),
                partition_values=typed,
                size=size,
                modification_time=mtime,
                data_change=True,
                stats=file_stats(footer, indexed),
            )
        )
    transaction.refuse("CONVERT TO DELTA", log.table_path)
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


def _data_files(
    table: str, partition_columns: list[str], listing: dict[str, DataFileStatus] | None = None
) -> list[tuple[str, dict[str, str | None]]]:
    """``(path relative to the table, raw partition values)`` of every data file, sorted.

    ``listing``: the objects below an S3 table (``Access.walk``), else the directory is walked.
    """
    out: list[tuple[str, dict[str, str | None]]] = []
    depth = len(partition_columns)
    for segments, names in _directories(table, partition_columns, listing):
        for name in names:
            if is_hidden(name, partition_columns) or name.endswith(".crc"):
                continue
            rel = posixpath.join(*segments, name) if segments else name
            if len(segments) != depth:
                raise DeltaAnalysisException(
                    f"Cannot CONVERT TO DELTA {table}: file {rel} is {len(segments)} directories deep, but the "
                    f"partition schema has {depth} column(s) ({', '.join(partition_columns) or 'none'}). Give "
                    "the partition columns in directory order (PARTITIONED BY (...))."
                )
            try:
                out.append((rel, hive_partition_values(segments, partition_columns)))
            except ValueError as e:
                raise DeltaAnalysisException(f"Cannot CONVERT TO DELTA {table}: file {rel}: {e}") from None
    return out


def _directories(
    table: str, partition_columns: list[str], listing: dict[str, DataFileStatus] | None
) -> list[tuple[list[str], list[str]]]:
    """``(directory segments, sorted file names)`` of the directories not hidden, in walk order."""
    if listing is None:
        found = []
        for root, dirs, names in os.walk(table):
            dirs[:] = sorted(d for d in dirs if not is_hidden(d, partition_columns))
            rel_dir = os.path.relpath(root, table)
            found.append(([] if rel_dir == "." else rel_dir.split(os.sep), sorted(names)))
        return found
    by_dir: dict[tuple[str, ...], list[str]] = {}
    for path in listing:
        *segments, name = path.split("/")
        if not any(is_hidden(s, partition_columns) for s in segments):
            by_dir.setdefault(tuple(segments), []).append(name)
    return [(list(d), sorted(by_dir[d])) for d in sorted(by_dir)]


def _remote_footers(table: str, files: Sequence[DataFileStatus]) -> dict[str, Any]:
    """The Parquet footer of each S3 object (relative path -> FileMetaData), several fetched at once."""

    def footer(f: DataFileStatus) -> Any:
        try:
            return parquet_metadata(f"{table}/{f.path}", f.size)
        except (OSError, ValueError) as e:
            raise DeltaAnalysisException(
                f"Cannot CONVERT TO DELTA {table}: file {f.path} is not a readable Parquet file ({e})"
            ) from None

    with ThreadPoolExecutor(max(1, min(_FOOTER_THREADS, len(files)))) as pool:
        return dict(zip((f.path for f in files), pool.map(footer, files), strict=True))


def _footer_schema(table: str, footers: Sequence[tuple[str, Any]]) -> T.StructType:
    """The data schema Spark's ``read.option("mergeSchema", "true").parquet(...)`` gives these files:
    each file's schema (Spark's own from its footer, else from the Parquet schema), merged by
    name in first-seen order (structs field by field), every field nullable."""
    merged: T.StructType | None = None
    for rel, footer in footers:
        schema = _file_schema(table, rel, footer)
        merged = schema if merged is None else _merge(table, rel, merged, schema)
    assert merged is not None
    return merged


def _file_schema(table: str, rel: str, footer: Any) -> T.StructType:
    from pyspark.sql.pandas.types import from_arrow_type

    text = (footer.metadata or {}).get(_SPARK_SCHEMA_KEY)
    if text:
        parsed = T.StructType.fromJson(json.loads(text))
        return nullable_type(parsed)  # type: ignore[return-value]
    columns = [footer.schema.column(i) for i in range(footer.num_columns)]
    int96 = {c.path for c in columns if c.physical_type == "INT96"}  # Spark reads these as timestamps
    fields = []
    for f in footer.schema.to_arrow_schema():
        try:
            data_type = T.TimestampType() if f.name in int96 else from_arrow_type(f.type)
        except (TypeError, NotImplementedError) as e:
            raise DeltaAnalysisException(
                f"Cannot CONVERT TO DELTA {table}: file {rel}: column {f.name} of Parquet type {f.type} ({e})"
            ) from None
        fields.append(T.StructField(f.name, nullable_type(data_type), True))
    return T.StructType(fields)


def _merge(table: str, rel: str, left: T.DataType, right: T.DataType) -> Any:
    """Two files' types merged as Spark's schema merging does (structs by field name); else they must be equal."""
    if isinstance(left, T.StructType) and isinstance(right, T.StructType):
        fields = {f.name: f for f in left.fields}
        out = list(left.fields)
        for f in right.fields:
            if f.name not in fields:
                out.append(f)
                continue
            index = next(i for i, g in enumerate(out) if g.name == f.name)
            out[index] = T.StructField(f.name, _merge(table, rel, out[index].dataType, f.dataType), True,
                                       out[index].metadata)  # fmt: skip
        return T.StructType(out)
    if left != right:
        raise DeltaAnalysisException(
            f"Cannot CONVERT TO DELTA {table}: file {rel} stores a column as {right.simpleString()}, another file as "
            f"{left.simpleString()}: the files' schemas cannot be merged"
        )
    return left
