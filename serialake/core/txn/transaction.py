"""Optimistic transactions: record what was read, then validate and commit.

A transaction is pinned to the snapshot it started from. It records its reads
(``filter_files``, ``read_whole_table``, ``txn_version``), and ``commit`` writes the next
version with put-if-absent. When another writer won that version, the winners are read
(only the new commit files, by their summary) and checked in order by
``serialake.core.txn.conflicts``; with no conflict the commit is retried at the next version.
A commit whose outcome was lost is recognised on retry by its ``txnId``.
"""

from __future__ import annotations

import json
import os
import posixpath
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from serialake.core.log import cdf
from serialake.core.model import column_mapping, features, uniform
from serialake.core.model import properties as props
from serialake.core.model.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    FileAction,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    actions_to_jsonl,
    now_ms,
)
from serialake.core.predicates import row_eval
from serialake.core.txn import identity_rebase, row_level
from serialake.core.txn.compaction_rebase import discard_rebase_dvs
from serialake.core.txn.conflicts import check_winner
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.summaries import MatchedRows, ReadPredicate, TransactionInfo, WinnerSummary
from serialake.exceptions import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    CommitWriteFailedError,
    CorruptLogError,
    DeltaAnalysisException,
    DeltaConcurrentModificationException,
    DeltaIllegalArgumentException,
    FileAlreadyExistsError,
    InvalidPropertyError,
    UnsupportedFeatureError,
)
from serialake.storage.base import (
    TRANSIENT_ERRNOS,
    LogStore,
    PreparedPut,
    WriteNotDoneError,
    WriteNotDurableError,
    errno_text,
    os_error_advice,
)
from serialake.storage.s3 import S3_SCHEMES

if TYPE_CHECKING:
    from serialake.core.dv.deletion_vectors import RowIndexSet
    from serialake.core.log.deltalog import DeltaLog
    from serialake.core.log.snapshot import Snapshot
    from serialake.core.predicates.row_eval import RowEvaluator

VERSION = "serialake"

READ_TABLES_KEY = "serialake.readTables"  # commitInfo: tables (and versions) a write was computed from

COMMIT_MAX_ATTEMPTS = "commit.max-attempts"
COMMIT_MAX_ATTEMPTS_DEFAULT = 10_000
COMMIT_MAX_DURATION_S = "commit.max-duration-s"
COMMIT_MAX_DURATION_S_DEFAULT = 600.0
#: Retries of a commit write that certainly failed with a transient errno (EINTR, EAGAIN, EIO, EBUSY).
TRANSIENT_WRITE_RETRIES = 3
#: Commit writes in a row whose outcome was unknown (each then checked in the log) before giving up.
UNKNOWN_WRITE_RETRIES = 20
COMMIT_BACKOFF_BASE_S = "commit.backoff-base-s"
COMMIT_BACKOFF_BASE_S_DEFAULT = 0.0005
COMMIT_BACKOFF_MAX_S = "commit.backoff-max-s"
COMMIT_BACKOFF_MAX_S_DEFAULT = 0.05


@dataclass(frozen=True)
class CommitOptions:
    """Retry policy of the commit loop."""

    max_attempts: int = COMMIT_MAX_ATTEMPTS_DEFAULT
    max_duration_s: float = COMMIT_MAX_DURATION_S_DEFAULT
    backoff_base_s: float = COMMIT_BACKOFF_BASE_S_DEFAULT
    backoff_max_s: float = COMMIT_BACKOFF_MAX_S_DEFAULT


_DEFAULT_OPTIONS = CommitOptions()

#: Transaction ids not handed out yet (``new_txn_id``); emptied in a forked child.
_TXN_IDS: list[str] = []
_TXN_IDS_BATCH = 64
_TXN_IDS_LOCK = threading.Lock()


def new_txn_id() -> str:
    """A random (version 4, RFC 4122 variant) UUID for a transaction's ``commitInfo.txnId``, as text.

    Drawn from a pool filled ``_TXN_IDS_BATCH`` at a time from one ``os.urandom`` call (the
    source ``uuid.uuid4`` reads), so a commit makes one system call fewer. A forked child
    empties the pool it inherited, so two processes never hand out the same id.
    """
    try:
        return _TXN_IDS.pop()  # (atomic: the common path takes no lock)
    except IndexError:
        pass
    with _TXN_IDS_LOCK:
        if not _TXN_IDS:
            _TXN_IDS.extend(_uuid4_texts(os.urandom(16 * _TXN_IDS_BATCH)))
        return _TXN_IDS.pop()


def _uuid4_texts(raw: bytes) -> list[str]:
    """``str(uuid.UUID(bytes=chunk, version=4))`` of each 16-byte chunk of ``raw``, formatted directly."""
    out = []
    h = raw.hex()
    for i in range(0, len(h), 32):
        c = h[i : i + 32]
        variant = "89ab"[int(c[16], 16) & 3]  # the two top bits of byte 8: 10
        out.append(f"{c[:8]}-{c[8:12]}-4{c[13:16]}-{variant}{c[17:20]}-{c[20:]}")
    return out


def _after_fork_in_child() -> None:
    global _TXN_IDS_LOCK
    _TXN_IDS_LOCK = threading.Lock()  # (a thread of the parent may have held it at the fork)
    _TXN_IDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class HistoryRead:
    """A read of the table at a version before the transaction's own (see ``record_read``)."""

    version: int
    predicate: ReadPredicate
    files: dict[str, AddFile]
    metadata: Metadata
    protocol: Protocol


@dataclass(frozen=True)
class CommitResult:
    """What a successful commit did: its version, attempts, and the winners it rebased over.

    ``work_already_done``: rebasing over the winners left nothing to write (e.g. a compaction
    whose every output a concurrent compaction already made); no version was written and
    ``version`` is the latest winner checked, the version that already reflects the work.
    """

    version: int
    attempts: int
    winners_checked: int
    duration_s: float
    work_already_done: bool = False


class OptimisticTransaction:
    """One write to a table (see module docstring)."""

    def __init__(
        self,
        delta_log: DeltaLog,
        snapshot: Snapshot | None,
        *,
        isolation_level: str | None = None,
        options: CommitOptions | None = None,
    ) -> None:
        self.delta_log = delta_log
        self.snapshot = snapshot
        self.read_version = snapshot.version if snapshot is not None else -1
        self.txn_id = new_txn_id()
        self.options = options or _DEFAULT_OPTIONS
        self._isolation_override = _parse_level(isolation_level) if isolation_level else None
        self._new_metadata: Metadata | None = None
        self._new_protocol: Protocol | None = None
        self._replaces_table = False  # update_metadata(replace_table=True): CREATE OR REPLACE / REPLACE
        self.read_predicates: list[ReadPredicate] = []
        self.read_files: dict[str, AddFile] = {}
        self.read_whole = False
        self._external_adds = False  # allow_external_files(): a shallow clone's commit
        self._live_paths: set[str] | None = None
        self.read_app_ids: set[str] = set()
        self.identity_allocations: dict[str, Any] = {}  # see record_identity_allocation
        self.matched_rows: dict[str, MatchedRows] = {}  # see record_matched_rows
        # Reads of this table made at earlier versions (a DataFrame read before the transaction
        # started): checked against every commit after their own version, not only after ours.
        self.history_reads: list[HistoryRead] = []
        # Other tables (and time-travel reads of this one) read to compute the write: path -> versions.
        self.table_reads: dict[str, set[int]] = {}
        self.committed: CommitResult | None = None
        # The actions of the commit as written, after rebasing ([] when nothing was written).
        self.committed_actions: list[Action] | None = None
        self.start_time = time.monotonic()

    # -- what the transaction sees -----------------------------------------------
    @property
    def table_path(self) -> str:
        return self.delta_log.table_path

    @property
    def metadata(self) -> Metadata | None:
        """The metadata as this transaction will commit it."""
        return self._new_metadata or (self.snapshot.metadata if self.snapshot else None)

    @property
    def protocol(self) -> Protocol | None:
        return self._new_protocol or (self.snapshot.protocol if self.snapshot else None)

    @property
    def is_new_table(self) -> bool:
        return self.snapshot is None

    @property
    def creates_table(self) -> bool:
        """This commit creates the table or replaces it whole (its metadata is the table's first)."""
        return self.snapshot is None or self._replaces_table

    def set_new_table_defaults(self, defaults: Mapping[str, str]) -> None:
        """Properties a table being created gets unless its metadata sets them (explicitly, or by a
        session default): added to this commit's metadata, the protocol raised to what they need.
        Used where a layout implies a default (``clustering.cluster_table``: deletion vectors)."""
        meta = self._new_metadata
        if meta is None or not self.creates_table:
            return
        given = {k.lower() for k in meta.configuration}
        missing = {k: v for k, v in defaults.items() if k.lower() not in given}
        if not missing:
            return
        conf = props.validate_properties({**meta.configuration, **missing}, table=self.table_path)
        self._new_metadata = replace(meta, configuration=conf)
        needed = features.required_protocol(conf, base=self.protocol)
        if needed != self.protocol:
            self._new_protocol = needed

    def update_metadata(
        self,
        metadata: Metadata,
        *,
        replace_table: bool = False,
        upgrade_uniform: bool = False,
        ignore_defaults: bool = False,
    ) -> None:
        """Replace the table metadata in this commit (schema, partitioning, properties).

        ``replace_table``: this commit creates or replaces the whole table (CREATE [OR
        REPLACE] TABLE): it writes the protocol too, as Delta does, so that a concurrent
        creation or replacement fails with ``ProtocolChangedException``. ``upgrade_uniform``:
        the commit turns IcebergCompatV2 on and rewrites the files not written for it
        (``REORG ... UPGRADE UNIFORM``; see ``core.uniform``).

        A new table (no snapshot) starts with the session's default properties under its own
        (``properties.with_session_defaults``), whatever operation creates it: this is the one
        place a table gets its first metadata. ``ignore_defaults`` (CLONE, an exact copy, as
        delta-spark's ``ignoreDefaultProperties``) leaves them out.
        """
        if self.committed:
            raise DeltaIllegalArgumentException("Transaction already committed")
        conf = props.validate_properties(metadata.configuration, table=self.table_path)
        if self.snapshot is None and not ignore_defaults:
            conf = props.with_session_defaults(conf, table=self.table_path)
        if self.snapshot is not None and metadata.id != self.snapshot.metadata.id:
            # A metadata update keeps the table identity unless the caller replaces the table.
            metadata = replace(metadata, id=self.snapshot.metadata.id)
        metadata = replace(metadata, configuration=conf)
        snap = self.snapshot
        previous = snap.metadata if snap is not None else None
        metadata = uniform.prepare_metadata(
            metadata, previous, table=self.table_path, replacing=replace_table,
            live_files=(lambda: snap.all_files) if snap is not None else tuple, upgrading=upgrade_uniform,
        )  # fmt: skip
        metadata = column_mapping.assign(metadata, previous, table=self.table_path, replacing=replace_table)
        from serialake.core.model.schema import StructType

        # A metaData without schemaString (None) fails in from_json as a SchemaError, as any invalid string does.
        schema = StructType.from_json(metadata.schema_string)  # type: ignore[arg-type]
        names = {f.name.lower() for f in schema.fields}
        for col in metadata.partition_columns:
            if col.lower() not in names:
                raise DeltaAnalysisException(
                    f"Partition column '{col}' is not in the schema of table {self.table_path} "
                    f"(columns: {', '.join(f.name for f in schema.fields)})"
                )
        self._new_metadata = metadata
        self._replaces_table = self._replaces_table or replace_table
        base = self.protocol
        needed = features.required_protocol(metadata.configuration, base=base)
        if base is None or needed != base or replace_table:
            self._new_protocol = needed

    def update_protocol(self, protocol: Protocol) -> None:
        """Upgrade the protocol in this commit."""
        self._new_protocol = protocol

    @property
    def isolation_level(self) -> str:
        """The level this commit runs at (SnapshotIsolation is chosen at commit for compaction)."""
        if self._isolation_override:
            return self._isolation_override
        meta = self.metadata
        return meta.derived(_isolation_level) if meta is not None else props.isolation_level({})

    # -- reads ------------------------------------------------------------------
    def filter_files(
        self,
        predicates: Sequence[Any] | None = None,
        *,
        row_evaluator: RowEvaluator | None = None,
        confirm_rows: bool = False,
    ) -> list[AddFile]:
        """Files that may hold rows matching ``predicates`` (SQL strings or parsed expressions).

        Records the partition part of the predicates as read (data-column parts widen it,
        as Delta does) and the returned files as read. ``[]`` or None reads everything.
        ``row_evaluator`` computes the operation's actual condition on rows of a file where
        row-level conflict checks cannot decide ``predicates`` exactly (e.g. with Spark, for
        a UDF); it must be TRUE only where ``predicates`` may be. ``confirm_rows``: ``predicates``
        are only a necessary condition of the read (a MERGE's target side), so ``row_evaluator``
        confirms the rows they match as well.
        """
        if self.snapshot is None:
            self.read_predicates.append(ReadPredicate("TRUE", lambda pv: True, whole_table=True))
            return []
        pred, files = _planned_read(self.snapshot, predicates, row_evaluator)
        if confirm_rows and row_evaluator is not None:
            pred = replace(pred, confirm_rows=True)
        self.read_predicates.append(pred)
        for f in files:
            self.read_files[f.path] = f
        return files

    def allow_external_files(self) -> None:
        """Let this commit add files outside the table directory, by absolute path: a shallow clone
        lists its source's files. (Any commit may still remove or re-add the files the table lists.)"""
        self._external_adds = True

    def _external_path_allowed(self, path: str) -> bool:
        """A file outside the table directory: one this commit may add, or one the table already lists."""
        if self._external_adds:
            return True
        if self.snapshot is None:
            return False
        if self._live_paths is None:
            self._live_paths = set(self.snapshot.files_by_path())
        return path in self._live_paths

    def read_whole_table(self) -> list[AddFile]:
        """Record a read of the entire table (every concurrent change to it conflicts)."""
        self.read_whole = True
        from serialake.core.predicates import expressions as E

        self.read_predicates.append(ReadPredicate("TRUE", lambda pv: True, whole_table=True, expr=E.TRUE))
        files = self.snapshot.all_files if self.snapshot else []
        for f in files:
            self.read_files[f.path] = f
        return files

    def record_read(self, predicates: Sequence[Any] | None = None, *, version: int | None = None) -> list[AddFile]:
        """Record a read of this table made outside the transaction, e.g. a DataFrame feeding the write.

        ``version`` is the version the read saw. At the transaction's own version (or later,
        or None) this is ``filter_files``. At an earlier version the read is also checked
        against every commit after that version (conflict checks run from there), so a
        DataFrame read before the transaction started cannot hide a concurrent change.
        Returns the files (of that version) the read may have used.
        """
        if version is None or self.snapshot is None or version >= self.read_version:
            return self.filter_files(predicates)
        if version < 0:
            raise DeltaIllegalArgumentException(f"Table {self.table_path}: a read at version {version}")
        snap = self.delta_log.snapshot(version=version)
        pred, files = _planned_read(snap, predicates)
        self.history_reads.append(HistoryRead(version, pred, {f.path: f for f in files}, snap.metadata, snap.protocol))
        self.read_predicates.append(pred)
        if pred.whole_table:
            self.read_whole = True
        for f in files:
            self.read_files.setdefault(f.path, f)
        return files

    def record_table_read(self, table_path: str, version: int) -> None:
        """Record that the write was computed from ``table_path`` at ``version`` (kept in commitInfo).

        For other tables, and for time-travel reads of this one: history does not change, so
        these reads conflict with nothing; ``commitInfo["serialake.readTables"]`` keeps them.
        """
        self.table_reads.setdefault(table_path, set()).add(int(version))

    def record_matched_rows(self, rows: Mapping[str, RowIndexSet]) -> None:
        """Declare, per file read, exactly which live rows matched this transaction's reads.

        ``rows`` maps paths of files returned by ``filter_files`` to physical row indexes
        (deleted rows excluded); a file scanned without a match maps to an empty set. Only
        declare files whose every row was evaluated with the full condition of every read.
        Row-level conflict checks then know that a concurrent deletion of other rows of the
        file cannot change what was read, whatever the condition. Files not declared keep
        predicate evaluation. Declaring a file again adds rows.
        """
        for path, found in rows.items():
            base = self.read_files.get(path)
            if base is None:
                raise DeltaIllegalArgumentException(
                    f"Table {self.table_path}: matched rows declared for {path}, a file this transaction did not read"
                )
            prev = self.matched_rows.get(path)
            self.matched_rows[path] = MatchedRows(base, prev.rows | found if prev is not None else found)

    def record_identity_allocation(self, allocation: Any) -> None:
        """Declare what this write stored in an identity column past the mark it read (``identity.Allocation``).

        A write raising an identity column's high-water mark declares it, so that a concurrent
        allocation from the same mark re-bases its generated values instead of conflicting
        (``core.identity_rebase``); a raised mark not declared conflicts, as with Delta.
        """
        self.identity_allocations[allocation.column.lower()] = allocation

    def txn_version(self, app_id: str) -> int | None:
        """Last version committed by ``app_id`` (None if never); recorded as read."""
        self.read_app_ids.add(app_id)
        return self.snapshot.txn_version(app_id) if self.snapshot else None

    # -- commit -----------------------------------------------------------------
    def commit(
        self,
        actions: Iterable[Action],
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        operation_metrics: Mapping[str, Any] | None = None,
        *,
        tags: Mapping[str, str] | None = None,
        user_metadata: str | None = None,
    ) -> int:
        """Commit ``actions`` as the next version; returns the version committed.

        Raises one of the ``DeltaConcurrentModificationException`` subclasses when a
        concurrent commit conflicts; then nothing of this transaction is in the table.
        Rebasing may change the actions (``committed_actions`` holds those written); when
        it leaves none, nothing is written and the version returned is the one that
        already holds the work (``committed.work_already_done``). Deletion vector files
        written while rebasing are deleted when the commit does not reference them: those a
        later rebase replaced, and all of them when the commit certainly failed (a conflict,
        or a ``CommitFailedError`` other than ``CommitOutcomeUnknownError``, which keeps them).
        """
        if self.committed:
            raise DeltaIllegalArgumentException("Transaction already committed")
        started = time.monotonic()
        actions = list(actions)
        info = self._prepare(actions, operation, operation_parameters, operation_metrics, tags, user_metadata)
        self._check_history_reads(info)
        # Rebasing rebinds ``info`` to copies that share its ``rebase_dvs`` list: it sees every vector.
        try:
            result = self._commit_loop(info, started)
        except CommitOutcomeUnknownError:
            raise  # the commit may have landed, referencing vectors rebasing wrote: they all stay
        except (DeltaConcurrentModificationException, CommitFailedError):
            discard_rebase_dvs(info)  # nothing of this transaction is in the table
            raise
        self.committed = result
        # Committed: what follows may fail but never fails the commit (``core.post_commit``).
        version, table = result.version, self.table_path
        after_commit(
            "delete the deletion vector files rebasing wrote that the commit does not use", table, version,
            discard_rebase_dvs, info, self.committed_actions or (), operation=operation,
        )  # fmt: skip
        if result.work_already_done:
            return version
        meta = info.metadata or info.read_metadata
        after_commit(
            "schedule a checkpoint", table, version, self.delta_log.maybe_checkpoint_async, version, meta,
            self.snapshot, operation=operation,
        )  # fmt: skip
        if meta is not None and meta.derived(_iceberg_enabled):  # UniForm: Iceberg metadata in the background
            from serialake.core import iceberg

            after_commit(
                "schedule the Iceberg conversion (UniForm)", table, version, iceberg.after_commit, self.delta_log,
                version, dict(meta.configuration), operation=operation,
            )  # fmt: skip
        return version

    def _prepare(
        self,
        actions: list[Action],
        operation: str,
        operation_parameters: Mapping[str, Any] | None,
        operation_metrics: Mapping[str, Any] | None,
        tags: Mapping[str, str] | None,
        user_metadata: str | None,
    ) -> TransactionInfo:
        table = self.table_path
        metas = [a for a in actions if isinstance(a, Metadata)]
        protos = [a for a in actions if isinstance(a, Protocol)]
        if len(metas) > 1 or len(protos) > 1:
            raise DeltaIllegalArgumentException(
                f"A commit to {table} may hold at most one metaData and one protocol action"
            )
        if metas:
            self.update_metadata(metas[0])
        if protos:
            self.update_protocol(protos[0])
        body = [a for a in actions if not isinstance(a, (Metadata, Protocol, CommitInfo))]
        _check_duplicates(body, table)
        if self.snapshot is None:
            if self._new_metadata is None:
                raise DeltaAnalysisException(
                    f"Table {table} does not exist: the first commit must set its metadata (schema)"
                )
            if self._new_protocol is None:
                self._new_protocol = features.required_protocol(self._new_metadata.configuration)
        protocol = self.protocol
        assert protocol is not None
        features.check_writable(protocol, self.metadata, table)
        self._check_append_only(body)
        meta = self.metadata
        if meta is not None and meta.derived(_compat_v2):
            uniform.check_adds(body, meta.configuration, table)
        self._check_change_data_feed(body, operation, operation_parameters)
        _check_paths(body, table, self._external_path_allowed)

        file_actions = [a for a in body if isinstance(a, FileAction)]
        only_files = len(file_actions) == len(body)
        no_data_change = all(not a.data_change for a in file_actions) and not any(
            isinstance(a, AddCDCFile) for a in body
        )
        level = self.isolation_level
        if (
            self._new_metadata is None
            and self._new_protocol is None
            and only_files
            and no_data_change
        ):
            level = props.SNAPSHOT_ISOLATION
        has_reads = bool(self.read_predicates or self.read_files or self.read_whole)
        snap0 = self.snapshot
        blind = (
            not has_reads
            and all(isinstance(a, (AddFile, SetTransaction)) for a in body)
            and any(isinstance(a, AddFile) for a in body)
            # Raising identity marks only is still a blind append (as Delta counts it).
            and identity_rebase.changes_only_marks(snap0.metadata if snap0 else None, self._new_metadata)
        )
        ci_values: dict[str, Any] = {
            "timestamp": now_ms(),
            "operation": operation,
            "operationParameters": {k: _param(v) for k, v in (operation_parameters or {}).items()},
            "readVersion": self.read_version if self.read_version >= 0 else None,
            "isolationLevel": level,
            "isBlindAppend": blind,
            "operationMetrics": {k: str(v) for k, v in (operation_metrics or {}).items()},
            "engineInfo": f"{VERSION}",
            "txnId": self.txn_id,
        }
        if meta is not None and meta.derived(_in_commit_timestamps):
            # In-commit timestamps must strictly increase: after the read snapshot's (rebased later).
            floor = (self.snapshot.timestamp + 1) if self.snapshot is not None else 0
            ci_values = {"inCommitTimestamp": max(ci_values["timestamp"], floor), **ci_values}
            if self.snapshot is not None and not self.snapshot.metadata.derived(_in_commit_timestamps):
                # Turned on for a table with earlier commits: readers must know from which version on
                # the commits carry one (rebased later, with the version).
                assert self._new_metadata is not None
                self._new_metadata = _ict_enablement(
                    self._new_metadata, self.read_version + 1, ci_values["inCommitTimestamp"]
                )
        if user_metadata is not None:
            ci_values["userMetadata"] = user_metadata
        if self.table_reads:
            ci_values[READ_TABLES_KEY] = [
                {"table": path, "version": v}
                for path in sorted(self.table_reads)
                for v in sorted(self.table_reads[path])
            ]
        if tags:
            ci_values["tags"] = dict(tags)
        if ci_values["readVersion"] is None:
            del ci_values["readVersion"]
        lead: list[Action] = [CommitInfo(ci_values)]
        if self._new_protocol is not None:
            lead.append(self._new_protocol)
        if self._new_metadata is not None:
            lead.append(self._new_metadata)
        snap = self.snapshot
        return TransactionInfo(
            table=table,
            read_version=self.read_version,
            read_metadata=snap.metadata if snap else None,
            read_protocol=snap.protocol if snap else None,
            isolation_level=level,
            read_predicates=list(self.read_predicates),
            read_files=dict(self.read_files),
            read_whole_table=self.read_whole,
            read_app_ids=set(self.read_app_ids),
            actions=lead + body,
            metadata=self._new_metadata,
            protocol=self._new_protocol,
            is_blind_append=blind,
            txn_id=self.txn_id,
            row_level=snap.metadata.derived(row_level.enabled) if snap else False,
            compaction_carry=snap.metadata.derived(row_level.compaction_enabled) if snap else False,
            reader=row_eval.RowReader(table, snap) if snap else None,
            matched_rows=dict(self.matched_rows),
            identity_allocations=dict(self.identity_allocations),
        )

    def _check_history_reads(self, info: TransactionInfo) -> None:
        """Check reads made at versions before ours against the commits between them and ours.

        Each commit after a read's version (up to the transaction's own) is checked, in
        order, with the usual rules, as if the transaction had started at that read.
        """
        if not self.history_reads:
            return
        first = min(r.version for r in self.history_reads)
        entries = self.delta_log.commits_after(first, limit=self.read_version - first)
        if (entries[-1].version if entries else first) < self.read_version:
            raise CommitFailedError(
                f"Table {self.table_path}: this write was computed from a read of version {first}, but the "
                f"commits after it up to version {self.read_version} are no longer in the log (log cleanup), so "
                "the read cannot be checked against them. Nothing was committed: read the table again and retry."
            )
        for entry in entries:
            reads = [r for r in self.history_reads if r.version < entry.version]
            if entry.version > self.read_version or not reads:
                continue
            files: dict[str, AddFile] = {}
            for r in reads:
                files.update(r.files)
            earliest = min(reads, key=lambda r: r.version)
            view = replace(
                info,
                read_version=earliest.version,
                read_metadata=earliest.metadata,
                read_protocol=earliest.protocol,
                read_predicates=[r.predicate for r in reads],
                read_files=files,
                read_whole_table=any(r.predicate.whole_table for r in reads),
                read_app_ids=set(),
                is_blind_append=False,
                # App ids and domains were read at our own version: only data actions matter here.
                actions=[a for a in info.actions if isinstance(a, (CommitInfo, AddFile, RemoveFile))],
                removes={},
                app_ids_written={},
                domains_written=set(),
                compaction_bases={},
                matched_rows={},
                rebase_dvs=[],
            )
            try:
                check_winner(view, WinnerSummary.of(entry.version, entry.items))
            finally:
                discard_rebase_dvs(view)  # a view is only checked: its rebased actions are never committed

    def _check_change_data_feed(
        self, body: list[Action], operation: str, parameters: Mapping[str, Any] | None
    ) -> None:
        """Refuse, on a CDF table, a rewrite without its change data files (readers would misread it).

        Appends, whole-file deletes, deletion-vector deletes and overwrites need none (``core.cdf``).
        """
        meta = self.metadata
        if meta is None or not meta.derived(cdf.enabled):
            return
        reason = cdf.commit_needs_change_data(body, operation, parameters)
        if reason is not None:
            raise UnsupportedFeatureError(
                f"Table {self.table_path} has delta.enableChangeDataFeed=true: this commit rewrites data "
                f"({reason}) without change data files (cdc actions), which change-feed readers would "
                "misread. Write the changed rows under _change_data/ in the same commit, or unset the property."
            )

    def _check_append_only(self, body: list[Action]) -> None:
        meta = self.metadata
        if meta is None or not meta.derived(_append_only):
            return
        for a in body:
            if isinstance(a, RemoveFile) and a.data_change:
                raise DeltaAnalysisException(
                    f"Table {self.table_path} is append-only (delta.appendOnly=true): this commit removes "
                    f"data file {a.path}. Unset the property to delete or update rows."
                )

    def _commit_loop(self, info: TransactionInfo, started: float) -> CommitResult:
        body = _Body(self.delta_log.store)
        try:
            return self._attempts(info, started, body)
        finally:
            body.close()

    def _attempts(self, info: TransactionInfo, started: float, body: _Body) -> CommitResult:
        """Put the commit at the next version until it lands, checking the winners of each version lost."""
        dlog = self.delta_log
        attempt_version = info.read_version + 1
        attempts = 0
        checked = 0
        last_checked = info.read_version
        opts = self.options
        uncertain_version: int | None = None  # an attempt that may have landed, not yet ruled out
        transient_failures = 0
        unknown_failures = 0  # attempts in a row whose outcome was unknown
        last_error: OSError | None = None
        # Where other writers committed lately, some will have landed while the body was written and
        # synced: read them first rather than make a put they refuse (one lost race fewer per commit).
        look_first = dlog.contended
        while True:
            looked_first = look_first and body.ready(dlog.commit_path(attempt_version), info.actions)
            look_first = False
            if not looked_first:
                attempts += 1
                try:
                    body.put(dlog.commit_path(attempt_version), info.actions)
                    after_commit(  # landed: caching it for this process's reads is a step after the commit
                        "cache the commit for this process's reads", info.table, attempt_version,
                        dlog.remember_commit, attempt_version, info.actions, operation=_operation(info),
                    )  # fmt: skip
                    dlog.contended = checked > 0
                    self.committed_actions = list(info.actions)
                    return CommitResult(attempt_version, attempts, checked, time.monotonic() - started)
                except FileAlreadyExistsError:
                    unknown_failures = 0
                except WriteNotDurableError as e:
                    raise CommitOutcomeUnknownError(
                        f"Commit to {info.table}: version {attempt_version} was written and is visible, but syncing "
                        f"{dlog.log_path} failed ({errno_text(e)}), so it may not survive a crash of this machine. "
                        f"Look for commitInfo.txnId = {info.txn_id} in the log after a crash before retrying.",
                        txn_id=info.txn_id,
                        version=attempt_version,
                    ) from e
                except WriteNotDoneError as e:
                    # Certainly not written: retry a transient error briefly, otherwise fail now.
                    if e.errno in TRANSIENT_ERRNOS and transient_failures < TRANSIENT_WRITE_RETRIES:
                        transient_failures += 1
                        time.sleep(0.005 * 4**transient_failures)
                        continue
                    if uncertain_version is not None:  # an earlier attempt may still have landed
                        raise self._outcome_unknown(info, uncertain_version, attempts, started, last_error) from e
                    raise self._write_failed(
                        info, attempt_version, f"could not {e.phase} for version {attempt_version}", e
                    ) from e
                except OSError as e:
                    # Outcome unknown (e.g. the link's result was lost): the winners check below finds
                    # our own txnId if the commit did land.
                    uncertain_version = attempt_version
                    unknown_failures += 1
                    last_error = e
            # Check every commit after the last one checked, in order, up to the newest there is now:
            # more winners often landed while this one was written (1.9 a commit at 4 writers), and
            # reading on to the first missing name costs less than a put refused at each of them.
            try:
                winners = dlog.commits_after(last_checked)
                log_read = True
            except (FileNotFoundError, CorruptLogError):
                raise  # a corrupt winner is not an I/O hiccup: retrying would spin
            except OSError:
                winners = []  # a failed read of the log: back off and try again
                log_read = False
            for entry in winners:
                summary = WinnerSummary.of(entry.version, entry.items)
                self._check_winner_is_valid(summary)
                if summary.txn_id == info.txn_id:
                    self.committed_actions = list(entry.actions)
                    return CommitResult(entry.version, attempts, checked, time.monotonic() - started)
                info = check_winner(info, summary)
                _rebase_ict(info, summary)
                checked += 1
                last_checked = entry.version
            if log_read:
                # Read after the attempt returned, the log does not hold our txnId: it did not land
                # (a late landing would make the next put at that version fail, never duplicate).
                uncertain_version = None
            if info.nothing_left:  # the winners did all of our work: write nothing
                self.committed_actions = []
                return CommitResult(last_checked, attempts, checked, time.monotonic() - started, True)
            attempt_version = last_checked + 1
            elapsed = time.monotonic() - started
            if unknown_failures >= UNKNOWN_WRITE_RETRIES and last_error is not None:
                # The store keeps failing without saying how: stop rather than spin for minutes.
                if uncertain_version is not None:
                    raise self._outcome_unknown(info, uncertain_version, attempts, started, last_error)
                raise self._write_failed(
                    info, attempt_version, f"{unknown_failures} writes in a row of version {attempt_version} "
                    "failed and each time the log showed it had not landed", last_error,
                ) from last_error
            if attempts >= opts.max_attempts or elapsed > opts.max_duration_s:
                if uncertain_version is not None:
                    raise self._outcome_unknown(info, uncertain_version, attempts, started, last_error)
                raise CommitFailedError(
                    f"Commit to {info.table} gave up after {attempts} attempts and {elapsed:.1f}s "
                    f"(no conflict found; the table is under heavy contention). Nothing was committed. "
                    f"Raise CommitOptions.max_attempts / max_duration_s to wait longer."
                )
            if not winners and not looked_first:
                # Nothing new to check but the put failed: an I/O error. Back off before retrying.
                time.sleep(min(opts.backoff_max_s, opts.backoff_base_s * (2 ** min(attempts, 10))))
            # Winners that do not conflict: the next version at once. Someone made progress, so this
            # cannot livelock, and waiting would only let more winners in before the retry.

    def _write_failed(
        self, info: TransactionInfo, version: int, what: str, error: OSError
    ) -> CommitWriteFailedError:
        """The error for a commit write that certainly did not land: cause, errno and what to do."""
        log_path = self.delta_log.log_path
        return CommitWriteFailedError(
            f"Commit to {info.table} failed: {what} ({errno_text(error)}); "
            f"{os_error_advice(error.errno, log_path)}. Nothing was committed, so retrying the operation is safe.",
            table=info.table,
            path=self.delta_log.commit_path(version),
            errno=error.errno,
            strerror=error.strerror,
            version=version,
        )

    def _outcome_unknown(
        self, info: TransactionInfo, version: int, attempts: int, started: float, error: OSError | None
    ) -> CommitOutcomeUnknownError:
        """The error for giving up while the attempt at ``version`` may have landed (the log could not be read)."""
        elapsed = time.monotonic() - started
        cause = f" ({errno_text(error)})" if error is not None else ""
        return CommitOutcomeUnknownError(
            f"Commit to {info.table} gave up after {attempts} attempts and {elapsed:.1f}s; the write of version "
            f"{version} failed with an I/O error that hides whether it landed{cause}, and the log could not be "
            f"read afterwards to find out. Look for commitInfo.txnId = {info.txn_id} in the log before "
            "retrying, or the write may be applied twice.",
            txn_id=info.txn_id,
            version=version,
        )

    def _check_winner_is_valid(self, winner: WinnerSummary) -> None:
        """A winner's partition values parse as their columns' types (the rest was checked when it was parsed).

        Nothing is committed on top of a commit no Delta reader may accept.
        """
        meta = winner.metadata or self.metadata
        if meta is None or not meta.partition_columns:
            return
        from serialake.core.log.snapshot import _invalid
        from serialake.core.model.validate import InvalidActionError, check_partition_values

        for _, path, values, _ in winner.add_fields():
            if values:
                try:
                    check_partition_values(meta, values.items())
                except InvalidActionError as e:
                    e.data_file = path
                    raise _invalid(e, self.table_path, winner.version) from None

    # -- context manager: ``with log.start_transaction() as txn`` --------------------
    def __enter__(self) -> OptimisticTransaction:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _planned_read(
    snapshot: Snapshot, predicates: Sequence[Any] | None, row_evaluator: RowEvaluator | None = None
) -> tuple[ReadPredicate, list[AddFile]]:
    """The read predicate of ``predicates`` over ``snapshot`` and the files it may match there."""
    from serialake.core.predicates import expressions as E
    from serialake.core.predicates.skipping import compile_predicate

    exprs = [E.parse_predicate(p) if isinstance(p, str) else p for p in (predicates or [])]
    part_cols = list(snapshot.partition_columns)
    full = E.conjunction(exprs)
    part_expr = E.partition_filter(exprs, part_cols)
    match_part = compile_predicate(part_expr, snapshot.schema, part_cols)
    match_full = compile_predicate(full, snapshot.schema, part_cols)
    if _is_true(full):
        files = snapshot.all_files
    else:  # vectorized over the checkpoint's rows; only the files selected are built
        from serialake.core.predicates.arrow_skipping import cached_matcher

        files = snapshot.file_state.select(
            # A checkpoint's stats_parsed holds the same stats as the JSON, already typed: no parse.
            cached_matcher(full, snapshot.schema, part_cols, stats_parsed="prefer"),
            lambda f: match_full(f.partition_values or {}, f.parsed_stats()),
        )
    pred = ReadPredicate(
        E.to_sql(part_expr),
        lambda pv: match_part(pv, None),
        whole_table=_is_true(part_expr),
        expr=full,
        may_match_stats=match_full,
        row_evaluator=row_evaluator,
    )
    return pred, files


def _is_true(expr: Any) -> bool:
    from serialake.core.predicates import expressions as E

    return E.to_sql(expr).strip().upper() == "TRUE"


def _param(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _parse_level(level: str) -> str:
    for lv in (props.SERIALIZABLE, props.WRITE_SERIALIZABLE, props.SNAPSHOT_ISOLATION):
        if level.strip().lower() == lv.lower():
            return lv
    raise InvalidPropertyError(
        f"Invalid isolation level '{level}'. Valid values: {props.SERIALIZABLE}, {props.WRITE_SERIALIZABLE}"
    )


def _check_duplicates(body: list[Action], table: str) -> None:
    seen_add: set[str] = set()
    seen_remove: set[str] = set()
    apps: dict[str, int] = {}
    for a in body:
        if isinstance(a, AddFile):
            if a.path in seen_add:
                raise DeltaIllegalArgumentException(f"Commit to {table} adds file {a.path} twice")
            seen_add.add(a.path)
        elif isinstance(a, RemoveFile):
            if a.path in seen_remove:
                raise DeltaIllegalArgumentException(f"Commit to {table} removes file {a.path} twice")
            seen_remove.add(a.path)
        elif isinstance(a, SetTransaction):
            if a.app_id in apps and apps[a.app_id] != a.version:
                raise DeltaIllegalArgumentException(
                    f"Commit to {table} sets two versions for application {a.app_id}"
                )
            apps[a.app_id] = a.version


def _check_paths(body: list[Action], table: str, external_allowed: Any) -> None:
    """Every file path stays in the table directory, unless ``external_allowed(path)`` says it may
    not (a shallow clone's files, by absolute path)."""
    for a in body:
        if isinstance(a, (AddFile, RemoveFile, AddCDCFile)):
            p = a.path
            if p and "%" not in p and ":" not in p and ".." not in p and p[0] != "/":
                continue  # a plain relative path (the common case): inside the table
            p = unquote(p)
            if p.startswith("file:"):
                p = p[5:].lstrip("/")
                p = "/" + p
            if "://" in p:
                scheme = p.split("://", 1)[0].lower()
                if scheme not in S3_SCHEMES:
                    raise DeltaIllegalArgumentException(
                        f"Data file path '{a.path}' uses the URI scheme '{scheme}', which serialake does not serve"
                    )
                if not _inside_s3_table(p, table) and not external_allowed(a.path):
                    raise DeltaIllegalArgumentException(
                        f"Data file path '{a.path}' is outside table {table}"
                    )
                continue
            if p.startswith("/"):
                inside = (p + "/").startswith(table.rstrip("/") + "/") or p.startswith(table.rstrip("/") + "/")
                if not inside and not external_allowed(a.path):
                    raise DeltaIllegalArgumentException(
                        f"Data file path '{a.path}' escapes the table directory of {table}"
                    )
                continue
            norm = posixpath.normpath(p)
            if norm == ".." or norm.startswith("../") or p == "":
                raise DeltaIllegalArgumentException(
                    f"Data file path '{a.path}' escapes the table directory of {table}"
                )


def _inside_s3_table(uri: str, table: str) -> bool:
    """Whether S3 object ``uri`` lies under S3 table ``table`` (``s3`` and ``s3a`` alike)."""
    if "://" not in table or table.split("://", 1)[0].lower() not in S3_SCHEMES:
        return False
    inner = uri.split("://", 1)[1].rstrip("/")
    root = table.split("://", 1)[1].rstrip("/")
    return inner.startswith(root + "/")


class _Body:
    """A commit's body as its store prepared it (``LogStore.prepare_put``): made once, put at version
    after version until one is free, and made anew only when rebasing over a winner changed the actions."""

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.actions: list[Action] = []
        self.prepared: PreparedPut | None = None

    def put(self, path: str, actions: list[Action]) -> None:
        self._prepared(actions).put(path)

    def ready(self, path: str, actions: list[Action]) -> bool:
        """``PreparedPut.ready`` of the body of ``actions``: whether the slow part of a put was done now."""
        return self._prepared(actions).ready(path)

    def _prepared(self, actions: list[Action]) -> PreparedPut:
        # Actions are immutable and rebasing replaces those it changes: the same objects, the same body.
        same = len(actions) == len(self.actions) and all(a is b for a, b in zip(actions, self.actions, strict=True))
        if self.prepared is None or not same:
            self.close()
            self.actions = list(actions)
            self.prepared = self.store.prepare_put(actions_to_jsonl(self.actions))
        return self.prepared

    def close(self) -> None:
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None


# What a commit asks of the table's properties, worked out once per metadata (``Metadata.derived``).
def _isolation_level(meta: Metadata) -> str:
    return props.isolation_level(meta.configuration)


def _append_only(meta: Metadata) -> bool:
    return bool(props.get(meta.configuration, props.APPEND_ONLY))


def _in_commit_timestamps(meta: Metadata) -> bool:
    return bool(props.get(meta.configuration, props.ENABLE_ICT))


def _compat_v2(meta: Metadata) -> bool:
    return uniform.compat_v2(meta.configuration)


def _iceberg_enabled(meta: Metadata) -> bool:
    return uniform.iceberg_enabled(meta.configuration)


def _operation(info: TransactionInfo) -> str:
    """The operation a commit records (``commitInfo.operation``), for messages."""
    ci = info.actions[0] if info.actions else None
    return str(ci.values.get("operation", "WRITE")) if isinstance(ci, CommitInfo) else "WRITE"


def _rebase_ict(info: TransactionInfo, winner: WinnerSummary) -> None:
    """Keep our in-commit timestamp above every winner's (the protocol requires it to increase)."""
    ci = info.actions[0]
    if not isinstance(ci, CommitInfo) or "inCommitTimestamp" not in ci.values:
        return
    theirs = winner.commit_info.values.get("inCommitTimestamp") if winner.commit_info else None
    if theirs is not None and int(theirs) >= int(ci.values["inCommitTimestamp"]):
        values = dict(ci.values)
        values["inCommitTimestamp"] = int(theirs) + 1
        info.actions[0] = ci = CommitInfo(values)
    meta = info.metadata
    if meta is not None and props.ICT_ENABLEMENT_VERSION in meta.configuration and (
        info.read_metadata is None or not info.read_metadata.derived(_in_commit_timestamps)
    ):  # this commit turns them on: it now lands after the winner
        info.metadata = _ict_enablement(meta, winner.version + 1, int(ci.values["inCommitTimestamp"]))
        info.actions = [info.metadata if a is meta else a for a in info.actions]


def _ict_enablement(meta: Metadata, version: int, timestamp: int) -> Metadata:
    """``meta`` recording that in-commit timestamps start at ``version``, whose ICT is ``timestamp``."""
    conf = dict(meta.configuration)
    conf[props.ICT_ENABLEMENT_VERSION] = str(version)
    conf[props.ICT_ENABLEMENT_TIMESTAMP] = str(timestamp)
    return replace(meta, configuration=conf)
