"""Scalar SQL expressions (UPDATE SET, MERGE values) computed with pyarrow exactly as Spark does.

The driver can rewrite small copy-on-write files itself (``serialake.spark.dml.update_command``)
only if every new value is bit-for-bit what Spark would store. This module accepts a
deliberately small subset of Spark SQL and refuses (``NotExact``) everything else, which
then runs on Spark:

- column references (optionally qualified, ``t.x`` / ``s.x``) and literals: integers,
  decimals (``1.5`` is a DECIMAL in Spark), doubles (``1e3``), strings, booleans, NULL;
- ``+``, ``-``, ``*`` and unary minus over integral (byte, short, integer, long) and
  double operands, typed as Spark types them: two integrals give the wider integral type
  (a literal is an INT if it fits, else a BIGINT), anything with a double gives a double
  (integral operands are converted as Java converts them, rounding to nearest; a decimal
  literal becomes the nearest double);
- the result stored into a column of the same type, or a wider integral, or a double.

Integral arithmetic is checked: an overflow raises ``NotExact`` at evaluation, and the
caller runs the operation on Spark, which raises its ANSI error (or wraps when ANSI mode
is off): the same outcome either way. Division, casts, functions, CASE, dates, floats,
decimals and string operations are refused; ``test_properties`` checks the subset
against Spark on random data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from serialake.core.model.types import INTEGRAL_TYPES, arrow_type, decimal_params, integral_bounds, type_name

__all__ = ["Compiled", "NotExact", "Ref", "compile_value", "kind_of_type", "parse_value"]

_INTEGRAL = INTEGRAL_TYPES  # narrowest first
_COPYABLE = {*_INTEGRAL, "float", "double", "string", "boolean", "date", "binary"}


class NotExact(Exception):
    """Outside the subset computed exactly here, by Spark's rules (the message says why).

    The one signal of the driver paths: an expression, a type, a file or a value the driver
    does not reproduce exactly; the step then runs on Spark (``spark.dml.engine``).
    """


def kind_of_type(data_type: Any) -> str | None:
    """The type name ``compile_value`` works with: Delta's primitive names, ``decimal(p,s)``."""
    return None if isinstance(data_type, str) else type_name(data_type)


@dataclass(frozen=True)
class Ref:
    """A column reference: ``qualifier.name`` or ``name``."""

    qualifier: str | None
    name: str


@dataclass(frozen=True)
class _Const:
    value: Any
    kind: str  # integer | long | decimal | double | string | boolean | null


@dataclass(frozen=True)
class _Arith:
    op: str  # + - *
    left: Any
    right: Any


@dataclass(frozen=True)
class _Neg:
    arg: Any


def parse_value(text: str) -> Any:
    """Parse a Spark SQL value expression into the subset's tree; NotExact if outside it."""
    import sqlglot
    from sqlglot import exp

    try:
        node = sqlglot.parse_one(text, read="spark")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError) as e:
        raise NotExact(f"cannot parse {text!r}: {e}") from None

    def go(n: Any) -> Any:
        if isinstance(n, exp.Paren):
            return go(n.this)
        if isinstance(n, exp.Column):
            if n.args.get("db") or n.args.get("catalog") or not isinstance(n.this, exp.Identifier):
                raise NotExact(f"column reference {n.sql()}")
            table = n.args.get("table")
            return Ref(table.name if table is not None else None, n.this.name)
        if isinstance(n, exp.Null):
            return _Const(None, "null")
        if isinstance(n, exp.Boolean):
            return _Const(bool(n.this), "boolean")
        if isinstance(n, exp.Literal):
            return _literal(n.this, bool(n.is_string))
        if isinstance(n, exp.Neg):
            arg = go(n.this)
            if isinstance(n.this, exp.Literal) and isinstance(arg, _Const) and arg.kind != "string":
                return _number(-arg.value, arg.kind)  # Spark reads -5 as the literal -5, not -(5)
            return _Neg(arg)
        ops = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}
        for cls, op in ops.items():
            if type(n) is cls:
                return _Arith(op, go(n.this), go(n.expression))
        raise NotExact(f"{type(n).__name__} ({n.sql(dialect='spark')}) is not computed on the driver")

    return go(node)


def _literal(text: str, is_string: bool) -> _Const:
    if is_string:
        return _Const(text, "string")
    if any(c in text for c in "eE"):
        try:
            return _Const(float(text), "double")
        except ValueError:
            raise NotExact(f"number {text}") from None
    if "." in text:
        try:
            return _Const(Decimal(text), "decimal")
        except InvalidOperation:
            raise NotExact(f"number {text}") from None
    try:
        return _number(int(text), "integer")
    except ValueError:
        raise NotExact(f"number {text}") from None


def _number(value: Any, kind: str) -> _Const:
    if kind in ("integer", "long"):
        for name in ("integer", "long"):
            low, high = integral_bounds(name)  # type: ignore[misc]
            if low <= value <= high:
                return _Const(value, name)
        raise NotExact(f"integer literal {value} is a DECIMAL in Spark")
    return _Const(value, kind)


_DOUBLE_EXACT_DECIMAL = 15  # unscaled values below 10**15 < 2**53 convert exactly before the division


def _decimal(kind: str) -> tuple[int, int] | None:
    return decimal_params(kind)


def _arrow(kind: str) -> Any:
    t = arrow_type(kind)
    if t is None:
        raise NotExact(f"no Arrow type for {kind}")
    return t


def _wider(a: str, b: str) -> str:
    return a if _INTEGRAL.index(a) >= _INTEGRAL.index(b) else b


@dataclass(frozen=True, eq=False)
class Compiled:
    """A checked expression: its result type and the columns it reads; ``evaluate`` computes it."""

    tree: Any
    kind: str  # the expression's own type
    target: str  # the column type it is stored as
    refs: frozenset[Ref]
    kinds: dict[int, str]  # id(node) -> the Spark type each node is computed in

    def evaluate(self, column: Callable[[Ref], Any], n: int) -> Any:
        """The values for ``n`` rows as an Arrow array of the target type.

        ``column(ref)`` returns the referenced column's values (an Arrow array of ``n`` rows in
        the column's type, or a scalar for a constant such as a partition value). Each node is
        computed in its own type, then converted to its parent's (``(i * 2) + 1e0`` multiplies
        integers, so overflows where Spark does). Raises NotExact on an integral overflow
        (Spark would fail or wrap; let it decide).
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        def go(e: Any, want: str) -> Any:
            # The value of ``e`` as an Arrow array or scalar of ``want``.
            if isinstance(e, _Const):
                if e.value is None:
                    return pa.scalar(None, _arrow(want))
                return pa.scalar(float(e.value) if want == "double" else e.value, _arrow(want))
            if isinstance(e, Ref):
                return _convert(column(e), want)
            own = self.kinds[id(e)]
            if isinstance(e, _Neg):
                value = pc.negate_checked(go(e.arg, own))
            elif isinstance(e, _Arith):
                fn = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}[e.op]
                value = fn(go(e.left, own), go(e.right, own))
            else:
                raise NotExact(type(e).__name__)
            return _convert(value, want)

        try:
            out = go(self.tree, self.target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise NotExact(str(e)) from None
        if isinstance(out, pa.Scalar):
            return pa.repeat(out, n)
        if isinstance(out, pa.ChunkedArray):
            return out.combine_chunks()
        return out


def _convert(value: Any, kind: str) -> Any:
    """Integral widening or integral -> double, as Spark's implicit casts do (no-op if same type)."""
    import pyarrow as pa

    t = _arrow(kind)
    if value.type == t:
        return value
    if value.type == pa.null():
        return value.cast(t)
    if pa.types.is_decimal(value.type) and kind == "double":
        return _decimal_to_double(value)
    return value.cast(t, safe=kind != "double")


def _decimal_to_double(value: Any) -> Any:
    """DECIMAL(p <= 15, s) -> DOUBLE as Spark converts it: the nearest double to unscaled / 10**s.

    Unscaled values below 10**15 are exact doubles and 10**s (s <= 22) too, so one IEEE
    division gives the correctly rounded result, as Java's BigDecimal.doubleValue does.
    """
    import numpy as np
    import pyarrow as pa

    if isinstance(value, pa.Scalar):
        return pa.scalar(None if value.as_py() is None else float(value.as_py()), pa.float64())
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    scale = value.type.scale
    words = np.frombuffer(value.buffers()[1], dtype=np.int64)[value.offset * 2 : (value.offset + len(value)) * 2]
    unscaled = words[0::2].astype(np.float64)  # low words: the values fit in 64 bits (precision <= 15)
    out = unscaled / (10.0**scale)
    mask = value.is_null().to_numpy(zero_copy_only=False) if value.null_count else None
    return pa.array(out, pa.float64(), mask=mask)


def compile_value(tree: Any, column_type: Callable[[Ref], str | None], target: str) -> Compiled:
    """Type ``tree`` (from ``parse_value``) as Spark does, for storing into a ``target`` column.

    ``column_type(ref)`` gives a referenced column's type name (Delta's: long, double, ...)
    or None if there is no such column. Raises NotExact for anything outside the subset.
    """
    refs: set[Ref] = set()
    kinds: dict[int, str] = {}

    def kind_of(e: Any) -> str:
        k = _kind_of(e)
        kinds[id(e)] = k
        return k

    def _kind_of(e: Any) -> str:
        if isinstance(e, Ref):
            t = column_type(e)
            if t is None:
                raise NotExact(f"unknown column {e.name}")
            dec = _decimal(t)
            if dec is not None and (dec[0] > _DOUBLE_EXACT_DECIMAL or dec[1] > 22):
                raise NotExact(f"column {e.name} has type {t}")
            if t not in _COPYABLE and dec is None:
                raise NotExact(f"column {e.name} has type {t}")
            refs.add(e)
            return t
        if isinstance(e, _Const):
            return e.kind
        if isinstance(e, _Neg):
            k = kind_of(e.arg)
            if k not in (*_INTEGRAL, "double"):
                raise NotExact(f"unary minus on {k}")
            return k
        if isinstance(e, _Arith):
            a, b = kind_of(e.left), kind_of(e.right)
            if a in _INTEGRAL and b in _INTEGRAL:
                return _wider(a, b)
            numeric = (*_INTEGRAL, "double", "decimal")
            if "double" in (a, b) and all(k in numeric or _decimal(k) for k in (a, b)):
                return "double"
            raise NotExact(f"{a} {e.op} {b} is not computed on the driver")
        raise NotExact(type(e).__name__)

    kind = kind_of(tree)
    if kind == "decimal":
        if target != "double" or not isinstance(tree, _Const):
            raise NotExact("a decimal value")
        kind = "double"  # a lone decimal literal: the nearest double
    if kind == "null":
        if target not in _COPYABLE:
            raise NotExact(f"column type {target}")
        return Compiled(tree, target, target, frozenset(refs), kinds)
    if kind == target and (target in _COPYABLE or _decimal(target)):
        return Compiled(tree, kind, target, frozenset(refs), kinds)
    if _decimal(kind) and target == "double":
        return Compiled(tree, kind, target, frozenset(refs), kinds)
    if kind in _INTEGRAL and target in _INTEGRAL and _wider(kind, target) == target:
        return Compiled(tree, kind, target, frozenset(refs), kinds)
    if kind in _INTEGRAL and target == "double":
        return Compiled(tree, kind, target, frozenset(refs), kinds)
    raise NotExact(f"a {kind} value stored in a {target} column needs a cast")

