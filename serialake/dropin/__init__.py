"""delta-spark's entry points in a plain SparkSession: ``format("delta")``, ``spark.sql``, tables by name.

``serialake.configure(spark)`` is serialake's analogue of delta-spark's session extension
(``spark.sql.extensions`` / ``configure_spark_with_delta_pip``): after it, in that session,

- ``df.write.format("delta")`` ... ``save(path)`` / ``saveAsTable(name)`` / ``insertInto(name)``
  and ``df.writeTo(name).using("delta")`` ... ``create()`` / ``append()`` / ``overwrite(cond)`` /
  ``replace()`` / ``createOrReplace()`` / ``overwritePartitions()`` commit through
  ``serialake.write``, with Spark's save modes (``errorifexists`` by default) and Delta's
  writer options;
- ``spark.read.format("delta").load(path)`` and ``spark.read.table(name)`` / ``spark.table(name)``
  read through ``serialake.read`` (``versionAsOf``, ``timestampAsOf``), and a ``filter`` /
  ``where`` on the result skips files by partition values and stats;
- ``spark.sql(statement)`` runs what ``serialake.sql`` runs (Delta's statements, and queries
  over serialake tables by name or ``delta.`path```) and hands every statement serialake's
  parser does not know to Spark unchanged;
- ``spark.catalog.tableExists`` / ``listTables`` include the tables of serialake's catalog.

How: the Python classes of classic PySpark (``DataFrameWriter``, ``DataFrameWriterV2``,
``DataFrameReader``, ``SparkSession``, ``Catalog``) are wrapped once per process. The wrappers
record the format and options a call chain sets (PySpark keeps them in the JVM only) and
take over only when the format is ``delta`` (or the table is one of serialake's) *and* the
session was configured (a runtime setting, ``spark.serialake.enabled``): other sessions,
other formats and other tables run PySpark's own code, untouched. serialake's own calls to
Spark inside an operation reach the original methods.

On a Spark Connect session the same wrappers are installed on ``pyspark.sql.connect``'s
classes (docs/dropin.md, "Spark Connect"). Not covered: SQL that reaches Spark without
going through Python (a JDBC/Thrift server, Scala code): that needs a JVM extension.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.catalog import Catalog
from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter, DataFrameWriterV2
from pyspark.sql.utils import to_str

from serialake.core.tables import catalog
from serialake.dropin import write as dropin_write
from serialake.exceptions import DeltaIllegalArgumentException
from serialake.spark.backend import backend
from serialake.spark.errors import raising_pyspark
from serialake.spark.write_settings import recorded_option as _option

__all__ = ["ENABLED_CONF", "configure", "is_configured", "serialake_calls"]

#: The runtime setting that marks a configured session.
ENABLED_CONF = "spark.serialake.enabled"

_install_lock = threading.Lock()
_local = threading.local()


def configure(spark: SparkSession) -> SparkSession:
    """Make ``spark`` a serialake session (see the module docstring); returns it."""
    from serialake.spark.backend.connect import is_connect

    _install(connect=is_connect(spark))
    spark.conf.set(ENABLED_CONF, "true")
    spark.__dict__["_serialake_enabled"] = True
    _s3_options_from(spark)
    return spark


def _s3_options_from(spark: SparkSession) -> None:
    """The session's S3A settings (``spark.hadoop.fs.s3a.endpoint``, access keys, path-style access)
    and commit protocol (``spark.delta.logStore.s3a.impl=io.delta.storage.S3DynamoDBLogStore``,
    ``spark.io.delta.storage.S3DynamoDBLogStore.ddb.*``) for serialake's S3 log store, as Spark
    users configure them for ``s3a://`` tables and delta-spark."""
    try:
        conf = backend(spark).static_conf()
    except Exception:  # noqa: BLE001 - Spark Connect and stopped sessions have no SparkContext
        return
    from serialake.storage import s3

    options = s3.session_options(conf)
    if options:
        s3.configure(options)


def is_configured(spark: SparkSession | None) -> bool:
    """Whether ``spark`` was configured with ``configure`` (any Python handle of that session)."""
    if spark is None or getattr(_local, "depth", 0) > 0:
        return False  # serialake's own calls inside an operation reach Spark's methods
    if spark.__dict__.get("_serialake_enabled"):
        return True
    try:
        return str(spark.conf.get(ENABLED_CONF, "false")).lower() == "true"
    except Exception:  # noqa: BLE001 - a stopped session, or one without runtime conf
        return False


@contextmanager
def serialake_calls() -> Iterator[None]:
    """Inside, Spark calls on this thread run PySpark's own code (serialake's operations use it)."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


# ---------------------------------------------------------------------------------------------
# Recorded state of a reader or writer
# ---------------------------------------------------------------------------------------------


def _new_state() -> dict[str, Any]:
    """What a reader or writer chain has set so far: nothing."""
    return {"format": None, "mode": None, "options": {}, "partitionBy": None, "clusterBy": None,
            "schema": None, "properties": {}, "provider": None}  # fmt: skip


def _state(obj: Any) -> dict[str, Any]:
    st = obj.__dict__.get("_serialake_state")
    if st is None:
        st = obj.__dict__["_serialake_state"] = _new_state()
    return st


def _default_is_delta(spark: SparkSession) -> bool:
    """Whether Spark's default data source (``spark.sql.sources.default``) is ``delta``."""
    return str(spark.conf.get("spark.sql.sources.default", "parquet")).lower() == "delta"


def _columns(cols: tuple[Any, ...]) -> list[str]:
    if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
        cols = tuple(cols[0])
    return [str(c) for c in cols]


def _wrap(cls: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = getattr(cls, name)
    if getattr(original, "_serialake_original", None) is not None:
        return
    wrapped = functools.wraps(original)(raising_pyspark(make(original)))
    wrapped._serialake_original = original  # type: ignore[attr-defined]
    setattr(cls, name, wrapped)


# ---------------------------------------------------------------------------------------------
# Installing the wrappers (once per process)
# ---------------------------------------------------------------------------------------------


def _install(connect: bool = False) -> None:
    """Wrap PySpark's methods; ``_wrap`` leaves a wrapped one alone, so a second call changes nothing.

    ``connect``: also Spark Connect's classes (``pyspark.sql.connect``: the same wrappers; their
    writers hold a plan, not a DataFrame, and their readers the session as ``_client``).
    """
    with _install_lock:
        _install_writer(DataFrameWriter)
        _install_writer_v2(DataFrameWriterV2)
        _install_reader(DataFrameReader)
        _install_stream_reader()
        _install_dataframe()
        _install_session(SparkSession)
        _install_catalog(Catalog)
        _install_stream_writer()
        if connect:
            from pyspark.sql.connect.catalog import Catalog as ConnectCatalog
            from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
            from pyspark.sql.connect.readwriter import DataFrameReader as ConnectReader
            from pyspark.sql.connect.readwriter import DataFrameWriter as ConnectWriter
            from pyspark.sql.connect.readwriter import DataFrameWriterV2 as ConnectWriterV2
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            _install_writer(ConnectWriter)
            _install_writer_v2(ConnectWriterV2)
            _install_reader(ConnectReader)
            _install_filter(ConnectFrame)
            _install_session(ConnectSession)
            _install_catalog(ConnectCatalog)


def _session(obj: Any) -> Any:
    """The session of a reader or writer (classic: ``_spark``; a Connect reader: ``_client``)."""
    spark = obj.__dict__.get("_spark")
    return spark if spark is not None else obj._client


def _frame(writer: Any) -> DataFrame:
    """The DataFrame a writer writes (a Connect writer holds its plan)."""
    df = writer._df
    if isinstance(df, DataFrame):
        return df
    from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame

    return ConnectFrame(df, writer._spark)


def _recording(key: str, convert: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            value = convert(*args, **kwargs)
            if value is not None:
                _state(self)[key] = value
            return original(self, *args, **kwargs)

        return method

    return make


def _first(*args: Any, **kwargs: Any) -> Any:
    """The one argument of a chained setter, given by position or by name."""
    return args[0] if args else next(iter(kwargs.values()), None)


def _first_text(*args: Any, **kwargs: Any) -> str | None:
    value = _first(*args, **kwargs)
    return None if value is None else str(value)


def _lower_first(*args: Any, **kwargs: Any) -> str | None:
    value = _first_text(*args, **kwargs)
    return None if value is None else value.lower()


def _record_option(self: Any, key: str, value: Any) -> None:
    _state(self)["options"][str(key).lower()] = to_str(value)


def _option_recorder(original: Callable[..., Any]) -> Callable[..., Any]:
    def option(self: Any, key: str, value: Any) -> Any:
        _record_option(self, key, value)
        return original(self, key, value)

    return option


def _options_recorder(original: Callable[..., Any]) -> Callable[..., Any]:
    def options(self: Any, **opts: Any) -> Any:
        for k, v in opts.items():
            _record_option(self, k, v)
        return original(self, **opts)

    return options


def _install_writer(cls: type) -> None:
    _wrap(cls, "format", _recording("format", _lower_first))
    _wrap(cls, "mode", _recording("mode", _first_text))
    _wrap(cls, "option", _option_recorder)
    _wrap(cls, "options", _options_recorder)
    _wrap(cls, "partitionBy", _recording("partitionBy", lambda *cols: _columns(cols)))
    if hasattr(cls, "clusterBy"):
        _wrap(cls, "clusterBy", _recording("clusterBy", lambda *cols: _columns(cols)))

    def make_save(original: Callable[..., Any]) -> Callable[..., Any]:
        def save(self: DataFrameWriter, path: str | None = None, format: str | None = None,  # noqa: A002
                 mode: str | None = None, partitionBy: Any = None, **options: Any) -> None:  # noqa: N803
            if not _writes_delta(self, format):
                return original(self, path, format, mode, partitionBy, **options)
            _apply_call_args(self, format, mode, partitionBy, options)
            st = _state(self)
            target = path or _option(st, "path")
            if not target:
                raise DeltaIllegalArgumentException("'path' is not specified: df.write.format('delta').save(path)")
            with serialake_calls():
                dropin_write.save(_frame(self), target, st)
            return None

        return save

    def make_save_as_table(original: Callable[..., Any]) -> Callable[..., Any]:
        def saveAsTable(self: DataFrameWriter, name: str, format: str | None = None,  # noqa: A002, N802
                        mode: str | None = None, partitionBy: Any = None, **options: Any) -> None:  # noqa: N803
            if not _writes_delta(self, format, table=name):
                return original(self, name, format, mode, partitionBy, **options)
            _apply_call_args(self, format, mode, partitionBy, options)
            with serialake_calls():
                dropin_write.save_as_table(_frame(self), name, _state(self))
            return None

        return saveAsTable

    def make_insert_into(original: Callable[..., Any]) -> Callable[..., Any]:
        def insertInto(self: DataFrameWriter, tableName: str, overwrite: bool | None = None) -> None:  # noqa: N802, N803
            st = _state(self)
            location = catalog.lookup(tableName) if is_configured(self._spark) else None
            if location is None or st["format"] not in (None, "delta"):
                return original(self, tableName, overwrite)
            with serialake_calls():
                dropin_write.insert_into(_frame(self), tableName, location, st, overwrite)
            return None

        return insertInto

    _wrap(cls, "save", make_save)
    _wrap(cls, "saveAsTable", make_save_as_table)
    _wrap(cls, "insertInto", make_insert_into)


def _apply_call_args(self: DataFrameWriter, fmt: str | None, mode: str | None, partition_by: Any,
                     options: dict[str, Any]) -> None:  # fmt: skip
    """What ``save(..., format=, mode=, partitionBy=, **options)`` sets, recorded as the chained calls would."""
    st = _state(self)
    if mode is not None:
        st["mode"] = str(mode)
    for k, v in options.items():
        _record_option(self, k, v)
    if partition_by is not None:
        st["partitionBy"] = _columns((partition_by,))
    if fmt is not None:
        st["format"] = str(fmt).lower()


def _writes_delta(writer: DataFrameWriter, fmt: str | None, *, table: str | None = None) -> bool:
    """Whether this save is serialake's: a configured session and the ``delta`` format.

    Without a format: Spark's default source (``spark.sql.sources.default``), except that
    ``saveAsTable`` to a serialake table keeps its format, as Spark does for an existing table.
    """
    spark = writer._spark
    if not is_configured(spark):
        return False
    chosen = (fmt or _state(writer)["format"] or "").lower()
    if chosen:
        return chosen == "delta"
    if table is not None and catalog.lookup(table) is not None:
        return True
    return _default_is_delta(spark)


def _install_writer_v2(cls: type) -> None:
    def make_init(original: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            original(self, *args, **kwargs)  # classic (df, table); Connect (plan, session, table, callback)
            _state(self)["table"] = self.__dict__.get("_table_name") or (args[1] if len(args) > 1 else kwargs["table"])

        return __init__

    _wrap(cls, "__init__", make_init)
    _wrap(cls, "using", _recording("provider", _lower_first))
    _wrap(cls, "option", _option_recorder)
    _wrap(cls, "options", _options_recorder)

    def make_property(original: Callable[..., Any]) -> Callable[..., Any]:
        def tableProperty(self: Any, property: str, value: str) -> Any:  # noqa: A002, N802
            _state(self)["properties"][property] = value
            return original(self, property, value)

        return tableProperty

    _wrap(cls, "tableProperty", make_property)

    def make_partitioned(original: Callable[..., Any]) -> Callable[..., Any]:
        def partitionedBy(self: Any, col: Any, *cols: Any) -> Any:  # noqa: N802
            names = []
            for c in (col, *cols):
                if not isinstance(c, str):
                    raise DeltaIllegalArgumentException(
                        "serialake's writeTo(...).partitionedBy takes column names (partition transforms "
                        "such as years(col) are not Delta partitioning)"
                    )
                names.append(c)
            _state(self)["partitionBy"] = names
            return original(self, col, *cols)

        return partitionedBy

    _wrap(cls, "partitionedBy", make_partitioned)
    if hasattr(cls, "clusterBy"):
        _wrap(cls, "clusterBy", _recording("clusterBy", lambda col, *cols: [col, *cols]))

    def action(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def run(self: Any, *args: Any) -> None:
                st = _state(self)
                spark = self._spark
                name = st["table"]
                provider = st["provider"]
                ours = is_configured(spark) and (
                    provider == "delta" or (provider is None and catalog.lookup(name) is not None)
                )
                if not ours:
                    return original(self, *args)
                with serialake_calls():
                    dropin_write.write_to(_frame(self), name, st, kind, *args)
                return None

            return run

        return make

    for kind in ("create", "replace", "createOrReplace", "append", "overwrite", "overwritePartitions"):
        _wrap(cls, kind, action(kind))


def _delta_load_state(reader: Any, format: str | None, schema: Any, options: dict[str, Any]) -> dict[str, Any] | None:  # noqa: A002
    """The recorded state of a batch or stream reader's ``load(...)`` when serialake serves it (a
    configured session, format ``delta`` or delta by default), with ``load``'s own format,
    schema and options recorded; None when Spark's own ``load`` should run."""
    st = _state(reader)
    chosen = (format or st["format"] or "").lower()
    spark = _session(reader)
    if not is_configured(spark) or not (chosen == "delta" or (not chosen and _default_is_delta(spark))):
        return None
    for k, v in options.items():
        _record_option(reader, k, v)
    if schema is not None:
        st["schema"] = schema
    return st


def _install_reader(cls: type) -> None:
    _wrap(cls, "format", _recording("format", _lower_first))
    _wrap(cls, "option", _option_recorder)
    _wrap(cls, "options", _options_recorder)
    _wrap(cls, "schema", _recording("schema", _first))

    def make_load(original: Callable[..., Any]) -> Callable[..., Any]:
        def load(self: DataFrameReader, path: Any = None, format: str | None = None,  # noqa: A002
                 schema: Any = None, **options: Any) -> DataFrame:  # fmt: skip
            st = _delta_load_state(self, format, schema, options)
            if st is None:
                return original(self, path, format, schema, **options)
            target = path if path is not None else _option(st, "path")
            with serialake_calls():
                return dropin_write.load(_session(self), target, st)

        return load

    def make_table(original: Callable[..., Any]) -> Callable[..., Any]:
        def table(self: DataFrameReader, tableName: str) -> DataFrame:  # noqa: N803
            st = _state(self)
            if not is_configured(_session(self)) or st["format"] not in (None, "delta"):
                return original(self, tableName)
            location = catalog.lookup(tableName)
            if location is None:
                return original(self, tableName)
            with serialake_calls():
                return dropin_write.load(_session(self), location, st, name=tableName)

        return table

    _wrap(cls, "load", make_load)
    _wrap(cls, "table", make_table)


def _install_stream_reader() -> None:
    """``spark.readStream.format("delta").load(path)`` / ``.table(name)``: serialake's streaming
    source (``serialake.spark.streaming.source``); other formats and tables are Spark's."""
    from pyspark.sql.streaming.readwriter import DataStreamReader

    _wrap(DataStreamReader, "format", _recording("format", _lower_first))
    _wrap(DataStreamReader, "option", _option_recorder)
    _wrap(DataStreamReader, "options", _options_recorder)
    _wrap(DataStreamReader, "schema", _recording("schema", _first))

    def make_load(original: Callable[..., Any]) -> Callable[..., Any]:
        def load(self: DataStreamReader, path: str | None = None, format: str | None = None,  # noqa: A002
                 schema: Any = None, **options: Any) -> DataFrame:  # fmt: skip
            st = _delta_load_state(self, format, schema, options)
            if st is None:
                return original(self, path, format, schema, **options)
            from serialake.spark.streaming import source

            with serialake_calls():
                return source.load(self._spark, path if path is not None else _option(st, "path"), st)

        return load

    def make_table(original: Callable[..., Any]) -> Callable[..., Any]:
        def table(self: DataStreamReader, tableName: str) -> DataFrame:  # noqa: N803
            st = _state(self)
            location = catalog.lookup(tableName) if is_configured(self._spark) else None
            if location is None or st["format"] not in (None, "delta"):
                return original(self, tableName)
            from serialake.spark.streaming import source

            with serialake_calls():
                return source.load(self._spark, location, st, name=tableName)

        return table

    _wrap(DataStreamReader, "load", make_load)
    _wrap(DataStreamReader, "table", make_table)


def _install_dataframe() -> None:
    """``df.filter(cond)`` / ``df.where(cond)`` on a table ``spark.read.format("delta")`` (or
    ``serialake.read``) returned: the condition also skips files (``read.pushed_filter``)."""
    try:  # PySpark 4: the classic DataFrame is a subclass with its own methods
        from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame
    except ImportError:
        ClassicFrame = DataFrame  # type: ignore[misc,assignment]  # noqa: N806
    _install_filter(ClassicFrame)


def _install_filter(cls: type) -> None:
    """``filter`` / ``where`` of a DataFrame class (``_install_dataframe``)."""
    from serialake.spark.read import pushed_filter

    def make_filter(original: Callable[..., Any]) -> Callable[..., Any]:
        def filter(self: DataFrame, condition: Any) -> DataFrame:  # noqa: A001
            if isinstance(condition, (str, Column)):
                pushed = pushed_filter(self, condition)
                if pushed is not None:
                    return pushed
            return original(self, condition)

        return filter

    _wrap(cls, "filter", make_filter)
    _wrap(cls, "where", make_filter)


def _install_session(cls: type) -> None:
    def make_sql(original: Callable[..., Any]) -> Callable[..., Any]:
        def sql(self: SparkSession, sqlQuery: str, args: Any = None, **kwargs: Any) -> DataFrame | None:  # noqa: N803
            if args or kwargs or not is_configured(self):
                return original(self, sqlQuery, args, **kwargs)
            from serialake.sql import SqlError, parse_statement
            from serialake.sql.execute import execute

            try:
                statement = parse_statement(sqlQuery)
            except SqlError:
                # Not a statement serialake's parser knows (Spark-only syntax): Spark's own, unchanged.
                return original(self, sqlQuery)
            with serialake_calls():
                return execute(self, statement)

        return sql

    def make_table(original: Callable[..., Any]) -> Callable[..., Any]:
        def table(self: SparkSession, tableName: str) -> DataFrame:  # noqa: N803
            if not is_configured(self):
                return original(self, tableName)
            location = catalog.lookup(tableName)
            if location is None:
                return original(self, tableName)
            with serialake_calls():
                return dropin_write.load(self, location, _new_state(), name=tableName)

        return table

    _wrap(cls, "sql", make_sql)
    _wrap(cls, "table", make_table)


def _install_catalog(cls: type) -> None:
    def make_exists(original: Callable[..., Any]) -> Callable[..., Any]:
        def tableExists(self: Catalog, tableName: str, dbName: str | None = None) -> bool:  # noqa: N802, N803
            if is_configured(self._sparkSession):
                name = tableName if dbName is None else f"{dbName}.{tableName}"
                location = catalog.lookup(name)
                if location is not None:
                    from serialake.core import DeltaLog

                    return DeltaLog.for_table(location).table_exists()
            return bool(original(self, tableName, dbName))

        return tableExists

    def make_list(original: Callable[..., Any]) -> Callable[..., Any]:
        def listTables(self: Catalog, dbName: str | None = None, pattern: str | None = None) -> Any:  # noqa: N802, N803
            found = original(self, dbName, pattern)
            if not is_configured(self._sparkSession) or (dbName not in (None, "default")):
                return found
            import fnmatch

            from pyspark.sql.catalog import Table

            known = {t.name.lower() for t in found}
            extra = []
            for name, location in catalog.list_tables().items():
                if "." in name or name in known:
                    continue
                if pattern is not None and not fnmatch.fnmatch(name, pattern.replace(".*", "*").lower()):
                    continue
                extra.append(Table(name=name, catalog="spark_catalog", namespace=["default"],
                                   description=f"Delta table at {location} (serialake)",
                                   tableType="EXTERNAL", isTemporary=False))  # fmt: skip
            return sorted([*found, *extra], key=lambda t: t.name)

        return listTables

    _wrap(cls, "tableExists", make_exists)
    _wrap(cls, "listTables", make_list)


def _install_stream_writer() -> None:
    """``df.writeStream.format("delta")`` ... ``start(path)`` / ``toTable(name)``: the exactly-once
    sink (``serialake.spark.streaming.sink``), run as Spark's ``foreachBatch``."""
    from pyspark.sql.streaming import DataStreamWriter

    _wrap(DataStreamWriter, "format", _recording("format", _lower_first))
    _wrap(DataStreamWriter, "outputMode", _recording("mode", _first_text))
    _wrap(DataStreamWriter, "option", _option_recorder)
    _wrap(DataStreamWriter, "options", _options_recorder)
    # Spark refuses partitioning with foreachBatch, which the sink runs as: the columns are kept
    # here and handed to Spark's writer only when another sink starts.
    layout = ("partitionBy", "clusterBy") if hasattr(DataStreamWriter, "clusterBy") else ("partitionBy",)
    for key in layout:
        _wrap(DataStreamWriter, key, _deferred(key))

    def streams_delta(writer: DataStreamWriter, table: str | None) -> bool:
        if not is_configured(writer._spark):
            return False
        chosen = _state(writer)["format"]
        if chosen:
            return bool(chosen == "delta")
        if table is not None and catalog.lookup(table) is not None:
            return True
        return _default_is_delta(writer._spark)

    def make_start(table_call: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def start(self: DataStreamWriter, target: str | None = None, format: str | None = None,  # noqa: A002
                      outputMode: str | None = None, partitionBy: Any = None,  # noqa: N803
                      queryName: str | None = None, **options: Any) -> Any:  # noqa: N803
                # As PySpark's start/toTable do first (through the recording wrappers above).
                self.options(**options)
                if outputMode is not None:
                    self.outputMode(outputMode)
                if partitionBy is not None:
                    self.partitionBy(partitionBy)
                if format is not None:
                    self.format(format)
                if queryName is not None:
                    self.queryName(queryName)
                if not streams_delta(self, target if table_call else None):
                    for key in layout:
                        if _state(self)[key] is not None:
                            getattr(DataStreamWriter, key)._serialake_original(self, _state(self)[key])
                    return original(self, target) if target is not None or table_call else original(self)
                from serialake.spark.streaming import sink

                if table_call:
                    return sink.start(self, _state(self), table=target, calls=serialake_calls)
                return sink.start(self, _state(self), path=target, calls=serialake_calls)

            return start

        return make

    _wrap(DataStreamWriter, "start", make_start(False))
    _wrap(DataStreamWriter, "toTable", make_start(True))


def _deferred(key: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``DataStreamWriter`` setter of columns that only records them (``_install_stream_writer``)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *cols: Any) -> Any:
            _state(self)[key] = _columns(cols)
            return self

        return method

    return make
