"""Rows as plain JSON values, the same way in serialake's process and in delta-spark's worker.

Only the standard library: the worker runs in delta-spark's environment, the tests in serialake's.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import math
from typing import Any

__all__ = ["plain", "plain_rows"]


def plain(value: Any) -> Any:
    """``value`` (a Spark Row's field, or an Arrow/pandas scalar) as JSON: exact and comparable."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, decimal.Decimal):
        return f"decimal:{value}"
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return f"timestamp:{value.isoformat()}"
    if isinstance(value, datetime.date):
        return f"date:{value.isoformat()}"
    if isinstance(value, bytes | bytearray | memoryview):
        return "binary:" + base64.b64encode(bytes(value)).decode()
    if hasattr(value, "asDict"):  # a Spark Row (struct)
        return {k: plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return str(value)


def plain_rows(rows: Any) -> list[list[Any]]:
    """Rows (Spark Rows or sequences) as lists of plain values, sorted (numbers as numbers,
    NULLs first): an order-free comparison that reads naturally in a failing assertion."""
    out = [[plain(v) for v in row] for row in rows]
    return sorted(out, key=_key)


def _key(value: Any) -> Any:
    """A total order over plain values of any mix of types."""
    if value is None:
        return (0,)
    if isinstance(value, bool | int | float):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, list):
        return (3, tuple(_key(v) for v in value))
    if isinstance(value, dict):
        return (4, tuple((k, _key(v)) for k, v in sorted(value.items())))
    return (5, repr(value))
