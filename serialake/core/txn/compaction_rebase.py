"""Rebasing by rows over a compaction: deletions carried between a compaction's inputs and outputs.

A compaction (every file action ``dataChange=false``: OPTIMIZE, ZORDER, clustering, REORG ...
APPLY (PURGE)) moves the live rows of the files it removes into the files it adds. When it
meets a DELETE, UPDATE or MERGE of one of its inputs F, or another compaction of F, the
second committer is rebased instead of failing (docs/concurrency.md, "Compactions"):

- a DML loser's marks on F move to the winning compaction's outputs (``carry_into_compaction``;
  every row of F when it removed F whole: ``carry_emptied_into_compaction``);
- a compaction loser removes F as the winning DML left it and marks the winner's deletions in
  its own outputs (``absorb_into_own_compaction``; F emptied: ``absorb_emptied_into_own_compaction``);
- a compaction losing to another compaction of F drops its work on F (``yield_to_compaction``).

Rows are located in the outputs through the in-order mapping a bin-packing output records
(``row_level.COMPACTED_FROM_TAG``): a contiguous range per input, cheap and exact. An output
without it (sorted by ZORDER or clustering, or written by another engine) is searched by row
content (``core.row_matching``): equal rows are interchangeable, so marking any free equal
copy gives the serial outcome. What cannot be located keeps the conflict (the functions
return False).

Rebasing writes deletion vectors; each is recorded in ``TransactionInfo.rebase_dvs`` and its
file deleted once no action of ours uses it (``discard_rebase_dvs``): when a later rebase
replaces it, and when the commit fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import loose_stats
from serialake.core.model.actions import Action, AddFile, CommitInfo, FileAction, RemoveFile
from serialake.core.txn import identity_rebase, row_matching
from serialake.core.txn import row_level as RL

if TYPE_CHECKING:
    from serialake.core.txn.summaries import TransactionInfo, WinnerSummary

__all__ = [
    "absorb_emptied_into_own_compaction",
    "absorb_into_own_compaction",
    "carry_emptied_into_compaction",
    "carry_into_compaction",
    "discard_dropped_dvs",
    "discard_rebase_dvs",
    "is_compaction",
    "newly_deleted",
    "write_dv",
    "yield_to_compaction",
]


# -- a DML meeting a compaction of its file --------------------------------------------------------


def carry_into_compaction(
    info: TransactionInfo, w: WinnerSummary, own: tuple[RemoveFile, AddFile], r: RemoveFile
) -> bool:
    """A winner compacted our file F: mark our newly deleted rows of F in its outputs instead."""
    mine = newly_deleted(info, own)
    for g in w.adds:
        src = next((s for s in RL.compaction_sources(g) or () if s.path == r.path and s.dv_id == r.dv_id), None)
        if src is not None:
            base = RL.dv_rows(info.table, r.deletion_vector)
            _mark_in_winner_outputs(info, [(g, RL.map_rows(base, mine, src.offset))], {id(own[0]), id(own[1])})
            return True
    return _carry_by_content(info, w, r, mine, {id(own[0]), id(own[1])})


def carry_emptied_into_compaction(info: TransactionInfo, w: WinnerSummary, ours: RemoveFile, r: RemoveFile) -> bool:
    """We remove F with all its rows; a winner compacted F: mark all of F's rows deleted in its outputs."""
    for g in w.adds:
        src = next((s for s in RL.compaction_sources(g) or () if s.path == r.path and s.dv_id == r.dv_id), None)
        if src is None:
            continue
        base = RL.dv_rows(info.table, ours.deletion_vector)
        if live_rows(info, ours, base) != src.live_rows:
            return False
        _mark_in_winner_outputs(info, [(g, range(src.offset, src.offset + src.live_rows))], {id(ours)})
        return True
    return _carry_by_content(info, w, r, None, {id(ours)})


def _carry_by_content(info: TransactionInfo, w: WinnerSummary, r: RemoveFile, rows: Any, drop: set[int]) -> bool:
    """``rows`` of F (None: every live row) located by content in the winner's outputs and marked there.

    Only a winner that is a compaction holds F's rows unchanged in its outputs of F's partition;
    an output we already remove whole is not searched, one we already marked is searched
    without the rows we marked (``taken``).
    """
    if not _winner_is_compaction(w):
        return False
    ours = {a.path: a for a in info.adds}
    outputs: list[AddFile] = []
    taken: dict[str, Any] = {}
    for g in row_matching.candidate_outputs(w.adds, r):
        prior = ours.get(g.path)
        if prior is None and g.path in info.removes:
            continue
        outputs.append(g)
        taken[g.path] = RL.dv_rows(info.table, (prior or g).deletion_vector)
    placed = _locate(info, r, rows, outputs, taken)
    if placed is None:
        return False
    by_path = {g.path: g for g in outputs}
    _mark_in_winner_outputs(info, [(by_path[p], idx) for p, idx in placed.items()], drop)
    return True


def _mark_in_winner_outputs(info: TransactionInfo, marks: Sequence[tuple[AddFile, Any]], drop: set[int]) -> None:
    """Replace actions ``drop`` by marking rows of winner outputs deleted: ``marks`` = ``(G, rows of G)``.

    One ``remove(G)`` + ``add(G, vector)`` per G however many of our files it holds (an earlier
    mark of G, ours, is replaced); a G left without a live row is only removed; a G we already
    remove whole is left so.
    """
    new: list[Action] = []
    for g, rows in marks:
        prior = next((a for a in info.adds if a.path == g.path), None)
        if prior is not None:
            drop = drop | {id(prior)}
        elif g.path in info.removes:  # we already remove G whole: its rows are gone
            continue
        else:
            new.append(g.remove())
        merged = RL.dv_rows(info.table, (prior or g).deletion_vector) | RowIndexSet.from_iter(rows)
        total = g.num_records
        if total is None or len(merged) < total:
            dv = write_dv(info, merged)
            new.append(replace(g, deletion_vector=dv, data_change=True, stats=loose_stats(g.stats)))
    info.replace_actions(drop, new)
    discard_dropped_dvs(info)


# -- a compaction meeting a DML or a compaction of its input ----------------------------------------


def absorb_into_own_compaction(info: TransactionInfo, theirs: tuple[RemoveFile, AddFile], ours: RemoveFile) -> bool:
    """We compact a file F a winner marked rows of: carry its deletions into our output."""
    if _own_tagged(info, ours.path) is None:
        return _absorb_by_content(info, theirs, ours)
    found = _own_output_of(info, ours)
    if found is None:
        return False
    g, src = found
    their_rows = newly_deleted(info, theirs)
    mapped = RL.map_rows(info.compaction_bases[ours.path], their_rows, src.offset)
    current = RL.dv_rows(info.table, g.deletion_vector)
    new_g = RL.with_dv(g, write_dv(info, current | RowIndexSet.from_iter(mapped)))
    # Remove the file as the winner left it (its new vector), still without changing data.
    info.replace_actions({id(ours), id(g)}, [theirs[1].remove(data_change=False), new_g])
    discard_dropped_dvs(info)
    return True


def _absorb_by_content(info: TransactionInfo, theirs: tuple[RemoveFile, AddFile], ours: RemoveFile) -> bool:
    """``absorb_into_own_compaction`` for outputs without a row mapping: the rows found by content."""
    if not is_compaction(info):
        return False
    marked = _mark_in_own_outputs(info, ours, newly_deleted(info, theirs))
    if marked is None:
        return False
    drop, new, emptied = marked
    drop.add(id(ours))
    new.insert(0, theirs[1].remove(data_change=False))
    if emptied:
        rebase_away(info, drop, new)
    else:
        info.replace_actions(drop, new)
        discard_dropped_dvs(info)
    return True


def absorb_emptied_into_own_compaction(info: TransactionInfo, ours: RemoveFile) -> bool:
    """A winner removed our input F with all its rows (no re-add): they are deleted rows of our output.

    F's rows are marked deleted in the output holding them and our remove of F is dropped
    (F is gone already). An output left without a live row is dropped; the removes of its
    other inputs stay, as every row of those was deleted by winners too.
    """
    if not is_compaction(info):
        return False
    if _own_tagged(info, ours.path) is None:
        return _drop_input_by_content(info, ours)
    found = _own_output_of(info, ours)
    if found is None:
        return False
    g, src = found
    if live_rows(info, ours, info.compaction_bases[ours.path]) != src.live_rows:
        return False
    merged = RL.dv_rows(info.table, g.deletion_vector) | RowIndexSet.from_iter(
        range(src.offset, src.offset + src.live_rows)
    )
    total = g.num_records
    if total is not None and len(merged) >= total:
        rebase_away(info, {id(ours), id(g)}, [])
    else:
        new_g = replace(g, deletion_vector=write_dv(info, merged), stats=loose_stats(g.stats))
        rebase_away(info, {id(ours), id(g)}, [new_g])
    return True


def yield_to_compaction(info: TransactionInfo, ours: RemoveFile) -> bool:
    """A winning compaction also compacted our input F (same base vector): its rows are in the winner's outputs.

    Each of our outputs whose ``compactedFrom`` lists F goes, with our removes of all its
    inputs: F's rows live in the winner's output, the other inputs stay as they are. Without
    a mapping (our outputs sorted), F's rows are marked deleted in our outputs, found by
    content, and our remove of F is dropped, as for an input a DML emptied.
    """
    if not is_compaction(info):
        return False
    outputs = [g for g in info.adds if any(s.path == ours.path for s in RL.compaction_sources(g) or ())]
    if not outputs:
        return _drop_input_by_content(info, ours)
    inputs = {s.path for g in outputs for s in RL.compaction_sources(g) or ()}
    drop = {id(g) for g in outputs} | {id(r) for r in info.removes.values() if r.path in inputs}
    rebase_away(info, drop, [])
    return True


def _drop_input_by_content(info: TransactionInfo, ours: RemoveFile) -> bool:
    """Every live row of our input F left the table through a winner: mark them deleted in our outputs
    (found by content) and drop our remove of F. An output left without a live row is dropped."""
    marked = _mark_in_own_outputs(info, ours, None)
    if marked is None:
        return False
    drop, new, _ = marked
    rebase_away(info, drop | {id(ours)}, new)
    return True


def _mark_in_own_outputs(
    info: TransactionInfo, source: RemoveFile, rows: Any
) -> tuple[set[int], list[Action], bool] | None:
    """``rows`` of our input ``source`` (None: every live row) located by content in our outputs of its
    partition: ``(outputs replaced, their marked copies, whether one was left without a live row)``,
    or None when some row cannot be located. Marked outputs' stats become loose."""
    outputs = row_matching.candidate_outputs(info.adds, source)
    taken = {g.path: RL.dv_rows(info.table, g.deletion_vector) for g in outputs}
    placed = _locate(info, source, rows, outputs, taken)
    if placed is None:
        return None
    drop: set[int] = set()
    new: list[Action] = []
    emptied = False
    for g in outputs:
        if not placed.get(g.path):
            continue
        merged = taken[g.path] | RowIndexSet.from_iter(placed[g.path])
        drop.add(id(g))
        total = g.num_records
        if total is not None and len(merged) >= total:
            emptied = True
            continue
        new.append(replace(g, deletion_vector=write_dv(info, merged), stats=loose_stats(g.stats)))
    return drop, new, emptied


def _locate(
    info: TransactionInfo, source: FileAction, rows: Any, outputs: Sequence[AddFile], taken: dict[str, Any]
) -> dict[str, list[int]] | None:
    if info.reader is None:
        return None
    return row_matching.locate_rows(info.reader, info.read_protocol, source, rows, outputs, taken)


def _own_tagged(info: TransactionInfo, path: str) -> tuple[AddFile, RL.CompactionSource] | None:
    """Our output whose ``compactedFrom`` lists input ``path``, with that entry."""
    for g in info.adds:
        src = next((s for s in RL.compaction_sources(g) or () if s.path == path), None)
        if src is not None:
            return g, src
    return None


def _own_output_of(info: TransactionInfo, ours: RemoveFile) -> tuple[AddFile, RL.CompactionSource] | None:
    """Our compaction output holding input ``ours``, if its mapping was made from our base vector."""
    found = _own_tagged(info, ours.path)
    if found is None:
        return None
    if ours.path not in info.compaction_bases:
        if found[1].dv_id != ours.dv_id:
            return None
        info.compaction_bases[ours.path] = RL.dv_rows(info.table, ours.deletion_vector)
    return found


def is_compaction(info: TransactionInfo) -> bool:
    """Every file action of the transaction leaves the data unchanged (OPTIMIZE, REORG)."""
    return all(not a.data_change for a in info.actions if isinstance(a, (AddFile, RemoveFile)))


def _winner_is_compaction(w: WinnerSummary) -> bool:
    """Every file action of the winner leaves the data unchanged: its outputs hold its inputs' live rows."""
    return all(not r.data_change for r in w.removes) and not any(dc for _, _, _, dc in w.add_fields())


# -- bookkeeping ---------------------------------------------------------------------------------------


def newly_deleted(info: TransactionInfo, pair: tuple[RemoveFile, AddFile]) -> Any:
    """The rows a ``(remove, add)`` vector update of one file marked deleted."""
    rem, add = pair
    return RL.dv_rows(info.table, add.deletion_vector) - RL.dv_rows(info.table, rem.deletion_vector)


def live_rows(info: TransactionInfo, f: RemoveFile, base: Any) -> int | None:
    """Rows of ``f`` not in ``base`` (deleted rows): numRecords from stats, else the Parquet footer."""
    n = f.num_records
    if n is None:
        from serialake.core.model.paths import absolute_path, parquet_metadata

        try:
            n = parquet_metadata(absolute_path(info.table, f.path), f.size).num_rows
        except (OSError, ValueError):
            return None
    return n - len(base)


def write_dv(info: TransactionInfo, rows: Any) -> Any:
    """A new deletion vector of ``rows``, remembered so that it is deleted if rebasing drops it."""
    dv = RL.write_dv(info.table, rows)
    info.rebase_dvs.append(dv)
    return dv


def discard_dropped_dvs(info: TransactionInfo) -> None:
    """Delete the vectors rebasing wrote that no action of ours references any more (never committed)."""
    discard_rebase_dvs(info, info.actions)


def discard_rebase_dvs(info: TransactionInfo, keep: Iterable[Action] = ()) -> None:
    """Delete the deletion vector files rebasing wrote (``info.rebase_dvs``) that no add of ``keep`` uses.

    Rebasing writes a new vector each time it merges rows into one of our adds; a later rebase
    may replace that add again, and a failed commit references none of them. Only vectors in
    ``info.rebase_dvs`` are ever deleted: never a winner's, nor those the operation wrote itself
    (its caller's to clean up). ``OptimisticTransaction.commit`` calls this when the commit fails
    (``keep`` empty) and after it commits (``keep``: the actions committed).
    """
    keep = list(keep)
    identity_rebase.discard_rebase_files(info, keep)  # data files re-basing identity values wrote
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


def rebase_away(info: TransactionInfo, drop: set[int], new: list[Action]) -> None:
    """Drop our compaction's actions whose work the winners did; recount its file metrics."""
    info.replace_actions(drop, new)
    info.rebased_away = True
    discard_dropped_dvs(info)
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
