"""Delta's primitive types in one table: SQL spelling, family, integral range and Arrow type.

Every module that needs to know what a Delta type name means (the schema's SQL spelling,
partition value parsing and checking, data skipping, row evaluation, driver-side value
computation) reads it here. Types are given either as schema objects (``PrimitiveType``,
``DecimalType``) or as their JSON names (``"long"``, ``"decimal(10,2)"``).

Families group the types that behave alike: ``integral`` (byte, short, integer, long),
``fractional`` (float, double), ``decimal``, ``string``, ``binary``, ``boolean``, ``date``,
``timestamp`` (timestamp and timestamp_ntz); ``void`` and ``variant`` have none.

pyarrow is imported only by ``arrow_type``, when called.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INTEGRAL_TYPES",
    "PRIMITIVES",
    "PRIMITIVE_NAMES",
    "Primitive",
    "arrow_type",
    "decimal_params",
    "integral_bounds",
    "sql_name",
    "type_family",
    "type_name",
]


@dataclass(frozen=True)
class Primitive:
    """One Delta primitive type.

    ``bits``: the width of an integral type (its range is ``-2**(bits-1) .. 2**(bits-1) - 1``).
    ``arrow``: the Arrow type Spark reads the column back as (see ``arrow_type``), by the name
    of its pyarrow factory and arguments; None when no Arrow type stands for it.
    """

    name: str
    sql: str
    family: str | None
    bits: int | None = None
    arrow: tuple[Any, ...] | None = None


_TABLE = (
    Primitive("byte", "tinyint", "integral", 8, ("int8",)),
    Primitive("short", "smallint", "integral", 16, ("int16",)),
    Primitive("integer", "int", "integral", 32, ("int32",)),
    Primitive("long", "bigint", "integral", 64, ("int64",)),
    Primitive("float", "float", "fractional", None, ("float32",)),
    Primitive("double", "double", "fractional", None, ("float64",)),
    Primitive("boolean", "boolean", "boolean", None, ("bool_",)),
    Primitive("string", "string", "string", None, ("string",)),
    Primitive("binary", "binary", "binary", None, ("binary",)),
    Primitive("date", "date", "date", None, ("date32",)),
    Primitive("timestamp", "timestamp", "timestamp", None, ("timestamp", "us", "UTC")),
    Primitive("timestamp_ntz", "timestamp_ntz", "timestamp", None, ("timestamp", "us")),
    Primitive("void", "void", None),
    Primitive("variant", "variant", None),
)

#: Delta primitive type name -> its row of the table.
PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _TABLE}
PRIMITIVE_NAMES = frozenset(PRIMITIVES)
#: The integral types, narrowest first.
INTEGRAL_TYPES: tuple[str, ...] = tuple(p.name for p in _TABLE if p.family == "integral")

_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def type_name(data_type: Any) -> str | None:
    """The JSON name of a primitive or decimal type (``long``, ``decimal(10,2)``); None for others.

    ``data_type`` is a schema type or already a name (returned as is).
    """
    if isinstance(data_type, str):
        return data_type
    # Schema types write themselves as JSON: a name exactly for primitives and decimals (and an
    # object for structs, arrays and maps). Duck-typed: ``schema`` imports this module.
    to_json_value = getattr(data_type, "to_json_value", None)
    value = to_json_value() if callable(to_json_value) else None
    return value if isinstance(value, str) else None


def decimal_params(data_type: Any) -> tuple[int, int] | None:
    """``(precision, scale)`` of a decimal type (or ``decimal(p,s)`` name), else None."""
    name = type_name(data_type)
    m = _DECIMAL.fullmatch(name) if name else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def type_family(data_type: Any) -> str | None:
    """The family of a type (see the module docstring); None for complex and unknown types."""
    name = type_name(data_type)
    if name is None:
        return None
    p = PRIMITIVES.get(name)
    if p is not None:
        return p.family
    return "decimal" if decimal_params(name) is not None else None


def integral_bounds(data_type: Any) -> tuple[int, int] | None:
    """``(lowest, highest)`` value of an integral type (both inclusive), else None."""
    p = PRIMITIVES.get(type_name(data_type) or "")
    if p is None or p.bits is None:
        return None
    return -(1 << (p.bits - 1)), (1 << (p.bits - 1)) - 1


def sql_name(data_type: Any) -> str | None:
    """Spark SQL spelling of a primitive or decimal type (``bigint``, ``decimal(10,2)``)."""
    name = type_name(data_type)
    if name is None:
        return None
    p = PRIMITIVES.get(name)
    return p.sql if p is not None else name


def arrow_type(data_type: Any) -> Any:
    """The Arrow type Spark reads a column of ``data_type`` back as, or None (complex, void, variant).

    Integral and fractional types keep their width (``integer`` is ``int32``), decimals are
    ``decimal128(p, s)``, ``timestamp`` is ``timestamp[us, tz=UTC]`` and ``timestamp_ntz``
    ``timestamp[us]``.
    """
    import pyarrow as pa

    dec = decimal_params(data_type)
    if dec is not None:
        return pa.decimal128(*dec)
    p = PRIMITIVES.get(type_name(data_type) or "")
    if p is None or p.arrow is None:
        return None
    factory, *args = p.arrow
    return getattr(pa, factory)(*args)
