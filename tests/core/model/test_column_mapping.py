"""Column-mapping ids and physical names given out by ``column_mapping.assign`` (every metadata commit)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from serialake.core.model import column_mapping as cm
from serialake.core.model.actions import Metadata
from serialake.core.model.schema import StructType, physical_name
from serialake.exceptions import UnsupportedFeatureError


def schema(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "struct", "fields": list(fields)})


def field(name: str, type_: Any = "long", **metadata: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": True, "metadata": metadata}


NAME = {"delta.columnMapping.mode": "name"}


def ids(m: Metadata) -> dict[str, int]:
    out = {}
    for path, f in cm._all_fields(StructType.from_json(m.schema_string or "")):
        out[".".join(path)] = cm.field_id(f)
    return out


def test_new_table_gets_ids_names_and_max_id() -> None:
    m = cm.assign(
        Metadata(schema_string=schema(field("a"), field("s", {"type": "struct", "fields": [field("x")]})),
                 configuration=dict(NAME)),
        None, table="t",
    )  # fmt: skip
    assert ids(m) == {"a": 1, "s": 2, "s.x": 3}
    assert m.configuration["delta.columnMapping.maxColumnId"] == "3"
    names = [physical_name(f) for f in StructType.from_json(m.schema_string or "").fields]
    assert all(n.startswith("col-") for n in names) and len(set(names)) == 2


def test_nested_ids_for_iceberg_compat() -> None:
    arr = {"type": "array", "elementType": {"type": "map", "keyType": "string", "valueType": "long",
                                            "valueContainsNull": True}, "containsNull": True}  # fmt: skip
    conf = {**NAME, "delta.enableIcebergCompatV2": "true"}
    m = cm.assign(Metadata(schema_string=schema(field("a", arr)), configuration=conf), None, table="t")
    f = StructType.from_json(m.schema_string or "").fields[0]
    p = physical_name(f)
    assert f.metadata[cm.NESTED_IDS] == {f"{p}.element": 2, f"{p}.element.key": 3, f"{p}.element.value": 4}
    assert m.configuration["delta.columnMapping.maxColumnId"] == "4"
    again = cm.assign(m, m, table="t")  # stable: nothing changes on the next commit
    assert again.schema_string == m.schema_string


def test_switching_an_existing_table_to_name_keeps_stored_names() -> None:
    before = Metadata(schema_string=schema(field("a"), field("b")))
    after = cm.assign(Metadata(schema_string=before.schema_string, configuration=dict(NAME)), before, table="t")
    assert [physical_name(f) for f in StructType.from_json(after.schema_string or "").fields] == ["a", "b"]
    assert ids(after) == {"a": 1, "b": 2}


def test_ids_are_never_reused_and_others_ids_are_not_trusted() -> None:
    first = cm.assign(Metadata(schema_string=schema(field("a"), field("b")), configuration=dict(NAME)), None,
                      table="t")  # fmt: skip
    a = StructType.from_json(first.schema_string or "").fields[0]
    dropped = Metadata(schema_string=StructType((a,)).to_json(), configuration=first.configuration)
    dropped = cm.assign(dropped, first, table="t")
    # A column added back, carrying another table's id 2 and name: a fresh id (3) and name.
    foreign = field("b", **{cm.FIELD_ID: 2, cm.PHYSICAL_NAME: "col-other"})
    added = json.loads(dropped.schema_string or "")
    added["fields"].append(foreign)
    result = cm.assign(Metadata(schema_string=json.dumps(added), configuration=dropped.configuration), dropped,
                       table="t")  # fmt: skip
    fields = StructType.from_json(result.schema_string or "").fields
    assert ids(result) == {"a": 1, "b": 3} and physical_name(fields[1]) != "col-other"
    assert result.configuration["delta.columnMapping.maxColumnId"] == "3"


def test_duplicate_ids_in_given_metadata_are_reassigned() -> None:
    dup = schema(field("a", **{cm.FIELD_ID: 5, cm.PHYSICAL_NAME: "col-a"}),
                 field("b", **{cm.FIELD_ID: 5, cm.PHYSICAL_NAME: "col-b"}))  # fmt: skip
    m = cm.assign(Metadata(schema_string=dup, configuration=dict(NAME)), None, table="t")
    assert ids(m) == {"a": 5, "b": 6}


def test_mode_changes_are_refused_and_none_strips() -> None:
    named = cm.assign(Metadata(schema_string=schema(field("a")), configuration=dict(NAME)), None, table="t")
    with pytest.raises(UnsupportedFeatureError, match="from 'name' to 'none'"):
        cm.assign(Metadata(schema_string=named.schema_string, configuration={}), named, table="t")
    with pytest.raises(UnsupportedFeatureError, match="'name' only"):
        cm.assign(Metadata(schema_string=schema(field("a")), configuration={"delta.columnMapping.mode": "id"}),
                  Metadata(schema_string=schema(field("a"))), table="t")  # fmt: skip
    # A new unmapped table made from a mapped table's schema keeps no mapping metadata.
    plain = cm.assign(Metadata(schema_string=named.schema_string), None, table="t")
    assert "delta.columnMapping" not in (plain.schema_string or "")
    replaced = cm.assign(Metadata(schema_string=named.schema_string), named, table="t", replacing=True)
    assert "delta.columnMapping" not in (replaced.schema_string or "")


def test_arrow_field_ids_reach_nested_fields() -> None:
    import pyarrow as pa

    arr = {"type": "array", "elementType": "long", "containsNull": True}
    inner = {"type": "struct", "fields": [field("x"), field("l", arr)]}
    conf = {**NAME, "delta.enableIcebergCompatV2": "true"}
    m = cm.assign(Metadata(schema_string=schema(field("s", inner)), configuration=conf), None, table="t")
    physical = cm.physical_schema(StructType.from_json(m.schema_string or ""))
    s = physical.fields[0]
    arrow = pa.schema([pa.field(s.name, pa.struct([pa.field(f.name, pa.int64() if f.name.startswith("col") and
                                                            i == 0 else pa.list_(pa.int64()))
                                                   for i, f in enumerate(s.data_type.fields)]))])  # type: ignore[union-attr]
    with_ids = cm.arrow_with_field_ids(arrow, list(StructType.from_json(m.schema_string or "").fields))
    st = with_ids.field(0)
    assert st.metadata[b"PARQUET:field_id"] == b"1"
    assert [st.type.field(i).metadata[b"PARQUET:field_id"] for i in range(2)] == [b"2", b"3"]
    assert st.type.field(1).type.value_field.metadata[b"PARQUET:field_id"] == b"4"
