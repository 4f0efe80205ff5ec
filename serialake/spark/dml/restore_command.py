"""RESTORE TABLE ... TO VERSION / TIMESTAMP AS OF: the files (and metadata) of an older version.

One data-changing commit: files present then and missing now are added back, files present
now and absent then are removed (a file is its ``(path, deletion vector)``). The whole
table counts as read, so any concurrent data change conflicts. The protocol is never
downgraded. No Spark job runs; the result rows are delta-spark's restore metrics.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from serialake.core.dv.deletion_vectors import dv_absolute_path
from serialake.core.model.actions import Action, now_ms
from serialake.core.model.paths import absolute_path
from serialake.core.model.paths import file_exists as _exists
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException, DeltaTableNotFoundError
from serialake.spark.dml.kernel import DmlResult, file_bytes, open_transaction, result_df

__all__ = ["restore", "restoreToTimestamp", "restoreToVersion", "restore_metrics_df", "run_restore"]


_RESTORE_SCHEMA = T.StructType(
    [
        T.StructField(n, T.LongType(), False)
        for n in (
            "table_size_after_restore",
            "num_of_files_after_restore",
            "num_removed_files",
            "num_restored_files",
            "removed_files_size",
            "restored_files_size",
        )
    ]
)


def restoreToVersion(spark: SparkSession, table_path: str, version: int) -> DataFrame | None:  # noqa: N802
    """``RESTORE TABLE ... TO VERSION AS OF version``; one row of delta-spark's restore metrics
    (None, with a warning, when building it fails after the commit: ``kernel.result_df``)."""
    return restore(spark, table_path, version=version)


def restoreToTimestamp(spark: SparkSession, table_path: str, timestamp: Any) -> DataFrame | None:  # noqa: N802
    """``RESTORE TABLE ... TO TIMESTAMP AS OF timestamp`` (datetime, date, ISO string or ms)."""
    return restore(spark, table_path, timestamp=timestamp)


def restore(
    spark: SparkSession, table_path: str, version: int | None = None, timestamp: Any = None
) -> DataFrame | None:
    """Restore to ``version`` or ``timestamp`` (exactly one)."""
    result = run_restore(table_path, version=version, timestamp=timestamp)
    return result_df(spark, table_path, "RESTORE", result, restore_metrics_df)


def run_restore(
    table_path: str,
    *,
    version: int | None = None,
    timestamp: Any = None,
    before_commit: BeforeCommit = None,
) -> DmlResult:
    """Make the table's files (and metadata) those of an older version, as one data-changing commit.

    Files present then and missing now are added back, files present now and absent then
    are removed (a file is its ``(path, deletion vector)``). The whole table counts as read,
    so any concurrent data change conflicts. The protocol is never downgraded.
    """
    if (version is None) == (timestamp is None):
        raise DeltaIllegalArgumentException("RESTORE needs exactly one of version or timestamp")
    txn, current = open_transaction(table_path, "RESTORE")
    log = txn.delta_log
    table = current.table_path
    if version is not None:
        if version < 0 or version > current.version:
            raise DeltaAnalysisException(
                f"Cannot restore table {table} to version {version}: available versions are 0 to {current.version}."
            )
    try:
        old = log.snapshot(version=version, timestamp=timestamp)
    except (FileNotFoundError, DeltaTableNotFoundError) as e:
        raise DeltaAnalysisException(
            f"Cannot restore table {table} to version {version if version is not None else timestamp}: "
            f"that version's log is no longer available ({e})."
        ) from None
    now_files = {f.key: f for f in txn.read_whole_table()}
    then_files = {f.key: f for f in old.all_files}
    to_add = [f for k, f in then_files.items() if k not in now_files]
    to_remove = [f for k, f in now_files.items() if k not in then_files]
    missing = [f.path for f in to_add if not _exists(absolute_path(table, f.path))]
    missing += [
        f"{f.path} (deletion vector)"
        for f in to_add
        if f.deletion_vector is not None
        and (dv := dv_absolute_path(table, f.deletion_vector)) is not None
        and not _exists(dv)
    ]
    if missing:
        raise DeltaAnalysisException(
            f"Cannot restore table {table} to version {old.version}: {len(missing)} data file(s) it references "
            f"were deleted (e.g. {missing[0]}), probably by VACUUM. Restore to a later version."
        )
    if old.metadata != current.metadata:
        txn.update_metadata(old.metadata)
    stamp = now_ms()
    actions: list[Action] = [replace(f, data_change=True) for f in to_add]
    actions += [f.remove(timestamp=stamp) for f in to_remove]
    after = list(then_files.values())
    metrics = {
        "tableSizeAfterRestore": file_bytes(after),
        "numOfFilesAfterRestore": len(after),
        "numRemovedFiles": len(to_remove),
        "numRestoredFiles": len(to_add),
        "removedFilesSize": file_bytes(to_remove),
        "restoredFilesSize": file_bytes(to_add),
    }
    params = {"version": old.version, "timestamp": timestamp if timestamp is not None else None}
    params = {k: v for k, v in params.items() if v is not None}
    committed = commit_or_clean_up(txn, actions, "RESTORE", params, metrics, before_commit=before_commit)
    return DmlResult(committed, metrics)


def restore_metrics_df(spark: SparkSession, result: DmlResult) -> DataFrame:
    m = result.metrics
    row = (
        m["tableSizeAfterRestore"],
        m["numOfFilesAfterRestore"],
        m["numRemovedFiles"],
        m["numRestoredFiles"],
        m["removedFilesSize"],
        m["restoredFilesSize"],
    )
    return spark.createDataFrame([row], _RESTORE_SCHEMA)
