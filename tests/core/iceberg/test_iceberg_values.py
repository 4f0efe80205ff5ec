"""Bounds from Delta statistics and Iceberg single-value bytes (serialake.core.iceberg.values)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from serialake.core.iceberg.values import (
    decimal_bytes,
    internal_partition_value,
    lower_bound,
    single_value,
    upper_bound,
)
from serialake.core.model.schema import DecimalType, PrimitiveType

P = PrimitiveType
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def micros(value: dt.datetime) -> int:
    return (value - EPOCH) // dt.timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("delta_type", "iceberg_type", "stat", "low", "high"),
    [
        (P("integer"), "int", 5, 5, 5),
        (P("long"), "long", Decimal("5.5"), 5, 6),  # a non-integral statistic widens outwards
        (P("integer"), "int", 2**31, None, None),  # out of the type's range: no bound
        (P("integer"), "int", True, None, None),
        (DecimalType(5, 2), "decimal(5, 2)", Decimal("1.5"), 150, 150),
        (DecimalType(5, 2), "decimal(5, 2)", Decimal("1.005"), 100, 101),
        (DecimalType(3, 2), "decimal(3, 2)", Decimal("123.4"), None, None),  # beyond the precision
        (P("date"), "date", "1970-01-11", 10, 10),
        (P("boolean"), "boolean", True, True, True),
        (P("float"), "float", 1.5, None, None),
        (P("double"), "double", Decimal("1.5"), None, None),
        (P("binary"), "binary", "YQ==", None, None),
        (P("timestamp"), "timestamptz", "2024-01-01T00:00:00.123+01:00",
         micros(dt.datetime(2023, 12, 31, 23, 0, 0, 123000, tzinfo=dt.UTC)),
         micros(dt.datetime(2023, 12, 31, 23, 0, 0, 123999, tzinfo=dt.UTC))),
        (P("timestamp"), "timestamptz", "1969-12-31T23:59:59.9995Z", -1000, -1),  # floored, also before 1970
        (P("timestamp_ntz"), "timestamp", "2000-01-01T00:00:00.001", 946684800001000, 946684800001999),
        (P("string"), "string", "short", "short", "short"),
        (P("string"), "string", "a" * 31, "a" * 31, "a" * 31),
        (P("string"), "string", "a" * 32, "a" * 32, None),  # may be a prefix: no upper bound
        (P("string"), "string", "\U0001f600" * 16, "\U0001f600" * 16, None),  # 32 UTF-16 units (Delta Spark)
        (P("string"), "string", "a" * 32 + "\U0010ffff", "a" * 32 + "\U0010ffff", None),
        (P("string"), "string", "ab\ud83d", "ab", None),  # a prefix cut inside a surrogate pair
        (P("string"), "string", {"nested": 1}, None, None),
    ],
)  # fmt: skip
def test_bounds(delta_type: Any, iceberg_type: str, stat: Any, low: Any, high: Any) -> None:
    assert lower_bound(delta_type, iceberg_type, stat) == low
    assert upper_bound(delta_type, iceberg_type, stat) == high


def test_single_value_bytes() -> None:
    assert single_value("int", -2) == b"\xfe\xff\xff\xff"
    assert single_value("long", 1) == b"\x01" + b"\x00" * 7
    assert single_value("date", 10) == b"\x0a\x00\x00\x00"
    assert single_value("boolean", True) == b"\x01"
    assert single_value("string", "é") == "é".encode()
    assert single_value("decimal(9, 2)", 150) == b"\x00\x96"  # minimal two's complement, big-endian
    assert single_value("decimal(9, 2)", -150) == b"\xff\x6a"
    assert single_value("decimal(9, 2)", 0) == b"\x00"
    assert decimal_bytes(-1, 4) == b"\xff\xff\xff\xff"
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import DecimalType as IcebergDecimal
    from pyiceberg.types import TimestamptzType

    assert from_bytes(IcebergDecimal(9, 2), single_value("decimal(9, 2)", -150)) == Decimal("-1.50")
    assert from_bytes(TimestamptzType(), single_value("timestamptz", 123)) == 123


def test_partition_values() -> None:
    assert internal_partition_value("2024-01-02", P("date"), "date") == 19724
    assert internal_partition_value("1970-01-01 00:00:01.5", P("timestamp"), "timestamptz") == 1_500_000
    assert internal_partition_value("1970-01-01 00:00:01", P("timestamp_ntz"), "timestamp") == 1_000_000
    assert internal_partition_value("-1.5", DecimalType(5, 2), "decimal(5, 2)") == -150
    assert internal_partition_value(None, P("string"), "string") is None
    assert internal_partition_value("", P("string"), "string") == ""
    assert internal_partition_value("", P("integer"), "int") is None
    assert internal_partition_value("ab", P("binary"), "binary") == b"ab"
    with pytest.raises(ValueError, match="digits after the point"):
        internal_partition_value("1.234", DecimalType(5, 2), "decimal(5, 2)")
    with pytest.raises(ValueError):
        internal_partition_value("x", P("integer"), "int")
