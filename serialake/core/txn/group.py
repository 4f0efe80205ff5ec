"""One transaction over several tables, committed serializably and atomically on the open log.

``GroupTransaction`` holds one ``OptimisticTransaction`` per table written (``write``) and the
read set of every table read (``read``; a table only read is a participant too, checked at
Serializable). ``commit`` runs the protocol of docs/concurrency.md, "Transactions across tables":

1. **Lock.** In every participant, in the order of their normalized paths, an empty lock commit
   (``core.log.groups``) is put at the next free version ``L`` through the ordinary commit loop
   (``commit_loop.run_lock``): every winner since the transaction's read version is checked
   against that table's transaction with the ordinary rules, read set included; a conflict
   aborts the group with that rule's exception.
2. **Stage.** Each written table's body (rebased over the winners) is put at
   ``_delta_log/_staged_commits/<L+1>.<txnId>.json``.
3. **Decide.** One put-if-absent of ``<coordinator>/_delta_log/_groups/<txnId>.json`` with
   ``"decision": "commit"`` (the coordinator: the first participant). A contender that met a
   lock undecided may have put ``"abort"`` there first: then the group fails with
   ``ConcurrentTransactionException`` (``GROUP_ABORTED``).
4. **Publish.** Each body is put at ``L+1`` (anyone meeting the lock may have done it already).
   A version taken by a writer outside serialake is checked with the ordinary rules and the body
   put after it (``GroupPublicationError`` when it conflicts).

A failure before the decision aborts the group: the abort decision is written, staged bodies,
the data files the caller wrote (``new_files``) and rebasing's vectors are deleted, and the
error is raised. After the decision nothing is deleted: the group is committed, and whoever
reads a participant next finishes publishing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from serialake.core.log import groups
from serialake.core.log.deltalog import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.core.model import properties as props
from serialake.core.model.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    actions_to_jsonl,
    now_ms,
)
from serialake.core.txn import commit_loop
from serialake.core.txn.commit_loop import ict_enablement, in_commit_timestamps
from serialake.core.txn.options import DEFAULT_OPTIONS, VERSION, CommitOptions, CommitResult, new_txn_id
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.rebasing import discard_rebase_dvs
from serialake.core.txn.summaries import TransactionInfo
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import remove_written
from serialake.exceptions import (
    ConcurrentTransactionException,
    ConflictReason,
    DeltaIllegalArgumentException,
    FileAlreadyExistsError,
)
from serialake.storage import normalize_table_path

__all__ = ["GroupResult", "GroupTransaction"]

#: Steps at which ``GroupTransaction.step`` is called (crash trials and tests stop a group there).
STEPS = ("prepared", "lock", "staged", "decided", "published")


@dataclass(frozen=True)
class GroupResult:
    """What a committed group did: its id, each table's lock version, and each written table's version."""

    txn_id: str
    locks: dict[str, int]
    versions: dict[str, int]
    duration_s: float


@dataclass
class _Part:
    """One participant: its transaction, and what the group commits there (``writes``: a body)."""

    txn: OptimisticTransaction
    writes: bool = False
    actions: list[Action] = field(default_factory=list)
    operation: str = "WRITE"
    params: Mapping[str, Any] | None = None
    metrics: Mapping[str, Any] | None = None
    user_metadata: str | None = None
    new_files: list[AddFile | AddCDCFile] = field(default_factory=list)
    new_dvs: list[AddFile] = field(default_factory=list)
    info: TransactionInfo | None = None
    lock_version: int | None = None
    body: list[Action] | None = None
    staged: str | None = None
    version: int | None = None
    lock_ict: int | None = None  # the lock's in-commit timestamp (the publication's is above it)

    @property
    def table(self) -> str:
        return self.txn.table_path


class GroupTransaction:
    """Writes and reads of several tables, committed as one (see module docstring)."""

    def __init__(
        self,
        *,
        options: CommitOptions | None = None,
        step: Callable[[str, str], None] | None = None,
    ) -> None:
        self.txn_id = new_txn_id()
        self.options = options or DEFAULT_OPTIONS
        #: Called as ``step(name, table)`` after each step (``STEPS``); tests stop or kill a group there.
        self.step = step
        self._parts: dict[str, _Part] = {}
        self.result: GroupResult | None = None

    # -- building the transaction ------------------------------------------------------
    def _log(self, table: DeltaLog | str) -> DeltaLog:
        return table if isinstance(table, DeltaLog) else DeltaLog.for_table(normalize_table_path(table))

    def write(
        self, table: DeltaLog | str, *, isolation_level: str | None = None, snapshot: Snapshot | None = None
    ) -> OptimisticTransaction:
        """The transaction of ``table`` in this group (made at ``snapshot``, or its latest, on first use)."""
        dlog = self._log(table)
        part = self._parts.get(dlog.table_path)
        if part is None:
            txn = dlog.start_transaction(snapshot, isolation_level=isolation_level)
            part = self._parts[dlog.table_path] = _Part(txn)
        elif not part.writes and isolation_level is None:
            part.txn._isolation_override = None  # read first (at Serializable): now the table's own level
        part.writes = True
        return part.txn

    def read(
        self, table: DeltaLog | str, predicates: Sequence[Any] | None = None, *, snapshot: Snapshot | None = None
    ) -> list[AddFile]:
        """Record a read of ``table`` (``filter_files``); a table only read is checked at Serializable.
        ``snapshot``: the version read, on first use (the latest when None)."""
        dlog = self._log(table)
        part = self._parts.get(dlog.table_path)
        if part is None:
            txn = dlog.start_transaction(snapshot, isolation_level=props.SERIALIZABLE)
            part = self._parts[dlog.table_path] = _Part(txn)
        return part.txn.filter_files(predicates)

    def add(
        self,
        txn: OptimisticTransaction,
        actions: Iterable[Action],
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        operation_metrics: Mapping[str, Any] | None = None,
        *,
        new_files: Sequence[AddFile | AddCDCFile] = (),
        new_dvs: Sequence[AddFile] = (),
        user_metadata: str | None = None,
    ) -> None:
        """What ``txn`` (from ``write``) commits: its actions, as ``OptimisticTransaction.commit`` takes them.

        ``new_files`` / ``new_dvs``: the files written for it, deleted if the group aborts.
        """
        part = self._parts.get(txn.table_path)
        if part is None or part.txn is not txn:
            raise DeltaIllegalArgumentException(f"Table {txn.table_path}: not a transaction of this group")
        part.writes = True
        part.actions = list(actions)
        part.operation = operation
        part.params, part.metrics, part.user_metadata = operation_parameters, operation_metrics, user_metadata
        part.new_files, part.new_dvs = list(new_files), list(new_dvs)

    # -- commit ----------------------------------------------------------------------------
    def commit(self) -> GroupResult:
        """Commit every participant as one; the versions committed. Raises the conflict of the table
        that conflicted (nothing of the group is then in any table)."""
        if self.result is not None:
            raise DeltaIllegalArgumentException(f"Transaction {self.txn_id} already committed")
        if not any(p.writes for p in self._parts.values()):
            raise DeltaIllegalArgumentException("A transaction across tables must write at least one table")
        started = time.monotonic()
        order = [self._parts[k] for k in sorted(self._parts)]
        coordinator = order[0].table
        with groups.own_group(self.txn_id):
            try:
                for part in order:
                    self._prepare(part)
                self._step("prepared", coordinator)
                for part in order:
                    self._lock(part, order, coordinator, started)
                    self._step("lock", part.table)
                for part in order:
                    if part.writes:
                        self._stage(part, order, coordinator)
                self._step("staged", coordinator)
                decision = self._decide(order, coordinator)
            except Exception:
                self._abort(order, coordinator)
                raise
            if decision.get("decision") != "commit":
                self._abort(order, coordinator)
                raise ConcurrentTransactionException(
                    f"The transaction across tables {self.txn_id} was aborted by another writer before it "
                    f"decided: {decision.get('reason') or 'a writer or reader met its lock undecided'}.",
                    conflict_reason=ConflictReason.GROUP_ABORTED,
                    table=coordinator,
                    detail=f"decision record {groups.decision_path(coordinator, self.txn_id)}",
                    help="Retry the transaction. A group is aborted when it stalls longer than other writers "
                    f"wait for it (groups.LOCK_WAIT_S = {groups.LOCK_WAIT_S:g} s) between its locks and its decision.",
                )
            self._step("decided", coordinator)
            for part in order:
                if part.writes:
                    self._publish(part, started)
                    self._step("published", part.table)
        versions = {p.table: p.version for p in order if p.writes and p.version is not None}
        locks = {p.table: p.lock_version for p in order if p.lock_version is not None}
        self.result = GroupResult(self.txn_id, locks, versions, time.monotonic() - started)
        for part in order:
            self._after(part)
        return self.result

    def _step(self, name: str, table: str) -> None:
        if self.step is not None:
            self.step(name, table)

    def _prepare(self, part: _Part) -> None:
        txn = part.txn
        if txn.committed:
            raise DeltaIllegalArgumentException(f"Table {part.table}: its transaction already committed")
        if txn.snapshot is None:  # (a lock at version 0 would be a table without metadata)
            raise DeltaIllegalArgumentException(
                f"Table {part.table} does not exist: a transaction across tables writes existing tables; "
                "create it first"
            )
        actions = part.actions if part.writes else []
        operation = part.operation if part.writes else "READ"
        info = txn._prepare(actions, operation, part.params, part.metrics, None, part.user_metadata)
        if not part.writes:  # (an empty body would count as a compaction's, at SnapshotIsolation)
            info.isolation_level = txn.isolation_level
        txn._check_history_reads(info)
        part.info = info

    def _record(self, order: list[_Part], coordinator: str, writes: bool) -> dict[str, Any]:
        """The group record every lock and publication carries (#7438's shape: id, participants, versions)."""
        return {
            "txnId": self.txn_id,
            "coordinator": coordinator,
            "writes": writes,
            "participants": [
                {
                    "table": p.table,
                    "writes": p.writes,
                    **({"lockVersion": p.lock_version} if p.lock_version is not None else {}),
                    **({"version": p.lock_version + 1} if p.lock_version is not None and p.writes else {}),
                }
                for p in order
            ],
        }

    def _lock(self, part: _Part, order: list[_Part], coordinator: str, started: float) -> None:
        assert part.info is not None
        lock = _LockCommit(self._record(order, coordinator, part.writes), part.info)
        result, rebased = commit_loop.run_lock(
            part.txn.delta_log, part.info, started, self.options, part.txn.metadata, lock
        )
        part.lock_version = result.version
        part.info = rebased
        part.body = list(rebased.actions)
        part.lock_ict = lock.ict

    def _body(self, part: _Part, order: list[_Part], coordinator: str) -> list[Action]:
        """The body published at ``L+1``: the rebased actions, commitInfo carrying the group record."""
        assert part.body is not None
        ci = part.body[0]
        assert isinstance(ci, CommitInfo)
        values = dict(ci.values)
        values[groups.GROUP_KEY] = self._record(order, coordinator, True)
        ict = part.lock_ict
        if "inCommitTimestamp" in values and ict is not None:
            values["inCommitTimestamp"] = max(int(values["inCommitTimestamp"]), int(ict) + 1)
        rest = part.body[1:]
        info = part.info
        meta = info.metadata if info is not None else None
        if (
            info is not None and meta is not None and "inCommitTimestamp" in values
            and props.ICT_ENABLEMENT_VERSION in meta.configuration
            and (info.read_metadata is None or not info.read_metadata.derived(in_commit_timestamps))
        ):  # this body turns in-commit timestamps on: from L+1, where it lands (not the lock's L)
            assert part.lock_version is not None
            new = ict_enablement(meta, part.lock_version + 1, int(values["inCommitTimestamp"]))
            rest = [new if a is meta else a for a in rest]
            part.info = replace(info, metadata=new, actions=[info.actions[0], *rest])
        return [CommitInfo(values), *rest]

    def _stage(self, part: _Part, order: list[_Part], coordinator: str) -> None:
        assert part.lock_version is not None
        part.body = self._body(part, order, coordinator)
        path = groups.staged_path(part.table, part.lock_version + 1, self.txn_id)
        part.txn.delta_log.store.put_if_absent(path, actions_to_jsonl(part.body))
        part.staged = path

    def _decide(self, order: list[_Part], coordinator: str) -> Mapping[str, Any]:
        record = {
            "txnId": self.txn_id,
            "decision": "commit",
            "coordinator": coordinator,
            "timestamp": now_ms(),
            "participants": self._record(order, coordinator, True)["participants"],
        }
        store = self._parts[coordinator].txn.delta_log.store
        path = groups.decision_path(coordinator, self.txn_id)
        try:
            return groups.decide(store, path, record)
        except OSError:
            # The outcome of our put is unknown: whatever is there now decides (an abort if nothing).
            return groups.decide(store, path, {**record, "decision": "abort", "reason": "the decision write failed"})

    def _publish(self, part: _Part, started: float) -> None:
        assert part.lock_version is not None and part.body is not None and part.info is not None
        dlog = part.txn.delta_log
        version = part.lock_version + 1
        try:
            dlog.store.put_if_absent(dlog.commit_path(version), actions_to_jsonl(part.body))
            with contextlib.suppress(Exception):
                dlog.remember_commit(version, part.body)
            part.version = version
        except FileAlreadyExistsError:
            if _published_at(dlog, version, self.txn_id):
                part.version = version  # a reader or writer that met the lock published it
            else:
                info = replace(part.info, read_version=part.lock_version, actions=list(part.body))
                part.version, part.body = commit_loop.checked_publication(
                    dlog, info, self.txn_id, started, self.options
                )
        if part.staged is not None:
            with contextlib.suppress(OSError):
                dlog.store.delete(part.staged)

    def _abort(self, order: list[_Part], coordinator: str) -> None:
        """Before a decision: decide abort (if none is there), delete what the group wrote."""
        with contextlib.suppress(Exception):
            if any(p.lock_version is not None for p in order):
                store = self._parts[coordinator].txn.delta_log.store
                got = groups.decide(store, groups.decision_path(coordinator, self.txn_id), {
                    "txnId": self.txn_id, "decision": "abort", "coordinator": coordinator, "timestamp": now_ms(),
                    "reason": "the group failed before its decision",
                    "participants": self._record(order, coordinator, True)["participants"],
                })  # fmt: skip
                assert got.get("decision") == "abort"
        for part in order:
            if part.staged is not None:
                with contextlib.suppress(OSError):
                    part.txn.delta_log.store.delete(part.staged)
            if part.info is not None:
                discard_rebase_dvs(part.info)
            if part.writes:
                remove_written(part.table, part.new_files, part.new_dvs)

    def _after(self, part: _Part) -> None:
        """Committed: each written transaction records its result; steps after a commit never raise."""
        if not part.writes or part.version is None or part.info is None:
            return
        txn = part.txn
        txn.committed = CommitResult(part.version, 1, 0, self.result.duration_s if self.result else 0.0)
        txn.committed_actions = list(part.body or [])
        op = part.operation
        after_commit(
            "delete the deletion vector files rebasing wrote that the commit does not use", part.table,
            part.version, discard_rebase_dvs, part.info, txn.committed_actions, operation=op,
        )  # fmt: skip
        meta = part.info.metadata or part.info.read_metadata
        after_commit(
            "schedule a checkpoint", part.table, part.version, txn.delta_log.maybe_checkpoint_async, part.version,
            meta, txn.snapshot, operation=op,
        )  # fmt: skip


class _LockCommit:
    """The lock commit of one participant, made from its transaction as rebased so far (the same object
    while nothing it takes changes, so the commit loop writes its body once)."""

    def __init__(self, record: dict[str, Any], info: TransactionInfo) -> None:
        self.record = record
        self.lock_id = new_txn_id()
        self.ict: int | None = None
        self._made: CommitInfo | None = None

    def __call__(self, info: TransactionInfo) -> CommitInfo:
        ci = info.actions[0] if info.actions else None
        ict = ci.values.get("inCommitTimestamp") if isinstance(ci, CommitInfo) else None
        if self._made is not None and ict == self.ict:
            return self._made
        self.ict = int(ict) if ict is not None else None
        values: dict[str, Any] = {
            "timestamp": now_ms(),
            **({"inCommitTimestamp": self.ict} if self.ict is not None else {}),
            "operation": groups.LOCK_OPERATION,
            "operationParameters": {"txnId": self.record["txnId"]},
            **({"readVersion": info.read_version} if info.read_version >= 0 else {}),
            "isolationLevel": info.isolation_level,
            "isBlindAppend": False,
            "operationMetrics": {},
            "engineInfo": VERSION,
            "txnId": self.lock_id,
            groups.GROUP_KEY: self.record,
        }
        self._made = CommitInfo(values)
        return self._made


def _published_at(dlog: DeltaLog, version: int, txn_id: str) -> bool:
    try:
        entry = dlog.read_commit(version)
    except FileNotFoundError:
        return False
    rec = groups.group_of(entry.commit_info)
    return rec is not None and rec.get("txnId") == txn_id and not groups.is_lock(entry.commit_info)
