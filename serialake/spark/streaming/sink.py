"""The exactly-once streaming sink: ``df.writeStream.format("delta")`` in a serialake session.

``df.writeStream.format("delta").option("checkpointLocation", c).outputMode(m).start(path)``
(or ``.toTable(name)``) runs the query as Spark's ``foreachBatch``: each micro-batch is one
``serialake.write`` of the batch's rows that commits ``SetTransaction(appId, batchId)``
with them, as delta-spark's sink does. ``appId`` is the query's id, which Spark keeps in
the checkpoint (``<checkpoint>/metadata``) and reuses on every restart; the ``txnAppId``
option replaces it. Before writing, the batch reads that application's txn version in the
snapshot it commits against:

- a batch replayed after a crash (Spark re-runs the last batch whose end it did not record
  in the checkpoint) finds its version already committed and writes nothing;
- two queries using one checkpoint location and writing at once: both read the version
  below, the second commit finds the first's ``SetTransaction`` for the same application
  and fails with ``ConcurrentTransactionException`` (the query stops with it);
- a batch in ``append`` mode is a blind append: it never conflicts with compaction or other
  appenders (the commit loop rebases it). ``complete`` replaces the table's rows each batch
  (still idempotent); ``update`` is refused, as Delta's sink does.

Options as delta-spark's sink reads them: ``checkpointLocation``, ``mergeSchema`` (and the
session's ``spark.databricks.delta.schema.autoMerge.enabled``), ``overwriteSchema`` (with
``complete``), ``userMetadata``, ``maxRecordsPerFile``, ``partitionBy``; ``queryName`` and
``trigger`` are Spark's. The commit shows as ``STREAMING UPDATE`` in the history, with
``outputMode``, ``queryId`` and ``epochId``.

``idempotent(fn)`` wraps a user's ``foreachBatch`` function (MERGE per batch): the writes it
makes through serialake commit with the batch's txn (``batch_txn``).

The returned query is Spark's ``StreamingQuery``; when a batch failed with one of
serialake's errors, ``awaitTermination``, ``processAllAvailable`` and ``exception()`` give
that error as an instance of both its class and PySpark's ``StreamingQueryException``:
``except ConcurrentTransactionException`` and ``except StreamingQueryException`` both catch it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from serialake.core import DeltaLog
from serialake.core.tables import catalog
from serialake.core.txn.post_commit import after_commit
from serialake.exceptions import DeltaAnalysisException, DeltaError, DeltaIllegalArgumentException
from serialake.spark import isolation
from serialake.spark.backend import backend
from serialake.spark.streaming import batch_txn
from serialake.spark.write import write
from serialake.spark.write_settings import recorded_option as _option
from serialake.spark.write_settings import recorded_write_options as _write_options

__all__ = ["QUERY_ID_PROPERTY", "SinkQuery", "idempotent", "start"]

#: The local property Spark sets on a streaming query's threads: the query's persistent id.
QUERY_ID_PROPERTY = "sql.streaming.queryId"

BatchFunction = Callable[[DataFrame, int], Any]


def query_id(batch_df: DataFrame) -> str | None:
    """The id of the streaming query running this batch (None outside one).

    Spark sets it on the query's thread; a ``foreachBatch`` function runs in a Python thread
    that PySpark pins to that JVM thread, so the property is the query's.
    """
    try:
        return backend(batch_df.sparkSession).local_property(QUERY_ID_PROPERTY)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return None


def idempotent(
    batch_fn: BatchFunction, app_id: str | None = None, *, failOnReset: bool = True  # noqa: N803
) -> BatchFunction:
    """``batch_fn`` for ``foreachBatch`` whose serialake writes commit once per batch.

    Inside ``batch_fn(batch_df, batch_id)`` every serialake write and DML (``serialake.write``,
    ``df.write.format("delta")``, ``DeltaTable.merge(...).execute()``, ``spark.sql("MERGE
    ...")``, UPDATE, DELETE, INSERT) commits with ``SetTransaction(app_id, batch_id)``; when
    Spark replays a batch after a crash, the writes it already committed are skipped.
    ``app_id`` defaults to the streaming query's id (kept in its checkpoint, the same on
    every restart); give one to call the function outside a stream. Writes that give their
    own ``txnAppId`` keep it. See ``batch_txn`` for several writes to one table in a batch.

    ``failOnReset``: a batch id lower than one already committed for the application (the
    checkpoint was reset) raises ``BatchResetError``; False skips it as done. Several tables
    written as one per batch: ``with serialake.transaction(batch_df.sparkSession):`` inside
    ``batch_fn``: the batch's writes to all of them commit once, together.
    """

    @functools.wraps(batch_fn)
    def run(batch_df: DataFrame, batch_id: int) -> Any:
        app = app_id or query_id(batch_df)
        if not app:
            raise DeltaIllegalArgumentException(
                "serialake.streaming.idempotent: no streaming query runs this batch function; "
                "pass app_id=... to call it outside a stream"
            )
        with batch_txn.in_batch(app, int(batch_id), fail_on_reset=failOnReset):
            return batch_fn(batch_df, batch_id)

    return run


# ---------------------------------------------------------------------------------------------
# writeStream.format("delta")
# ---------------------------------------------------------------------------------------------

_OUTPUT_MODES = {"append": "Append", "complete": "Complete"}
#: How long a batch waits for ``start`` to return the query's id when its thread does not show it.
_START_WAIT_S = 120.0


def start(
    writer: DataStreamWriter,
    st: dict[str, Any],
    *,
    path: str | None = None,
    table: str | None = None,
    calls: Callable[[], AbstractContextManager[Any]],
) -> SinkQuery:
    """Start the query ``writer`` describes (``st``: its recorded format, mode, options,
    partitioning) into the table at ``path`` or named ``table``.

    ``calls`` is the context in which serialake's own Spark calls reach PySpark's methods
    (``dropin.serialake_calls``): each batch runs its write inside it.
    """
    mode = _output_mode(st)
    if table is not None:
        with calls():
            location = _table_location(writer._df, table, st)
    else:
        target = path or _option(st, "path")
        if not target:
            raise DeltaIllegalArgumentException(
                "'path' is not specified: df.writeStream.format('delta').start(path) or .toTable(name)"
            )
        location = target
    batch = _SinkBatch(location, st, mode, calls)
    writer.foreachBatch(batch)  # PySpark's: the JVM writer's sink becomes the batch function
    query = SinkQuery(backend(writer._df.sparkSession).start_stream(writer), batch)
    batch.started(query.id)
    return query


def _output_mode(st: dict[str, Any]) -> str:
    mode = (st.get("mode") or "append").strip().lower()
    if mode == "update":
        raise DeltaAnalysisException(
            "Data source delta does not support Update output mode: use append or complete, or foreachBatch "
            "with a MERGE (serialake.streaming.idempotent) to upsert each batch"
        )
    if mode not in _OUTPUT_MODES:
        raise DeltaIllegalArgumentException(f"Unknown output mode {st.get('mode')!r}: use append or complete")
    return mode


def _table_location(df: DataFrame, name: str, st: dict[str, Any]) -> str:
    """``toTable(name)``: the registered table, else a new one made now with the stream's schema
    (at the ``path`` option, else managed), registered, as Spark creates a missing table first."""
    registered = catalog.lookup(name)
    given = _option(st, "path")
    if registered is not None:
        if given is not None and DeltaLog.for_table(given).table_path != registered:
            raise DeltaAnalysisException(
                f"Table {name} already exists at {registered}: toTable cannot give it the location {given}"
            )
        if DeltaLog.for_table(registered).table_exists():
            return registered
    location = registered or given or catalog.managed_location(name)
    log = DeltaLog.for_table(location)
    created: int | None = None
    if not log.table_exists():
        empty = df.sparkSession.createDataFrame([], df.schema)
        created = write(
            empty, location, mode="append", partitionBy=st.get("partitionBy"), clusterBy=st.get("clusterBy") or None
        )
    elif registered is None and given is None:
        raise DeltaAnalysisException(
            f"Cannot create table {name}: its managed location {location} already holds a Delta table. "
            "Register it with CREATE TABLE ... LOCATION, or remove that directory."
        )
    if registered is None:  # once created, a step after that commit (core.txn.post_commit)
        after_commit("register the table name in the catalog", location, created, catalog.register, name, location,
                     operation="WRITE")  # fmt: skip
    return log.table_path


class _SinkBatch:
    """The ``foreachBatch`` function of one run of a query: one idempotent write per batch."""

    def __init__(self, location: str, st: dict[str, Any], mode: str,
                 calls: Callable[[], AbstractContextManager[Any]]) -> None:  # fmt: skip
        self.location = location
        self.mode = mode
        self.partition_by = st.get("partitionBy")
        self.cluster_by = st.get("clusterBy") or None
        self.st = {**st, "options": dict(st["options"])}  # later option() calls on the writer do not count
        self.app_id = _option(self.st, "txnAppId")
        self.calls = calls
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self._query_id: str | None = None
        self._started = threading.Event()

    def started(self, query_id: str) -> None:
        self._query_id = query_id
        self._started.set()

    def query_id(self, batch_df: DataFrame) -> str | None:
        """The query's id: from the batch's thread, else (threads not pinned) once ``start`` returned it."""
        found = query_id(batch_df)
        if found is None and self._started.wait(_START_WAIT_S):
            found = self._query_id
        return found

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        try:
            with self.calls():
                commit_batch(self, batch_df, int(batch_id))
        except BaseException as e:
            with self.lock:
                self.error = e
            raise


def commit_batch(sink: _SinkBatch, batch_df: DataFrame, batch_id: int) -> int | None:
    """Write one micro-batch (skipped when its version is committed); the version, None when skipped."""
    spark = batch_df.sparkSession
    app = sink.app_id or sink.query_id(batch_df)
    if not app:
        raise DeltaIllegalArgumentException("serialake's delta sink runs only inside a streaming query")
    overwrite = sink.mode == "complete"
    options = _write_options(spark, sink.st, "overwrite" if overwrite else "append")
    options.update(
        replaceWhere=None,
        partitionOverwriteMode=None,
        overwriteSchema=overwrite and options["overwriteSchema"],
        txnAppId=app,
        txnVersion=batch_id,
    )
    version = write(
        batch_df,
        sink.location,
        mode="overwrite" if overwrite else "append",
        partitionBy=sink.partition_by,
        clusterBy=sink.cluster_by,
        streaming_update={"outputMode": _OUTPUT_MODES[sink.mode], "queryId": app, "epochId": str(batch_id)},
        **options,
    )
    if version is not None:
        isolation.note_committed(spark, sink.location, version, "STREAMING UPDATE")
    return version


# ---------------------------------------------------------------------------------------------
# The query handle: a failed batch's error keeps its class
# ---------------------------------------------------------------------------------------------


class SinkQuery(StreamingQuery):
    """Spark's ``StreamingQuery``; a batch's serialake error comes out as itself (see module docstring)."""

    def __init__(self, jsq: Any, batch: _SinkBatch) -> None:
        super().__init__(jsq)
        self._batch = batch

    def awaitTermination(self, timeout: int | None = None) -> bool | None:  # noqa: N802
        try:
            return super().awaitTermination(timeout)
        except StreamingQueryException as e:
            raise self._batch_error(e) from e

    def processAllAvailable(self) -> None:  # noqa: N802
        try:
            return super().processAllAvailable()
        except StreamingQueryException as e:
            raise self._batch_error(e) from e

    def exception(self) -> StreamingQueryException | None:
        found = super().exception()
        if found is None:
            return None
        error = self._batch_error(found)
        return error if isinstance(error, StreamingQueryException) else found

    def _batch_error(self, spark_error: StreamingQueryException) -> BaseException:
        with self._batch.lock:
            error = self._batch.error
        if not isinstance(error, DeltaError):
            return spark_error
        return as_streaming_error(error)


_BRIDGED: dict[type[BaseException], type[BaseException]] = {}


def as_streaming_error(error: BaseException) -> BaseException:
    """``error`` as an instance of its own class and of PySpark's ``StreamingQueryException``."""
    cls = type(error)
    if isinstance(error, StreamingQueryException):
        return error
    made = _BRIDGED.get(cls)
    if made is None:
        made = type(cls.__name__, (cls, StreamingQueryException),
                    {"__module__": cls.__module__, "__str__": cls.__str__})  # fmt: skip
        made = _BRIDGED.setdefault(cls, made)
    bridged = made.__new__(made)
    bridged.args = error.args
    bridged.__dict__.update(error.__dict__)
    # PySpark's accessors (getMessage, getCondition...) read these.
    bridged.__dict__.update(_message=str(error), _errorClass=None, _messageParameters=None, _contexts=[])
    bridged.__cause__, bridged.__context__ = error.__cause__, error.__context__
    bridged.__traceback__ = error.__traceback__
    return bridged
