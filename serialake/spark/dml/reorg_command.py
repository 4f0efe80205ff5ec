"""REORG TABLE ... APPLY (PURGE) and APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2)).

PURGE: files with deletion vectors rewritten without their deleted rows. Each such file
becomes one file of its live rows in physical order (``dataChange=false``), tagged with
OPTIMIZE's row mapping (``serialake.compactedFrom``), so PURGE has OPTIMIZE's isolation:
concurrent deletions of other rows carry over, a concurrent compaction of the same file
leaves that file to it. Small files are rewritten on the driver (``engine``).

UPGRADE UNIFORM: the table turned into a UniForm (Iceberg) table in one commit: IcebergCompatV2
and UniForm Iceberg on, column mapping ``name`` (existing columns keep their stored names),
deletion vectors off, and every file not written for IcebergCompatV2 rewritten (field ids,
partition values in the file, deleted rows purged). The commit changes the protocol and
metadata, so every concurrent write fails; it runs at Serializable, so a file appended
concurrently (not written for IcebergCompatV2) fails it in turn.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession

from serialake.core import DeltaLog
from serialake.core.model import properties as props
from serialake.core.model import uniform
from serialake.core.model.actions import AddFile, FileAction, RemoveFile
from serialake.core.predicates import expressions as P
from serialake.core.predicates import skipping
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError, UnsupportedFeatureError
from serialake.spark import transaction
from serialake.spark.dml.optimize_command import write_compacted

__all__ = ["purge_deletion_vectors", "upgrade_uniform"]


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
    transaction.refuse("REORG TABLE", log.table_path)
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
    metrics = after_commit(
        "compute the metrics of the actions committed", txn.table_path, version, _committed_metrics, txn, targets,
        operation="REORG", fallback=metrics, instead="with the metrics computed before the commit",
    )  # fmt: skip
    if txn.committed is not None and txn.committed.work_already_done:
        return {**metrics, "version": None, "workAlreadyDoneIn": version}
    return {**metrics, "version": version}


def upgrade_uniform(
    spark: SparkSession, path: str, compat_version: int = 2, *, before_commit: BeforeCommit = None
) -> dict[str, Any]:
    """``REORG TABLE t APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))``: see the module docstring.

    Returns metrics (files rewritten) and ``version`` (None when the table already is a
    UniForm table whose files are all written for IcebergCompatV2: nothing is committed).
    """
    if compat_version != 2:
        raise UnsupportedFeatureError(
            f"REORG TABLE {path} APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION={compat_version})): serialake "
            "supports ICEBERG_COMPAT_VERSION=2 only."
        )
    log = DeltaLog.for_table(path)
    transaction.refuse("REORG TABLE", log.table_path)
    txn = log.start_transaction(isolation_level=props.SERIALIZABLE)
    snap = txn.snapshot
    if snap is None:
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table")
    files = txn.read_whole_table()  # a file appended meanwhile would not be written for IcebergCompatV2
    targets = [f for f in files if not uniform.tagged(f)]
    conf = dict(snap.metadata.configuration)
    wanted = {props.ENABLE_ICEBERG_COMPAT_V2: "true", props.UNIVERSAL_FORMATS: uniform.ICEBERG}
    if not targets and all(conf.get(k) == v for k, v in wanted.items()):
        return {"numFilesRemoved": 0, "numFilesAdded": 0, "version": None}
    txn.update_metadata(replace(snap.metadata, configuration={**conf, **wanted}), upgrade_uniform=True)
    meta = txn.metadata
    assert meta is not None
    adds = write_compacted(spark, snap.with_metadata(meta), [[f] for f in targets]) if targets else []
    removes = [f.remove(data_change=False) for f in targets]
    metrics = {"numFilesRemoved": len(removes), "numFilesAdded": len(adds)}
    params = {"icebergCompatVersion": str(compat_version)}
    version = commit_or_clean_up(
        txn, [*removes, *adds], "REORG", params, metrics, new_files=adds, before_commit=before_commit
    )
    return {**metrics, "version": version}


def _committed_metrics(txn: Any, targets: Sequence[AddFile]) -> dict[str, Any]:
    """``_purge_metrics`` of the files the commit removed and added (rebasing may have dropped some)."""
    final = txn.committed_actions or []
    return _purge_metrics(
        targets, [a for a in final if isinstance(a, RemoveFile)], [a for a in final if isinstance(a, AddFile)]
    )


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
