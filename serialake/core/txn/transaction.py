"""Optimistic transactions: record what was read, then validate and commit.

A transaction is pinned to the snapshot it started from. It records its reads
(``filter_files``, ``read_whole_table``, ``record_read``, ``txn_version``; ``reads``), and
``commit`` checks its actions (``commit_checks``), builds what conflict checking sees of it
(``summaries.TransactionInfo``) and hands it to the commit loop (``commit_loop``), which writes
the next version with put-if-absent, checks the winners of each version it lost and
retries. What a commit is given and returns (``CommitOptions``, ``CommitResult``) lives in
``options``; both are importable from here.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

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
    SetTransaction,
    now_ms,
)
from serialake.core.predicates import row_eval
from serialake.core.txn import commit_loop, identity_rebase, row_level
from serialake.core.txn.commit_checks import (
    check_append_only,
    check_change_data_feed,
    check_duplicates,
    check_paths,
)
from serialake.core.txn.commit_loop import ict_enablement, in_commit_timestamps
from serialake.core.txn.options import (
    DEFAULT_OPTIONS,
    READ_TABLES_KEY,
    TRANSIENT_WRITE_RETRIES,
    UNKNOWN_WRITE_RETRIES,
    VERSION,
    CommitOptions,
    CommitResult,
    new_txn_id,
)
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.reads import HistoryRead, check_history_reads, planned_read
from serialake.core.txn.rebasing import discard_rebase_dvs
from serialake.core.txn.summaries import MatchedRows, ReadPredicate, TransactionInfo
from serialake.exceptions import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    DeltaAnalysisException,
    DeltaConcurrentModificationException,
    DeltaIllegalArgumentException,
    InvalidPropertyError,
)

if TYPE_CHECKING:
    from serialake.core.dv.deletion_vectors import RowIndexSet
    from serialake.core.log.deltalog import DeltaLog
    from serialake.core.log.snapshot import Snapshot
    from serialake.core.predicates.row_eval import RowEvaluator

# Names used across serialake from here (their home is ``options``).
__all__ = [
    "READ_TABLES_KEY",
    "TRANSIENT_WRITE_RETRIES",
    "UNKNOWN_WRITE_RETRIES",
    "VERSION",
    "CommitOptions",
    "CommitResult",
    "OptimisticTransaction",
    "new_txn_id",
]


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
        self.options = options or DEFAULT_OPTIONS
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
        (``REORG ... UPGRADE UNIFORM``; see ``core.model.uniform``).

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
        pred, files = planned_read(self.snapshot, predicates, row_evaluator)
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
        pred, files = planned_read(snap, predicates)
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
        (``core.txn.identity_rebase``); a raised mark not declared conflicts, as with Delta.
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
        if self.table_reads:
            self._resolve_read_tables()
        # Rebasing rebinds ``info`` to copies that share its ``rebase_dvs`` list: it sees every vector.
        try:
            result = self._commit_loop(info, started)
        except CommitOutcomeUnknownError:
            raise  # the commit may have landed, referencing vectors rebasing wrote: they all stay
        except (DeltaConcurrentModificationException, CommitFailedError):
            discard_rebase_dvs(info)  # nothing of this transaction is in the table
            raise
        self.committed = result
        # Committed: what follows may fail but never fails the commit (``core.txn.post_commit``).
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
        check_duplicates(body, table)
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
        check_append_only(body, self.metadata, table)
        meta = self.metadata
        if meta is not None and meta.derived(_compat_v2):
            uniform.check_adds(body, meta.configuration, table)
        check_change_data_feed(body, operation, operation_parameters, self.metadata, table)
        check_paths(body, table, self._external_path_allowed)

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
        if meta is not None and meta.derived(in_commit_timestamps):
            # In-commit timestamps must strictly increase: after the read snapshot's (rebased later).
            floor = (self.snapshot.timestamp + 1) if self.snapshot is not None else 0
            ci_values = {"inCommitTimestamp": max(ci_values["timestamp"], floor), **ci_values}
            if self.snapshot is not None and not self.snapshot.metadata.derived(in_commit_timestamps):
                # Turned on for a table with earlier commits: readers must know from which version on
                # the commits carry one (rebased later, with the version).
                assert self._new_metadata is not None
                self._new_metadata = ict_enablement(
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


    def _resolve_read_tables(self) -> None:
        """Other tables this write was computed from: a transaction across tables whose lock is the newest
        commit of one is resolved first (``DeltaLog.update`` does), so no write slips past a group."""
        from serialake.exceptions import DeltaTableNotFoundError

        for path in self.table_reads:
            if path != self.table_path:
                with contextlib.suppress(DeltaTableNotFoundError, OSError):
                    type(self.delta_log).for_table(path).update()

    def _check_history_reads(self, info: TransactionInfo) -> None:
        if self.history_reads:
            check_history_reads(self.delta_log, self.history_reads, self.read_version, info)

    def _commit_loop(self, info: TransactionInfo, started: float) -> CommitResult:
        result, self.committed_actions = commit_loop.run(self.delta_log, info, started, self.options, self.metadata)
        return result
    # -- context manager: ``with log.start_transaction() as txn`` --------------------
    def __enter__(self) -> OptimisticTransaction:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _param(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _parse_level(level: str) -> str:
    for lv in (props.SERIALIZABLE, props.WRITE_SERIALIZABLE, props.SNAPSHOT_ISOLATION):
        if level.strip().lower() == lv.lower():
            return lv
    raise InvalidPropertyError(
        f"Invalid isolation level '{level}'. Valid values: {props.SERIALIZABLE}, {props.WRITE_SERIALIZABLE}"
    )


# What a commit asks of the table's properties, worked out once per metadata (``Metadata.derived``).
def _isolation_level(meta: Metadata) -> str:
    return props.isolation_level(meta.configuration)


def _compat_v2(meta: Metadata) -> bool:
    return uniform.compat_v2(meta.configuration)


def _iceberg_enabled(meta: Metadata) -> bool:
    return uniform.iceberg_enabled(meta.configuration)
