"""CLONE: a new table with a source table's data and metadata at one version.

``DeltaTable.clone`` / ``cloneAtVersion`` / ``cloneAtTimestamp`` and SQL's ``CREATE [OR
REPLACE] TABLE t {SHALLOW | DEEP} CLONE source [VERSION AS OF n | TIMESTAMP AS OF ts]``.

- **Shallow**: the clone's log lists the source's data files by absolute URI (deletion
  vectors too); nothing is copied. Its own writes go to its own directory; VACUUM of the
  clone never deletes the source's files, but VACUUM of the source may delete files the
  clone still lists (as with Delta).
- **Deep**: the data files (and deletion-vector files) are copied into the clone's
  directory first, each fsynced; the clone is then independent of the source.

Source and clone may each be local or on S3 (``storage.datafiles``: a copy within one
bucket is server-side; a shallow clone lists ``s3://`` URIs).

The clone gets a new table id, the source's schema, partitioning, clustering, protocol and
properties (``properties`` add to or override them), and one commit (operation CLONE) that
appears whole or not at all. ``replace`` replaces an existing table at the target (its
files are removed in the same commit); otherwise an existing target is an error. A deep
clone whose commit fails deletes the files it copied.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import dv_absolute_path
from serialake.core.model import properties as props
from serialake.core.model.actions import Action, AddFile, DeletionVectorDescriptor, now_ms
from serialake.core.model.paths import absolute_path
from serialake.core.model.validate import is_absolute_path
from serialake.core.tables import catalog
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError
from serialake.spark import transaction
from serialake.storage.datafiles import Access, is_remote

__all__ = ["is_path", "run_clone"]

_COPY_THREADS = 8


def is_path(target: str) -> bool:
    """Whether a clone target names a directory (else it is a table name)."""
    return "/" in target or "\\" in target or "://" in target or target.startswith("file:")


def run_clone(
    source_path: str,
    target: str,
    *,
    shallow: bool,
    replace_target: bool = False,
    must_exist: bool = False,
    if_not_exists: bool = False,
    properties: Mapping[str, str] | None = None,
    version: int | None = None,
    timestamp: Any = None,
    before_commit: BeforeCommit = None,
) -> tuple[str, int] | None:
    """Clone the table at ``source_path`` (at ``version`` / ``timestamp``, else latest) to
    ``target`` (a path, or a table name registered in the catalog): the clone's path and the
    version its commit made.

    An existing target is replaced with ``replace_target``, left alone with ``if_not_exists``
    (None is returned), else an error; ``must_exist`` (REPLACE TABLE) refuses a missing one.
    """
    try:
        snap = DeltaLog.for_table(source_path).snapshot(version=version, timestamp=timestamp)
    except DeltaTableNotFoundError as e:
        raise DeltaTableNotFoundError(f"Cannot CLONE {source_path}: {e}") from None
    name = None if is_path(target) else target
    exclusive = not (replace_target or if_not_exists)
    location = target if name is None else catalog.table_location(name, None, exclusive=exclusive)
    log = DeltaLog.for_table(location)
    if log.table_path == snap.table_path:
        raise DeltaAnalysisException(f"Cannot CLONE table {snap.table_path} onto itself.")
    transaction.refuse("CLONE", log.table_path)
    txn = log.start_transaction()
    shown = name or log.table_path
    if txn.snapshot is not None and if_not_exists:
        return None
    if txn.snapshot is None and must_exist:
        raise DeltaTableNotFoundError(f"Cannot REPLACE table {shown}: there is no table at {log.table_path}.")
    if txn.snapshot is not None and not replace_target:
        raise DeltaAnalysisException(
            f"Cannot CLONE into {shown}: table {shown} already exists (at {log.table_path}). Pass replace=True "
            "(CREATE OR REPLACE TABLE ... CLONE) to replace it."
        )
    conf = {**snap.metadata.configuration, **props.validate_properties(dict(properties or {}), table=shown)}
    metadata = replace(snap.metadata, id=str(uuid.uuid4()), configuration=conf, created_time=now_ms())
    txn.update_metadata(metadata, replace_table=True, ignore_defaults=True)  # an exact copy: no session defaults
    txn.update_protocol(snap.protocol)
    if shallow:
        txn.allow_external_files()
    removed = txn.read_whole_table() if txn.snapshot is not None else []
    stamp = now_ms()
    files = snap.all_files
    if shallow:
        adds = [_shallow(snap.table_path, f) for f in files]
        copied: list[AddFile] = []
    else:
        adds = copied = _deep_copies(snap.table_path, log.table_path, files)
    domains = [d for d in snap.domain_metadata.values() if not d.removed]
    actions: list[Action] = [*(f.remove(timestamp=stamp) for f in removed), *adds, *domains]
    params = {"source": snap.table_path, "sourceVersion": str(snap.version), "isShallow": str(shallow).lower()}
    metrics = {
        "sourceTableSize": sum(f.size or 0 for f in files),
        "sourceNumOfFiles": len(files),
        "numRemovedFiles": len(removed),
        "removedFilesSize": sum(f.size or 0 for f in removed),
        "numCopiedFiles": len(copied),
        "copiedFilesSize": sum(f.size or 0 for f in copied),
    }
    # Only files this clone wrote may be deleted if the commit fails: never the source's.
    committed = commit_or_clean_up(
        txn, actions, "CLONE", params, metrics, new_files=copied, before_commit=before_commit
    )
    if name is not None:
        after_commit(
            "register the table name in the catalog", log.table_path, committed, catalog.register, name,
            log.table_path, operation="CLONE",
        )  # fmt: skip
    return log.table_path, committed


def _uri(path: str) -> str:
    """An absolute local path as a ``file:`` URI, or an S3 location as its ``s3://`` URI,
    URI-encoded as ``add.path`` is."""
    if is_remote(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://{quote(rest, safe='/')}"
    return "file:" + quote(path, safe="/")  # Hadoop's form, as delta-spark writes (and matches) them


def _shallow(source: str, f: AddFile) -> AddFile:
    """``f`` as the clone lists it: the source's file (and deletion vector) by absolute URI."""
    dv = f.deletion_vector
    if dv is not None and dv.storage_type == "u":
        located = dv_absolute_path(source, dv)
        assert located is not None
        dv = replace(dv, storage_type="p", path_or_inline_dv=_uri(located))
    return replace(f, path=_uri(absolute_path(source, f.path)), deletion_vector=dv, data_change=True)


def _deep_copies(source: str, target: str, files: list[AddFile]) -> list[AddFile]:
    """Copy each file (and its deletion vector file) under ``target``; the clone's adds."""
    with ThreadPoolExecutor(max(1, min(_COPY_THREADS, len(files)))) as pool:
        return list(pool.map(lambda f: _deep_copy(source, target, f), files))


def _deep_copy(source: str, target: str, f: AddFile) -> AddFile:
    src = absolute_path(source, f.path)
    relative = f.path
    if is_absolute_path(f.path):  # a shallow clone's file: copied under a new name
        relative = quote(f"cloned-{uuid.uuid4()}-{os.path.basename(src)}", safe="/")
    _copy(src, absolute_path(target, relative))
    dv = f.deletion_vector
    if dv is not None and dv.storage_type in ("u", "p"):
        dv = _copy_dv(source, target, dv)
    return replace(f, path=relative, deletion_vector=dv, data_change=True)


def _copy_dv(source: str, target: str, dv: DeletionVectorDescriptor) -> DeletionVectorDescriptor:
    src = dv_absolute_path(source, dv)
    assert src is not None
    if dv.storage_type == "u":
        # Same relative place under the clone: the descriptor stays valid as it is.
        dst = dv_absolute_path(target, dv)
        assert dst is not None
        _copy(src, dst)
        return dv
    dst = os.path.join(target, f"cloned_dv_{uuid.uuid4()}.bin")
    _copy(src, dst)
    return replace(dv, path_or_inline_dv=_uri(dst))


def _copy(src: str, dst: str) -> None:
    """Copy one file durably (written, fsynced, its directory fsynced; on S3 one new object)."""
    if is_remote(src) or is_remote(dst):
        Access().copy(src, dst)
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src, "rb") as r, open(dst, "xb") as w:
        shutil.copyfileobj(r, w, 1 << 20)
        w.flush()
        os.fsync(w.fileno())
    fd = os.open(os.path.dirname(dst), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
