"""Checkpoints: write classic Parquet checkpoints; read classic, multi-part and v2 ones.

A checkpoint holds the reconciled state at one version: protocol, metadata, live adds,
unexpired removes (without stats), txns and domain metadata; never commitInfo or cdc.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from serialake.core.log.logfiles import LAST_CHECKPOINT, LOG_DIR, CheckpointRef, checkpoint_name
from serialake.core.model.actions import (
    Action,
    AddFile,
    action_from_dict,
)
from serialake.core.model.arrow_memory import log_pool, release_memory
from serialake.core.model.validate import (
    InvalidActionError,
    add_column_partition_values,
    check_action,
    check_add_column,
    escapes_table,
)
from serialake.exceptions import CorruptLogError, InvalidTableError
from serialake.storage.base import LogStore

_STR_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)

CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _STR_MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                    ("tags", _STR_MAP),
                    ("deletionVector", _DV),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                    ("clusteringProvider", pa.string()),
                ]
            ),
        ),
        (
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("extendedFileMetadata", pa.bool_()),
                    ("partitionValues", _STR_MAP),
                    ("size", pa.int64()),
                    ("tags", _STR_MAP),
                    ("deletionVector", _DV),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                ]
            ),
        ),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", _STR_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", _STR_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        (
            "domainMetadata",
            pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
        ),
    ]
)

_MAP_FIELDS = {"partitionValues", "tags", "configuration", "options"}
ADD_TYPE = CHECKPOINT_SCHEMA.field("add").type


def _to_arrow_value(obj: Any, key: str | None = None) -> Any:
    if isinstance(obj, dict):
        if key in _MAP_FIELDS:
            return list(obj.items())
        return {k: _to_arrow_value(v, k) for k, v in obj.items()}
    return obj


def _from_arrow_value(obj: Any, key: str | None = None) -> Any:
    if key in _MAP_FIELDS and isinstance(obj, list):
        return {k: v for k, v in obj}
    if isinstance(obj, dict):
        return {k: _from_arrow_value(v, k) for k, v in obj.items() if v is not None}
    return obj


def _row(action: Action) -> dict[str, Any]:
    key, body = next(iter(action.to_dict().items()))
    if key in ("add", "remove"):
        # Keep only the columns of the checkpoint schema.
        allowed = set(CHECKPOINT_SCHEMA.field(key).type.names)
        body = {k: v for k, v in body.items() if k in allowed}
    return {key: _to_arrow_value(body)}


def actions_table(actions: Iterable[Action]) -> pa.Table:
    """Actions as rows of the checkpoint table (one action per row)."""
    return pa.Table.from_pylist([_row(a) for a in actions], schema=CHECKPOINT_SCHEMA)


def adds_rows_table(adds: pa.Table) -> pa.Table | None:
    """Add rows held in Arrow (``LazyAdds.table``) as checkpoint rows; None when their types do not fit."""
    arrays = []
    n = adds.num_rows
    try:
        for f in ADD_TYPE:
            if f.name in adds.column_names:
                col = adds.column(f.name).combine_chunks()
                arrays.append(col if col.type == f.type else col.cast(f.type))
            else:
                arrays.append(pa.nulls(n, f.type))
        add = pa.StructArray.from_arrays(arrays, fields=list(ADD_TYPE))
    except (pa.ArrowException, ValueError, TypeError):
        return None
    columns = [
        add if name == "add" else pa.nulls(n, CHECKPOINT_SCHEMA.field(name).type) for name in CHECKPOINT_SCHEMA.names
    ]
    return pa.Table.from_arrays(columns, schema=CHECKPOINT_SCHEMA)


def write_checkpoint_table(
    store: LogStore, log_path: str, version: int, table: pa.Table, num_add_files: int
) -> dict[str, Any]:
    """Write a checkpoint table (``CHECKPOINT_SCHEMA``) as ``<version>.checkpoint.parquet``, then ``_last_checkpoint``.

    Parquet encoding runs in Arrow's C++ code, which releases the interpreter lock: a
    commit on another thread is not held up by it. Without dictionary encoding: a checkpoint's
    strings are mostly distinct (paths, stats), so dictionaries were built only to be dropped;
    measured at 15,000 files, written in 4.9 ms instead of 6.6, read in 4.2 instead of 5.4,
    and 18% smaller.
    """
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy", use_dictionary=False)
    data = buf.getvalue()
    store.write(os.path.join(log_path, checkpoint_name(version)), data)
    last = {"version": version, "size": table.num_rows, "sizeInBytes": len(data), "numOfAddFiles": num_add_files}
    store.write(os.path.join(log_path, LAST_CHECKPOINT), json.dumps(last).encode())
    return last


_ACTION_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "add", "remove")


class LazyAdds:
    """The add rows of a checkpoint, kept columnar; an ``AddFile`` is built only when asked for.

    Loading a 500,000-file table then costs one pass over a few columns instead of
    500,000 object constructions (most commits never look at most files). ``table`` holds
    the rows with the add struct's fields as columns (including ``stats_parsed`` when the
    writer stored it), for vectorized file skipping; ``key_array`` their keys as strings
    (``filestate.key_text``), computed when first needed.
    """

    def __init__(self, column: pa.ChunkedArray | pa.StructArray) -> None:
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        batches = []
        # Distinct partition values, checked against the schema when the snapshot is built.
        self.partition_pairs: set[tuple[str, str]] = set()
        for chunk in chunks:
            rows = _valid_rows(chunk)  # no copy when the add rows are contiguous, as writers lay them out
            if len(rows) == 0:
                continue
            check_add_column(rows)
            self.partition_pairs |= add_column_partition_values(rows)
            batches.append(pa.RecordBatch.from_struct_array(rows))
        if not batches:
            batches = [pa.RecordBatch.from_struct_array(chunks[0].slice(0, 0))]
        table = pa.Table.from_batches(batches)
        # Columns no row fills (row ids, tags, DVs, ... on most tables) are dropped: an absent
        # column reads as null everywhere, and holding nulls for every file costs memory.
        empty = [n for n in table.column_names if n != "path" and table.column(n).null_count == table.num_rows]
        self.table = table.drop_columns(empty) if empty else table
        arr = self.table
        by_key, _ = AddFile.__dict__.get("_CODEC_INFO") or AddFile._codec_info()
        self._attrs: list[str] = []
        self._names: list[str] = []
        for name in self.table.column_names:
            attr = by_key.get(name)
            if attr is None:
                continue  # stats_parsed, partitionValues_parsed, ...: derived, not kept in AddFile
            self._attrs.append(attr)
            self._names.append(name)
        self.n = arr.num_rows
        self._converted: list[list[Any]] | None = None
        self._keys: pa.Array | None = None
        #: What file skipping computed over ``table`` (``arrow_skipping.SkipCache``, set by the
        #: first filter): kept with the rows, so every snapshot sharing them reuses it.
        self.skip_cache: Any = None

    @property
    def key_array(self) -> pa.Array:
        """Each row's key: its path, then NUL and the deletion vector's id when it has one."""
        if self._keys is None:
            import pyarrow.compute as pc

            path = self.table.column("path")
            names_here = self.table.column_names
            if "deletionVector" not in names_here or self.table.column("deletionVector").null_count == self.n:
                self._keys = path
            else:
                dv = self.table.column("deletionVector").combine_chunks().flatten()
                path = path.combine_chunks()
                names = self.table.column("deletionVector").type.names
                storage = dv[names.index("storageType")]
                inline = dv[names.index("pathOrInlineDv")]
                offset = pc.cast(dv[names.index("offset")], pa.string()) if "offset" in names else None
                dv_id = pc.binary_join_element_wise(storage, inline, "")
                if offset is not None:
                    dv_id = pc.if_else(pc.is_null(offset), dv_id, pc.binary_join_element_wise(dv_id, offset, "@"))
                self._keys = pc.if_else(pc.is_null(dv_id), path, pc.binary_join_element_wise(path, dv_id, "\x00"))
        return self._keys

    @property
    def _cols(self) -> list[list[Any]]:
        """Python values of every kept column, converted on the first whole build."""
        if self._converted is None:
            self._converted = [_column_values(self.table.column(n).combine_chunks(), n) for n in self._names]
        return self._converted

    def build_many(self, rows: Sequence[int]) -> list[AddFile]:
        """The ``AddFile`` of each row position in ``rows``, in that order."""
        rows = list(rows)
        if not rows:
            return []
        if self._converted is not None or len(rows) * 4 >= self.n:
            cols = self._cols
            return [_new_add(self._attrs, [col[i] for col in cols]) for i in rows]
        picked = self.table.take(pa.array(rows, pa.int64()))
        cols = [_column_values(picked.column(n).combine_chunks(), n) for n in self._names]
        return [_new_add(self._attrs, [col[j] for col in cols]) for j in range(len(rows))]


def _valid_rows(chunk: pa.StructArray) -> pa.StructArray:
    """The non-null rows of a checkpoint column chunk: a zero-copy slice when they are contiguous."""
    import pyarrow.compute as pc

    nulls = chunk.null_count
    if nulls == 0:
        return chunk
    if nulls == len(chunk):
        return chunk.slice(0, 0)
    valid = pc.is_valid(chunk)
    positions = pc.indices_nonzero(valid)
    first, last = positions[0].as_py(), positions[-1].as_py()
    if last - first + 1 == len(positions):
        return chunk.slice(first, len(positions))
    return chunk.filter(valid)


def _new_add(attrs: list[str], values: list[Any]) -> AddFile:
    return AddFile._from_attrs({a: v for a, v in zip(attrs, values, strict=True) if v is not None})


def _column_values(child: pa.Array, name: str) -> list[Any]:
    values = child.to_pylist()
    if name in _MAP_FIELDS:
        return [None if v is None else dict(v) for v in values]
    if pa.types.is_struct(child.type):
        return [None if v is None else _from_arrow_value(v) for v in values]
    return values


def _parquet_actions(source: Any, name: str, *, sidecars: list[str] | None = None) -> Iterator[Action]:
    """The actions of a checkpoint Parquet file (``source``: a seekable binary file).

    Only the action columns are read, one at a time and ``ADD_BLOCK_ROWS`` rows at a time:
    each is as long as the file, most of it other actions' nulls. Arrow allocates what it
    decodes from the log pool (``arrow_memory``). With ``sidecars``, the paths of a v2
    checkpoint's sidecars are appended to it.
    """
    try:
        reader = pq.ParquetReader(memory_pool=log_pool())
        reader.open(source, pre_buffer=False, buffer_size=1 << 20)  # page by page
        names = reader.schema_arrow.names
    except (pa.ArrowException, OSError) as e:
        raise CorruptLogError(f"Cannot read checkpoint file {name}: {e}") from e
    nulls = _plain_leaf_nulls(reader.metadata)
    for col in (c for c in _ACTION_COLUMNS if c in names):
        if col == "add":
            yield from _add_blocks(reader, name, nulls)  # type: ignore[misc]
            continue
        if _all_null(nulls, col):
            continue  # no such action in this file (its statistics say so): nothing to decode
        for arr in _batches(reader, name, col, None):
            for value in _valid_column(arr).to_pylist():
                if value is None:
                    continue
                body = _from_arrow_value(value)
                if not body:
                    continue  # a struct with every field null: no action
                check_action({col: body})
                action = action_from_dict({col: body})
                if action is not None:
                    yield action
    if sidecars is not None and "sidecar" in names:
        for arr in _batches(reader, name, "sidecar", None):
            sidecars.extend(v["path"] for v in _valid_column(arr).to_pylist() if v)


#: Add rows per ``LazyAdds`` block: a big checkpoint is decoded a slice at a time (a bounded
#: peak of memory), each block one contiguous Arrow chunk.
ADD_BLOCK_ROWS = 1 << 17
#: Fields of ``add`` every row has (read even when a file's statistics say they are all null).
_REQUIRED_ADD_FIELDS = ("path", "partitionValues", "size", "modificationTime", "dataChange")


def _batches(reader: pq.ParquetReader, name: str, column: str, fields: set[str] | None) -> Iterator[pa.Array]:
    """Column ``column`` of the file (only its ``fields`` when given), ``ADD_BLOCK_ROWS`` rows at a time."""
    schema = reader.metadata.schema
    leaves = []
    for i in range(len(schema)):
        parts = schema.column(i).path.split(".", 2)
        if parts[0] == column and (fields is None or (len(parts) > 1 and parts[1] in fields)):
            leaves.append(i)
    try:
        batches = reader.iter_batches(
            ADD_BLOCK_ROWS, row_groups=range(reader.metadata.num_row_groups), column_indices=leaves, use_threads=True
        )
        for batch in batches:
            yield batch.column(0)
    except (pa.ArrowException, OSError) as e:
        raise CorruptLogError(f"Cannot read checkpoint file {name}: {e}") from e


def _add_blocks(reader: pq.ParquetReader, name: str, nulls: dict[tuple[str, ...], bool]) -> Iterator[LazyAdds]:
    """The add rows of a checkpoint file as ``LazyAdds`` blocks of up to ``ADD_BLOCK_ROWS`` rows.

    Optional fields the file's statistics show to be null in every row (row ids, tags, DVs,
    ... on most tables) are not read at all.
    """
    for arr in _batches(reader, name, "add", set(_add_fields(reader.schema_arrow, nulls))):
        if arr.null_count < len(arr):
            yield LazyAdds(arr)


def _add_fields(file_schema: pa.Schema, nulls: dict[tuple[str, ...], bool]) -> list[str]:
    """The fields of ``add`` in the file, less optional plain ones null in every row by the file's statistics.

    Only fields of one plain value (row ids, stats, ...): the statistics of a map or struct
    field count an empty map, or a struct of nulls, as null, and those must be kept as read
    (all-null nested columns are dropped after reading, by ``LazyAdds``).
    """
    add_type = file_schema.field("add").type
    names = [add_type.field(i).name for i in range(add_type.num_fields)]
    kept = [
        n for n in names
        if n in _REQUIRED_ADD_FIELDS or _is_nested(add_type.field(n).type) or not _all_null(nulls, "add", n)
    ]
    return kept if kept else names[:1]


def _is_nested(t: pa.DataType) -> bool:
    return bool(pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t))


def _plain_leaf_nulls(md: pq.FileMetaData) -> dict[tuple[str, ...], bool]:
    """Per plain leaf column (its path), whether the file's statistics show it null in every row.

    Leaves inside a map or list are left out (their statistics count an empty map as null).
    A leaf some row group has no null count for is not all null.
    """
    schema = md.schema
    out: dict[tuple[str, ...], bool] = {}
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for i in range(rg.num_columns):
            if schema.column(i).max_repetition_level:
                continue
            c = rg.column(i)
            st = c.statistics
            null = st is not None and st.has_null_count and st.null_count == c.num_values == rg.num_rows
            key = tuple(c.path_in_schema.split("."))
            out[key] = out.get(key, True) and bool(null)
    return out


def _all_null(nulls: dict[tuple[str, ...], bool], *path: str) -> bool:
    """Whether every plain leaf under ``path`` is null in every row (``_plain_leaf_nulls``).

    Every action the protocol allows has a plain field that is never null (a path, an id, a
    version), so an action column whose plain leaves are all null holds no action.
    """
    under = [null for leaf, null in nulls.items() if leaf[: len(path)] == path]
    return bool(under) and all(under)


def _valid_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The non-null rows of a checkpoint column (most rows of a column are other actions)."""
    import pyarrow.compute as pc

    return column if column.null_count == 0 else column.filter(pc.is_valid(column))


def _json_actions(data: bytes, name: str) -> Iterator[dict[str, Any]]:
    for i, line in enumerate(data.decode("utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError as e:
            raise CorruptLogError(f"Checkpoint file {name} line {i + 1} is not valid JSON: {e}") from e


def read_checkpoint(store: LogStore, log_path: str, ref: CheckpointRef) -> list[Action | LazyAdds]:
    """All actions of a checkpoint (adds as ``LazyAdds`` blocks), following v2 sidecars.

    Every action is checked (``serialake.core.model.validate``); ``InvalidTableError`` names the
    checkpoint file and the field of one the protocol forbids.
    """
    out: list[Action | LazyAdds] = []
    name = ""
    try:
        for st in ref.files:
            name = f"{LOG_DIR}/{st.name}"
            path = os.path.join(log_path, st.name)
            sidecars: list[str] = []
            if ref.kind == "v2" and st.name.endswith(".json"):
                for obj in _json_actions(store.read(path), st.name):
                    if "sidecar" in obj:
                        sidecars.append(obj["sidecar"]["path"])
                        continue
                    check_action(obj)
                    action = action_from_dict(obj)
                    if action is not None:
                        out.append(action)
            else:
                with store.open_input(path) as source:
                    out.extend(_parquet_actions(source, st.name, sidecars=sidecars if ref.kind == "v2" else None))
            for sc in sidecars:
                if escapes_table(sc):  # sidecars live in _delta_log/_sidecars
                    raise InvalidActionError("sidecar.path", f"relative path {sc!r} leaves the _sidecars directory")
                sc_path = sc if os.path.isabs(sc) else os.path.join(log_path, "_sidecars", sc)
                name = f"{LOG_DIR}/_sidecars/{os.path.basename(sc_path)}"
                try:
                    sc_source = store.open_input(sc_path)
                except FileNotFoundError:
                    raise CorruptLogError(f"Checkpoint {st.name} refers to missing sidecar {sc_path}") from None
                with sc_source:
                    out.extend(_parquet_actions(sc_source, os.path.basename(sc_path)))
    except InvalidActionError as e:
        raise InvalidTableError(
            e.reason, table=os.path.dirname(log_path), field=e.field, version=ref.version, file=name,
            data_file=e.data_file,
        ) from None
    release_memory()
    return out
