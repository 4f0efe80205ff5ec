"""Staging data files on a local table and publishing them, without pyspark.

A writer gets a fresh ``<table>/_staging/<uuid>`` (``staging_area``: concurrent writers never
collide, readers never see partial files); each staged file is then moved to its final name,
fsynced and described by an AddFile with stats from its footer (``publish_staged``), and the
directories holding new files fsynced (``fsync_dirs``). Spark's writer (``spark.data_write``)
and the driver's pyarrow one (``spark.dml.driver_files``) share this.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pyarrow.parquet as pq

from serialake.core.model.actions import AddFile, encode_path
from serialake.core.model.schema import DataType
from serialake.exceptions import StorageWriteError, UnsupportedFeatureError
from serialake.spark.footer_stats import file_stats
from serialake.storage import is_local_path

__all__ = [
    "STAGING_DIR",
    "data_write_error",
    "fsync_dirs",
    "publish_staged",
    "require_local_data",
    "staged_files",
    "staging_area",
]

STAGING_DIR = "_staging"
_STAGING_MKDIR_ATTEMPTS = 64


def require_local_data(table_path: str, what: str) -> None:
    """Refuse, clearly, local-only data-file work (a staging directory) on a table on object storage.

    Without this, a staging path like ``s3://b/t/_staging`` would become a local directory
    named ``s3:``; S3 tables' files are written to their final names (``spark.remote``).
    """
    if not is_local_path(table_path):
        raise UnsupportedFeatureError(
            f"Table {table_path}: serialake cannot {what} on object storage yet (its transaction log "
            "works there: serialake.core commits, reads and checkpoints on S3, and delta-rs can write the data). "
            "Nothing was written."
        )


@contextmanager
def staging_area(table_path: str) -> Iterator[str]:
    """A fresh ``<table>/_staging/<uuid>`` for files being written, removed (with ``_staging`` if
    then empty) on exit: concurrent writers never collide and readers never see partial files."""
    require_local_data(table_path, "write data files")
    staging = os.path.join(table_path, STAGING_DIR, uuid.uuid4().hex)
    try:
        _make_staging_dir(staging)
    except OSError as e:
        raise data_write_error(table_path, staging, e) from e
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_if_empty(os.path.join(table_path, STAGING_DIR))


def staged_files(staging: str) -> list[tuple[str, str]]:
    """``(relative dir, file name)`` of the Parquet files Spark wrote (no .crc, no markers)."""
    out = []
    for root, dirs, files in os.walk(staging):
        dirs.sort()
        rel = os.path.relpath(root, staging)
        for name in sorted(files):
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                out.append(("" if rel == "." else rel, name))
    return out


def publish_staged(
    table_path: str,
    staging: str,
    rel_dir: str,
    name: str,
    partition_values: dict[str, str | None],
    indexed: list[tuple[tuple[str, ...], DataType]],
    data_change: bool,
    target_dir: str | None = None,
) -> AddFile | None:
    """Move one staged file into the table, fsync it, and build its AddFile (None if empty).

    ``target_dir``: its directory in the table (default: ``rel_dir``, the staged one)."""
    source = os.path.join(staging, rel_dir, name)
    metadata = pq.read_metadata(source)
    if metadata.num_rows == 0:
        return None
    stats = file_stats(metadata, indexed)
    suffix = name[name.index(".") :] if "." in name else ".parquet"
    new_name = f"part-{uuid.uuid4()}{suffix}"
    rel_dir = rel_dir if target_dir is None else target_dir
    rel_path = posixpath.join(rel_dir.replace(os.sep, "/"), new_name) if rel_dir else new_name
    target = os.path.join(table_path, rel_path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.rename(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return AddFile(
        path=encode_path(rel_path),
        partition_values=partition_values,
        size=st.st_size,
        modification_time=int(st.st_mtime * 1000),
        data_change=data_change,
        stats=stats,
    )


def fsync_dirs(table_path: str, rel_dirs: Iterable[str]) -> None:
    """fsync every directory holding a new file and its ancestors up to the table root."""
    todo: set[str] = {table_path}
    for rel in rel_dirs:
        parts = [p for p in rel.split("/") if p]
        for i in range(1, len(parts) + 1):
            todo.add(os.path.join(table_path, *parts[:i]))
    for d in sorted(todo, key=len, reverse=True):
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def data_write_error(table: str, path: str, error: OSError) -> StorageWriteError:
    """The error for a data file the driver could not write: table, file, errno and what to do."""
    from serialake.storage.base import errno_text, os_error_advice

    return StorageWriteError(
        f"Table {table}: writing data file {path} failed ({errno_text(error)}); "
        f"{os_error_advice(error.errno, os.path.dirname(path))}. Nothing was committed.",
        table=table,
        path=path,
        errno=error.errno,
        strerror=error.strerror,
    )


def _make_staging_dir(staging: str) -> None:
    """Create ``staging`` (and ``_staging``). Another writer leaving its staging area removes
    ``_staging`` when it is empty, which can happen between our creating ``_staging`` and our
    directory inside it (ENOENT): create again. Once ours exists, ``_staging`` is not empty."""
    for _ in range(_STAGING_MKDIR_ATTEMPTS - 1):
        try:
            os.makedirs(staging)
            return
        except FileNotFoundError:
            continue
    os.makedirs(staging)


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
