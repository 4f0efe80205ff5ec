"""REORG TABLE ... APPLY (PURGE) and ALTER TABLE ... DROP FEATURE, over the core log and Spark file I/O.

PURGE rewrites the files that carry deletion vectors without their deleted rows
(``dataChange=false``), each as one file with OPTIMIZE's row mapping, so it has OPTIMIZE's
isolation: concurrent deletions of other rows carry over, a concurrent compaction of the
same file leaves that file to it. DROP FEATURE first turns the feature's property off (a metadata
change: every concurrent writer fails and no new writer uses the feature), then for
deletionVectors purges, then commits a protocol without the feature while having read
the whole table, so any concurrent write in between makes it fail rather than leave a
deletion vector behind a protocol that no longer allows it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Sequence

from serialake.core import DeltaLog
from serialake.core import features as F
from serialake.core import predicates as P
from serialake.core import properties as props
from serialake.core.actions import AddFile, FileAction, Protocol, RemoveFile
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError, UnsupportedFeatureError
from serialake.sql.errors import UnsupportedStatementError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DROPPABLE_FEATURES", "drop_feature", "purge_deletion_vectors"]

# Features DROP FEATURE can remove, and the property that turns each on.
DROPPABLE_FEATURES: dict[str, str] = {
    "deletionVectors": props.ENABLE_DELETION_VECTORS,
    "appendOnly": props.APPEND_ONLY,
    "changeDataFeed": props.ENABLE_CDF,
}


def purge_deletion_vectors(
    spark: SparkSession, path: str, where: str | None = None, *, before_commit: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Rewrite the files (matching partition predicate ``where``) that have deletion vectors; metrics.

    Each such file becomes one file of its live rows in physical order, tagged like an
    OPTIMIZE output (``serialake.compactedFrom``), so a concurrent DELETE / UPDATE / MERGE
    of other rows of it carries over instead of conflicting. Commits nothing when no file
    has a deletion vector, or when concurrent commits already did the work: ``version``
    is then None (and ``workAlreadyDoneIn`` the version holding the work). ``before_commit``
    runs just before committing (tests interleave concurrent operations with it).
    """
    from serialake.spark.dml import commit
    from serialake.spark.optimize import write_compacted

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
        matches = P.compile_predicate(expr, snap.schema, snap.partition_columns)
        files = [f for f in files if matches(f.partition_values or {}, None)]
    targets = [f for f in files if f.deletion_vector is not None]
    metrics = _purge_metrics(targets, targets, [])
    if not targets:
        return metrics
    adds = write_compacted(spark, snap, [[f] for f in targets])  # one output per file, rows in order
    removes = [f.remove(data_change=False) for f in targets]
    metrics = _purge_metrics(targets, removes, adds)
    params = {"predicate": json.dumps([where] if where else []), "applyPurge": "true"}
    version = commit(txn, [*removes, *adds], "REORG", params, metrics, new_files=adds, before_commit=before_commit)
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


def drop_feature(spark: SparkSession, path: str, feature: str, truncate_history: bool = False) -> int:
    """Remove ``feature`` from the table's protocol (see module docstring); the final version."""
    from serialake.spark.table import DeltaTable

    log = DeltaLog.for_table(path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table")
    snap = log.update()
    protocol = snap.protocol
    present = F.reader_features(protocol) | F.writer_features(protocol)
    name = next((f for f in present if f.lower() == feature.lower()), None)
    if name is None:
        raise DeltaAnalysisException(
            f"Table {log.table_path} does not have table feature '{feature}' "
            f"(its features: {', '.join(sorted(present)) or 'none'}; protocol "
            f"({protocol.min_reader_version}, {protocol.min_writer_version}))."
        )
    droppable = {k.lower(): k for k in DROPPABLE_FEATURES}
    if name.lower() not in droppable:
        raise UnsupportedStatementError(
            f"ALTER TABLE ... DROP FEATURE {name}",
            hint=f"serialake can drop: {', '.join(DROPPABLE_FEATURES)}.",
        )
    if protocol.min_writer_version < 7:
        raise UnsupportedFeatureError(
            f"Table {log.table_path} has the legacy protocol ({protocol.min_reader_version}, "
            f"{protocol.min_writer_version}), which implies '{name}' by its version number; dropping a "
            "feature needs a table-features protocol (writer version 7)."
        )
    key = DROPPABLE_FEATURES[droppable[name.lower()]]
    if props.get(snap.configuration, key):
        DeltaTable(spark, log.table_path).unsetTableProperties([key], ifExists=True)
    if name == "deletionVectors":
        purge_deletion_vectors(spark, log.table_path)
    txn = log.start_transaction()
    assert txn.snapshot is not None
    txn.read_whole_table()  # any concurrent write between purge and this commit conflicts
    if name == "deletionVectors":
        left = [f.path for f in txn.snapshot.all_files if f.deletion_vector is not None]
        if left:
            raise DeltaAnalysisException(
                f"Cannot drop deletionVectors from {log.table_path}: {len(left)} file(s) still have deletion "
                f"vectors (e.g. {left[0]}), written concurrently. Run the statement again."
            )
    if props.get(txn.snapshot.configuration, key):
        raise DeltaAnalysisException(
            f"Cannot drop {name} from {log.table_path}: {key} was turned on again concurrently. "
            "Run the statement again."
        )
    txn.update_protocol(protocol_without(txn.snapshot.protocol, name))
    params = {"featureName": name, "truncateHistory": "true" if truncate_history else "false"}
    return txn.commit([], "DROP FEATURE", params)


def protocol_without(protocol: Protocol, feature: str) -> Protocol:
    """``protocol`` minus ``feature``; reader version 1 when no reader feature remains."""
    readers = sorted(F.reader_features(protocol) - {feature})
    writers = sorted(F.writer_features(protocol) - {feature})
    reader_version = protocol.min_reader_version
    if reader_version >= 3 and not readers:
        reader_version = 1
    return Protocol(
        min_reader_version=reader_version,
        min_writer_version=protocol.min_writer_version,
        reader_features=tuple(readers) if reader_version >= 3 else None,
        writer_features=tuple(writers),
    )
