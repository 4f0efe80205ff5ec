"""Transactions across tables, as the log sees them: lock commits, decisions, staged bodies, resolution.

A transaction over several tables (``core.txn.group``) first puts an empty **lock commit** in
every participant (a commit holding only ``commitInfo``, operation ``TRANSACTION LOCK``, with a
``serialakeGroup`` record), stages each written table's body at
``_delta_log/_staged_commits/<L+1>.<txnId>.json``, decides with one put-if-absent of
``<coordinator>/_delta_log/_groups/<txnId>.json`` and then publishes each body at ``L+1``.

Whoever meets a lock whose publication does not follow it (a writer checking winners, a reader
whose newest commit is a lock) **resolves** it here (``resolve_lock``) before going on: read the
decision; with none, wait briefly for the group (``LOCK_WAIT_S``), then contest by putting an
``abort`` decision at the same path (exactly one of commit / abort exists); on ``commit``
publish the staged body at ``L+1`` (put-if-absent; already there with the group's txnId: done);
on ``abort`` the lock stays an empty version and the staged body is deleted. A group this thread
is committing itself (``own_group``) is never resolved by it.

A version after the lock taken by a writer outside serialake (serialake writers all resolve the
lock first) is the one case the publication must be checked by the conflict rules: that step is
``core.txn.commit_loop.publish_after_foreign``, which registers itself here (``FOREIGN_PUBLISHER``).
Records follow the shape of delta-io/delta #7438: a transaction id and the participants with
their proposed versions, in every participant's commits (docs/concurrency.md, "Transactions
across tables").
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from serialake.core.model.actions import CommitInfo, now_ms
from serialake.exceptions import CorruptLogError, FileAlreadyExistsError

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog
    from serialake.storage.base import LogStore

__all__ = [
    "GROUP_KEY",
    "cleanup",
    "LOCK_OPERATION",
    "LOCK_WAIT_S",
    "decide",
    "decision_path",
    "group_of",
    "is_lock",
    "own_group",
    "read_decision",
    "resolve_lock",
    "staged_path",
]

#: ``commitInfo.operation`` of a lock commit.
LOCK_OPERATION = "TRANSACTION LOCK"
#: The ``commitInfo`` key of a group's record (in its lock commits and its publications).
GROUP_KEY = "serialakeGroup"
STAGED_DIR = "_staged_commits"
GROUPS_DIR = "_groups"
#: How long a writer or reader meeting an undecided lock waits for its group before aborting it
#: (seconds; a lock older than this is contested at once). ``SERIALAKE_GROUP_LOCK_WAIT_S`` overrides.
LOCK_WAIT_S = float(os.environ.get("SERIALAKE_GROUP_LOCK_WAIT_S", "0.2"))

#: ``core.txn.commit_loop.publish_after_foreign``, set when that module is imported (always, with
#: ``serialake.core``): a decided group's body put after a foreign commit, checked by the rules.
FOREIGN_PUBLISHER: Callable[[DeltaLog, int, bytes], int] | None = None

_OWN: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("serialake_own_group", default=frozenset())


@contextlib.contextmanager
def own_group(txn_id: str) -> Iterator[None]:
    """Inside the block, this context commits group ``txn_id``: its locks are not resolved here."""
    token = _OWN.set(_OWN.get() | {txn_id})
    try:
        yield
    finally:
        _OWN.reset(token)


def is_lock(ci: CommitInfo | None) -> bool:
    """Whether ``ci`` is a lock commit's (cheap: one key read of a commitInfo already parsed)."""
    return ci is not None and ci.values.get("operation") == LOCK_OPERATION and GROUP_KEY in ci.values


def group_of(ci: CommitInfo | None) -> Mapping[str, Any] | None:
    """The ``serialakeGroup`` record of a lock or publication's commitInfo (None for other commits)."""
    rec = ci.values.get(GROUP_KEY) if ci is not None else None
    return rec if isinstance(rec, Mapping) else None


def log_dir(table: str) -> str:
    return os.path.join(table, "_delta_log")


def staged_path(table: str, version: int, txn_id: str) -> str:
    """Where a group stages ``table``'s body for ``version`` (Delta's coordinated-commits naming)."""
    return os.path.join(log_dir(table), STAGED_DIR, f"{version:020d}.{txn_id}.json")


def decision_path(coordinator: str, txn_id: str) -> str:
    return os.path.join(log_dir(coordinator), GROUPS_DIR, f"{txn_id}.json")


def _store(dlog: DeltaLog, table: str) -> LogStore:
    if table == dlog.table_path:
        return dlog.store
    from serialake.storage import store_for

    return store_for(table)


def read_decision(store: LogStore, path: str) -> Mapping[str, Any] | None:
    """The decision record at ``path`` (None when no one decided yet)."""
    try:
        data = store.read(path)
    except FileNotFoundError:
        return None
    try:
        rec = json.loads(data)
    except ValueError as e:
        raise CorruptLogError(f"The decision record {path} of a transaction across tables is not JSON: {e}") from e
    if not isinstance(rec, dict) or rec.get("decision") not in ("commit", "abort"):
        raise CorruptLogError(f"The decision record {path} of a transaction across tables holds no decision: {rec!r}")
    return rec


def decide(store: LogStore, path: str, record: Mapping[str, Any]) -> Mapping[str, Any]:
    """Put ``record`` (a decision) at ``path`` unless one is there: the decision that holds either way."""
    try:
        store.put_if_absent(path, json.dumps(dict(record), sort_keys=True).encode())
        return record
    except FileAlreadyExistsError:
        pass
    got = read_decision(store, path)
    if got is None:  # (put-if-absent refused: the file exists; a store that lost it is broken)
        raise CorruptLogError(f"The decision record {path} exists and cannot be read")
    return got


def _await_decision(store: LogStore, path: str, lock_ms: int, wait_s: float) -> Mapping[str, Any] | None:
    """The decision at ``path``, polled for up to ``wait_s`` (less when the lock is older than that)."""
    age = max(0.0, (now_ms() - lock_ms) / 1000) if lock_ms > 0 else 0.0
    deadline = time.monotonic() + max(0.0, wait_s - age)
    pause = 0.002
    while True:
        got = read_decision(store, path)
        if got is not None or time.monotonic() >= deadline:
            return got
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.02)


def _is_publication(dlog: DeltaLog, version: int, txn_id: str) -> bool | None:
    """Whether ``version`` holds group ``txn_id``'s publication (None: no such version)."""
    try:
        entry = dlog.read_commit(version)
    except FileNotFoundError:
        return None
    rec = group_of(entry.commit_info)
    return rec is not None and rec.get("txnId") == txn_id and not is_lock(entry.commit_info)


def resolve_lock(dlog: DeltaLog, version: int, ci: CommitInfo, *, wait_s: float | None = None) -> str:
    """Resolve the lock commit ``ci`` at ``version`` of ``dlog``'s table (see module docstring).

    Returns ``"own"`` (this context commits the group), ``"published"`` (its body for this table is
    in the log now, at ``version+1`` or, after a foreign commit, later), ``"committed"`` (decided
    committed; this table was only read) or ``"aborted"``.
    """
    rec = group_of(ci)
    if rec is None:
        return "aborted"
    txn_id = str(rec.get("txnId"))
    if txn_id in _OWN.get():
        return "own"
    table = dlog.table_path
    writes = bool(rec.get("writes"))
    if writes and _is_publication(dlog, version + 1, txn_id):
        return "published"
    coordinator = str(rec.get("coordinator") or table)
    cstore = _store(dlog, coordinator)
    dpath = decision_path(coordinator, txn_id)
    lock_ms = int(ci.values.get("timestamp") or 0)
    decision = _await_decision(cstore, dpath, lock_ms, LOCK_WAIT_S if wait_s is None else wait_s)
    if decision is None:
        decision = decide(cstore, dpath, {
            "txnId": txn_id, "decision": "abort", "coordinator": coordinator, "timestamp": now_ms(),
            "reason": f"a serialake writer or reader of {table} met the lock at version {version} undecided",
            "participants": list(rec.get("participants") or []),
        })  # fmt: skip
    spath = staged_path(table, version + 1, txn_id)
    if decision["decision"] == "abort":
        with contextlib.suppress(OSError):
            dlog.store.delete(spath)
        return "aborted"
    if not writes:
        return "committed"
    return _publish(dlog, version, txn_id, spath)


def _publish(dlog: DeltaLog, version: int, txn_id: str, spath: str) -> str:
    """Put the staged body at ``version+1``; after a foreign commit there, through the conflict rules."""
    try:
        body = dlog.store.read(spath)
    except FileNotFoundError:
        # Published and cleaned up by another resolver (or the group) since we looked.
        if _is_publication(dlog, version + 1, txn_id):
            return "published"
        body = None
    if body is not None:
        try:
            dlog.store.put_if_absent(dlog.commit_path(version + 1), body)
        except FileAlreadyExistsError:
            pass
        if _is_publication(dlog, version + 1, txn_id):
            with contextlib.suppress(OSError):
                dlog.store.delete(spath)
            return "published"
    if body is None:
        # Published after a foreign commit (the group, or another resolver) and cleaned up: find it.
        for entry in dlog.commits_after(version):
            rec = group_of(entry.commit_info)
            if rec is not None and rec.get("txnId") == txn_id and not is_lock(entry.commit_info):
                return "published"
        raise CorruptLogError(
            f"Table {dlog.table_path}: the transaction across tables {txn_id} was decided committed, but its "
            f"body for version {version + 1} ({spath}) is gone and the version does not hold it"
        )
    # A writer outside serialake took the version: the body goes after it, checked by the rules.
    if FOREIGN_PUBLISHER is None:
        raise CorruptLogError(f"Table {dlog.table_path}: no commit loop to publish transaction {txn_id} with")
    FOREIGN_PUBLISHER(dlog, version, body)
    with contextlib.suppress(OSError):
        dlog.store.delete(spath)
    return "published"


def resolve_newest(dlog: DeltaLog, ci: CommitInfo | None, version: int) -> bool:
    """A reader's check: resolve the lock at ``version`` (the newest commit read); True when the log
    may have changed (the caller reads on)."""
    if not is_lock(ci):
        return False
    assert ci is not None
    return resolve_lock(dlog, version, ci) == "published"


def _participant_done(dlog: DeltaLog, txn_id: str, part: Mapping[str, Any]) -> bool:
    """Whether a committed group is finished in participant ``part``: its body published (when it
    writes) and a version after its lock, so no reader meets the lock as its newest commit (a
    table gone, or its lock no longer in the log, is done too). Finishes a publication it finds missing."""
    table, lock = part.get("table"), part.get("lockVersion")
    if not isinstance(table, str) or not isinstance(lock, int):
        return True  # (never locked: nothing of the group is there)
    plog = dlog if table == dlog.table_path else type(dlog).for_table(table)  # (DeltaLog: it imports us)
    try:
        ci = plog.read_commit(lock).commit_info
    except FileNotFoundError:
        return True
    rec = group_of(ci)
    if not is_lock(ci) or rec is None or rec.get("txnId") != txn_id:
        return True  # (the lock is no longer there: the log was rewritten or expired)
    assert ci is not None
    if part.get("writes") and not _is_publication(plog, lock + 1, txn_id):
        # Decided committed: published after a foreign commit took L+1, or not yet (then published now,
        # as whoever meets the lock would).
        if resolve_lock(plog, lock, ci, wait_s=0) != "published":
            return False
    try:
        plog.read_commit(lock + 1)
    except FileNotFoundError:
        return False  # the lock is the newest commit: readers still look up its decision
    return True


def cleanup(dlog: DeltaLog, older_than_ms: int, *, dry_run: bool = False) -> list[str]:
    """Delete the records of transactions across tables in ``dlog``'s table no one needs any more,
    modified before ``older_than_ms``; returns their paths (with ``dry_run``: what would be deleted).

    - A **staged body** (``_staged_commits/<v>.<txnId>.json``) is resolved through the lock at
      ``v-1`` (``resolve_lock`` without waiting: a group decided committed is published, an
      undecided one aborted) and is then gone; one whose lock is not in the log is deleted.
    - A **decision record** (``_groups/<txnId>.json``, only in the coordinator) is deleted once the
      group is finished everywhere: aborted (its staged bodies in every participant deleted with
      it), or committed with
      every written participant's body published and every participant's lock followed by a
      later version (``_participant_done``: a lock that is a table's newest commit is still
      looked up by readers, which would find no decision and contest it).

    Called after each checkpoint with ``delta.logRetentionDuration`` (``DeltaLog``), so a record
    goes when the log it belongs to could go. The one assumption: no group stalls between its
    locks and its decision for longer than that (30 days by default); such a group could
    otherwise put a decision where the abort of a contender was removed.
    """
    store = dlog.store
    deleted: list[str] = []

    def drop(path: str, where: LogStore | None = None) -> None:
        deleted.append(path)
        if not dry_run:
            with contextlib.suppress(FileNotFoundError):
                (where or store).delete(path)

    staged: dict[str, tuple[LogStore, str, list[str]]] = {}  # participant -> its store, staged dir, names

    def staged_of(table: str) -> tuple[LogStore, str, list[str]]:
        """A participant's staged bodies, listed once for all the records that name it."""
        if table not in staged:
            pstore, pdir = _store(dlog, table), os.path.join(log_dir(table), STAGED_DIR)
            staged[table] = (pstore, pdir, [st.name for st in pstore.list_from(pdir)])
        return staged[table]

    sdir = os.path.join(log_dir(dlog.table_path), STAGED_DIR)
    for st in store.list_from(sdir):
        name, _, rest = st.name.partition(".")
        txn_id = rest.removesuffix(".json")
        if st.modification_time >= older_than_ms or not name.isdigit() or not rest.endswith(".json"):
            continue
        path = os.path.join(sdir, st.name)
        version = int(name)
        try:
            ci = dlog.read_commit(version - 1).commit_info if version > 0 else None
        except FileNotFoundError:
            ci = None
        rec = group_of(ci)
        if not is_lock(ci) or rec is None or rec.get("txnId") != txn_id:
            drop(path)  # no lock of its group before it: nothing can publish it
        elif dry_run:
            deleted.append(path)
        else:
            assert ci is not None
            outcome = resolve_lock(dlog, version - 1, ci, wait_s=0)  # (aborted, or published: deleted)
            if outcome in ("aborted", "published") and store.exists(path):
                drop(path)  # (a delete that failed earlier)
            elif not store.exists(path):
                deleted.append(path)

    gdir = os.path.join(log_dir(dlog.table_path), GROUPS_DIR)
    for st in store.list_from(gdir):
        if st.modification_time >= older_than_ms or not st.name.endswith(".json"):
            continue
        path = os.path.join(gdir, st.name)
        decision = read_decision(store, path)
        if decision is None:
            continue
        txn_id = str(decision.get("txnId") or st.name.removesuffix(".json"))
        parts = [p for p in decision.get("participants") or [] if isinstance(p, Mapping)]
        if decision["decision"] == "abort":
            for table in {p.get("table") for p in parts}:  # (a contender's record may not know the versions)
                if not isinstance(table, str):
                    continue
                pstore, pdir, names = staged_of(table)
                for name in names:
                    if name.endswith(f".{txn_id}.json"):
                        drop(os.path.join(pdir, name), pstore)
            drop(path)
        elif all([_participant_done(dlog, txn_id, p) for p in parts]):  # (each one finished where it can be)
            drop(path)
    return deleted
