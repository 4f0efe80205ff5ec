"""Exceptions, named as in delta-spark's ``delta.exceptions``, under one root.

Every concurrent-modification exception carries the facts as attributes (why, as a
``ConflictReason``; table, read version, winning version and operation, partition or
file), names its error class in Spark's style (``[DELTA_CONCURRENT_APPEND.ROW_LEVEL_CHANGES]``)
and its message ends with a ``Help:`` line saying what to do next.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "ConflictReason",
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadException",
    "ConcurrentModificationException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "CommitFailedError",
    "CommitOutcomeUnknownError",
    "CommitProtocolMismatchError",
    "DeltaAnalysisException",
    "DeltaConcurrentModificationException",
    "DeltaError",
    "DeltaIllegalArgumentException",
    "DeltaProtocolError",
    "DeltaTableNotFoundError",
    "ExecutorEnvironmentError",
    "CheckpointError",
    "CorruptLogError",
    "FileAlreadyExistsError",
    "InvalidTableError",
    "InvalidPropertyError",
    "MetadataChangedException",
    "ProtocolChangedException",
    "SchemaMismatchError",
    "StagingMismatchError",
    "WrittenFileMissingError",
    "StorageWriteError",
    "CommitWriteFailedError",
    "ConsistentReadError",
    "DerivedTableLagError",
    "UnsupportedFeatureError",
]


class DeltaError(Exception):
    """Root of every error this library raises on purpose."""


class DeltaIllegalArgumentException(DeltaError, ValueError):
    """A caller passed something invalid (named in the message)."""


class DeltaAnalysisException(DeltaError, ValueError):
    """The operation cannot run against this table as it is (schema, columns, condition)."""


class DeltaTableNotFoundError(DeltaAnalysisException, FileNotFoundError):
    """The path holds no Delta table."""


class ConsistentReadError(DeltaError):
    """A query over several tables found no instant at which to read them all (they kept committing)."""


class DerivedTableLagError(ConsistentReadError):
    """A derived table had not caught up with its sources within the wait a STRICT read allows."""


class InvalidPropertyError(DeltaIllegalArgumentException):
    """A table property key or value is not valid."""


class SchemaMismatchError(DeltaAnalysisException):
    """Data written does not match the table schema."""


class CorruptLogError(DeltaError, IOError):
    """A log file cannot be parsed or the log has gaps."""


class CheckpointError(DeltaError):
    """A background checkpoint failed (logged and kept in ``DeltaLog.last_checkpoint_error``, never
    raised into a commit): the table is intact, readers replay the commits instead."""


#: The cause and the way out when the driver cannot see what the executors wrote.
_NOT_SHARED_HELP = (
    "  Likely cause: the executors do not share the driver's file system, so they wrote "
    "their files where the driver cannot see them.\n"
    "Help: put the table on a file system that the driver and every executor mount at the "
    "same path (e.g. NFS), or on S3 (s3://); run a single-machine job with a local master (local[*])."
)


class StagingMismatchError(DeltaError, IOError):
    """The driver found other rows in a write's staging directory than the Spark job wrote.

    Nothing was committed. The usual cause: the executors do not share the driver's file
    system, so their files landed where the driver cannot see them.

    Attributes:
        table: table path.
        staging: the staging directory the driver listed.
        job_rows: rows the Spark job reports it wrote.
        found_rows: rows in the files the driver found.
        found_files: files the driver found.
    """

    def __init__(self, *, table: str, staging: str, job_rows: int, found_rows: int, found_files: int) -> None:
        self.table = table
        self.staging = staging
        self.job_rows = job_rows
        self.found_rows = found_rows
        self.found_files = found_files
        super().__init__(
            f"Write to table {table}: the Spark job wrote {job_rows} row(s), but the driver found "
            f"{found_rows} row(s) in {found_files} file(s) in the staging directory {staging}; "
            "nothing was committed.\n" + _NOT_SHARED_HELP
        )

    def __reduce__(self) -> Any:  # picklable across processes
        return (
            _rebuild_staging,
            (self.table, self.staging, self.job_rows, self.found_rows, self.found_files),
        )


def _rebuild_staging(table: str, staging: str, job_rows: int, found_rows: int, found_files: int) -> Any:
    return StagingMismatchError(
        table=table, staging=staging, job_rows=job_rows, found_rows=found_rows, found_files=found_files
    )


class ExecutorEnvironmentError(DeltaError, RuntimeError):
    """Spark's executors lack a module serialake's tasks import (serialake itself, pyarrow...):
    on a remote Spark Connect server, ship serialake (``serialake.spark.session.ship_serialake``
    / ``spark.addArtifacts``) or install it on the cluster."""

    def __init__(self, message: str, module: str | None = None) -> None:
        super().__init__(message)
        self.module = module


class WrittenFileMissingError(DeltaError, IOError):
    """A file the Spark job reports it wrote is not there for the driver. Nothing was committed.

    Raised by Spark's direct writer (``spark.serialake.dataFiles.io``), whose file list comes
    from the job. The usual cause: the executors write to a file system the driver does not see.

    Attributes:
        table: table path.
        path: the missing file.
        job_files: files the job reports it wrote (None: the job's record itself is missing).
    """

    def __init__(self, *, table: str, path: str, job_files: int | None) -> None:
        self.table = table
        self.path = path
        self.job_files = job_files
        reported = "its record of the files it wrote" if job_files is None else f"{job_files} file(s) written"
        super().__init__(
            f"Write to table {table}: the Spark job reports {reported}, but the driver cannot "
            f"find {path}; nothing was committed.\n" + _NOT_SHARED_HELP
        )

    def __reduce__(self) -> Any:  # picklable across processes
        return (_rebuild_missing, (self.table, self.path, self.job_files))


def _rebuild_missing(table: str, path: str, job_files: int | None) -> Any:
    return WrittenFileMissingError(table=table, path=path, job_files=job_files)


class InvalidTableError(DeltaError, ValueError):
    """The log holds an action no Delta reader may accept: the table is neither read nor written.

    Raised when the action enters a snapshot (commit replay or checkpoint read), so no
    commit is ever made on top of it. Not an ``OSError``: retrying cannot help.

    Attributes:
        table: table path.
        version: the version of the commit or checkpoint holding the action (None if unknown).
        file: that log file (``_delta_log/00000000000000000003.json``), when known.
        field: the offending field, as ``action.field`` (``add.size``, ``metaData.partitionColumns``).
        reason: what is wrong with it.
        data_file: the data file the action describes, when one is involved.
    """

    default_help = (
        "A Delta reader must refuse this table. Fix or remove the action with the tool that wrote it "
        "(the file's writer broke the Delta protocol); the versions before it can still be read (time travel)."
    )

    def __init__(
        self,
        reason: str,
        *,
        table: str,
        field: str,
        version: int | None = None,
        file: str | None = None,
        line: int | None = None,
        data_file: str | None = None,
        help: str | None = None,  # noqa: A002 - public keyword (as the .help attribute); pickling passes it
    ) -> None:
        self.reason = reason
        self.table = table
        self.field = field
        self.version = version
        self.file = file
        self.line = line
        self.data_file = data_file
        self.help = help or self.default_help
        where = f" at version {version}" if version is not None else ""
        if file:
            where += f" ({file}{f', line {line}' if line else ''})"
        detail = f" (data file {data_file})" if data_file else ""
        super().__init__(f"Table {table} is invalid{where}: {field}: {reason}{detail}.\nHelp: {self.help}")

    def __reduce__(self) -> Any:  # picklable across processes
        kwargs = dict(table=self.table, field=self.field, version=self.version, file=self.file, line=self.line,
                      data_file=self.data_file, help=self.help)
        return (_rebuild, (type(self), self.reason, kwargs))


class DeltaProtocolError(DeltaError):
    """The table's protocol forbids the operation."""


class UnsupportedFeatureError(DeltaProtocolError, NotImplementedError):
    """The table needs a reader or writer feature this library does not support."""


class FileAlreadyExistsError(DeltaError, FileExistsError):
    """Put-if-absent found the file already there: another writer won that version."""


class CommitFailedError(DeltaError):
    """The commit could not be completed (retries exhausted, or a non-retryable store error)."""


class CommitOutcomeUnknownError(CommitFailedError):
    """The commit may or may not have landed (an I/O error hid its outcome); find ``txn_id`` in the log."""

    def __init__(self, message: str, *, txn_id: str, version: int | None = None) -> None:
        super().__init__(message)
        self.txn_id = txn_id
        self.version = version


class GroupPublicationError(CommitFailedError):
    """A transaction across tables was decided committed, but a commit by a writer outside serialake took
    the version reserved for it in one table and conflicts with it (the one case a protocol without a
    catalog cannot prevent: docs/concurrency.md, "Transactions across tables")."""

    def __init__(self, message: str, *, table: str, txn_id: str, foreign_version: int | None) -> None:
        super().__init__(message)
        self.table = table
        self.txn_id = txn_id
        self.foreign_version = foreign_version


class CommitProtocolMismatchError(CommitFailedError):
    """The table's writers do not all commit through one protocol (S3 conditional PUT, DynamoDB).

    Raised before anything of this transaction is committed, or where its commit lost to a
    writer outside the protocol: nothing of it is in the table. Attributes: ``table``,
    ``version`` (the commit involved) and ``combination`` (which protocols met).
    """

    def __init__(self, message: str, *, table: str, version: int | None, combination: str) -> None:
        super().__init__(message)
        self.table = table
        self.version = version
        self.combination = combination

    def __reduce__(self) -> Any:  # picklable across processes
        return (_rebuild_mismatch, (str(self), self.table, self.version, self.combination))


def _rebuild_mismatch(message: str, table: str, version: int | None, combination: str) -> CommitProtocolMismatchError:
    return CommitProtocolMismatchError(message, table=table, version=version, combination=combination)


class StorageWriteError(DeltaError):
    """A write to the table's storage certainly failed: nothing of it is visible.

    Attributes: ``table``, ``path`` (the file being written), ``errno`` and ``strerror``
    (the operating system's error), ``version`` (the commit or checkpoint version, when
    one is involved).
    """

    def __init__(
        self, message: str, *, table: str, path: str, errno: int | None, strerror: str | None,
        version: int | None = None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.path = path
        self.errno = errno
        self.strerror = strerror
        self.version = version

    def __reduce__(self) -> Any:  # picklable across processes
        return (
            _rebuild_storage_error,
            (type(self), str(self), self.table, self.path, self.errno, self.strerror, self.version),
        )


def _rebuild_storage_error(
    cls: type[StorageWriteError], message: str, table: str, path: str, errno: int | None, strerror: str | None,
    version: int | None,
) -> StorageWriteError:
    return cls(message, table=table, path=path, errno=errno, strerror=strerror, version=version)


class CommitWriteFailedError(StorageWriteError, CommitFailedError):
    """Writing the commit file failed before it could appear: nothing was committed (retrying is safe)."""


class ConcurrentModificationException(DeltaError, RuntimeError):
    """Python-side stand-in for ``java.util.ConcurrentModificationException``."""


class ConflictReason(StrEnum):
    """Why a commit conflicted: the rule that decided, one member per cause (``e.conflict_reason``).

    The sub-class of the exception's error class, in Databricks' style:
    ``ConcurrentAppendException`` with ``ROW_LEVEL_CHANGES`` has error class
    ``DELTA_CONCURRENT_APPEND.ROW_LEVEL_CHANGES`` (``e.getErrorClass()``). ``retryable``
    says whether running the same operation again, on the table as it now is, can succeed
    (docs/concurrency.md, "Why a commit conflicted: the reason field").
    """

    #: ProtocolChangedException: another writer created the table first (this one read no table).
    CONCURRENT_CREATE = "CONCURRENT_CREATE"
    #: ProtocolChangedException: both created or replaced the whole table (CREATE/REPLACE TABLE).
    CONCURRENT_REPLACE = "CONCURRENT_REPLACE"
    #: ProtocolChangedException: the winner changed the protocol, and this transaction changes it too.
    PROTOCOL_CHANGE = "PROTOCOL_CHANGE"
    #: ProtocolChangedException: the winner dropped a table feature the table had when this one read it.
    FEATURE_DROPPED = "FEATURE_DROPPED"
    #: ProtocolChangedException: the winner upgraded the table to a protocol this library cannot write.
    UNSUPPORTED_PROTOCOL = "UNSUPPORTED_PROTOCOL"
    #: MetadataChangedException: the winner changed the schema, partitioning, properties or table id.
    METADATA_CHANGE = "METADATA_CHANGE"
    #: MetadataChangedException: the winner's metadata change alone would have been adopted (a feature
    #: enabled, identity values allocated), but this transaction writes metadata too.
    BOTH_CHANGE_METADATA = "BOTH_CHANGE_METADATA"
    #: ConcurrentTransactionException: the winner committed an application id (``txn``) this one read or writes.
    SAME_APP_ID = "SAME_APP_ID"
    #: ConcurrentTransactionException: the winner wrote a metadata domain this transaction writes too.
    SAME_DOMAIN = "SAME_DOMAIN"
    #: ConcurrentTransactionException: a transaction across tables (``core.txn.group``) was aborted by
    #: another writer or reader that met its lock undecided (docs/concurrency.md, "Transactions across tables").
    GROUP_ABORTED = "GROUP_ABORTED"
    #: ConcurrentAppendException: this transaction read the whole table; any new file would have been read.
    EMPTY_READ_PREDICATES = "EMPTY_READ_PREDICATES"
    #: ConcurrentAppendException: a new file lies in a partition this transaction's predicates read
    #: (decided on the file's partition values, no row looked at).
    FILE_LEVEL_CHANGES = "FILE_LEVEL_CHANGES"
    #: ConcurrentAppendException / ConcurrentDeleteReadException: rows were checked one by one (deletion
    #: vectors, row-level concurrency) and a row added, or deleted, by the winner matches this one's read.
    ROW_LEVEL_CHANGES = "ROW_LEVEL_CHANGES"
    #: ConcurrentDeleteReadException / ConcurrentDeleteDeleteException: the winner removed a file this
    #: transaction read, or removes too (file level: the rows could not be told apart).
    FILE_REMOVED = "FILE_REMOVED"
    #: ConcurrentDeleteDeleteException: both deleted or updated the same row(s) of one file.
    SAME_ROWS_DELETED = "SAME_ROWS_DELETED"

    @property
    def retryable(self) -> bool:
        """Whether the same operation, run again on the table as it now is, can succeed."""
        return self not in _NOT_RETRYABLE


#: Reasons a plain retry cannot fix: create as an append instead, upgrade serialake, or stop the
#: other writer of the application id (its batch is in the table already).
_NOT_RETRYABLE = frozenset(
    {ConflictReason.CONCURRENT_CREATE, ConflictReason.UNSUPPORTED_PROTOCOL, ConflictReason.SAME_APP_ID}
)

#: delta-spark's SQL state of every conflict error class.
_CONFLICT_SQL_STATE = "2D521"


class DeltaConcurrentModificationException(ConcurrentModificationException):
    """A concurrent commit conflicts with this transaction; nothing of it was committed.

    Attributes:
        conflict_reason: why, as a :class:`ConflictReason` (the sub-class of the error class).
        reason: why, in words.
        table: table path.
        read_version: the version this transaction read.
        winning_version: the conflicting commit's version.
        winning_operation: that commit's operation (e.g. ``DELETE``).
        partition: the partition involved, as ``{col: value}``, when known.
        file: the data file involved, when known.
        detail: what matched (predicate, app id, domain, ...).
        help: what to do next.
    """

    default_help = "Retry the operation; it read data that changed while it ran."
    #: delta-spark's error class (``DELTA_CONCURRENT_APPEND``, ...); None on this root class.
    error_class: str | None = None
    #: The reason when the raiser gives none (serialake's rules always give one).
    default_conflict_reason: ConflictReason | None = None

    def __init__(
        self,
        reason: str,
        *,
        conflict_reason: ConflictReason | str | None = None,
        table: str | None = None,
        read_version: int | None = None,
        winning_version: int | None = None,
        winning_operation: str | None = None,
        winning_commit_info: dict[str, Any] | None = None,
        partition: dict[str, str | None] | None = None,
        file: str | None = None,
        detail: str | None = None,
        help: str | None = None,  # noqa: A002 - public keyword (as the .help attribute); pickling passes it
    ) -> None:
        self.reason = reason
        self.conflict_reason: ConflictReason | None = (
            ConflictReason(conflict_reason) if conflict_reason is not None else self.default_conflict_reason
        )
        self.table = table
        self.read_version = read_version
        self.winning_version = winning_version
        self.winning_operation = winning_operation
        self.winning_commit_info = winning_commit_info or {}
        self.partition = partition
        self.file = file
        self.detail = detail
        self.help = help or self.default_help
        super().__init__(self._message())

    def getErrorClass(self) -> str | None:  # noqa: N802 - PySpark's name
        """The error class, as PySpark's errors give it: ``DELTA_CONCURRENT_APPEND.ROW_LEVEL_CHANGES``."""
        parts = [p for p in (self.error_class, self.conflict_reason and self.conflict_reason.value) if p]
        return ".".join(parts) or None

    def getCondition(self) -> str | None:  # noqa: N802 - PySpark's name
        """The error condition (PySpark 4's name for the error class)."""
        return self.getErrorClass()

    def getSqlState(self) -> str:  # noqa: N802 - PySpark's name
        """delta-spark's SQL state of concurrent-modification errors."""
        return _CONFLICT_SQL_STATE

    def getMessageParameters(self) -> dict[str, str]:  # noqa: N802 - PySpark's name
        """The message's parameters, under delta-spark's names (only those known)."""
        params = {
            "tableName": self.table,
            "operation": self.winning_operation,
            "version": None if self.winning_version is None else str(self.winning_version),
            "readVersion": None if self.read_version is None else str(self.read_version),
            "reason": self.conflict_reason.value if self.conflict_reason else None,
            "partitionValues": (
                ", ".join(f"{k}={v if v is not None else 'NULL'}" for k, v in self.partition.items())
                if self.partition
                else None
            ),
            "file": self.file,
        }
        return {k: v for k, v in params.items() if v is not None}

    def _message(self) -> str:
        error_class = self.getErrorClass()
        bracket = f"[{error_class}] " if error_class else ""
        lines = [f"{type(self).__name__}: {bracket}{self.reason}"]
        if self.table is not None:
            lines.append(f"  Table: {self.table}")
        if self.winning_version is not None:
            op = f" ({self.winning_operation})" if self.winning_operation else ""
            lines.append(
                f"  Conflicting commit: version {self.winning_version}{op}; "
                f"this transaction read version {self.read_version}."
            )
        if self.partition:
            part = ", ".join(f"{k}={v if v is not None else 'NULL'}" for k, v in self.partition.items())
            lines.append(f"  Partition: {part}")
        if self.file:
            lines.append(f"  File: {self.file}")
        if self.detail:
            lines.append(f"  Detail: {self.detail}")
        lines.append(f"Help: {self.help}")
        return "\n".join(lines)

    def __reduce__(self) -> Any:  # picklable across processes
        return (
            _rebuild,
            (
                type(self),
                self.reason,
                dict(
                    conflict_reason=self.conflict_reason,
                    table=self.table,
                    read_version=self.read_version,
                    winning_version=self.winning_version,
                    winning_operation=self.winning_operation,
                    winning_commit_info=self.winning_commit_info,
                    partition=self.partition,
                    file=self.file,
                    detail=self.detail,
                    help=self.help,
                ),
            ),
        )


def _rebuild(cls: type, reason: str, kwargs: dict[str, Any]) -> Any:
    return cls(reason, **kwargs)


class ProtocolChangedException(DeltaConcurrentModificationException):
    """The protocol changed concurrently (upgrade, feature added or dropped, concurrent create)."""

    error_class = "DELTA_PROTOCOL_CHANGED"
    default_conflict_reason = ConflictReason.PROTOCOL_CHANGE

    default_help = (
        "The table was upgraded, created or replaced concurrently. Reload the table and retry; "
        "if the new protocol needs a feature this library lacks, upgrade serialake."
    )


class MetadataChangedException(DeltaConcurrentModificationException):
    """The metadata (schema, properties, partitioning) changed concurrently."""

    error_class = "DELTA_METADATA_CHANGED"
    default_conflict_reason = ConflictReason.METADATA_CHANGE

    default_help = (
        "A concurrent ALTER TABLE or schema change committed first. Reload the table and retry "
        "against the new schema/properties; schedule metadata changes when no writer runs."
    )


class ConcurrentTransactionException(DeltaConcurrentModificationException):
    """Another writer committed the same application transaction id or domain."""

    error_class = "DELTA_CONCURRENT_TRANSACTION"
    default_conflict_reason = ConflictReason.SAME_APP_ID

    default_help = (
        "Two writers use the same application id (e.g. two streaming queries with one checkpoint "
        "location). Never run them at the same time; give each writer its own app id."
    )


class ConcurrentWriteException(DeltaConcurrentModificationException):
    """A concurrent commit made this one-shot commit (restore, clone) impossible."""

    error_class = "DELTA_CONCURRENT_WRITE"


class ConcurrentAppendException(DeltaConcurrentModificationException):
    """Files were added concurrently to data this transaction read."""

    error_class = "DELTA_CONCURRENT_APPEND"
    default_conflict_reason = ConflictReason.FILE_LEVEL_CHANGES

    default_help = (
        "Make the separation explicit in the condition: add the partition values to it "
        "(e.g. t.date = '2024-01-01' in the MERGE condition), or partition the table by the "
        "columns of your conditions; under Serializable, consider WriteSerializable "
        "(blind appends then do not conflict)."
    )


class ConcurrentDeleteReadException(DeltaConcurrentModificationException):
    """A file this transaction read was removed concurrently."""

    error_class = "DELTA_CONCURRENT_DELETE_READ"
    default_conflict_reason = ConflictReason.FILE_REMOVED

    default_help = (
        "A concurrent DELETE, UPDATE or MERGE rewrote a file this operation read. Retry it; "
        "to avoid this, partition the table by the columns of both operations' conditions "
        "and put the partition values in the conditions."
    )


class ConcurrentDeleteDeleteException(DeltaConcurrentModificationException):
    """A file this transaction removes was removed concurrently."""

    error_class = "DELTA_CONCURRENT_DELETE_DELETE"
    default_conflict_reason = ConflictReason.FILE_REMOVED

    default_help = (
        "Another operation (often a concurrent OPTIMIZE or DELETE) removed the same file. Retry; "
        "do not run two compactions over the same partitions at once (with deletion vectors "
        "enabled, bin-packing compactions do not conflict with each other or with DML)."
    )
