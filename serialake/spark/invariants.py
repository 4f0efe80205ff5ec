"""Generated columns and CHECK constraints, evaluated on the rows a write stores.

The definitions come from the table metadata (``serialake.core.model.constraints``). Every path
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
from dataclasses import replace
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core.model import constraints, identity
from serialake.core.model.schema import StructType
from serialake.exceptions import DeltaAnalysisException
from serialake.spark.backend import backend
from serialake.spark.columns import WIDENING, quote_name
from serialake.spark.schemas import to_spark_schema

__all__ = [
    "EXPLICIT_PREFIX",
    "GENERATE_PREFIX",
    "IdentityValues",
    "check_definitions",
    "check_failure",
    "check_rows",
    "enforce",
    "explicit_flag",
    "generate_flag",
]

EXPLICIT_PREFIX = "__serialake_explicit_"
GENERATE_PREFIX = "__serialake_generate_"
_PARTITION_BITS = 33  # monotonically_increasing_id(): partition index above, row number within below
_ERROR_MARK = "[serialake-check]"

# Functions Spark calls deterministic whose value still depends on when or by whom a row is written.
_TIME_OR_USER = re.compile(
    r"\b(current_(date|timestamp|timezone|user|catalog|database|schema)\b|localtimestamp\b|"
    r"(now|session_user|user|unix_timestamp)\s*\(\s*\))",
    re.IGNORECASE,
)

_q = quote_name


def explicit_flag(column: str) -> str:
    """Name of the boolean column saying, per row, that the operation assigned generated ``column``."""
    return EXPLICIT_PREFIX + column.lower()


def generate_flag(column: str) -> str:
    """Name of the boolean column saying, per row, that identity ``column`` gets a generated value."""
    return GENERATE_PREFIX + column.lower()


class IdentityValues:
    """The identity values one write generates (``serialake.core.model.identity``), and what they commit.

    ``fill`` gives each row that needs one a value: ``base + step * (p + P * k)`` for row ``k``
    of partition ``p`` of ``P`` (unique without coordination between tasks; ``P`` is held
    by a coalesce), where ``base`` follows the high-water mark. A column the data gives
    (``given``) keeps its values: from a user's data that is an error for GENERATED ALWAYS.
    A ``generate_flag`` column limits generation to the rows it marks (MERGE's inserts).
    The values generated are observed while the write runs (no extra pass), and ``record``
    raises the high-water marks in the writing transaction and declares what it stored past
    them (``identity.Allocation``: the generated range, and whether a value not generated lies
    there too), so a concurrent allocation re-bases it instead of conflicting.
    """

    def __init__(self, schema: StructType, table: str, *, given: Collection[str], from_user: bool) -> None:
        self.table = table
        self.columns = identity.identity_columns(schema)
        self.given = {g.lower() for g in given}
        self.from_user = from_user
        self._observed: list[identity.IdentityColumn] = []  # the columns whose values the write observes
        self._generated: list[identity.IdentityColumn] = []  # the columns it generates values for
        self._observation: Observation | None = None

    def fill(self, df: DataFrame) -> DataFrame:
        """``df`` with identity values generated where needed (its generate flags dropped)."""
        flags = [c for c in df.columns if c.startswith(GENERATE_PREFIX)]
        generated: list[identity.IdentityColumn] = []
        for c in self.columns:
            if generate_flag(c.name) in flags or c.name.lower() not in self.given:
                generated.append(c)
            elif self.from_user and not c.allow_explicit_insert:
                raise DeltaAnalysisException(
                    f"Providing values for GENERATED ALWAYS AS IDENTITY column '{c.name}' of table {self.table} "
                    "is not supported: leave the column out, and every row gets a generated value."
                )
        out = df
        if generated:
            # coalesce: at most ``partitions`` at run time, whatever adaptive execution does to the
            # plan (a skewed join split into more partitions would break the residue classes).
            try:
                partitions = max(1, out.rdd.getNumPartitions())
            except Exception:  # noqa: BLE001 - Spark Connect has no RDDs: any bound is right, coalesce never adds
                partitions = max(1, backend(out.sparkSession).default_parallelism())
            out = out.coalesce(partitions)
            row_id = F.monotonically_increasing_id()
            slot = F.shiftright(row_id, _PARTITION_BITS) + F.lit(partitions) * row_id.bitwiseAND(
                F.lit((1 << _PARTITION_BITS) - 1)
            )
            for c in generated:
                flag = generate_flag(c.name)
                generate = F.col(flag) if flag in flags else F.lit(True)
                value = F.lit(c.next_base) + F.lit(c.step) * slot
                out = out.withColumn(c.name, F.when(generate, value).otherwise(F.col(_q(c.name))))
        # Every value stored counts: generated ones, those a MERGE insert assigned, and those a
        # user's data gives a BY DEFAULT column (later generated values then never repeat them).
        self._observed = [c for c in self.columns if c in generated or self.from_user]
        self._generated = generated
        if self._observed:
            self._observation = Observation()
            aggs = [agg(F.col(_q(c.name))).alias(f"{kind}{i}") for i, c in enumerate(self._observed)
                    for kind, agg in (("lo", F.min), ("hi", F.max))]  # fmt: skip
            for i, c in enumerate(generated):
                flag = generate_flag(c.name)
                generated_row = F.coalesce(F.col(flag), F.lit(False)) if flag in flags else F.lit(True)
                value = F.col(_q(c.name))
                aggs += [F.min(F.when(generated_row, value)).alias(f"glo{i}"),
                         F.max(F.when(generated_row, value)).alias(f"ghi{i}")]  # fmt: skip
                if flag in flags:  # the rows not generated: a value past the mark read?
                    mark = c.high_water_mark
                    if mark is None:
                        past = value >= F.lit(c.start) if c.step > 0 else value <= F.lit(c.start)
                    else:
                        past = value > F.lit(mark) if c.step > 0 else value < F.lit(mark)
                    aggs.append(F.count(F.when(~generated_row & past, F.lit(1))).alias(f"xp{i}"))
            out = out.observe(self._observation, *aggs)
        return out.drop(*flags) if flags else out

    def high_water_marks(self) -> dict[str, int]:
        """The new high-water mark of each column that got values (after the write ran)."""
        if self._observation is None:
            return {}
        got = self._observation.get
        marks: dict[str, int] = {}
        for i, c in enumerate(self._observed):
            mark = c.raised(got.get(f"lo{i}"), got.get(f"hi{i}"))
            if mark is not None and mark != c.high_water_mark:
                marks[c.name] = mark
        return marks

    def allocations(self) -> list[identity.Allocation]:
        """What the write stored past the read marks, for each column whose mark it raises."""
        marks = self.high_water_marks()
        if not marks or self._observation is None:
            return []
        got = self._observation.get
        out = []
        for c in self.columns:
            if c.name not in marks:
                continue
            if c not in self._generated:  # every value stored came from the data: given explicitly
                out.append(identity.Allocation(c.name, None, None, explicit_past=True))
                continue
            i = self._generated.index(c)
            lo, hi = got.get(f"glo{i}"), got.get(f"ghi{i}")
            first, last = (lo, hi) if c.step > 0 else (hi, lo)
            explicit = bool(got.get(f"xp{i}") or 0)
            out.append(identity.Allocation(c.name, first, last, explicit_past=explicit))
        return out

    def record(self, txn: Any) -> None:
        """Commit the new high-water marks with ``txn`` (a metadata change, as Delta makes it),
        declaring what was stored past them (``OptimisticTransaction.record_identity_allocation``)."""
        marks = self.high_water_marks()
        if not marks:
            return
        meta = txn.metadata
        schema = identity.with_high_water_marks(StructType.from_json(meta.schema_string), marks)
        txn.update_metadata(replace(meta, schema_string=schema.to_json()))
        for allocation in self.allocations():
            txn.record_identity_allocation(allocation)


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
    identity_values: IdentityValues | None = None,
) -> DataFrame:
    """``df`` (the table's columns, and any ``explicit_flag`` columns) as it must be stored.

    Identity columns get their values first (``identity_values``; a table with identity
    columns needs one). Generated columns named in ``given`` (case-insensitive) are checked
    on every row; those with an ``explicit_flag`` column are checked where the flag is true
    and computed elsewhere; the rest are computed. The result has exactly the table's columns.
    """
    if identity_values is not None:
        df = identity_values.fill(df)
    elif identity.identity_columns(schema):
        raise DeltaAnalysisException(f"Table {table}: this write cannot fill its identity columns")
    generated = constraints.generated_columns(schema)
    checks = constraints.check_constraints(configuration)
    if not generated and not checks:
        return df  # no flag columns either: flags exist for generated columns only
    flags = [c for c in df.columns if c.startswith(EXPLICIT_PREFIX)]
    given_lower = {g.lower() for g in given}
    spark_types = {f.name: f.dataType for f in to_spark_schema(schema).fields}
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
    spark_schema = to_spark_schema(schema)
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
        if have != want and want.typeName() not in WIDENING.get(have.typeName(), ()):
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
    return backend(df.sparkSession).projects_deterministic(df)


def _referenced(expression: str, schema: StructType) -> set[str]:
    refs = constraints.referenced_columns(expression, what="expression")
    return {f.name for f in schema.fields if f.name.lower() in refs}


def _message(prefix: str, columns: set[str], schema: StructType) -> Column:
    ordered = [f.name for f in schema.fields if f.name in columns]
    return F.concat(F.lit(prefix), F.to_json(F.struct(*[F.col(_q(c)) for c in ordered])))
