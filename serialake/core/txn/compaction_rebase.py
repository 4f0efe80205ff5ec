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
content (``core.txn.row_matching``): equal rows are interchangeable, so marking any free equal
copy gives the serial outcome. What cannot be located keeps the conflict (the functions
return None).

Each function decides: it returns the row-level changes of the rebase (``decisions.RowChanges``:
our actions dropped, the new ones, the deletion vectors to write as ``NewVector``), and
writes nothing. Rows are read to decide: deletion vectors, data rows and Parquet footers, the
latter two through the transaction's row reader (``TransactionInfo.reader``).
``rebasing.check_winner`` carries the changes out (writes the vectors, deletes those dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.dv.dv_policy import loose_stats
from serialake.core.model.actions import Action, AddFile, FileAction, RemoveFile
from serialake.core.txn import row_level as RL
from serialake.core.txn import row_matching
from serialake.core.txn.decisions import NewVector, RowChanges

if TYPE_CHECKING:
    from serialake.core.txn.summaries import TransactionInfo, WinnerSummary

__all__ = [
    "absorb_emptied_into_own_compaction",
    "absorb_into_own_compaction",
    "carry_emptied_into_compaction",
    "carry_into_compaction",
    "is_compaction",
    "newly_deleted",
    "yield_to_compaction",
]


# -- a DML meeting a compaction of its file --------------------------------------------------------


def carry_into_compaction(
    info: TransactionInfo, w: WinnerSummary, own: tuple[RemoveFile, AddFile], r: RemoveFile
) -> RowChanges | None:
    """A winner compacted our file F: mark our newly deleted rows of F in its outputs instead."""
    mine = newly_deleted(info, own)
    for g in w.adds:
        src = next((s for s in RL.compaction_sources(g) or () if s.path == r.path and s.dv_id == r.dv_id), None)
        if src is not None:
            base = RL.dv_rows(info.table, r.deletion_vector)
            return _mark_in_winner_outputs(info, [(g, RL.map_rows(base, mine, src.offset))], {id(own[0]), id(own[1])})
    return _carry_by_content(info, w, r, mine, {id(own[0]), id(own[1])})


def carry_emptied_into_compaction(
    info: TransactionInfo, w: WinnerSummary, ours: RemoveFile, r: RemoveFile
) -> RowChanges | None:
    """We remove F with all its rows; a winner compacted F: mark all of F's rows deleted in its outputs."""
    for g in w.adds:
        src = next((s for s in RL.compaction_sources(g) or () if s.path == r.path and s.dv_id == r.dv_id), None)
        if src is None:
            continue
        base = RL.dv_rows(info.table, ours.deletion_vector)
        if live_rows(info, ours, base) != src.live_rows:
            return None
        return _mark_in_winner_outputs(info, [(g, range(src.offset, src.offset + src.live_rows))], {id(ours)})
    return _carry_by_content(info, w, r, None, {id(ours)})


def _carry_by_content(
    info: TransactionInfo, w: WinnerSummary, r: RemoveFile, rows: Any, drop: set[int]
) -> RowChanges | None:
    """``rows`` of F (None: every live row) located by content in the winner's outputs and marked there.

    Only a winner that is a compaction holds F's rows unchanged in its outputs of F's partition;
    an output we already remove whole is not searched, one we already marked is searched
    without the rows we marked (``taken``).
    """
    if not _winner_is_compaction(w):
        return None
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
        return None
    by_path = {g.path: g for g in outputs}
    return _mark_in_winner_outputs(info, [(by_path[p], idx) for p, idx in placed.items()], drop)


def _mark_in_winner_outputs(
    info: TransactionInfo, marks: Sequence[tuple[AddFile, Any]], drop: set[int]
) -> RowChanges:
    """Replace actions ``drop`` by marking rows of winner outputs deleted: ``marks`` = ``(G, rows of G)``.

    One ``remove(G)`` + ``add(G, vector)`` per G however many of our files it holds (an earlier
    mark of G, ours, is replaced); a G left without a live row is only removed; a G we already
    remove whole is left so.
    """
    new: list[Action | NewVector] = []
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
            new.append(NewVector(replace(g, data_change=True, stats=loose_stats(g.stats)), merged))
    return RowChanges(frozenset(drop), tuple(new))


# -- a compaction meeting a DML or a compaction of its input ----------------------------------------


def absorb_into_own_compaction(
    info: TransactionInfo, theirs: tuple[RemoveFile, AddFile], ours: RemoveFile
) -> RowChanges | None:
    """We compact a file F a winner marked rows of: carry its deletions into our output."""
    if _own_tagged(info, ours.path) is None:
        return _absorb_by_content(info, theirs, ours)
    found = _own_output_of(info, ours)
    if found is None:
        return None
    g, src, base = found
    their_rows = newly_deleted(info, theirs)
    mapped = RL.map_rows(base, their_rows, src.offset)
    current = RL.dv_rows(info.table, g.deletion_vector)
    new_g = NewVector(g, current | RowIndexSet.from_iter(mapped))
    # Remove the file as the winner left it (its new vector), still without changing data.
    new = (theirs[1].remove(data_change=False), new_g)
    return RowChanges(frozenset({id(ours), id(g)}), new, bases={ours.path: base})


def _absorb_by_content(
    info: TransactionInfo, theirs: tuple[RemoveFile, AddFile], ours: RemoveFile
) -> RowChanges | None:
    """``absorb_into_own_compaction`` for outputs without a row mapping: the rows found by content."""
    if not is_compaction(info):
        return None
    marked = _mark_in_own_outputs(info, ours, newly_deleted(info, theirs))
    if marked is None:
        return None
    drop, new, emptied = marked
    drop.add(id(ours))
    new.insert(0, theirs[1].remove(data_change=False))
    return RowChanges(frozenset(drop), tuple(new), rebased_away=emptied)


def absorb_emptied_into_own_compaction(info: TransactionInfo, ours: RemoveFile) -> RowChanges | None:
    """A winner removed our input F with all its rows (no re-add): they are deleted rows of our output.

    F's rows are marked deleted in the output holding them and our remove of F is dropped
    (F is gone already). An output left without a live row is dropped; the removes of its
    other inputs stay, as every row of those was deleted by winners too.
    """
    if not is_compaction(info):
        return None
    if _own_tagged(info, ours.path) is None:
        return _drop_input_by_content(info, ours)
    found = _own_output_of(info, ours)
    if found is None:
        return None
    g, src, base = found
    if live_rows(info, ours, base) != src.live_rows:
        return None
    merged = RL.dv_rows(info.table, g.deletion_vector) | RowIndexSet.from_iter(
        range(src.offset, src.offset + src.live_rows)
    )
    total = g.num_records
    bases = {ours.path: base}
    if total is not None and len(merged) >= total:
        return RowChanges(frozenset({id(ours), id(g)}), (), rebased_away=True, bases=bases)
    new_g = NewVector(replace(g, stats=loose_stats(g.stats)), merged)
    return RowChanges(frozenset({id(ours), id(g)}), (new_g,), rebased_away=True, bases=bases)


def yield_to_compaction(info: TransactionInfo, ours: RemoveFile) -> RowChanges | None:
    """A winning compaction also compacted our input F (same base vector): its rows are in the winner's outputs.

    Each of our outputs whose ``compactedFrom`` lists F goes, with our removes of all its
    inputs: F's rows live in the winner's output, the other inputs stay as they are. Without
    a mapping (our outputs sorted), F's rows are marked deleted in our outputs, found by
    content, and our remove of F is dropped, as for an input a DML emptied.
    """
    if not is_compaction(info):
        return None
    outputs = [g for g in info.adds if any(s.path == ours.path for s in RL.compaction_sources(g) or ())]
    if not outputs:
        return _drop_input_by_content(info, ours)
    inputs = {s.path for g in outputs for s in RL.compaction_sources(g) or ()}
    drop = {id(g) for g in outputs} | {id(r) for r in info.removes.values() if r.path in inputs}
    return RowChanges(frozenset(drop), (), rebased_away=True)


def _drop_input_by_content(info: TransactionInfo, ours: RemoveFile) -> RowChanges | None:
    """Every live row of our input F left the table through a winner: mark them deleted in our outputs
    (found by content) and drop our remove of F. An output left without a live row is dropped."""
    marked = _mark_in_own_outputs(info, ours, None)
    if marked is None:
        return None
    drop, new, _ = marked
    return RowChanges(frozenset(drop | {id(ours)}), tuple(new), rebased_away=True)


def _mark_in_own_outputs(
    info: TransactionInfo, source: RemoveFile, rows: Any
) -> tuple[set[int], list[Action | NewVector], bool] | None:
    """``rows`` of our input ``source`` (None: every live row) located by content in our outputs of its
    partition: ``(outputs replaced, their marked copies, whether one was left without a live row)``,
    or None when some row cannot be located. Marked outputs' stats become loose."""
    outputs = row_matching.candidate_outputs(info.adds, source)
    taken = {g.path: RL.dv_rows(info.table, g.deletion_vector) for g in outputs}
    placed = _locate(info, source, rows, outputs, taken)
    if placed is None:
        return None
    drop: set[int] = set()
    new: list[Action | NewVector] = []
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
        new.append(NewVector(replace(g, stats=loose_stats(g.stats)), merged))
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


def _own_output_of(info: TransactionInfo, ours: RemoveFile) -> tuple[AddFile, RL.CompactionSource, Any] | None:
    """Our compaction output holding input ``ours``, if its mapping was made from our base vector, with
    that vector's rows: as recorded by an earlier rebase of ``ours`` (``TransactionInfo.compaction_bases``;
    ``ours`` is then the winner's version of the file), else read now (recorded when the rebase is made)."""
    found = _own_tagged(info, ours.path)
    if found is None:
        return None
    base = info.compaction_bases.get(ours.path)
    if base is None:
        if found[1].dv_id != ours.dv_id:
            return None
        base = RL.dv_rows(info.table, ours.deletion_vector)
    return found[0], found[1], base


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
    """Rows of ``f`` not in ``base`` (deleted rows): numRecords from stats, else the Parquet footer
    (read by the transaction's row reader)."""
    n = f.num_records
    if n is None:
        if info.reader is None:
            return None
        try:
            n = info.reader.footer_rows(f)
        except (OSError, ValueError):
            return None
    return n - len(base)
