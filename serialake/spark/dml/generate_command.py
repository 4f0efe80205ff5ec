"""GENERATE symlink_format_manifest: the table's live files listed for Presto/Athena/Hive readers.

``_symlink_format_manifest/manifest`` (or one ``<partition dirs>/manifest`` per partition of
a partitioned table) holds the absolute URI of each data file of the latest snapshot, one
per line. Each manifest is written to a temporary name and renamed into place, so a reader
sees the old list or the new one (on S3 each manifest is one PUT, which replaces the object
whole); manifests of partitions that no longer have files are removed. Nothing is committed
to the Delta log.

A table whose live files carry deletion vectors is refused: a manifest cannot say which
rows of a file are deleted, so its readers would see deleted rows.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import uuid
from collections import defaultdict

from serialake.core import DeltaLog
from serialake.core.model.actions import decode_path
from serialake.core.model.paths import absolute_path
from serialake.exceptions import DeltaIllegalArgumentException, DeltaTableNotFoundError, UnsupportedFeatureError
from serialake.storage.datafiles import Access, is_remote

__all__ = ["MANIFEST_DIR", "generate"]

MANIFEST_DIR = "_symlink_format_manifest"
_MODES = ("symlink_format_manifest",)


def generate(table_path: str, mode: str) -> int:
    """Write the manifests of ``mode`` (only ``symlink_format_manifest``); the number of files listed."""
    if not isinstance(mode, str) or mode.lower() not in _MODES:
        raise DeltaIllegalArgumentException(
            f"GENERATE {mode!r} on table {table_path}: the only mode is 'symlink_format_manifest'"
        )
    log = DeltaLog.for_table(table_path)
    if not log.table_exists():
        raise DeltaTableNotFoundError(f"Cannot GENERATE manifests: {log.table_path} is not a Delta table")
    snap = log.update()
    table = snap.table_path
    with_dv = next((f for f in snap.all_files if f.deletion_vector is not None), None)
    if with_dv is not None:
        raise UnsupportedFeatureError(
            f"Cannot generate symlink manifests of table {table} (version {snap.version}): file {with_dv.path} has "
            "a deletion vector, and manifest readers would see its deleted rows.\n"
            "Help: REORG TABLE ... APPLY (PURGE) first, or read the table with a Delta reader."
        )
    groups: dict[str, list[str]] = defaultdict(list)
    for f in snap.all_files:
        rel = decode_path(f.path)
        directory = posixpath.dirname(rel) if snap.partition_columns and "://" not in rel else ""
        groups[directory].append(_uri(absolute_path(table, f.path)))
    if not groups and not snap.partition_columns:
        groups[""] = []  # an empty table: an empty manifest
    if is_remote(table):
        _put_remote(f"{table}/{MANIFEST_DIR}", groups)
        return sum(len(u) for u in groups.values())
    root = os.path.join(table, MANIFEST_DIR)
    for directory, uris in groups.items():
        target_dir = os.path.join(root, *directory.split("/")) if directory else root
        os.makedirs(target_dir, exist_ok=True)
        temp = os.path.join(target_dir, f".manifest-{uuid.uuid4().hex}.tmp")
        with open(temp, "w", encoding="utf-8") as out:
            out.writelines(u + "\n" for u in sorted(uris))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, os.path.join(target_dir, "manifest"))
    _remove_stale(root, set(groups))
    return sum(len(u) for u in groups.values())


def _put_remote(root: str, groups: dict[str, list[str]]) -> None:
    """The manifests of an S3 table: one object per partition, then the stale ones deleted."""
    files = Access()
    for directory, uris in groups.items():
        target = f"{root}/{directory}/manifest" if directory else f"{root}/manifest"
        files.put(target, "".join(u + "\n" for u in sorted(uris)).encode("utf-8"))
    for f in files.walk(root):
        directory, _, name = f.path.rpartition("/")
        if name == "manifest" and directory not in groups:
            files.delete(f"{root}/{f.path}")


def _uri(path: str) -> str:
    return path if "://" in path else "file:" + path


def _remove_stale(root: str, live: set[str]) -> None:
    """Remove the manifests of partitions without files (and directories left empty)."""
    if not os.path.isdir(root):
        return
    for current, _dirs, names in os.walk(root, topdown=False):
        rel = os.path.relpath(current, root)
        key = "" if rel == "." else rel.replace(os.sep, "/")
        if "manifest" in names and key not in live:
            os.remove(os.path.join(current, "manifest"))
        if current != root and not os.listdir(current):
            shutil.rmtree(current, ignore_errors=True)
