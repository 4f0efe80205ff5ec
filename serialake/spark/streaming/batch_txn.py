"""The micro-batch a ``foreachBatch`` function runs for: its writes commit with the batch's txn.

``serialake.streaming.idempotent(fn)`` runs ``fn(batch_df, batch_id)`` inside a context
naming the application (the streaming query's id, which Spark keeps in the checkpoint, or
``app_id``) and the batch. Every serialake write or DML (``serialake.write``,
``df.write.format("delta")``, ``saveAsTable``, ``insertInto``, ``writeTo(...).append()``,
SQL ``INSERT``, and ``DELETE`` / ``UPDATE`` / ``MERGE`` through ``DeltaTable`` or SQL) made
by ``fn`` joins the context when it opens its transaction (``join``): it reads the
application's txn version in its snapshot and commits ``SetTransaction`` actions with its
data. A batch replayed after a crash finds its writes committed and skips them; two runs of
one query writing at once conflict (``ConcurrentTransactionException``).

Several writes to one table in one batch: the k-th write opened on the table (0, 1, ...)
checks the application id ``app`` (k = 0) or ``app#k`` and its commit sets
``SetTransaction(id, batch)`` for ``app``, ``app#1`` ... ``app#k`` (a later write marks the
earlier ones done too). On replay the k-th write is skipped when it or any later write of
the batch committed: an earlier write that committed nothing the first time (a DELETE that
matched no row, a MERGE that failed and was retried by the function) is not run again over
the later writes' results. The usual case, one write per table and batch, commits
``SetTransaction(app, batch)``, Delta's convention (delta-spark's sink writes the same).
The function must make the same writes in the same order for a batch (Spark hands it the
same rows).

A batch id lower than one the application already committed to the table means the query's
checkpoint was reset or moved back (a new checkpoint, the same ``app_id``): its writes would be
skipped as done and its rows lost, so the write fails with ``BatchResetError`` naming both ids,
unless ``idempotent(fn, failOnReset=False)`` asks for the skip (delta-spark's behaviour).

Inside ``serialake.transaction`` (several tables written as one in the batch) each table's
body carries the marks, so the batch's writes to all tables commit once, together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from serialake.core.model.actions import Action, SetTransaction, now_ms
from serialake.core.txn.transaction import CommitResult, OptimisticTransaction
from serialake.exceptions import DeltaIllegalArgumentException

__all__ = ["BatchResetError", "BatchTxn", "app_ids", "current", "in_batch", "join"]


class BatchResetError(DeltaIllegalArgumentException):
    """A batch older than one the application already committed to a table (a reset checkpoint)."""


@dataclass
class BatchTxn:
    """One call of a ``foreachBatch`` function: the application and batch its writes commit as."""

    app_id: str
    version: int
    #: a batch id below the one committed fails (``BatchResetError``); False: it is skipped as done
    fail_on_reset: bool = True
    #: table path -> writes opened on it so far in this batch
    opened: dict[str, int] = field(default_factory=dict)

    def next_index(self, table: str) -> int:
        k = self.opened.get(table, 0)
        self.opened[table] = k + 1
        return k


_CURRENT: ContextVar[BatchTxn | None] = ContextVar("serialake_batch_txn", default=None)


def current() -> BatchTxn | None:
    """The batch the running code writes for (None outside ``idempotent``)."""
    return _CURRENT.get()


@contextmanager
def in_batch(app_id: str, version: int, *, fail_on_reset: bool = True) -> Iterator[BatchTxn]:
    """Writes made inside commit as batch ``version`` of application ``app_id``."""
    if not app_id:
        raise ValueError("an idempotent batch needs a non-empty application id")
    if int(version) < 0:
        raise ValueError(f"a batch id is >= 0, not {version}")
    batch = BatchTxn(str(app_id), int(version), fail_on_reset)
    token = _CURRENT.set(batch)
    try:
        yield batch
    finally:
        _CURRENT.reset(token)


def app_ids(app_id: str, k: int) -> list[str]:
    """The application ids the k-th write of a batch to one table sets: ``app``, ``app#1`` ... ``app#k``."""
    return [app_id if j == 0 else f"{app_id}#{j}" for j in range(k + 1)]


def join(txn: OptimisticTransaction) -> bool:
    """Make ``txn`` commit as part of the current batch (nothing outside one); True when already done.

    The check reads the txn version in ``txn``'s snapshot (recorded as read: a concurrent
    commit of the same application id fails this one with ``ConcurrentTransactionException``).
    When the write is already done, ``txn.commit`` writes nothing and returns the version
    read, with ``committed.work_already_done`` (the files written for it are deleted by
    ``commit_or_clean_up``); callers that can stop earlier do (``write`` returns None).
    """
    batch = _CURRENT.get()
    if batch is None:
        return False
    ids = app_ids(batch.app_id, batch.next_index(txn.table_path))
    done = txn.txn_version(ids[-1])
    for other in ids[:-1]:
        txn.txn_version(other)  # read too: they are written with this commit
    skip = done is not None and done >= batch.version
    if done is not None and done > batch.version and batch.fail_on_reset:
        raise BatchResetError(
            f"Batch {batch.version} of application {ids[-1]!r} writes {txn.table_path}, where batch {done} of "
            f"that application is already committed (SetTransaction {ids[-1]!r} version {done}): the streaming "
            "query's checkpoint was reset or moved back. Writing nothing would lose this batch's rows; writing "
            "would apply batches twice. Start the query with a new checkpoint and a new application id "
            "(idempotent(fn, app_id=...)), or pass failOnReset=False to skip batches already passed, as "
            "delta-spark does."
        )
    original: Callable[..., int] = txn.commit

    def commit(actions: Iterable[Action], *args: Any, **kwargs: Any) -> int:
        if skip:
            txn.committed_actions = []
            txn.committed = CommitResult(
                version=txn.read_version, attempts=0, winners_checked=0, duration_s=0.0, work_already_done=True
            )
            return txn.read_version
        stamp = now_ms()
        marks = [SetTransaction(app_id=i, version=batch.version, last_updated=stamp) for i in ids]
        return original([*actions, *marks], *args, **kwargs)

    txn.commit = commit  # type: ignore[method-assign]
    return skip
