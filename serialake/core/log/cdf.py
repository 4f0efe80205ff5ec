"""Change data feed (``delta.enableChangeDataFeed``): what each version changed, as files to read.

Writers (PROTOCOL.md "Add CDC File"): a DELETE / UPDATE / MERGE that rewrites rows on a
table with the feed enabled writes the changed rows to ``_change_data/`` files (``cdc``
actions, ``dataChange=false``, partition values as for data files) in the same commit,
each row with ``_change_type`` (``delete``, ``update_preimage``, ``update_postimage``,
``insert``). A commit that only adds files (an append), only removes whole files, or only
marks rows deleted in deletion vectors needs none: readers infer its rows.

Readers (``plan_changes``): a version with ``cdc`` actions is read from those files only;
a version without them from its ``add`` actions (``dataChange=true``) as inserts and its
``remove`` actions as deletes, each file's rows read through its own deletion vector. A
file removed and re-added in one version under another deletion vector (a DELETE with
deletion vectors) contributes the rows whose mark changed: newly marked rows are deletes,
unmarked rows inserts. ``_commit_version`` and ``_commit_timestamp`` are never stored: the
reader adds them (the in-commit timestamp, else the commit file's time, made increasing as
for time travel).

This module is pure Python: it reads the log and decides which rows of which files are
which changes; ``serialake.spark.cdf`` turns the plan into a DataFrame.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector
from serialake.core.model import properties as props
from serialake.core.model.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    Metadata,
    Protocol,
    RemoveFile,
)
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException

if TYPE_CHECKING:
    from serialake.core.log.deltalog import CommitEntry, DeltaLog
    from serialake.core.model.schema import StructType

__all__ = [
    "CHANGE_DATA_DIR",
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "DELETE",
    "INSERT",
    "REPLACING_OPERATIONS",
    "RESERVED_COLUMNS",
    "reserved_columns_used",
    "UPDATE_POSTIMAGE",
    "UPDATE_PREIMAGE",
    "ChangePlan",
    "FileRead",
    "VersionChanges",
    "commit_needs_change_data",
    "enabled",
    "plan_changes",
    "resolve_range",
    "version_changes",
]

CHANGE_DATA_DIR = "_change_data"
CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
RESERVED_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)


def reserved_columns_used(schema: StructType) -> list[str]:
    """The table's columns named like the change data feed's own (which make its changes unreadable)."""
    return [f.name for f in schema.fields if f.name.lower() in RESERVED_COLUMNS]

INSERT = "insert"
DELETE = "delete"
UPDATE_PREIMAGE = "update_preimage"
UPDATE_POSTIMAGE = "update_postimage"
CHANGE_TYPES = (DELETE, UPDATE_PREIMAGE, UPDATE_POSTIMAGE, INSERT)


def enabled(metadata: Metadata | None) -> bool:
    """Whether ``metadata`` turns the change data feed on (``delta.enableChangeDataFeed``)."""
    return metadata is not None and bool(props.get(metadata.configuration, props.ENABLE_CDF))


#: Operations that replace what they remove (no row copied or updated): their removed files'
#: rows are deleted and their added files' rows inserted, as readers infer them. ``WRITE``
#: counts in mode Overwrite without a predicate (replaceWhere may copy rows), ``STREAMING
#: UPDATE`` in output mode Complete.
REPLACING_OPERATIONS = frozenset(
    {
        "CREATE TABLE AS SELECT",
        "REPLACE TABLE AS SELECT",
        "CREATE OR REPLACE TABLE AS SELECT",
        "REPLACE TABLE",
        "CREATE OR REPLACE TABLE",
        "RESTORE",
    }
)


def commit_needs_change_data(
    actions: Iterable[Action], operation: str | None = None, parameters: Mapping[str, Any] | None = None
) -> str | None:
    """Why the data actions of a commit cannot be read as changes without ``cdc`` files, or None.

    New files (adds of paths the commit does not remove) read as inserts, removed files as
    deletes, and a file re-added under a new deletion vector as the rows whose mark
    changed; each is right alone, and deletes next to marks too. New files beside removed
    or re-marked files are a rewrite (copy-on-write, or new row versions): their copied or
    updated rows would be misread as deleted and inserted, unless ``operation`` replaces
    data wholesale (``REPLACING_OPERATIONS``: an overwrite without a predicate, a RESTORE).
    """
    if _replaces(operation, parameters or {}) or _replaces_matched_rows(operation, parameters or {}):
        return None
    removed: set[str] = set()
    added: dict[str, AddFile] = {}
    for a in actions:
        if isinstance(a, AddCDCFile):
            return None
        if isinstance(a, RemoveFile) and a.data_change:
            removed.add(a.path)
        elif isinstance(a, AddFile) and a.data_change:
            added[a.path] = a
    new = [p for p in added if p not in removed]
    if new and removed:
        return f"it removes data files (e.g. {sorted(removed)[0]}) and adds others (e.g. {new[0]})"
    return None


def _replaces(operation: str | None, parameters: Mapping[str, Any]) -> bool:
    if operation == "WRITE":
        return (
            parameters.get("mode") == "Overwrite"
            and not parameters.get("predicate")
            and not _replaces_matched_rows(operation, parameters)
        )
    if operation == "STREAMING UPDATE":
        return parameters.get("outputMode") == "Complete"
    return operation in REPLACING_OPERATIONS


def _replaces_matched_rows(operation: str | None, parameters: Mapping[str, Any]) -> bool:
    """A replaceOn / replaceUsing overwrite: its new files are the written rows, and it removes only
    matched rows (marked in deletion vectors, or files whose every row matched; a copy-on-write
    one that keeps rows writes change data). As delta-spark reads such a commit."""
    return (
        operation == "WRITE"
        and parameters.get("mode") == "Overwrite"
        and ("replaceOnCond" in parameters or "replaceUsingCols" in parameters)
    )


@dataclass(frozen=True)
class FileRead:
    """Rows of one file that are changes of one version.

    ``change_type`` None: a change data file, whose rows carry their own ``_change_type``.
    ``deletion_vector``: rows of the file not read (those already deleted when it was
    added or removed). ``rows``: only these rows are read (a deletion vector's change).
    """

    version: int
    timestamp: int  # ms since the epoch
    path: str
    partition_values: Mapping[str, str | None]
    size: int
    change_type: str | None
    deletion_vector: DeletionVectorDescriptor | None = None
    rows: RowIndexSet | None = None

    @property
    def is_change_file(self) -> bool:
        return self.change_type is None


@dataclass(frozen=True)
class VersionChanges:
    """The changes of one commit: the file rows to read."""

    version: int
    timestamp: int
    reads: tuple[FileRead, ...]


@dataclass(frozen=True)
class ChangePlan:
    """The changes of versions ``start`` to ``end`` (inclusive; none when ``end < start``).

    ``metadata``: the table as of ``end`` (its schema is the read schema; files written
    before a column was added read it as NULL).
    """

    table: str
    start: int
    end: int
    metadata: Metadata
    protocol: Protocol
    versions: tuple[VersionChanges, ...]

    @property
    def reads(self) -> list[FileRead]:
        return [r for v in self.versions for r in v.reads]


# ---------------------------------------------------------------------------------------------
# The version range
# ---------------------------------------------------------------------------------------------


def resolve_range(
    log: DeltaLog,
    *,
    start_version: int | None = None,
    start_timestamp: int | None = None,
    end_version: int | None = None,
    end_timestamp: int | None = None,
) -> tuple[int, int]:
    """``(start, end)`` versions of a change read, as Delta resolves its options; errors as Delta's.

    Timestamps are ms since the epoch. A starting timestamp means the first version
    committed at or after it; an ending timestamp the last version committed at or before
    it. An ending version past the latest reads up to the latest. ``end < start`` is
    returned (an empty read) only when both are timestamps falling between the same two
    commits.
    """
    table = log.table_path
    if start_version is not None and start_timestamp is not None:
        raise DeltaIllegalArgumentException(
            "Multiple starting arguments provided for CDC read. Please provide one of either "
            "startingTimestamp or startingVersion."
        )
    if end_version is not None and end_timestamp is not None:
        raise DeltaIllegalArgumentException(
            "Multiple ending arguments provided for CDC read. Please provide one of either "
            "endingTimestamp or endingVersion."
        )
    if start_version is None and start_timestamp is None:
        raise DeltaIllegalArgumentException(
            f"No startingVersion or startingTimestamp provided for the change data read of table {table}."
        )
    latest = log.update().version
    for name, v in (("startingVersion", start_version), ("endingVersion", end_version)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise DeltaIllegalArgumentException(f"{name} must be a version number (an integer >= 0), got {v!r}")
    stamps: list[tuple[int, int]] | None = None
    if start_timestamp is not None or end_timestamp is not None:
        stamps = log.commit_timestamps()
    if start_timestamp is not None:
        assert stamps is not None
        start = _version_at_or_after(table, stamps, start_timestamp)
    else:
        assert start_version is not None
        start = start_version
    if start > latest:
        raise DeltaIllegalArgumentException(
            f"Start version {start} for change data feed exceeds the latest table version {latest} (table {table})."
        )
    if end_timestamp is not None:
        assert stamps is not None
        end = _version_at_or_before(table, stamps, end_timestamp)
        if start_timestamp is not None:
            if start_timestamp > end_timestamp:
                raise _end_before_start(start, end)
            if end == start - 1:
                return start, end  # both between the same two commits: no change
    else:
        end = latest if end_version is None else min(end_version, latest)
        if end_version is not None and end_version < start:
            raise _end_before_start(start, end_version)
    if end < start:
        raise _end_before_start(start, end)
    return start, end


def _format_ms(ms: int) -> str:
    """A commit time as the errors show it (as ``core.log.deltalog.format_ms``; not imported: ``core.log.deltalog``
    reaches this module through ``core.txn.transaction``)."""
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _end_before_start(start: int, end: int) -> DeltaIllegalArgumentException:
    return DeltaIllegalArgumentException(
        f"CDC range from start {start} to end {end} was invalid. End cannot be before start."
    )


def _version_at_or_after(table: str, stamps: list[tuple[int, int]], ts: int) -> int:
    """The first version committed at or after ``ts`` (Delta's startingTimestamp)."""
    times = [t for _, t in stamps]
    i = bisect.bisect_left(times, ts)
    if i == len(stamps):
        last_v, last_t = stamps[-1]
        raise DeltaIllegalArgumentException(
            f"Timestamp {_format_ms(ts)} is after the latest version {last_v} of table {table} "
            f"({_format_ms(last_t)}). Use a timestamp at or before {_format_ms(last_t)}."
        )
    return stamps[i][0]


def _version_at_or_before(table: str, stamps: list[tuple[int, int]], ts: int) -> int:
    """The last version committed at or before ``ts`` (Delta's endingTimestamp); errors out of range."""
    times = [t for _, t in stamps]
    i = bisect.bisect_right(times, ts)
    if i == 0:
        first_v, first_t = stamps[0]
        raise DeltaIllegalArgumentException(
            f"The provided timestamp ({_format_ms(ts)}) is before the earliest version available to table "
            f"{table} (version {first_v}, {_format_ms(first_t)}). Please use a timestamp after {_format_ms(first_t)}."
        )
    if i == len(stamps) and times[-1] < ts:
        last_v, last_t = stamps[-1]
        raise DeltaIllegalArgumentException(
            f"Timestamp {_format_ms(ts)} is after the latest version {last_v} of table {table} "
            f"({_format_ms(last_t)}). Use a timestamp at or before {_format_ms(last_t)}."
        )
    return stamps[i - 1][0]


# ---------------------------------------------------------------------------------------------
# The changes of each version
# ---------------------------------------------------------------------------------------------

#: Commits past the end of a read scanned for metadata changes before loading the start's snapshot.
_METADATA_LOOKAHEAD = 64


def plan_changes(log: DeltaLog, start: int, end: int) -> ChangePlan:
    """The changes of versions ``start`` to ``end`` of ``log``'s table (``resolve_range`` gives them).

    Errors as Delta's when the feed was not enabled at ``start`` or was turned off by a
    version in the range (``DeltaAnalysisException`` naming the version and how to enable
    it), or when commits of the range are no longer in the log.
    """
    table = log.table_path
    latest = log.update()
    end = min(end, latest.version)
    if end < start:
        return ChangePlan(table, start, end, latest.metadata, latest.protocol, ())
    entries = [_read_commit(log, v, start, end) for v in range(start, end + 1)]
    start_meta = _metadata_at_start(log, entries, latest)
    if not enabled(start_meta):
        raise _not_recorded(table, start, start, end)
    meta = start_meta
    for e in entries[1:]:
        m = _metadata_of(e.items)
        if m is not None:
            if not enabled(m):
                raise _not_recorded(table, e.version, start, end)
            meta = m
    stamps = dict(log.commit_timestamps())  # after the reads: in-commit timestamps are known
    versions = []
    for e in entries:
        ts = e.timestamp if _has_ict(e.items) else stamps.get(e.version, e.timestamp)
        versions.append(version_changes(table, e.version, ts, e.actions))
    return ChangePlan(table, start, end, meta, latest.protocol, tuple(versions))


def _read_commit(log: DeltaLog, version: int, start: int, end: int) -> CommitEntry:
    try:
        return log.read_commit(version)
    except FileNotFoundError:
        raise DeltaAnalysisException(
            f"Cannot read the change data of table {log.table_path} for versions {start} to {end}: commit "
            f"{version} is no longer in the log (removed after delta.logRetentionDuration). Read from a later "
            "version."
        ) from None


def _metadata_of(items: Iterable[Any]) -> Metadata | None:
    found = None
    for a in items:
        if type(a) is Metadata:
            found = a
    return found


def _has_ict(items: Iterable[Any]) -> bool:
    return any(type(a) is CommitInfo and a.values.get("inCommitTimestamp") is not None for a in items)


def _metadata_at_start(log: DeltaLog, entries: Sequence[CommitEntry], latest: Any) -> Metadata:
    """The table's metadata as of ``entries[0]``'s version, loading a snapshot only when needed."""
    own = _metadata_of(entries[0].items)
    if own is not None:
        return own
    if any(_metadata_of(e.items) is not None for e in entries[1:]):
        return log.snapshot(version=entries[0].version).metadata
    last = entries[-1].version
    if latest.version - last <= _METADATA_LOOKAHEAD:
        later = log.commits_after(last, limit=latest.version - last) if latest.version > last else []
        if len(later) == latest.version - last and all(_metadata_of(e.items) is None for e in later):
            return latest.metadata  # no metadata change since the start: the latest one holds
    return log.snapshot(version=entries[0].version).metadata


def _not_recorded(table: str, version: int, start: int, end: int) -> DeltaAnalysisException:
    return DeltaAnalysisException(
        f"Error getting change data for range [{start} , {end}] of table {table} as change data was not "
        f"recorded for version [{version}]. If you've enabled change data feed on this table, use "
        "`DESCRIBE HISTORY` to see when it was first enabled. Otherwise, to start recording change data, use "
        f"`ALTER TABLE table_name SET TBLPROPERTIES ({props.ENABLE_CDF}=true)`."
    )


def version_changes(table: str, version: int, timestamp: int, actions: Sequence[Action]) -> VersionChanges:
    """The file rows that are the changes of one commit (see the module docstring).

    A MERGE that reports no inserted, updated or deleted rows changed nothing, whatever
    files it rewrote (as Delta reads it).
    """
    cdc = [a for a in actions if isinstance(a, AddCDCFile)]
    if cdc:
        reads = tuple(FileRead(version, timestamp, c.path, dict(c.partition_values or {}), c.size, None) for c in cdc)
        return VersionChanges(version, timestamp, reads)
    if _merge_without_changes(actions):
        return VersionChanges(version, timestamp, ())
    adds = {a.path: a for a in actions if isinstance(a, AddFile) and a.data_change}
    removes = {a.path: a for a in actions if isinstance(a, RemoveFile) and a.data_change}
    out: list[FileRead] = []
    for path, add in adds.items():
        if path not in removes:
            out.append(_whole(version, timestamp, add, INSERT))
    for path, rem in removes.items():
        again = adds.get(path)
        if again is None:
            out.append(_whole(version, timestamp, rem, DELETE))
            continue
        before = _marked(table, rem.deletion_vector)
        after = _marked(table, again.deletion_vector)
        deleted = after - before
        restored = before - after
        if deleted:
            out.append(_rows(version, timestamp, again, DELETE, deleted))
        if restored:
            out.append(_rows(version, timestamp, again, INSERT, restored))
    return VersionChanges(version, timestamp, tuple(out))


def _merge_without_changes(actions: Sequence[Action]) -> bool:
    for a in actions:
        if type(a) is CommitInfo and a.operation == "MERGE":
            metrics = a.values.get("operationMetrics") or {}
            keys = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
            return all(str(metrics.get(k)) == "0" for k in keys)
    return False


def _marked(table: str, dv: DeletionVectorDescriptor | None) -> RowIndexSet:
    return RowIndexSet.from_iter([]) if dv is None else read_deletion_vector(table, dv)


def _whole(version: int, timestamp: int, f: AddFile | RemoveFile, change_type: str) -> FileRead:
    return FileRead(
        version, timestamp, f.path, dict(f.partition_values or {}), f.size or 0, change_type, f.deletion_vector
    )


def _rows(version: int, timestamp: int, f: AddFile, change_type: str, rows: RowIndexSet) -> FileRead:
    return FileRead(version, timestamp, f.path, dict(f.partition_values or {}), f.size or 0, change_type, None, rows)
