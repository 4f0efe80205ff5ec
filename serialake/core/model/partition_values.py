"""Delta partition values: the log's strings read as values of their column's type.

``add.partitionValues`` holds every value as a string (PROTOCOL.md, "Partition Value
Serialization"). ``parse_partition_value`` is the one reader of those strings: snapshot
validation (``validate``) accepts exactly the strings it parses, data skipping
(``skipping``) and row evaluation (``row_eval``) compare what it returns, and the Spark
side hands it to Spark.

- a null value (None) is NULL; so is an empty (or blank) string, except for ``string``
  columns, whose empty string is the empty string;
- integral types: a decimal integer (optional sign) within the type's range;
- ``float`` / ``double``: Python's float syntax without ``_`` (NaN and infinities included);
- ``decimal(p, s)``: a finite number with at most ``p - s`` integer digits, as a ``Decimal``;
- ``boolean``: ``true`` / ``false`` in any case;
- ``date``: ``YYYY-MM-DD`` (a time part after a space or ``T`` is ignored);
- ``timestamp``: ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (UTC) or ISO 8601 with ``T``, ``Z`` or an
  offset, as an aware datetime in UTC; ``timestamp_ntz``: the same text as a naive datetime
  (an offset, if any, converted to UTC);
- ``binary``: the string's UTF-8 bytes; ``string`` (and the other primitive types): the
  string itself.

Surrounding blanks are ignored except in strings and binaries.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

from serialake.core.model.types import PRIMITIVES, decimal_params, integral_bounds, type_family, type_name

__all__ = [
    "format_partition_value",
    "hive_escape",
    "parse_boolean",
    "parse_date",
    "parse_partition_value",
    "parse_timestamp",
]


def parse_partition_value(raw: str | None, data_type: Any) -> Any:
    """The value of partition value string ``raw`` for a column of ``data_type``.

    ``data_type`` is a ``PrimitiveType`` / ``DecimalType`` or its JSON name (``"long"``,
    ``"decimal(10,2)"``). Returns None for NULL (see the module docstring for each type).
    Raises ``ValueError`` naming the value and the type when ``raw`` is not a valid value
    of the type, or when the type cannot be a partition column type (struct, array, map).
    """
    if raw is None:
        return None
    name = type_name(data_type)
    parse = _parser(name) if name is not None else None
    if parse is None:
        raise ValueError(f"partition values of type {_shown_type(data_type)} are not supported")
    try:
        return parse(raw)
    except (ValueError, ArithmeticError) as e:
        reason = f" ({e.args[0]})" if isinstance(e, _Invalid) else ""
        raise ValueError(f"partition value {raw!r} is not a valid {name}{reason}") from None


def format_partition_value(value: Any, data_type: Any) -> str | None:
    """The log string of partition value ``value`` (a Python value of ``data_type``): the
    inverse of ``parse_partition_value``, written as Delta writers write it.

    Timestamps are UTC ``YYYY-MM-DD HH:MM:SS.ffffff`` (an aware datetime is converted, a
    naive one is taken as UTC for ``timestamp`` and as is for ``timestamp_ntz``); booleans
    ``true``/``false``; decimals in plain notation; binary as UTF-8 text. ``ValueError``
    for a value that is not of the type.
    """
    if value is None:
        return None
    name = type_name(data_type)
    if name in ("timestamp", "timestamp_ntz"):
        if not isinstance(value, dt.datetime):
            raise ValueError(f"partition value {value!r} is not a {name}")
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"binary partition value {bytes(value)!r} is not UTF-8 text") from None
    if isinstance(value, float):
        return repr(value)
    return str(value)


# Characters Hive (and Spark) escape as %XX in partition directory names.
_HIVE_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | frozenset(chr(c) for c in range(1, 32))


def hive_escape(text: str) -> str:
    """``text`` as a Hive partition directory name component (Spark's ``escapePathName``)."""
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in text)


def parse_boolean(text: str) -> bool:
    """``true`` / ``false`` in any case, blanks around ignored; ValueError otherwise."""
    flag = {"true": True, "false": False}.get(text.strip().lower())
    if flag is None:
        raise _Invalid("expected true or false")
    return flag


def parse_date(text: str) -> dt.date:
    """``YYYY-MM-DD``, ignoring a time part after a space or ``T``; ValueError otherwise."""
    text = text.strip()
    if len(text) > 10 and text[10] in " T":
        text = text[:10]
    return dt.date.fromisoformat(text)


def parse_timestamp(text: str) -> dt.datetime:
    """Delta's ``YYYY-MM-DD HH:MM:SS[.ffffff]`` or ISO 8601 (``T``, ``Z``, offsets) as a naive datetime.

    Values with an offset are converted to UTC, so a naive result is UTC for a ``timestamp``
    (and the local date-time of a ``timestamp_ntz``). ValueError when the text is neither.
    """
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


class _Invalid(ValueError):
    """A value that parses but breaks the type's rules (the message says which)."""


def _shown_type(data_type: Any) -> str:
    simple = getattr(data_type, "simple_string", None)
    return simple() if callable(simple) else repr(data_type)


_INTEGER = re.compile(r"[+-]?\d+")


def _blank_is_null(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_or_null(raw: str) -> Any:
        text = raw.strip()
        return None if text == "" else parse(text)

    return parse_or_null


def _integral(name: str) -> Callable[[str], Any]:
    bounds = integral_bounds(name)
    assert bounds is not None
    low, high = bounds

    def parse(text: str) -> int:
        if _INTEGER.fullmatch(text) is None:
            raise _Invalid("not an integer")
        value = int(text)
        if not low <= value <= high:
            raise _Invalid(f"out of the range of {name}, {low} to {high}")
        return value

    return parse


def _fractional(text: str) -> float:
    if "_" in text:
        raise _Invalid("'_' in a number")
    return float(text)


def _decimal(precision: int, scale: int) -> Callable[[str], Any]:
    def parse(text: str) -> Decimal:
        try:
            number = Decimal(text)
        except InvalidOperation:
            raise _Invalid("not a number") from None
        if not number.is_finite():
            raise _Invalid("not a finite number")
        integer_digits = max(number.adjusted() + 1, 0) if number != 0 else 0
        if integer_digits > precision - scale:
            raise _Invalid(f"more than {precision - scale} digits before the point")
        return number

    return parse


def _timestamp_utc(text: str) -> dt.datetime:
    return parse_timestamp(text).replace(tzinfo=dt.UTC)


def _binary(raw: str) -> Any:
    return None if raw == "" else raw.encode("utf-8")


def _as_is(raw: str) -> str:
    return raw


@cache
def _parser(name: str) -> Callable[[str], Any] | None:
    """The parser of non-null strings for type ``name`` (None: not a partition column type)."""
    family = type_family(name)
    dec = decimal_params(name)
    if dec is not None:
        return _blank_is_null(_decimal(*dec))
    if family == "integral":
        return _blank_is_null(_integral(name))
    if family == "fractional":
        return _blank_is_null(_fractional)
    if family == "boolean":
        return _blank_is_null(parse_boolean)
    if family == "date":
        return _blank_is_null(parse_date)
    if name == "timestamp":
        return _blank_is_null(_timestamp_utc)
    if name == "timestamp_ntz":
        return _blank_is_null(parse_timestamp)
    if family == "binary":
        return _binary
    if name in PRIMITIVES:
        return _as_is  # string, void, variant
    return None
