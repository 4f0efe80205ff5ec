"""Data skipping: whether a Delta data file may hold a row matching a predicate.

``compile_predicate`` turns an expression (``serialake.core.predicates.expressions``) into a fast
``(partition_values, stats) -> bool`` for one table schema; ``file_may_match`` and
``file_may_match_any`` are the one-off forms. The answer is False only when no row of the file
can satisfy the predicate, so a file is never skipped wrongly.

Evaluation computes, for each node, the set of values it may take over the rows of one file,
as a bit mask of TRUE/FALSE/NULL combined with Kleene logic. Partition columns are the file's
partition value (``serialake.core.model.partition_values``), data columns are bounded by the file's
stats when given (a domain: low, high, may be NULL, may have values); literals are cast to the
column's type as Spark casts them where the cast is modelled, and anything else (``Unknown``
nodes, unmodelled casts, values that do not parse) may be anything. Qualified columns
(``t.p``) are never resolved, since the evaluator cannot know which table ``t`` names: strip
the qualifier first (``expressions.strip_qualifier``).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from serialake.core.model.partition_values import parse_boolean, parse_date, parse_partition_value, parse_timestamp
from serialake.core.model.schema import StructType, physical_name
from serialake.core.model.types import type_family
from serialake.core.predicates.expressions import (
    And,
    Column,
    Comparison,
    Expr,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    and3,
    or3,
)

__all__ = [
    "Domain",
    "FileMatcher",
    "PartitionValues",
    "Stats",
    "compile_predicate",
    "file_may_match",
    "file_may_match_any",
]


# ---------------------------------------------------------------------------------------------
# Sets of possible truth values as bit masks
# ---------------------------------------------------------------------------------------------

_T, _F, _N = 1, 2, 4
_ALL = _T | _F | _N


def _kleene_table(op: Callable[[bool | None, bool | None], bool | None]) -> list[list[int]]:
    bits = {True: _T, False: _F, None: _N}
    values = [(v, bits[v]) for v in (True, False, None)]
    table = [[0] * 8 for _ in range(8)]
    for a in range(8):
        for b in range(8):
            for va, ba in values:
                for vb, bb in values:
                    if a & ba and b & bb:
                        table[a][b] |= bits[op(va, vb)]
    return table


_AND = _kleene_table(and3)
_OR = _kleene_table(or3)
_NOT = [(m & _N) | (_F if m & _T else 0) | (_T if m & _F else 0) for m in range(8)]

# A domain is (low, high, may_be_null, may_have_values): the values a column may take in a file.
# Bounds are inclusive; None means unbounded (a NULL value is expressed by the third item).
Domain = tuple[Any, Any, bool, bool]
_ANY: Domain = (None, None, True, True)
_NULL: Domain = (None, None, True, False)

PartitionValues = Mapping[str, "str | None"]
Stats = Mapping[str, Any]
FileMatcher = Callable[[PartitionValues, "Stats | None"], bool]
_Node = Callable[[PartitionValues, "Stats | None"], int]
_Getter = Callable[[PartitionValues, "Stats | None"], Domain]

_STRING_STATS_PREFIX = 32  # Delta truncates string stats; a max this long may be a prefix


def compile_predicate(expr: Expr, schema: StructType, partition_columns: Sequence[str]) -> FileMatcher:
    """A fast ``(partition_values, stats) -> bool`` for one predicate over many files.

    Column types and literal coercions are resolved once here; ``partition_values`` are the log's
    strings keyed by logical column name, ``stats`` the parsed Delta stats (or None).
    """
    node = _Compiler(schema, partition_columns).boolean(expr)

    def may_match(partition_values: PartitionValues, stats: Stats | None = None) -> bool:
        if stats is not None and stats.get("numRecords") == 0:
            return False
        return bool(node(partition_values, stats) & _T)

    return may_match


def file_may_match(
    expr: Expr,
    partition_values: PartitionValues,
    schema: StructType,
    stats: Stats | None = None,
    *,
    partition_columns: Sequence[str] | None = None,
) -> bool:
    """Whether some row of the file may satisfy ``expr`` (see ``compile_predicate``).

    Partition columns default to the keys of ``partition_values``.
    """
    columns = tuple(partition_values) if partition_columns is None else tuple(partition_columns)
    return _compiled(expr, schema, columns)(partition_values, stats)


def file_may_match_any(
    exprs: Sequence[Expr],
    partition_values: PartitionValues,
    schema: StructType,
    stats: Stats | None = None,
    *,
    partition_columns: Sequence[str] | None = None,
) -> bool:
    """Whether the file may match any of the predicates; an empty list reads nothing (False)."""
    return any(
        file_may_match(e, partition_values, schema, stats, partition_columns=partition_columns) for e in exprs
    )


def _compiled(expr: Expr, schema: StructType, columns: tuple[str, ...]) -> FileMatcher:
    try:
        return _compiled_cached(expr, schema, columns)
    except TypeError:  # unhashable parts (e.g. a literal holding a list): compile without caching
        return compile_predicate(expr, schema, columns)


@lru_cache(maxsize=256)
def _compiled_cached(expr: Expr, schema: StructType, columns: tuple[str, ...]) -> FileMatcher:
    return compile_predicate(expr, schema, columns)


# Comparison kinds: values of one kind compare with Python operators.
_NUM, _STR, _BOOL, _DATE, _TS = "num", "str", "bool", "date", "ts"

# Kind of the column types of each family (``types.type_family``); others are not compared.
_KIND_OF_FAMILY = {
    "integral": _NUM,
    "fractional": _NUM,
    "decimal": _NUM,
    "string": _STR,
    "boolean": _BOOL,
    "date": _DATE,
    "timestamp": _TS,
}
_KIND_OF_LITERAL = {
    "integer": _NUM,
    "decimal": _NUM,
    "double": _NUM,
    "string": _STR,
    "boolean": _BOOL,
    "date": _DATE,
    "timestamp": _TS,
    "timestamp_ntz": _TS,
}


def _caster(data_type: Any) -> tuple[str, Callable[[Any], Any]] | None:
    """(kind, cast) for a column type, cast turning a stats value (or a typed value) into a comparable value."""
    family = type_family(data_type)
    kind = _KIND_OF_FAMILY.get(family or "")
    if kind is None:
        return None
    return kind, _CAST_OF_FAMILY[family]  # type: ignore[index]


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(v)
    if isinstance(v, int):
        return v
    number = Decimal(v.strip()) if isinstance(v, str) else Decimal(v)
    if number != number.to_integral_value():
        raise ValueError(v)
    return int(number)


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError(v)
    result = float(v)
    if math.isnan(result):  # NaN orders above everything in Spark but nowhere in Python
        raise ValueError(v)
    return result


def _to_decimal(v: Any) -> Decimal:
    if isinstance(v, bool):
        raise ValueError(v)
    result = Decimal(str(v).strip())
    if not result.is_finite():
        raise ValueError(v)
    return result


def _to_str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(v)
    return v


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if not isinstance(v, str):
        raise ValueError(v)
    return parse_boolean(v)


def _to_date(v: Any) -> dt.date:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    return parse_date(v)


def _to_timestamp(v: Any) -> dt.datetime:
    if isinstance(v, dt.datetime):
        return v
    if isinstance(v, dt.date):
        return dt.datetime.combine(v, dt.time())
    return parse_timestamp(v)


_CAST_OF_FAMILY: dict[str, Callable[[Any], Any]] = {
    "integral": _to_int,
    "fractional": _to_float,
    "decimal": _to_decimal,
    "string": _to_str,
    "boolean": _to_bool,
    "date": _to_date,
    "timestamp": _to_timestamp,
}


def _partition_value(raw: str, data_type: Any) -> Any:
    """A partition value string as a comparable value (None for NULL); ValueError if it does not parse."""
    value = parse_partition_value(raw, data_type)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.replace(tzinfo=None)  # UTC: timestamps compare as naive UTC
    if isinstance(value, float) and math.isnan(value):  # NaN orders above everything in Spark but nowhere in Python
        raise ValueError(raw)
    return value


_CAST_ERRORS = (ValueError, TypeError, ArithmeticError, InvalidOperation, AttributeError)


def _date_to_ts(d: Domain) -> Domain:
    lo, hi, may_null, may_value = d
    return (
        None if lo is None else dt.datetime.combine(lo, dt.time()),
        None if hi is None else dt.datetime.combine(hi, dt.time()),
        may_null,
        may_value,
    )


def _lookup(mapping: Any, names: tuple[str, ...]) -> Any:
    """``mapping[name]`` for the first name present, falling back to a case-insensitive match."""
    if type(mapping) is not dict and not isinstance(mapping, Mapping):
        return None
    for name in names:
        if name in mapping:
            return mapping[name]
    lowered = {n.lower() for n in names}
    for key, value in mapping.items():
        if isinstance(key, str) and key.lower() in lowered:
            return value
    return None


class _Operand:
    """A compiled operand: its comparison kind (None = unknown), whether constant, and a getter."""

    __slots__ = ("kind", "const", "get")

    def __init__(self, kind: str | None, const: Domain | None, get: _Getter) -> None:
        self.kind = kind
        self.const = const
        self.get = get


def _constant_operand(kind: str | None, domain: Domain) -> _Operand:
    return _Operand(kind, domain, lambda pv, st: domain)


_UNKNOWN_OPERAND = _constant_operand(None, _ANY)
_NULL_OPERAND = _constant_operand(None, _NULL)  # compares with any kind: no value is ever compared


class _Compiler:
    """Turns an Expr into nested closures with every column and literal resolved."""

    def __init__(self, schema: StructType, partition_columns: Sequence[str]) -> None:
        self.schema = schema
        self.partition_columns = {c.lower() for c in partition_columns}

    def boolean(self, e: Expr) -> _Node:
        if isinstance(e, And):
            return self._fold([self.boolean(a) for a in e.args], _AND)
        if isinstance(e, Or):
            return self._fold([self.boolean(a) for a in e.args], _OR)
        if isinstance(e, Not):
            inner = self.boolean(e.arg)
            return lambda pv, st: _NOT[inner(pv, st)]
        if isinstance(e, Comparison):
            return self._comparison(e.op, self.operand(e.left), self.operand(e.right))
        if isinstance(e, In):
            subject = self.operand(e.expr)
            options = self._fold([self._comparison("=", subject, self.operand(v)) for v in e.values], _OR)
            return (lambda pv, st: _NOT[options(pv, st)]) if e.negated else options
        if isinstance(e, IsNull):
            return self._is_null(self.operand(e.expr), e.negated)
        if isinstance(e, Like):
            return self._like(self.operand(e.expr), e.pattern, e.negated)
        if isinstance(e, (Column, Literal)):
            return self._truth(self.operand(e))
        return lambda pv, st: _ALL

    @staticmethod
    def _fold(nodes: list[_Node], table: list[list[int]]) -> _Node:
        if len(nodes) == 1:
            return nodes[0]
        if len(nodes) == 2:
            a, b = nodes
            return lambda pv, st: table[a(pv, st)][b(pv, st)]

        def fold(pv: PartitionValues, st: Stats | None) -> int:
            mask = nodes[0](pv, st)
            for n in nodes[1:]:
                mask = table[mask][n(pv, st)]
            return mask

        return fold

    def operand(self, e: Expr) -> _Operand:
        if isinstance(e, Literal):
            if e.value is None:
                return _NULL_OPERAND
            if isinstance(e.value, float) and math.isnan(e.value):
                # Spark orders NaN above every number and NaN = NaN; Python compares nothing with
                # it. A value no bound can be compared with: any result but NULL is possible.
                return _constant_operand(_KIND_OF_LITERAL.get(e.type_hint), (None, None, False, True))
            return _constant_operand(_KIND_OF_LITERAL.get(e.type_hint), (e.value, e.value, False, True))
        if not isinstance(e, Column) or e.qualifier is not None:
            return _UNKNOWN_OPERAND
        f = self.schema.field(e.name)
        resolved = _caster(f.data_type) if f is not None else None
        if f is None or resolved is None:
            return _UNKNOWN_OPERAND
        kind, cast = resolved
        if e.name.lower() in self.partition_columns:
            names = tuple(dict.fromkeys((f.name, physical_name(f))))
            return _Operand(kind, None, self._partition_getter(names, f.data_type, cast))
        names = tuple(dict.fromkeys((physical_name(f), f.name)))  # stats use physical names
        return _Operand(kind, None, self._stats_getter(names, kind, cast))

    @staticmethod
    def _partition_getter(names: tuple[str, ...], data_type: Any, cast: Callable[[Any], Any]) -> _Getter:
        cache: dict[Any, Domain] = {}

        def get(pv: PartitionValues, st: Stats | None) -> Domain:
            raw = _lookup(pv, names)
            if raw is None:
                return _NULL
            domain = cache.get(raw)
            if domain is None:
                try:
                    # The log's strings; a caller's typed value (not from a log) is cast as stats are.
                    value = _partition_value(raw, data_type) if isinstance(raw, str) else cast(raw)
                    domain = _NULL if value is None else (value, value, False, True)
                except _CAST_ERRORS:
                    domain = _ANY
                if len(cache) < 100_000:
                    cache[raw] = domain
            return domain

        return get

    @staticmethod
    def _stats_getter(names: tuple[str, ...], kind: str, cast: Callable[[Any], Any]) -> _Getter:
        def bound(value: Any) -> Any:
            if value is None or isinstance(value, (Mapping, list)):
                return None
            try:
                return cast(value)
            except _CAST_ERRORS:
                return None

        def get(pv: PartitionValues, st: Stats | None) -> Domain:
            if st is None:
                return _ANY
            nulls = _lookup(st.get("nullCount"), names)
            records = st.get("numRecords")
            if not isinstance(nulls, int) or isinstance(nulls, bool):
                nulls = None
            if nulls is not None and isinstance(records, int) and nulls >= records:
                return _NULL
            lo = bound(_lookup(st.get("minValues"), names))
            hi = bound(_lookup(st.get("maxValues"), names))
            if kind == _TS and hi is not None:
                hi += dt.timedelta(milliseconds=1)  # stats are truncated to milliseconds
            if kind == _STR and hi is not None and len(hi) >= _STRING_STATS_PREFIX:
                hi = None
            return (lo, hi, nulls != 0, True)

        return get

    @staticmethod
    def _comparison(op: str, left: _Operand, right: _Operand) -> _Node:
        lget, rget = left.get, right.get
        if left is _NULL_OPERAND or right is _NULL_OPERAND:
            return lambda pv, st: _compare(op, lget(pv, st), rget(pv, st))
        if left.kind is None or right.kind is None:
            return lambda pv, st: _ALL
        if left.kind != right.kind:
            coerced = _coerce(left, right)
            if coerced is None:
                return lambda pv, st: _ALL
            lget, rget = coerced
        if left.const is not None and right.const is not None:
            mask = _compare(op, lget(None, None), rget(None, None))  # type: ignore[arg-type]
            return lambda pv, st: mask
        return lambda pv, st: _compare(op, lget(pv, st), rget(pv, st))

    @staticmethod
    def _is_null(subject: _Operand, negated: bool) -> _Node:
        get = subject.get
        yes, no = (_F, _T) if negated else (_T, _F)

        def is_null(pv: PartitionValues, st: Stats | None) -> int:
            _, _, may_null, may_value = get(pv, st)
            return (yes if may_null else 0) | (no if may_value else 0)

        return is_null

    @staticmethod
    def _like(subject: _Operand, pattern: str, negated: bool) -> _Node:
        if subject.kind != _STR:
            return lambda pv, st: _ALL
        regex = _like_regex(pattern)
        get = subject.get
        yes, no = (_F, _T) if negated else (_T, _F)

        def like(pv: PartitionValues, st: Stats | None) -> int:
            lo, hi, may_null, may_value = get(pv, st)
            mask = _N if may_null else 0
            if may_value:
                if lo is not None and lo == hi:
                    mask |= yes if regex.fullmatch(lo) else no
                else:
                    mask |= _T | _F
            return mask

        return like

    @staticmethod
    def _truth(subject: _Operand) -> _Node:
        if subject is _NULL_OPERAND:
            return lambda pv, st: _N
        if subject.kind != _BOOL:
            return lambda pv, st: _ALL
        get = subject.get

        def truth(pv: PartitionValues, st: Stats | None) -> int:
            lo, hi, may_null, may_value = get(pv, st)
            mask = _N if may_null else 0
            if may_value:
                mask |= (_T if hi is not False else 0) | (_F if lo is not True else 0)
            return mask

        return truth


def _coerce(left: _Operand, right: _Operand) -> tuple[_Getter, _Getter] | None:
    """Getters for both sides in one comparison kind, or None when Spark's rule is not modelled.

    Date meets timestamp as timestamps; a string literal is cast to the other side's kind (as
    Spark casts ``d > '2024-01-01'``); anything else (e.g. a string column against a number) is
    left unknown.
    """
    if {left.kind, right.kind} == {_DATE, _TS}:
        if left.kind == _DATE:
            lget = left.get
            return (lambda pv, st: _date_to_ts(lget(pv, st))), right.get
        rget = right.get
        return left.get, (lambda pv, st: _date_to_ts(rget(pv, st)))
    for side, other in ((right, left), (left, right)):
        if side.kind == _STR and side.const is not None:
            converted = _cast_constant(side.const, other.kind)
            if converted is None:
                return None
            constant = _constant_operand(other.kind, converted).get
            return (left.get, constant) if side is right else (constant, right.get)
    return None


def _cast_constant(domain: Domain, kind: str | None) -> Domain | None:
    value = domain[0]
    if value is None:
        return domain
    casts: dict[str | None, Callable[[Any], Any]] = {
        _NUM: _to_decimal,
        _BOOL: _to_bool,
        _DATE: _to_date,
        _TS: _to_timestamp,
    }
    cast = casts.get(kind)
    if cast is None:
        return None
    try:
        converted = cast(value)
    except _CAST_ERRORS:
        return None
    return (converted, converted, False, True)


def _lt(a: Any, b: Any) -> bool:
    return a is None or b is None or a < b


def _le(a: Any, b: Any) -> bool:
    return a is None or b is None or a <= b


def _compare(op: str, a: Domain, b: Domain) -> int:
    """Possible results of ``a op b`` for any values drawn from the two domains."""
    alo, ahi, a_null, a_value = a
    blo, bhi, b_null, b_value = b
    if op == "<=>":
        mask = _T if a_null and b_null else 0
        if (a_null and b_value) or (a_value and b_null):
            mask |= _F
        if a_value and b_value:
            mask |= _compare_values("=", alo, ahi, blo, bhi)
        return mask
    mask = _N if a_null or b_null else 0
    if a_value and b_value:
        mask |= _compare_values(op, alo, ahi, blo, bhi)
    return mask


def _compare_values(op: str, alo: Any, ahi: Any, blo: Any, bhi: Any) -> int:
    try:
        if op == "<":
            return (_T if _lt(alo, bhi) else 0) | (_F if _le(blo, ahi) else 0)
        if op == "<=":
            return (_T if _le(alo, bhi) else 0) | (_F if _lt(blo, ahi) else 0)
        if op == ">":
            return (_T if _lt(blo, ahi) else 0) | (_F if _le(alo, bhi) else 0)
        if op == ">=":
            return (_T if _le(blo, ahi) else 0) | (_F if _lt(alo, bhi) else 0)
        overlap = _le(alo, bhi) and _le(blo, ahi)
        single = alo is not None and alo == ahi == blo == bhi
        if op == "=":
            return (_T if overlap else 0) | (0 if single else _F)
        return (0 if single else _T) | (_F if overlap else 0)  # !=
    except TypeError:
        return _T | _F


def _like_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    chars = iter(pattern)
    for ch in chars:
        if ch == "\\":
            out.append(re.escape(next(chars, "\\")))
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)
