"""Checking a transaction against a winner: the conflict rules' decisions, carried out.

``check_winner`` runs the rules of ``conflicts`` in Delta's order (``WINNER_RULES``, then
``check_delete_delete`` for each file the winner removed) and carries out each decision
(``decisions``) before the next rule sees the transaction:

- a ``Conflict`` is raised (its exception class, ``ConflictReason``, reason and details);
- a ``Rebase`` is gone on with, once what it implies is done: identity values shifted in our
  new files (``identity_rebase.rewrite_files`` writes new data files, recorded in
  ``TransactionInfo.rebase_files``; a failure is a ``MetadataChangedException``), and its row
  changes made: a deletion vector written for each ``NewVector`` (recorded in
  ``TransactionInfo.rebase_dvs``), our actions replaced, the vectors no action of ours uses any
  more deleted, a compaction's file metrics counted again when winners did some of its work.
  A vector that cannot be written raises the rebase's ``if_fails`` (the file-level conflict).

The files rebasing wrote are deleted once no action of ours uses them: when a later rebase
replaces them, and, by ``discard_rebase_dvs``, when the commit fails and after it committed
(``OptimisticTransaction.commit``). Only those are ever deleted: never a winner's files, nor
those the operation wrote itself (its caller's to clean up, ``core.txn.written``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import replace

from serialake.core.model.actions import Action, AddCDCFile, AddFile, CommitInfo
from serialake.core.predicates.row_eval import CannotEvaluate
from serialake.core.txn import identity_rebase
from serialake.core.txn import row_level as RL
from serialake.core.txn.conflicts import WINNER_RULES, check_delete_delete, metadata_conflict
from serialake.core.txn.decisions import Conflict, Decision, IdentityShift, NewVector, RowChanges
from serialake.core.txn.summaries import TransactionInfo, WinnerSummary

__all__ = ["check_winner", "discard_dropped_dvs", "discard_rebase_dvs", "discard_rebase_files"]


def check_winner(info: TransactionInfo, winner: WinnerSummary) -> TransactionInfo:
    """Raise the first conflict between ``info`` and ``winner``, else return the rebased info."""
    for rule in WINNER_RULES:
        decision = rule(info, winner)
        if decision is not None:
            info = _carry_out(info, winner, decision)
    for r in winner.removes:
        if r.path in info.removes:  # (the rule decides nothing for a file we do not remove: skip the call)
            decision = check_delete_delete(info, winner, r)
            if decision is not None:
                info = _carry_out(info, winner, decision)
    return info


def _carry_out(info: TransactionInfo, w: WinnerSummary, decision: Decision) -> TransactionInfo:
    """The transaction after ``decision`` (a rule's on ``info`` and winner ``w``); raises a conflict."""
    if decision is None:
        return info
    if isinstance(decision, Conflict):
        raise decision.error()
    rebased = decision.info
    if decision.identity is not None:
        rebased = _shift_identity(info, w, rebased, decision.identity)
    if decision.rows is not None:
        try:
            _change_rows(rebased, decision.rows)
        except (CannotEvaluate, OSError, ValueError):
            if decision.if_fails is None:
                raise
        else:
            return rebased
        raise decision.if_fails.error()  # (raised outside the handler, as the rules raised it)
    return rebased


def _shift_identity(
    info: TransactionInfo, w: WinnerSummary, rebased: TransactionInfo, shift: IdentityShift
) -> TransactionInfo:
    """``rebased`` with its new files holding generated identity values rewritten; a conflict if that fails."""
    try:
        actions = identity_rebase.rewrite_files(rebased, shift)
    except (OSError, ValueError, ImportError) as e:
        failure: Exception = e
    else:
        return replace(rebased, actions=actions)
    raise metadata_conflict(info, w, f"Re-basing this write's identity values failed: {failure}").error()


def _change_rows(info: TransactionInfo, changes: RowChanges) -> None:
    """Make a rebase's row changes in ``info``: vectors written, actions replaced, dropped vectors deleted."""
    new = [_with_new_vector(info, a) if isinstance(a, NewVector) else a for a in changes.new]
    info.replace_actions(set(changes.drop), new)
    info.compaction_bases.update(changes.bases)
    if changes.rebased_away:
        info.rebased_away = True
    discard_dropped_dvs(info)  # e.g. the vector an earlier rebase of the same file wrote
    if changes.rebased_away:
        _recount_metrics(info)


def _with_new_vector(info: TransactionInfo, new: NewVector) -> AddFile:
    """``new.add`` with a deletion vector of ``new.rows``, written now and remembered so that it is
    deleted if rebasing drops it."""
    dv = RL.write_dv(info.table, new.rows)
    info.rebase_dvs.append(dv)
    return replace(new.add, deletion_vector=dv)


def _recount_metrics(info: TransactionInfo) -> None:
    """Our compaction's file metrics counted again after winners did some of its work."""
    ci = info.actions[0] if info.actions else None
    metrics = ci.values.get("operationMetrics") if isinstance(ci, CommitInfo) else None
    if not isinstance(ci, CommitInfo) or not isinstance(metrics, dict):
        return
    adds = info.adds
    removes = list(info.removes.values())
    counts = {
        "numAddedFiles": len(adds),
        "numFilesAdded": len(adds),
        "numRemovedFiles": len(removes),
        "numFilesRemoved": len(removes),
        "numAddedBytes": sum(a.size or 0 for a in adds),
        "numRemovedBytes": sum(r.size or 0 for r in removes),
        "numDeletionVectorsRemoved": sum(1 for r in removes if r.deletion_vector is not None),
    }
    recounted = {k: str(counts[k]) if k in counts else v for k, v in metrics.items()}
    info.actions[0] = CommitInfo({**ci.values, "operationMetrics": recounted})


# -- the files rebasing wrote ---------------------------------------------------------------------


def discard_dropped_dvs(info: TransactionInfo) -> None:
    """Delete the vectors rebasing wrote that no action of ours references any more (never committed)."""
    discard_rebase_dvs(info, info.actions)


def discard_rebase_dvs(info: TransactionInfo, keep: Iterable[Action] = ()) -> None:
    """Delete the deletion vector files rebasing wrote (``info.rebase_dvs``) that no add of ``keep`` uses,
    and the data files re-basing identity values wrote (``discard_rebase_files``) that none uses.

    Rebasing writes a new vector each time it merges rows into one of our adds; a later rebase
    may replace that add again, and a failed commit references none of them. Only vectors in
    ``info.rebase_dvs`` are ever deleted: never a winner's, nor those the operation wrote itself
    (its caller's to clean up). ``OptimisticTransaction.commit`` calls this when the commit fails
    (``keep`` empty) and after it commits (``keep``: the actions committed).
    """
    keep = list(keep)
    discard_rebase_files(info, keep)  # data files re-basing identity values wrote
    if not info.rebase_dvs:  # (every commit comes here; almost none rebased a vector)
        return

    from serialake.core.dv.deletion_vectors import dv_absolute_path
    from serialake.storage.datafiles import Access

    used = {a.dv_id for a in keep if isinstance(a, AddFile)}
    for dv in [d for d in info.rebase_dvs if d.unique_id not in used]:
        info.rebase_dvs.remove(dv)
        path = dv_absolute_path(info.table, dv) if dv.storage_type == "u" else None
        if path:
            with contextlib.suppress(OSError):
                Access().delete(path)  # (local or remote; a missing file is no error)


def discard_rebase_files(info: TransactionInfo, keep: Iterable[Action] = ()) -> None:
    """Delete the files re-basing identity values wrote (``info.rebase_files``) that no action of
    ``keep`` references."""
    if not info.rebase_files:
        return
    from serialake.core.model.paths import absolute_path
    from serialake.storage.datafiles import Access

    used = {a.path for a in keep if isinstance(a, (AddFile, AddCDCFile))}
    for path in [p for p in info.rebase_files if p not in used]:
        info.rebase_files.remove(path)
        try:
            full = absolute_path(info.table, path)
            Access.here(full).delete(full)
        except OSError:
            pass
