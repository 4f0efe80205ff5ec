"""SQL boolean predicates as a small expression tree: build, parse, print and rewrite them.

The tree (``Column``, ``Literal``, ``Comparison``, ``In``, ``IsNull``, ``Like``, ``And``, ``Or``,
``Not``, ``Unknown``) is what the rest of serialake passes around for read predicates, DML
conditions and partition filters. ``parse_predicate`` reads Spark SQL through sqlglot's Spark
dialect (``from_sqlglot`` converts a tree the SQL layer already parsed); anything not modelled
becomes ``Unknown``, which evaluators treat as "could be TRUE, FALSE or NULL", so it can only
widen a match, never hide one. ``to_sql`` prints a tree back as Spark SQL that parses to the
same tree.

Structural helpers work on the tree alone, without a schema: ``split_conjuncts``,
``conjunction``, ``disjunction``, ``column_refs``, ``strip_qualifier`` (drop ``t.`` from the
columns of one table, since evaluators never resolve qualified columns), ``partition_filter``
(the conjuncts that mention partition columns only), and Kleene's three-valued ``and3`` /
``or3``. Whether a file may match a predicate is ``serialake.core.predicates.skipping``; evaluating it on
the rows of a file is ``serialake.core.predicates.row_eval``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, TypeAlias

from serialake.core.model.partition_values import parse_boolean, parse_date, parse_timestamp
from serialake.exceptions import DeltaError

if TYPE_CHECKING:
    from sqlglot import exp

__all__ = [
    "COMPARISON_OPS",
    "FALSE",
    "TRUE",
    "And",
    "Column",
    "Comparison",
    "Expr",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Not",
    "Or",
    "ParsedCondition",
    "PredicateError",
    "Unknown",
    "and3",
    "between",
    "column_refs",
    "conjunction",
    "disjunction",
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


Expr: TypeAlias = Column | Literal | Comparison | In | IsNull | Like | And | Or | Not | Unknown

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


@dataclass(frozen=True)
class ParsedCondition:
    """A SQL condition parsed once: its text (for Spark and the log) and its tree (for the core).

    The SQL front end builds it from the statement it already parsed, so an operation never
    parses the same condition again.

    A condition with subqueries (``id IN (SELECT ...)``, ``EXISTS``, correlated or not) has
    ``subquery`` set: ``expr`` is then its conjuncts without subqueries AND an ``Unknown``
    for the rest (files are skipped by the former only), ``text`` is what Spark evaluates
    (its tables bound to the statement's reads) and ``shown`` the condition as written, for
    the log. Such an operation resolves conflicts by files, not rows.
    """

    text: str
    expr: Expr
    subquery: bool = False
    shown: str | None = None


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


def from_sqlglot(node: exp.Expr) -> Expr:
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
    ops: dict[type[exp.Expr], str] = {
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


def _operand(node: exp.Expr) -> Column | Literal | None:
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

    sql_type = exp.DataType.Type
    kinds = {
        sql_type.DATE: "date",
        sql_type.TIMESTAMP: "timestamp",
        sql_type.TIMESTAMPTZ: "timestamp",
        sql_type.TIMESTAMPLTZ: "timestamp",
        sql_type.TIMESTAMPNTZ: "timestamp_ntz",
        sql_type.DOUBLE: "double",
        sql_type.FLOAT: "double",
        sql_type.TINYINT: "integer",
        sql_type.SMALLINT: "integer",
        sql_type.INT: "integer",
        sql_type.BIGINT: "integer",
        sql_type.DECIMAL: "decimal",
        sql_type.TEXT: "string",
        sql_type.VARCHAR: "string",
        sql_type.CHAR: "string",
        sql_type.BOOLEAN: "boolean",
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
            return Literal(parse_date(value), "date")
        if target in ("timestamp", "timestamp_ntz") and isinstance(value, str):
            return Literal(parse_timestamp(value), target)
    except (ValueError, ArithmeticError, InvalidOperation):
        return None
    return None


def _parse_bool(text: str) -> bool | None:
    try:
        return parse_boolean(text)
    except ValueError:
        return None


def _unknown(node: exp.Expr) -> Unknown:
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
# Three-valued logic (None is NULL)
# ---------------------------------------------------------------------------------------------


def and3(a: bool | None, b: bool | None) -> bool | None:
    """SQL ``a AND b`` on TRUE / FALSE / NULL (None)."""
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def or3(a: bool | None, b: bool | None) -> bool | None:
    """SQL ``a OR b`` on TRUE / FALSE / NULL (None)."""
    if a is True or b is True:
        return True
    return None if a is None or b is None else False
