"""Tests for serialake.core.predicates: parsing, SQL text, qualifiers, and file matching."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from serialake.core.model.schema import StructType
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
    PredicateError,
    Unknown,
    between,
    column_refs,
    conjunction,
    disjunction,
    from_sqlglot,
    parse_predicate,
    partition_filter,
    split_conjuncts,
    strip_qualifier,
    to_sql,
)
from serialake.core.predicates.skipping import compile_predicate, file_may_match, file_may_match_any

SCHEMA = StructType.from_ddl(
    "p INT, x BIGINT, d DATE, country STRING, ts TIMESTAMP, amount DECIMAL(10,2), flag BOOLEAN, "
    "ratio DOUBLE, name STRING"
)
P, X = Column("p"), Column("x")


def may_match(text: str, partition_values: dict[str, str | None], stats: dict[str, Any] | None = None,
              partition_columns: list[str] | None = None) -> bool:
    return file_may_match(parse_predicate(text), partition_values, SCHEMA, stats, partition_columns=partition_columns)


# --- parsing and SQL text ----------------------------------------------------------------------

ROUND_TRIP = [
    "p = 1",
    "date > '2010-01-01' AND country IN ('US', 'FR')",
    "t.date = s.date AND t.country = 'c1'",
    "x IS NULL",
    "x IS NOT NULL",
    "p BETWEEN 2 AND 5",
    "p NOT BETWEEN 2 AND 5",
    "NOT (a = 1 OR b < 2)",
    "a <=> 1",
    "a IS DISTINCT FROM 1",
    "a != 1",
    "a <> 1",
    "x NOT IN (1, 2, NULL)",
    "name LIKE 'a%'",
    "name NOT LIKE 'a\\_b%'",
    "TRUE",
    "FALSE AND NULL",
    "-5 < x",
    "x = -1.5",
    "d = DATE '2024-01-01'",
    "ts >= TIMESTAMP '2024-01-01 10:11:12.123456'",
    "ts < TIMESTAMP_NTZ '2024-01-01 00:00:00'",
    "x = 1.5 OR x = 1e3 OR x = 2.5D OR x = 10L OR x = 5BD",
    "f(x) > 1",
    "x + 1 > 2",
    "`my col` = 1 AND `select` = 2 AND `a``b` = 3",
    "db.t.c = 1",
    "x = CAST('7' AS INT)",
    "x IN (SELECT y FROM other)",
    "a = 1 AND (b = 2 OR c = 3) AND NOT flag",
    "(a = 1 AND b = 2) OR (c = 3 AND NOT (d = 4))",
    "name = 'it\\'s a \\\\ path'",
    "p = 1 AND TRUE",
    "x = CAST('NaN' AS DOUBLE) OR x = CAST('-Infinity' AS DOUBLE)",
    "flag IS TRUE",
    "CASE WHEN p = 1 THEN TRUE ELSE FALSE END",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_to_sql_round_trips(text: str) -> None:
    expr = parse_predicate(text)
    sql = to_sql(expr)
    again = parse_predicate(sql)
    assert to_sql(again) == sql
    if "NaN" not in text:  # NaN != NaN
        assert again == expr


def test_parse_structure() -> None:
    assert parse_predicate("p = 1") == Comparison("=", P, Literal(1, "integer"))
    assert parse_predicate("p BETWEEN 2 AND 5") == And(
        (Comparison(">=", P, Literal(2)), Comparison("<=", P, Literal(5)))
    )
    assert parse_predicate("p BETWEEN 2 AND 5") == between(P, Literal(2), Literal(5))
    assert parse_predicate("p NOT IN (1, 2)") == In(P, (Literal(1), Literal(2)), negated=True)
    assert parse_predicate("NOT (p IN (1))") == In(P, (Literal(1),), negated=True)
    assert parse_predicate("p IS NOT NULL") == IsNull(P, negated=True)
    assert parse_predicate("name NOT LIKE 'a%'") == Like(Column("name"), "a%", negated=True)
    assert parse_predicate("t.p <> s.p") == Comparison("!=", Column("p", "t"), Column("p", "s"))
    assert parse_predicate("a OR (b OR c)") == Or((Column("a"), Column("b"), Column("c")))
    assert parse_predicate("(a AND b) AND c") == And((Column("a"), Column("b"), Column("c")))
    assert parse_predicate("NOT NOT a") == Not(Not(Column("a")))


def test_literal_types() -> None:
    def lit(text: str) -> Literal:
        e = parse_predicate(f"x = {text}")
        assert isinstance(e, Comparison) and isinstance(e.right, Literal)
        return e.right

    assert lit("5") == Literal(5, "integer")
    assert lit("-5") == Literal(-5, "integer")
    assert lit("1.50") == Literal(Decimal("1.50"), "decimal")
    assert lit("1e3") == Literal(1000.0, "double")
    assert lit("1.5D") == Literal(1.5, "double")
    assert lit("'a'") == Literal("a", "string")
    assert lit("NULL") == Literal(None, "null")
    assert lit("TRUE") == TRUE
    assert lit("DATE '2024-02-29'") == Literal(dt.date(2024, 2, 29), "date")
    assert lit("TIMESTAMP '2024-01-01T10:00:00Z'") == Literal(dt.datetime(2024, 1, 1, 10), "timestamp")
    assert lit("CAST('12' AS BIGINT)") == Literal(12, "integer")
    assert Literal(Decimal("2")).type_hint == "decimal"  # inferred when omitted


def test_unknown_keeps_text_and_columns() -> None:
    e = parse_predicate("upper(t.name) = 'A'")
    assert e == Unknown("UPPER(t.name) = 'A'", (Column("name", "t"),))
    assert isinstance(parse_predicate("d = DATE '2024-13-45'"), Unknown)  # invalid date: not an error
    assert isinstance(parse_predicate("p BETWEEN SYMMETRIC 5 AND 2"), Unknown)


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [("p = 1 AND", 1, 9), ("p = 1 1", 1, 7), ("(p = 1", 1, 6), ("p = 1\nAND (q = ", 2, 8)],
)
def test_parse_errors_carry_position(text: str, line: int, column: int) -> None:
    with pytest.raises(PredicateError) as info:
        parse_predicate(text)
    assert (info.value.text, info.value.line, info.value.column) == (text, line, column)
    assert repr(text) in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("text", ["", "p = 'unterminated", "p = 1; q = 2"])
def test_other_parse_errors(text: str) -> None:
    with pytest.raises(PredicateError):
        parse_predicate(text)


def test_from_sqlglot_node() -> None:
    node = sqlglot.parse_one("UPDATE t SET x = 1 WHERE p = 3 AND x > 0", read="spark").args["where"].this
    assert from_sqlglot(node) == parse_predicate("p = 3 AND x > 0")


# --- tree utilities ----------------------------------------------------------------------------


def test_split_and_conjunction() -> None:
    e = parse_predicate("a = 1 AND (b = 2 AND c = 3) AND (d = 4 OR e = 5)")
    parts = split_conjuncts(e)
    assert [to_sql(p) for p in parts] == ["a = 1", "b = 2", "c = 3", "d = 4 OR e = 5"]
    assert conjunction(parts) == e
    assert conjunction([]) == TRUE
    assert conjunction([TRUE, parts[0], TRUE]) == parts[0]
    assert split_conjuncts(TRUE) == []
    assert disjunction([]) == FALSE


def test_column_refs() -> None:
    e = parse_predicate("t.a = 1 AND (b IS NULL OR s.c IN (1, 2)) AND f(t.d, e) > 0")
    assert column_refs(e) == {("t", "a"), (None, "b"), ("s", "c"), ("t", "d"), (None, "e")}
    assert column_refs(TRUE) == set()


def test_strip_qualifier() -> None:
    assert strip_qualifier(parse_predicate("t.p = 1 AND x > 2"), "t") == parse_predicate("p = 1 AND x > 2")
    assert strip_qualifier(parse_predicate("T.p = 1"), "t") == parse_predicate("p = 1")  # case-insensitive
    assert strip_qualifier(parse_predicate("t.p = s.p"), "t") is None
    assert strip_qualifier(parse_predicate("t.p = 1 OR s.q = 2"), "t") is None
    assert strip_qualifier(parse_predicate("cat.db.t.p = 1"), "t") == parse_predicate("p = 1")
    stripped = strip_qualifier(parse_predicate("lower(t.name) = 'x'"), "t")
    assert stripped == Unknown("LOWER(name) = 'x'", (Column("name"),))
    assert strip_qualifier(parse_predicate("lower(s.name) = 'x'"), "t") is None


def test_merge_condition_keeps_only_explicit_target_conjuncts() -> None:
    cond = parse_predicate("t.date = s.date AND t.date = '2024-01-01'")
    target = [c for c in (strip_qualifier(c, "t") for c in split_conjuncts(cond)) if c is not None]
    assert target == [parse_predicate("date = '2024-01-01'")]
    assert to_sql(partition_filter(target, ["date"])) == "date = '2024-01-01'"


def test_merge_condition_without_explicit_target_predicate_reads_all() -> None:
    cond = parse_predicate("s.date = t.date")
    target = [c for c in (strip_qualifier(c, "t") for c in split_conjuncts(cond)) if c is not None]
    assert partition_filter(target, ["date"]) == TRUE


def test_partition_filter() -> None:
    exprs = [parse_predicate("p > 1 AND x = 5"), parse_predicate("P IN (2, 3)"), parse_predicate("p = 1 OR x > 5")]
    assert to_sql(partition_filter(exprs, ["p"])) == "p > 1 AND P IN (2, 3)"
    assert partition_filter([parse_predicate("p = 1 OR x > 5")], ["p"]) == TRUE
    unknown_and_p = parse_predicate("rand() < 0.5 AND p = 1")
    assert partition_filter([unknown_and_p], ["p"]) == parse_predicate("rand() < 0.5 AND p = 1")
    assert partition_filter([parse_predicate("t.p = 1")], ["p"]) == TRUE  # qualified: strip first
    assert partition_filter([], ["p"]) == TRUE


# --- file matching: the conflict-matrix cases --------------------------------------------------


def test_integer_partition_values_compare_as_numbers() -> None:
    assert may_match("p > 5", {"p": "10"})  # '10' > '5' is false as strings
    assert not may_match("p > 5", {"p": "3"})
    assert may_match("p >= 2", {"p": "3"})
    assert not may_match("p >= 2", {"p": "1"})
    assert may_match("p = 1", {"p": "1"}) and not may_match("p = 1", {"p": "2"})
    assert may_match("p > 5.5", {"p": "6"}) and not may_match("p = 5.5", {"p": "5"})
    assert may_match("p = '7'", {"p": "7"})  # string literal cast to the column type


def test_in_lists() -> None:
    assert may_match("p IN (1, 2)", {"p": "2"})
    assert not may_match("p IN (1, 2)", {"p": "3"})
    assert may_match("p NOT IN (1, 2)", {"p": "3"})
    assert not may_match("p NOT IN (1, 2)", {"p": "1"})
    assert not may_match("p NOT IN (1, NULL)", {"p": "3"})  # 3 <> NULL is NULL
    assert may_match("p IN (1, NULL)", {"p": "1"})


def test_null_partition_values() -> None:
    for null in ({"p": None}, {"p": ""}, {}):
        assert not may_match("p = 1", null, partition_columns=["p"])
        assert may_match("p IS NULL", null, partition_columns=["p"])
        assert not may_match("NOT (p = 1)", null, partition_columns=["p"])
        assert not may_match("p != 1", null, partition_columns=["p"])
        assert may_match("p <=> NULL", null, partition_columns=["p"])
        assert not may_match("p IS NOT NULL", null, partition_columns=["p"])
    assert not may_match("p = NULL", {"p": "1"})
    assert may_match("country = ''", {"country": ""})  # empty string stays a value for strings


def test_date_partitions_against_string_literals() -> None:
    assert may_match("d = '2024-01-01'", {"d": "2024-01-01"})
    assert not may_match("d > '2024-01-01'", {"d": "2024-01-01"})
    assert may_match("d < '2024-02-01'", {"d": "2024-01-15"})
    assert may_match("d >= DATE '2024-01-15' AND d < DATE '2024-02-01'", {"d": "2024-01-15"})
    assert not may_match("d BETWEEN '2023-01-01' AND '2023-12-31'", {"d": "2024-01-15"})
    assert may_match("d = 'garbage'", {"d": "2024-01-15"})  # uncastable literal: cannot rule the file out


def test_data_column_disjunct_widens_the_read() -> None:
    assert may_match("p = 1 OR x > 5", {"p": "2"})
    assert not may_match("p = 1 AND x > 5", {"p": "2"})
    assert may_match("p = 1 AND x > 5", {"p": "1"})
    assert may_match("NOT (x > 5)", {"p": "2"})
    assert may_match("p = 1 OR f(p) = 3", {"p": "2"})
    assert not may_match("p = 1 AND f(x) = 3", {"p": "2"})


def test_scenarios_from_the_conflict_matrix() -> None:
    # 7: T read p=3; W added p=1 -> no conflict.  8: T read p=1, W added p=1 -> conflict.
    assert not may_match("p = 3", {"p": "1"})
    assert may_match("p = 1", {"p": "1"})
    # 9: T read p>=2 (no file matched); W added p=3 -> conflict.
    assert may_match("p >= 2", {"p": "3"})
    # 21: DELETE date < X vs UPDATE date > X, partitioned by date.
    read = partition_filter([parse_predicate("d < '2024-01-10'")], ["d"])
    assert not may_match(to_sql(read), {"d": "2024-01-20"})
    # 23: explicit target predicates on both partition columns.
    read = parse_predicate("d = '2024-01-01' AND country = 'c1'")
    assert not file_may_match(read, {"d": "2024-01-02", "country": "c2"}, SCHEMA)
    assert file_may_match(read, {"d": "2024-01-01", "country": "c1"}, SCHEMA)


def test_empty_predicate_list_reads_nothing() -> None:
    assert not file_may_match_any([], {"p": "1"}, SCHEMA)
    assert file_may_match_any([parse_predicate("p = 2"), parse_predicate("p = 1")], {"p": "1"}, SCHEMA)
    assert not file_may_match_any([parse_predicate("p = 2"), parse_predicate("p = 3")], {"p": "1"}, SCHEMA)
    assert file_may_match(TRUE, {"p": "1"}, SCHEMA)


def test_column_names_match_case_insensitively() -> None:
    assert may_match("P = 1", {"p": "1"})
    assert may_match("p = 1", {"P": "1"})
    assert not may_match("COUNTRY = 'US'", {"Country": "FR"})
    stats = {"numRecords": 1, "minValues": {"X": 9}, "maxValues": {"x": 9}, "nullCount": {"x": 0}}
    assert may_match("X > 5", {}, stats)


def test_qualified_columns_are_not_resolved() -> None:
    assert may_match("t.p = 1 AND s.p = 2", {"p": "3"})


def test_decimals() -> None:
    assert may_match("amount = 1.5", {"amount": "1.50"})
    assert not may_match("amount > 1", {"amount": "0.99"})
    assert may_match("amount IN (2, 3.25)", {"amount": "3.25"})


def test_booleans() -> None:
    assert may_match("flag", {"flag": "true"})
    assert not may_match("flag", {"flag": "false"})
    assert may_match("NOT flag", {"flag": "false"})
    assert may_match("flag = 'true'", {"flag": "true"})
    assert not may_match("flag = TRUE", {"flag": None})
    assert may_match("flag IS NOT TRUE", {"flag": None})


def test_timestamps() -> None:
    pv = {"ts": "2024-01-01 10:00:00.5"}
    assert may_match("ts > '2024-01-01 10:00:00'", pv)
    assert not may_match("ts > TIMESTAMP '2024-01-01 10:00:01'", pv)
    assert may_match("ts = TIMESTAMP '2024-01-01 10:00:00'", {"ts": "2024-01-01T10:00:00.000000Z"})
    assert may_match("ts >= DATE '2024-01-01'", {"ts": "2024-01-01 00:00:00"})
    assert not may_match("ts >= DATE '2024-01-02'", {"ts": "2024-01-01 23:59:59"})
    assert may_match("d < TIMESTAMP '2024-01-01 00:00:01'", {"d": "2024-01-01"})


def test_strings_and_like() -> None:
    assert may_match("name LIKE 'ab%'", {"name": "abc"})
    assert not may_match("name LIKE 'ab%'", {"name": "xbc"})
    assert may_match("name LIKE 'a\\_c'", {"name": "a_c"}) and not may_match("name LIKE 'a\\_c'", {"name": "abc"})
    assert not may_match("name NOT LIKE 'a_c'", {"name": "abc"})
    assert may_match("name > 'b'", {"name": "c"}) and not may_match("name > 'b'", {"name": "a"})
    assert may_match("name = 1", {"name": "2"})  # string vs number: not modelled, may match


def test_unknown_columns_and_types_may_match() -> None:
    assert may_match("nope = 1", {"p": "1"})
    assert may_match("p = 1 OR nope = 1", {"p": "2"})
    assert may_match("p = 1", {"p": "not-a-number"})
    assert may_match("ratio > 0", {"ratio": "NaN"})


# --- stats -------------------------------------------------------------------------------------

STATS = {
    "numRecords": 10,
    "minValues": {"x": 1, "d": "2024-01-01", "ts": "2024-01-01T10:00:00.123Z", "name": "b"},
    "maxValues": {"x": 3, "d": "2024-01-31", "ts": "2024-01-01T11:00:00.456Z", "name": "d"},
    "nullCount": {"x": 0, "d": 2, "ts": 0, "name": 0, "amount": 10},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x > 5", False),
        ("x > 2", True),
        ("x >= 3", True),
        ("x < 1", False),
        ("x <= 1", True),
        ("x = 7", False),
        ("x = 2", True),
        ("x != 2", True),
        ("x IN (0, 4, 5)", False),
        ("x IN (0, 3)", True),
        ("x BETWEEN 4 AND 9", False),
        ("NOT (x > 5)", True),
        ("x IS NULL", False),
        ("x IS NOT NULL", True),
        ("d IS NULL", True),
        ("d > '2024-02-01'", False),
        ("d = DATE '2024-01-15'", True),
        ("NOT (d = '2024-03-01')", True),
        ("ts > TIMESTAMP '2024-01-01 11:00:00.456500'", True),  # max truncated to ms: widened
        ("ts > TIMESTAMP '2024-01-01 11:00:00.458'", False),
        ("ts < '2024-01-01 10:00:00'", False),
        ("name = 'a'", False),
        ("name LIKE 'c%'", True),
        ("amount IS NULL", True),  # all null
        ("amount = 1", False),
        ("amount IS NOT NULL", False),
        ("ratio > 100", True),  # no stats for the column
        ("x > 5 OR p = 1", True),  # p unknown partition value: missing key is NULL only for partitions
    ],
)
def test_stats_narrow_data_columns(text: str, expected: bool) -> None:
    assert may_match(text, {}, STATS) is expected


def test_stats_edge_cases() -> None:
    assert not may_match("x > 0", {}, {"numRecords": 0})  # an empty file holds no matching row
    assert not may_match("x > 5", {}, {"numRecords": 10, "maxValues": {"x": 3}})  # a NULL x is not > 5 either
    assert may_match("x IS NULL", {}, {"numRecords": 10, "maxValues": {"x": 3}})  # null count unknown
    assert may_match("x IS NULL", {}, {"numRecords": 10, "maxValues": {"x": 3}, "nullCount": {}})
    assert may_match("NOT (x < 2)", {}, {"numRecords": 10, "minValues": {"x": 1}})
    assert may_match("x = 7", {}, {"numRecords": 10, "minValues": {"x": "junk"}, "maxValues": {"x": 3}}) is False
    long_max = "m" * 32  # may be a truncated prefix: do not trust it as an upper bound
    assert may_match("name > 'mz'", {}, {"numRecords": 1, "minValues": {"name": "a"}, "maxValues": {"name": long_max}})


def test_stats_use_physical_names_under_column_mapping() -> None:
    schema = StructType.from_json(
        '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":'
        '{"delta.columnMapping.physicalName":"col-1"}}]}'
    )
    stats = {"numRecords": 5, "minValues": {"col-1": 1}, "maxValues": {"col-1": 3}, "nullCount": {"col-1": 0}}
    assert not file_may_match(parse_predicate("x > 5"), {}, schema, stats)


def test_compile_predicate_reuses_resolution() -> None:
    match = compile_predicate(parse_predicate("p IN (1, 2) AND d >= '2024-01-01' AND x > 5"), SCHEMA, ["p", "d"])
    assert match({"p": "1", "d": "2024-06-01"}, None)
    assert not match({"p": "3", "d": "2024-06-01"}, None)
    assert not match({"p": "1", "d": "2023-06-01"}, None)
    assert not match({"p": "1", "d": "2024-06-01"}, {"numRecords": 1, "maxValues": {"x": 5}, "nullCount": {"x": 0}})
    assert not match({"d": "2024-06-01"}, None)  # missing partition key is NULL


# --- properties: exact 3VL on partition values, soundness with stats, SQL round trip -------------

Value = int | None
VALUES = st.one_of(st.none(), st.integers(0, 4))
OPS = st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "<=>"])


def lit(v: Value) -> Literal:
    return Literal(v, "integer" if v is not None else "null")


def leaves(column: Column) -> st.SearchStrategy[Expr]:
    literal = VALUES.map(lit)
    return st.one_of(
        st.builds(Comparison, OPS, st.just(column), literal),
        st.builds(Comparison, OPS, literal, st.just(column)),
        st.builds(In, st.just(column), st.lists(literal, min_size=1, max_size=3).map(tuple), st.booleans()),
        st.builds(IsNull, st.just(column), st.booleans()),
        st.builds(between, st.just(column), literal, literal, st.booleans()),
        st.sampled_from([TRUE, FALSE, Literal(None, "null")]),
    )


def trees(*columns: Column) -> st.SearchStrategy[Expr]:
    base = st.one_of(*(leaves(c) for c in columns))
    return st.recursive(
        base,
        lambda sub: st.one_of(
            st.lists(sub, min_size=2, max_size=3).map(conjunction),
            st.lists(sub, min_size=2, max_size=3).map(disjunction),
            sub.map(Not),
        ),
        max_leaves=8,
    )


def evaluate(e: Expr, row: dict[str, Value]) -> bool | None:
    """Plain SQL three-valued evaluation of one row."""
    if isinstance(e, Literal):
        return e.value
    if isinstance(e, Column):
        return row[e.name]  # type: ignore[return-value]
    if isinstance(e, Not):
        v = evaluate(e.arg, row)
        return None if v is None else not v
    if isinstance(e, And):
        vs = [evaluate(a, row) for a in e.args]
        return False if False in vs else (None if None in vs else True)
    if isinstance(e, Or):
        vs = [evaluate(a, row) for a in e.args]
        return True if True in vs else (None if None in vs else False)
    if isinstance(e, IsNull):
        return (evaluate(e.expr, row) is None) != e.negated
    if isinstance(e, In):
        subject = evaluate(e.expr, row)
        found = disjunction([Comparison("=", Literal(subject), v) for v in e.values])
        result = evaluate(found, row)
        return None if result is None else result != e.negated
    assert isinstance(e, Comparison)
    a, b = evaluate(e.left, row), evaluate(e.right, row)
    if e.op == "<=>":
        return a == b
    if a is None or b is None:
        return None
    return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]  # type: ignore[operator]


@settings(max_examples=400, deadline=None)
@given(trees(P), VALUES)
def test_partition_evaluation_is_exact_three_valued_logic(expr: Expr, p: Value) -> None:
    partition = {"p": None if p is None else str(p)}
    assert file_may_match(expr, partition, SCHEMA) is (evaluate(expr, {"p": p}) is True)


@settings(max_examples=400, deadline=None)
@given(trees(P, X), VALUES, st.integers(0, 4), st.integers(0, 4), st.booleans(), st.booleans())
def test_data_column_evaluation_never_misses_a_matching_row(
    expr: Expr, p: Value, lo: int, span: int, has_nulls: bool, with_stats: bool
) -> None:
    hi = lo + span
    stats = {
        "numRecords": 10, "minValues": {"x": lo}, "maxValues": {"x": hi}, "nullCount": {"x": 1 if has_nulls else 0}
    }
    candidates: list[Value] = list(range(lo, hi + 1)) + ([None] if has_nulls else [])
    if not with_stats:
        candidates = [None, *range(-1, 10)]
    some_row_matches = any(evaluate(expr, {"p": p, "x": x}) is True for x in candidates)
    partition = {"p": None if p is None else str(p)}
    if some_row_matches:
        assert file_may_match(expr, partition, SCHEMA, stats if with_stats else None)


@settings(max_examples=300, deadline=None)
@given(trees(P, X, Column("my col", "t")))
def test_sql_text_round_trips(expr: Expr) -> None:
    parsed = parse_predicate(to_sql(expr))
    assert parse_predicate(to_sql(parsed)) == parsed
    for p in (None, 0, 2, 4):
        for x in (None, 1, 3):
            row = {"p": p, "x": x, "my col": x}
            assert evaluate(parsed, row) == evaluate(expr, row)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=12))
def test_string_literals_round_trip(text: str) -> None:
    expr = Comparison("=", Column("name"), Literal(text))
    assert parse_predicate(to_sql(expr)) == expr


def test_modules_never_import_pyspark() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "import serialake.core.model.schema, serialake.core.predicates.skipping\n"
        "import serialake.core.predicates.expressions as p\n"
        "p.to_sql(p.parse_predicate('p = 1'))\n"
        "assert not any(m.startswith('pyspark') and sys.modules[m] for m in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
