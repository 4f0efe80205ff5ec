"""``Backend`` for classic PySpark sessions: py4j calls into the session's JVM.

The only module of serialake that touches Spark's JVM (``_jvm``, ``_jsparkSession``,
``sparkContext``, a DataFrame's ``_jdf``, a Column's ``_jc``, a stream writer's ``_jwrite``)
and walks Catalyst's plans and expressions (``tests/spark/test_jvm_door.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException

from serialake.spark.backend.interface import MarkedRelation, ScanConjunct

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

__all__ = ["Classic", "is_classic"]

_SINK_CLASSES = (
    "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink",  # Spark 4.1+
    "org.apache.spark.sql.execution.streaming.FileStreamSink",  # Spark 2.0 - 4.0
)


def is_classic(spark: Any) -> bool:
    """Whether ``spark`` is a classic session (a py4j handle on a JVM SparkSession)."""
    return getattr(spark, "_jsparkSession", None) is not None


class Classic:
    """``Backend`` over a classic session's JVM."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @property
    def _jvm(self) -> Any:
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        return jvm

    def _session_state(self) -> Any:
        return self.spark._jsparkSession.sessionState()

    # -- the session ---------------------------------------------------------------------------

    def default_parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def static_conf(self) -> dict[str, str]:
        return dict(self.spark.sparkContext.getConf().getAll())

    def set_log_level(self, level: str) -> None:
        self.spark.sparkContext.setLogLevel(level)

    def silence_loggers(self, names: Sequence[str]) -> None:
        jvm = self._jvm
        level = jvm.org.apache.logging.log4j.Level.OFF
        for name in names:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)

    def local_property(self, key: str) -> str | None:
        value = self.spark.sparkContext.getLocalProperty(key)
        return str(value) if value else None

    def make_active(self) -> None:
        self._jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)

    # -- jobs ------------------------------------------------------------------------------------

    def add_job_tag(self, tag: str) -> None:
        self.spark.sparkContext.addJobTag(tag)

    def remove_job_tag(self, tag: str) -> None:
        self.spark.sparkContext.removeJobTag(tag)

    def cancel_tagged_jobs(self, tag: str) -> None:
        self.spark.sparkContext.cancelJobsWithTag(tag)

    def tagged_tasks_running(self, tag: str) -> bool:
        tracker = self.spark.sparkContext._jsc.sc().statusTracker()
        for job_id in tracker.getJobIdsForTag(tag):
            job = tracker.getJobInfo(job_id)
            if job.isEmpty():
                continue
            info = job.get()
            if str(info.status()) in ("RUNNING", "UNKNOWN"):
                return True
            for stage_id in info.stageIds():
                stage = tracker.getStageInfo(stage_id)
                if not stage.isEmpty() and stage.get().numActiveTasks() > 0:
                    return True
        return False

    def add_python_files(self, path: str) -> None:
        self.spark.sparkContext.addPyFile(path)

    # -- file systems ----------------------------------------------------------------------------

    def opens(self, uri: str) -> bool:
        from py4j.protocol import Py4JJavaError

        conf = self._session_state().newHadoopConf()
        try:
            self._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(uri.split(":", 1)[0], conf)
        except Py4JJavaError:
            return False
        return True

    def delete_path(self, uri: str) -> None:
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        path.getFileSystem(self._session_state().newHadoopConf()).delete(path, True)

    def file_sink(self, uri: str, partition_columns: Sequence[str], options: Mapping[str, str]) -> _FileSink | None:
        from py4j.java_gateway import JavaClass

        jvm = self._jvm
        utils = jvm.org.apache.spark.api.python.PythonUtils
        for name in _SINK_CLASSES:
            cls = jvm
            for part in name.split("."):
                cls = getattr(cls, part)
            if isinstance(cls, JavaClass):
                options_map = jvm.java.util.HashMap()
                for k, v in options.items():
                    options_map.put(k, v)
                parquet = jvm.org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat()
                columns = utils.toSeq(jvm.java.util.ArrayList(list(partition_columns)))
                return _FileSink(cls(self.spark._jsparkSession, uri, parquet, columns, utils.toScalaMap(options_map)))
        return None

    # -- parsing and analysis --------------------------------------------------------------------

    def expression_references(self, text: str) -> list[list[str]]:
        parsed = self._session_state().sqlParser().parseExpression(text)
        out: list[list[str]] = []
        pending = [parsed]
        while pending:  # pre-order: the references in the order the text names them
            node = pending.pop()
            if node.getClass().getSimpleName() == "UnresolvedAttribute":
                parts = node.nameParts()
                out.append([str(parts.apply(j)) for j in range(parts.size())])
                continue
            children = node.children()
            pending.extend(children.apply(j) for j in reversed(range(children.size())))
        return out

    def parsed_expression(self, text: str) -> str:
        return str(self._session_state().sqlParser().parseExpression(text).toString())

    def resolves(self, df: DataFrame, parts: Sequence[str]) -> bool:
        try:
            names = self._jvm.PythonUtils.toSeq(list(parts))
            resolver = self._session_state().conf().resolver()
            return bool(df._jdf.queryExecution().analyzed().resolve(names, resolver).isDefined())
        except AnalysisException:
            return False  # (ambiguous within one side: not one column of it)

    def is_deterministic(self, df: DataFrame) -> bool:
        return bool(df._jdf.queryExecution().analyzed().deterministic())

    def projects_deterministic(self, df: DataFrame) -> bool:
        return bool(df._jdf.queryExecution().analyzed().projectList().apply(0).deterministic())

    def estimated_bytes(self, df: DataFrame) -> int | None:
        return int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))

    def condition_sql(self, df: DataFrame) -> str | None:
        return _plan_condition_sql(df._jdf)

    def column_sql(self, df: DataFrame, column: Column) -> str | None:
        java: Any = getattr(column, "_jc", None)  # None: a Column without a JVM expression
        if java is None:
            return None
        return _plan_condition_sql(df._jdf.filter(java))

    def marked_relations(self, df: DataFrame, prefix: str, is_marker: Callable[[str], bool]) -> list[MarkedRelation]:
        plan = df._jdf.queryExecution().analyzed()
        if prefix not in plan.toString():
            return []
        out: list[MarkedRelation] = []
        _walk(plan, [], out, prefix, is_marker)
        return out

    # -- streaming -------------------------------------------------------------------------------

    def start_stream(self, writer: DataStreamWriter) -> Any:
        return writer._jwrite.start()


class _FileSink:
    def __init__(self, sink: Any) -> None:
        self._sink = sink

    def write(self, df: DataFrame) -> None:
        self._sink.addBatch(0, df._jdf)  # a failed job raises as ``df.write`` would (pyspark converts it)


def _plan_condition_sql(jdf: Any) -> str | None:
    """The analysed condition of a (Java) Dataset's top Filter or Join plan as SQL, columns
    qualified by their table; None for another shape.

    Spark's resolution says which side every column belongs to, which a Column object alone
    does not. Taking the Java Dataset lets callers analyse ``jdf.filter(column)`` without
    going through PySpark's (possibly wrapped) ``DataFrame.filter``.
    """
    try:
        plan = jdf.queryExecution().analyzed()
        name = plan.getClass().getSimpleName()
        if name == "Filter":
            return str(plan.condition().sql())
        if name == "Join":
            cond = plan.condition()
            return str(cond.get().sql()) if cond.isDefined() else None
    except Exception:  # noqa: BLE001 - a best effort: an unparsed condition is read conservatively
        return None
    return None


# -- plan walking (Catalyst's analysed plan) ----------------------------------------------------

# Plan nodes a filter above a scan passes through unchanged in meaning: a row of the scan
# that fails the filter can never reach, or change, the result.
_ROW_WISE = frozenset(
    {
        "Project",
        "Filter",
        "SubqueryAlias",
        "View",
        "Sort",
        "Repartition",
        "RepartitionByExpression",
        "RebalancePartitions",
        "ResolvedHint",
        "Distinct",
        "Generate",
        "Union",
    }
)
# Join type -> (sides that filters above the join constrain, sides that one-sided join
# condition conjuncts constrain); 0 = left, 1 = right.
_JOIN_SIDES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "INNER": ((0, 1), (0, 1)),
    "CROSS": ((0, 1), (0, 1)),
    "LEFT OUTER": ((0,), (1,)),
    "RIGHT OUTER": ((1,), (0,)),
    "FULL OUTER": ((), ()),
    "LEFT SEMI": ((0,), (1,)),
    "LEFT ANTI": ((0,), (1,)),
}


def _seq(jseq: Any) -> list[Any]:
    return [jseq.apply(i) for i in range(jseq.size())]


def _walk(
    node: Any, constraints: list[Any], out: list[MarkedRelation], prefix: str, is_marker: Callable[[str], bool]
) -> None:
    """Collect marked relations below ``node``; ``constraints`` are conjuncts every row that matters satisfies."""
    kind = node.getClass().getSimpleName()
    if kind == "SubqueryAlias":
        name = str(node.identifier().name())
        if name.startswith(prefix) and is_marker(name):
            out.append(_relation(name, node, constraints))
            return
    for sub in _seq(node.subqueries()):
        _walk(sub, [], out, prefix, is_marker)
    children = _seq(node.children())
    if kind == "Join":
        above, on = _JOIN_SIDES.get(node.joinType().sql().upper(), ((), ()))
        condition = node.condition()
        join_conjuncts = _conjuncts(condition.get()) if condition.isDefined() else []
        for side, child in enumerate(children):
            mine = (constraints if side in above else []) + (join_conjuncts if side in on else [])
            _walk(child, mine, out, prefix, is_marker)
        return
    if kind == "Filter":
        constraints = constraints + _conjuncts(node.condition())
    elif kind not in _ROW_WISE:
        constraints = []
    for child in children:
        _walk(child, constraints, out, prefix, is_marker)


def _conjuncts(expr: Any) -> list[Any]:
    if expr.getClass().getSimpleName() == "And":
        return _conjuncts(expr.left()) + _conjuncts(expr.right())
    return [expr]


def _relation(name: str, node: Any, constraints: list[Any]) -> MarkedRelation:
    """The relation under marker ``node`` with the constraints that only read its columns.

    Columns are tied to the relation by Catalyst's expression ids, whatever they are called
    or qualified as where the filter is.
    """
    columns = {attr.exprId().id(): str(attr.name()) for attr in _seq(node.output())}
    conjuncts: list[ScanConjunct] = []
    for expr in constraints:
        if not expr.deterministic():
            continue
        refs = _seq(expr.references().toSeq())
        if not refs or any(r.exprId().id() not in columns for r in refs):
            continue
        names: dict[tuple[str, ...], str] = {}
        for r in refs:
            path = tuple(str(q).lower() for q in _seq(r.qualifier())) + (str(r.name()).lower(),)
            names[path] = columns[r.exprId().id()]
        conjuncts.append(ScanConjunct(str(expr.sql()), names))
    return MarkedRelation(name, tuple(conjuncts))
