"""The executors' Parquet reader: a table's data files as Arrow batches, read with pyarrow.

One reader for every job that reads files on the executors: ``spark.remote.read_files`` (tables
on object storage Spark cannot open) and the streaming source (``spark.streaming.source``).
Each task gets its files (``read_bins``: URI, log path, partition values, deletion vector) and
reads them (``ReadTask``): rows its deletion vectors mark dropped, partition columns added
from the log, columns a file lacks NULL, column-mapped columns found by their physical names,
nested values conformed to the output Arrow types; when asked, the file path and row index.
No pyspark here: it runs in the executors' Python (``mapInArrow``) and Spark's Python workers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from serialake.core.model.actions import AddFile, DeletionVectorDescriptor
from serialake.core.model.partition_values import parse_partition_value
from serialake.core.model.schema import ArrayType, DataType, MapType, StructField, StructType, physical_name
from serialake.storage.datafiles import Access

__all__ = ["TARGET_TASK_BYTES", "ReadColumn", "ReadTask", "balanced_bins", "plan_column", "read_bins", "read_task"]

T = TypeVar("T")

TARGET_TASK_BYTES = 128 << 20  # files are grouped into read tasks of about this many bytes
_READ_BATCH_ROWS = 65536


@dataclass(frozen=True)
class ReadColumn:
    """How to find one output column in a file: its stored name, its children's, its type."""

    name: str  # the output (logical) name
    stored: str  # the name in the file (the physical name under column mapping)
    arrow_type: Any  # the output Arrow type
    children: tuple[ReadColumn, ...] = ()  # struct fields, or (element,) / (key, value)


def plan_column(f: StructField, mapped: bool, arrow_type: Any) -> ReadColumn:
    stored = physical_name(f) if mapped else f.name
    return ReadColumn(f.name, stored, arrow_type, _children(f.data_type, mapped, arrow_type))


def _children(data_type: DataType, mapped: bool, arrow_type: Any) -> tuple[ReadColumn, ...]:
    import pyarrow as pa

    if isinstance(data_type, StructType):
        return tuple(plan_column(c, mapped, arrow_type.field(i).type) for i, c in enumerate(data_type.fields))
    if isinstance(data_type, ArrayType):
        element = arrow_type.value_type
        return (ReadColumn("element", "element", element, _children(data_type.element_type, mapped, element)),)
    if isinstance(data_type, MapType):
        assert isinstance(arrow_type, pa.MapType)
        key, value = arrow_type.key_type, arrow_type.item_type
        return (
            ReadColumn("key", "key", key, _children(data_type.key_type, mapped, key)),
            ReadColumn("value", "value", value, _children(data_type.value_type, mapped, value)),
        )
    return ()


def _conform(array: Any, column: ReadColumn) -> Any:
    """``array`` (as stored in a file) as ``column``'s output type: struct fields matched by
    stored name (missing ones NULL), nested values converted, leaves cast."""
    import pyarrow as pa
    import pyarrow.compute as pc

    target = column.arrow_type
    if isinstance(array, pa.ChunkedArray):
        chunks = [_conform(c, column) for c in array.chunks]
        return pa.chunked_array(chunks, type=target)
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        names = [array.type.field(i).name for i in range(array.type.num_fields)]
        fields = []
        for child in column.children:
            if child.stored in names:
                fields.append(_conform(array.field(names.index(child.stored)), child))
            else:
                fields.append(pa.nulls(len(array), child.arrow_type))
        return pa.StructArray.from_arrays(
            fields, fields=list(target), mask=pc.is_null(array) if array.null_count else None
        )
    if pa.types.is_map(target) and pa.types.is_map(array.type):
        keys = _conform(array.keys, column.children[0])
        items = _conform(array.items, column.children[1])
        return pa.MapArray.from_arrays(
            array.offsets, keys, items, type=target, mask=pc.is_null(array) if array.null_count else None
        )
    if (pa.types.is_list(target) or pa.types.is_large_list(target)) and (
        pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    ):
        values = _conform(array.values, column.children[0])
        cls = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
        offsets = array.offsets.cast(pa.int64() if cls is pa.LargeListArray else pa.int32())
        return cls.from_arrays(offsets, values, type=target, mask=pc.is_null(array) if array.null_count else None)
    if array.type == target:
        return array
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(array.type) and array.type.tz is None and target.tz:
        array = array.cast(pa.timestamp(array.type.unit, tz="UTC"))  # Spark-written INT96 / legacy: UTC
    return array.cast(target)


@dataclass(frozen=True)
class ReadTask:
    """What every read task needs (pickled into the job)."""

    access: Access
    table: str
    columns: tuple[ReadColumn, ...]  # the stored columns to output, in output order
    partitions: tuple[tuple[str, str, DataType, Any], ...]  # (output name, log key, type, arrow type)
    order: tuple[str, ...]  # the output column names in order (without the extras)
    with_file_path: bool
    schema: Any  # the output Arrow schema

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for text in batch.column("files").to_pylist():
                for entry in json.loads(text):
                    yield from self.read_file(entry)

    def read_file(self, entry: dict[str, Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from serialake.core.dv.deletion_vectors import read_deletion_vector

        uri = entry["uri"]
        try:
            parquet = pq.ParquetFile(self.access.open_parquet(uri))
        except Exception as e:
            raise OSError(f"Table {self.table}: cannot read data file {uri}: {e}") from e
        n = parquet.metadata.num_rows
        stored = set(parquet.schema_arrow.names)
        wanted = [c.stored for c in self.columns if c.stored in stored]
        keep = None
        if entry.get("dv"):
            dv = DeletionVectorDescriptor.from_obj(entry["dv"])
            assert dv is not None
            deleted = read_deletion_vector(self.table, dv, self.access).to_numpy().astype(np.int64)
            keep = np.ones(n, dtype=bool)
            keep[deleted[deleted < n]] = False
        values = {
            name: pa.scalar(parse_partition_value(entry["pv"].get(key), data_type), arrow_type)
            for name, key, data_type, arrow_type in self.partitions
        }
        position = 0
        iterator = parquet.iter_batches(batch_size=_READ_BATCH_ROWS, columns=wanted) if wanted else None
        while position < n:
            if iterator is not None:
                raw = next(iterator)
                size = raw.num_rows
            else:
                size = min(_READ_BATCH_ROWS, n - position)
                raw = None
            arrays: dict[str, Any] = {}
            for c in self.columns:
                if raw is not None and c.stored in stored:
                    arrays[c.name] = _conform(raw.column(c.stored), c)
                else:
                    arrays[c.name] = pa.nulls(size, c.arrow_type)
            for name, value in values.items():
                arrays[name] = pa.repeat(value, size)
            out = [arrays[name] for name in self.order]
            if self.with_file_path:
                out.append(pa.repeat(pa.scalar(entry["path"], pa.string()), size))
                out.append(pa.array(np.arange(position, position + size, dtype=np.int64)))
            result = pa.RecordBatch.from_arrays(out, schema=self.schema)
            if keep is not None:
                result = result.filter(pa.array(keep[position : position + size]))
            position += size
            if result.num_rows:
                yield result


def read_task(
    access: Access,
    table: str,
    fields: Sequence[StructField],
    arrow_schema: Any,
    partition_columns: Sequence[str],
    mapped: bool,
    *,
    with_file_path: bool,
) -> ReadTask:
    """The task reading ``fields`` (logical names, table types) of a table's files, the i-th in
    the Arrow type of ``arrow_schema``'s i-th field; ``arrow_schema`` is the batches' schema.
    Partition columns come from the log (``partition_columns``), the others from the files (by
    physical name when ``mapped``); ``with_file_path`` adds the file path and row index."""
    lowered = {c.lower() for c in partition_columns}
    columns: list[ReadColumn] = []
    parts: list[tuple[str, str, DataType, Any]] = []
    for i, f in enumerate(fields):
        arrow_type = arrow_schema.field(i).type
        if f.name.lower() in lowered:
            parts.append((f.name, physical_name(f) if mapped else f.name, f.data_type, arrow_type))
        else:
            columns.append(plan_column(f, mapped, arrow_type))
    return ReadTask(
        access=access,
        table=table,
        columns=tuple(columns),
        partitions=tuple(parts),
        order=tuple(f.name for f in fields),
        with_file_path=with_file_path,
        schema=arrow_schema,
    )


def read_bins(files: Sequence[AddFile], table_path: str, parallelism: int) -> list[list[dict[str, Any]]]:
    """The files grouped into read tasks (``balanced_bins``), each entry what ``ReadTask`` reads:
    the file's URI, its path in the log, partition values and deletion vector."""
    from serialake.core.model.paths import absolute_path

    def entry(f: AddFile) -> dict[str, Any]:
        return {
            "uri": absolute_path(table_path, f.path),
            "path": f.path,
            "pv": f.partition_values or {},
            "dv": f.deletion_vector._to_obj() if f.deletion_vector is not None else None,
        }

    return balanced_bins(files, lambda f: f.size or 0, entry, parallelism)


def balanced_bins(
    items: Sequence[T], size: Callable[[T], int], entry: Callable[[T], dict[str, Any]], parallelism: int
) -> list[list[dict[str, Any]]]:
    """``items`` (their ``entry``) grouped into read tasks: at least ``parallelism`` tasks when
    there are that many items, each about ``TARGET_TASK_BYTES``; big items first, each into the
    lightest task."""
    total = sum(max(size(x), 1) for x in items)
    count = max(1, min(len(items), max(parallelism, -(-total // TARGET_TASK_BYTES))))
    bins: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    weights = [0] * count
    for x in sorted(items, key=lambda x: -size(x)):
        i = weights.index(min(weights))
        bins[i].append(entry(x))
        weights[i] += max(size(x), 1)
    return [b for b in bins if b]
