"""Delta table schemas: Spark's StructType JSON (the log's ``schemaString``) as frozen dataclasses.

``StructType.from_json(s).to_json() == s`` for schemas written by Spark (compact JSON, Spark's
key order), so a metadata rewrite never changes the schema string.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from serialake.core.model.types import PRIMITIVE_NAMES, PRIMITIVES, decimal_params
from serialake.exceptions import DeltaError

if TYPE_CHECKING:
    from sqlglot import exp

__all__ = [
    "COLUMN_MAPPING_PHYSICAL_NAME",
    "ArrayType",
    "DataType",
    "DecimalType",
    "MapType",
    "PrimitiveType",
    "SchemaError",
    "StructField",
    "StructType",
    "change_field",
    "data_type_from_json_value",
    "merge_schemas",
    "remove_field",
    "rename_field",
    "field_path",
    "physical_name",
    "split_dotted",
]

COLUMN_MAPPING_PHYSICAL_NAME = "delta.columnMapping.physicalName"
CHAR_VARCHAR_METADATA = "__CHAR_VARCHAR_TYPE_STRING"


class SchemaError(DeltaError, ValueError):
    """A schema string, DDL string or type name is not valid (the message names it)."""


@dataclass(frozen=True)
class PrimitiveType:
    """An atomic type named as in Spark's JSON (``integer``, ``long``, ``timestamp_ntz``...)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in PRIMITIVE_NAMES:
            raise SchemaError(f"unknown primitive type {self.name!r}")

    def to_json_value(self) -> str:
        """The JSON value Spark writes for this type."""
        return self.name

    def simple_string(self) -> str:
        """Spark SQL spelling, e.g. ``bigint``."""
        return PRIMITIVES[self.name].sql


@dataclass(frozen=True)
class DecimalType:
    """``decimal(precision, scale)``."""

    precision: int = 10
    scale: int = 0

    def __post_init__(self) -> None:
        if not (1 <= self.precision <= 38 and 0 <= self.scale <= self.precision):
            raise SchemaError(
                f"invalid type 'decimal({self.precision},{self.scale})': "
                "need 1 <= precision <= 38 and 0 <= scale <= precision"
            )

    def to_json_value(self) -> str:
        """The JSON value Spark writes for this type."""
        return f"decimal({self.precision},{self.scale})"

    def simple_string(self) -> str:
        """Spark SQL spelling."""
        return self.to_json_value()


@dataclass(frozen=True)
class ArrayType:
    """``array<element_type>``."""

    element_type: DataType
    contains_null: bool = True

    def to_json_value(self) -> dict[str, Any]:
        """The JSON object Spark writes for this type."""
        return {
            "type": "array",
            "elementType": self.element_type.to_json_value(),
            "containsNull": self.contains_null,
        }

    def simple_string(self) -> str:
        """Spark SQL spelling."""
        return f"array<{self.element_type.simple_string()}>"


@dataclass(frozen=True)
class MapType:
    """``map<key_type, value_type>``."""

    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True

    def to_json_value(self) -> dict[str, Any]:
        """The JSON object Spark writes for this type."""
        return {
            "type": "map",
            "keyType": self.key_type.to_json_value(),
            "valueType": self.value_type.to_json_value(),
            "valueContainsNull": self.value_contains_null,
        }

    def simple_string(self) -> str:
        """Spark SQL spelling."""
        return f"map<{self.key_type.simple_string()},{self.value_type.simple_string()}>"


@dataclass(frozen=True)
class StructField:
    """One named column (or nested field).

    ``metadata`` is excluded from the hash (dicts are unhashable) but compared for equality.
    """

    name: str
    data_type: DataType
    nullable: bool = True
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_json_value(self) -> dict[str, Any]:
        """The JSON object Spark writes for this field."""
        return {
            "name": self.name,
            "type": self.data_type.to_json_value(),
            "nullable": self.nullable,
            "metadata": self.metadata,
        }

    @staticmethod
    def from_json_value(value: Any) -> StructField:
        """Parse one element of a struct's ``fields`` list."""
        if not isinstance(value, dict) or not isinstance(value.get("name"), str) or "type" not in value:
            raise SchemaError(f"invalid struct field {value!r}: need an object with 'name' and 'type'")
        name = value["name"]
        try:
            data_type = data_type_from_json_value(value["type"])
        except SchemaError as e:
            raise SchemaError(f"field {name!r}: {e}") from None
        nullable = value.get("nullable", True)
        metadata = value.get("metadata", {})
        if not isinstance(nullable, bool) or not isinstance(metadata, dict):
            raise SchemaError(f"field {name!r}: 'nullable' must be a boolean and 'metadata' an object")
        return StructField(name, data_type, nullable, metadata)


@dataclass(frozen=True)
class StructType:
    """A struct of fields; the top-level table schema is one."""

    fields: tuple[StructField, ...] = ()

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for f in self.fields:
            key = f.name.lower()
            if key in seen:
                raise SchemaError(f"duplicate field name {f.name!r} (names are case-insensitive)")
            seen.add(key)

    @staticmethod
    def from_json(text: str) -> StructType:
        """Parse a Delta ``schemaString``."""
        try:
            value = json.loads(text)
        except (TypeError, json.JSONDecodeError) as e:
            raise SchemaError(f"schema string is not valid JSON ({e}): {text!r:.200}") from None
        dt = data_type_from_json_value(value)
        if not isinstance(dt, StructType):
            raise SchemaError(f"schema string must be a struct type, got {text!r:.200}")
        return dt

    def to_json(self) -> str:
        """Compact JSON exactly as Spark writes it (non-ASCII kept as is)."""
        return json.dumps(self.to_json_value(), separators=(",", ":"), ensure_ascii=False)

    def to_json_value(self) -> dict[str, Any]:
        """The JSON object Spark writes for this type."""
        return {"type": "struct", "fields": [f.to_json_value() for f in self.fields]}

    @staticmethod
    def from_ddl(ddl: str) -> StructType:
        """Parse a column list such as ``"id BIGINT NOT NULL, p STRING COMMENT 'x', d DATE"``."""
        return _from_ddl(ddl)

    @property
    def field_names(self) -> list[str]:
        """Field names in order."""
        return [f.name for f in self.fields]

    def field(self, name: str) -> StructField | None:
        """The field called ``name`` (case-insensitive, as Spark resolves columns), or None."""
        key = name.lower()
        for f in self.fields:
            if f.name.lower() == key:
                return f
        return None

    def simple_string(self) -> str:
        """Spark SQL spelling, e.g. ``struct<id:bigint,p:string>``."""
        return "struct<" + ",".join(f"{f.name}:{f.data_type.simple_string()}" for f in self.fields) + ">"


DataType: TypeAlias = StructType | ArrayType | MapType | PrimitiveType | DecimalType


def merge_schemas(target: StructType, addition: StructType) -> StructType:
    """``target`` with the fields of ``addition`` it lacks, at any depth (schema evolution).

    Fields are matched by name, case-insensitively. A field both have keeps the target's
    name, type, nullability and metadata, except that structs (also as array elements and
    map values) gain the nested fields they lack. New fields come after the existing ones,
    in ``addition``'s order, and are nullable.
    """
    fields = []
    for f in target.fields:
        other = addition.field(f.name)
        fields.append(f if other is None else replace(f, data_type=_merge_types(f.data_type, other.data_type)))
    names = {f.name.lower() for f in target.fields}
    fields.extend(_nullable_field(f) for f in addition.fields if f.name.lower() not in names)
    return StructType(tuple(fields))


def change_field(
    schema: StructType,
    path: Sequence[str],
    *,
    comment: str | None = None,
    nullable: bool | None = None,
    first: bool = False,
    after: str | None = None,
) -> StructType:
    """``schema`` with the field at ``path`` (names, outermost first) changed in place.

    ``comment`` replaces its comment, ``nullable`` its nullability, and ``first`` / ``after``
    move it within its struct (before every sibling, or right after sibling ``after``).
    Raises ``SchemaError`` naming the path when a field or sibling does not exist.
    """
    if not path:
        raise SchemaError("no column given")
    name, rest = path[0], path[1:]
    index = next((i for i, f in enumerate(schema.fields) if f.name.lower() == name.lower()), None)
    if index is None:
        raise SchemaError(f"column '{name}' does not exist (fields: {', '.join(schema.field_names)})")
    f = schema.fields[index]
    fields = list(schema.fields)
    if rest:
        if not isinstance(f.data_type, StructType):
            raise SchemaError(f"column '{f.name}' is a {f.data_type.simple_string()}, not a struct")
        try:
            inner = change_field(f.data_type, rest, comment=comment, nullable=nullable, first=first, after=after)
        except SchemaError as e:
            raise SchemaError(f"in '{f.name}': {e}") from None
        fields[index] = replace(f, data_type=inner)
        return StructType(tuple(fields))
    if comment is not None:
        f = replace(f, metadata={**f.metadata, "comment": comment})
    if nullable is not None:
        f = replace(f, nullable=nullable)
    fields[index] = f
    if first or after is not None:
        del fields[index]
        at = 0
        if after is not None:
            at = next((i + 1 for i, g in enumerate(fields) if g.name.lower() == after.lower()), -1)
            if at < 0:
                raise SchemaError(
                    f"column '{after}' (to put '{f.name}' after) does not exist among "
                    f"{', '.join(g.name for g in fields)}"
                )
        fields.insert(at, f)
    return StructType(tuple(fields))


def rename_field(schema: StructType, path: Sequence[str], new_name: str) -> StructType:
    """``schema`` with the field at ``path`` (through structs) named ``new_name``, metadata kept."""
    return _at_path(schema, path, lambda f: [replace(f, name=new_name)])


def remove_field(schema: StructType, path: Sequence[str]) -> StructType:
    """``schema`` without the field at ``path`` (through structs)."""
    return _at_path(schema, path, lambda f: [])


def _at_path(schema: StructType, path: Sequence[str], change: Any) -> StructType:
    """``schema`` with the field at ``path`` replaced by the fields ``change(field)`` returns."""
    index = next((i for i, f in enumerate(schema.fields) if f.name.lower() == path[0].lower()), None)
    if index is None:
        raise SchemaError(f"column '{path[0]}' does not exist (fields: {', '.join(schema.field_names)})")
    f = schema.fields[index]
    if len(path) == 1:
        replaced = change(f)
    elif isinstance(f.data_type, StructType):
        replaced = [replace(f, data_type=_at_path(f.data_type, path[1:], change))]
    else:
        raise SchemaError(f"column '{f.name}' is a {f.data_type.simple_string()}, not a struct")
    return StructType((*schema.fields[:index], *replaced, *schema.fields[index + 1 :]))


def _merge_types(target: DataType, addition: DataType) -> DataType:
    if isinstance(target, StructType) and isinstance(addition, StructType):
        return merge_schemas(target, addition)
    if isinstance(target, ArrayType) and isinstance(addition, ArrayType):
        return replace(target, element_type=_merge_types(target.element_type, addition.element_type))
    if isinstance(target, MapType) and isinstance(addition, MapType):
        return replace(target, value_type=_merge_types(target.value_type, addition.value_type))
    return target


def _nullable_field(f: StructField) -> StructField:
    return replace(f, nullable=True, data_type=_nullable_type(f.data_type))


def _nullable_type(t: DataType) -> DataType:
    if isinstance(t, StructType):
        return StructType(tuple(_nullable_field(f) for f in t.fields))
    if isinstance(t, ArrayType):
        return ArrayType(_nullable_type(t.element_type), True)
    if isinstance(t, MapType):
        return MapType(_nullable_type(t.key_type), _nullable_type(t.value_type), True)
    return t


def field_path(schema: StructType, names: Sequence[str]) -> list[StructField]:
    """The fields that ``names`` (outermost first) pass through, matched case-insensitively.

    ``SchemaError`` names the first part that does not exist (``'s.x'``).
    """
    node: StructType | None = schema
    fields: list[StructField] = []
    for i, name in enumerate(names):
        f = node.field(name) if node is not None else None
        if f is None:
            raise SchemaError(
                f"column '{'.'.join(names[: i + 1])}' does not exist (columns: {', '.join(schema.field_names)})"
            )
        fields.append(f)
        node = f.data_type if isinstance(f.data_type, StructType) else None
    return fields


def split_dotted(name: str) -> list[str]:
    """``a.`b.c`.d`` split on the dots outside backquotes (the backquotes kept)."""
    parts: list[str] = []
    buf: list[str] = []
    quoted = False
    for ch in name:
        if ch == "`":
            quoted = not quoted
        if ch == "." and not quoted:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf))
    return parts


def physical_name(f: StructField) -> str:
    """The name in data files and the log: the column-mapping physical name if set, else the name."""
    value = f.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME)
    return value if isinstance(value, str) and value else f.name


def data_type_from_json_value(value: Any) -> DataType:
    """Parse a type as it appears in schema JSON: a type-name string or a complex-type object."""
    if isinstance(value, str):
        return _primitive_from_name(value)
    if not isinstance(value, dict):
        raise SchemaError(f"invalid type {value!r}: expected a type name or an object")
    kind = value.get("type")
    try:
        if kind == "struct":
            fields = value["fields"]
            if not isinstance(fields, list):
                raise SchemaError("struct 'fields' must be a list")
            return StructType(tuple(StructField.from_json_value(f) for f in fields))
        if kind == "array":
            return ArrayType(data_type_from_json_value(value["elementType"]), _bool(value, "containsNull"))
        if kind == "map":
            return MapType(
                data_type_from_json_value(value["keyType"]),
                data_type_from_json_value(value["valueType"]),
                _bool(value, "valueContainsNull"),
            )
    except KeyError as e:
        raise SchemaError(f"{kind} type is missing {e.args[0]!r}: {json.dumps(value)[:200]}") from None
    raise SchemaError(f"unsupported type {json.dumps(value)[:200]}")


def _bool(value: dict[str, Any], key: str) -> bool:
    flag = value.get(key, True)
    if not isinstance(flag, bool):
        raise SchemaError(f"{key!r} must be a boolean, got {flag!r}")
    return flag


def _primitive_from_name(name: str) -> PrimitiveType | DecimalType:
    if name == "decimal":
        return DecimalType()
    params = decimal_params(name)
    if params is not None:
        return DecimalType(*params)
    if name not in PRIMITIVE_NAMES:
        raise SchemaError(f"unknown type {name!r}")
    return PrimitiveType(name)


def _from_ddl(ddl: str) -> StructType:
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    prefix = "CREATE TABLE t ("
    try:
        create = sqlglot.parse_one(f"{prefix}{ddl})", read="spark")
    except SqlglotError as e:
        where = ""
        errors = getattr(e, "errors", None) or [{}]
        if errors[0].get("line") is not None:
            line, col = errors[0]["line"], errors[0]["col"]
            col = col - len(prefix) if line == 1 else col
            where = f" near line {line}, column {col}"
        what = errors[0].get("description") or str(e)
        raise SchemaError(f"cannot parse column definitions {ddl!r}: {what}{where}") from None
    schema = create.this if isinstance(create, exp.Create) else None
    if not isinstance(schema, exp.Schema):
        raise SchemaError(f"cannot parse column definitions {ddl!r}")
    return StructType(tuple(_field_from_column_def(c, ddl) for c in schema.expressions))


def _field_from_column_def(column: exp.Expr, ddl: str) -> StructField:
    from sqlglot import exp

    if not isinstance(column, exp.ColumnDef) or not isinstance(column.args.get("kind"), exp.DataType):
        raise SchemaError(f"expected 'name TYPE' in {ddl!r}, got {column.sql(dialect='spark')!r}")
    nullable = True
    metadata: dict[str, Any] = {}
    for constraint in column.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
            nullable = False
        elif isinstance(kind, exp.CommentColumnConstraint):
            metadata["comment"] = kind.this.name
        else:
            option = constraint.sql(dialect="spark")
            raise SchemaError(f"unsupported column option {option!r} for column {column.name!r}")
    data_type, char_varchar = _type_from_sqlglot(column.args["kind"], column.name)
    if char_varchar:
        metadata[CHAR_VARCHAR_METADATA] = char_varchar
    return StructField(column.name, data_type, nullable, metadata)


def _type_from_sqlglot(dt: exp.Expr, column: str) -> tuple[DataType, str | None]:
    """Map a sqlglot type to ours; the second item is Spark's char/varchar metadata string, if any."""
    from sqlglot import exp

    sql_type = exp.DataType.Type
    simple = {
        sql_type.TINYINT: "byte",
        sql_type.SMALLINT: "short",
        sql_type.INT: "integer",
        sql_type.BIGINT: "long",
        sql_type.FLOAT: "float",
        sql_type.DOUBLE: "double",
        sql_type.BOOLEAN: "boolean",
        sql_type.TEXT: "string",
        sql_type.BINARY: "binary",
        sql_type.VARBINARY: "binary",
        sql_type.DATE: "date",
        sql_type.TIMESTAMP: "timestamp",
        sql_type.TIMESTAMPTZ: "timestamp",
        sql_type.TIMESTAMPLTZ: "timestamp",
        sql_type.TIMESTAMPNTZ: "timestamp_ntz",
        sql_type.VARIANT: "variant",
    }
    params = [p.this if isinstance(p, exp.DataTypeParam) else p for p in dt.expressions]
    if dt.this in simple and not params:
        return PrimitiveType(simple[dt.this]), None
    if dt.this in (sql_type.CHAR, sql_type.VARCHAR) and len(params) == 1:
        return PrimitiveType("string"), f"{dt.this.value.lower()}({params[0].name})"
    if dt.this == sql_type.DECIMAL and len(params) <= 2 and all(p.name.isdigit() for p in params):
        return DecimalType(*(int(p.name) for p in params)), None
    if dt.this == sql_type.ARRAY and len(params) == 1:
        return ArrayType(_type_from_sqlglot(params[0], column)[0]), None
    if dt.this == sql_type.MAP and len(params) == 2:
        return MapType(_type_from_sqlglot(params[0], column)[0], _type_from_sqlglot(params[1], column)[0]), None
    if dt.this == sql_type.STRUCT:
        return StructType(tuple(_field_from_column_def(p, column) for p in params)), None
    raise SchemaError(f"unsupported type {dt.sql(dialect='spark')!r} for column {column!r}")
