"""``Backend`` for Spark Connect sessions: no JVM in the Python process.

What a Connect client can learn without py4j: the session's settings (``spark.conf``), the
server's analysed plan as text (``explain``: which marked relations a DataFrame reads), and
its own unresolved expression trees (a Column condition as SQL, built here). What needs the
JVM's objects (Spark's parser, Catalyst's expression ids, Hadoop file systems, the status
tracker, Spark's streaming file sink) raises ``UnsupportedFeatureError`` naming the
capability; callers fall back where a coarser answer is safe (a read widened to the whole
table, a condition left to Spark).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from serialake.exceptions import UnsupportedFeatureError
from serialake.spark.backend.interface import MarkedRelation

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

__all__ = ["Connect", "UnsupportedExpression", "column_to_sql", "is_connect"]


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (``pyspark.sql.connect``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class UnsupportedExpression(ValueError):
    """A Connect expression ``column_to_sql`` cannot spell as SQL exactly."""


class Connect:
    """``Backend`` over a Spark Connect session (see the module docstring)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def _refuse(self, capability: str) -> UnsupportedFeatureError:
        return UnsupportedFeatureError(
            f"serialake cannot {capability.replace('_', ' ')} ({capability}) with a Spark Connect session: "
            "it needs Spark's JVM in this process (a classic session)"
        )

    def explain(self, df: DataFrame, mode: str = "extended") -> str:
        """The server's explain text of ``df`` (``mode``: simple, extended, cost...), without printing it."""
        client: Any = self.spark.client
        plan: Any = df._plan
        result = client._analyze(method="explain", plan=plan.to_proto(client), explain_mode=mode)
        return str(result.explain_string)

    # -- the session ---------------------------------------------------------------------------

    def default_parallelism(self) -> int:
        value = self.spark.conf.get("spark.default.parallelism", None)
        if value:
            return int(value)
        # The server's default: ``range`` takes its number of splits from it.
        found = re.search(r"splits=(?:Some\()?(\d+)", self.explain(self.spark.range(1), "simple"))
        return int(found.group(1)) if found else 1

    def static_conf(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.spark.conf.getAll.items()}

    def set_log_level(self, level: str) -> None:
        pass  # the server's logs are the server's

    def silence_loggers(self, names: Sequence[str]) -> None:
        pass

    def local_property(self, key: str) -> str | None:
        raise self._refuse("local_property")

    def make_active(self) -> None:
        pass  # each Connect request runs in its session on the server

    # -- jobs ------------------------------------------------------------------------------------

    def add_job_tag(self, tag: str) -> None:
        self.spark.addTag(tag)

    def remove_job_tag(self, tag: str) -> None:
        self.spark.removeTag(tag)

    def cancel_tagged_jobs(self, tag: str) -> None:
        self.spark.interruptTag(tag)

    def tagged_tasks_running(self, tag: str) -> bool:
        raise self._refuse("tagged_tasks_running")

    def add_python_files(self, path: str) -> None:
        self.spark.addArtifacts(path, pyfile=True)  # the server's session artifacts: its tasks import them

    # -- file systems ----------------------------------------------------------------------------

    def opens(self, uri: str) -> bool:
        return uri.split(":", 1)[0].lower() == "file"  # the server's other file systems are unknown here

    def delete_path(self, uri: str) -> None:
        raise self._refuse("delete_path")

    def file_sink(self, uri: str, partition_columns: Sequence[str], options: Mapping[str, str]) -> None:
        return None  # no handle on the server's sink classes

    # -- parsing and analysis --------------------------------------------------------------------

    def expression_references(self, text: str) -> list[list[str]]:
        """The column references of ``text``, by sqlglot's Spark dialect (Spark's parser is the
        server's): each as its name parts, in the order the text names them."""
        import sqlglot
        from sqlglot import exp

        try:
            parsed = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.ParseError as e:
            raise ValueError(f"[PARSE_SYNTAX_ERROR] {str(e).splitlines()[0]}") from None
        return [[part.name for part in node.parts] for node in parsed.walk(bfs=False) if isinstance(node, exp.Column)]

    def parsed_expression(self, text: str) -> str:
        raise self._refuse("parsed_expression")

    def resolves(self, df: DataFrame, parts: Sequence[str]) -> bool:
        from pyspark.errors import AnalysisException
        from pyspark.sql import functions as F

        name = ".".join("`" + p.replace("`", "``") + "`" for p in parts)
        try:
            df.select(F.col(name)).schema  # noqa: B018 - the server analyses the projection
        except AnalysisException:
            return False
        return True

    def is_deterministic(self, df: DataFrame) -> bool:
        raise self._refuse("is_deterministic")

    def projects_deterministic(self, df: DataFrame) -> bool:
        """Whether the one expression ``df`` projects is deterministic, asked of the server's analyser:
        Spark refuses a non-deterministic expression in a join condition
        (``INVALID_NON_DETERMINISTIC_EXPRESSIONS``), and the expression is put in one."""
        from pyspark.errors import AnalysisException
        from pyspark.sql import functions as F
        from pyspark.sql.connect import plan as connect_plan
        from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame

        plan: Any = df._plan
        if not isinstance(plan, connect_plan.Project) or len(plan._columns) != 1 or plan._child is None:
            raise self._refuse("projects_deterministic")
        try:
            text = column_to_sql(plan._columns[0])
        except UnsupportedExpression:
            raise self._refuse("projects_deterministic") from None
        session: Any = self.spark
        child = ConnectFrame(plan._child, session)
        probe = self.spark.range(0).toDF("__serialake_probe")
        try:
            child.join(probe, on=F.expr(f"({text}) IS NULL OR __serialake_probe IS NULL")).schema  # noqa: B018
        except AnalysisException as e:
            if getattr(e, "getCondition", lambda: None)() == "INVALID_NON_DETERMINISTIC_EXPRESSIONS" or (
                "INVALID_NON_DETERMINISTIC_EXPRESSIONS" in str(e)
            ):
                return False
            raise
        return True

    def estimated_bytes(self, df: DataFrame) -> int | None:
        found = re.search(r"Statistics\(sizeInBytes=([0-9.]+)\s*([KMGTPE]?i?B)", self.explain(df, "cost"))
        if not found:
            return None
        scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60}
        return int(float(found.group(1)) * scale.get(found.group(2), 1))

    def condition_sql(self, df: DataFrame) -> str | None:
        from pyspark.sql.connect import plan as connect_plan

        plan: Any = df._plan
        column: Any = None
        if isinstance(plan, connect_plan.Filter):
            column = plan.filter
        elif isinstance(plan, connect_plan.Join):
            column = plan.on if not isinstance(plan.on, (str, list)) else None
        if column is None:
            return None
        try:
            return column_to_sql(column)
        except UnsupportedExpression:
            return None

    def column_sql(self, df: DataFrame, column: Column) -> str | None:
        try:
            return column_to_sql(column)
        except UnsupportedExpression:
            return None

    def marked_relations(self, df: DataFrame, prefix: str, is_marker: Callable[[str], bool]) -> list[MarkedRelation]:
        """The marked relations of the analysed plan's text, without their filters: Catalyst's
        expression ids are not in reach, so every marked read counts whole (its own marker's
        filter still applies): more conflicts, never a missed one."""
        text = self.explain(df, "extended")
        start = text.find("== Analyzed Logical Plan ==")
        end = text.find("== Optimized Logical Plan ==")
        analysed = text[start:end] if start >= 0 else text
        out: list[MarkedRelation] = []
        seen: set[str] = set()
        for found in re.finditer(r"SubqueryAlias `?(" + re.escape(prefix) + r"[A-Za-z0-9_\-]*)`?", analysed):
            name = found.group(1)
            if is_marker(name) and name not in seen:
                seen.add(name)
                out.append(MarkedRelation(name, ()))
        return out

    # -- streaming -------------------------------------------------------------------------------

    def start_stream(self, writer: DataStreamWriter) -> Any:
        raise self._refuse("start_stream")


# -- Connect expressions as SQL -----------------------------------------------------------------

_BINARY = {
    "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>",
    "and": "AND", "or": "OR", "+": "+", "-": "-", "*": "*", "/": "/", "%": "%",
    "&": "&", "|": "|", "^": "^",
}  # fmt: skip
_FUNCTIONS = frozenset(
    {"startswith", "endswith", "contains", "coalesce", "lower", "upper", "abs", "length", "substring", "substr",
     "concat", "trim", "ltrim", "rtrim", "year", "month", "day", "dayofmonth", "to_date", "date", "cast",
     "greatest", "least", "nvl", "ifnull", "isnan", "round", "floor", "ceil", "array_contains", "size",
     "current_date", "current_timestamp", "date_add", "date_sub", "pmod", "element_at"}
)  # fmt: skip


def column_to_sql(column: Any) -> str:
    """A Connect Column (or expression) as SQL text Spark parses to the same expression.

    The common shapes only (columns, literals, comparisons, boolean logic, arithmetic, IN,
    IS [NOT] NULL, LIKE, CASE WHEN, CAST, SQL text, common functions); ``UnsupportedExpression``
    for anything else.
    """
    from pyspark.sql.connect import expressions as E

    expr = getattr(column, "_expr", column)
    if isinstance(expr, E.ColumnReference):
        if getattr(expr, "_is_metadata_column", False):
            raise UnsupportedExpression("a metadata column")
        return str(expr._unparsed_identifier)  # Spark's own syntax for a column name (dots, backticks)
    if isinstance(expr, E.LiteralExpression):
        return _literal_sql(expr._value, expr._dataType)
    if isinstance(expr, E.SQLExpression):
        return f"({expr._expr})"
    if isinstance(expr, E.ColumnAlias):
        return column_to_sql(expr._child)
    if isinstance(expr, E.CastExpression):
        if expr._eval_mode not in (None, "legacy", "ansi"):
            raise UnsupportedExpression("try_cast")
        dtype = expr._data_type
        type_sql = dtype if isinstance(dtype, str) else dtype.simpleString()
        return f"CAST({column_to_sql(expr._expr)} AS {type_sql})"
    if isinstance(expr, E.CaseWhen):
        parts = [f"WHEN {column_to_sql(c)} THEN {column_to_sql(v)}" for c, v in expr._branches]
        other = "" if expr._else_value is None else f" ELSE {column_to_sql(expr._else_value)}"
        return f"(CASE {' '.join(parts)}{other} END)"
    if isinstance(expr, E.UnresolvedFunction):
        return _function_sql(expr._name, [column_to_sql(a) for a in expr._args], expr._is_distinct)
    raise UnsupportedExpression(f"{type(expr).__name__} ({expr!r}) has no SQL form here")


def _function_sql(name: str, args: list[str], distinct: bool) -> str:
    lowered = name.lower()
    if distinct:
        raise UnsupportedExpression(f"DISTINCT {name}")
    if lowered in _BINARY and len(args) == 2:
        return f"({args[0]} {_BINARY[lowered]} {args[1]})"
    if lowered == "not" and len(args) == 1:
        return f"(NOT {args[0]})"
    if lowered == "negative" and len(args) == 1:
        return f"(- {args[0]})"
    if lowered == "isnull" and len(args) == 1:
        return f"({args[0]} IS NULL)"
    if lowered == "isnotnull" and len(args) == 1:
        return f"({args[0]} IS NOT NULL)"
    if lowered == "in" and args:
        if len(args) == 1:
            raise UnsupportedExpression("an empty IN list")
        return f"({args[0]} IN ({', '.join(args[1:])}))"
    if lowered in ("like", "ilike", "rlike") and len(args) == 2:
        return f"({args[0]} {lowered.upper()} {args[1]})"
    if lowered == "between" and len(args) == 3:
        return f"({args[0]} BETWEEN {args[1]} AND {args[2]})"
    if lowered in _FUNCTIONS:
        return f"{lowered}({', '.join(args)})"
    raise UnsupportedExpression(f"function {name}")


def _literal_sql(value: Any, data_type: Any) -> str:
    import datetime as dt
    import decimal

    from pyspark.sql import types as T

    if value is None:
        return "NULL" if data_type is None else f"CAST(NULL AS {data_type.simpleString()})"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(data_type, T.StringType) or isinstance(value, str):
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return str(int(value))
    if isinstance(data_type, (T.DoubleType, T.FloatType)):
        if value != value or value in (float("inf"), float("-inf")):
            raise UnsupportedExpression(f"the literal {value}")
        return f"CAST({float(value)!r} AS {data_type.simpleString().upper()})"
    if isinstance(value, decimal.Decimal):
        return f"CAST('{value}' AS {data_type.simpleString().upper()})"
    if isinstance(data_type, T.DateType):
        day = value if isinstance(value, dt.date) else dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
        return f"DATE '{day.isoformat()}'"
    raise UnsupportedExpression(f"a literal of type {type(data_type).__name__}")
