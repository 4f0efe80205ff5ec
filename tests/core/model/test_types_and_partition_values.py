"""The one type table (serialake.core.model.types) and the one partition value parser (partition_values)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from serialake.core.model.partition_values import parse_partition_value
from serialake.core.model.schema import ArrayType, DecimalType, PrimitiveType, StructType
from serialake.core.model.types import (
    INTEGRAL_TYPES,
    PRIMITIVE_NAMES,
    arrow_type,
    decimal_params,
    integral_bounds,
    sql_name,
    type_family,
)
from serialake.core.model.validate import check_partition_values

UTC = dt.UTC


def test_table_covers_every_schema_type() -> None:
    for name in PRIMITIVE_NAMES:
        assert PrimitiveType(name).simple_string() == sql_name(name)
    assert INTEGRAL_TYPES == ("byte", "short", "integer", "long")
    assert [integral_bounds(t) for t in INTEGRAL_TYPES] == [
        (-(2**7), 2**7 - 1), (-(2**15), 2**15 - 1), (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)
    ]
    assert integral_bounds("double") is None


@pytest.mark.parametrize(
    ("data_type", "family", "arrow"),
    [
        (PrimitiveType("byte"), "integral", pa.int8()),
        (PrimitiveType("integer"), "integral", pa.int32()),
        ("long", "integral", pa.int64()),
        (PrimitiveType("float"), "fractional", pa.float32()),
        (PrimitiveType("double"), "fractional", pa.float64()),
        (DecimalType(12, 3), "decimal", pa.decimal128(12, 3)),
        ("decimal(5,1)", "decimal", pa.decimal128(5, 1)),
        (PrimitiveType("string"), "string", pa.string()),
        (PrimitiveType("binary"), "binary", pa.binary()),
        (PrimitiveType("boolean"), "boolean", pa.bool_()),
        (PrimitiveType("date"), "date", pa.date32()),
        (PrimitiveType("timestamp"), "timestamp", pa.timestamp("us", tz="UTC")),
        (PrimitiveType("timestamp_ntz"), "timestamp", pa.timestamp("us")),
        (PrimitiveType("void"), None, None),
        (ArrayType(PrimitiveType("long")), None, None),
        (StructType(), None, None),
    ],
)
def test_family_and_arrow_type(data_type, family, arrow) -> None:
    assert type_family(data_type) == family
    assert arrow_type(data_type) == arrow


def test_decimal_params() -> None:
    assert decimal_params(DecimalType(7, 2)) == (7, 2)
    assert decimal_params("decimal( 7 , 2 )") == (7, 2)
    assert decimal_params("long") is None and decimal_params(ArrayType(PrimitiveType("long"))) is None


@pytest.mark.parametrize(
    ("raw", "data_type", "want"),
    [
        (None, "long", None),
        ("", "long", None),
        ("  ", "date", None),
        ("", "string", ""),
        (" a ", "string", " a "),
        ("", "binary", None),
        ("ab", "binary", b"ab"),
        ("+12", "integer", 12),
        (" -3 ", "byte", -3),
        ("9223372036854775807", "long", 2**63 - 1),
        ("1.5", "double", 1.5),
        ("-1e3", "float", -1000.0),
        ("TRUE", "boolean", True),
        (" false ", "boolean", False),
        ("1.50", DecimalType(10, 2), Decimal("1.50")),
        ("2024-02-29", "date", dt.date(2024, 2, 29)),
        ("2024-02-29 10:00:00", "date", dt.date(2024, 2, 29)),
        ("2024-01-02 03:04:05.123456", "timestamp", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("2024-01-02T03:04:05Z", PrimitiveType("timestamp"), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05+02:00", "timestamp", dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)),
        ("2024-01-02 03:04:05", "timestamp_ntz", dt.datetime(2024, 1, 2, 3, 4, 5)),
        ("2024-01-02T03:04:05+02:00", "timestamp_ntz", dt.datetime(2024, 1, 2, 1, 4, 5)),
    ],
)
def test_parse_partition_value(raw, data_type, want) -> None:
    got = parse_partition_value(raw, data_type)
    assert got == want and type(got) is type(want)
    if isinstance(want, dt.datetime):
        assert got.tzinfo == want.tzinfo


@pytest.mark.parametrize(
    ("raw", "data_type", "reason"),
    [
        ("128", "byte", "out of the range of byte"),
        ("1.0", "integer", "not an integer"),
        ("1_000", "long", "not an integer"),
        ("1_0", "double", "'_'"),
        ("yes", "boolean", "true or false"),
        ("2024-13-01", "date", ""),
        ("noon", "timestamp", ""),
        ("123456789.1", DecimalType(10, 2), "more than 8 digits"),
        ("NaN", "decimal(10,2)", "not a finite number"),
    ],
)
def test_invalid_partition_values_raise_value_error(raw, data_type, reason) -> None:
    with pytest.raises(ValueError, match="is not a valid") as e:
        parse_partition_value(raw, data_type)
    assert repr(raw) in str(e.value) and reason in str(e.value)


def test_complex_types_are_not_partition_types() -> None:
    with pytest.raises(ValueError, match="not supported"):
        parse_partition_value("1", ArrayType(PrimitiveType("long")))


def test_validation_accepts_exactly_what_parses() -> None:
    from serialake.core.model.actions import Metadata
    from serialake.core.model.validate import InvalidActionError

    schema = StructType.from_ddl("b TINYINT, d DATE, x DECIMAL(4,1), s STRING").to_json()
    meta = Metadata(schema_string=schema, partition_columns=("b", "d", "x", "s"))
    check_partition_values(meta, [("b", "127"), ("b", ""), ("d", "2024-01-01"), ("x", "999.9"), ("s", "any")])
    for key, value in [("b", "128"), ("d", "2024-02-30"), ("x", "1000")]:
        with pytest.raises(InvalidActionError):
            check_partition_values(meta, [(key, value)])
