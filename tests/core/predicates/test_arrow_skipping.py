"""Vectorized file skipping (core.predicates.arrow_skipping) selects exactly what the per-file matcher selects.

The reference is ``skipping.compile_predicate(expr, schema, partition_columns)(f.partition_values or {},
f.parsed_stats())`` for every AddFile; hypothesis draws schemas, files (partition values, stats JSON
in many shapes, deletion vectors) and predicates, and both evaluators must agree on every file, or
both raise the same exception.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serialake.core.log.checkpoint import CHECKPOINT_SCHEMA
from serialake.core.log.files_arrow import files_table
from serialake.core.model.actions import AddFile, DeletionVectorDescriptor
from serialake.core.model.schema import COLUMN_MAPPING_PHYSICAL_NAME, StructType
from serialake.core.model.types import arrow_type, type_family
from serialake.core.predicates import arrow_skipping as A
from serialake.core.predicates import skipping
from serialake.core.predicates.expressions import (
    FALSE,
    TRUE,
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
    Unknown,
    between,
    parse_predicate,
)
from serialake.core.predicates.stats_json import _parse_dates

# -- the two evaluators -------------------------------------------------------------------------


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except (ArithmeticError, TypeError, ValueError, AttributeError, LookupError) as e:
        return type(e)


def per_file(expr: Expr, schema: StructType, partition_columns: list[str], files: list[AddFile]) -> Any:
    def run() -> list[bool]:
        match = skipping.compile_predicate(expr, schema, partition_columns)
        return [match(f.partition_values or {}, f.parsed_stats()) for f in files]

    return _outcome(run)


def vectorized(
    expr: Expr, schema: StructType, partition_columns: list[str], table: pa.Table, cache: Any = None, **kw: Any
) -> Any:
    def run() -> list[bool]:
        result = A.compile_arrow(expr, schema, partition_columns, **kw)(table, cache)
        assert isinstance(result, pa.BooleanArray) and result.null_count == 0 and len(result) == table.num_rows
        return result.to_pylist()

    return _outcome(run)


# -- schemas ------------------------------------------------------------------------------------

_TYPES = [
    "byte", "short", "integer", "long", "float", "double", "decimal(5,2)", "decimal(20,0)", "decimal(38,10)",
    "string", "date", "timestamp", "timestamp_ntz", "boolean", "binary",
]  # fmt: skip
_COMMON_TYPES = ["long", "integer", "double", "decimal(10,2)", "string", "date", "timestamp", "boolean"]
_NAMES = ["a", "b", "Id", "x_1", "my col", "é", "K", "numRecords"]


@st.composite
def schemas(draw: st.DrawFn) -> tuple[StructType, list[str]]:
    """A schema (some columns with column-mapping physical names) and its partition columns as listed."""
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=5, unique_by=str.lower))
    fields = []
    for i, name in enumerate(names):
        metadata = {COLUMN_MAPPING_PHYSICAL_NAME: f"col-{i}"} if draw(st.integers(0, 3)) == 0 else {}
        data_type = draw(st.sampled_from(_COMMON_TYPES * 2 + _TYPES))
        fields.append({"name": name, "type": data_type, "nullable": True, "metadata": metadata})
    schema = StructType.from_json(json.dumps({"type": "struct", "fields": fields}))
    partitions = draw(st.lists(st.sampled_from(names), unique=True, max_size=min(2, len(names) - 1)))
    if len(partitions) > 1 and draw(st.booleans()):
        partitions = partitions[:1]
    listed = [p.upper() if draw(st.integers(0, 4)) == 0 else p for p in partitions]
    if draw(st.integers(0, 6)) == 0:
        listed.append("nope")  # a partition column missing from the schema
    return schema, listed


# -- values -------------------------------------------------------------------------------------

_PARTITION_STRINGS = {
    "integral": ["0", "1", "-2", " 3", "+1", "128", "99999999999999999999", "1.0", "x"],
    "fractional": ["0", "1.5", "-0.0", "NaN", "inf", "1e400", "2.5", "1_0"],
    "decimal": ["0.1", "1.50", "-2", "3.25", "1E+3", "123456789012345678901234567890", "x"],
    "string": ["", "a", "ab", "b", "B", "a%", "é", "x" * 40],
    "boolean": ["true", "FALSE", " false ", "1", "x"],
    "date": ["2024-01-01", "2024-02-29", "1970-01-01", "2024-01-01 10:00:00", "2024-13-01", "20240101"],
    "timestamp": ["2024-01-01 10:00:00", "2024-01-01T10:00:00.123456Z", "2024-01-01T12:00:00+02:00",
                  "2024-01-01", "9999-12-31 23:59:59.999999", "x"],
    "binary": ["ab", ""],
}  # fmt: skip

# Typical stats values (well typed, overlapping the literals) and odd ones (any JSON).
_GOOD_STATS: dict[str, list[Any]] = {
    "integral": [0, 1, 2, 3],
    "fractional": [0, 0.1, 1.5, 2.5],
    "decimal": [0.1, 1.5, 2, 3.25],
    "string": ["", "a", "ab", "b", "x" * 32],
    "boolean": [True, False],
    "date": ["2024-01-01", "2024-01-15", "2024-01-31", "2024-02-29"],
    "timestamp": ["2024-01-01T10:00:00.123Z", "2024-01-01T00:00:00.000Z", "2024-01-02T00:00:00.000Z",
                  "2024-01-01T10:00:00.000Z"],
    "binary": ["ab"],
}  # fmt: skip
_STATS_VALUES: dict[str, list[Any]] = {
    "integral": [0, 1, -2, 3, 5, 2**53 + 1, 2**63, -(2**63) - 1, 1.0, 1.5, "4", True, None, {"n": 1}],
    "fractional": [0, 1.5, -0.0, 0.1, 3, 2.5, 1e300, 2**53 + 1, 10**400, "1.5", None, False],
    "decimal": [0.1, 1.5, -2, 3.25, 7, 1e20, 2**53 + 1, "1.5", None, 0.30000000000000004],
    "string": ["", "a", "ab", "b", "B", "é", "a\"b", "x" * 31, "x" * 32, "\U0001f600", 5, None],
    "boolean": [True, False, "true", 0, None],
    "date": ["2024-01-01", "2024-02-29", "1970-01-01", "2024-01-01T10:00:00", "2024-13-01", "20240101", 5, None,
             "2023-02-29", "0000-01-01", "1900-02-29"],
    "timestamp": ["2024-01-01T10:00:00.123Z", "2024-01-01 10:00:00", "2024-01-01T12:00:00+02:00",
                  "9999-12-31T23:59:59.999Z", "2024-01-01", "x", None, "2023-02-29T00:00:00.000Z",
                  "2024-01-01T24:00:00.000Z", "2024-01-01T10:00:60.000Z", "2024-01-01T10:00:00.123"],
    "binary": ["ab", None],
}  # fmt: skip


def _family(field: Any) -> str:
    return type_family(field.data_type) or "binary"


def _physical(field: Any) -> str:
    return field.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME) or field.name


@st.composite
def partition_values(draw: st.DrawFn, schema: StructType, listed: list[str]) -> dict[str, str | None] | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    out: dict[str, str | None] = {}
    for name in listed:
        f = schema.field(name)
        options = _PARTITION_STRINGS[_family(f)] if f is not None else ["1", "a"]
        value = draw(st.one_of(st.none(), st.sampled_from(options)))
        key = f.name if f is not None else name
        form = draw(st.integers(0, 9))
        if form == 0:
            continue  # missing key: NULL
        if form == 1 and f is not None:
            key = _physical(f)
        if form == 2:
            key = key.upper()
        out[key] = value
        if form == 3:
            out[key.swapcase()] = draw(st.sampled_from(options))  # two keys matching one column
    return out


def _dumps(draw: st.DrawFn, stats: dict[str, Any]) -> str:
    form = draw(st.integers(0, 19))
    if form == 0:
        return json.dumps(stats, indent=1)  # line breaks
    if form == 1:
        return json.dumps(stats)  # blanks after ':' and ','
    if form == 2:
        return json.dumps(stats, ensure_ascii=False, separators=(",", ":"))
    if form == 3:  # a duplicate key: json.loads keeps the last one
        text = json.dumps(stats, separators=(",", ":"))
        return text[:-1] + (',' if len(stats) else '') + draw(st.sampled_from(['"numRecords":0}', '"minValues":{}}']))
    if form == 4:
        return " " + json.dumps(stats) + " "
    return json.dumps(stats, separators=(",", ":"))


_ODD_STATS = [
    "", "null", "[]", "5", '"s"', "garbage", "{", '{"numRecords": Infinity}', '{"numRecords": 1} {"numRecords": 2}',
    '{"numRecords": 0}', '{"numRecords": -0.0}', '{"numRecords": false}', '{"numRecords": 0e5}',
    '{"\\u006eumRecords": 0}',
]  # fmt: skip


@st.composite
def stats_texts(draw: st.DrawFn, schema: StructType, data_columns: list[Any]) -> str | None:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return None
    if kind == 1:
        return draw(st.sampled_from(_ODD_STATS))
    stats: dict[str, Any] = {}
    odd = draw(st.integers(0, 9)) == 0
    records = draw(st.sampled_from([None, 0, 5.0, 0.0, False, True, "5", "missing"] if odd else [1, 2, 5, 7]))
    if records != "missing":
        stats["numRecords"] = records
    for obj in ("minValues", "maxValues", "nullCount"):
        if draw(st.integers(0, 7)) == 0:
            continue
        if draw(st.integers(0, 30)) == 0:
            stats[obj] = draw(st.sampled_from([None, 5, [1], "x"]))
            continue
        values: dict[str, Any] = {}
        if obj == "maxValues" and isinstance(stats.get("minValues"), dict) and draw(st.integers(0, 2)) == 0:
            stats[obj] = dict(stats["minValues"])  # min == max: one value per column
            continue
        for f in data_columns:
            if draw(st.integers(0, 3)) == 0:
                continue
            key = _physical(f)
            form = draw(st.integers(0, 15))
            if form == 0:
                key = f.name
            elif form == 1:
                key = key.upper()
            elif form == 2:
                values[f.name] = None  # logical name too (the physical name goes first)
            if obj == "nullCount":
                odd = draw(st.integers(0, 24)) == 0
                values[key] = draw(st.sampled_from([None, True, 1.0] if odd else [0, 0, 0, 0, 0, 0, 1, 2, 5, 7]))
            elif draw(st.integers(0, 24)):
                values[key] = draw(st.sampled_from(_GOOD_STATS[_family(f)]))
            else:
                values[key] = draw(st.sampled_from(_STATS_VALUES[_family(f)]))
        stats[obj] = values
    text = _dumps(draw, stats)
    if draw(st.integers(0, 20)) == 0:
        text = text.replace("1.5", draw(st.sampled_from(["NaN", "Inf", "-Infinity"])), 1)
    return text


_dv = st.builds(
    DeletionVectorDescriptor,
    storage_type=st.sampled_from(["u", "i"]),
    path_or_inline_dv=st.sampled_from(["ab^-aqEH.-t@S}K{vb[*k^", "wi5b=000010000siXQKl0rr91000f55c8Xg0"]),
    size_in_bytes=st.integers(1, 100),
    cardinality=st.integers(0, 6),
    offset=st.one_of(st.none(), st.integers(1, 100)),
)


@st.composite
def files(draw: st.DrawFn, schema: StructType, listed: list[str]) -> list[AddFile]:
    partitioned = {name.lower() for name in listed}
    data_columns = [f for f in schema.fields if f.name.lower() not in partitioned]
    out = []
    for i in range(draw(st.integers(0, 12)) if draw(st.integers(0, 9)) == 0 else draw(st.integers(3, 12))):
        out.append(
            AddFile(
                path=f"f{i}.parquet",
                partition_values=draw(partition_values(schema, listed)),
                size=100,
                stats=draw(stats_texts(schema, data_columns)),
                deletion_vector=draw(st.one_of(st.none(), _dv)),
            )
        )
    return out


# -- predicates ---------------------------------------------------------------------------------

_TS = dt.datetime(2024, 1, 1, 10, 0, 0, 123000)
_LITERALS = [
    *(Literal(v) for v in (0, 1, -2, 3, 5, 2**53 + 1, 2**63, -(2**63) - 1)),
    *(Literal(Decimal(v)) for v in ("0.1", "1.50", "-2", "3.25", "1E+30", "7.000")),
    *(Literal(v) for v in (0.1, 1.5, -0.0, 3.0, float("nan"), float("inf"), float("-inf"), 1e300)),
    *(Literal(v, "string") for v in ("", "a", "ab", "b", "x" * 33, "1", "1.5", "2024-01-01", "2024-01-01 10:00:00",
                                     "true", "nope", "é")),
    *(Literal(v) for v in (dt.date(2024, 1, 1), dt.date(2024, 1, 31), dt.date(9999, 12, 31))),
    Literal(_TS, "timestamp"), Literal(dt.datetime(2024, 1, 1), "timestamp_ntz"),
    Literal(dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "timestamp"),
    TRUE, FALSE, Literal(None, "null"),
]  # fmt: skip
# Literals of unexpected Python types (hand-built trees): the per-file code's behaviour, whatever it is.
_ODD_LITERALS = [
    Literal(5, "string"), Literal(True, "integer"), Literal(dt.datetime(2024, 1, 1), "date"),
    Literal(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "timestamp"), Literal(Decimal("NaN"), "decimal"),
    Literal("x", "weird"),
]  # fmt: skip
_OPS = ["=", "!=", "<", "<=", ">", ">=", "<=>"]
_D = Decimal
# Literals for a column of each family: its own type, the string form Spark casts, a neighbour type.
_TYPED_LITERALS: dict[str, list[Literal]] = {
    "integral": [*(Literal(v) for v in (0, 1, 2, 3) * 2), Literal(_D("2.5")), Literal(2.5), Literal(_D("3.0")),
                 Literal("3", "string"), Literal(" 3 ", "string"), Literal("2.5", "string")],
    "fractional": [*(Literal(v) for v in (0.1, 1.5, 2.5, -1.5, 0.0, float("nan"))), Literal(1), Literal(7),
                   Literal(_D("1.5")), Literal(_D("0.1")), Literal("1.5", "string")],
    "decimal": [*(Literal(_D(v)) for v in ("0.1", "1.50", "2", "3.25", "-2", "1.49")), Literal(2), Literal(7),
                Literal(0.1), Literal(1.5), Literal("3.25", "string")],
    "string": [*(Literal(v, "string") for v in ("", "a", "ab", "b", "ab\x00", "x" * 33)), Literal(1)],
    "boolean": [TRUE, FALSE, Literal("true", "string"), Literal("FALSE", "string"), Literal(1)],
    "date": [*(Literal(v) for v in (dt.date(2024, 1, 1), dt.date(2024, 1, 15), dt.date(2024, 1, 31))),
             Literal("2024-01-15", "string"), Literal(dt.datetime(2024, 1, 15), "timestamp"),
             Literal(dt.datetime(2024, 1, 15, 12), "timestamp"), Literal("nope", "string")],
    "timestamp": [Literal(_TS, "timestamp"), Literal(dt.datetime(2024, 1, 1), "timestamp_ntz"),
                  Literal(dt.datetime(2024, 1, 1, 10), "timestamp"), Literal(dt.date(2024, 1, 1)),
                  Literal(dt.date(2024, 1, 2)), Literal("2024-01-01 10:00:00.123", "string")],
    "binary": [Literal("ab", "string")],
}  # fmt: skip


# Trees over placeholder columns #0..#4 (#0U: the same column upper-cased), named per schema later:
# the strategy is built once.
_column = st.sampled_from(
    [Column(f"#{i}") for i in range(5)] * 3
    + [Column(f"#{i}U") for i in range(5)]
    + [Column("zz"), Column("#0", "t")]  # unknown; qualified (never resolved)
)
_SLOT = Literal(None, "#")  # a literal drawn when the tree is named, typed for the column it meets
_literal = st.sampled_from([_SLOT] * 80 + _LITERALS + _ODD_LITERALS)
_atom = st.one_of(
    st.builds(Comparison, st.sampled_from(_OPS), _column, _literal),
    st.builds(Comparison, st.sampled_from(_OPS), _literal, _column),
    st.builds(Comparison, st.sampled_from(_OPS), _column, _column),
    st.builds(In, _column, st.lists(_literal, min_size=1, max_size=3).map(tuple), st.booleans()),
    st.builds(IsNull, _column | _literal, st.booleans()),
    st.builds(between, _column, _literal, _literal, st.booleans()),
    st.builds(Like, _column, st.sampled_from(["a%", "_", "%", "ab", "a\\%", "x%"]), st.booleans()),
    _column,
    st.sampled_from([TRUE, FALSE, Literal(None, "null"), Unknown("f(#0) > 1", (Column("#0"),))]),
)
_trees = st.recursive(
    _atom,
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: And(tuple(xs))),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: Or(tuple(xs))),
        inner.map(Not),
    ),
    max_leaves=6,
)


# Plain `column op literal` atoms: the bounds meet the literal often, where off-by-one rules show.
_placeholder = st.sampled_from([Column(f"#{i}") for i in range(5)])
_simple_comparison = st.one_of(
    st.builds(Comparison, st.sampled_from(_OPS), _placeholder, st.just(_SLOT)),
    st.builds(Comparison, st.sampled_from(_OPS), st.just(_SLOT), _placeholder),
)
_simple = st.one_of(
    _simple_comparison,
    _simple_comparison.map(Not),
    st.builds(In, _placeholder, st.lists(st.just(_SLOT), min_size=1, max_size=2).map(tuple), st.booleans()),
)


def _named(draw: st.DrawFn, e: Any, schema: StructType, near: Any = None) -> Any:
    """``e`` with placeholder columns renamed to the schema's and literal slots filled (typed for ``near``)."""
    names = [f.name for f in schema.fields]

    def again(x: Any, near_column: Any = None) -> Any:
        return _named(draw, x, schema, near_column)

    if isinstance(e, Column):
        if not e.name.startswith("#"):
            return e
        name = names[int(e.name[1]) % len(names)]
        return Column(name.upper() if e.name.endswith("U") else name, e.qualifier)
    if isinstance(e, Literal):
        if e is not _SLOT:
            return e
        f = schema.field(near.name) if isinstance(near, Column) else None
        pool = _TYPED_LITERALS[_family(f)] if f is not None else _LITERALS
        return draw(st.sampled_from(pool))
    if isinstance(e, (And, Or)):
        return type(e)(tuple(again(a) for a in e.args))
    if isinstance(e, Not):
        return Not(again(e.arg))
    if isinstance(e, Comparison):  # columns first, then the literal slots typed for the other side
        left = e.left if e.left is _SLOT else again(e.left)
        right = e.right if e.right is _SLOT else again(e.right)
        return Comparison(e.op, again(left, right), again(right, left))
    if isinstance(e, In):
        subject = again(e.expr)
        return In(subject, tuple(again(v, subject) for v in e.values), e.negated)
    if isinstance(e, IsNull):
        return IsNull(again(e.expr), e.negated)
    if isinstance(e, Like):
        return Like(again(e.expr), e.pattern, e.negated)
    if isinstance(e, Unknown):
        return Unknown(e.sql_text, tuple(again(c) for c in e.refs))
    return e


@st.composite
def cases(draw: st.DrawFn) -> tuple[StructType, list[str], list[AddFile], list[Expr]]:
    schema, listed = draw(schemas())
    trees = draw(st.lists(_trees, min_size=1, max_size=3)) + draw(st.lists(_simple, min_size=2, max_size=6))
    exprs = [_named(draw, e, schema) for e in trees]
    return schema, listed, draw(files(schema, listed)), exprs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_vectorized_matches_per_file(case: tuple[StructType, list[str], list[AddFile], list[Expr]]) -> None:
    schema, listed, adds, exprs = case
    table = files_table(adds)
    assert repr(A.reference_inputs(table)) == repr([(f.partition_values or {}, f.parsed_stats()) for f in adds])
    cache = A.SkipCache(limit=3)  # shared by the predicates: what one computed, the next reuses
    for expr in exprs:
        want = per_file(expr, schema, listed, adds)
        got = vectorized(expr, schema, listed, table)
        assert got == want, f"{expr!r}\n{table.select(['partitionValues', 'stats']).to_pylist()}"
        for _ in range(2):  # the first fills the cache, the second reads it
            assert vectorized(expr, schema, listed, table, cache) == want, f"{expr!r} with a cache"


# -- stats_parsed -------------------------------------------------------------------------------

_PARSED_VALUES: dict[str, list[Any]] = {
    "integral": [0, 1, -2, 3, 5],
    "fractional": [0.0, 1.5, -0.0, 0.1, float("nan"), float("inf")],
    "decimal": [Decimal("0.10"), Decimal("1.50"), Decimal("-2.00"), Decimal("3.25")],
    "string": ["", "a", "ab", "b", "x" * 32],
    "boolean": [True, False],
    "date": [dt.date(2024, 1, 1), dt.date(2024, 2, 29)],
    "timestamp": [dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, 10, 0, 0, 456000, tzinfo=dt.UTC)],
}


def _parsed_type(schema: StructType, columns: list[Any]) -> pa.DataType:
    def arrow(f: Any) -> pa.DataType:
        t = arrow_type(f.data_type)
        if pa.types.is_decimal(t):
            return pa.decimal128(38, 2)
        return pa.timestamp("us", "UTC") if pa.types.is_timestamp(t) else t

    values = pa.struct([(_physical(f), arrow(f)) for f in columns])
    counts = pa.struct([(_physical(f), pa.int64()) for f in columns])
    return pa.struct([("numRecords", pa.int64()), ("minValues", values), ("maxValues", values),
                      ("nullCount", counts)])  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases(), st.sampled_from(A.STATS_PARSED_MODES), st.data())
def test_stats_parsed_matches_per_file_inputs(
    case: tuple[StructType, list[str], list[AddFile], list[Expr]], mode: str, data: st.DataObject
) -> None:
    schema, listed, adds, exprs = case
    partitioned = {name.lower() for name in listed}
    columns = [f for f in schema.fields if f.name.lower() not in partitioned and _family(f) in _PARSED_VALUES]
    rows = []
    for _ in adds:
        if data.draw(st.integers(0, 4)) == 0:
            rows.append(None)
            continue
        row: dict[str, Any] = {"numRecords": data.draw(st.sampled_from([None, 0, 3, 5]))}
        for obj in ("minValues", "maxValues"):
            row[obj] = {_physical(f): data.draw(st.sampled_from([None, *_PARSED_VALUES[_family(f)]])) for f in columns}
        row["nullCount"] = {_physical(f): data.draw(st.sampled_from([None, 0, 1, 5])) for f in columns}
        rows.append(row)
    table = files_table(adds)
    if columns:
        table = table.append_column("stats_parsed", pa.array(rows, type=_parsed_type(schema, columns)))
        keep = [data.draw(st.booleans()) for _ in adds]
        texts = pa.array([f.stats if k else None for f, k in zip(adds, keep)], pa.string())
        table = table.set_column(table.column_names.index("stats"), "stats", texts)
    inputs = A.reference_inputs(table, stats_parsed=mode)
    cache = A.SkipCache(limit=3)
    for expr in exprs:

        def run(expr: Expr = expr) -> list[bool]:
            match = skipping.compile_predicate(expr, schema, listed)
            return [match(pv, st_) for pv, st_ in inputs]

        want = _outcome(run)
        assert vectorized(expr, schema, listed, table, stats_parsed=mode) == want, repr(expr)
        for _ in range(2):
            assert vectorized(expr, schema, listed, table, cache, stats_parsed=mode) == want, f"{expr!r} with a cache"


# -- files_table ----------------------------------------------------------------------------------


def test_files_table_has_the_checkpoint_add_columns() -> None:
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 34, 2, 1)
    adds = [
        AddFile(path="a", partition_values={"p": "1", "q": None}, size=10, modification_time=5,
                stats='{"numRecords":1}', tags={"t": "v"}, deletion_vector=dv, base_row_id=7),
        AddFile(path="b", partition_values=None, size=None, data_change=False),
    ]  # fmt: skip
    table = files_table(adds)
    assert table.schema == pa.schema(list(CHECKPOINT_SCHEMA.field("add").type))
    rows = table.to_pylist()
    assert rows[0]["partitionValues"] == [("p", "1"), ("q", None)] and rows[1]["partitionValues"] is None
    assert rows[0]["deletionVector"] == {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
                                         "sizeInBytes": 34, "cardinality": 2}  # fmt: skip
    assert rows[1]["deletionVector"] is None and rows[1]["stats"] is None and rows[1]["dataChange"] is False
    assert (rows[0]["baseRowId"], rows[0]["tags"], rows[0]["modificationTime"]) == (7, [("t", "v")], 5)
    assert files_table([]).num_rows == 0
    with pytest.raises(ValueError, match="'bad'.*stats.*surrogate"):
        files_table([AddFile(path="bad", stats='{"minValues": {"s": "\ud800"}}')])


# -- regressions ----------------------------------------------------------------------------------

SCHEMA = StructType.from_ddl(
    "p INT, part STRING, x BIGINT, d DATE, ts TIMESTAMP, amount DECIMAL(10,2), flag BOOLEAN, ratio DOUBLE, name STRING"
)


def check(text: str | Expr, adds: list[AddFile], partitions: tuple[str, ...] = ("p", "part")) -> list[bool]:
    expr = parse_predicate(text) if isinstance(text, str) else text
    want = per_file(expr, SCHEMA, list(partitions), adds)
    got = vectorized(expr, SCHEMA, list(partitions), files_table(adds))
    assert got == want
    return got


def add(stats: Any = None, **pv: str | None) -> AddFile:
    text = stats if stats is None or isinstance(stats, str) else json.dumps(stats)
    return AddFile(path="f", partition_values=pv, stats=text)


def test_stats_text_the_arrow_reader_reads_differently_is_done_per_file() -> None:
    texts = [
        '{"numRecords": 5, "minValues": {"x": 1}, "maxValues": {"x": 3}}',
        '{"numRecords": 5,\n "maxValues": {"x": 3}}',  # a line break would split the row
        '{"numRecords": 5, "maxValues": {"x": Infinity}}',  # json.loads reads it, as a float
        '{"numRecords": 5, "maxValues": {"x": Inf}}',  # only the Arrow reader reads it
        '{"numRecords": 0, "maxValues": {"other": Inf}}',  # json.loads fails: no stats, so no skipping
        '{"numRecords": 5, "maxValues": {"x": 9}, "maxValues": {"x": 3}}',  # the last wins
        '{"numRecords": 5, "maxValues": {"x": 3, "x": 9}}',
        '{"numRecords": 5, "maxValues": {"X": 3}}',  # matched case-insensitively
        '{"numRecords": 5, "maxValues": {"\\u0078": 3}}',  # an escaped x
        '{"numRecords": 5, "maxValues": {"\\u0058": 3}}',  # an escaped X
        '{"numRecords": 5, "maxValues": {"\u212a": 3}}',
        '{"numRecords": 5, "maxValues": {"x": 3.0}}',  # a float where the reader expects an integer
        '{"numRecords": 5, "maxValues": {"x": 99999999999999999999}}',
        '{"numRecords": 5, "maxValues": {"x": "3"}}',
        '{"numRecords": 5.0, "nullCount": {"x": 5}}',
        '{"numRecords": 5} {"numRecords": 6}',
        "null",  # crashes pyarrow.json if ever given to it
        " {} ",
        '{"numRecords": 0}',
        '{"numRecords": false}',
    ]
    got = check("x > 5", [add(t) for t in texts])
    assert got[:7] == [False, False, True, True, True, False, True]


def test_empty_files_are_skipped_even_for_partition_predicates() -> None:
    texts = ['{"numRecords": 0}', '{"numRecords" :  -0.0}', '{"numRecords":false}', '{"numRecords":0e1}',
             '{"numRecords":1}', '{"a":{"numRecords":0},"numRecords":2}', '{"\\u006eumRecords":0}', "{bad",
             None, '{"numRecords":01}']  # fmt: skip
    assert check("part = 'a'", [add(t, part="a") for t in texts]) == [False] * 4 + [True] * 2 + [False] + [True] * 3


def test_two_keys_for_one_partition_column_follow_the_lookup_order() -> None:
    adds = [add(p="1", P="2"), add(P="2", p="1"), add(P="1"), add(p=None, P="1"), add()]
    assert check("p = 1", adds, ("p",)) == [True, True, True, False, False]


def test_column_mapping_physical_name_first_even_when_null() -> None:
    field = {"name": "x", "type": "long", "nullable": True, "metadata": {COLUMN_MAPPING_PHYSICAL_NAME: "col-1"}}
    schema = StructType.from_json(json.dumps({"type": "struct", "fields": [field]}))
    adds = [add({"numRecords": 2, "maxValues": {"col-1": 3, "x": 9}}),
            add({"numRecords": 2, "maxValues": {"col-1": None, "x": 3}}),
            add({"numRecords": 2, "maxValues": {"x": 3}})]  # fmt: skip
    expr = parse_predicate("x > 5")
    want = per_file(expr, schema, [], adds)
    assert want == [False, True, False]
    assert vectorized(expr, schema, [], files_table(adds)) == want


def test_decimal_stats_are_read_as_the_decimal_of_the_json_float() -> None:
    # Decimal(repr(0.30000000000000004)) > 0.3 although the literal 0.3 and the float are close.
    adds = [add({"numRecords": 1, "minValues": {"amount": v}, "maxValues": {"amount": v}, "nullCount": {"amount": 0}})
            for v in (0.3, 0.30000000000000004, 0.1, 2**53 + 1, 1e20)]  # fmt: skip
    for text in ("amount = 0.3", "amount > 0.3", "amount <= 0.30000000000000004", "amount = 9007199254740993",
                 "amount >= 1e20", "amount = 0.1D", "amount != 0.1"):  # fmt: skip
        check(text, adds)


def test_numbers_at_the_edges_of_int64_and_float() -> None:
    adds = [add({"numRecords": 1, "minValues": {"x": v, "ratio": v}, "maxValues": {"x": v, "ratio": v}})
            for v in (2**63 - 1, -(2**63), 2**53 + 1, 0)]  # fmt: skip
    for text in ("x < 9223372036854775808", "x > 9223372036854775806.5", "x = -9223372036854775808",
                 "ratio = 9007199254740993", "ratio > 9007199254740992", "ratio < 1e400D", "x > 1e300",
                 "x = CAST('NaN' AS DOUBLE)", "x != CAST('NaN' AS DOUBLE)", "ratio <=> CAST('Infinity' AS DOUBLE)"):
        check(text, adds)  # fmt: skip


def test_nan_constants_rule_out_no_file_with_values() -> None:
    # Spark orders NaN above every number (x < NaN is true) and NaN = NaN: no bound rules a file
    # out, for decimal columns as for others (the per-file code once raised InvalidOperation there).
    adds = [
        add({"numRecords": 1, "minValues": {"amount": 1.5, "x": 1}, "maxValues": {"amount": 2, "x": 2},
             "nullCount": {"amount": 0, "x": 0}}, p="1"),
        add({"numRecords": 2, "nullCount": {"amount": 2, "x": 2}}, p="1"),
    ]  # fmt: skip
    for text in ("amount < CAST('NaN' AS DOUBLE)", "amount > CAST('NaN' AS DOUBLE)", "amount = CAST('NaN' AS DOUBLE)",
                 "x < CAST('NaN' AS DOUBLE)", "CAST('NaN' AS DOUBLE) >= x", "x <=> CAST('NaN' AS DOUBLE)",
                 "x IN (5, CAST('NaN' AS DOUBLE))", "p < CAST('NaN' AS DOUBLE) AND x > 0"):  # fmt: skip
        assert check(text, adds) == [True, False], text
    assert check("x NOT IN (CAST('NaN' AS DOUBLE))", adds) == [True, False]


def test_what_raises_per_file_raises_vectorized() -> None:
    # The widened max of a timestamp overflows per file: only where the stats are read.
    top = {"numRecords": 1, "maxValues": {"ts": "9999-12-31T23:59:59.999999Z"}}
    assert check("ts IS NULL", [add(top)]) is OverflowError
    assert check("ts IS NULL", [add({**top, "numRecords": 0})]) == [False]
    assert check("p = 2 AND ts > '2024-01-01'", [add(top, p="1")]) is OverflowError


def test_timestamps_dates_strings_and_like() -> None:
    st_ = {"numRecords": 3, "minValues": {"ts": "2024-01-01T10:00:00.123Z", "d": "2024-01-01", "name": "ab"},
           "maxValues": {"ts": "2024-01-01T11:00:00.456Z", "d": "2024-01-31", "name": "ab"},
           "nullCount": {"ts": 0, "d": 1, "name": 0}}  # fmt: skip
    long_max = {"numRecords": 3, "minValues": {"name": "a"}, "maxValues": {"name": "m" * 32}}
    adds = [add(st_), add(long_max), add({"numRecords": 3, "maxValues": {"ts": "junk", "d": "2024-13-01"}})]
    for text in ("ts > TIMESTAMP '2024-01-01 11:00:00.456500'", "ts > TIMESTAMP '2024-01-01 11:00:00.457'",
                 "ts < '2024-01-01 10:00:00'", "ts >= DATE '2024-01-02'", "d < TIMESTAMP '2024-01-01 00:00:01'",
                 "d = TIMESTAMP '2024-01-31 00:00:00'", "d > TIMESTAMP '2024-01-31 00:00:00'", "d = '2024-01-15'",
                 "name LIKE 'a%'", "name NOT LIKE 'a_'", "name > 'mz'", "name = 'ab'", "name != 'ab'"):
        check(text, adds)  # fmt: skip


def test_columns_against_columns_and_odd_literals_run_per_file() -> None:
    st_ = {"numRecords": 3, "minValues": {"x": 1, "ratio": 0.5}, "maxValues": {"x": 3, "ratio": 2.5}}
    adds = [add(st_, p="2"), add(st_, p="9"), add(None, p="1")]
    check("x > p", adds)
    check("x < ratio OR p = 9", adds)
    check(Comparison("=", Column("x"), Literal(True, "integer")), adds)
    check(Comparison("<", Column("d"), Literal(dt.datetime(2024, 1, 1), "date")), adds)


def test_partition_and_stats_conjunction_reads_stats_of_remaining_files_only() -> None:
    adds = [add({"numRecords": 2, "minValues": {"x": i}, "maxValues": {"x": i + 1}}, part=f"p{i % 5}")
            for i in range(40)] + [add("{bad", part="p1"), add(None, part="p1", P="p2")]  # fmt: skip
    assert sum(check("part = 'p1' AND x > 20 AND x IS NOT NULL", adds)) == 6


def test_stats_parsed_modes() -> None:
    struct = pa.struct([("numRecords", pa.int64()), ("maxValues", pa.struct([("x", pa.int64())]))])
    table = files_table([add('{"numRecords": 1, "maxValues": {"x": 9}}'), add(None), add(None)])
    table = table.append_column(
        "stats_parsed", pa.array([{"numRecords": 1, "maxValues": {"x": 3}}, {"numRecords": 1, "maxValues": {"x": 3}},
                                  None], struct))  # fmt: skip
    expr = parse_predicate("x > 5")
    assert A.compile_arrow(expr, SCHEMA, [])(table).to_pylist() == [True, False, True]
    assert A.compile_arrow(expr, SCHEMA, [], stats_parsed="prefer")(table).to_pylist() == [False, False, True]
    assert A.compile_arrow(expr, SCHEMA, [], stats_parsed="ignore")(table).to_pylist() == [True, True, True]
    with pytest.raises(ValueError, match="stats_parsed"):
        A.compile_arrow(expr, SCHEMA, [], stats_parsed="sometimes")


def test_tables_from_checkpoint_columns_and_odd_inputs() -> None:
    small = {"numRecords": 1, "maxValues": {"x": 3}}
    adds = [add(small, part="a"), add(small, part="b")]
    from_struct = pa.Table.from_struct_array(files_table(adds).to_struct_array())  # chunked, as read back
    expr = parse_predicate("part = 'a' OR x > 5")
    assert A.compile_arrow(expr, SCHEMA, ["part"])(from_struct).to_pylist() == [True, False]
    bare = pa.table({"path": ["a", "b"]})  # no partitionValues, no stats: NULL partition values, no stats
    assert A.compile_arrow(expr, SCHEMA, ["part"])(bare).to_pylist() == [True, True]
    assert A.compile_arrow(expr, SCHEMA, ["part"])(files_table([])).to_pylist() == []
    assert A.table_may_match(expr, from_struct, SCHEMA, partition_columns=["part"]).to_pylist() == [True, False]


def test_explain_names_what_runs_per_file() -> None:
    plan = A.compile_arrow(parse_predicate("part = 'a' AND (x > 5 OR x > p)"), SCHEMA, ["p", "part"]).explain()
    assert "per distinct partition values (part)" in plan and "stats: x > 5" in plan and "per file" in plan


@pytest.mark.parametrize(
    ("ddl", "bounds", "literals"),
    [
        ("v BIGINT", [1, 2, 3], ["1", "2", "3", "2.5", "2.0", "'2'", "9223372036854775807", "-9223372036854775808"]),
        ("v INT", [1, 2], ["1", "2", "1.5D", "2e0", "CAST('NaN' AS DOUBLE)", "CAST('Infinity' AS DOUBLE)"]),
        ("v DOUBLE", [-0.0, 0.1, 1.5], ["0.1", "0.1D", "0", "-0.0D", "1.5", "'1.5'", "CAST('NaN' AS DOUBLE)"]),
        ("v DECIMAL(10,2)", [0.1, 1.5, 3], ["0.1", "0.1D", "1.50", "3", "0.30000000000000004D", "'1.5'"]),
        ("v STRING", ["a", "ab", "b"], ["'a'", "'ab'", "'ab\\u0000'", "'b'", "''"]),
        ("v DATE", ["2024-01-01", "2024-01-31"],
         ["DATE '2024-01-01'", "'2024-01-31'", "TIMESTAMP '2024-01-31 00:00:00'", "TIMESTAMP '2024-01-01 00:00:01'"]),
        ("v TIMESTAMP", ["2024-01-01T10:00:00.123Z", "2024-01-01T10:00:00.124Z"],
         ["TIMESTAMP '2024-01-01 10:00:00.123'", "TIMESTAMP '2024-01-01 10:00:00.123999'",
          "TIMESTAMP '2024-01-01 10:00:00.124'", "TIMESTAMP '2024-01-01 10:00:00.124999'", "DATE '2024-01-01'"]),
        ("v BOOLEAN", [False, True], ["TRUE", "FALSE", "'true'"]),
    ],
)
def test_comparisons_at_the_bounds(ddl: str, bounds: list[Any], literals: list[str]) -> None:
    """Every operator, both sides, the literal at, between and outside the bounds: where off-by-one rules show."""
    schema = StructType.from_ddl(ddl)
    rows = [(lo, hi) for lo in bounds for hi in bounds] + [(lo, None) for lo in bounds] + [(None, hi) for hi in bounds]
    adds = [add({"numRecords": 3, "minValues": {"v": lo}, "maxValues": {"v": hi}, "nullCount": {"v": nulls}})
            for lo, hi in rows for nulls in (0, 1)]  # fmt: skip
    adds += [add({"numRecords": 3, "nullCount": {"v": 3}}), add(None)]  # all NULL; no stats
    table = files_table(adds)
    for literal in literals:
        for op in _OPS:
            for text in (f"v {op} {literal}", f"{literal} {op} v", f"NOT (v {op} {literal})"):
                expr = parse_predicate(text)
                assert vectorized(expr, schema, [], table) == per_file(expr, schema, [], adds), text
        for text in (f"v IN ({literal}, {bounds[0]!r})", f"v NOT IN ({literal})", f"v <=> {literal} OR v IS NULL"):
            expr = parse_predicate(text.replace("False", "FALSE").replace("True", "TRUE"))
            assert vectorized(expr, schema, [], table) == per_file(expr, schema, [], adds), text


def test_date_and_timestamp_stats_read_as_python_reads_them() -> None:
    """The vectorized reading of Delta's date / timestamp shapes: calendar edges, leap years, out-of-range fields."""
    days = [f"{y:04d}-{m:02d}-{d:02d}" for y in (0, 1, 4, 100, 400, 1900, 1970, 2000, 2023, 2024, 9999)
            for m in (0, 1, 2, 12, 13) for d in (0, 1, 28, 29, 30, 31, 32)]  # fmt: skip
    times = ["00:00:00.000", "23:59:59.999", "24:00:00.000", "10:60:00.000", "10:00:60.000", "1a:00:00.000"]
    texts: list[str | None] = [*days, *(f"{d}T{t}{z}" for d in days for t in times for z in ("", "Z"))]
    texts += [None, "", "2024-01-01 10:00:00", "2024-01-01T10:00:00+02:00", "20240101", "2024-1-01", "2024-01-0/"]
    for cast, timestamps in ((skipping._to_date, False), (skipping._to_timestamp, True)):
        want = []
        for text in texts:
            try:
                want.append(None if text is None else cast(text))
            except (ValueError, TypeError, ArithmeticError, AttributeError):
                want.append(None)
        assert _parse_dates(pa.array(texts, pa.string()), timestamps=timestamps).to_pylist() == want
