"""Values in Iceberg's representations: partition values, metric bounds, single-value bytes.

A value is held in its *internal* form, which orders as Iceberg orders the type: ``int`` for
int, long, date (days since 1970-01-01), timestamp and timestamptz (microseconds since the
epoch, UTC) and decimal (the unscaled integer); ``float`` for float and double; ``bool``;
``str``; ``bytes`` (unsigned lexicographic, as Python compares bytes).

Bounds policy: an Iceberg reader skips a file whose bounds exclude a predicate, so a bound
that is too tight silently loses rows. Every bound written here is implied by what Delta's
statistics guarantee, widened where they are approximate, and left out otherwise:

- integers, dates, booleans, decimals: Delta's min/max are exact (a decimal written with more
  digits than the scale is widened outwards to the scale);
- timestamps: Delta's JSON statistics have millisecond precision (writers truncate), so the
  lower bound is the value floored to the millisecond and the upper bound that millisecond
  plus 999 microseconds;
- strings: Delta keeps a prefix of long strings (``serialake.spark.footer_stats.STRING_STATS_PREFIX``
  = 32 characters; Delta Spark counts UTF-16 units and appends U+10FFFF to a truncated max).
  A prefix is still a lower bound, so the min is always used (cut before a lone surrogate,
  which UTF-8 cannot hold). A max is used only when it is shorter than 32 UTF-16 units:
  no truncating writer produces such a string, so it is exact;
- floats and doubles: left out. Delta's min/max are taken from Parquet footers or Spark
  aggregates whose NaN handling differs (footers ignore NaN, Spark orders it last) and that
  do not tell -0.0 from 0.0, while Iceberg bounds must exclude NaN with ``nan_value_counts``
  beside them; nothing in Delta's statistics says whether a file holds NaN;
- binary: Delta keeps no min/max.

A partition column's value is the same in every row of a file, so it gives exact bounds
(except floats, for the reason above) and exact null and value counts.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

from serialake.core.model.partition_values import parse_boolean, parse_date, parse_partition_value, parse_timestamp
from serialake.core.model.schema import DecimalType, PrimitiveType

__all__ = [
    "STRING_STATS_PREFIX",
    "avro_value",
    "decimal_bytes",
    "decimal_size",
    "from_avro_value",
    "from_single_value",
    "internal_partition_value",
    "lower_bound",
    "single_value",
    "sort_key",
    "upper_bound",
]

#: Characters Delta keeps of a string's min/max (Delta's default, and serialake's writer's).
STRING_STATS_PREFIX = 32
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_INT_RANGE = (-(1 << 31), (1 << 31) - 1)
_LONG_RANGE = (-(1 << 63), (1 << 63) - 1)
_PACK = {"int": struct.Struct("<i"), "date": struct.Struct("<i"), "long": struct.Struct("<q"),
         "timestamp": struct.Struct("<q"), "timestamptz": struct.Struct("<q"), "float": struct.Struct("<f"),
         "double": struct.Struct("<d")}  # fmt: skip


def _decimal_params(iceberg_type: str) -> tuple[int, int] | None:
    if not iceberg_type.startswith("decimal("):
        return None
    p, s = iceberg_type[8:-1].split(",")
    return int(p), int(s)


def decimal_size(precision: int) -> int:
    """Bytes of the smallest two's-complement integer holding every unscaled value of the precision."""
    size = 1
    while (1 << (8 * size - 1)) <= 10**precision - 1:
        size += 1
    return size


def decimal_bytes(unscaled: int, size: int | None = None) -> bytes:
    """An unscaled decimal as big-endian two's complement (the fewest bytes, or exactly ``size``)."""
    if size is None:
        size = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(size, "big", signed=True)


def single_value(iceberg_type: str, value: Any) -> bytes:
    """Iceberg's single-value serialization of an internal value (bounds, partition summaries)."""
    packer = _PACK.get(iceberg_type)
    if packer is not None:
        return packer.pack(value)
    if iceberg_type == "boolean":
        return b"\x01" if value else b"\x00"
    if iceberg_type == "string":
        return str(value).encode("utf-8")
    if iceberg_type == "binary":
        return bytes(value)
    if _decimal_params(iceberg_type) is not None:
        return decimal_bytes(int(value))
    raise ValueError(f"no single-value serialization for Iceberg type {iceberg_type}")


def from_single_value(iceberg_type: str, data: bytes) -> Any:
    """The internal value of Iceberg single-value bytes (the inverse of ``single_value``)."""
    packer = _PACK.get(iceberg_type)
    if packer is not None:
        return packer.unpack(data)[0]
    if iceberg_type == "boolean":
        return data != b"\x00"
    if iceberg_type == "string":
        return data.decode("utf-8")
    if iceberg_type == "binary":
        return bytes(data)
    if _decimal_params(iceberg_type) is not None:
        return int.from_bytes(data, "big", signed=True)
    raise ValueError(f"no single-value serialization for Iceberg type {iceberg_type}")


def avro_value(iceberg_type: str, value: Any) -> Any:
    """An internal value as a manifest's Avro record holds it (a decimal as its fixed bytes)."""
    if value is None:
        return None
    params = _decimal_params(iceberg_type)
    if params is not None:
        return decimal_bytes(int(value), decimal_size(params[0]))
    return value


def from_avro_value(iceberg_type: str, value: Any) -> Any:
    """The internal value of an Avro partition value (the inverse of ``avro_value``)."""
    if value is None:
        return None
    if _decimal_params(iceberg_type) is not None:
        return int.from_bytes(value, "big", signed=True)
    return value


def sort_key(value: Any) -> Any:
    """A key ordering internal values as Iceberg does (floats: -0.0 before 0.0)."""
    if isinstance(value, float):
        return (value, math.copysign(1.0, value))
    return value


def _micros(value: dt.datetime) -> int:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return (value - _EPOCH) // _MICRO


def _days(value: dt.date) -> int:
    return (value - _EPOCH_DATE).days


def internal_partition_value(raw: str | None, delta_type: PrimitiveType | DecimalType, iceberg_type: str) -> Any:
    """The internal value of a Delta partition value string (``ValueError`` when it is not one)."""
    value = parse_partition_value(raw, delta_type)
    if value is None:
        return None
    if isinstance(delta_type, DecimalType):
        unscaled = value.scaleb(delta_type.scale)
        if unscaled != unscaled.to_integral_value():
            raise ValueError(f"partition value {raw!r} has more than {delta_type.scale} digits after the point")
        return int(unscaled)
    if iceberg_type in ("timestamp", "timestamptz"):
        return _micros(value)
    if iceberg_type == "date":
        return _days(value)
    if iceberg_type == "binary":
        return bytes(value)
    return value


def _integral(value: Any, upper: bool) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (float, Decimal)):
        if not math.isfinite(value):
            return None
        return math.ceil(value) if upper else math.floor(value)
    return None


def _utf16_length(text: str) -> int:
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def _bound(delta_type: PrimitiveType | DecimalType, iceberg_type: str, value: Any, upper: bool) -> Any:
    if value is None or isinstance(value, (dict, list)):
        return None
    try:
        if isinstance(delta_type, DecimalType):
            if isinstance(value, bool):
                return None
            number = value if isinstance(value, Decimal) else Decimal(str(value).strip())
            if not number.is_finite():
                return None
            unscaled = int(number.scaleb(delta_type.scale).to_integral_value(ROUND_CEILING if upper else ROUND_FLOOR))
            return unscaled if abs(unscaled) < 10**delta_type.precision else None
        if iceberg_type in ("int", "long"):
            n = _integral(value, upper)
            low, high = _INT_RANGE if iceberg_type == "int" else _LONG_RANGE
            return n if n is not None and low <= n <= high else None
        if iceberg_type == "boolean":
            return value if isinstance(value, bool) else parse_boolean(value) if isinstance(value, str) else None
        if iceberg_type == "date":
            return _days(parse_date(value)) if isinstance(value, str) else None
        if iceberg_type in ("timestamp", "timestamptz"):
            if not isinstance(value, str):
                return None
            micros = _micros(parse_timestamp(value))  # an offset is applied; no offset: UTC (or local for ntz)
            millis = micros - micros % 1000
            return millis + 999 if upper else millis
        if iceberg_type == "string":
            if not isinstance(value, str):
                return None
            cut = next((i for i, c in enumerate(value) if 0xD800 <= ord(c) <= 0xDFFF), None)
            if upper:  # exact only when shorter than any truncated statistic (and valid UTF-8 text)
                return value if cut is None and _utf16_length(value) < STRING_STATS_PREFIX else None
            # A lone surrogate (a prefix cut inside a pair) cannot be UTF-8: a shorter prefix is still a lower bound.
            return value if cut is None else value[:cut]
    except (ValueError, ArithmeticError, InvalidOperation, OverflowError):
        return None
    return None  # float, double, binary: see the module docstring


def lower_bound(delta_type: PrimitiveType | DecimalType, iceberg_type: str, value: Any) -> Any:
    """An internal value no greater than any value of a column whose Delta ``minValues`` entry is ``value``.

    None when no such bound can be given safely (see the module docstring).
    """
    return _bound(delta_type, iceberg_type, value, upper=False)


def upper_bound(delta_type: PrimitiveType | DecimalType, iceberg_type: str, value: Any) -> Any:
    """An internal value no less than any value of a column whose Delta ``maxValues`` entry is ``value``, or None."""
    return _bound(delta_type, iceberg_type, value, upper=True)
