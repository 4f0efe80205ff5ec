"""Mixed-type threshold arithmetic: a constant as the bounds' values it lies between.

For a constant c: A = the least bound value >= c, B = the least bound value > c (or an infinity
when there is none), so that, with Python's comparison of the values the per-file code holds:
x < c <=> x < A,  x <= c <=> x < B,  c < x <=> x >= B,  c <= x <=> x >= A, and x == c <=> A <= x < B.
So each comparison of a bound with a constant is one Arrow comparison with exactly Python's
(mixed int / float / Decimal, date / timestamp) semantics.
"""

from __future__ import annotations

import datetime as dt
import math
import sys
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from typing import Any

import pyarrow as pa

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class _Inf:
    __slots__ = ("sign",)

    def __init__(self, sign: int) -> None:
        self.sign = sign


_POS, _NEG = _Inf(1), _Inf(-1)


def _thresholds(rep: str, arrow_type: pa.DataType, c: Any, date_vs_ts: bool) -> tuple[Any, Any] | None:
    """(A, B) in representation ``rep``; None for NaN (no value compares with it)."""
    if isinstance(c, float) and math.isnan(c):
        return None
    if isinstance(c, float) and math.isinf(c) and rep != "float64":
        return (_POS, _POS) if c > 0 else (_NEG, _NEG)
    if rep == "int64":
        return _int_thresholds(c)
    if rep == "float64":
        return _float_thresholds(c)
    if rep == "decjson":
        return _decjson_thresholds(c, strict=False), _decjson_thresholds(c, strict=True)
    if rep == "decimal":
        return _decimal_thresholds(c, arrow_type.precision, arrow_type.scale)
    if rep == "string":
        return c, c + "\x00"
    if rep == "bool":
        return int(c), int(c) + 1
    if rep == "date32":
        if date_vs_ts:  # datetime(d) against a timestamp c
            day = c.date()
            next_day = _add(day, dt.timedelta(days=1))
            return (day if c == dt.datetime.combine(day, dt.time()) else next_day), next_day
        return c, _add(c, dt.timedelta(days=1))
    # ts
    if not isinstance(c, dt.datetime):
        c = dt.datetime.combine(c, dt.time())
    return c, _add(c, dt.timedelta(microseconds=1))


def _add(value: Any, delta: dt.timedelta) -> Any:
    try:
        return value + delta
    except OverflowError:
        return _POS


def _int_thresholds(c: Any) -> tuple[Any, Any]:
    if c > _INT64_MAX:
        return _POS, _POS
    if c < _INT64_MIN:
        return _NEG, _NEG
    if isinstance(c, int):
        ceil, floor = c, c
    elif isinstance(c, float):
        ceil, floor = math.ceil(c), math.floor(c)
    else:
        ceil, floor = int(c.to_integral_value(ROUND_CEILING)), int(c.to_integral_value(ROUND_FLOOR))
    return ceil, (floor + 1 if floor < _INT64_MAX else _POS)


def _float_thresholds(c: Any) -> tuple[Any, Any]:
    """Over all floats, infinities included (a float column's bounds)."""
    if isinstance(c, float):
        return c, (_POS if c == math.inf else math.nextafter(c, math.inf))
    try:
        g = float(c)  # the nearest float
    except OverflowError:
        g = math.inf if c > 0 else -math.inf
    if g < c:
        g = math.nextafter(g, math.inf)
    if g > c:
        return g, g
    return g, (_POS if g == math.inf else math.nextafter(g, math.inf))


def _decjson_thresholds(c: Any, *, strict: bool) -> Any:
    """The least finite float f with ``Decimal(repr(f)) >= c`` (> c if strict); that map is increasing."""

    def ok(f: float) -> bool:
        d = Decimal(repr(f))
        return d > c if strict else d >= c

    try:
        g = float(c)
    except OverflowError:
        g = math.inf if c > 0 else -math.inf
    g = min(max(g, -_FLOAT_MAX), _FLOAT_MAX)
    while not ok(g):
        if g == _FLOAT_MAX:
            return _POS
        g = math.nextafter(g, math.inf)
    while g > -_FLOAT_MAX and ok(math.nextafter(g, -math.inf)):
        g = math.nextafter(g, -math.inf)
    return g


_FLOAT_MAX = sys.float_info.max
_WIDE = Context(prec=200, Emax=10**6, Emin=-(10**6))


def _decimal_thresholds(c: Any, precision: int, scale: int) -> tuple[Any, Any]:
    with localcontext(_WIDE):
        value = Decimal(c)
        quantum = Decimal(1).scaleb(-scale)
        largest = Decimal(10) ** (precision - scale) - quantum
        if value > largest:
            return _POS, _POS
        if value < -largest:
            return _NEG, _NEG
        ceil = value.quantize(quantum, rounding=ROUND_CEILING)
        above = value.quantize(quantum, rounding=ROUND_FLOOR) + quantum
        return ceil, (above if above <= largest else _POS)
