"""A Delta schema as an Iceberg (format v2) schema, its name mapping and its partition fields.

IcebergCompatV2 ties the two: every field's Iceberg id is its column-mapping id
(``delta.columnMapping.id``), and the ids of array elements and map keys and values come from
``delta.columnMapping.nested.ids`` on the nearest enclosing struct field, keyed by that field's
physical name plus the path below it (``col-1a2b.element``, ``col-1a2b.value.element``). Names
are the logical names; ``required`` is ``not nullable``.

Types: byte, short and integer are ``int``; long ``long``; float, double, boolean, string,
binary, date as themselves; ``decimal(p, s)``; ``timestamp`` (an instant) is ``timestamptz``
and ``timestamp_ntz`` is ``timestamp``; structs, arrays and maps nest. Other Delta types
(void, variant, interval) have no Iceberg type: converting them fails, naming the column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serialake.core.iceberg.errors import IcebergConversionError
from serialake.core.model.schema import (
    COLUMN_MAPPING_PHYSICAL_NAME,
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
)

__all__ = [
    "COLUMN_MAPPING_ID",
    "COLUMN_MAPPING_NESTED_IDS",
    "IcebergSchema",
    "Leaf",
    "PartitionField",
    "convert_schema",
    "partition_fields",
    "primitive_types",
]

COLUMN_MAPPING_ID = "delta.columnMapping.id"
COLUMN_MAPPING_NESTED_IDS = "delta.columnMapping.nested.ids"

#: Delta primitive type -> Iceberg primitive type.
_PRIMITIVE = {
    "byte": "int",
    "short": "int",
    "integer": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
}

_HELP_MAPPING = (
    "IcebergCompatV2 requires column mapping: every column needs an id. Enable it with "
    "ALTER TABLE ... SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name') (which assigns the ids), "
    "then convert again."
)


@dataclass(frozen=True)
class Leaf:
    """A primitive field reached through structs only (where Delta keeps statistics).

    ``physical``: its path of physical names, as the stats JSON nests them; ``logical``: its
    path of logical names; ``delta_type``: its Delta type; ``iceberg_type``: its Iceberg type.
    """

    field_id: int
    physical: tuple[str, ...]
    logical: tuple[str, ...]
    delta_type: PrimitiveType | DecimalType
    iceberg_type: str


@dataclass(frozen=True)
class PartitionField:
    """An identity partition field of the spec: a top-level primitive column."""

    field_id: int
    source_id: int
    name: str
    physical: str
    delta_type: PrimitiveType | DecimalType
    iceberg_type: str


@dataclass(frozen=True)
class IcebergSchema:
    """A converted schema.

    ``struct``: the Iceberg schema JSON (``{"type": "struct", "fields": [...]}``, without a
    schema id); ``name_mapping``: the ``schema.name-mapping.default`` JSON text; ``max_id``:
    the highest field id, nested ids included; ``leaves``: the fields statistics can describe.
    """

    struct: dict[str, Any]
    name_mapping: str
    max_id: int
    leaves: tuple[Leaf, ...]

    def top_level(self, name: str) -> Leaf | None:
        """The top-level primitive column called ``name`` (case-insensitive), or None."""
        key = name.lower()
        for leaf in self.leaves:
            if len(leaf.logical) == 1 and leaf.logical[0].lower() == key:
                return leaf
        return None


def iceberg_primitive(data_type: PrimitiveType | DecimalType) -> str | None:
    """The Iceberg type name of a Delta primitive or decimal type, or None when it has none."""
    if isinstance(data_type, DecimalType):
        return f"decimal({data_type.precision}, {data_type.scale})"
    return _PRIMITIVE.get(data_type.name)


def convert_schema(schema: StructType, *, table: str, version: int | None = None) -> IcebergSchema:
    """The Iceberg schema of a Delta table schema (see the module docstring).

    ``IcebergConversionError`` names the column that has no column-mapping id (or nested id),
    a type Iceberg cannot hold, or an id used twice.
    """
    return _Converter(table, version).convert(schema)


class _Converter:
    def __init__(self, table: str, version: int | None) -> None:
        self.table = table
        self.version = version
        self.seen: dict[int, str] = {}
        self.leaves: list[Leaf] = []

    def fail(self, reason: str, column: str, help: str | None = None) -> IcebergConversionError:  # noqa: A002
        return IcebergConversionError(reason, table=self.table, version=self.version, column=column, help=help)

    def claim(self, field_id: Any, column: str) -> int:
        if isinstance(field_id, str) and field_id.strip().lstrip("-").isdigit():
            field_id = int(field_id)
        if not isinstance(field_id, int) or isinstance(field_id, bool) or field_id <= 0:
            raise self.fail(f"column '{column}' has an invalid column-mapping id {field_id!r}", column)
        other = self.seen.get(field_id)
        if other is not None:
            raise self.fail(
                f"columns '{other}' and '{column}' have the same column-mapping id {field_id}", column,
                help="Each column needs its own id; the table's schema is corrupt. Recreate the column.",
            )
        self.seen[field_id] = column
        return field_id

    def convert(self, schema: StructType) -> IcebergSchema:
        fields, mapping = self.struct(schema, (), ())
        struct = {"type": "struct", "fields": fields}
        return IcebergSchema(
            struct=struct,
            name_mapping=json.dumps(mapping, separators=(",", ":")),
            max_id=max(self.seen, default=0),
            leaves=tuple(self.leaves),
        )

    def struct(
        self, struct: StructType, logical: tuple[str, ...], physical: tuple[str, ...] | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(Iceberg fields, name-mapping entries); ``physical`` is None below an array or map."""
        fields: list[dict[str, Any]] = []
        mapping: list[dict[str, Any]] = []
        for f in struct.fields:
            path = (*logical, f.name)
            column = ".".join(path)
            raw_id = f.metadata.get(COLUMN_MAPPING_ID)
            if raw_id is None:
                raise self.fail(
                    f"column '{column}' has no column-mapping id ({COLUMN_MAPPING_ID})", column, _HELP_MAPPING
                )
            field_id = self.claim(raw_id, column)
            phys = _physical(f)
            nested = f.metadata.get(COLUMN_MAPPING_NESTED_IDS) or {}
            if not isinstance(nested, Mapping):
                raise self.fail(f"column '{column}': {COLUMN_MAPPING_NESTED_IDS} is not an object", column)
            below = (*physical, phys) if physical is not None else None
            iceberg_type, children = self.data_type(f, f.data_type, path, phys, (phys, f.name), nested, below)
            entry: dict[str, Any] = {"id": field_id, "name": f.name, "required": not f.nullable, "type": iceberg_type}
            comment = f.metadata.get("comment")
            if isinstance(comment, str) and comment:
                entry["doc"] = comment
            fields.append(entry)
            m: dict[str, Any] = {"field-id": field_id, "names": [phys]}
            if children:
                m["fields"] = children
            mapping.append(m)
            if below is not None and isinstance(f.data_type, (PrimitiveType, DecimalType)):
                self.leaves.append(Leaf(field_id, below, path, f.data_type, iceberg_type))
        return fields, mapping

    def data_type(
        self,
        owner: StructField,
        data_type: DataType,
        path: tuple[str, ...],
        key: str,
        fallback: tuple[str, str],
        nested: Mapping[str, Any],
        physical: tuple[str, ...] | None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        """(Iceberg type, name-mapping children) of ``data_type`` found at nested-id key ``key``."""
        column = ".".join(path)
        if isinstance(data_type, (PrimitiveType, DecimalType)):
            name = iceberg_primitive(data_type)
            if name is None:
                raise self.fail(
                    f"column '{column}' has type {data_type.simple_string()}, which Iceberg cannot hold", column,
                    help="Drop the column or change its type; IcebergCompatV2 allows only types Iceberg has.",
                )
            return name, []
        if isinstance(data_type, StructType):
            fields, mapping = self.struct(data_type, path, physical)
            return {"type": "struct", "fields": fields}, mapping
        if isinstance(data_type, ArrayType):
            element_id = self.nested_id(nested, key, fallback, "element", f"{column}.element")
            element, children = self.data_type(
                owner, data_type.element_type, (*path, "element"), f"{key}.element",
                (f"{fallback[0]}.element", f"{fallback[1]}.element"), nested, None,
            )
            m: dict[str, Any] = {"field-id": element_id, "names": ["element"]}
            if children:
                m["fields"] = children
            return {
                "type": "list", "element-id": element_id, "element": element,
                "element-required": not data_type.contains_null,
            }, [m]
        if isinstance(data_type, MapType):
            key_id = self.nested_id(nested, key, fallback, "key", f"{column}.key")
            value_id = self.nested_id(nested, key, fallback, "value", f"{column}.value")
            key_type, key_children = self.data_type(
                owner, data_type.key_type, (*path, "key"), f"{key}.key",
                (f"{fallback[0]}.key", f"{fallback[1]}.key"), nested, None,
            )
            value_type, value_children = self.data_type(
                owner, data_type.value_type, (*path, "value"), f"{key}.value",
                (f"{fallback[0]}.value", f"{fallback[1]}.value"), nested, None,
            )
            km: dict[str, Any] = {"field-id": key_id, "names": ["key"]}
            vm: dict[str, Any] = {"field-id": value_id, "names": ["value"]}
            if key_children:
                km["fields"] = key_children
            if value_children:
                vm["fields"] = value_children
            return {
                "type": "map", "key-id": key_id, "key": key_type, "value-id": value_id, "value": value_type,
                "value-required": not data_type.value_contains_null,
            }, [km, vm]
        raise self.fail(f"column '{column}' has an unsupported type", column)

    def nested_id(self, nested: Mapping[str, Any], key: str, fallback: tuple[str, str], part: str, column: str) -> int:
        """The id of an array element or map key/value: under the physical-name key (the protocol's), else the
        logical-name one (some writers key by it)."""
        value = nested.get(f"{key}.{part}")
        if value is None:
            value = nested.get(f"{fallback[1]}.{part}")
        if value is None:
            raise self.fail(
                f"column '{column}' has no nested column-mapping id ({COLUMN_MAPPING_NESTED_IDS} has no "
                f"'{key}.{part}')", column,
                help="IcebergCompatV2 needs ids for array elements and map keys and values: a writer with "
                "IcebergCompatV2 enabled assigns them (re-create the column with it enabled).",
            )
        return self.claim(value, column)


def _physical(f: StructField) -> str:
    value = f.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME)
    return value if isinstance(value, str) and value else f.name


def partition_fields(
    converted: IcebergSchema,
    partition_columns: Sequence[str],
    existing_specs: Sequence[Mapping[str, Any]],
    last_partition_id: int,
    *,
    table: str,
    version: int | None = None,
) -> tuple[list[PartitionField], int]:
    """The identity partition fields of ``partition_columns`` and the new last partition field id.

    A (source column, identity) pair that an earlier spec already has keeps that spec's partition
    field id; others get ids after ``last_partition_id`` (1000 is the first).
    """
    known: dict[int, int] = {}
    for spec in existing_specs:
        for pf in spec.get("fields", ()):
            if pf.get("transform") == "identity" and isinstance(pf.get("source-id"), int):
                known.setdefault(pf["source-id"], pf["field-id"])
    out: list[PartitionField] = []
    last = max(last_partition_id, 999)
    for name in partition_columns:
        leaf = converted.top_level(name)
        if leaf is None:
            raise IcebergConversionError(
                f"partition column '{name}' is not a top-level column of a primitive type", table=table,
                version=version, column=name,
            )
        field_id = known.get(leaf.field_id)
        if field_id is None:
            last += 1
            field_id = last
        out.append(PartitionField(field_id, leaf.field_id, leaf.logical[0], leaf.physical[0], leaf.delta_type,
                                  leaf.iceberg_type))
    return out, max(last, max((p.field_id for p in out), default=last))


def primitive_types(struct: Mapping[str, Any]) -> dict[int, Any]:
    """Field id -> Iceberg type (a primitive name, or the kind of a nested type) at every depth."""
    out: dict[int, Any] = {}

    def visit(t: Any) -> None:
        if not isinstance(t, Mapping):
            return
        kind = t.get("type")
        if kind == "struct":
            for f in t.get("fields", ()):
                out[f["id"]] = f["type"] if isinstance(f["type"], str) else f["type"].get("type")
                visit(f["type"])
        elif kind == "list":
            e = t["element"]
            out[t["element-id"]] = e if isinstance(e, str) else e["type"]
            visit(e)
        elif kind == "map":
            for part in ("key", "value"):
                v = t[part]
                out[t[f"{part}-id"]] = v if isinstance(v, str) else v["type"]
                visit(v)

    visit(struct)
    return out
