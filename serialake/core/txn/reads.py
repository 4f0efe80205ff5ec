"""What a transaction read, as conflict checking needs it: read predicates and reads at earlier versions.

``planned_read`` turns the predicates of a read (``OptimisticTransaction.filter_files``,
``record_read``) into a ``ReadPredicate`` (its partition part compiled, the full predicate
kept for row-level checks) and the files it may match, chosen by file skipping. A read made
at a version before the transaction's own (a DataFrame read before it started) is a
``HistoryRead``: ``check_history_reads`` checks it against every commit after its version
up to the transaction's, before the commit loop checks the later ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from serialake.core.model.actions import AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from serialake.core.txn.rebasing import check_winner, discard_rebase_dvs
from serialake.core.txn.summaries import ReadPredicate, TransactionInfo, WinnerSummary
from serialake.exceptions import CommitFailedError

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog
    from serialake.core.log.snapshot import Snapshot
    from serialake.core.predicates.row_eval import RowEvaluator

__all__ = ["HistoryRead", "check_history_reads", "is_true", "planned_read"]


@dataclass(frozen=True)
class HistoryRead:
    """A read of the table at a version before the transaction's own (see ``record_read``)."""

    version: int
    predicate: ReadPredicate
    files: dict[str, AddFile]
    metadata: Metadata
    protocol: Protocol



def planned_read(
    snapshot: Snapshot, predicates: Sequence[Any] | None, row_evaluator: RowEvaluator | None = None
) -> tuple[ReadPredicate, list[AddFile]]:
    """The read predicate of ``predicates`` over ``snapshot`` and the files it may match there."""
    from serialake.core.predicates import expressions as E
    from serialake.core.predicates.skipping import compile_predicate

    exprs = [E.parse_predicate(p) if isinstance(p, str) else p for p in (predicates or [])]
    part_cols = list(snapshot.partition_columns)
    full = E.conjunction(exprs)
    part_expr = E.partition_filter(exprs, part_cols)
    match_part = compile_predicate(part_expr, snapshot.schema, part_cols)
    match_full = compile_predicate(full, snapshot.schema, part_cols)
    if is_true(full):
        files = snapshot.all_files
    else:  # vectorized over the checkpoint's rows; only the files selected are built
        from serialake.core.predicates.arrow_skipping import cached_matcher

        files = snapshot.file_state.select(
            # A checkpoint's stats_parsed holds the same stats as the JSON, already typed: no parse.
            cached_matcher(full, snapshot.schema, part_cols, stats_parsed="prefer"),
            lambda f: match_full(f.partition_values or {}, f.parsed_stats()),
        )
    pred = ReadPredicate(
        E.to_sql(part_expr),
        lambda pv: match_part(pv, None),
        whole_table=is_true(part_expr),
        expr=full,
        may_match_stats=match_full,
        row_evaluator=row_evaluator,
    )
    return pred, files


def is_true(expr: Any) -> bool:
    from serialake.core.predicates import expressions as E

    return E.to_sql(expr).strip().upper() == "TRUE"


def check_history_reads(
    dlog: DeltaLog, history_reads: Sequence[HistoryRead], read_version: int, info: TransactionInfo
) -> None:
    """Check reads made at versions before ours against the commits between them and ours.

    Each commit after a read's version (up to the transaction's own, ``read_version``) is
    checked, in order, with the usual rules, as if the transaction had started at that read.
    """
    if not history_reads:
        return
    first = min(r.version for r in history_reads)
    entries = dlog.commits_after(first, limit=read_version - first)
    if (entries[-1].version if entries else first) < read_version:
        raise CommitFailedError(
            f"Table {dlog.table_path}: this write was computed from a read of version {first}, but the "
            f"commits after it up to version {read_version} are no longer in the log (log cleanup), so "
            "the read cannot be checked against them. Nothing was committed: read the table again and retry."
        )
    for entry in entries:
        reads = [r for r in history_reads if r.version < entry.version]
        if entry.version > read_version or not reads:
            continue
        files: dict[str, AddFile] = {}
        for r in reads:
            files.update(r.files)
        earliest = min(reads, key=lambda r: r.version)
        view = replace(
            info,
            read_version=earliest.version,
            read_metadata=earliest.metadata,
            read_protocol=earliest.protocol,
            read_predicates=[r.predicate for r in reads],
            read_files=files,
            read_whole_table=any(r.predicate.whole_table for r in reads),
            read_app_ids=set(),
            is_blind_append=False,
            # App ids and domains were read at our own version: only data actions matter here.
            actions=[a for a in info.actions if isinstance(a, (CommitInfo, AddFile, RemoveFile))],
            removes={},
            app_ids_written={},
            domains_written=set(),
            compaction_bases={},
            matched_rows={},
            rebase_dvs=[],
        )
        try:
            check_winner(view, WinnerSummary.of(entry.version, entry.items))
        finally:
            discard_rebase_dvs(view)  # a view is only checked: its rebased actions are never committed
