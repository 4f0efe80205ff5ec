"""VACUUM: delete the files a table no longer references, once older than the retention.

``vacuum(spark, table_path, retention_hours=None, dry_run=False)`` (``DeltaTable.vacuum``,
``VACUUM ... [RETAIN n HOURS] [DRY RUN]``): the files below the table (local: walked; S3:
listed through ``storage.datafiles``) that no live file, recent tombstone or deletion vector
refers to, older than the retention, and, locally, the staging directories and job records
of writes that died; between two commits, ``VACUUM START`` and ``VACUUM END``, as Delta.
UniForm tables' unreferenced Iceberg metadata goes too (``core.iceberg.cleanup``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import dv_referenced_files
from serialake.core.log.cdf import CHANGE_DATA_DIR
from serialake.core.log.snapshot import Snapshot
from serialake.core.model import properties as props
from serialake.core.model import uniform
from serialake.core.model.actions import FileAction, now_ms
from serialake.core.model.paths import absolute_path
from serialake.core.txn.post_commit import after_commit
from serialake.exceptions import DeltaIllegalArgumentException
from serialake.spark import direct, transaction
from serialake.spark.partition_values import is_hidden
from serialake.spark.staging import STAGING_DIR
from serialake.storage.datafiles import Access, is_remote

__all__ = ["RETENTION_CHECK_CONF", "vacuum"]

RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
_DELETE_THREADS = 8  # S3 DELETE requests at once in VACUUM


def vacuum(
    spark: SparkSession, table_path: str, retention_hours: float | None = None, dry_run: bool = False
) -> DataFrame | None:
    """Delete files no longer referenced and older than the retention; returns their paths.

    ``dry_run``: delete nothing and commit nothing; return the files that would be deleted
    (``VACUUM ... DRY RUN``).

    The retention defaults to ``delta.deletedFileRetentionDuration`` (7 days); a shorter
    one is refused unless ``spark.databricks.delta.retentionDurationCheck.enabled`` is
    false. A file survives when the latest snapshot references it, when a tombstone
    younger than the retention does (time travel), or when it is younger than the
    retention (a write in progress). ``_delta_log`` is never touched; ``_staging``
    directories of abandoned writes older than the retention are removed. On an ``s3://``
    table the objects below it are listed (``storage.datafiles``), their age is their
    listed modification time, and nothing is staged.
    """
    transaction.refuse("VACUUM", table_path, spark)
    log = DeltaLog.for_table(table_path)
    path = log.table_path
    snap = log.update()
    retention_ms = _retention_ms(spark, path, snap, retention_hours)
    cutoff = now_ms() - retention_ms
    keep = _referenced_paths(path, snap, cutoff)
    remote = is_remote(path)
    stale_staging: list[str] = []
    if remote:
        to_delete = _remote_vacuum_candidates(path, snap.partition_columns, keep, cutoff)
    else:
        to_delete, stale_staging = _vacuum_candidates(path, snap.partition_columns, keep, cutoff)
    schema = T.StructType([T.StructField("path", T.StringType())])
    if dry_run:
        found = [*(p for p, _ in sorted(to_delete)), *_iceberg_garbage(log, snap, cutoff, dry_run=True)]
        return spark.createDataFrame([(_location_uri(p),) for p in found], schema)
    params = {
        "retentionCheckEnabled": _retention_check_enabled(spark),
        "defaultRetentionMillis": props.get(snap.configuration, props.DELETED_FILE_RETENTION),
        "specifiedRetentionMillis": retention_ms,
    }
    size = sum(s for _, s in to_delete)
    _commit_marker(log, "VACUUM START", params, {"numFilesToDelete": len(to_delete), "sizeOfDataToDelete": size})
    deleted = []
    if remote:
        deleted = _delete_objects([p for p, _ in to_delete])
        dirs = 0  # S3 has no directories
    else:
        for file_path, _ in to_delete:
            try:
                os.remove(file_path)
                deleted.append(file_path)
            except FileNotFoundError:
                pass
        for staging in stale_staging:
            shutil.rmtree(staging, ignore_errors=True)
        dirs = _remove_empty_dirs(path, snap.partition_columns)
    deleted.extend(_iceberg_garbage(log, snap, cutoff, dry_run=False))
    end = _commit_marker(
        log, "VACUUM END", {"status": "COMPLETED"}, {"numDeletedFiles": len(deleted), "numVacuumedDirectories": dirs}
    )
    return after_commit(  # (None and a warning when it fails: core.txn.post_commit)
        "build the result DataFrame", path, end, spark.createDataFrame,
        [(_location_uri(p),) for p in sorted(deleted)], schema, operation="VACUUM",
        instead="(None instead of the result DataFrame)",
    )  # fmt: skip


def _iceberg_garbage(log: DeltaLog, snap: Snapshot, cutoff: int, *, dry_run: bool) -> list[str]:
    """UniForm tables: the Iceberg metadata files no retained Iceberg version refers to, older than
    ``cutoff`` (deleted unless ``dry_run``). The newest metadata and what it refers to always stay."""
    if not uniform.iceberg_enabled(snap.configuration):
        return []
    from serialake.core import iceberg

    return iceberg.cleanup(log, cutoff, dry_run=dry_run)


def _retention_check_enabled(spark: SparkSession) -> bool:
    return str(spark.conf.get(RETENTION_CHECK_CONF, "true")).strip().lower() != "false"


def _retention_ms(spark: SparkSession, path: str, snap: Snapshot, hours: float | None) -> int:
    default = props.get(snap.configuration, props.DELETED_FILE_RETENTION)
    if hours is None:
        return int(default)
    if hours < 0:
        raise DeltaIllegalArgumentException(f"Retention for vacuum of {path} cannot be negative: {hours}")
    ms = int(hours * 3_600_000)
    if ms < default and _retention_check_enabled(spark):
        raise DeltaIllegalArgumentException(
            f"Are you sure you would like to vacuum table {path} with a retention of {hours} hours? "
            f"It is below the table's delta.deletedFileRetentionDuration ({default / 3_600_000:g} hours): "
            "a concurrent reader or writer, or a time-travel query, may still need the files it deletes.\n"
            f"Help: vacuum with retentionHours >= {default / 3_600_000:g}, or if you are certain no "
            f"operation runs that needs older files, set {RETENTION_CHECK_CONF} = false."
        )
    return ms


def _referenced_paths(path: str, snap: Snapshot, cutoff: int) -> set[str]:
    """Absolute paths of live files, recent tombstones and their deletion vectors."""
    keep: set[str] = set()
    actions: list[FileAction] = [
        *snap.all_files,
        *(r for r in snap.tombstones if (r.deletion_timestamp or 0) > cutoff),
    ]
    for a in actions:
        keep.add(absolute_path(path, a.path))
    keep |= dv_referenced_files(path, actions)
    return keep


def _commit_marker(log: DeltaLog, operation: str, params: dict[str, Any], metrics: dict[str, Any]) -> int:
    txn = log.start_transaction()
    return txn.commit([], operation, params, metrics)


def _vacuum_candidates(
    table: str, partition_columns: Sequence[str], keep: set[str], cutoff: int
) -> tuple[list[tuple[str, int]], list[str]]:
    """Unreferenced files older than ``cutoff`` (path, size), and stale staging directories and
    job records of direct writes (``spark.direct``) that died before committing."""
    files: list[tuple[str, int]] = []
    for root, dirs, names in os.walk(table):
        # Change data files (``_change_data``) are never referenced by a snapshot: like Delta,
        # vacuum removes them once older than the retention (their commit's age).
        top = root == table
        dirs[:] = sorted(
            d
            for d in dirs
            if (not is_hidden(d, partition_columns) or (top and d == CHANGE_DATA_DIR))
            and not (top and d == uniform.METADATA_DIR)  # UniForm's Iceberg metadata: cleaned up on its own
        )
        for name in names:
            if is_hidden(name, partition_columns):
                continue
            path = os.path.normpath(os.path.join(root, name))
            if path in keep:
                continue
            st = os.stat(path)
            if st.st_mtime * 1000 < cutoff:
                files.append((path, st.st_size))
    staging: list[str] = []
    staging_root = os.path.join(table, STAGING_DIR)
    if os.path.isdir(staging_root):
        for entry in os.scandir(staging_root):
            if entry.is_dir() and _newest_mtime_ms(entry.path) < cutoff:
                staging.append(entry.path)
    for parent in (table, os.path.join(table, CHANGE_DATA_DIR)):  # records of direct writes that died
        for entry in os.scandir(parent) if os.path.isdir(parent) else ():
            record = os.path.join(entry.path, direct.JOB_RECORD_DIR)
            if direct.is_job_dir(entry.name) and os.path.isdir(record) and _newest_mtime_ms(record) < cutoff:
                staging.append(record)
    return files, staging


def _remote_vacuum_candidates(
    table: str, partition_columns: Sequence[str], keep: set[str], cutoff: int
) -> list[tuple[str, int]]:
    """The unreferenced objects below an S3 table listed as modified before ``cutoff`` (URI, size).

    Objects under a hidden prefix (``_delta_log``, ``_symlink_format_manifest``, ...) or with a
    hidden name are not data, as locally. ``keep`` is compared by bucket and key, whatever the
    scheme (``s3`` / ``s3a``) names them.
    """
    kept = {_object_key(p) for p in keep}
    files = []
    for f in Access().walk(table):
        parts = f.path.split("/")
        if parts[0] == uniform.METADATA_DIR and len(parts) > 1:
            continue  # UniForm's Iceberg metadata: cleaned up on its own
        if parts[0] == CHANGE_DATA_DIR:  # change data files: removed once older than the retention
            parts = parts[1:]
        if any(is_hidden(part, partition_columns) for part in parts) and not direct.is_job_record(parts):
            continue
        uri = f"{table}/{f.path}"
        if _object_key(uri) in kept or f.modification_time >= cutoff:
            continue
        files.append((uri, f.size))
    return files


def _object_key(location: str) -> str:
    """``bucket/key`` of an S3 URI (the scheme dropped); a local path as it is."""
    return location.split("://", 1)[1] if is_remote(location) else location


def _delete_objects(uris: Sequence[str]) -> list[str]:
    """Delete S3 objects, several at a time; the ones deleted (all of them: a missing one counts)."""
    files = Access()
    if not uris:
        return []
    with ThreadPoolExecutor(min(_DELETE_THREADS, len(uris))) as pool:
        list(pool.map(files.delete, uris))
    return list(uris)


def _location_uri(location: str) -> str:
    """A table or file location as delta-spark shows it: ``file:/path`` locally, the S3 URI as it is."""
    return location if is_remote(location) else "file:" + location


def _newest_mtime_ms(directory: str) -> float:
    newest = os.stat(directory).st_mtime
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
            except FileNotFoundError:
                pass
    return newest * 1000


def _remove_empty_dirs(table: str, partition_columns: Sequence[str]) -> int:
    """Remove empty data directories below the table root; returns how many."""
    removed = 0
    for root, _dirs, names in os.walk(table, topdown=False):
        if root == table:
            continue
        rel = os.path.relpath(root, table).split(os.sep)
        if any(is_hidden(part, partition_columns) for part in rel if part != CHANGE_DATA_DIR):
            continue
        if not names and not os.listdir(root):
            try:
                os.rmdir(root)
                removed += 1
            except OSError:
                pass
    return removed
