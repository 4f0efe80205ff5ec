"""SQL boolean predicates as a small expression tree, and whether a Delta file may match one.

Parsing goes through sqlglot's Spark dialect; anything not modelled becomes ``Unknown``, which
evaluation treats as "could be TRUE, FALSE or NULL", so it can only widen a match, never hide one.

Evaluation (``compile_predicate``, ``file_may_match``) computes, for each node, the set of values
it may take over the rows of one file, as a bit mask of TRUE/FALSE/NULL combined with Kleene logic:
partition columns are the file's partition value cast to the column type, data columns are bounded
by the file's stats when given, and the file matches when TRUE is possible. Qualified columns
(``t.p``) are never resolved, since the evaluator cannot know which table ``t`` names: strip the
qualifier first (``strip_qualifier``).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, Union

from serialake.core.schema import DecimalType, PrimitiveType, StructType, physical_name
from serialake.exceptions import DeltaError

if TYPE_CHECKING:
    from sqlglot import exp

__all__ = [
    "FALSE",
    "TRUE",
    "And",
    "Column",
    "Comparison",
    "Expr",
    "FileMatcher",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Not",
    "Or",
    "PredicateError",
    "Unknown",
    "and3",
    "between",
    "column_refs",
    "compile_predicate",
    "conjunction",
    "disjunction",
    "file_may_match",
    "file_may_match_any",
    "from_sqlglot",
    "or3",
    "parse_predicate",
    "partition_filter",
    "split_conjuncts",
    "strip_qualifier",
    "to_sql",
]


class PredicateError(DeltaError, ValueError):
    """A predicate string does not parse; ``text``, ``line`` and ``column`` say where."""

    def __init__(self, message: str, text: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.text = text
        self.line = line
        self.column = column


# ---------------------------------------------------------------------------------------------
# Expression tree
# ---------------------------------------------------------------------------------------------

COMPARISON_OPS = ("=", "!=", "<", "<=", ">", ">=", "<=>")


@dataclass(frozen=True)
class Column:
    """A column reference; ``qualifier`` is the table alias (``t`` in ``t.p``), dotted if multi-part."""

    name: str
    qualifier: str | None = None


@dataclass(frozen=True)
class Literal:
    """A constant; ``type_hint`` is one of integer, decimal, double, string, boolean, date, timestamp,
    timestamp_ntz, null (inferred from ``value`` when omitted).

    Values are int, Decimal (SQL ``1.5`` is a decimal in Spark), float, str, bool, date, datetime
    (naive, UTC if the text had an offset) or None.
    """

    value: Any
    type_hint: str = ""

    def __post_init__(self) -> None:
        if not self.type_hint:
            object.__setattr__(self, "type_hint", _infer_type_hint(self.value))


@dataclass(frozen=True)
class Comparison:
    """``left op right`` with op one of = != < <= > >= <=> (null-safe equality)."""

    op: str
    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in COMPARISON_OPS:
            raise ValueError(f"unknown comparison operator {self.op!r}; expected one of {COMPARISON_OPS}")


@dataclass(frozen=True)
class In:
    """``expr [NOT] IN (values...)`` with literal values."""

    expr: Expr
    values: tuple[Expr, ...]
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    """``expr IS [NOT] NULL``."""

    expr: Expr
    negated: bool = False


@dataclass(frozen=True)
class Like:
    """``expr [NOT] LIKE 'pattern'`` (``%``, ``_``, backslash escape)."""

    expr: Expr
    pattern: str
    negated: bool = False


@dataclass(frozen=True)
class And:
    """Conjunction of two or more predicates (build with ``conjunction`` to flatten)."""

    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    """Disjunction of two or more predicates (build with ``disjunction`` to flatten)."""

    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Not:
    """``NOT arg``."""

    arg: Expr


@dataclass(frozen=True)
class Unknown:
    """SQL this module does not model (functions, arithmetic, subqueries...): may be anything.

    ``refs`` are the columns it mentions, so qualifier stripping and partition filtering still see them.
    """

    sql_text: str
    refs: tuple[Column, ...] = ()


Expr = Union[Column, Literal, Comparison, In, IsNull, Like, And, Or, Not, Unknown]

TRUE = Literal(True, "boolean")
FALSE = Literal(False, "boolean")


def between(expr: Expr, low: Expr, high: Expr, negated: bool = False) -> Expr:
    """``expr [NOT] BETWEEN low AND high``, folded to ``expr >= low AND expr <= high`` as Spark does."""
    folded = And((Comparison(">=", expr, low), Comparison("<=", expr, high)))
    return Not(folded) if negated else folded


def _infer_type_hint(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dt.datetime):
        return "timestamp"
    if isinstance(value, dt.date):
        return "date"
    raise ValueError(f"unsupported literal value {value!r}")


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def parse_predicate(text: str) -> Expr:
    """Parse a Spark SQL boolean expression such as ``"p = 1 AND d > '2024-01-01'"``."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    try:
        node = sqlglot.parse_one(text, read="spark", into=exp.Condition)
    except ParseError as e:
        info = e.errors[0] if e.errors else {}
        line, col = info.get("line"), info.get("col")
        where = f" at line {line}, column {col}" if line is not None else ""
        if info.get("highlight"):
            where += f" (near {info['highlight']!r})"
        what = info.get("description") or "no expression found"
        raise PredicateError(f"cannot parse predicate {text!r}: {what}{where}", text, line, col) from None
    except TokenError as e:
        raise PredicateError(f"cannot parse predicate {text!r}: {e}", text) from None
    if node is None or isinstance(node, exp.Block):
        raise PredicateError(f"expected exactly one predicate, got {text!r}", text)
    return from_sqlglot(node)


def from_sqlglot(node: exp.Expression) -> Expr:
    """Convert a sqlglot expression (as produced by the SQL layer) to our tree."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return from_sqlglot(node.this)
    if isinstance(node, exp.And):
        return conjunction([from_sqlglot(node.this), from_sqlglot(node.expression)], keep_true=True)
    if isinstance(node, exp.Or):
        return disjunction([from_sqlglot(node.this), from_sqlglot(node.expression)])
    if isinstance(node, exp.Not):
        inner = from_sqlglot(node.this)
        if isinstance(inner, (In, IsNull, Like)):
            return _negate_predicate(inner)
        return Not(inner)
    ops = {
        exp.EQ: "=",
        exp.NEQ: "!=",
        exp.LT: "<",
        exp.LTE: "<=",
        exp.GT: ">",
        exp.GTE: ">=",
        exp.NullSafeEQ: "<=>",
        exp.NullSafeNEQ: "<=>",
    }
    op = ops.get(type(node))
    if op is not None:
        left, right = _operand(node.this), _operand(node.expression)
        if left is None or right is None:
            return _unknown(node)
        cmp = Comparison(op, left, right)
        return Not(cmp) if isinstance(node, exp.NullSafeNEQ) else cmp
    if isinstance(node, exp.Is):
        subject = _operand(node.this)
        if subject is not None and isinstance(node.expression, exp.Null):
            return IsNull(subject)
        if subject is not None and isinstance(node.expression, exp.Boolean):
            return Comparison("<=>", subject, Literal(node.expression.this, "boolean"))
        return _unknown(node)
    if isinstance(node, exp.In):
        subject = _operand(node.this)
        values = [_operand(v) for v in node.expressions]
        only_list = not any(node.args.get(k) for k in node.args if k not in ("this", "expressions"))
        if subject is None or not values or not only_list or not all(isinstance(v, Literal) for v in values):
            return _unknown(node)
        return In(subject, tuple(v for v in values if v is not None))
    if isinstance(node, exp.Between):
        subject, low, high = _operand(node.this), _operand(node.args["low"]), _operand(node.args["high"])
        if subject is None or low is None or high is None or node.args.get("symmetric"):
            return _unknown(node)
        return between(subject, low, high)
    if isinstance(node, exp.Like):
        subject, pattern = _operand(node.this), _operand(node.expression)
        if subject is None or not (isinstance(pattern, Literal) and isinstance(pattern.value, str)):
            return _unknown(node)
        return Like(subject, pattern.value, bool(node.args.get("negate")))
    operand = _operand(node)
    return operand if operand is not None else _unknown(node)


def _negate_predicate(e: In | IsNull | Like) -> Expr:
    if isinstance(e, In):
        return In(e.expr, e.values, not e.negated)
    if isinstance(e, IsNull):
        return IsNull(e.expr, not e.negated)
    return Like(e.expr, e.pattern, not e.negated)


def _operand(node: exp.Expression) -> Column | Literal | None:
    """A column or constant, folding signs and casts of literals; None for anything else."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _operand(node.this)
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            return None
        parts = [p.name for p in node.parts]
        return Column(parts[-1], ".".join(parts[:-1]) or None)
    if isinstance(node, exp.Boolean):
        return Literal(bool(node.this), "boolean")
    if isinstance(node, exp.Null):
        return Literal(None, "null")
    if isinstance(node, exp.Literal):
        text = node.this
        if node.is_string:
            return Literal(text, "string")
        if "e" in text.lower():
            return Literal(float(text), "double")
        if "." in text:
            return Literal(Decimal(text), "decimal")
        return Literal(int(text), "integer")
    if isinstance(node, exp.Neg):
        inner = _operand(node.this)
        if isinstance(inner, Literal) and inner.type_hint in ("integer", "decimal", "double"):
            return Literal(-inner.value, inner.type_hint)
        return None
    if isinstance(node, (exp.Cast, exp.TryCast)):
        inner = _operand(node.this)
        if isinstance(inner, Literal):
            return _cast_literal(inner, node.to)
    return None


def _cast_literal(lit: Literal, to: exp.DataType) -> Literal | None:
    from sqlglot import exp

    T = exp.DataType.Type
    kinds = {
        T.DATE: "date",
        T.TIMESTAMP: "timestamp",
        T.TIMESTAMPTZ: "timestamp",
        T.TIMESTAMPLTZ: "timestamp",
        T.TIMESTAMPNTZ: "timestamp_ntz",
        T.DOUBLE: "double",
        T.FLOAT: "double",
        T.TINYINT: "integer",
        T.SMALLINT: "integer",
        T.INT: "integer",
        T.BIGINT: "integer",
        T.DECIMAL: "decimal",
        T.TEXT: "string",
        T.VARCHAR: "string",
        T.CHAR: "string",
        T.BOOLEAN: "boolean",
    }
    target = kinds.get(to.this)
    if target is None or lit.value is None:
        return None if target is None else Literal(None, "null")
    value = lit.value
    try:
        if target == "string":
            if isinstance(value, (str, int, Decimal)) and not isinstance(value, bool):
                return Literal(value if isinstance(value, str) else format(value, "f"), "string")
            return None
        if target == "double":
            return Literal(float(value), "double")
        if target == "decimal":
            return Literal(Decimal(str(value).strip()), "decimal")
        if target == "integer":
            number = Decimal(str(value).strip()) if isinstance(value, str) else value
            if isinstance(number, bool) or number != int(number):
                return None
            return Literal(int(number), "integer")
        if target == "boolean":
            flag = _parse_bool(value) if isinstance(value, str) else None
            return None if flag is None else Literal(flag, "boolean")
        if target == "date" and isinstance(value, str):
            return Literal(_parse_date(value), "date")
        if target in ("timestamp", "timestamp_ntz") and isinstance(value, str):
            return Literal(_parse_timestamp(value), target)
    except (ValueError, ArithmeticError, InvalidOperation):
        return None
    return None


def _unknown(node: exp.Expression) -> Unknown:
    from sqlglot import exp

    refs: dict[Column, None] = {}
    for c in node.find_all(exp.Column):
        ref = _operand(c)
        if isinstance(ref, Column):
            refs[ref] = None
    return Unknown(node.sql(dialect="spark", normalize_functions=False), tuple(refs))


# ---------------------------------------------------------------------------------------------
# SQL text
# ---------------------------------------------------------------------------------------------

# Words sqlglot's Spark dialect will not read as a bare column name (found by trying each keyword).
_RESERVED = frozenset(
    "ALTER AND ANY AS BETWEEN CALL CASE CREATE CROSS CURRENT_DATE CURRENT_TIMESTAMP CURRENT_USER "
    "DESCRIBE DISTINCT DROP ELSE EXCEPT EXECUTE EXPLAIN FALSE FETCH FOR FROM GLOB GRANT HAVING ILIKE "
    "INNER INSERT INTERSECT INTO JOIN LATERAL LIKE MINUS NOT NOTNULL NULL ON OPTIMIZE OR OUTER "
    "PARTITIONED_BY PREPARE QUALIFY REGEXP RENAME RETURNING REVOKE RLIKE ROLLBACK SELECT "
    "SERDEPROPERTIES SESSION_USER SHOW TABLESAMPLE THEN TRUE UNCACHE UNION USING VACUUM VALUES WHEN "
    "WHERE WITH XOR IN IS END INTERVAL EXISTS".split()
)
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_PREC_OR, _PREC_AND, _PREC_NOT, _PREC_PREDICATE, _PREC_ATOM = 1, 2, 3, 4, 5


def to_sql(expr: Expr) -> str:
    """Readable Spark SQL that ``parse_predicate`` reads back to the same tree."""
    return _sql(expr, 0)


def _sql(e: Expr, min_prec: int) -> str:
    if isinstance(e, (Column, Literal)):
        return _column_sql(e) if isinstance(e, Column) else _literal_sql(e)
    if isinstance(e, Unknown):
        text, prec = e.sql_text, 0
    elif isinstance(e, Or):
        text, prec = " OR ".join(_sql(a, _PREC_OR + 1) for a in e.args), _PREC_OR
    elif isinstance(e, And):
        text, prec = " AND ".join(_sql(a, _PREC_AND + 1) for a in e.args), _PREC_AND
    elif isinstance(e, Not):
        text, prec = f"NOT {_sql(e.arg, _PREC_ATOM)}", _PREC_NOT
    elif isinstance(e, Comparison):
        text = f"{_sql(e.left, _PREC_ATOM)} {e.op} {_sql(e.right, _PREC_ATOM)}"
        prec = _PREC_PREDICATE
    elif isinstance(e, In):
        values = ", ".join(_sql(v, _PREC_ATOM) for v in e.values)
        text, prec = f"{_sql(e.expr, _PREC_ATOM)} {'NOT IN' if e.negated else 'IN'} ({values})", _PREC_PREDICATE
    elif isinstance(e, IsNull):
        text, prec = f"{_sql(e.expr, _PREC_ATOM)} IS {'NOT NULL' if e.negated else 'NULL'}", _PREC_PREDICATE
    elif isinstance(e, Like):
        pattern = _literal_sql(Literal(e.pattern, "string"))
        text, prec = f"{_sql(e.expr, _PREC_ATOM)} {'NOT LIKE' if e.negated else 'LIKE'} {pattern}", _PREC_PREDICATE
    else:
        raise TypeError(f"not a predicate expression: {e!r}")
    return f"({text})" if prec < min_prec else text


def _identifier_sql(name: str) -> str:
    if _PLAIN_IDENTIFIER.fullmatch(name) and name.upper() not in _RESERVED:
        return name
    return "`" + name.replace("`", "``") + "`"


def _column_sql(c: Column) -> str:
    parts = (c.qualifier.split(".") if c.qualifier else []) + [c.name]
    return ".".join(_identifier_sql(p) for p in parts)


def _literal_sql(lit: Literal) -> str:
    v, hint = lit.value, lit.type_hint
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Decimal):
        text = format(v, "f")
        return text if "." in text else text + "BD"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return f"CAST('{'NaN' if math.isnan(v) else '-Infinity' if v < 0 else 'Infinity'}' AS DOUBLE)"
        text = repr(v)
        return text if "e" in text else text + "D"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, dt.datetime):
        keyword = "TIMESTAMP_NTZ" if hint == "timestamp_ntz" else "TIMESTAMP"
        return f"{keyword} '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    raise TypeError(f"cannot write literal {v!r} as SQL")


# ---------------------------------------------------------------------------------------------
# Tree utilities
# ---------------------------------------------------------------------------------------------


def split_conjuncts(expr: Expr) -> list[Expr]:
    """The ANDed parts of ``expr`` (nested ANDs flattened); TRUE gives an empty list."""
    if isinstance(expr, And):
        return [c for a in expr.args for c in split_conjuncts(a)]
    if expr == TRUE:
        return []
    return [expr]


def conjunction(exprs: Sequence[Expr], *, keep_true: bool = False) -> Expr:
    """AND the predicates together, flattened; an empty list gives TRUE."""
    flat: list[Expr] = []
    for e in exprs:
        parts = list(e.args) if isinstance(e, And) else [e]
        flat.extend(p for p in parts if keep_true or p != TRUE)
    if not flat:
        return TRUE
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def disjunction(exprs: Sequence[Expr]) -> Expr:
    """OR the predicates together, flattened; an empty list gives FALSE."""
    flat: list[Expr] = []
    for e in exprs:
        flat.extend(e.args if isinstance(e, Or) else [e])
    if not flat:
        return FALSE
    return flat[0] if len(flat) == 1 else Or(tuple(flat))


def _children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (And, Or)):
        return e.args
    if isinstance(e, Not):
        return (e.arg,)
    if isinstance(e, Comparison):
        return (e.left, e.right)
    if isinstance(e, In):
        return (e.expr, *e.values)
    if isinstance(e, (IsNull, Like)):
        return (e.expr,)
    if isinstance(e, Unknown):
        return e.refs
    return ()


def column_refs(expr: Expr) -> set[tuple[str | None, str]]:
    """Every column mentioned, as (qualifier, name), including those inside Unknown nodes."""
    if isinstance(expr, Column):
        return {(expr.qualifier, expr.name)}
    return {ref for child in _children(expr) for ref in column_refs(child)}


def _qualifier_matches(qualifier: str, wanted: str) -> bool:
    q, w = qualifier.lower(), wanted.lower()
    return q == w or q.endswith("." + w) or w.endswith("." + q)


class _OtherQualifier(Exception):
    pass


def strip_qualifier(expr: Expr, qualifier: str) -> Expr | None:
    """``expr`` with ``qualifier.`` removed from its columns, or None if it mentions another qualifier.

    Unqualified columns are kept as they are. Apply it per conjunct (``split_conjuncts``) to keep
    the parts of a join condition that constrain one table: dropping a conjunct only widens a read.
    """
    try:
        return _strip(expr, qualifier)
    except _OtherQualifier:
        return None


def _strip(e: Expr, qualifier: str) -> Expr:
    if isinstance(e, Column):
        if e.qualifier is None:
            return e
        if _qualifier_matches(e.qualifier, qualifier):
            return Column(e.name)
        raise _OtherQualifier
    if isinstance(e, Literal):
        return e
    if isinstance(e, Unknown):
        return _strip_unknown(e, qualifier)
    if isinstance(e, And):
        return And(tuple(_strip(a, qualifier) for a in e.args))
    if isinstance(e, Or):
        return Or(tuple(_strip(a, qualifier) for a in e.args))
    if isinstance(e, Not):
        return Not(_strip(e.arg, qualifier))
    if isinstance(e, Comparison):
        return Comparison(e.op, _strip(e.left, qualifier), _strip(e.right, qualifier))
    if isinstance(e, In):
        return In(_strip(e.expr, qualifier), tuple(_strip(v, qualifier) for v in e.values), e.negated)
    if isinstance(e, IsNull):
        return IsNull(_strip(e.expr, qualifier), e.negated)
    if isinstance(e, Like):
        return Like(_strip(e.expr, qualifier), e.pattern, e.negated)
    raise TypeError(f"not a predicate expression: {e!r}")


def _strip_unknown(e: Unknown, qualifier: str) -> Unknown:
    qualified = [r for r in e.refs if r.qualifier is not None]
    if not qualified:
        return e
    if not all(_qualifier_matches(r.qualifier or "", qualifier) for r in qualified):
        raise _OtherQualifier
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    refs = tuple(dict.fromkeys(Column(r.name) for r in e.refs))
    try:
        node = sqlglot.parse_one(e.sql_text, read="spark", into=exp.Condition)
    except SqlglotError:  # hand-built text: keep it, the refs are what evaluation looks at
        return Unknown(e.sql_text, refs)
    for c in list(node.find_all(exp.Column)):
        for key in ("table", "db", "catalog"):
            c.set(key, None)
    return Unknown(node.sql(dialect="spark", normalize_functions=False), refs)


def partition_filter(exprs: Sequence[Expr], partition_columns: Sequence[str]) -> Expr:
    """The conjunction of the conjuncts of ``exprs`` that mention only partition columns.

    Others are dropped (TRUE), which widens the filter: ``p = 1 OR x > 5`` gives TRUE. A conjunct
    with a qualified column is dropped too; strip qualifiers first.
    """
    names = {c.lower() for c in partition_columns}
    kept = [
        c
        for e in exprs
        for c in split_conjuncts(e)
        if all(q is None and n.lower() in names for q, n in column_refs(c))
    ]
    return conjunction(kept)


# ---------------------------------------------------------------------------------------------
# Evaluation over a file: sets of possible truth values as bit masks
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


def and3(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def or3(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


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

_KIND_OF_PRIMITIVE = {
    "byte": _NUM,
    "short": _NUM,
    "integer": _NUM,
    "long": _NUM,
    "float": _NUM,
    "double": _NUM,
    "string": _STR,
    "boolean": _BOOL,
    "date": _DATE,
    "timestamp": _TS,
    "timestamp_ntz": _TS,
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


def _parse_bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.strip().lower())


def _parse_date(text: str) -> dt.date:
    text = text.strip()
    if len(text) > 10 and text[10] in " T":
        text = text[:10]
    return dt.date.fromisoformat(text)


def _parse_timestamp(text: str) -> dt.datetime:
    """Delta's partition format ``YYYY-MM-DD HH:MM:SS[.ffffff]`` or ISO 8601 (``T``, ``Z``, offsets).

    Values with an offset become naive UTC, so they compare with offset-less values as if the
    session time zone were UTC.
    """
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def _caster(data_type: Any) -> tuple[str, Callable[[Any], Any]] | None:
    """(kind, cast) for a column type, cast turning a log string or stats value into a comparable value."""
    if isinstance(data_type, DecimalType):
        return _NUM, _to_decimal
    if not isinstance(data_type, PrimitiveType) or data_type.name not in _KIND_OF_PRIMITIVE:
        return None
    name = data_type.name
    kind = _KIND_OF_PRIMITIVE[name]
    if name in ("byte", "short", "integer", "long"):
        return kind, _to_int
    if name in ("float", "double"):
        return kind, _to_float
    if kind == _STR:
        return kind, _to_str
    if kind == _BOOL:
        return kind, _to_bool
    if kind == _DATE:
        return kind, _to_date
    return kind, _to_timestamp


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
    flag = _parse_bool(v) if isinstance(v, str) else None
    if flag is None:
        raise ValueError(v)
    return flag


def _to_date(v: Any) -> dt.date:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    return _parse_date(v)


def _to_timestamp(v: Any) -> dt.datetime:
    if isinstance(v, dt.datetime):
        return v
    if isinstance(v, dt.date):
        return dt.datetime.combine(v, dt.time())
    return _parse_timestamp(v)


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
            return _Operand(kind, None, self._partition_getter(names, kind, cast))
        names = tuple(dict.fromkeys((physical_name(f), f.name)))  # stats use physical names
        return _Operand(kind, None, self._stats_getter(names, kind, cast))

    @staticmethod
    def _partition_getter(names: tuple[str, ...], kind: str, cast: Callable[[Any], Any]) -> _Getter:
        cache: dict[str, Domain] = {}

        def get(pv: PartitionValues, st: Stats | None) -> Domain:
            raw = _lookup(pv, names)
            if raw is None or (raw == "" and kind != _STR):
                return _NULL
            domain = cache.get(raw)
            if domain is None:
                try:
                    value = cast(raw)
                    domain = (value, value, False, True)
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
