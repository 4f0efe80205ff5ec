"""The commit loop: put the commit at the next version until one is free, checking each winner.

``run`` puts the body (prepared once by the log store, ``_Body``) at ``readVersion+1``; when
another writer won that version it reads the winners, every commit after the last one
checked, and checks each (``rebasing.check_winner``: the conflict rules' decisions, carried
out). With no conflict it retries at the version after the newest winner at once. A commit
whose outcome was lost is recognised on retry by its ``txnId``; write errors are retried,
reported as certainly failed (``CommitWriteFailedError``) or of unknown outcome
(``CommitOutcomeUnknownError``). In-commit timestamps are kept above every winner's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from serialake.core.log import groups
from serialake.core.log.groups import is_lock, resolve_lock
from serialake.core.log.snapshot import parse_commit
from serialake.core.model import properties as props
from serialake.core.model.actions import Action, CommitInfo, Metadata, Protocol, actions_to_jsonl
from serialake.core.txn.options import (
    DEFAULT_OPTIONS,
    TRANSIENT_WRITE_RETRIES,
    UNKNOWN_WRITE_RETRIES,
    CommitOptions,
    CommitResult,
    new_txn_id,
)
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.rebasing import check_winner
from serialake.core.txn.summaries import TransactionInfo, WinnerSummary
from serialake.exceptions import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    CommitWriteFailedError,
    CorruptLogError,
    DeltaConcurrentModificationException,
    FileAlreadyExistsError,
    GroupPublicationError,
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

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog

__all__ = [
    "check_winner_is_valid",
    "checked_publication",
    "ict_enablement",
    "in_commit_timestamps",
    "operation_of",
    "publish_after_foreign",
    "rebase_ict",
    "run",
    "run_lock",
]


def run(
    dlog: DeltaLog, info: TransactionInfo, started: float, options: CommitOptions, metadata: Metadata | None
) -> tuple[CommitResult, list[Action]]:
    """Commit ``info.actions`` as the next free version after ``info.read_version``, checking the winners.

    Returns the result and the actions as committed (after rebasing; ``[]`` when the winners did
    all of the work). ``metadata``: the table's as the transaction commits it, to check winners by.
    Raises the conflict a winner's decision holds, or the error a write failed with.
    """
    body = _Body(dlog.store)
    try:
        result, actions, _ = _attempts(dlog, info, started, options, metadata, body)
        return result, actions
    finally:
        body.close()


def run_lock(
    dlog: DeltaLog,
    info: TransactionInfo,
    started: float,
    options: CommitOptions,
    metadata: Metadata | None,
    lock: Callable[[TransactionInfo], CommitInfo],
) -> tuple[CommitResult, TransactionInfo]:
    """Put a lock commit (``lock(info)``, a commitInfo alone) of a transaction across tables at the next
    free version after ``info.read_version``, checking every winner against ``info`` as ``run`` does.

    Returns the lock's version and ``info`` rebased over the winners (the body to publish after it).
    """
    body = _Body(dlog.store)
    try:
        result, _, rebased = _attempts(dlog, info, started, options, metadata, body, lock)
        return result, rebased
    finally:
        body.close()

def _attempts(
    dlog: DeltaLog,
    info: TransactionInfo,
    started: float,
    opts: CommitOptions,
    metadata: Metadata | None,
    body: _Body,
    lock: Callable[[TransactionInfo], CommitInfo] | None = None,
) -> tuple[CommitResult, list[Action], TransactionInfo]:
    """Put the commit at the next version until it lands, checking the winners of each version lost.

    With ``lock``, what is put is ``[lock(info)]`` (a lock commit) while the winners are checked
    against ``info`` (see ``run_lock``). A winner that is another group's lock is resolved first
    (``groups.resolve_lock``): its publication, if any, is then the next winner checked.
    """
    attempt_version = info.read_version + 1
    attempts = 0
    checked = 0
    last_checked = info.read_version
    uncertain_version: int | None = None  # an attempt that may have landed, not yet ruled out
    transient_failures = 0
    unknown_failures = 0  # attempts in a row whose outcome was unknown
    last_error: OSError | None = None
    # Where other writers committed lately, some will have landed while the body was written and
    # synced: read them first rather than make a put they refuse (one lost race fewer per commit).
    look_first = dlog.contended
    while True:
        put_actions: list[Action] = info.actions if lock is None else [lock(info)]
        looked_first = look_first and body.ready(dlog.commit_path(attempt_version), put_actions)
        look_first = False
        if not looked_first:
            attempts += 1
            try:
                body.put(dlog.commit_path(attempt_version), put_actions)
                after_commit(  # landed: caching it for this process's reads is a step after the commit
                    "cache the commit for this process's reads", info.table, attempt_version,
                    dlog.remember_commit, attempt_version, put_actions, operation=operation_of(info),
                )  # fmt: skip
                dlog.contended = checked > 0
                result = CommitResult(attempt_version, attempts, checked, time.monotonic() - started)
                return result, list(info.actions), info
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
                    raise _outcome_unknown(info, uncertain_version, attempts, started, last_error) from e
                raise _write_failed(
    dlog,                     info, attempt_version, f"could not {e.phase} for version {attempt_version}", e
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
        own_id = info.txn_id if lock is None else lock(info).txn_id
        for entry in winners:
            summary = WinnerSummary.of(entry.version, entry.items)
            check_winner_is_valid(summary, metadata, dlog.table_path)
            if summary.txn_id == own_id:
                result = CommitResult(entry.version, attempts, checked, time.monotonic() - started)
                return result, list(entry.actions if lock is None else info.actions), info
            if is_lock(summary.commit_info):  # (another group's lock: resolved before we go past it)
                resolve_lock(dlog, entry.version, summary.commit_info)  # type: ignore[arg-type]
            info = check_winner(info, summary)
            rebase_ict(info, summary)
            checked += 1
            last_checked = entry.version
        if log_read:
            # Read after the attempt returned, the log does not hold our txnId: it did not land
            # (a late landing would make the next put at that version fail, never duplicate).
            uncertain_version = None
        if info.nothing_left and lock is None:  # the winners did all of our work: write nothing
            return CommitResult(last_checked, attempts, checked, time.monotonic() - started, True), [], info
        attempt_version = last_checked + 1
        elapsed = time.monotonic() - started
        if unknown_failures >= UNKNOWN_WRITE_RETRIES and last_error is not None:
            # The store keeps failing without saying how: stop rather than spin for minutes.
            if uncertain_version is not None:
                raise _outcome_unknown(info, uncertain_version, attempts, started, last_error)
            raise _write_failed(
    dlog,                 info, attempt_version, f"{unknown_failures} writes in a row of version {attempt_version} "
                "failed and each time the log showed it had not landed", last_error,
            ) from last_error
        if attempts >= opts.max_attempts or elapsed > opts.max_duration_s:
            if uncertain_version is not None:
                raise _outcome_unknown(info, uncertain_version, attempts, started, last_error)
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
    dlog: DeltaLog, info: TransactionInfo, version: int, what: str, error: OSError
) -> CommitWriteFailedError:
    """The error for a commit write that certainly did not land: cause, errno and what to do."""
    log_path = dlog.log_path
    return CommitWriteFailedError(
        f"Commit to {info.table} failed: {what} ({errno_text(error)}); "
        f"{os_error_advice(error.errno, log_path)}. Nothing was committed, so retrying the operation is safe.",
        table=info.table,
        path=dlog.commit_path(version),
        errno=error.errno,
        strerror=error.strerror,
        version=version,
    )

def _outcome_unknown(
    info: TransactionInfo, version: int, attempts: int, started: float, error: OSError | None
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

def check_winner_is_valid(winner: WinnerSummary, metadata: Metadata | None, table_path: str) -> None:
    """A winner's partition values parse as their columns' types (the rest was checked when it was parsed).

    Nothing is committed on top of a commit no Delta reader may accept.
    """
    meta = winner.metadata or metadata
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
                raise _invalid(e, table_path, winner.version) from None


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


def in_commit_timestamps(meta: Metadata) -> bool:
    return bool(props.get(meta.configuration, props.ENABLE_ICT))


def operation_of(info: TransactionInfo) -> str:
    """The operation a commit records (``commitInfo.operation``), for messages."""
    ci = info.actions[0] if info.actions else None
    return str(ci.values.get("operation", "WRITE")) if isinstance(ci, CommitInfo) else "WRITE"


def rebase_ict(info: TransactionInfo, winner: WinnerSummary) -> None:
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
        info.read_metadata is None or not info.read_metadata.derived(in_commit_timestamps)
    ):  # this commit turns them on: it now lands after the winner
        info.metadata = ict_enablement(meta, winner.version + 1, int(ci.values["inCommitTimestamp"]))
        info.actions = [info.metadata if a is meta else a for a in info.actions]


def ict_enablement(meta: Metadata, version: int, timestamp: int) -> Metadata:
    """``meta`` recording that in-commit timestamps start at ``version``, whose ICT is ``timestamp``."""
    conf = dict(meta.configuration)
    conf[props.ICT_ENABLEMENT_VERSION] = str(version)
    conf[props.ICT_ENABLEMENT_TIMESTAMP] = str(timestamp)
    return replace(meta, configuration=conf)


# -- transactions across tables: a decided group's body after a foreign commit (``core.txn.group``) --


def checked_publication(
    dlog: DeltaLog, info: TransactionInfo, group_id: str, started: float, options: CommitOptions
) -> tuple[int, list[Action]]:
    """Publish ``info`` (a decided group's body, ``read_version`` its lock) after the commits a writer
    outside serialake put after the lock, each checked with the ordinary rules."""
    try:
        result, actions = run(dlog, info, started, options, info.metadata or info.read_metadata)
    except DeltaConcurrentModificationException as e:
        raise GroupPublicationError(
            f"Table {dlog.table_path}: the transaction across tables {group_id} was decided committed, but "
            f"version {e.winning_version} ({e.winning_operation or 'a commit'}), written by a writer outside "
            f"serialake after the group's lock at version {info.read_version}, conflicts with its commit: "
            f"{e.reason} The other tables of the group hold its commits; this one cannot. A catalog-free "
            "protocol cannot stop a writer that ignores the lock (docs/concurrency.md, \"Transactions across "
            "tables\"): repair this table by hand, e.g. re-run the group's write to it.",
            table=dlog.table_path,
            txn_id=group_id,
            foreign_version=e.winning_version,
        ) from e
    return result.version, actions


def publish_after_foreign(dlog: DeltaLog, lock_version: int, body: bytes) -> int:
    """A resolver's publication of a decided group's staged ``body`` when a writer outside serialake took
    ``lock_version+1``: after it, checked with the rules the body alone allows (its reads are unknown
    here: metadata, protocol, app ids, files removed twice). Returns the version published."""
    actions = parse_commit(body, dlog.table_path, lock_version + 1)
    ci = next((a for a in actions if isinstance(a, CommitInfo)), None)
    rec = groups.group_of(ci)
    group_id = str(rec.get("txnId")) if rec is not None else "?"
    snap = dlog.snapshot(version=lock_version)
    info = TransactionInfo(
        table=dlog.table_path,
        read_version=lock_version,
        read_metadata=snap.metadata,
        read_protocol=snap.protocol,
        isolation_level=str((ci.values.get("isolationLevel") if ci else None) or props.WRITE_SERIALIZABLE),
        read_predicates=[],
        read_files={},
        read_whole_table=False,
        read_app_ids=set(),
        actions=list(actions),
        metadata=next((a for a in actions if isinstance(a, Metadata)), None),
        protocol=next((a for a in actions if isinstance(a, Protocol)), None),
        is_blind_append=bool(ci.is_blind_append) if ci else False,
        txn_id=str(ci.txn_id) if ci else new_txn_id(),
    )
    version, _ = checked_publication(dlog, info, group_id, time.monotonic(), DEFAULT_OPTIONS)
    return version


# A reader resolving a lock (``core.log.groups``, a layer below) publishes through this in that one case.
groups.FOREIGN_PUBLISHER = publish_after_foreign
