"""What serialake asks of a Spark session beyond PySpark's public DataFrame API (``Backend``),
and ``Unsupported``, the backend of a session serialake cannot drive yet.

See the package docstring (``serialake.spark.backend``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from serialake.exceptions import UnsupportedFeatureError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming import DataStreamWriter

__all__ = ["Backend", "FileSink", "MarkedRelation", "ScanConjunct", "Unsupported"]


@dataclass(frozen=True)
class ScanConjunct:
    """A deterministic conjunct of a filter over one marked relation's columns only.

    ``sql`` is Spark's SQL text of it; ``names`` maps each column reference in it, as its
    lower-cased (qualifier parts..., name) path, to the relation's column it is.
    """

    sql: str
    names: Mapping[tuple[str, ...], str]


@dataclass(frozen=True)
class MarkedRelation:
    """A relation of an analysed plan under a marker alias, and the filters every row that
    matters to the plan's result satisfies (only conjuncts over its own columns)."""

    name: str
    conjuncts: tuple[ScanConjunct, ...]


class FileSink(Protocol):
    """Spark's Parquet file sink under one directory (``Backend.file_sink``)."""

    def write(self, df: DataFrame) -> None:
        """Write ``df``'s rows (one batch); a failed job raises as ``df.write`` would."""
        ...


class Backend(Protocol):
    """What serialake asks of a Spark session beyond PySpark's public DataFrame API."""

    # -- the session
    def default_parallelism(self) -> int:
        """The session's default parallelism (``spark.default.parallelism`` or the cores)."""
        ...

    def static_conf(self) -> dict[str, str]:
        """Every static setting the session started with (``spark.hadoop.*`` included)."""
        ...

    def set_log_level(self, level: str) -> None:
        """Spark's log level (``ERROR``, ``WARN``...)."""
        ...

    def silence_loggers(self, names: Sequence[str]) -> None:
        """Turn the named (log4j) loggers off."""
        ...

    def local_property(self, key: str) -> str | None:
        """A local property of the calling thread's jobs (Spark's ``getLocalProperty``)."""
        ...

    def make_active(self) -> None:
        """Make the session the active one of the calling thread on Spark's side."""
        ...

    # -- jobs
    def add_job_tag(self, tag: str) -> None:
        """Tag the jobs this thread starts from now on."""
        ...

    def remove_job_tag(self, tag: str) -> None:
        """Stop tagging this thread's jobs with ``tag``."""
        ...

    def cancel_tagged_jobs(self, tag: str) -> None:
        """Cancel the jobs tagged ``tag``."""
        ...

    def tagged_tasks_running(self, tag: str) -> bool:
        """Whether a job tagged ``tag`` still runs, or still has a task running."""
        ...

    # -- file systems
    def opens(self, uri: str) -> bool:
        """Whether Spark has a (Hadoop) file system for ``uri``'s scheme."""
        ...

    def delete_path(self, uri: str) -> None:
        """Delete ``uri`` recursively through Spark's (Hadoop) file system."""
        ...

    def file_sink(self, uri: str, partition_columns: Sequence[str], options: Mapping[str, str]) -> FileSink | None:
        """Spark's streaming Parquet file sink writing under ``uri`` (None: this Spark has none)."""
        ...

    # -- parsing and analysis
    def expression_references(self, text: str) -> list[list[str]]:
        """The column references of a SQL expression (each as its name parts), in the order the
        text names them, by Spark's parser (which raises on text it cannot parse)."""
        ...

    def parsed_expression(self, text: str) -> str:
        """A SQL expression as Spark's parser prints it unresolved, e.g. ``('key = a)``."""
        ...

    def resolves(self, df: DataFrame, parts: Sequence[str]) -> bool:
        """Whether the column named by ``parts`` resolves to one column of ``df``'s output."""
        ...

    def is_deterministic(self, df: DataFrame) -> bool:
        """Whether ``df``'s analysed plan computes the same rows each time it runs."""
        ...

    def projects_deterministic(self, df: DataFrame) -> bool:
        """Whether the first expression ``df`` projects is deterministic."""
        ...

    def estimated_bytes(self, df: DataFrame) -> int | None:
        """The optimiser's size estimate of ``df`` (None when it has none)."""
        ...

    def condition_sql(self, df: DataFrame) -> str | None:
        """The analysed condition of ``df``'s top Filter or Join as SQL, columns qualified by their
        relation; None for another shape, or when Spark cannot say."""
        ...

    def column_sql(self, df: DataFrame, column: Column) -> str | None:
        """A Column condition as SQL, as Spark analyses it over ``df`` (``condition_sql`` of
        ``df`` filtered by it, without running any Python wrapper of ``DataFrame.filter``)."""
        ...

    def marked_relations(self, df: DataFrame, prefix: str, is_marker: Callable[[str], bool]) -> list[MarkedRelation]:
        """Every relation under an alias named ``prefix...`` that ``is_marker`` accepts in ``df``'s
        analysed plan (subqueries and views included), with the filters on its rows: those a
        relation's rows pass on their way up through row-wise operators and joins (not above an
        aggregate, window, limit...)."""
        ...

    # -- streaming
    def add_python_files(self, path: str) -> None:
        """Make ``path`` (a ``.py``, ``.zip`` or ``.egg``) importable by the session's Python tasks."""
        ...

    def start_stream(self, writer: DataStreamWriter) -> Any:
        """Start the query ``writer`` describes, without PySpark's (possibly wrapped) ``start``;
        the handle PySpark's ``StreamingQuery`` of this session takes."""
        ...


class Unsupported:
    """A session serialake has no backend for yet (Spark Connect): every capability raises,
    naming itself, rather than an ``AttributeError`` from deep inside a call."""

    def __init__(self, spark: Any) -> None:
        self._kind = type(spark).__module__ + "." + type(spark).__qualname__

    def __getattr__(self, capability: str) -> Callable[..., Any]:
        if capability.startswith("_") or not hasattr(Backend, capability):
            raise AttributeError(capability)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise UnsupportedFeatureError(
                f"serialake cannot {capability.replace('_', ' ')} ({capability}) with a {self._kind} session: "
                "it needs Spark's JVM (a classic session), which Spark Connect sessions do not expose"
            )

        return refuse
