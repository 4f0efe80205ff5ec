"""Generated columns and CHECK constraints, evaluated on the rows a write stores.

The definitions come from the table metadata (``serialake.core.constraints``). Every path
that stores new row values goes through ``enforce``: ``write`` / ``format("delta")``,
``INSERT``, UPDATE and MERGE. Rows copied unchanged (DELETE, OPTIMIZE) already satisfy them.

- A generated column the data does not give is computed from its expression over the
  row's stored values; one it gives is checked (null-safe equality), as Delta does.
- In UPDATE and MERGE a generated column is recomputed from the new values of the row,
  unless the operation assigned it: ``explicit_flag`` columns say, row by row, where it did
  (then the value is checked instead).
- A CHECK constraint fails the write on any row where it is false or NULL.

The checks run inside the write job (no extra pass over the data); a failure is a
``DeltaAnalysisException`` naming the table, the column or constraint, and the row's values.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core import constraints
from serialake.core.schema import StructType
from serialake.exceptions import DeltaAnalysisException
from serialake.spark import io

__all__ = [
    "EXPLICIT_PREFIX",
    "check_definitions",
    "check_failure",
    "check_rows",
    "enforce",
    "explicit_flag",
]

EXPLICIT_PREFIX = "__serialake_explicit_"
_ERROR_MARK = "[serialake-check]"

# Functions Spark calls deterministic whose value still depends on when or by whom a row is written.
_TIME_OR_USER = re.compile(
    r"\b(current_(date|timestamp|timezone|user|catalog|database|schema)\b|localtimestamp\b|"
    r"(now|session_user|user|unix_timestamp)\s*\(\s*\))",
    re.IGNORECASE,
)

_q = io.quote_name


def explicit_flag(column: str) -> str:
    """Name of the boolean column saying, per row, that the operation assigned generated ``column``."""
    return EXPLICIT_PREFIX + column.lower()


def check_rows(df: DataFrame, conditions: Sequence[Column], messages: Sequence[str | Column]) -> DataFrame:
    """``df`` that fails the write job when a row does not satisfy ``conditions[i]`` (NULL fails).

    The check runs inside the write (no extra pass); ``check_failure`` finds ``messages[i]``
    (text, or a string Column computed from the failing row) in the error Spark raises.
    """
    out = df
    for cond, msg in zip(conditions, messages):
        text = F.lit(_ERROR_MARK + msg) if isinstance(msg, str) else F.concat(F.lit(_ERROR_MARK), msg)
        out = out.filter(F.when(F.coalesce(cond, F.lit(False)), F.lit(True)).otherwise(F.raise_error(text)))
    return out


def check_failure(error: BaseException) -> str | None:
    """The message of the ``check_rows`` check that failed a Spark job, or None for other errors."""
    text = str(error)
    at = text.find(_ERROR_MARK)
    if at < 0:
        return None
    return text[at + len(_ERROR_MARK) :].split("\n", 1)[0].split(" SQLSTATE:", 1)[0].strip()


def enforce(
    df: DataFrame,
    schema: StructType,
    configuration: Mapping[str, str],
    table: str,
    *,
    given: Collection[str] = (),
) -> DataFrame:
    """``df`` (the table's columns, and any ``explicit_flag`` columns) as it must be stored.

    Generated columns named in ``given`` (case-insensitive) are checked on every row; those
    with an ``explicit_flag`` column are checked where the flag is true and computed elsewhere;
    the rest are computed. The result has exactly the table's columns.
    """
    generated = constraints.generated_columns(schema)
    checks = constraints.check_constraints(configuration)
    if not generated and not checks:
        return df  # no flag columns either: flags exist for generated columns only
    flags = [c for c in df.columns if c.startswith(EXPLICIT_PREFIX)]
    given_lower = {g.lower() for g in given}
    spark_types = {f.name: f.dataType for f in io.to_spark_schema(schema).fields}
    conditions: list[Column] = []
    messages: list[Column | str] = []
    values: dict[str, Column] = {}
    for g in generated:
        expression = F.expr(g.expression).cast(spark_types[g.name])
        stored = F.col(_q(g.name))
        matches = stored.eqNullSafe(expression)
        flag = explicit_flag(g.name)
        if g.name.lower() in given_lower:
            conditions.append(matches)
        elif flag in flags:
            conditions.append(~F.col(flag) | matches)
            values[g.name] = F.when(F.col(flag), stored).otherwise(expression)
        else:
            values[g.name] = expression
            continue
        refs = _referenced(g.expression, schema) | {g.name}
        messages.append(
            _message(
                f"Generated column '{g.name}' of table {table}: the value written differs from its "
                f"expression {g.expression} in the row with values ",
                refs,
                schema,
            )
        )
    checked = df
    if conditions:
        checked = check_rows(checked, conditions, messages)
    if values or flags:
        checked = checked.select(*[values.get(f.name, F.col(_q(f.name))).alias(f.name) for f in schema.fields])
    if checks:
        checked = check_rows(
            checked,
            [F.expr(c.expression) for c in checks],
            [
                _message(
                    f"CHECK constraint {c.name} ({c.expression}) of table {table} violated by the row with values ",
                    _referenced(c.expression, schema),
                    schema,
                )
                for c in checks
            ],
        )
    return checked


def check_definitions(spark: SparkSession, schema: StructType, configuration: Mapping[str, str], table: str) -> None:
    """Refuse generation expressions and CHECK constraints Spark cannot evaluate on this schema.

    A generation expression must read only other, non-generated columns, be deterministic,
    and give the column's type (or one that widens to it); a constraint must be boolean.
    """
    constraints.validate_generated_columns(schema, table)
    spark_schema = io.to_spark_schema(schema)
    empty = spark.createDataFrame([], spark_schema)
    types = {f.name: f.dataType for f in spark_schema.fields}
    for g in constraints.generated_columns(schema):
        what = f"Generated column '{g.name}' of table {table}"
        result = _analyse(empty, g.expression, what)
        if not _deterministic(result) or _TIME_OR_USER.search(g.expression):
            raise DeltaAnalysisException(
                f"{what}: its expression {g.expression!r} is not deterministic (it must give the same value "
                "for the same row whenever it is computed)"
            )
        have, want = result.schema.fields[0].dataType, types[g.name]
        if have != want and want.typeName() not in io.WIDENING.get(have.typeName(), ()):
            raise DeltaAnalysisException(
                f"{what}: its expression {g.expression!r} gives {have.simpleString()}, "
                f"but the column is {want.simpleString()}"
            )
    for c in constraints.check_constraints(configuration):
        what = f"CHECK constraint {c.name} of table {table}"
        result = _analyse(empty, c.expression, what)
        if not isinstance(result.schema.fields[0].dataType, T.BooleanType):
            raise DeltaAnalysisException(
                f"{what}: its expression {c.expression!r} is {result.schema.fields[0].dataType.simpleString()}, "
                "not boolean"
            )
        if not _deterministic(result):
            raise DeltaAnalysisException(f"{what}: its expression {c.expression!r} is not deterministic")


def _analyse(empty: DataFrame, expression: str, what: str) -> DataFrame:
    try:
        return empty.select(F.expr(expression))
    except AnalysisException as e:
        first = str(e).strip().split("\n", 1)[0]
        raise DeltaAnalysisException(f"{what}: cannot evaluate {expression!r}: {first}") from None
    except Exception as e:  # noqa: BLE001 - Spark's parser raises ParseException (not an AnalysisException)
        first = str(e).strip().split("\n", 1)[0]
        raise DeltaAnalysisException(f"{what}: cannot parse {expression!r}: {first}") from None


def _deterministic(df: DataFrame) -> bool:
    """Whether the one expression ``df`` projects is deterministic (as Spark's analysed plan says)."""
    plan = df._jdf.queryExecution().analyzed()
    return bool(plan.projectList().apply(0).deterministic())


def _referenced(expression: str, schema: StructType) -> set[str]:
    refs = constraints.referenced_columns(expression, what="expression")
    return {f.name for f in schema.fields if f.name.lower() in refs}


def _message(prefix: str, columns: set[str], schema: StructType) -> Column:
    ordered = [f.name for f in schema.fields if f.name in columns]
    return F.concat(F.lit(prefix), F.to_json(F.struct(*[F.col(_q(c)) for c in ordered])))
