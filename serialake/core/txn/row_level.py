"""Row-level concurrency: resolve conflicts on the same data file by the rows involved.

With deletion vectors a DELETE, UPDATE or MERGE changes a file by marking rows deleted
(``remove(F, dv_old)`` + ``add(F, dv_new)``). When a winner and the current transaction
changed the same file, file-level rules would fail one of them; here the transaction is
rebased instead when the rows do not overlap and the winner's changes do not touch what
the transaction read:

- both marked rows of F from the same base vector, disjointly: the vectors are merged;
- a compaction moved F's rows into G: deletions of F's rows are carried over to the same
  rows of G, mapped in order by G's ``serialake.compactedFrom`` tag, or, where a sorting
  compaction (ZORDER, clustering) wrote none, found by their values
  (``serialake.core.txn.row_matching``);
- rows a winner deleted or added are checked against the transaction's read predicates,
  by evaluating them on the rows themselves (``serialake.core.predicates.row_eval``; what the driver
  cannot decide there keeps the file-level outcome: a conflict).

This module holds the deletion-vector bookkeeping of those rebases: when row-level
resolution applies (``enabled``, ``compaction_enabled``), reading and writing vectors
(``dv_rows``, ``write_dv``, ``with_dv``, ``same_dv``), the compaction row mapping
(``COMPACTED_FROM_TAG``, ``compaction_sources``, ``map_rows``) and the DV updates of a commit
(``dv_update_pairs``). The rules that use them are in ``serialake.core.txn.conflicts`` and
``serialake.core.txn.compaction_rebase``; the vectors their decisions call for are written by
``serialake.core.txn.rebasing``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from serialake.core.model import properties as props
from serialake.core.model.actions import AddFile, DeletionVectorDescriptor, Metadata, RemoveFile

COMPACTED_FROM_TAG = "serialake.compactedFrom"


def enabled(metadata: Metadata | None) -> bool:
    """Row-level resolution applies: deletion vectors on (partitioned or not, clustered or not)
    and ``delta.enableRowLevelConcurrency`` not set to false (the explicit off switch)."""
    if metadata is None:
        return False
    conf = metadata.configuration
    if not props.is_true(conf, props.ENABLE_DELETION_VECTORS):
        return False
    explicit = props.raw(conf, props.ROW_LEVEL_CONCURRENCY)
    return explicit is None or explicit.lower() == "true"


def compaction_enabled(metadata: Metadata | None) -> bool:
    """Carrying deletions over a compaction works on any table with deletion vectors."""
    if metadata is None:
        return False
    return props.is_true(metadata.configuration, props.ENABLE_DELETION_VECTORS)


# -- deletion vectors --------------------------------------------------------------
def dv_rows(table_path: str, dv: DeletionVectorDescriptor | None) -> Any:
    """Deleted rows of a descriptor as a ``RowIndexSet`` (empty for no vector)."""
    from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector

    if dv is None:
        return RowIndexSet.from_iter([])
    return read_deletion_vector(table_path, dv)


def write_dv(table_path: str, rows: Any) -> DeletionVectorDescriptor:
    """A deletion-vector file of ``rows``, written as every change writes one (``dv_policy``)."""
    from serialake.core.dv.deletion_vectors import write_deletion_vector
    from serialake.core.dv.dv_policy import DV_INLINE_MAX_BYTES

    return write_deletion_vector(table_path, rows, inline_max_bytes=DV_INLINE_MAX_BYTES)


def with_dv(add: AddFile, dv: DeletionVectorDescriptor | None) -> AddFile:
    return replace(add, deletion_vector=dv)


def same_dv(a: DeletionVectorDescriptor | None, b: DeletionVectorDescriptor | None) -> bool:
    return (a.unique_id if a else None) == (b.unique_id if b else None)


# -- compaction row mapping -----------------------------------------------------------
@dataclass(frozen=True)
class CompactionSource:
    """One input of a compacted file: where its live rows start in the output."""

    path: str
    dv_id: str | None
    live_rows: int
    offset: int


def compaction_sources(add: AddFile) -> list[CompactionSource] | None:
    """The ordered inputs recorded on a compaction output, or None."""
    raw = (add.tags or {}).get(COMPACTED_FROM_TAG)
    if not raw:
        return None
    try:
        items = json.loads(raw)
    except ValueError:
        return None
    out: list[CompactionSource] = []
    offset = 0
    for path, dv_id, n in items:
        out.append(CompactionSource(path, dv_id, int(n), offset))
        offset += int(n)
    return out


def map_rows(base_deleted: Any, rows: Any, offset: int) -> list[int]:
    """Positions in a compaction output of physical ``rows`` of an input (deleted rows skipped)."""
    import numpy as np

    base = base_deleted.to_numpy()
    idx = rows.to_numpy()
    if len(idx) == 0:
        return []
    # Live rank of row i = i - (number of base-deleted rows below i).
    below = np.searchsorted(base, idx, side="left") if len(base) else np.zeros(len(idx), dtype=np.int64)
    return [int(offset + int(i) - int(b)) for i, b in zip(idx, below)]


# -- deletion vector updates of a commit ---------------------------------------------
def dv_update_pairs(
    removes: Mapping[str, RemoveFile], adds: Sequence[AddFile]
) -> dict[str, tuple[RemoveFile, AddFile]]:
    """Files a commit changed through deletion vectors: path -> (remove of old DV, add of new DV)."""
    out: dict[str, tuple[RemoveFile, AddFile]] = {}
    for a in adds:
        r = removes.get(a.path)
        if r is not None and a.deletion_vector is not None and not same_dv(r.deletion_vector, a.deletion_vector):
            out[a.path] = (r, a)
    return out
