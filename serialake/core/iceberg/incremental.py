"""Incremental conversion: the earlier snapshot's manifests reused, with the commits since applied.

The newest earlier metadata (``v<k>``, ``k < version``) is the base when the Delta commits
``k+1 .. version`` are still in the log (``_Changes``), the partitioning is unchanged and no
column changed type. Its manifests that hold none of the files those commits add or remove are
kept as they are (told by the data-file paths of manifests this process has seen, else by
their partition summaries, else by reading them); a manifest holding one is rewritten, the
file's entry becoming a DELETED entry of the new snapshot (the spec's record of a removal,
which Iceberg's incremental readers use; the other entries become EXISTING, keeping their
snapshot ids and sequence numbers); the files the commits add go to new manifests as ADDED
entries. Otherwise the conversion is full (``conversion``): every live file is written anew.
A commit range without file changes (properties, schema) makes no new snapshot. Manifests hold
at most ``MANIFEST_TARGET_ENTRIES`` entries; once a snapshot has more than
``MANIFEST_MERGE_MIN_COUNT`` manifests, the smaller ones are merged.

``_Incremental`` holds the manifest reading and writing of a conversion (``conversion._Conversion``
is one).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serialake.core.iceberg.manifests import (
    ADDED,
    DELETED,
    EXISTING,
    ManifestContext,
    list_entry,
    manifest_bytes,
    read_manifest,
    read_manifest_list,
)
from serialake.core.iceberg.schema import IcebergSchema
from serialake.core.iceberg.values import from_avro_value, from_single_value, internal_partition_value, sort_key
from serialake.core.model.actions import AddFile, RemoveFile
from serialake.core.model.paths import absolute_path

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog
    from serialake.core.log.snapshot import Snapshot
    from serialake.storage.base import LogStore

__all__ = ["MANIFEST_MERGE_MIN_COUNT", "MANIFEST_TARGET_ENTRIES", "clear_manifest_cache"]

logger = logging.getLogger("serialake")

#: Entries a manifest holds at most; a removal rewrites one manifest of at most this many.
MANIFEST_TARGET_ENTRIES = 10_000
#: Manifests a snapshot may have before its smaller ones are merged.
MANIFEST_MERGE_MIN_COUNT = 100


# -- manifests read ---------------------------------------------------------------------------

#: Live data-file paths of manifests seen (written or read) by this process, to tell without
#: reading a manifest whether a commit touched it. Manifests never change under their names.
_PATHS: OrderedDict[str, frozenset[str]] = OrderedDict()
_PATHS_LOCK = threading.Lock()
_PATHS_MAX = 2_000_000  # paths held at most (about 200 MB)
_paths_held = 0


def clear_manifest_cache() -> None:
    """Forget the data-file paths of the manifests this process has seen (memory; tests)."""
    global _paths_held
    with _PATHS_LOCK:
        _PATHS.clear()
        _paths_held = 0


def _remember_paths(manifest: str, entries: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    global _paths_held
    paths = frozenset(e["data_file"]["file_path"] for e in entries if e["status"] != DELETED)
    with _PATHS_LOCK:
        if manifest not in _PATHS:
            _PATHS[manifest] = paths
            _paths_held += len(paths)
            while _paths_held > _PATHS_MAX and _PATHS:
                _, dropped = _PATHS.popitem(last=False)
                _paths_held -= len(dropped)
    return paths


def _known_paths(manifest: str) -> frozenset[str] | None:
    with _PATHS_LOCK:
        paths = _PATHS.get(manifest)
        if paths is not None:
            _PATHS.move_to_end(manifest)
        return paths


def _live(record: Mapping[str, Any]) -> int:
    return int(record["added_files_count"]) + int(record["existing_files_count"])


# -- Delta changes ----------------------------------------------------------------------------


@dataclass
class _Changes:
    """The net file changes of commits ``k+1 .. version``, by absolute path."""

    adds: dict[str, AddFile] = field(default_factory=dict)  # live at the end
    removed: set[str] = field(default_factory=set)  # gone at the end
    partitions: list[dict[str, str | None] | None] = field(default_factory=list)  # of every add and remove
    any_add: bool = False
    any_remove: bool = False
    data_change: bool = False

    @property
    def touched(self) -> set[str]:
        return set(self.adds) | self.removed

    @property
    def empty(self) -> bool:
        return not self.any_add and not self.any_remove

    def operation(self) -> str:
        """Iceberg's operation: replace (no data change: compaction, stats), append (only adds), delete
        (only removes), else overwrite."""
        if self.empty or not self.data_change:
            return "replace"
        if not self.any_remove:
            return "append"
        if not self.any_add:
            return "delete"
        return "overwrite"



class _Incremental:
    """The manifests of a conversion: the commits' changes, the parent's manifests reused, written, merged."""

    log: DeltaLog
    snap: Snapshot
    table: str
    version: int
    store: LogStore
    token: str
    entries_written: dict[str, list[dict[str, Any]]]
    entries_read: dict[str, list[dict[str, Any]]]
    manifests_made: int

    def _put(self, name: str, data: bytes) -> str:
        raise NotImplementedError

    def _entry(self, ctx: ManifestContext, schema: IcebergSchema, add: AddFile, status: int) -> dict[str, Any]:
        raise NotImplementedError

    def _changes(self, prev_version: int) -> _Changes | None:
        """The file changes of commits ``prev_version+1 .. version``; None when one is no longer in the log."""
        out = _Changes()
        for v in range(prev_version + 1, self.version + 1):
            try:
                entry = self.log.read_commit(v)
            except FileNotFoundError:
                return None
            for a in entry.actions:
                if type(a) is AddFile:
                    path = absolute_path(self.table, a.path)
                    out.adds[path] = a
                    out.partitions.append(a.partition_values)
                    out.removed.discard(path)
                    out.any_add = True
                    out.data_change |= a.data_change
                elif type(a) is RemoveFile:
                    path = absolute_path(self.table, a.path)
                    out.adds.pop(path, None)
                    out.removed.add(path)
                    out.partitions.append(a.partition_values)
                    out.any_remove = True
                    out.data_change |= a.data_change
        return out

    def _incremental(
        self, ctx: ManifestContext, schema: IcebergSchema, parent: Mapping[str, Any], changes: _Changes
    ) -> tuple[list[dict[str, Any]], dict[str, int]] | None:
        """The parent's manifests with the changes applied; None when they cannot be reused."""
        try:
            records = read_manifest_list(self.store.read(parent["manifest-list"]))
        except FileNotFoundError:
            return None
        if any(int(r["partition_spec_id"]) != ctx.spec_id or int(r.get("content", 0)) != 0 for r in records):
            return None
        touched = changes.touched
        live_before = sum(_live(r) for r in records)
        expected = self.snap.num_files
        out: list[dict[str, Any]] = []
        counts = dict.fromkeys(("added_files", "added_records", "added_size", "deleted_files",
                                "deleted_records", "removed_size"), 0)  # fmt: skip
        pure_append = not changes.removed and live_before + len(changes.adds) == expected
        touched_partitions = None if pure_append else self._partition_tuples(ctx, changes)
        for r in records:
            if _live(r) == 0:
                continue  # only entries deleted by an earlier snapshot: no longer needed
            if pure_append:
                out.append(r)
                continue
            paths = _known_paths(r["manifest_path"])
            if paths is None:
                if touched_partitions is not None and not _may_hold(ctx, r, touched_partitions):
                    out.append(r)  # its partition summaries exclude every touched file: not read
                    continue
                entries = self._read_entries(r["manifest_path"])
                self.entries_read[r["manifest_path"]] = entries
                paths = _remember_paths(r["manifest_path"], entries)
            if paths.isdisjoint(touched):
                out.append(r)
                continue
            rewritten: list[dict[str, Any]] = []
            for e in self._read_entries(r["manifest_path"]):
                if e["status"] == DELETED:
                    continue
                seq = e.get("sequence_number")
                file_seq = e.get("file_sequence_number")
                if e["status"] == ADDED:  # inherited numbers made explicit before the entry moves
                    seq = seq if seq is not None else r["sequence_number"]
                    file_seq = file_seq if file_seq is not None else r["sequence_number"]
                    snapshot = e.get("snapshot_id") if e.get("snapshot_id") is not None else r["added_snapshot_id"]
                else:
                    snapshot = e.get("snapshot_id")
                df = e["data_file"]
                if df["file_path"] in touched:
                    rewritten.append({**e, "status": DELETED, "snapshot_id": ctx.snapshot_id,
                                      "sequence_number": seq, "file_sequence_number": file_seq})  # fmt: skip
                    counts["deleted_files"] += 1
                    counts["deleted_records"] += df["record_count"]
                    counts["removed_size"] += df["file_size_in_bytes"]
                else:
                    rewritten.append({**e, "status": EXISTING, "snapshot_id": snapshot,
                                      "sequence_number": seq, "file_sequence_number": file_seq})  # fmt: skip
            out.extend(self._write_entries(ctx, rewritten, sort=False))
        added = [self._entry(ctx, schema, add, ADDED) for add in changes.adds.values()]
        counts["added_files"] = len(added)
        counts["added_records"] = sum(e["data_file"]["record_count"] for e in added)
        counts["added_size"] = sum(e["data_file"]["file_size_in_bytes"] for e in added)
        out = self._write_entries(ctx, added) + out
        if len(out) > MANIFEST_MERGE_MIN_COUNT:
            out = self._merge_small(ctx, out)
        total = sum(_live(r) for r in out)
        if total != expected:
            logger.warning(
                "Iceberg conversion of %s at version %d: the earlier manifests list %d file(s) after the changes "
                "but the Delta snapshot has %d; converting in full", self.table, self.version, total, expected,
            )
            return None
        return out, counts

    def _partition_tuples(self, ctx: ManifestContext, changes: _Changes) -> set[tuple[Any, ...]] | None:
        """The partition values (internal, in spec order) of the touched files; None when one is unknown."""
        if not ctx.spec_fields:
            return None
        out = set()
        for pv in changes.partitions:
            if pv is None:
                return None
            values = []
            for f in ctx.spec_fields:
                if f.physical not in pv and f.name not in pv:
                    return None
                raw = pv[f.physical] if f.physical in pv else pv[f.name]
                try:
                    values.append(internal_partition_value(raw, f.delta_type, f.iceberg_type))
                except ValueError:
                    return None
            out.add(tuple(values))
        return out

    def _merge_small(self, ctx: ManifestContext, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Merge the manifests with fewer than ``MANIFEST_TARGET_ENTRIES`` live entries into fuller ones."""
        small = [r for r in records if _live(r) < MANIFEST_TARGET_ENTRIES]
        if len(small) < 2:
            return records
        entries: list[dict[str, Any]] = []
        for r in small:
            for e in self._read_entries(r["manifest_path"]):
                status = e["status"]
                if status == DELETED and e.get("snapshot_id") != ctx.snapshot_id:
                    continue  # deleted by an earlier snapshot
                if status == ADDED and e.get("snapshot_id") != ctx.snapshot_id:
                    seq = e.get("sequence_number")
                    seq = seq if seq is not None else r["sequence_number"]
                    file_seq = e.get("file_sequence_number")
                    file_seq = file_seq if file_seq is not None else r["sequence_number"]
                    snapshot = e.get("snapshot_id") if e.get("snapshot_id") is not None else r["added_snapshot_id"]
                    e = {**e, "status": EXISTING, "snapshot_id": snapshot, "sequence_number": seq,
                         "file_sequence_number": file_seq}  # fmt: skip
                entries.append(e)
        merged = self._write_entries(ctx, entries, sort=False)
        names = {r["manifest_path"] for r in small}
        return [r for r in records if r["manifest_path"] not in names] + merged

    def _read_entries(self, path: str) -> list[dict[str, Any]]:
        known = self.entries_written.get(path) or self.entries_read.pop(path, None)
        if known is not None:
            return known
        return read_manifest(self.store.read(path))

    def _write_entries(
        self, ctx: ManifestContext, entries: list[dict[str, Any]], *, sort: bool = True
    ) -> list[dict[str, Any]]:
        """Write ``entries`` as manifests of at most ``MANIFEST_TARGET_ENTRIES``; their manifest-list records."""
        if sort:  # by partition, then path: tighter partition summaries prune more manifests
            keys = [(ctx.partition_key(f.name), f.iceberg_type) for f in ctx.spec_fields]

            def order(e: Mapping[str, Any]) -> tuple[Any, ...]:
                part = e["data_file"]["partition"]
                return (*(_null_first(from_avro_value(t, part.get(k))) for k, t in keys), e["data_file"]["file_path"])

            entries.sort(key=order)
        out = []
        for start in range(0, len(entries), MANIFEST_TARGET_ENTRIES):
            chunk = entries[start : start + MANIFEST_TARGET_ENTRIES]
            data = manifest_bytes(ctx, chunk)
            self.manifests_made += 1
            path = self._put(f"{self.token}-m{self.manifests_made - 1}.avro", data)
            self.entries_written[path] = chunk
            _remember_paths(path, chunk)
            out.append(list_entry(ctx, path, len(data), chunk))
        return out


def _may_hold(ctx: ManifestContext, record: Mapping[str, Any], partitions: set[tuple[Any, ...]]) -> bool:
    """Whether a manifest's partition summaries admit one of these partition tuples (True when unsure).

    The summaries are this module's (the metadata's table uuid was checked): bounds are written
    whenever a non-null value exists, so a summary without bounds holds nulls only.
    """
    summaries = record.get("partitions")
    if not summaries or len(summaries) != len(ctx.spec_fields):
        return True
    ranges: list[tuple[bool, Any, Any] | None] = []
    for f, s in zip(ctx.spec_fields, summaries):
        if f.iceberg_type in ("float", "double"):
            ranges.append(None)  # NaN and -0.0: not worth the care here
            continue
        low = from_single_value(f.iceberg_type, s["lower_bound"]) if s.get("lower_bound") is not None else None
        high = from_single_value(f.iceberg_type, s["upper_bound"]) if s.get("upper_bound") is not None else None
        ranges.append((bool(s.get("contains_null", True)), low, high))

    def fits(values: tuple[Any, ...]) -> bool:
        for r, v in zip(ranges, values):
            if r is None:
                continue
            has_null, low, high = r
            if v is None:
                if not has_null:
                    return False
            elif low is None and high is None:  # our summaries bound every non-null value: only nulls here
                return False
            elif (low is not None and v < low) or (high is not None and v > high):
                return False
        return True

    return any(fits(values) for values in partitions)


def _null_first(value: Any) -> tuple[bool, Any]:
    return (False, 0) if value is None else (True, sort_key(value))
