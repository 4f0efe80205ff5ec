"""The files an operation wrote, and their fate: referenced by its commit, or deleted.

Every write path (appends and overwrites, DELETE / UPDATE / MERGE, OPTIMIZE, REORG,
INSERT) commits through ``commit_or_clean_up``: when the commit certainly failed
(a conflict, a refused commit, an invalid table), the data and deletion-vector files
written for it are deleted; when it committed, those that rebasing over concurrent
commits dropped (e.g. compaction outputs another compaction already made) are deleted.
When the outcome is unknown (``CommitOutcomeUnknownError``), every file stays: the commit
may have landed and reference them. Deleting after a commit is a step after the commit
(``core.txn.post_commit``): a failure is warned about, the committed version returned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from serialake.core.dv.deletion_vectors import dv_absolute_path
from serialake.core.model.actions import Action, AddCDCFile, AddFile
from serialake.core.model.paths import absolute_path
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    DeltaAnalysisException,
    DeltaConcurrentModificationException,
    InvalidTableError,
)
from serialake.storage.datafiles import Access

__all__ = ["BeforeCommit", "commit_or_clean_up", "remove_written"]

BeforeCommit = Callable[[], None] | None


def commit_or_clean_up(
    txn: OptimisticTransaction,
    actions: list[Action],
    operation: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, Any],
    *,
    new_files: Sequence[AddFile | AddCDCFile] = (),
    new_dvs: Sequence[AddFile] = (),
    user_metadata: str | None = None,
    before_commit: BeforeCommit = None,
) -> int:
    """Run ``before_commit``, commit; delete the files written that the commit does not reference.

    ``new_files``: data (and change data) files written for this commit; ``new_dvs``: adds whose deletion
    vector file was written for it. ``before_commit`` is a hook run just before the commit
    (tests interleave concurrent operations with it).
    """
    try:
        if before_commit is not None:
            before_commit()
        version = txn.commit(actions, operation, params, metrics, user_metadata=user_metadata)
    except CommitOutcomeUnknownError:
        raise  # the commit may have landed: the files it references must stay
    except (DeltaConcurrentModificationException, CommitFailedError, DeltaAnalysisException, InvalidTableError):
        remove_written(txn.table_path, new_files, new_dvs)
        raise
    after_commit(
        "delete the files written for it that the commit does not reference", txn.table_path, version,
        _discard_unused, txn, new_files, new_dvs, operation=operation,
    )  # fmt: skip
    return version


def remove_written(table: str, adds: Sequence[AddFile | AddCDCFile], dv_adds: Sequence[AddFile] = ()) -> None:
    """Delete data files (``adds``) and deletion-vector files (of ``dv_adds``) nothing will commit."""
    for add in adds:
        _unlink(absolute_path(table, add.path))
    for add in dv_adds:
        if add.deletion_vector is not None and add.deletion_vector.storage_type == "u":
            path = dv_absolute_path(table, add.deletion_vector)
            if path:
                _unlink(path)


def _discard_unused(
    txn: OptimisticTransaction, new_files: Sequence[AddFile | AddCDCFile], new_dvs: Sequence[AddFile]
) -> None:
    """Delete the data and deletion-vector files written for ``txn`` that its commit does not reference."""
    if (not new_files and not new_dvs) or txn.committed_actions is None:
        return  # nothing written, or the committed actions unknown: delete nothing
    table = txn.table_path
    final = [a for a in txn.committed_actions if isinstance(a, AddFile)]
    used = {a.path for a in final} | {a.path for a in txn.committed_actions if isinstance(a, AddCDCFile)}
    used_dvs = {dv_absolute_path(table, a.deletion_vector) for a in final if a.deletion_vector is not None}
    remove_written(
        table,
        [f for f in new_files if f.path not in used],
        [
            d
            for d in new_dvs
            if d.deletion_vector is not None and dv_absolute_path(table, d.deletion_vector) not in used_dvs
        ],
    )


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        Access().delete(path)  # (local or remote; a missing file is no error)
