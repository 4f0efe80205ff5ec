"""Compacting a small bin of files on the driver (pyarrow), for OPTIMIZE.

Compaction changes no value: it concatenates the live rows of its inputs. For a bin of a
few small files, a Spark job costs far more than the work (one task opening hundreds of
files one after the other, plus planning). When a bin holds at most
``LOCAL_MAX_BYTES_CONF`` bytes (default 64 MiB) of plain columns, the driver reads the
inputs with pyarrow (several at a time), drops the rows their deletion vectors mark,
casts each column to the table type and writes one Parquet file, published like any
other data file (staged, renamed into the inputs' directory, fsynced, stats from the
footer).

Row order is the one OPTIMIZE promises for its row mapping: inputs in path order, rows in
physical order. Anything this path does not reproduce exactly as Spark reads it (column
mapping, nested or interval types, a column whose stored type needs a lossy cast, a
file outside the table directory) returns None, and the bin is compacted by Spark.
"""

from __future__ import annotations

import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from serialake.core.actions import AddFile, decode_path
from serialake.core.deletion_vectors import read_deletion_vector
from serialake.core.schema import DecimalType, PrimitiveType, StructField, StructType
from serialake.core.snapshot import Snapshot
from serialake.spark import io

__all__ = ["LOCAL_MAX_BYTES_CONF", "LOCAL_MAX_BYTES_DEFAULT", "compact_locally"]

LOCAL_MAX_BYTES_CONF = "spark.serialake.optimize.local.maxBytes"
LOCAL_MAX_BYTES_DEFAULT = 64 << 20

_READ_THREADS = 8


def _arrow_type(data_type: Any) -> Any:
    import pyarrow as pa

    if isinstance(data_type, DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if not isinstance(data_type, PrimitiveType):
        return None
    return {
        "string": pa.string(), "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(),
        "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "binary": pa.binary(),
        "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
    }.get(data_type.name)  # fmt: skip


def _target_schema(fields: Sequence[StructField]) -> Any:
    import pyarrow as pa

    out = []
    for f in fields:
        t = _arrow_type(f.data_type)
        if t is None:
            return None
        out.append(pa.field(f.name, t, nullable=True))
    return pa.schema(out)


class _NotLocal(Exception):
    pass


def compact_locally(snap: Snapshot, inputs: Sequence[AddFile], *, max_bytes: int) -> AddFile | None:
    """The live rows of ``inputs`` (sorted by path) as one new data file, or None if Spark must do it.

    The returned AddFile has ``dataChange=false`` and stats; nothing is committed. None also
    when the inputs hold no live row.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if max_bytes <= 0 or not inputs or sum(f.size or 0 for f in inputs) > max_bytes:
        return None
    if io.column_mapping_mode(snap) != "none":
        return None
    table_path = snap.table_path
    stored = io.data_fields(snap.schema, snap.partition_columns)
    schema = _target_schema(stored)
    if schema is None:
        return None
    dirs = {posixpath.dirname(decode_path(f.path)) for f in inputs}
    if len(dirs) != 1 or any("://" in f.path or f.path.startswith(("file:", "/")) for f in inputs):
        return None
    rel_dir = dirs.pop()
    if rel_dir.startswith("..") or "/../" in f"/{rel_dir}/":
        return None

    def live(add: AddFile) -> Any:
        path = io.absolute_path(table_path, add.path)
        try:
            data = pq.read_table(path)
        except (OSError, pa.ArrowException) as e:
            raise _NotLocal(str(e)) from None
        columns = []
        for field in schema:
            if field.name in data.column_names:
                col = data.column(field.name)
                if col.type != field.type:
                    try:
                        col = col.cast(field.type, safe=True)
                    except (pa.ArrowException, ValueError):
                        raise _NotLocal(f"{add.path}: column {field.name} is {col.type}") from None
            elif any(n.lower() == field.name.lower() for n in data.column_names):
                raise _NotLocal(f"{add.path}: column {field.name} stored under another case")
            else:
                col = pa.nulls(data.num_rows, field.type)  # added after this file was written
            columns.append(col)
        data = pa.Table.from_arrays(columns, schema=schema)
        if add.deletion_vector is not None:
            import numpy as np

            deleted = read_deletion_vector(table_path, add.deletion_vector).to_numpy().astype(np.int64)
            keep = np.ones(data.num_rows, dtype=bool)
            keep[deleted[deleted < data.num_rows]] = False
            data = data.filter(pa.array(keep))
        return data

    ordered = sorted(inputs, key=lambda f: f.path)
    try:
        with ThreadPoolExecutor(min(_READ_THREADS, len(ordered))) as pool:
            parts = list(pool.map(live, ordered))
    except _NotLocal:
        return None
    combined = pa.concat_tables(parts)
    if combined.num_rows == 0:
        return None
    with io.staging_area(table_path) as staging:
        os.makedirs(os.path.join(staging, rel_dir), exist_ok=True)
        name = "compacted.snappy.parquet"
        pq.write_table(combined, os.path.join(staging, rel_dir, name), compression="snappy")
        indexed = io.stats_columns(StructType(tuple(stored)), snap.configuration)
        add = io.publish_staged(table_path, staging, rel_dir, name, dict(ordered[0].partition_values or {}), indexed, False)
        io.fsync_dirs(table_path, [rel_dir] if rel_dir else [])
        return add
