"""Conflict rules: decide about one transaction against one winning commit.

Each rule returns a decision (``decisions``): ``None`` (no conflict: go on as is), a
``Conflict`` (the exception class, ``ConflictReason``, reason and details), or a ``Rebase``
(adopt the winner's protocol or allow-listed metadata, move identity values past its
allocation, or change rows through deletion vectors). The rules write and delete nothing:
``rebasing.check_winner`` runs them in Delta's order (``WINNER_RULES``, then
``check_delete_delete`` for each file the winner removed), carries out each decision before
the next rule sees the transaction, and raises the first conflict: protocol, metadata,
domain metadata, app transactions, appends, delete-vs-read, delete-vs-delete. The caller
then checks the next winner.

Where we go further than OSS Delta (by design, see conflict-matrix.md):
- a winner's ``dataChange=false`` adds and removes (compaction) rearrange rows without
  changing them, so they never count as new rows or as deleted-while-read;
- an add whose path the same winner also removes (a deletion-vector update of a file
  that existed) brings no new rows, so it is not an append candidate;
- with deletion vectors, a compaction meeting a compaction or a DML on the same file is
  rebased by rows (``serialake.core.txn.compaction_rebase``): through the ``serialake.compactedFrom``
  mapping of a bin-packing output, or by row content where a sorting compaction (ZORDER,
  clustering) wrote none (``serialake.core.txn.row_matching``; docs/concurrency.md, "Compactions");
  a compaction left with nothing to write commits nothing.

To decide, row-level rules read: deletion vectors (``row_level.dv_rows``), and data rows
and Parquet footers through the transaction's row reader (``TransactionInfo.reader``, with the
read predicates' row evaluators). Carrying out a rebase by rows writes new deletion vectors;
each is recorded (``TransactionInfo.rebase_dvs``) and its file deleted once no action of ours
uses it: when a later rebase replaces it, and when the commit fails (``rebasing.discard_rebase_dvs``,
called by ``OptimisticTransaction.commit``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.model import features
from serialake.core.model import properties as props
from serialake.core.model.actions import AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from serialake.core.predicates import row_eval
from serialake.core.txn import compaction_rebase as CR
from serialake.core.txn import identity_rebase
from serialake.core.txn import row_level as RL
from serialake.core.txn.decisions import Conflict, Decision, NewVector, Rebase, RowChanges
from serialake.core.txn.summaries import ReadPredicate, TransactionInfo, WinnerSummary
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConflictReason,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
    UnsupportedFeatureError,
)

# Metadata keys a winner may turn on without failing concurrent writers that change no
# metadata: enabling them changes nothing a concurrent writer relies on.
FEATURE_ENABLEMENT_KEYS = {
    props.ENABLE_DELETION_VECTORS.lower(): "true",
    props.ENABLE_ICT.lower(): "true",
    "delta.enablerowtracking": "true",
    "delta.checkpointpolicy": "v2",
}


def _conflict(
    exc: type[DeltaConcurrentModificationException],
    conflict_reason: ConflictReason,
    reason: str,
    info: TransactionInfo,
    winner: WinnerSummary,
    **kw: Any,
) -> Conflict:
    """The conflict ``exc`` with ``winner``: why (the rule's ``ConflictReason`` and in words), with the
    winner's version and operation."""
    return Conflict(
        exc,
        conflict_reason,
        reason,
        {
            "table": info.table,
            "read_version": info.read_version,
            "winning_version": winner.version,
            "winning_operation": winner.operation,
            "winning_commit_info": dict(winner.commit_info.values) if winner.commit_info else None,
            **kw,
        },
    )


def check_protocol(info: TransactionInfo, w: WinnerSummary) -> Decision:
    if w.protocol is None:
        return None
    if info.read_version < 0:
        return _conflict(
            ProtocolChangedException,
            ConflictReason.CONCURRENT_CREATE,
            "The table was created concurrently: another writer committed the first version "
            "of this path first.",
            info,
            w,
            help="Another job created this table at the same time. Reload it and retry the write "
            "(as an append, or with createIfNotExists).",
        )
    if info.protocol is not None:
        if replaces_table(w.operation) and replaces_table(_own_operation(info)):
            return _replaced_concurrently(info, w)
        return _conflict(
            ProtocolChangedException,
            ConflictReason.PROTOCOL_CHANGE,
            "The protocol was changed concurrently, and this transaction changes it too.",
            info,
            w,
        )
    before = info.read_protocol or Protocol()
    dropped = features.table_features(before) - features.table_features(w.protocol)
    if dropped:
        return _conflict(
            ProtocolChangedException,
            ConflictReason.FEATURE_DROPPED,
            f"A concurrent commit dropped table feature(s) {', '.join(sorted(dropped))}.",
            info,
            w,
        )
    try:
        features.check_writable(w.protocol, None, info.table)
    except UnsupportedFeatureError as e:
        return _conflict(
            ProtocolChangedException,
            ConflictReason.UNSUPPORTED_PROTOCOL,
            f"The table was upgraded concurrently: {e}",
            info,
            w,
        )
    return Rebase(replace(info, read_protocol=w.protocol))


def replaces_table(operation: str | None) -> bool:
    """Whether a commit's operation creates or replaces the whole table (CREATE / REPLACE TABLE ...)."""
    op = (operation or "").upper()
    return op.startswith(("CREATE", "REPLACE"))


def _own_operation(info: TransactionInfo) -> str | None:
    ci = next((a for a in info.actions if isinstance(a, CommitInfo)), None)
    return ci.operation if ci is not None else None


def _replaced_concurrently(info: TransactionInfo, w: WinnerSummary) -> Conflict:
    return _conflict(
        ProtocolChangedException,
        ConflictReason.CONCURRENT_REPLACE,
        f"The table was created or replaced concurrently by a {w.operation} commit while this "
        f"{_own_operation(info)} was running.",
        info,
        w,
        help="Two jobs created or replaced this table at the same time: only one can. Re-run this one if its "
        "table should win, after checking what the other wrote.",
    )


def _allowed_metadata_change(before: Metadata | None, after: Metadata) -> bool:
    if before is None:
        return False
    if (
        before.id != after.id
        or before.schema_string != after.schema_string
        or tuple(before.partition_columns) != tuple(after.partition_columns)
    ):
        return False
    old = {k.lower(): v for k, v in before.configuration.items()}
    new = {k.lower(): v for k, v in after.configuration.items()}
    for key in set(old) | set(new):
        if old.get(key) == new.get(key):
            continue
        if FEATURE_ENABLEMENT_KEYS.get(key) != (new.get(key) or "").lower():
            return False
    return True


def check_metadata(info: TransactionInfo, w: WinnerSummary) -> Decision:
    if w.metadata is None:
        return None
    if info.metadata is not None and replaces_table(w.operation) and replaces_table(_own_operation(info)):
        return _replaced_concurrently(info, w)  # e.g. a winner that wrote no protocol action
    if info.metadata is None and _allowed_metadata_change(info.read_metadata, w.metadata):
        return Rebase(replace(info, read_metadata=w.metadata))
    rebased, why = identity_rebase.rebase(info, w)  # a concurrent identity allocation: move ours past it
    if rebased is not None:
        return rebased
    return metadata_conflict(info, w, why)


def metadata_conflict(info: TransactionInfo, w: WinnerSummary, why: str | None) -> Conflict:
    """``MetadataChangedException`` for winner ``w``'s metadata change; ``why``: what kept an identity
    allocation from being re-based (also when rewriting the files failed), if that is all it was."""
    assert w.metadata is not None
    what = _describe_metadata_change(info.read_metadata, w.metadata)
    # The winner's change alone would have been adopted (``why``: an identity allocation only) but ours
    # writes metadata too; otherwise the winner's change itself fails this transaction.
    both = info.metadata is not None and (why is not None or _allowed_metadata_change(info.read_metadata, w.metadata))
    return _conflict(
        MetadataChangedException,
        ConflictReason.BOTH_CHANGE_METADATA if both else ConflictReason.METADATA_CHANGE,
        f"The table metadata was changed by a concurrent commit ({what})."
        + (f" {why}" if why else " This transaction changes the metadata too." if info.metadata else ""),
        info,
        w,
    )


def _describe_metadata_change(before: Metadata | None, after: Metadata) -> str:
    if before is None:
        return "table created"
    parts = []
    if before.schema_string != after.schema_string:
        parts.append("schema")
    if tuple(before.partition_columns) != tuple(after.partition_columns):
        parts.append("partitioning")
    changed = sorted(
        k
        for k in set(before.configuration) | set(after.configuration)
        if before.configuration.get(k) != after.configuration.get(k)
    )
    if changed:
        parts.append("properties " + ", ".join(f"{k}={after.configuration.get(k, '<unset>')}" for k in changed))
    if before.id != after.id:
        parts.append("table replaced")
    return "; ".join(parts) or "metadata rewritten"


def check_domains(info: TransactionInfo, w: WinnerSummary) -> Decision:
    for d in w.domains:
        if d.domain in info.domains_written:
            return _conflict(
                ConcurrentTransactionException,
                ConflictReason.SAME_DOMAIN,
                f"Domain metadata '{d.domain}' was written concurrently.",
                info,
                w,
                detail=f"domain {d.domain}",
            )
    return None


def check_app_ids(info: TransactionInfo, w: WinnerSummary) -> Decision:
    for t in w.txns:
        ours = info.app_ids_written.get(t.app_id)
        if t.app_id in info.read_app_ids or (ours is not None and t.version >= ours):
            return _conflict(
                ConcurrentTransactionException,
                ConflictReason.SAME_APP_ID,
                f"Application '{t.app_id}' committed version {t.version} concurrently.",
                info,
                w,
                detail=f"appId={t.app_id} version={t.version}",
            )
    return None


def _append_rows(info: TransactionInfo, w: WinnerSummary) -> list[tuple[int, str, dict[str, str | None] | None]]:
    """The winner's adds that count as new rows for this transaction's isolation level.

    As ``(index, path, partition values)``: no object is built (``w.add_at(index)`` does).
    """
    level = info.isolation_level
    if level == props.SNAPSHOT_ISOLATION:
        return []
    # (A transaction that only raises identity marks changes no schema: it counts as changing none.)
    if (
        level == props.WRITE_SERIALIZABLE
        and w.is_blind_append
        and identity_rebase.changes_only_marks(info.read_metadata, info.metadata)
    ):
        return []
    removed = w.removed_paths
    return [(i, path, pv) for i, path, pv, data_change in w.add_fields() if data_change and path not in removed]


def check_appends(info: TransactionInfo, w: WinnerSummary) -> Decision:
    if info.is_blind_append or not info.read_predicates:
        return None
    candidates = _append_rows(info, w)
    if not candidates:
        return None
    for pred in info.read_predicates:
        seen: dict[tuple[tuple[str, str | None], ...], bool] = {}
        for i, path, values in candidates:
            pv = values or {}
            if pred.whole_table:
                hit = True
            else:
                # Files of one commit mostly share partitions: evaluate each partition once.
                key = tuple(pv.items())
                hit = seen.get(key)  # type: ignore[assignment]
                if hit is None:
                    hit = seen[key] = pred.matches(pv)
            row_checked = info.row_level and pred.expr is not None and info.reader is not None
            if hit and row_checked and not _rows_may_match(info, pred, w.add_at(i)):
                continue
            if hit:
                partition = dict(pv) if pv else None
                read = "the whole table" if pred.whole_table else f"'{pred.text}'"
                return _conflict(
                    ConcurrentAppendException,
                    ConflictReason.ROW_LEVEL_CHANGES
                    if row_checked
                    else ConflictReason.EMPTY_READ_PREDICATES
                    if pred.whole_table
                    else ConflictReason.FILE_LEVEL_CHANGES,
                    f"Files were added to {_where(partition)} by a concurrent "
                    f"{w.operation or 'commit'}, and this transaction read {read}.",
                    info,
                    w,
                    partition=partition,
                    file=path,
                    detail=f"read predicate: {read}",
                    help=_append_help(info, w, pred),
                )
    return None


def _where(partition: dict[str, str | None] | None) -> str:
    if not partition:
        return "the table"
    return "partition " + ", ".join(f"{k}={v if v is not None else 'NULL'}" for k, v in partition.items())


def _append_help(info: TransactionInfo, w: WinnerSummary, pred: ReadPredicate) -> str:
    parts = (info.read_metadata.partition_columns if info.read_metadata else ()) or ()
    if pred.whole_table or pred.text in ("", "true", "TRUE"):
        if parts:
            cols = ", ".join(parts)
            hint = (
                f"This operation read the whole table. Make the partitions it touches explicit in its "
                f"condition (e.g. add t.{parts[0]} = '<value>' to the MERGE/UPDATE/DELETE condition) so it "
                f"only reads the partitions of {cols} it needs."
            )
        else:
            hint = (
                "The table is not partitioned, so every operation reads the whole table. Partition it by "
                "the columns of your conditions, or enable deletion vectors for row-level concurrency."
            )
    else:
        hint = "Narrow the condition so the partitions this operation reads exclude the ones written concurrently."
    if info.isolation_level == props.SERIALIZABLE and w.is_blind_append:
        hint += " The winner was a blind append: under WriteSerializable it would not conflict."
    return hint


def _rows_may_match(info: TransactionInfo, pred: ReadPredicate, add: AddFile) -> bool:
    """Whether a winner's new file holds a row this read would have seen (exact, on its rows)."""
    if pred.expr is None or info.reader is None:
        return True
    if pred.may_match_stats is not None and not pred.may_match_stats(add.partition_values or {}, add.parsed_stats()):
        return False
    return _any_row_true(info, pred, add, None)


def _any_row_true(info: TransactionInfo, pred: ReadPredicate, add: AddFile, rows: RowIndexSet | None) -> bool:
    """Whether some live row of ``add`` (within ``rows``) satisfies ``pred``; True when undecidable.

    The driver decides what it can (three-valued); the predicate's row evaluator gets the
    undecided rows. Anything that fails keeps the file-level outcome: a conflict.
    """
    evaluator = _guarded(pred.row_evaluator) if pred.row_evaluator is not None else None
    try:
        confirm = pred.confirm_rows and evaluator is not None
        return len(row_eval.resolve_rows(info.reader, add, pred.expr, rows, evaluator, confirm=confirm)) > 0
    except (row_eval.CannotEvaluate, OSError, ValueError):
        return True


def _guarded(evaluator: row_eval.RowEvaluator) -> row_eval.RowEvaluator:
    """``evaluator`` with any error turned into ``CannotEvaluate`` (the caller then keeps the conflict)."""

    def run(add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        try:
            return evaluator(add, rows)
        except Exception as e:  # noqa: BLE001 - e.g. a Spark job failure: undecided, so a conflict
            raise row_eval.CannotEvaluate(f"row evaluator failed on {add.path}: {e}") from e

    return run


def _winner_dv_update(w: WinnerSummary, path: str) -> tuple[RemoveFile, AddFile] | None:
    return w.dv_updates.get(path)


def _own_dv_update(info: TransactionInfo, path: str) -> tuple[RemoveFile, AddFile] | None:
    return RL.dv_update_pairs(info.removes, [a for a in info.adds if a.path == path]).get(path)


def _row_level_read_ok(info: TransactionInfo, w: WinnerSummary, r: RemoveFile) -> bool:
    """A winner's DV update of a file we read is harmless if no row it deleted was ours to read.

    Rows we deleted too are left to the delete-delete check. When the operation declared the
    rows it matched in this file (``matched_rows``, read with the vector the winner replaced),
    the other deleted rows are harmless exactly when none of them is among those, whatever the
    condition. Otherwise every read predicate is evaluated on them (``_any_row_true``).
    """
    if not info.row_level or info.reader is None or info.read_whole_table:
        return False
    pair = _winner_dv_update(w, r.path)
    if pair is None:
        return False
    try:
        w_deleted = CR.newly_deleted(info, pair)
        own = _own_dv_update(info, r.path)
        if own is not None and not _same_base(own[0], r):
            return False
        if own is not None:
            w_deleted = w_deleted - CR.newly_deleted(info, own)  # same rows: a delete-delete conflict
        if not len(w_deleted):
            return True
        declared = info.matched_rows.get(r.path)
        if declared is not None and RL.same_dv(declared.base.deletion_vector, r.deletion_vector):
            return not len(w_deleted & declared.rows)
        if any(p.expr is None for p in info.read_predicates):
            return False
        base = AddFile(path=r.path, partition_values=r.partition_values, size=r.size, stats=r.stats,
                       deletion_vector=r.deletion_vector)
        return not any(_any_row_true(info, p, base, w_deleted) for p in info.read_predicates)
    except (row_eval.CannotEvaluate, OSError, ValueError):
        return False


def _row_level_read_checked(info: TransactionInfo, w: WinnerSummary, r: RemoveFile) -> bool:
    """Whether ``_row_level_read_ok`` compared rows for the winner's remove ``r`` (rather than refusing
    at file level): row-level on, a reader, a read of less than the whole table, a vector update of ``r``."""
    return info.row_level and info.reader is not None and not info.read_whole_table and r.path in w.dv_updates


def _same_base(a: RemoveFile, b: RemoveFile) -> bool:
    return RL.same_dv(a.deletion_vector, b.deletion_vector)


def check_delete_read(info: TransactionInfo, w: WinnerSummary) -> Decision:
    for r in w.removes:
        if not r.data_change:
            continue  # compaction: the rows still exist, in another file
        if (r.path in info.read_files or info.read_whole_table) and not _row_level_read_ok(info, w, r):
            read = info.read_files.get(r.path)
            return _conflict(
                ConcurrentDeleteReadException,
                ConflictReason.ROW_LEVEL_CHANGES
                if _row_level_read_checked(info, w, r)
                else ConflictReason.FILE_REMOVED,
                f"A file this transaction read was removed by a concurrent {w.operation or 'commit'}.",
                info,
                w,
                partition=dict(read.partition_values) if read and read.partition_values else None,
                file=r.path,
            )
    return None


def check_delete_delete(info: TransactionInfo, w: WinnerSummary, r: RemoveFile) -> Decision:
    """A file the winner removed (``r``) that this transaction removes too: a rebase by rows where
    the rows allow (``if_fails``: the file-level conflict), else a conflict."""
    ours = info.removes.get(r.path)
    if ours is None:
        return None
    file_level = _conflict(
        ConcurrentDeleteDeleteException,
        ConflictReason.FILE_REMOVED,
        f"A file this transaction removes was also removed by a concurrent {w.operation or 'commit'}.",
        info,
        w,
        partition=dict(r.partition_values) if r.partition_values else None,
        file=r.path,
    )
    decided = _resolve_same_file(info, w, r, ours)
    if decided is None:
        return file_level
    if isinstance(decided, Conflict):
        return decided
    return Rebase(info, rows=decided, if_fails=file_level)


#: The rules that look at the whole winner, in Delta's order; ``check_delete_delete`` follows,
#: once for each file the winner removed (``rebasing.check_winner`` runs them).
WINNER_RULES: tuple[Callable[[TransactionInfo, WinnerSummary], Decision], ...] = (
    check_protocol,
    check_metadata,
    check_domains,
    check_app_ids,
    check_appends,
    check_delete_read,
)


def _resolve_same_file(
    info: TransactionInfo, w: WinnerSummary, r: RemoveFile, ours: RemoveFile
) -> RowChanges | Conflict | None:
    """The rebase of ``info`` over a winner that also removed our file, when rows allow; None if none.

    A ``ConcurrentDeleteDeleteException`` conflict when both deleted the same rows.
    """
    if not (info.row_level or info.compaction_carry) or not _same_base(r, ours):
        return None
    try:
        own = _own_dv_update(info, r.path)
        theirs = _winner_dv_update(w, r.path)
        if own is not None and theirs is not None and info.row_level:
            return _merge_vectors(info, w, own, theirs)
        if own is not None and not r.data_change and info.compaction_carry:
            return CR.carry_into_compaction(info, w, own, r)
        if theirs is not None and not ours.data_change and info.compaction_carry:
            return CR.absorb_into_own_compaction(info, theirs, ours)
        if not info.compaction_carry or own is not None or theirs is not None:
            return None
        if not r.data_change and not ours.data_change:
            return CR.yield_to_compaction(info, ours)
        if not r.data_change and not any(a.path == r.path for a in info.adds):
            return CR.carry_emptied_into_compaction(info, w, ours, r)
        if r.data_change and not ours.data_change and not any(a.path == r.path for a in w.adds):
            return CR.absorb_emptied_into_own_compaction(info, ours)
    except (row_eval.CannotEvaluate, OSError, ValueError):
        return None
    return None


def _merge_vectors(
    info: TransactionInfo, w: WinnerSummary, own: tuple[RemoveFile, AddFile], theirs: tuple[RemoveFile, AddFile]
) -> RowChanges | Conflict:
    """Both marked rows of one file deleted: disjoint rows merge into one vector."""
    mine = CR.newly_deleted(info, own)
    their_rows = CR.newly_deleted(info, theirs)
    overlap = mine & their_rows
    if len(overlap):
        rows = sorted(overlap)[:5]
        return _conflict(
            ConcurrentDeleteDeleteException,
            ConflictReason.SAME_ROWS_DELETED,
            f"A concurrent {w.operation or 'commit'} deleted or updated the same row(s) of a file "
            f"this transaction changes (row indexes {rows}{'...' if len(overlap) > 5 else ''}).",
            info,
            w,
            partition=dict(own[0].partition_values) if own[0].partition_values else None,
            file=own[0].path,
            detail=f"{len(overlap)} row(s) changed by both",
            help="Both operations changed the same rows. Retry this one: it will see the other's result.",
        )
    merged = RL.dv_rows(info.table, theirs[1].deletion_vector) | mine
    # Our add of the file carries the merged rows; the vector an earlier rebase of it wrote is dropped.
    return RowChanges(frozenset({id(own[0]), id(own[1])}), (theirs[1].remove(), NewVector(own[1], merged)))
