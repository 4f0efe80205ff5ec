"""Delta schemas as Iceberg schemas (serialake.core.iceberg.schema), checked against pyiceberg's model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from serialake.core.iceberg import IcebergConversionError, convert_schema
from serialake.core.iceberg.schema import partition_fields
from serialake.core.model.schema import StructType


def _f(name: str, type_: Any, fid: int | None, *, nullable: bool = True, nested: dict[str, int] | None = None,
       comment: str | None = None) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {}
    if fid is not None:
        meta = {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": f"col-{fid}"}
    if nested:
        meta["delta.columnMapping.nested.ids"] = nested
    if comment:
        meta["comment"] = comment
    return {"name": name, "type": type_, "nullable": nullable, "metadata": meta}


def _schema(*fields: dict[str, Any]) -> StructType:
    return StructType.from_json(json.dumps({"type": "struct", "fields": list(fields)}))


WIDE = _schema(
    _f("id", "long", 1, nullable=False, comment="the key"),
    _f("b", "byte", 2), _f("s", "short", 3), _f("i", "integer", 4), _f("f", "float", 5), _f("d", "double", 6),
    _f("dec", "decimal(10,2)", 7), _f("str", "string", 8), _f("bin", "binary", 9), _f("flag", "boolean", 10),
    _f("day", "date", 11), _f("ts", "timestamp", 12), _f("ntz", "timestamp_ntz", 13),
    _f("st", {"type": "struct", "fields": [_f("a", "integer", 15), _f("B", "string", 16, nullable=False)]}, 14),
    _f("arr", {"type": "array", "elementType": "long", "containsNull": False}, 17, nested={"col-17.element": 18}),
    _f("m", {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}, 19,
       nested={"col-19.key": 20, "col-19.value": 21}),
    _f("aa", {"type": "array", "elementType": {"type": "array", "elementType": "string", "containsNull": True},
              "containsNull": True}, 22, nested={"col-22.element": 23, "col-22.element.element": 24}),
    _f("as", {"type": "array", "elementType": {"type": "struct", "fields": [_f("x", "integer", 27)]},
              "containsNull": True}, 25, nested={"col-25.element": 26}),
)  # fmt: skip


def test_types_ids_and_requiredness() -> None:
    out = convert_schema(WIDE, table="/t")
    by_name = {f["name"]: f for f in out.struct["fields"]}
    types = {name: f["type"] for name, f in by_name.items() if isinstance(f["type"], str)}
    assert types == {
        "id": "long", "b": "int", "s": "int", "i": "int", "f": "float", "d": "double", "dec": "decimal(10, 2)",
        "str": "string", "bin": "binary", "flag": "boolean", "day": "date", "ts": "timestamptz", "ntz": "timestamp",
    }  # fmt: skip
    assert by_name["id"] == {"id": 1, "name": "id", "required": True, "type": "long", "doc": "the key"}
    assert by_name["b"]["required"] is False
    assert by_name["st"]["type"] == {"type": "struct", "fields": [
        {"id": 15, "name": "a", "required": False, "type": "int"},
        {"id": 16, "name": "B", "required": True, "type": "string"}]}  # fmt: skip
    assert by_name["arr"]["type"] == {"type": "list", "element-id": 18, "element": "long", "element-required": True}
    assert by_name["m"]["type"] == {"type": "map", "key-id": 20, "key": "string", "value-id": 21, "value": "int",
                                    "value-required": False}  # fmt: skip
    assert by_name["aa"]["type"]["element"] == {"type": "list", "element-id": 24, "element": "string",
                                                "element-required": False}  # fmt: skip
    assert by_name["as"]["type"]["element"]["fields"][0]["id"] == 27
    assert out.max_id == 27
    # Statistics describe the primitive fields reachable through structs only, by physical path.
    assert {leaf.physical: leaf.field_id for leaf in out.leaves if len(leaf.physical) > 1} == {
        ("col-14", "col-15"): 15, ("col-14", "col-16"): 16}


def test_pyiceberg_reads_the_schema_and_the_name_mapping() -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import parse_mapping_from_json
    from pyiceberg.types import DecimalType, ListType, MapType, TimestampType, TimestamptzType

    out = convert_schema(WIDE, table="/t")
    schema = Schema.model_validate({**out.struct, "schema-id": 0})
    assert schema.find_field("st.B").field_id == 16
    assert schema.find_type(7) == DecimalType(10, 2)
    assert schema.find_type(12) == TimestamptzType() and schema.find_type(13) == TimestampType()
    assert isinstance(schema.find_type(19), MapType) and isinstance(schema.find_type(22), ListType)
    assert schema.highest_field_id == out.max_id
    by_name = parse_mapping_from_json(out.name_mapping)._field_by_name  # resolvable by the files' physical names
    assert by_name["col-14.col-16"].field_id == 16
    assert by_name["col-22.element.element"].field_id == 24
    assert by_name["col-19.value"].field_id == 21
    assert "st" not in by_name  # logical names are not file names


def test_nested_ids_keyed_by_logical_name_are_accepted() -> None:
    s = _schema(_f("arr", {"type": "array", "elementType": "long", "containsNull": True}, 1,
                   nested={"arr.element": 2}))  # fmt: skip
    assert convert_schema(s, table="/t").struct["fields"][0]["type"]["element-id"] == 2


@pytest.mark.parametrize(
    ("schema", "column", "match"),
    [
        (_schema(_f("a", "long", 1), _f("b", "string", None)), "b", "no column-mapping id"),
        (_schema(_f("s", {"type": "struct", "fields": [_f("x", "long", None)]}, 1)), "s.x", "no column-mapping id"),
        (_schema(_f("arr", {"type": "array", "elementType": "long", "containsNull": True}, 1)), "arr.element",
         "no nested column-mapping id"),
        (_schema(_f("m", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}, 1,
                    nested={"col-1.key": 2})), "m.value", "'col-1.value'"),
        (_schema(_f("a", "long", 1), _f("b", "long", 1)), "b", "same column-mapping id 1"),
        (_schema(_f("v", "void", 1)), "v", "Iceberg cannot hold"),
    ],
)  # fmt: skip
def test_errors_name_the_table_and_column(schema: StructType, column: str, match: str) -> None:
    with pytest.raises(IcebergConversionError, match=match) as info:
        convert_schema(schema, table="/data/t", version=7)
    err = info.value
    assert err.column == column and err.table == "/data/t" and err.version == 7
    assert "/data/t at version 7" in str(err) and "Help:" in str(err)
    assert isinstance(err, ValueError)
    import pickle

    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_partition_field_ids_are_kept_across_specs() -> None:
    s = convert_schema(_schema(_f("a", "long", 1), _f("p", "string", 2), _f("q", "date", 3)), table="/t")
    first, last = partition_fields(s, ["p"], [], 999, table="/t")
    assert [(f.field_id, f.source_id, f.name, f.physical) for f in first] == [(1000, 2, "p", "col-2")]
    spec = {"spec-id": 0, "fields": [{"name": "p", "transform": "identity", "source-id": 2, "field-id": 1000}]}
    second, last2 = partition_fields(s, ["q", "p"], [spec], last, table="/t")
    assert [(f.field_id, f.source_id) for f in second] == [(1001, 3), (1000, 2)] and last2 == 1001
    with pytest.raises(IcebergConversionError, match="partition column 'zz'"):
        partition_fields(s, ["zz"], [], 999, table="/t")
