"""``spark.readStream.format("delta")``: a Delta table's commits as a Structured Streaming source.

A configured session's ``spark.readStream.format("delta").load(path)`` (or ``.table(name)``
for a table of serialake's catalog) returns a streaming DataFrame over the table, as
delta-spark's ``DeltaSource`` does:

- **Where it starts.** By default, with the table as of the ``load`` call (its *initial
  snapshot*: every live file, deletion vectors applied), then every commit after it.
  ``startingVersion`` (a version, or ``latest``: only commits after the query starts) and
  ``startingTimestamp`` (the first commit at or after it) read commits from there, without a
  snapshot. A query restarted from its checkpoint continues from its last offset instead.
- **What becomes rows.** Only ``dataChange`` AddFiles: an OPTIMIZE or REORG (its files
  ``dataChange=false``) adds nothing, so compaction never duplicates rows. A commit that
  removes data (``dataChange`` RemoveFiles: DELETE, UPDATE, MERGE, an overwrite) fails the
  query with Delta's error, unless ``ignoreDeletes`` (commits that only remove whole files,
  e.g. a partition's, are passed over), ``skipChangeCommits`` (every such commit is skipped,
  its added files too) or Delta's deprecated ``ignoreChanges`` (the files such a commit
  rewrites are read again: their rows come twice). A DELETE that marks rows in a deletion
  vector re-adds the file with a larger vector: a data change like any other.
- **How much per micro-batch.** ``maxFilesPerTrigger`` (default 1000, as Delta) and
  ``maxBytesPerTrigger``, counted in data files and their sizes; at least one file per
  batch. ``Trigger.AvailableNow`` reads up to the version current when the query starts, in
  batches of that size.
- **Metadata changes.** The stream's schema is the table's at the ``load`` call. A commit
  after it that changes the schema, the partitioning or the table properties stops the
  stream: the rows before that commit are delivered, then the query fails with an error
  naming the version and the change. Restarted from its checkpoint (``load`` again, so
  with the table's new schema), the query continues at that version. Metadata commits at or
  before the ``load`` version (read again with ``startingVersion``, or after a restart) are
  read with the newer schema: columns a file lacks are NULL; a different partitioning
  cannot be read as one stream and fails (start from a version after it). An identity
  column's high-water mark (every write to such a table moves it) is not a change.
- **The change data feed** (``readChangeFeed``): the table's columns then ``_change_type``,
  ``_commit_version`` and ``_commit_timestamp``; the initial snapshot as inserts of its
  version, then each commit's changes as ``core.log.cdf`` plans them (change files, else adds as
  inserts, removes as deletes, re-marked rows through deletion vectors), read on the
  executors. Data changes do not stop it; a commit's changes enter a micro-batch whole (as
  Delta admits them); a version without recorded change data fails the query.

Offsets are Delta's ``DeltaSourceOffset`` fields: ``reservoirId`` (the table id),
``reservoirVersion``, ``index`` (the last data file read within that version's files; -1:
none yet) and ``isStartingVersion`` (reading the initial snapshot of that version).

How: PySpark's Python data source API (``pyspark.sql.datasource``, streaming from PySpark
4.2 with admission control). ``load`` runs on the driver: it reads the table's metadata,
registers the source and hands Spark the schema and the metadata in its options. Spark runs
the offsets and partitions (``DeltaStreamReader``) in a Python process of its own, where
this module reads the log; each micro-batch's files are spread over tasks that read them
on the executors with pyarrow, as for tables on S3 (``spark.arrow_reader``: partition
values from the log, deletion vectors, column mapping by physical name, local paths and
``s3://`` objects alike). The S3 settings of the driver travel with the source class (never
in the options, which Spark shows in plans).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import pyspark.sql.types as T
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from serialake.core import DeltaLog
from serialake.core.log import cdf as core_cdf
from serialake.core.log.deltalog import CommitEntry, format_ms, to_millis
from serialake.core.model import properties as props
from serialake.core.model.actions import AddFile, CommitInfo, Metadata, RemoveFile
from serialake.core.model.column_mapping import mapping_mode
from serialake.core.model.schema import PrimitiveType, StructField, StructType
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
)
from serialake.spark.arrow_reader import ReadColumn, ReadTask, read_bins, read_task
from serialake.spark.backend import backend
from serialake.spark.cdf import changes_schema
from serialake.spark.schemas import to_spark_schema
from serialake.spark.streaming.changes import CHANGE_TYPE, change_bins, read_changes
from serialake.spark.streaming.metadata_changes import column_list, metadata_changes
from serialake.spark.streaming.offsets import (
    BASE_INDEX,
    END_INDEX,
    SOURCE_VERSION,
    Admission,
    Barrier,
    Offset,
    StreamingSourceError,
    VersionFiles,
)
from serialake.spark.streaming.options import DEFAULT_MAX_FILES, StreamOptions, flag, getter
from serialake.storage.datafiles import Access
from serialake.storage.s3 import S3LogStore, split_s3_uri, store_with

try:  # PySpark 4.2+: read limits (admission control) and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - refused in load() with a clear message
    ReadLimit = ReadAllAvailable = ReadMaxBytes = ReadMaxFiles = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["DeltaStreamReader", "DeltaStreamSource", "StreamingSourceError", "StreamOptions", "load"]

#: The name of the option carrying the stream's table version and metadata (JSON) to Spark's workers.
CONFIG_OPTION = "serialake.stream"


# ---------------------------------------------------------------------------------------------
# The driver side: load()
# ---------------------------------------------------------------------------------------------


def load(spark: SparkSession, path: Any, st: dict[str, Any], *, name: str | None = None) -> DataFrame:
    """``spark.readStream.format("delta").load(path)`` / ``.table(name)``: the table's stream.

    ``st`` is what the reader chain recorded (options, a schema). Runs PySpark's own reader
    (call it inside ``dropin.serialake_calls``).
    """
    from pyspark.sql.streaming.readwriter import DataStreamReader

    if ReadLimit is None:
        raise DeltaIllegalArgumentException(
            "Streaming reads of Delta tables need PySpark 4.2 or later (Python streaming sources with read limits)"
        )
    if path is None:
        raise DeltaIllegalArgumentException("'path' is not specified: spark.readStream.format('delta').load(path)")
    if not isinstance(path, str):
        raise DeltaIllegalArgumentException("A Delta table is streamed one path at a time: load(path) with a string")
    if st.get("schema") is not None:
        raise DeltaAnalysisException(
            "[DELTA_UNSUPPORTED_SCHEMA_DURING_READ] Delta does not support specifying the schema at read time: "
            f"the stream of {name or path} has the table's schema"
        )
    options = {k: v for k, v in st["options"].items() if k != "path"}
    get = getter(options)
    changes = flag(get, "readChangeFeed") or flag(get, "readChangeData")
    if flag(get, "withEventTimeOrder"):
        raise DeltaIllegalArgumentException(
            "withEventTimeOrder is not supported by serialake's Delta stream: the initial snapshot is read in "
            "file order, not event-time order"
        )
    StreamOptions.parse(options)  # bad values fail here, at load, as with Delta
    log = DeltaLog.for_table(path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table (no _delta_log commits found)")
    snapshot = log.update()
    if not snapshot.schema.fields:
        raise DeltaAnalysisException(
            f"[DELTA_SCHEMA_NOT_SET] Table {log.table_path} has no schema: write data into it or use CREATE TABLE "
            "to set the schema"
        )
    source = _source_class(log.table_path)
    _register(spark, source)
    if changes:
        _check_reserved(log.table_path, snapshot.schema)
    config = {
        "version": snapshot.version,
        "metadata": snapshot.metadata._to_obj(),
        "parallelism": backend(spark).default_parallelism(),
        "changes": changes,
    }
    schema = stream_schema(snapshot.metadata, changes=changes)
    reader = DataStreamReader(spark).format(source.name()).schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.option(CONFIG_OPTION, json.dumps(config)).load(log.table_path)


def stream_schema(metadata: Metadata, *, changes: bool = False) -> T.StructType:
    """The Spark schema of a stream over a table with ``metadata`` (what a batch read shows); of
    its change data feed: then ``_change_type``, ``_commit_version``, ``_commit_timestamp``."""
    return changes_schema(metadata.schema) if changes else to_spark_schema(metadata.schema)


def _check_reserved(table: str, schema: StructType) -> None:
    taken = core_cdf.reserved_columns_used(schema)
    if taken:
        raise DeltaAnalysisException(
            f"Cannot read the change data feed of {table} as a stream: its column(s) {', '.join(taken)} have the "
            "names of the change data feed's own columns"
        )


_classes: dict[str, type[DeltaStreamSource]] = {}


def _source_class(table_path: str) -> type[DeltaStreamSource]:
    """The source class for ``table_path``: the plain one locally; for S3, a class per set of S3
    settings that carries them (pickled by value with the class, so never shown in a plan)."""
    access = Access.here(table_path)
    if access.s3_settings is None:
        return DeltaStreamSource
    digest = hashlib.sha256(json.dumps(access.s3_settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    name = f"{DeltaStreamSource.SOURCE_NAME}_{digest}"
    cls = _classes.get(name)
    if cls is None:
        made = type(f"DeltaStreamSource_{digest}", (DeltaStreamSource,), {"SOURCE_NAME": name, "ACCESS": access})
        cls = _classes[name] = made
    return cls


def _register(spark: SparkSession, source: type[DeltaStreamSource]) -> None:
    """Register ``source`` with the session once (Spark keeps data sources per session)."""
    done = spark.__dict__.setdefault("_serialake_stream_sources", set())
    if source.SOURCE_NAME not in done:
        spark.dataSource.register(source)
        done.add(source.SOURCE_NAME)


# ---------------------------------------------------------------------------------------------
# The data source (Spark's Python workers)
# ---------------------------------------------------------------------------------------------


class DeltaStreamSource(DataSource):
    """The registered source: its options are the user's plus ``CONFIG_OPTION`` (set by ``load``)."""

    SOURCE_NAME: ClassVar[str] = "serialake_delta_stream"
    ACCESS: ClassVar[Access] = Access()

    @classmethod
    def name(cls) -> str:
        return cls.SOURCE_NAME

    def schema(self) -> T.StructType:
        config = json.loads(self.options[CONFIG_OPTION])
        return stream_schema(Metadata._from_obj(config["metadata"]), changes=bool(config.get("changes")))

    def streamReader(self, schema: T.StructType) -> DeltaStreamReader:  # noqa: N802 - PySpark's name
        return DeltaStreamReader(dict(self.options), schema, type(self).ACCESS)


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, micro-batch plans and reads of one stream (see the module docstring).

    Built in Spark's Python workers: the offsets and partitions in a long-lived process per
    query, ``read`` on the executors (the reader is pickled there before any log is read).
    """

    def __init__(self, options: Mapping[str, Any], schema: T.StructType, access: Access) -> None:
        config = json.loads(getter(options)(CONFIG_OPTION) or "{}")
        self.table = str(getter(options)("path"))
        self.version = int(config["version"])  # the table's version at load(): the stream's metadata
        self.metadata = Metadata._from_obj(config["metadata"])
        self.parallelism = max(1, int(config.get("parallelism") or 1))
        self.options = StreamOptions.parse(options)
        self.changes = bool(config.get("changes"))  # the change data feed (readChangeFeed)
        self.access = access
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.task = None if self.changes else _read_task(self.table, self.metadata, schema, access)
        if self.changes:  # change files carry _change_type; data files get it as a constant
            self.change_tasks = {
                (cdc, rows): _read_task(self.table, self.metadata, schema, access,
                                        change_type="stored" if cdc else "constant", with_rows=rows)
                for cdc, rows in ((True, False), (False, False), (False, True))
            }  # fmt: skip
        self._exclude = re.compile(self.options.exclude_regex) if self.options.exclude_regex else None
        self._log: DeltaLog | None = None
        self._initial: tuple[int, list[Any]] | None = None
        self._until: int | None = None
        self._metadata_at: dict[int, Metadata] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_log"] = None  # the executors read files, never the log
        state["_initial"] = None
        state["_metadata_at"] = {}
        return state

    # -- Spark's calls -------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        """Where a new query starts: before the initial snapshot, or before the starting version."""
        opts = self.options
        if opts.starting_latest:
            start = Offset(self._latest_version() + 1, BASE_INDEX, False)
        elif opts.starting_version is not None:
            start = Offset(self._check_starting_version(opts.starting_version), BASE_INDEX, False)
        elif opts.starting_timestamp is not None:
            start = Offset(self._version_from_timestamp(opts.starting_timestamp), BASE_INDEX, False)
        else:
            start = Offset(self.version, BASE_INDEX, True)
        if not start.initial:
            self._check_start_partitioning(start.version)
        return start.to_json(self.metadata.id)

    def getDefaultReadLimit(self) -> Any:  # noqa: N802 - PySpark's name
        if self.options.max_bytes is not None and self.options.max_files is None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadMaxFiles(self.options.max_files or DEFAULT_MAX_FILES)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        """``Trigger.AvailableNow``: read up to the version that is the latest now, no further."""
        self._until = self._latest_version()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        """The end of the next micro-batch from ``start``, within ``limit``; ``start`` when there is nothing new.

        A commit the stream cannot pass (a data change without the option allowing it, a
        metadata change) ends the batch before it; when it is the first thing after ``start``,
        its error is raised and the query stops there.
        """
        begin = self._offset(start)
        admission = self._admission(limit)
        last: tuple[int, int] | None = None
        for group in self._versions(begin):
            if isinstance(group, Barrier):
                if last is None:
                    raise group.error
                break
            if admission is not None and group.whole:
                if not admission.admit_all([f for _, f in group.files]):
                    break
            elif admission is not None:
                stopped = False
                for index, f in group.files:
                    if not admission.admit(f):
                        stopped = True
                        break
                    last = (group.version, index)
                if stopped:
                    break
            last = (group.version, END_INDEX)
        if last is None:
            return begin.to_json(self.metadata.id)
        version, index = last
        if index == END_INDEX:
            end = Offset(version + 1, BASE_INDEX, False)
        else:
            end = Offset(version, index, begin.initial and version == begin.version)
        return end.to_json(self.metadata.id)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The data files after ``start`` up to ``end``, grouped into tasks of about 128 MB."""
        begin, stop = self._offset(start), self._offset(end)
        files: list[Any] = []
        for group in self._versions(begin, stop):
            if isinstance(group, Barrier):
                raise group.error
            files.extend(f for index, f in group.files if (group.version, index) <= (stop.version, stop.index))
        if not files:
            return []
        if not self.changes:
            return [InputPartition(b) for b in read_bins(files, self.table, self.parallelism)]
        return [InputPartition(b) for b in change_bins(files, self.table, self.parallelism)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The rows of a partition's files as Arrow batches of the stream's schema (on an executor)."""
        for entry in partition.value:
            if self.changes:
                yield from self._read_changes(entry)
            else:
                assert self.task is not None
                yield from self.task.read_file(entry)

    def _read_changes(self, entry: dict[str, Any]) -> Iterator[Any]:
        return read_changes(self.change_tasks, self.arrow_schema, entry)

    def commit(self, end: dict[str, Any]) -> None:
        if not bool(end.get("isStartingVersion")):
            self._initial = None  # past the initial snapshot: its file list is not needed again

    # -- the scan ------------------------------------------------------------------------------

    def _versions(self, start: Offset, stop: Offset | None = None) -> Iterator[VersionFiles | Barrier]:
        """The files after ``start`` in stream order, one group per version (the initial snapshot,
        then each commit); a ``Barrier`` (and nothing after it) at a commit the stream cannot
        pass. Commits are read until the log ends, ``stop``'s version or ``Trigger.AvailableNow``'s."""
        version = start.version
        files: list[Any]
        if start.initial:
            files = self._snapshot_files(version)
            yield VersionFiles(version, [(i, f) for i, f in enumerate(files) if i > start.index], False)
            version += 1
        metadata: Metadata | None = None  # the metadata in effect (change data feed only)
        while True:
            if self._until is not None and version > self._until:
                return
            if stop is not None and (version > stop.version or (version == stop.version and stop.index < 0)):
                return
            entry = self._commit(version)
            if entry is None:
                return
            if self.changes:
                if metadata is None:
                    metadata = self._metadata_before(version)
                changed = self._commit_changes(entry, metadata)
                if isinstance(changed, Barrier):
                    yield changed
                    return
                metadata, files = changed
            else:
                found = self._commit_files(entry)
                if isinstance(found, Barrier):
                    yield found
                    return
                files = list(found)
            yield VersionFiles(version, [
                (i, f) for i, f in enumerate(files)
                if (version > start.version or start.initial or i > start.index)
                and (self._exclude is None or not self._exclude.search(f.path))
            ], self.changes)  # fmt: skip
            version += 1

    def _snapshot_files(self, version: int) -> list[Any]:
        """The live files of ``version`` in a fixed order (modification time, path), as Delta orders them."""
        if self._initial is None or self._initial[0] != version:
            try:
                snapshot = self._delta_log().snapshot(version=version)
            except FileNotFoundError as e:
                raise self._lost(version, e) from None
            adds = sorted(snapshot.all_files, key=lambda a: (a.modification_time, a.path))
            if self._exclude is not None:
                adds = [f for f in adds if not self._exclude.search(f.path)]
            files: list[Any] = adds
            if self.changes:  # every row an insert of the snapshot's version
                files = [core_cdf.FileRead(version, snapshot.timestamp, a.path, dict(a.partition_values or {}),
                                           a.size or 0, core_cdf.INSERT, a.deletion_vector) for a in adds]  # fmt: skip
            self._initial = (version, files)
        return self._initial[1]

    def _commit(self, version: int) -> CommitEntry | None:
        """Commit ``version``, or None when it is not written yet."""
        log = self._delta_log()
        try:
            return log.read_commit(version)
        except FileNotFoundError:
            if version > self._latest_version():
                return None
        try:  # it landed after the first read looked: read again, it is no gap
            return log.read_commit(version)
        except FileNotFoundError:
            raise self._lost(version, None) from None

    def _commit_files(self, entry: CommitEntry) -> list[AddFile] | Barrier:
        """The files of a commit that become rows (in commit order), or why the stream must stop at it."""
        version = entry.version
        adds: list[AddFile] = []
        removed: str | None = None
        meta: Metadata | None = None
        info: CommitInfo | None = None
        for action in entry.actions:
            if isinstance(action, AddFile):
                if action.data_change:
                    adds.append(action)
            elif isinstance(action, RemoveFile):
                if action.data_change and removed is None:
                    removed = action.path
            elif isinstance(action, Metadata):
                meta = action
            elif isinstance(action, CommitInfo):
                info = action
        if meta is not None:
            problem = self._metadata_problem(meta, version)
            if problem is not None:
                return Barrier(version, problem)
        if removed is None:
            return adds
        opts = self.options
        if opts.skip_change_commits:
            return []
        if adds and not opts.ignore_changes:
            change = removed
            if info is not None and info.operation:
                change = f"{info.operation} ({json.dumps(info.get('operationParameters') or {}, sort_keys=True)})"
            return Barrier(version, StreamingSourceError(
                f"[DELTA_SOURCE_TABLE_IGNORE_CHANGES] Detected a data update (for example {change}) in the source "
                f"table at version {version}. This is currently not supported. If this is going to happen "
                "regularly and you are okay to skip changes, set the option 'skipChangeCommits' to 'true'. If you "
                "would like the data update to be reflected, please restart this query with a fresh checkpoint "
                f"directory. The source table can be found at path {self.table}."
            ))  # fmt: skip
        if not adds and not (opts.ignore_deletes or opts.ignore_changes):
            return Barrier(version, StreamingSourceError(
                f"[DELTA_SOURCE_IGNORE_DELETE] Detected deleted data (for example {removed}) from streaming source "
                f"at version {version}. This is currently not supported. If you'd like to ignore deletes, set the "
                f"option 'ignoreDeletes' to 'true'. The source table can be found at path {self.table}."
            ))  # fmt: skip
        return adds

    def _commit_changes(
        self, entry: CommitEntry, metadata: Metadata
    ) -> tuple[Metadata, list[core_cdf.FileRead]] | Barrier:
        """The change data feed of a commit (``core.log.cdf``: its change files, else its adds as inserts
        and removes as deletes, re-marked rows through deletion vectors) and the metadata in effect
        after it; or why the stream must stop at it."""
        version = entry.version
        for action in entry.actions:
            if isinstance(action, Metadata):
                problem = self._metadata_problem(action, version)
                if problem is not None:
                    return Barrier(version, problem)
                metadata = action
        if not core_cdf.enabled(metadata):
            return Barrier(version, StreamingSourceError(
                f"[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [{version} , {version}] of "
                f"table {self.table} as change data was not recorded for version [{version}]. If you've enabled "
                "change data feed on this table, use `DESCRIBE HISTORY` to see when it was first enabled. "
                "Otherwise, to start recording change data, use `ALTER TABLE table_name SET TBLPROPERTIES "
                f"({props.ENABLE_CDF}=true)`."
            ))  # fmt: skip
        return metadata, list(core_cdf.version_changes(self.table, version, entry.timestamp, entry.actions).reads)

    def _metadata_before(self, version: int) -> Metadata:
        """The table's metadata in effect before commit ``version`` (the stream's after its version)."""
        if version > self.version:
            return self.metadata
        if version == 0:
            return Metadata(schema_string=None)  # nothing before the first commit: no change data
        found = self._metadata_at.get(version - 1)
        if found is None:
            found = self._delta_log().snapshot(version=version - 1).metadata
            self._metadata_at = {version - 1: found}
        return found

    # -- metadata ------------------------------------------------------------------------------

    def _metadata_problem(self, meta: Metadata, version: int) -> StreamingSourceError | None:
        """Why the stream (with the metadata of ``self.version``) cannot read on past ``meta`` at ``version``."""
        ours = self.metadata
        if meta.id != ours.id:
            return StreamingSourceError(
                f"[DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE] The streaming query was reading from an "
                f"unexpected Delta table (id = '{meta.id}', at version {version} of {self.table}). It used to read "
                f"from another Delta table (id = '{ours.id}') according to checkpoint. This may happen when you "
                "changed the code to read from a new table or you deleted and re-created a table. Please revert "
                "your change or delete your streaming query checkpoint to restart from scratch."
            )
        if version <= self.version:
            # History the stream's (newer) metadata already reflects: readable unless partitioned otherwise.
            if tuple(meta.partition_columns) != tuple(ours.partition_columns):
                return StreamingSourceError(
                    f"[DELTA_SCHEMA_CHANGED_WITH_STARTING_OPTIONS] Detected a partitioning change in version "
                    f"{version} of table {self.table}: its files are partitioned by "
                    f"{column_list(meta.partition_columns)}, the stream reads the table as of version {self.version}, "
                    f"partitioned by {column_list(ours.partition_columns)}, and cannot read both as one stream. Start "
                    "the query from scratch with a new checkpoint directory, from the latest snapshot (no "
                    "startingVersion / startingTimestamp) or from a version after the partitioning changed."
                )
            return None
        changes = metadata_changes(ours, meta)
        if not changes:
            return None
        schema_changed = any(not c.startswith("properties") for c in changes)
        kind = "DELTA_SCHEMA_CHANGED_WITH_VERSION" if schema_changed else "DELTA_METADATA_CHANGED_WITH_VERSION"
        what = "schema change" if schema_changed else "metadata change"
        return StreamingSourceError(
            f"[{kind}] Detected {what} in version {version} of table {self.table}: {'; '.join(changes)}.\n"
            f"streaming source schema: {ours.schema.simple_string()} (version {self.version})\n"
            f"data file schema: {meta.schema.simple_string()}\n"
            "The rows of the versions before it were delivered. Please try restarting the query: from its "
            f"checkpoint it continues at version {version} with the table's new schema, partitioning and "
            "properties. If this issue repeats across query restarts without making progress, you have made an "
            "incompatible schema change and need to start your query from scratch using a new checkpoint "
            "directory."
        )

    def _check_start_partitioning(self, version: int) -> None:
        """A stream from ``startingVersion``: the files from there must be partitioned as the stream reads them."""
        if version > self.version or version == 0:
            return  # version 0 holds the table's first metadata: the scan checks it
        try:
            meta = self._delta_log().snapshot(version=version).metadata
        except FileNotFoundError:
            return  # the commits from there are still checked one by one
        problem = self._metadata_problem(meta, version)
        if problem is not None:
            raise problem

    # -- the log -------------------------------------------------------------------------------

    def _delta_log(self) -> DeltaLog:
        if self._log is None:
            store = None
            if self.access.s3_settings is not None:
                store = _ShippedS3LogStore(self.access.s3_settings)
                if self.changes:  # core.log.cdf reads deletion vectors with this process's own S3 settings
                    _configure_s3(self.access.s3_settings)
            self._log = DeltaLog.for_table(self.table, store)
        return self._log

    def _latest_version(self) -> int:
        try:
            return self._delta_log().update().version
        except DeltaTableNotFoundError:
            raise StreamingSourceError(
                f"The Delta table at {self.table} read by this stream no longer exists (no _delta_log commits)"
            ) from None

    def _check_starting_version(self, version: int) -> int:
        latest = self._latest_version()
        if version > latest:
            raise StreamingSourceError(
                f"[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table to version {version}. Available versions: "
                f"[0, {latest}]. (startingVersion of the stream of {self.table}; use 'latest' to read only the "
                "commits after the query starts.)"
            )
        return version

    def _version_from_timestamp(self, timestamp: str) -> int:
        """The first version committed at or after ``timestamp`` (Delta's rule for ``startingTimestamp``)."""
        ms = to_millis(timestamp)
        stamps = self._delta_log().commit_timestamps()
        for version, ts in stamps:
            if ts >= ms:
                return version
        last = stamps[-1][1] if stamps else 0
        raise StreamingSourceError(
            f"[DELTA_TIMESTAMP_GREATER_THAN_COMMIT] The provided timestamp ({timestamp}) is after the latest version "
            f"available to this table ({format_ms(last)}) of {self.table}. Please use a timestamp before or at "
            f"{format_ms(last)}."
        )

    def _lost(self, version: int, error: BaseException | None) -> StreamingSourceError:
        cause = f" ({error})" if error is not None else ""
        return StreamingSourceError(
            f"[DELTA_LOG_FILE_NOT_FOUND_FOR_STREAMING_SOURCE] Version {version} of table {self.table}, which the "
            f"stream reads next, is no longer in the log{cause}: log files older than {props.LOG_RETENTION} are "
            "cleaned up. If you never deleted it, it's likely your query is lagging behind. Please delete its "
            "checkpoint to restart from scratch. To avoid this happening again, you can update your retention "
            "policy of your Delta table."
        )

    # -- offsets and limits ---------------------------------------------------------------------

    def _offset(self, value: Mapping[str, Any]) -> Offset:
        table_id = value.get("reservoirId")
        if table_id is not None and table_id != self.metadata.id:
            raise StreamingSourceError(
                f"[DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE] The streaming query was reading from an "
                f"unexpected Delta table (id = '{self.metadata.id}', at {self.table}). It used to read from another "
                f"Delta table (id = '{table_id}') according to checkpoint. This may happen when you changed the code "
                "to read from a new table or you deleted and re-created a table. Please revert your change or delete "
                "your streaming query checkpoint to restart from scratch."
            )
        source_version = int(value.get("sourceVersion", SOURCE_VERSION))
        if source_version != SOURCE_VERSION:
            raise StreamingSourceError(f"[DELTA_INVALID_SOURCE_VERSION] sourceVersion({source_version}) is invalid")
        return Offset(int(value["reservoirVersion"]), int(value["index"]), bool(value.get("isStartingVersion")))

    def _admission(self, limit: Any) -> Admission | None:
        if limit is None or isinstance(limit, ReadAllAvailable):
            return None
        opts = self.options
        files = opts.max_files if opts.max_files is not None else (
            DEFAULT_MAX_FILES if opts.max_bytes is None else END_INDEX
        )  # fmt: skip
        size = opts.max_bytes if opts.max_bytes is not None else END_INDEX
        if isinstance(limit, ReadMaxFiles):
            files = limit.max_files
        elif isinstance(limit, ReadMaxBytes):
            size = limit.max_bytes
        return Admission(files, size)


# ---------------------------------------------------------------------------------------------
# Reading files (the executors) and the log on S3 (the planning worker)
# ---------------------------------------------------------------------------------------------


def _read_task(
    table: str,
    metadata: Metadata,
    schema: T.StructType,
    access: Access,
    *,
    change_type: str | None = None,
    with_rows: bool = False,
) -> ReadTask:
    """``spark.arrow_reader``'s task for the stream's columns, in the Arrow types of ``schema``
    (the schema Spark gave the source, so the batches match what it expects).

    For the change data feed (``schema`` ends with its three columns): the table's columns and
    ``_change_type``, ``stored`` in the file (a change file) or a ``constant`` given as a
    partition value; ``with_rows`` adds the file path and row index columns.
    """
    import pyarrow as pa

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    fields: Sequence[StructField] = StructType.from_json(metadata.schema_string or "{}").fields
    extra = len(core_cdf.RESERVED_COLUMNS) if change_type is not None else 0
    if len(fields) + extra != len(arrow_schema):
        raise StreamingSourceError(
            f"The stream of {table} was given a schema of {len(arrow_schema)} columns; the table has {len(fields)}"
        )
    mapped = mapping_mode(metadata.configuration, table) != "none"
    task = read_task(
        access, table, fields, arrow_schema, metadata.partition_columns, mapped, with_file_path=with_rows
    )
    if change_type is None:
        return task
    kind = arrow_schema.field(len(fields))
    columns, parts = task.columns, task.partitions
    if change_type == "stored":
        columns += (ReadColumn(CHANGE_TYPE, CHANGE_TYPE, kind.type),)
    else:
        parts += ((CHANGE_TYPE, CHANGE_TYPE, PrimitiveType("string"), kind.type),)
    out = [*(arrow_schema.field(i) for i in range(len(fields))), kind]
    if with_rows:
        out += [pa.field("_file", pa.string(), False), pa.field("_row_index", pa.int64(), False)]
    return replace(task, columns=columns, partitions=parts, order=(*task.order, CHANGE_TYPE), schema=pa.schema(out))


def _configure_s3(settings: Mapping[str, Any]) -> None:
    """This process's S3 settings from shipped ones (``s3.worker_access``): Spark's planning
    worker of one stream, which has no settings of its own."""
    from serialake.storage import s3

    options = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings["config"].items()}
    if settings.get("client", {}).get("allow_http"):
        options["allow_http"] = "true"
    s3.configure(options)


class _ShippedS3LogStore(S3LogStore):
    """The S3 log store with the driver's settings (Spark's Python workers lack its ``configure``)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings

    def _locate(self, path: str) -> tuple[Any, str]:
        bucket, key = split_s3_uri(path)
        return store_with(bucket, self.settings), key
