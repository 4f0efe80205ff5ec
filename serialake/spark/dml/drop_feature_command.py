"""ALTER TABLE ... DROP FEATURE: a table feature removed from the protocol, safely.

First the feature's property is turned off (a metadata change: every concurrent writer
fails and no new writer uses the feature); for deletionVectors the files that carry one
are purged (``reorg``); then a protocol without the feature is committed by a transaction
that read the whole table, so any concurrent write in between makes it fail rather than
leave a deletion vector behind a protocol that no longer allows it.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from serialake.core import DeltaLog
from serialake.core.model import features as F
from serialake.core.model import properties as props
from serialake.core.model.actions import Protocol
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError, UnsupportedFeatureError
from serialake.spark import transaction
from serialake.spark.dml.alter_command import unset_properties
from serialake.spark.dml.reorg_command import purge_deletion_vectors

__all__ = ["DROPPABLE_FEATURES", "drop_feature", "protocol_without"]

# Features DROP FEATURE can remove, and the property that turns each on.
DROPPABLE_FEATURES: dict[str, str] = {
    "deletionVectors": props.ENABLE_DELETION_VECTORS,
    "appendOnly": props.APPEND_ONLY,
    "changeDataFeed": props.ENABLE_CDF,
}


def drop_feature(spark: SparkSession, path: str, feature: str, truncate_history: bool = False) -> int:
    """Remove ``feature`` from the table's protocol (see module docstring); the final version."""
    log = DeltaLog.for_table(path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"{log.table_path} is not a Delta table")
    snap = log.update()
    protocol = snap.protocol
    present = F.table_features(protocol)
    name = next((f for f in present if f.lower() == feature.lower()), None)
    if name is None:
        raise DeltaAnalysisException(
            f"Table {log.table_path} does not have table feature '{feature}' "
            f"(its features: {', '.join(sorted(present)) or 'none'}; protocol "
            f"({protocol.min_reader_version}, {protocol.min_writer_version}))."
        )
    droppable = {k.lower(): k for k in DROPPABLE_FEATURES}
    if name.lower() not in droppable:
        raise UnsupportedFeatureError(
            f"ALTER TABLE ... DROP FEATURE {name} is not supported by serialake on table {log.table_path}. "
            f"serialake can drop: {', '.join(DROPPABLE_FEATURES)}."
        )
    if protocol.min_writer_version < 7:
        raise UnsupportedFeatureError(
            f"Table {log.table_path} has the legacy protocol ({protocol.min_reader_version}, "
            f"{protocol.min_writer_version}), which implies '{name}' by its version number; dropping a "
            "feature needs a table-features protocol (writer version 7)."
        )
    key = DROPPABLE_FEATURES[droppable[name.lower()]]
    if props.get(snap.configuration, key):
        unset_properties(log.table_path, [key], if_exists=True)
    if name == "deletionVectors":
        purge_deletion_vectors(spark, log.table_path)
    transaction.refuse("DROP FEATURE", log.table_path)
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
