"""Cleanup: delete the Iceberg files (old metadata, manifest lists, manifests) no retained metadata refers to."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from serialake.core.iceberg.manifests import read_manifest_list
from serialake.core.iceberg.metadata_files import _load_json, _version_of, metadata_dir

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog

__all__ = ["cleanup"]


def cleanup(log: DeltaLog, keep_after_ms: int, *, dry_run: bool = False) -> list[str]:
    """Delete Iceberg files no retained metadata refers to; returns their paths.

    Retained metadata: the newest ``v*.metadata.json`` and every one modified at or after
    ``keep_after_ms``; older metadata files are deleted. Manifest lists and manifests that no
    snapshot of a retained metadata file refers to are deleted when they were modified before
    ``keep_after_ms`` (a newer one may belong to a conversion still running). Pass a
    ``keep_after_ms`` well in the past (VACUUM's retention): a conversion that started from a
    metadata file before it was deleted could still refer to that file's manifests.
    """
    store = log.store
    directory = metadata_dir(log.table_path)
    listing = store.list_from(directory)
    versions = {v: st for st in listing if (v := _version_of(st.name)) is not None}
    if not versions:
        return []
    newest = max(versions)
    retained = [v for v, st in versions.items() if v == newest or st.modification_time >= keep_after_ms]
    doomed = [f"{directory}/{st.name}" for v, st in versions.items() if v not in retained]
    referenced: set[str] = set()
    lists_seen: set[str] = set()
    for v in retained:
        meta = _load_json(store, f"{directory}/v{v}.metadata.json") or {}
        for snap in meta.get("snapshots", []):
            manifest_list = snap.get("manifest-list")
            if not manifest_list or manifest_list in lists_seen:
                continue
            lists_seen.add(manifest_list)
            referenced.add(os.path.basename(manifest_list))
            try:
                records = read_manifest_list(store.read(manifest_list))
            except FileNotFoundError:
                continue
            referenced.update(os.path.basename(r["manifest_path"]) for r in records)
    for st in listing:
        if st.name.endswith(".avro") and st.name not in referenced and st.modification_time < keep_after_ms:
            doomed.append(f"{directory}/{st.name}")
    if not dry_run:
        for path in doomed:
            store.delete(path)
    return doomed
