"""When a change marks rows in deletion vectors, and how: the same for every engine.

A DELETE, UPDATE or MERGE that changes some rows of a file either rewrites the file
(copy-on-write) or, when the table uses deletion vectors (``uses_deletion_vectors``),
marks the changed rows deleted: ``remove(F, old dv)`` + ``add(F, old ∪ new rows)``
(``mark_deleted``). A file that loses every row is removed. The file's stats keep their
bounds, which may now be wider than the live rows (``tightBounds: false``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector, write_deletion_vector
from serialake.core.model import features
from serialake.core.model import properties as props
from serialake.core.model.actions import Action, AddFile
from serialake.core.model.paths import absolute_path, parquet_metadata

if TYPE_CHECKING:
    from serialake.core.log.snapshot import Snapshot

__all__ = ["DV_INLINE_MAX_BYTES", "DvChanges", "loose_stats", "mark_deleted", "uses_deletion_vectors"]

DV_INLINE_MAX_BYTES = 0  # 'u' files, as Delta writes them (delta-rs reads both kinds)


def uses_deletion_vectors(snap: Snapshot) -> bool:
    """Whether changes mark rows in deletion vectors (property on and the protocol has the feature)."""
    return bool(props.get(snap.configuration, props.ENABLE_DELETION_VECTORS)) and features.has_feature(
        snap.protocol, "deletionVectors"
    )


def loose_stats(stats: str | None) -> str | None:
    """Stats of a file that gets a deletion vector: bounds may now be wider than the live rows."""
    if not stats:
        return stats
    try:
        value = json.loads(stats)
    except ValueError:
        return stats
    if not isinstance(value, dict):
        return stats
    value["tightBounds"] = False
    return json.dumps(value, separators=(",", ":"))


@dataclass
class DvChanges:
    """Actions and counters of marking rows deleted in deletion vectors."""

    actions: list[Action] = field(default_factory=list)
    written: list[AddFile] = field(default_factory=list)  # adds carrying a DV we wrote (for clean-up)
    files_removed: int = 0
    dvs_added: int = 0
    dvs_updated: int = 0
    dvs_removed: int = 0
    bytes_removed: int = 0


def mark_deleted(table: str, marks: Iterable[tuple[AddFile, RowIndexSet]], stamp: int) -> DvChanges:
    """``remove(F, old dv)`` + ``add(F, old ∪ rows)`` per ``(F, rows)``; a file losing every row is removed.

    ``rows`` are physical row positions of ``F``. The new DV files are written (``written``
    lists the adds that carry them, so a failed commit can delete them); nothing is committed.
    """
    out = DvChanges()
    for original, rows in marks:
        add = _with_num_records(table, original)
        old = read_deletion_vector(table, add.deletion_vector) if add.deletion_vector else RowIndexSet.from_iter([])
        merged = old | rows
        out.actions.append(original.remove(timestamp=stamp))
        total = add.num_records
        if total is not None and len(merged) >= total:
            out.files_removed += 1
            out.bytes_removed += add.size or 0
            out.dvs_removed += 1 if add.deletion_vector else 0
            continue
        dv = write_deletion_vector(table, merged, inline_max_bytes=DV_INLINE_MAX_BYTES)
        new = replace(add, deletion_vector=dv, data_change=True, stats=loose_stats(add.stats))
        out.actions.append(new)
        out.written.append(new)
        if add.deletion_vector:
            out.dvs_updated += 1
        else:
            out.dvs_added += 1
    return out


def _with_num_records(table: str, add: AddFile) -> AddFile:
    """``add`` with ``stats.numRecords`` (read from the Parquet footer if missing): a DV needs it."""
    if add.num_records is not None:
        return add
    n = parquet_metadata(absolute_path(table, add.path), add.size).num_rows
    try:
        stats = json.loads(add.stats) if add.stats else {}
    except ValueError:
        stats = {}
    stats = {**(stats if isinstance(stats, dict) else {}), "numRecords": n}
    return replace(add, stats=json.dumps(stats, separators=(",", ":")))
