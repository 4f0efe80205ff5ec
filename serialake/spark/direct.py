"""Spark's own Parquet writer, straight to a table's final file names, on any file system Spark opens.

Which route a table's data files take (``data_io``, one place, set by ``spark.serialake.dataFiles.io``):

- ``staged``: local tables by default. Spark writes into ``<table>/_staging/<uuid>``; the
  files are renamed into the table and fsynced (``data_write.write_data_files``). A rename is free
  on a local file system.
- ``spark``: object-store tables whose URI Spark's Hadoop file systems can open (an
  ``s3://`` / ``s3a://`` table with the S3A connector on the cluster), and any table when
  the setting is ``spark``. Spark's native Parquet writer writes every file once, at its
  final, unique name, with nothing staged and nothing renamed (a rename is a copy on
  S3); the file list comes from the job, never from a listing; reads use Spark's native
  Parquet reader.
- ``python``: object-store tables Spark cannot open (this pyspark has no S3A connector),
  or when the setting is ``python``: the executors write and read with pyarrow and
  obstore (``spark.remote``).

How the ``spark`` route writes (``write_direct``): the rows go through Spark's streaming
file sink (``FileStreamSink.addBatch`` on a batch DataFrame: a stable entry point into
``FileFormatWriter`` since Spark 2, the class moved package in Spark 4.1). Its commit
protocol (``ManifestFileCommitProtocol``) has each task write its files directly at
``<dir>/<partition dirs>/part-<split>-<uuid>.c000.<codec>.parquet`` and report them; the
driver records the job's files in ``<dir>/_spark_metadata/0``, which is read and deleted.
``<dir>`` is a fresh directory of the table, ``<table>/<16 hex digits>``: the sink's
metadata must not be shared by concurrent writers, and Delta allows files anywhere under
the table (``delta.randomizeFilePrefixes`` writes the same layout). A failed job's task
files are removed by the commit protocol; files of a job that failed after its tasks
committed are removed here. Each listed file's footer is then read by the driver (stats,
and proof that what the driver commits is there for every reader); files without rows
are deleted, local files are fsynced with their directories.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession

from serialake.core.model.actions import AddFile, encode_path
from serialake.core.model.paths import parquet_metadata
from serialake.exceptions import DeltaIllegalArgumentException, UnsupportedFeatureError, WrittenFileMissingError
from serialake.spark.backend import backend
from serialake.storage import is_local_path
from serialake.storage.datafiles import Access
from serialake.storage.local import fsync_dir

if TYPE_CHECKING:
    from serialake.core.model.schema import DataType

__all__ = [
    "DATA_IO_CONF",
    "JOB_RECORD_DIR",
    "data_io",
    "finish_job",
    "hadoop_uri",
    "is_job_dir",
    "is_job_record",
    "spark_opens",
    "write_direct",
]

DATA_IO_CONF = "spark.serialake.dataFiles.io"
_SETTINGS = ("auto", "spark", "python")
JOB_RECORD_DIR = "_spark_metadata"
_JOB_DIR = re.compile(r"[0-9a-f]{16}")  # ``write_direct``'s fresh directory per job
_IO_THREADS = 8
_PROTOCOL_CONF = "spark.sql.streaming.commitProtocolClass"
_MANIFEST_PROTOCOL = "ManifestFileCommitProtocol"

Describe = Callable[[str, str], dict[str, str | None]]  # (dir written in, file name) -> partition values
StatsOf = Callable[[Any, list[tuple[tuple[str, ...], "DataType"]]], str]  # (footer, indexed) -> stats JSON


def data_io(spark: SparkSession, table_path: str) -> str:
    """How ``table_path``'s data files are written and read: ``staged``, ``spark`` or ``python``.

    ``spark.serialake.dataFiles.io``: ``auto`` (default) stages local tables and uses Spark's
    file system for an object-store table when Spark has one for its scheme, else the
    executors' Python; ``spark`` writes every table with Spark straight to its final names
    (an object-store table Spark cannot open is an error); ``python`` makes object-store
    tables go through the executors' Python even where Spark could open them.
    """
    setting = (spark.conf.get(DATA_IO_CONF, "auto") or "auto").strip().lower()
    if setting not in _SETTINGS:
        raise DeltaIllegalArgumentException(f"{DATA_IO_CONF} is '{setting}': expected one of {', '.join(_SETTINGS)}")
    local = is_local_path(table_path)
    if setting == "spark":
        if not local and not spark_opens(spark, table_path):
            raise UnsupportedFeatureError(
                f"Table {table_path}: {DATA_IO_CONF}=spark, but Spark has no file system for "
                f"'{_scheme(hadoop_uri(table_path))}' URIs (add the connector, for S3 hadoop-aws, to the "
                f"cluster, or set {DATA_IO_CONF}=auto to write and read from the executors' Python). "
                "Nothing was read or written."
            )
        return "spark"
    if local:
        return "staged"
    if setting == "python":
        return "python"
    return "spark" if spark_opens(spark, table_path) else "python"


def hadoop_uri(location: str) -> str:
    """``location`` (a local path or an object-store URI) as Spark's Hadoop file systems name it:
    ``file:/...`` locally; ``s3://`` becomes ``s3a://`` (the S3A connector's scheme)."""
    if is_local_path(location):
        return "file:" + location
    scheme, sep, rest = location.partition("://")
    return ("s3a" if scheme.lower() in ("s3", "s3a") else scheme) + sep + rest


def spark_opens(spark: SparkSession, location: str) -> bool:
    """Whether Spark's Hadoop configuration has a file system class for ``location``'s scheme."""
    if is_local_path(location):
        return True
    return backend(spark).opens(hadoop_uri(location))


def _scheme(uri: str) -> str:
    return uri.split(":", 1)[0]


def write_direct(
    df: DataFrame,
    table_path: str,
    partition_columns: Sequence[str],
    indexed: list[tuple[tuple[str, ...], DataType]],
    *,
    data_change: bool,
    max_records_per_file: int | None,
    describe: Describe,
    stats_of: StatsOf,
) -> list[AddFile]:
    """Write ``df`` with Spark's Parquet writer at final names under ``<table>/<fresh dir>``; their AddFiles.

    ``partition_columns`` are ``df`` columns (Hive-style directories, not stored in the
    files); ``indexed`` the columns that get stats, which ``stats_of(footer, indexed)``
    computes. ``describe(rel_dir, name)`` gives a file's partition values from the directory
    Spark wrote it in (relative to the fresh directory). Nothing is committed; local files
    are fsynced, their directories are not (``staging.fsync_dirs``).
    """
    spark = df.sparkSession
    protocol = spark.conf.get(_PROTOCOL_CONF, None) or _MANIFEST_PROTOCOL
    if protocol.rsplit(".", 1)[-1] != _MANIFEST_PROTOCOL:  # only that protocol records the job's files
        raise UnsupportedFeatureError(
            f"Table {table_path}: Spark's direct writer needs {_PROTOCOL_CONF} to be Spark's "
            f"{_MANIFEST_PROTOCOL} (it is {protocol}), which records the files a job wrote. Unset it, or set "
            f"{DATA_IO_CONF}=python. Nothing was written."
        )
    prefix = uuid.uuid4().hex[:16]  # (``_JOB_DIR``)
    out_dir = posixpath.join(table_path, prefix)
    options = {"maxRecordsPerFile": str(int(max_records_per_file))} if max_records_per_file else {}
    door = backend(spark)
    sink = door.file_sink(hadoop_uri(out_dir), partition_columns, options)
    if sink is None:
        raise UnsupportedFeatureError(
            f"This Spark ({spark.version}) has no streaming file sink class: "
            f"set {DATA_IO_CONF}=python to write from the executors' Python"
        )
    # As ``df.write`` does before it plans: the sink plans the write (a sort by partition
    # columns) in the calling JVM thread, where Spark's plan nodes take their session from
    # the thread's active session; from a Python thread other than the one that built the
    # session there is none (a partitioned write failed: ``SparkPlan.session()``).
    door.make_active()
    tag = f"serialake-write-{prefix}"
    door.add_job_tag(tag)
    try:
        sink.write(df)  # a failed job raises as ``df.write`` would (pyspark converts it)
    except BaseException:
        _settle_failed_job(spark, tag)
        _delete_job_directory(spark, table_path, out_dir)
        _remove_record_directory(spark, out_dir)
        raise
    finally:
        door.remove_job_tag(tag)
    try:
        return finish_job(table_path, prefix, indexed, data_change=data_change, describe=describe, stats_of=stats_of)
    finally:
        _remove_record_directory(spark, out_dir)


def _settle_failed_job(spark: SparkSession, tag: str, timeout_s: float = 120.0) -> None:
    """Cancel what is left of a failed write job and wait until none of its tasks runs.

    Spark reports a job failed while its other tasks may still run: a task that finishes
    after that commits its file where the job's clean-up no longer looks. Once the job shows
    as ended in Spark's status store, every task it started is known there (the listener bus
    is ordered); waiting for each stage's active tasks to reach 0 waits for their own
    clean-up too. Bounded: past ``timeout_s`` the caller deletes what is there by then.
    """
    door = backend(spark)
    try:
        door.cancel_tagged_jobs(tag)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not door.tagged_tasks_running(tag):
                return
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - best effort: the job's files are deleted whatever happens here
        return


def _delete_job_directory(spark: SparkSession, table_path: str, out_dir: str) -> None:
    """Delete everything a failed job wrote: ``out_dir`` is fresh, the job's alone."""
    if is_local_path(out_dir):
        import shutil

        shutil.rmtree(out_dir, ignore_errors=True)
        return
    files = Access.here(table_path)
    _delete_quietly(files, [posixpath.join(out_dir, entry.path) for entry in list(files.walk(out_dir))])


def _remove_record_directory(spark: SparkSession, out_dir: str) -> None:
    """Remove the sink's record directory through Spark's own file system, once its files are gone.

    On S3 the sink's ``mkdirs`` leaves a directory marker, an empty object named
    ``<dir>/_spark_metadata/``, that S3A (Hadoop 3.4+) keeps; only S3A names it (the log
    store's object paths cannot end in ``/``). Local directories are removed by
    ``_remove_job_metadata``.
    """
    if is_local_path(out_dir):
        return
    try:
        backend(spark).delete_path(hadoop_uri(posixpath.join(out_dir, JOB_RECORD_DIR)))
    except Exception:  # noqa: BLE001 - an empty marker left behind is harmless; VACUUM ignores it
        pass


def finish_job(
    table_path: str,
    prefix: str,
    indexed: list[tuple[tuple[str, ...], DataType]],
    *,
    data_change: bool,
    describe: Describe,
    stats_of: StatsOf,
) -> list[AddFile]:
    """The AddFiles of a finished write job under ``<table>/<prefix>``, from its ``_spark_metadata`` record.

    Every file's footer is read (stats, and proof it is there for the driver); files
    without rows are deleted; local files are fsynced (not their directories). The record
    is removed; on any failure the job's files are deleted too.
    """
    files = Access.here(table_path)
    out_dir = posixpath.join(table_path, prefix)
    listed: list[tuple[str, int, int]] = []
    try:
        listed = _job_files(files, table_path, out_dir)
        adds = _describe_all(files, table_path, out_dir, prefix, listed, indexed, data_change, describe, stats_of)
    except BaseException:
        _delete_quietly(files, [location for location, _, _ in listed])
        raise
    finally:
        _remove_job_metadata(files, out_dir)
    return adds


def is_job_dir(name: str) -> bool:
    """Whether a directory of the table is named as ``write_direct``'s fresh directory per job."""
    return _JOB_DIR.fullmatch(name) is not None


def is_job_record(parts: Sequence[str]) -> bool:
    """Whether a path below the table (its ``/``-separated ``parts``) is in a direct write's job
    record, ``<16 hex digits>/_spark_metadata/...``: left only by a job that died before its
    files were committed, so VACUUM removes it once older than the retention."""
    return len(parts) > 2 and parts[1] == JOB_RECORD_DIR and is_job_dir(parts[0])


def _job_files(files: Access, table_path: str, out_dir: str) -> list[tuple[str, int, int]]:
    """``(location, size, modification ms)`` of every file the job committed, from the sink's record."""
    import json

    record = posixpath.join(out_dir, JOB_RECORD_DIR, "0")
    try:
        text = files.read_bytes(record).decode("utf-8")
    except FileNotFoundError:  # the job records its files even when it wrote none
        raise WrittenFileMissingError(table=table_path, path=record, job_files=None) from None
    lines = text.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise OSError(f"{record}: not a file-sink record (first line {lines[:1]!r})")
    out = []
    for line in lines[1:]:
        if not line.strip():
            continue
        entry = json.loads(line)
        if entry.get("action", "add") != "add" or entry.get("isDir"):
            continue
        out.append((_location(entry["path"]), int(entry["size"]), int(entry["modificationTime"])))
    return out


def _location(uri: str) -> str:
    """A Hadoop file URI as written by the sink (percent-encoded) as a location ``Access`` serves."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    scheme = "s3" if parsed.scheme.lower() in ("s3", "s3a") else parsed.scheme
    return f"{scheme}://{parsed.netloc}{unquote(parsed.path)}"


def _describe_all(
    files: Access,
    table_path: str,
    out_dir: str,
    prefix: str,
    listed: Sequence[tuple[str, int, int]],
    indexed: list[tuple[tuple[str, ...], DataType]],
    data_change: bool,
    describe: Describe,
    stats_of: StatsOf,
) -> list[AddFile]:
    """The AddFiles of the job's files: footers read (stats, and proof each is there), empty files deleted."""
    root = _comparable(out_dir)

    def one(entry: tuple[str, int, int]) -> AddFile | None:
        location, size, mtime = entry
        where = _comparable(location)
        if not where.startswith(root + "/"):
            raise OSError(f"Table {table_path}: the write job reported file {location} outside {out_dir}")
        rel_dir, _, name = where[len(root) + 1 :].rpartition("/")
        try:
            metadata = parquet_metadata(location, size)
        except FileNotFoundError:
            raise WrittenFileMissingError(table=table_path, path=location, job_files=len(listed)) from None
        if is_local_path(location):
            _remove_checksum(location)
        if metadata.num_rows == 0:
            files.delete(location)
            return None
        if is_local_path(location):
            fsync_dir(location)  # (a file: its bytes)
        values = describe(rel_dir, name)
        rel_path = posixpath.join(prefix, rel_dir, name) if rel_dir else posixpath.join(prefix, name)
        return AddFile(
            path=encode_path(rel_path),
            partition_values=values,
            size=size,
            modification_time=mtime,
            data_change=data_change,
            stats=stats_of(metadata, indexed),
        )

    with ThreadPoolExecutor(_IO_THREADS) as pool:
        return [a for a in pool.map(one, listed) if a is not None]


def _comparable(location: str) -> str:
    """``location`` with ``s3a://`` as ``s3://``, to compare the job's URIs with the table's."""
    if location[:6].lower() == "s3a://":
        return "s3://" + location[6:]
    return location


def _remove_checksum(path: str) -> None:
    """Remove the ``.<name>.crc`` Hadoop's local file system writes beside each file."""
    directory, name = os.path.split(path)
    try:
        os.remove(os.path.join(directory, f".{name}.crc"))
    except FileNotFoundError:
        pass


def _remove_job_metadata(files: Access, out_dir: str) -> None:
    """Delete the sink's ``_spark_metadata`` record (and, locally, its directory and checksums)."""
    meta = posixpath.join(out_dir, JOB_RECORD_DIR)
    if is_local_path(out_dir):
        import shutil

        shutil.rmtree(meta, ignore_errors=True)
        for root, _, _ in sorted(os.walk(out_dir), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(root)  # directories a failed or empty job left empty
            except OSError:
                pass
        return
    for entry in list(files.walk(meta)):
        _delete_quietly(files, [posixpath.join(meta, entry.path)])


def _delete_quietly(files: Access, locations: Sequence[str]) -> None:
    for location in locations:
        try:
            files.delete(location)
        except OSError:
            pass
        if is_local_path(location):
            _remove_checksum(location)
