"""Column mapping (``delta.columnMapping.mode`` = ``name`` or ``id``): field ids and physical names.

Under column mapping a column's data is stored under its *physical name*
(``delta.columnMapping.physicalName``, ``col-<uuid>``) and identified by its *id*
(``delta.columnMapping.id``), both kept in the field's metadata; the name users see is only
a label, so a column can be renamed or dropped without touching a data file. Stats and
``partitionValues`` are keyed by physical names; Parquet files carry the ids as field ids.

``assign`` is the one place ids and names are given out: every metadata a transaction
commits goes through it (``OptimisticTransaction.update_metadata``), so a created table, a
column added by ``mergeSchema`` or ``ALTER TABLE ADD COLUMNS``, an overwritten schema or a
table switched to ``name`` mode all get them the same way. Ids are never reused:
``delta.columnMapping.maxColumnId`` only grows. Under IcebergCompatV2 the ``element``,
``key`` and ``value`` of arrays and maps get ids too (``delta.columnMapping.nested.ids``
of their nearest struct field), as the protocol requires.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from serialake.core.model import properties as props
from serialake.core.model.actions import Metadata
from serialake.core.model.schema import (
    COLUMN_MAPPING_PHYSICAL_NAME,
    ArrayType,
    DataType,
    MapType,
    StructField,
    StructType,
    physical_name,
)
from serialake.exceptions import DeltaAnalysisException, UnsupportedFeatureError

__all__ = [
    "FIELD_ID",
    "MAX_COLUMN_ID",
    "NESTED_IDS",
    "PARQUET_FIELD_ID",
    "arrow_with_field_ids",
    "assign",
    "field_id",
    "mapping_mode",
    "nested_id_keys",
    "physical_schema",
    "strip",
]

FIELD_ID = "delta.columnMapping.id"
PHYSICAL_NAME = COLUMN_MAPPING_PHYSICAL_NAME
NESTED_IDS = "delta.columnMapping.nested.ids"
MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
MAPPING_KEYS = (FIELD_ID, PHYSICAL_NAME, NESTED_IDS)
#: Field metadata Spark's Parquet writer turns into a Parquet field id.
PARQUET_FIELD_ID = "parquet.field.id"
#: pyarrow's field metadata for a Parquet field id.
ARROW_FIELD_ID = b"PARQUET:field_id"
MODES = ("none", "name", "id")


def mapping_mode(configuration: Mapping[str, str], table: str = "") -> str:
    """``none``, ``name`` or ``id``; another value fails naming the table and the property."""
    for key, value in configuration.items():
        if key.lower() == props.COLUMN_MAPPING_MODE.lower() and value.strip().lower() not in MODES:
            raise DeltaAnalysisException(
                f"Table {table}: {props.COLUMN_MAPPING_MODE} must be one of {', '.join(MODES)}, not {value!r}"
            )
    return str(props.get(configuration, props.COLUMN_MAPPING_MODE)).strip().lower()


def field_id(f: StructField) -> int | None:
    """The field's column-mapping id (None without one)."""
    value = f.metadata.get(FIELD_ID)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def strip(schema: StructType) -> StructType:
    """``schema`` without column-mapping metadata at any depth (a schema taken from data)."""
    return _map_fields(schema, lambda f: replace(f, metadata={k: v for k, v in f.metadata.items()
                                                              if k not in MAPPING_KEYS}))


def _map_fields(schema: StructType, fn: Any) -> StructType:
    def on_type(t: DataType) -> DataType:
        if isinstance(t, StructType):
            return _map_fields(t, fn)
        if isinstance(t, ArrayType):
            return replace(t, element_type=on_type(t.element_type))
        if isinstance(t, MapType):
            return replace(t, key_type=on_type(t.key_type), value_type=on_type(t.value_type))
        return t

    return StructType(tuple(fn(replace(f, data_type=on_type(f.data_type))) for f in schema.fields))


def nested_id_keys(f: StructField) -> list[str]:
    """The ``delta.columnMapping.nested.ids`` keys field ``f`` needs: its arrays' ``element`` and
    maps' ``key``/``value``, prefixed by its physical name (down to the next struct)."""
    out: list[str] = []

    def walk(t: DataType, prefix: str) -> None:
        if isinstance(t, ArrayType):
            out.append(f"{prefix}.element")
            walk(t.element_type, f"{prefix}.element")
        elif isinstance(t, MapType):
            out.append(f"{prefix}.key")
            out.append(f"{prefix}.value")
            walk(t.key_type, f"{prefix}.key")
            walk(t.value_type, f"{prefix}.value")

    walk(f.data_type, physical_name(f))
    return out


def _all_fields(schema: StructType, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], StructField]]:
    """Every struct field at any depth with its lower-case logical path (``element``/``key``/``value`` for
    the steps through arrays and maps)."""
    for f in schema.fields:
        p = (*path, f.name.lower())
        yield p, f
        yield from _fields_in(f.data_type, p)


def _fields_in(t: DataType, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], StructField]]:
    if isinstance(t, StructType):
        yield from _all_fields(t, path)
    elif isinstance(t, ArrayType):
        yield from _fields_in(t.element_type, (*path, "element"))
    elif isinstance(t, MapType):
        yield from _fields_in(t.key_type, (*path, "key"))
        yield from _fields_in(t.value_type, (*path, "value"))


def _max_id(schema: StructType) -> int:
    top = 0
    for _, f in _all_fields(schema):
        top = max(top, field_id(f) or 0)
        nested = f.metadata.get(NESTED_IDS)
        if isinstance(nested, dict):
            top = max([top, *(v for v in nested.values() if isinstance(v, int))])
    return top


def assign(metadata: Metadata, previous: Metadata | None, *, table: str, replacing: bool = False) -> Metadata:
    """``metadata`` with every field given a column-mapping id and physical name (mapped tables).

    ``previous`` is the table's metadata before this commit (None: a new table);
    ``replacing``: the commit replaces the whole table (its files too). A field keeps the id
    and physical name it carries when they are its own in ``previous`` or new to the table
    (above ``previous``'s ``maxColumnId``) and unique; else it takes those of the field at
    the same path in ``previous``; else it gets the next id and a new ``col-<uuid>`` name,
    except that a table switched from ``none`` to ``name`` keeps each existing column's
    name as its physical name (its files hold it). The mode can be turned on for an
    existing table only as ``name``, and never changed or turned off.
    """
    conf = dict(metadata.configuration)
    mode = mapping_mode(conf, table)
    before = mapping_mode(previous.configuration, table) if previous is not None else "none"
    if previous is not None and not replacing and mode != before:
        if before != "none":
            raise UnsupportedFeatureError(
                f"Table {table}: changing {props.COLUMN_MAPPING_MODE} from '{before}' to '{mode}' is not supported "
                "(data files are stored under physical names; dropping the feature would rewrite every file)."
            )
        if mode == "id":
            raise UnsupportedFeatureError(
                f"Table {table}: an existing table can switch {props.COLUMN_MAPPING_MODE} to 'name' only; 'id' mode "
                "needs ids in every existing data file. Use 'name'."
            )
    if mode == "none" and "delta.columnMapping." not in (metadata.schema_string or ""):
        return metadata
    schema = StructType.from_json(metadata.schema_string or "")
    if mode == "none":
        if previous is None or replacing or before == "none":
            cleaned = strip(schema)
            if cleaned != schema:
                return replace(metadata, schema_string=cleaned.to_json())
        return metadata
    previous_schema = (
        StructType.from_json(previous.schema_string or "")
        if previous is not None and previous.schema_string
        else None
    )
    floor = 0
    known: dict[int, str] = {}
    by_path: dict[tuple[str, ...], StructField] = {}
    upgrading = previous_schema is not None and before == "none" and not replacing
    if previous_schema is not None and previous is not None:
        floor = max(int(props.get(previous.configuration, props.COLUMN_MAPPING_MAX_ID) or 0), _max_id(previous_schema))
        by_path = dict(_all_fields(previous_schema))
        if before != "none":
            known = {i: physical_name(f) for f in by_path.values() if (i := field_id(f)) is not None}
    nested = props.get(conf, props.ENABLE_ICEBERG_COMPAT_V2)
    state = _Assigner(floor, known, by_path, upgrading, bool(nested))
    schema = state.struct(schema, ())
    conf[props.COLUMN_MAPPING_MAX_ID] = str(max(state.next_id, floor, int(conf.get(props.COLUMN_MAPPING_MAX_ID) or 0)))
    return replace(metadata, schema_string=schema.to_json(), configuration=conf)


class _Assigner:
    """Walks a schema giving each field an id and physical name (``assign``)."""

    def __init__(
        self,
        floor: int,
        known: dict[int, str],
        by_path: dict[tuple[str, ...], StructField],
        upgrading: bool,
        nested: bool,
    ) -> None:
        self.floor = floor
        self.next_id = floor
        self.known = known
        self.by_path = by_path
        self.upgrading = upgrading
        self.nested = nested
        self.used_ids: set[int] = set()
        self.used_names: set[str] = set()

    def _take(self, fid: int | None, name: Any) -> bool:
        ok = (
            fid is not None
            and isinstance(name, str)
            and bool(name)
            and fid not in self.used_ids
            and name not in self.used_names
            and (self.known.get(fid) == name or fid > self.floor)
        )
        if ok:
            assert fid is not None
            self.used_ids.add(fid)
            self.used_names.add(name)
            self.next_id = max(self.next_id, fid)
        return ok

    def _new_id(self) -> int:
        self.next_id += 1
        while self.next_id in self.used_ids:
            self.next_id += 1
        self.used_ids.add(self.next_id)
        return self.next_id

    def struct(self, st: StructType, path: tuple[str, ...]) -> StructType:
        return StructType(tuple(self.field(f, path) for f in st.fields))

    def field(self, f: StructField, path: tuple[str, ...]) -> StructField:
        p = (*path, f.name.lower())
        meta = dict(f.metadata)
        fid, name = field_id(f), meta.get(PHYSICAL_NAME)
        if not self._take(fid, name):
            old = self.by_path.get(p)
            old_id = field_id(old) if old is not None and not self.upgrading else None
            old_name = old.metadata.get(PHYSICAL_NAME) if old is not None else None
            if old is not None and self._take(old_id, old_name):
                fid, name = old_id, old_name
                if NESTED_IDS in old.metadata and NESTED_IDS not in meta:
                    meta[NESTED_IDS] = old.metadata[NESTED_IDS]
            else:
                fid = self._new_id()
                name = f.name if self.upgrading and old is not None and f.name not in self.used_names else (
                    f"col-{uuid.uuid4()}"
                )
                self.used_names.add(name)
        meta[FIELD_ID] = fid
        meta[PHYSICAL_NAME] = name
        out = replace(f, data_type=self.inner(f.data_type, p), metadata=meta)
        if self.nested:
            keys = nested_id_keys(out)
            given = meta.get(NESTED_IDS)
            have: dict[str, Any] = given if isinstance(given, dict) else {}
            ids: dict[str, int] = {}
            for key in keys:
                value = have.get(key)
                if isinstance(value, int) and value not in self.used_ids and value > 0:
                    self.used_ids.add(value)
                    self.next_id = max(self.next_id, value)
                    ids[key] = value
                else:
                    ids[key] = self._new_id()
            if ids:
                meta[NESTED_IDS] = ids
            else:
                meta.pop(NESTED_IDS, None)
            out = replace(out, metadata=meta)
        return out

    def inner(self, t: DataType, path: tuple[str, ...]) -> DataType:
        if isinstance(t, StructType):
            return self.struct(t, path)
        if isinstance(t, ArrayType):
            return replace(t, element_type=self.inner(t.element_type, (*path, "element")))
        if isinstance(t, MapType):
            key_type = self.inner(t.key_type, (*path, "key"))
            return replace(t, key_type=key_type, value_type=self.inner(t.value_type, (*path, "value")))
        return t


def physical_schema(schema: StructType, *, spark_field_ids: bool = False) -> StructType:
    """``schema`` as stored in data files: physical names at every depth, metadata dropped.

    ``spark_field_ids`` keeps each field's id as ``parquet.field.id``, which Spark's Parquet
    writer stores as the Parquet field id.
    """

    def field(f: StructField) -> StructField:
        fid = field_id(f)
        meta: dict[str, Any] = {PARQUET_FIELD_ID: fid} if spark_field_ids and fid is not None else {}
        return StructField(physical_name(f), on_type(f.data_type), f.nullable, meta)

    def on_type(t: DataType) -> DataType:
        if isinstance(t, StructType):
            return StructType(tuple(field(f) for f in t.fields))
        if isinstance(t, ArrayType):
            return replace(t, element_type=on_type(t.element_type))
        if isinstance(t, MapType):
            return replace(t, key_type=on_type(t.key_type), value_type=on_type(t.value_type))
        return t

    return StructType(tuple(field(f) for f in schema.fields))


def arrow_with_field_ids(arrow_schema: Any, fields: Sequence[StructField | None]) -> Any:
    """``arrow_schema`` (physical names, in the order of ``fields``) with Parquet field ids
    (``PARQUET:field_id``) from the fields' column-mapping ids, nested ones included; a column
    whose field is None (not a table column, e.g. ``_change_type``) keeps none."""
    import pyarrow as pa

    def on_field(af: Any, f: StructField) -> Any:
        value = f.metadata.get(NESTED_IDS)
        nested = value if isinstance(value, dict) else {}
        return _with_id(af.with_type(on_type(af.type, f.data_type, nested, physical_name(f))), field_id(f))

    def child(af: Any, dtype: DataType, nested: dict[str, Any], key: str) -> Any:
        value = nested.get(key)
        return _with_id(af.with_type(on_type(af.type, dtype, nested, key)), value if isinstance(value, int) else None)

    def on_type(t: Any, dtype: DataType | None, nested: dict[str, Any], key: str | None) -> Any:
        if pa.types.is_struct(t) and isinstance(dtype, StructType):
            return pa.struct([on_field(t.field(i), dtype.fields[i]) for i in range(t.num_fields)])
        if (pa.types.is_list(t) or pa.types.is_large_list(t)) and isinstance(dtype, ArrayType):
            element = child(t.value_field, dtype.element_type, nested, f"{key}.element")
            return pa.large_list(element) if pa.types.is_large_list(t) else pa.list_(element)
        if pa.types.is_map(t) and isinstance(dtype, MapType):
            return pa.map_(
                child(t.key_field, dtype.key_type, nested, f"{key}.key"),
                child(t.item_field, dtype.value_type, nested, f"{key}.value"),
                keys_sorted=t.keys_sorted,
            )
        return t

    out = [arrow_schema.field(i) if f is None else on_field(arrow_schema.field(i), f) for i, f in enumerate(fields)]
    return pa.schema(out, metadata=arrow_schema.metadata)


def _with_id(af: Any, fid: int | None) -> Any:
    if fid is None:
        return af
    meta = dict(af.metadata or {})
    meta[ARROW_FIELD_ID] = str(fid).encode()
    return af.with_metadata(meta)
