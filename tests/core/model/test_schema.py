"""Tests for serialake.core.model.schema: Spark StructType JSON, DDL parsing, lookups."""

from __future__ import annotations

import json

import pytest

from serialake.core.model.schema import (
    ArrayType,
    DecimalType,
    MapType,
    PrimitiveType,
    SchemaError,
    StructField,
    StructType,
    data_type_from_json_value,
    physical_name,
)

# As Spark writes it: compact, key order type/fields and name/type/nullable/metadata.
SPARK_SCHEMA = (
    '{"type":"struct","fields":['
    '{"name":"id","type":"long","nullable":false,"metadata":{}},'
    '{"name":"p","type":"integer","nullable":true,"metadata":{"delta.columnMapping.id":2,'
    '"delta.columnMapping.physicalName":"col-5f422f40"}},'
    '{"name":"amount","type":"decimal(10,2)","nullable":true,"metadata":{"comment":"in €"}},'
    '{"name":"tags","type":{"type":"array","elementType":"string","containsNull":true},"nullable":true,"metadata":{}},'
    '{"name":"attrs","type":{"type":"map","keyType":"string","valueType":{"type":"array","elementType":"double",'
    '"containsNull":false},"valueContainsNull":true},"nullable":true,"metadata":{}},'
    '{"name":"s","type":{"type":"struct","fields":[{"name":"a","type":"short","nullable":true,"metadata":{}},'
    '{"name":"b","type":"timestamp_ntz","nullable":false,"metadata":{}}]},"nullable":true,"metadata":{}},'
    '{"name":"when","type":"timestamp","nullable":true,"metadata":{}},'
    '{"name":"v","type":"variant","nullable":true,"metadata":{}},'
    '{"name":"n","type":"void","nullable":true,"metadata":{}},'
    '{"name":"raw","type":"binary","nullable":true,"metadata":{}},'
    '{"name":"ok","type":"boolean","nullable":true,"metadata":{}},'
    '{"name":"d","type":"date","nullable":true,"metadata":{}},'
    '{"name":"t","type":"byte","nullable":true,"metadata":{}},'
    '{"name":"f","type":"float","nullable":true,"metadata":{}}'
    "]}"
)


def test_json_round_trip_is_exact() -> None:
    schema = StructType.from_json(SPARK_SCHEMA)
    assert schema.to_json() == SPARK_SCHEMA
    assert StructType.from_json(schema.to_json()) == schema


def test_parsed_structure() -> None:
    schema = StructType.from_json(SPARK_SCHEMA)
    assert schema.fields[0] == StructField("id", PrimitiveType("long"), False, {})
    assert schema.field("amount").data_type == DecimalType(10, 2)  # type: ignore[union-attr]
    assert schema.field("tags").data_type == ArrayType(PrimitiveType("string"), True)  # type: ignore[union-attr]
    attrs = schema.field("attrs").data_type  # type: ignore[union-attr]
    assert attrs == MapType(PrimitiveType("string"), ArrayType(PrimitiveType("double"), False), True)
    inner = schema.field("s").data_type  # type: ignore[union-attr]
    assert isinstance(inner, StructType) and inner.field_names == ["a", "b"]


def test_field_lookup_is_case_insensitive() -> None:
    schema = StructType.from_json(SPARK_SCHEMA)
    assert schema.field("ID") is schema.fields[0]
    assert schema.field("When").name == "when"  # type: ignore[union-attr]
    assert schema.field("missing") is None
    assert schema.field_names[:3] == ["id", "p", "amount"]


def test_simple_string_uses_spark_sql_names() -> None:
    schema = StructType.from_json(SPARK_SCHEMA)
    assert schema.simple_string() == (
        "struct<id:bigint,p:int,amount:decimal(10,2),tags:array<string>,attrs:map<string,array<double>>,"
        "s:struct<a:smallint,b:timestamp_ntz>,when:timestamp,v:variant,n:void,raw:binary,ok:boolean,"
        "d:date,t:tinyint,f:float>"
    )


def test_physical_name() -> None:
    schema = StructType.from_json(SPARK_SCHEMA)
    assert physical_name(schema.field("p")) == "col-5f422f40"  # type: ignore[arg-type]
    assert physical_name(schema.field("id")) == "id"  # type: ignore[arg-type]


def test_schemas_are_hashable_values() -> None:
    a, b = StructType.from_json(SPARK_SCHEMA), StructType.from_json(SPARK_SCHEMA)
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    changed = StructType(a.fields[:-1] + (StructField("f", PrimitiveType("float"), True, {"comment": "x"}),))
    assert changed != a


def test_from_ddl_primitives_and_options() -> None:
    schema = StructType.from_ddl(
        "id BIGINT NOT NULL, p STRING COMMENT 'the partition', d DATE, i INT, s SMALLINT, t TINYINT, "
        "f FLOAT, db DOUBLE, b BOOLEAN, bin BINARY, ts TIMESTAMP, tn TIMESTAMP_NTZ, x DECIMAL(12,3), y DECIMAL"
    )
    assert schema.simple_string() == (
        "struct<id:bigint,p:string,d:date,i:int,s:smallint,t:tinyint,f:float,db:double,b:boolean,"
        "bin:binary,ts:timestamp,tn:timestamp_ntz,x:decimal(12,3),y:decimal(10,0)>"
    )
    assert schema.field("id").nullable is False  # type: ignore[union-attr]
    assert schema.field("p").metadata == {"comment": "the partition"}  # type: ignore[union-attr]
    first = json.loads(schema.to_json())["fields"][0]
    assert first == {"name": "id", "type": "long", "nullable": False, "metadata": {}}


def test_from_ddl_nested_types() -> None:
    schema = StructType.from_ddl("a ARRAY<INT>, m MAP<STRING, ARRAY<DOUBLE>>, s STRUCT<x: INT, `y z`: STRING NOT NULL>")
    assert schema.field("a").data_type == ArrayType(PrimitiveType("integer"))  # type: ignore[union-attr]
    assert schema.field("m").data_type == MapType(  # type: ignore[union-attr]
        PrimitiveType("string"), ArrayType(PrimitiveType("double"))
    )
    s = schema.field("s").data_type  # type: ignore[union-attr]
    assert s == StructType(
        (StructField("x", PrimitiveType("integer")), StructField("y z", PrimitiveType("string"), False))
    )


def test_from_ddl_char_varchar_keep_spark_metadata() -> None:
    schema = StructType.from_ddl("v VARCHAR(10), c CHAR(3)")
    assert schema.field("v").data_type == PrimitiveType("string")  # type: ignore[union-attr]
    assert schema.field("v").metadata == {"__CHAR_VARCHAR_TYPE_STRING": "varchar(10)"}  # type: ignore[union-attr]
    assert schema.field("c").metadata == {"__CHAR_VARCHAR_TYPE_STRING": "char(3)"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ('{"type":"array","elementType":"int","containsNull":true}', "unknown type 'int'"),
        ('"integer"', "must be a struct"),
        (
            '{"type":"struct","fields":[{"name":"a","type":"wat","nullable":true,"metadata":{}}]}',
            "field 'a': unknown type 'wat'",
        ),
        (
            '{"type":"struct","fields":[{"name":"a","type":"decimal(40,2)","nullable":true,"metadata":{}}]}',
            "decimal(40,2)",
        ),
        ('{"type":"struct","fields":[{"type":"long"}]}', "need an object with 'name'"),
        ('{"type":"struct","fields":[{"name":"a","type":{"type":"map","keyType":"string"}}]}', "missing 'valueType'"),
        (
            '{"type":"struct","fields":[{"name":"a","type":"long"},{"name":"A","type":"long"}]}',
            "duplicate field name 'A'",
        ),
        ('{"type":"udt","class":"x"}', "unsupported type"),
    ],
)
def test_bad_schema_json_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StructType.from_json(text)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("id FOO BAR", "cannot parse column definitions 'id FOO BAR'"),
        ("id INT, p", "expected 'name TYPE'"),
        ("d INTERVAL DAY", "unsupported type 'INTERVAL DAY' for column 'd'"),
        ("x DECIMAL(40, 2)", "decimal\\(40,2\\)"),
        ("x INT DEFAULT 1", "unsupported column option"),
    ],
)
def test_bad_ddl_names_the_problem(ddl: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        StructType.from_ddl(ddl)


def test_schema_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        data_type_from_json_value("nope")
