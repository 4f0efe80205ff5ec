"""Checkpoints: write classic Parquet checkpoints; read classic, multi-part and v2 ones.

A checkpoint holds the reconciled state at one version: protocol, metadata, live adds,
unexpired removes (without stats), txns and domain metadata; never commitInfo or cdc.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from serialake.core.actions import (
    Action,
    AddFile,
    action_from_dict,
)
from serialake.core.logfiles import LAST_CHECKPOINT, LOG_DIR, CheckpointRef, checkpoint_name
from serialake.core.validate import (
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


def write_checkpoint(
    store: LogStore, log_path: str, version: int, actions: Iterable[Action], num_add_files: int
) -> dict[str, Any]:
    """Write ``<version>.checkpoint.parquet`` then ``_last_checkpoint``; returns the latter's content."""
    rows = [_row(a) for a in actions]
    table = pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy")
    data = buf.getvalue()
    store.write(os.path.join(log_path, checkpoint_name(version)), data)
    last = {"version": version, "size": len(rows), "sizeInBytes": len(data), "numOfAddFiles": num_add_files}
    store.write(os.path.join(log_path, LAST_CHECKPOINT), json.dumps(last).encode())
    return last


_ACTION_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "add", "remove")


class LazyAdds:
    """The add rows of a checkpoint, kept columnar; an ``AddFile`` is built only when asked for.

    Loading a 50,000-file table then costs one pass over a few columns instead of
    50,000 object constructions (most commits never look at most files).
    """

    def __init__(self, column: pa.ChunkedArray) -> None:
        import pyarrow.compute as pc

        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        arr = arr.filter(pc.is_valid(arr))
        check_add_column(arr)
        # Distinct partition values, checked against the schema when the snapshot is built.
        self.partition_pairs = add_column_partition_values(arr)
        by_key, _ = AddFile.__dict__.get("_CODEC_INFO") or AddFile._codec_info()
        self._attrs: list[str] = []
        self._arrays: list[tuple[pa.Array, str]] = []
        for i in range(arr.type.num_fields):
            name = arr.type.field(i).name
            attr = by_key.get(name)
            if attr is None:
                continue  # stats_parsed, partitionValues_parsed, ...: derived, not kept
            self._attrs.append(attr)
            self._arrays.append((arr.field(i), name))
        self.n = len(arr)
        self._converted: list[list[Any]] | None = None
        paths = arr.field("path").to_pylist()
        if "deletionVector" in arr.type.names and arr.field("deletionVector").null_count < self.n:
            dvs = _column_values(arr.field("deletionVector"), "deletionVector")
            self.keys: list[tuple[str, str | None]] = [
                (p, None if dv is None else _dv_unique_id(dv)) for p, dv in zip(paths, dvs)
            ]
        else:
            self.keys = [(p, None) for p in paths]

    @property
    def _cols(self) -> list[list[Any]]:
        """Python values of every kept column, converted on the first ``build``."""
        if self._converted is None:
            self._converted = [_column_values(a, name) for a, name in self._arrays]
        return self._converted

    def build(self, i: int) -> AddFile:
        plain, factories = AddFile.__dict__.get("_DEFAULTS") or AddFile._defaults()
        state = dict(plain)
        for name, factory in factories:
            state[name] = factory()
        for attr, col in zip(self._attrs, self._cols):
            v = col[i]
            if v is not None:
                state[attr] = v
        inst = object.__new__(AddFile)
        inst.__dict__.update(state)
        inst.__post_init__()
        return inst


def _dv_unique_id(dv: dict[str, Any]) -> str:
    base = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
    off = dv.get("offset")
    return f"{base}@{off}" if off is not None else base


def _column_values(child: pa.Array, name: str) -> list[Any]:
    values = child.to_pylist()
    if name in _MAP_FIELDS:
        return [None if v is None else dict(v) for v in values]
    if pa.types.is_struct(child.type):
        return [None if v is None else _from_arrow_value(v) for v in values]
    return values


def _parquet_actions(data: bytes, name: str) -> Iterator[Action]:
    try:
        pf = pq.ParquetFile(io.BytesIO(data))
        present = [c for c in _ACTION_COLUMNS if c in pf.schema_arrow.names]
        table = pf.read(columns=present)
    except (pa.ArrowException, OSError) as e:
        raise CorruptLogError(f"Cannot read checkpoint file {name}: {e}") from e
    for col in present:
        arr = table.column(col)
        if col == "add" and arr.null_count < len(arr):
            yield LazyAdds(arr)  # type: ignore[misc]
            continue
        for value in arr.to_pylist():
            if value is None:
                continue
            body = _from_arrow_value(value)
            if not body:
                continue  # a struct with every field null: no action
            check_action({col: body})
            action = action_from_dict({col: body})
            if action is not None:
                yield action


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

    Every action is checked (``serialake.core.validate``); ``InvalidTableError`` names the
    checkpoint file and the field of one the protocol forbids.
    """
    out: list[Action | LazyAdds] = []
    name = ""
    try:
        for st in ref.files:
            name = f"{LOG_DIR}/{st.name}"
            path = os.path.join(log_path, st.name)
            data = store.read(path)
            if ref.kind == "v2" and st.name.endswith(".json"):
                sidecars: list[str] = []
                for obj in _json_actions(data, st.name):
                    if "sidecar" in obj:
                        sidecars.append(obj["sidecar"]["path"])
                        continue
                    check_action(obj)
                    action = action_from_dict(obj)
                    if action is not None:
                        out.append(action)
            else:
                out.extend(_parquet_actions(data, st.name))
                sidecars = _sidecar_paths(data) if ref.kind == "v2" else []
            for sc in sidecars:
                if escapes_table(sc):  # sidecars live in _delta_log/_sidecars
                    raise InvalidActionError("sidecar.path", f"relative path {sc!r} leaves the _sidecars directory")
                sc_path = sc if os.path.isabs(sc) else os.path.join(log_path, "_sidecars", sc)
                name = f"{LOG_DIR}/_sidecars/{os.path.basename(sc_path)}"
                try:
                    sc_data = store.read(sc_path)
                except FileNotFoundError:
                    raise CorruptLogError(f"Checkpoint {st.name} refers to missing sidecar {sc_path}") from None
                out.extend(_parquet_actions(sc_data, os.path.basename(sc_path)))
    except InvalidActionError as e:
        raise InvalidTableError(
            e.reason, table=os.path.dirname(log_path), field=e.field, version=ref.version, file=name,
            data_file=e.data_file,
        ) from None
    return out


def _sidecar_paths(data: bytes) -> list[str]:
    pf = pq.ParquetFile(io.BytesIO(data))
    if "sidecar" not in pf.schema_arrow.names:
        return []
    return [v["path"] for v in pf.read(columns=["sidecar"]).column("sidecar").to_pylist() if v]
