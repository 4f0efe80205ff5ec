"""``serialake.transaction(spark)``: writes to several tables committed as one (issue #44).

Inside ``with serialake.transaction(spark) as tx:`` every serialake write of this thread
(``serialake.write``, ``df.write.format("delta")`` ... ``save`` / ``saveAsTable`` /
``insertInto``, ``writeTo(...).append()``, SQL ``INSERT``, and ``DELETE`` / ``UPDATE`` /
``MERGE`` through ``DeltaTable`` or SQL) writes its data files but does not commit: its
actions join the table's body in one ``core.txn.group.GroupTransaction``. Leaving the block
commits the group (docs/concurrency.md, "Transactions across tables"); an exception in the
block, or ``tx.rollback()``, aborts it: nothing is committed and the files written are deleted.

What a block sees. The first time a table is touched (read or written) its latest snapshot
is pinned for the rest of the block (``tables=[...]`` pins a consistent cut of those tables
up front). Reads (``serialake.read``, ``spark.read.format("delta")``, ``spark.table``, SQL
queries, ``DeltaTable.toDF``) see that snapshot, with the block's own writes to the table
applied in memory: the pending adds and removes are what is scanned. A second write to a
table in the block (an UPDATE after an INSERT) is computed from that pending state, and its
actions compose with the earlier ones into one body (a file added and then removed in the
block is simply not added).

What is checked at commit. A table read and not written is a participant checked at
Serializable with a read of the whole table; a table written is checked at its own isolation
level (WriteSerializable by default), with every read its writes recorded.

SQL sessions (``BEGIN TRANSACTION`` ... ``COMMIT``) keep their transaction per SparkSession
(``begin`` / ``session_transaction``); each statement runs inside it (``entered``).

Operations that cannot take part (OPTIMIZE, VACUUM, ALTER, RESTORE, creating a table, ...)
raise ``DeltaIllegalArgumentException`` naming the operation.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import dv_absolute_path
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from serialake.core.tables import cut
from serialake.core.txn.group import GroupResult, GroupTransaction
from serialake.core.txn.transaction import CommitResult, OptimisticTransaction
from serialake.core.txn.written import remove_written
from serialake.exceptions import DeltaIllegalArgumentException, DeltaTableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SparkTransaction",
    "TransactionAbortedError",
    "active",
    "begin",
    "entered",
    "refuse",
    "session_transaction",
    "start",
    "transaction",
]

#: Operations whose writes take part in a transaction (the others are refused inside one).
PARTICIPATING = frozenset({"WRITE", "INSERT", "DELETE", "UPDATE", "MERGE", "STREAMING UPDATE"})


class TransactionAbortedError(DeltaIllegalArgumentException):
    """A statement of a SQL transaction failed: the transaction is aborted, only ROLLBACK ends it."""


def _key(f: AddFile | RemoveFile) -> tuple[str, str | None]:
    dv = f.deletion_vector
    return (f.path, dv.unique_id if dv is not None else None)


@dataclass
class _Table:
    """One table of the transaction: its pinned snapshot, and what the block wrote to it so far."""

    log: DeltaLog
    base: Snapshot
    main: OptimisticTransaction | None = None  # the group's transaction of the table, once written
    read_recorded: bool = False
    adds: dict[tuple[str, str | None], AddFile] = field(default_factory=dict)
    removes: dict[tuple[str, str | None], RemoveFile] = field(default_factory=dict)
    others: list[Action] = field(default_factory=list)  # SetTransaction, DomainMetadata, AddCDCFile
    new_files: list[AddFile | AddCDCFile] = field(default_factory=list)
    new_dvs: list[AddFile] = field(default_factory=list)
    operations: list[tuple[str, Mapping[str, Any] | None, Mapping[str, Any] | None]] = field(default_factory=list)
    user_metadata: str | None = None
    _pending: Snapshot | None = None

    def pending(self) -> Snapshot:
        """The base snapshot with the block's writes applied (the base itself before any write)."""
        if self._pending is not None:
            return self._pending
        main = self.main
        meta = main._new_metadata if main is not None else None
        proto = main._new_protocol if main is not None else None
        small = [a for a in self.others if isinstance(a, SetTransaction | DomainMetadata)]
        if not (self.adds or self.removes or small or meta or proto):
            return self.base
        actions: list[Any] = [
            *([proto] if proto else []), *([meta] if meta else []), *self.removes.values(), *self.adds.values(), *small,
        ]  # fmt: skip
        snap = self.base.with_commits([(self.base.version + 1, actions, self.base.timestamp)])
        snap.version = self.base.version  # not a committed version: reads record the base's
        self._pending = snap
        return snap

    def absorb(self, actions: Iterable[Action]) -> None:
        """Compose a write's actions with the earlier ones (a remove of a file added here drops the add)."""
        self._pending = None
        for a in actions:
            if isinstance(a, RemoveFile):
                key = _key(a)
                if key in self.adds:
                    del self.adds[key]  # added in this block: it never reaches the log
                else:
                    self.removes[key] = a
            elif isinstance(a, AddFile):
                self.adds[_key(a)] = a
            elif isinstance(a, CommitInfo):
                continue
            elif isinstance(a, Metadata | Protocol):
                continue  # carried by the transaction (merged from the write's)
            else:
                self.others.append(a)

    def actions(self) -> list[Action]:
        return [*self.removes.values(), *self.adds.values(), *self.others]


class SparkTransaction:
    """A transaction across tables (see module docstring); ``serialake.transaction`` makes one."""

    def __init__(self, spark: SparkSession, tables: Sequence[str] = ()) -> None:
        self.spark = spark
        self.group = GroupTransaction()
        self._tables: dict[str, _Table] = {}
        self._lock = threading.RLock()
        self.result: GroupResult | None = None
        self.state = "open"  # open | committed | rolled back | aborted
        self.failure: BaseException | None = None
        if tables:
            self._pin_together(tables)

    @property
    def txn_id(self) -> str:
        return self.group.txn_id

    # -- tables ---------------------------------------------------------------------------
    def _table(self, path: str, what: str) -> _Table:
        self._check_open(what)
        log = DeltaLog.for_table(path)
        entry = self._tables.get(log.table_path)
        if entry is None:
            try:
                snap = log.update()
            except DeltaTableNotFoundError:
                raise DeltaTableNotFoundError(
                    f"{what}: {log.table_path} is not a Delta table. A transaction across tables "
                    "(serialake.transaction, BEGIN TRANSACTION) writes existing tables: create it before the "
                    "transaction."
                ) from None
            earlier = {p: t.base.version for p, t in self._tables.items()}
            entry = self._tables[log.table_path] = _Table(log, snap)
            cut.extend({log.table_path: snap}, earlier)
        return entry

    def _check_open(self, what: str) -> None:
        if self.state == "aborted":
            raise TransactionAbortedError(
                f"{what}: the transaction {self.txn_id} is aborted (a statement in it failed"
                + (f": {self.failure}" if self.failure else "")
                + "). Run ROLLBACK to end it."
            )
        if self.state != "open":
            raise DeltaIllegalArgumentException(f"{what}: the transaction {self.txn_id} is {self.state}")

    def snapshots_for_read(self, paths: Sequence[str]) -> dict[str, Snapshot]:
        """``snapshot_for_read`` of each of ``paths`` (normalized); the tables one read touches
        for the first time in the block are pinned together, at one consistent cut."""
        if self.state == "open":
            with self._lock:
                fresh = [p for p in dict.fromkeys(paths) if DeltaLog.for_table(p).table_path not in self._tables]
                if len(fresh) > 1:
                    with contextlib.suppress(DeltaTableNotFoundError):  # one by one below, saying what to do
                        self._pin_together(fresh)
        return {p: self.snapshot_for_read(p) for p in paths}

    def _pin_together(self, paths: Sequence[str]) -> None:
        """Pin ``paths`` (not yet in the block) at one consistent cut, recorded with the earlier pins."""
        snaps = cut.consistent_cut({p: None for p in paths}, 10.0)
        earlier = {p: t.base.version for p, t in self._tables.items()}
        for key, snap in snaps.items():
            self._tables[key] = _Table(DeltaLog.for_table(key), snap)
        cut.extend(snaps, earlier)

    def snapshot_for_read(self, path: str) -> Snapshot:
        """The snapshot a read of ``path`` uses in the block; the read is recorded in the group.
        (After ``commit`` or ``rollback`` inside the block: the table's latest snapshot.)"""
        if self.state in ("committed", "rolled back"):
            return DeltaLog.for_table(path).update()
        with self._lock:
            entry = self._table(path, f"Read of {path}")
            if not entry.read_recorded:
                self.group.read(entry.log, None, snapshot=entry.base)
                entry.read_recorded = True
            return entry.pending()

    def snapshot_of(self, path: str) -> Snapshot | None:
        """``path``'s snapshot in the block, if it was touched (no read recorded)."""
        entry = self._tables.get(DeltaLog.for_table(path).table_path)
        return entry.pending() if entry is not None else None

    def start(self, log: DeltaLog, operation: str) -> OptimisticTransaction:
        """The transaction a write of ``operation`` to ``log`` runs in: made on the pending state,
        its ``commit`` hands its actions and reads to the table's transaction in the group."""
        with self._lock:
            if operation not in PARTICIPATING:
                raise refusal(operation, log.table_path)
            entry = self._table(log.table_path, operation)
            main = self.group.write(entry.log, snapshot=entry.base)
            entry.main = main
            sub = OptimisticTransaction(entry.log, entry.pending(), isolation_level=main.isolation_level)
            sub._new_metadata, sub._new_protocol = main._new_metadata, main._new_protocol

        def commit(
            actions: Iterable[Action],
            operation: str = "WRITE",
            operation_parameters: Mapping[str, Any] | None = None,
            operation_metrics: Mapping[str, Any] | None = None,
            *,
            tags: Mapping[str, str] | None = None,
            user_metadata: str | None = None,
        ) -> int:
            del tags
            with self._lock:
                self._check_open(operation)
                self._absorb(entry, sub, list(actions), operation, operation_parameters, operation_metrics)
                if user_metadata is not None:
                    entry.user_metadata = user_metadata
            sub.committed_actions = None  # nothing is committed yet: files written stay
            sub.committed = CommitResult(version=sub.read_version, attempts=0, winners_checked=0, duration_s=0.0)
            return sub.read_version

        sub.commit = commit  # type: ignore[method-assign]
        return sub

    def _absorb(
        self,
        entry: _Table,
        sub: OptimisticTransaction,
        actions: list[Action],
        operation: str,
        params: Mapping[str, Any] | None,
        metrics: Mapping[str, Any] | None,
    ) -> None:
        main = entry.main
        assert main is not None
        if sub._replaces_table:
            raise refusal("REPLACE TABLE", entry.log.table_path)
        base_files = entry.base.files_by_path()
        main.read_predicates.extend(sub.read_predicates)
        for path in sub.read_files:
            if path in base_files:
                main.read_files[path] = base_files[path]
        main.read_whole = main.read_whole or sub.read_whole
        main.read_app_ids |= sub.read_app_ids
        main.history_reads.extend(sub.history_reads)
        for p, versions in sub.table_reads.items():
            main.table_reads.setdefault(p, set()).update(versions)
        main.identity_allocations.update(sub.identity_allocations)
        if sub._new_metadata is not None:
            main._new_metadata = sub._new_metadata
        if sub._new_protocol is not None:
            main._new_protocol = sub._new_protocol
        if sub._external_adds:
            main._external_adds = True
        for a in actions:  # (a metadata or protocol given as an action: the transaction carries it)
            if isinstance(a, Metadata):
                main._new_metadata = a
            elif isinstance(a, Protocol):
                main._new_protocol = a
        entry.absorb(actions)
        entry.new_files.extend(a for a in actions if isinstance(a, AddFile | AddCDCFile) and _is_new(a, base_files))
        entry.new_dvs.extend(a for a in actions if isinstance(a, AddFile) and _new_dv(a, base_files))
        entry.operations.append((operation, params, metrics))

    # -- end ------------------------------------------------------------------------------
    def commit(self) -> GroupResult | None:
        """Commit every table written as one; None when the block wrote nothing."""
        with self._lock:
            self._check_open("COMMIT")
            # (a write that found its work done -- a replayed streaming batch -- handed nothing over)
            written = [t for t in self._tables.values() if t.main is not None and t.operations]
            if not written:
                self.state = "committed"
                return None
            for t in written:
                assert t.main is not None
                operation, params, metrics = _operation(t.operations)
                self.group.add(
                    t.main, t.actions(), operation, params, metrics,
                    new_files=t.new_files, new_dvs=t.new_dvs, user_metadata=t.user_metadata,
                )  # fmt: skip
            try:
                self.result = self.group.commit()
            except BaseException:
                self.state = "aborted"
                raise
            self.state = "committed"
            self._discard_dropped(written)
            # (the session's SERIALIZABLE reads see the commits: publishing them raised each table's
            # known version, DeltaLog.remember_commit, so isolation's cached cut is not served)
            return self.result

    def _discard_dropped(self, written: list[_Table]) -> None:
        """Files written in the block and removed again in it: no commit references them."""
        for t in written:
            kept = {a.path for a in t.adds.values()} | {a.path for a in t.others if isinstance(a, AddCDCFile)}
            dropped = [f for f in t.new_files if f.path not in kept]
            # vectors replaced by later ones (a vector file may hold several: only files no add keeps)
            kept_dvs = {_dv_file(t, a) for a in t.adds.values() if a.deletion_vector is not None}
            dropped_dvs = [a for a in t.new_dvs if _key(a) not in t.adds and _dv_file(t, a) not in kept_dvs]
            with contextlib.suppress(Exception):
                remove_written(t.log.table_path, dropped, dropped_dvs)

    def rollback(self) -> None:
        """Abort: nothing is committed; the files written in the block are deleted."""
        with self._lock:
            if self.state == "committed":
                raise DeltaIllegalArgumentException(f"ROLLBACK: the transaction {self.txn_id} already committed")
            if self.state == "rolled back":
                return
            self.state = "rolled back"
            for t in self._tables.values():
                with contextlib.suppress(Exception):
                    remove_written(t.log.table_path, t.new_files, t.new_dvs)

    def fail(self, error: BaseException) -> None:
        """A statement of a SQL transaction failed: the transaction is aborted (only ROLLBACK ends it)."""
        if self.state == "open":
            self.state = "aborted"
            self.failure = error

    def __enter__(self) -> SparkTransaction:
        _ensure_free(self.spark)
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        _CURRENT.reset(self._token)
        if kind is not None:
            self.rollback()
            return
        if self.state == "open":
            try:
                self.commit()
            except BaseException:
                self.rollback()
                raise


def _is_new(a: AddFile | AddCDCFile, base_files: Mapping[str, AddFile]) -> bool:
    return isinstance(a, AddCDCFile) or a.path not in base_files


def _dv_file(t: _Table, a: AddFile) -> str | None:
    return dv_absolute_path(t.log.table_path, a.deletion_vector) if a.deletion_vector is not None else None


def _new_dv(a: AddFile, base_files: Mapping[str, AddFile]) -> bool:
    """Whether ``a`` carries a deletion vector written in the block (not the one the table has)."""
    if a.deletion_vector is None:
        return False
    old = base_files.get(a.path)
    return old is None or old.deletion_vector is None or old.deletion_vector.unique_id != a.deletion_vector.unique_id


def _operation(
    ops: list[tuple[str, Mapping[str, Any] | None, Mapping[str, Any] | None]],
) -> tuple[str, Mapping[str, Any] | None, Mapping[str, Any] | None]:
    if len(ops) == 1:
        return ops[0]
    import json

    names = [o for o, _, _ in ops]
    operation = names[0] if len(set(names)) == 1 else "TRANSACTION"
    return operation, {"operations": json.dumps(names)}, {}


def refusal(operation: str, table: str) -> DeltaIllegalArgumentException:
    """The error for an operation that cannot take part in a transaction across tables."""
    return DeltaIllegalArgumentException(
        f"{operation} on {table} cannot run inside a transaction across tables (serialake.transaction, "
        "BEGIN TRANSACTION): only INSERT / DataFrame writes, DELETE, UPDATE and MERGE of existing tables take "
        "part. Run it before or after the transaction."
    )


# -- which transaction a write or read belongs to -------------------------------------------

_CURRENT: ContextVar[SparkTransaction | None] = ContextVar("serialake_spark_transaction", default=None)
# SQL transactions (BEGIN ... COMMIT): per SparkSession.
_SESSIONS: weakref.WeakKeyDictionary[Any, SparkTransaction] = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


def _ensure_free(spark: Any) -> None:
    cur = _CURRENT.get()
    if cur is not None or session_transaction(spark) is not None:
        raise DeltaIllegalArgumentException(
            "A transaction is already open in this session: transactions do not nest (COMMIT or ROLLBACK it first)"
        )


def active(spark: Any = None) -> SparkTransaction | None:
    """The transaction the running code writes and reads in (None outside one)."""
    cur = _CURRENT.get()
    if cur is not None and (spark is None or cur.spark is spark):
        return cur
    if spark is None:
        try:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
        except Exception:  # noqa: BLE001 - no session: no SQL transaction
            return None
    return session_transaction(spark) if spark is not None else None


def session_transaction(spark: Any) -> SparkTransaction | None:
    """The SQL transaction (``BEGIN``) open in ``spark``, if any."""
    with _sessions_lock:
        return _SESSIONS.get(spark)


def begin(spark: Any) -> SparkTransaction:
    """``BEGIN TRANSACTION``: open the session's transaction."""
    _ensure_free(spark)
    tx = SparkTransaction(spark)
    with _sessions_lock:
        _SESSIONS[spark] = tx
    return tx


def end(spark: Any, *, commit: bool) -> SparkTransaction:
    """``COMMIT`` / ``ROLLBACK`` of the session's transaction."""
    with _sessions_lock:
        tx = _SESSIONS.get(spark)
    word = "COMMIT" if commit else "ROLLBACK"
    if tx is None:
        raise DeltaIllegalArgumentException(f"{word}: no transaction is open in this session (BEGIN TRANSACTION)")
    try:
        if commit:
            if tx.state == "aborted":
                raise TransactionAbortedError(
                    f"COMMIT: the transaction {tx.txn_id} is aborted (a statement in it failed: {tx.failure}); "
                    "nothing was committed. Run ROLLBACK to end it."
                )
            try:
                tx.commit()
            except BaseException:
                tx.rollback()
                raise
        else:
            tx.rollback()
    finally:
        if not (commit and tx.state == "aborted"):
            with _sessions_lock:
                if _SESSIONS.get(spark) is tx:
                    del _SESSIONS[spark]
    return tx


@contextlib.contextmanager
def entered(spark: Any) -> Iterator[SparkTransaction | None]:
    """Run a statement of ``spark`` inside its SQL transaction (when one is open); a failure aborts it."""
    tx = session_transaction(spark)
    if tx is None or _CURRENT.get() is tx:
        yield tx
        return
    token = _CURRENT.set(tx)
    try:
        yield tx
    except BaseException as e:
        tx.fail(e)
        raise
    finally:
        _CURRENT.reset(token)


def start(log: DeltaLog, operation: str, spark: Any = None, snapshot: Snapshot | None = None) -> OptimisticTransaction:
    """The transaction a write opens: the active transaction's (``SparkTransaction.start``), or its own."""
    tx = active(spark)
    if tx is not None:
        return tx.start(log, operation)
    return log.start_transaction(snapshot)


def refuse(operation: str, table: str, spark: Any = None) -> None:
    """Raise inside a transaction: ``operation`` cannot take part in one."""
    if active(spark) is not None:
        raise refusal(operation, table)


def transaction(spark: SparkSession, tables: Sequence[str] = ()) -> SparkTransaction:
    """``with serialake.transaction(spark) as tx:`` -- writes to several tables committed as one.

    ``tables``: paths (or names' locations) pinned at one consistent cut when the block starts;
    other tables are pinned when first touched. See the module docstring.
    """
    return SparkTransaction(spark, tables)
