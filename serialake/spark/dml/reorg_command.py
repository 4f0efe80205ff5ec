"""REORG TABLE ... APPLY (PURGE): files with deletion vectors rewritten without their deleted rows.

Each such file becomes one file of its live rows in physical order (``dataChange=false``),
tagged with OPTIMIZE's row mapping (``serialake.compactedFrom``), so PURGE has OPTIMIZE's
isolation: concurrent deletions of other rows carry over, a concurrent compaction of the
same file leaves that file to it. Small files are rewritten on the driver (``engine``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession

from serialake.core import DeltaLog, skipping
from serialake.core import expressions as P
from serialake.core.actions import AddFile, FileAction, RemoveFile
from serialake.core.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError
from serialake.spark.dml.optimize_command import write_compacted

__all__ = ["purge_deletion_vectors"]


def purge_deletion_vectors(
    spark: SparkSession, path: str, where: str | None = None, *, before_commit: BeforeCommit = None
) -> dict[str, Any]:
    """Rewrite the files (matching partition predicate ``where``) that have deletion vectors; metrics.

    Each such file becomes one file of its live rows in physical order, tagged like an
    OPTIMIZE output (``serialake.compactedFrom``), so a concurrent DELETE / UPDATE / MERGE
    of other rows of it carries over instead of conflicting. Commits nothing when no file
    has a deletion vector, or when concurrent commits already did the work: ``version``
    is then None (and ``workAlreadyDoneIn`` the version holding the work). ``before_commit``
    runs just before committing (tests interleave concurrent operations with it).
    """
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    snap = txn.snapshot
    if snap is None:
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table")
    files = snap.all_files
    if where:
        expr = P.parse_predicate(where)
        parts = {c.lower() for c in snap.partition_columns}
        other = sorted(n for _, n in P.column_refs(expr) if n.lower() not in parts)
        if other:
            raise DeltaAnalysisException(
                f"REORG TABLE {log.table_path} WHERE {where}: the predicate may only use partition columns "
                f"({', '.join(snap.partition_columns) or 'the table has none'}); it uses {', '.join(other)}."
            )
        matches = skipping.compile_predicate(expr, snap.schema, snap.partition_columns)
        files = [f for f in files if matches(f.partition_values or {}, None)]
    targets = [f for f in files if f.deletion_vector is not None]
    metrics = _purge_metrics(targets, targets, [])
    if not targets:
        return metrics
    adds = write_compacted(spark, snap, [[f] for f in targets])  # one output per file, rows in order
    removes = [f.remove(data_change=False) for f in targets]
    metrics = _purge_metrics(targets, removes, adds)
    params = {"predicate": json.dumps([where] if where else []), "applyPurge": "true"}
    version = commit_or_clean_up(
        txn, [*removes, *adds], "REORG", params, metrics, new_files=adds, before_commit=before_commit
    )
    final = txn.committed_actions or []
    metrics = _purge_metrics(
        targets, [a for a in final if isinstance(a, RemoveFile)], [a for a in final if isinstance(a, AddFile)]
    )
    if txn.committed is not None and txn.committed.work_already_done:
        return {**metrics, "version": None, "workAlreadyDoneIn": version}
    return {**metrics, "version": version}


def _purge_metrics(
    targets: Sequence[AddFile], removed: Sequence[FileAction], added: Sequence[AddFile]
) -> dict[str, Any]:
    """REORG PURGE metrics of a commit removing ``removed`` (of ``targets``) and adding ``added``."""
    gone = {f.path for f in removed}
    purged = [f for f in targets if f.path in gone]
    return {
        "numFilesRemoved": len(removed),
        "numFilesAdded": len(added),
        "numDeletionVectorsRemoved": sum(1 for f in removed if f.deletion_vector is not None),
        "numDeletedRowsPurged": sum(f.deletion_vector.cardinality for f in purged if f.deletion_vector),
    }
