"""Iceberg metadata for a Delta snapshot, written beside the Delta log (Delta UniForm, IcebergCompatV2).

Layout, under ``<table>/metadata/``:

- ``v<deltaVersion>.metadata.json``: the table metadata of one Delta version, created with the
  store's put-if-absent, so one writer wins each version and every reader sees a whole file;
- ``version-hint.text``: the newest converted Delta version, as text (Iceberg's file-system
  tables and ``StaticTable.from_metadata(<table>)`` start there);
- ``snap-<snapshotId>-<uuid>.avro``: manifest lists; ``<uuid>-m<N>.avro``: manifests. The uuid is
  new for each conversion, so two converters never write the same Avro file.

Identity: the Iceberg table uuid is the Delta table id (``metaData.id``; a uuid derived from it
when it is not one), and the snapshot of Delta version ``v`` has an id derived from the table
uuid and ``v`` and sequence number ``v + 1``: every writer agrees, whoever converts.

Incremental conversion: the newest earlier metadata (``v<k>``, ``k < version``) is the base when
the Delta commits ``k+1 .. version`` are still in the log, the partitioning is unchanged and no
column changed type. Its manifests that hold none of the files those commits add or remove are
kept as they are; a manifest holding one is rewritten, the file's entry becoming a DELETED entry
of the new snapshot (the spec's record of a removal, which Iceberg's incremental readers use;
the other entries become EXISTING, keeping their snapshot ids and sequence numbers); the files
the commits add go to new manifests as ADDED entries. Otherwise the conversion is full: every
live file is written anew. A commit range without file changes (properties, schema) makes no
new snapshot. Manifests hold at most ``MANIFEST_TARGET_ENTRIES`` entries; once a snapshot has more
than ``MANIFEST_MERGE_MIN_COUNT`` manifests, the smaller ones are merged.

Earlier snapshots are carried forward (Iceberg time travel) until they are older than the Delta
log retention (``delta.logRetentionDuration``), at most ``SNAPSHOTS_MAX`` of them; the current
snapshot is always kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from serialake.core.iceberg.errors import IcebergConversionError
from serialake.core.iceberg.manifests import (
    ADDED,
    DELETED,
    EXISTING,
    ManifestContext,
    list_entry,
    manifest_bytes,
    manifest_list_bytes,
    read_manifest,
    read_manifest_list,
)
from serialake.core.iceberg.schema import (
    IcebergSchema,
    PartitionField,
    convert_schema,
    partition_fields,
    primitive_types,
)
from serialake.core.iceberg.values import (
    avro_value,
    from_avro_value,
    from_single_value,
    internal_partition_value,
    lower_bound,
    single_value,
    sort_key,
    upper_bound,
)
from serialake.core.model import properties as props
from serialake.core.model.actions import AddFile, RemoveFile
from serialake.core.model.paths import absolute_path
from serialake.exceptions import FileAlreadyExistsError

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog
    from serialake.core.log.snapshot import Snapshot
    from serialake.storage.base import LogStore

__all__ = [
    "MANIFEST_MERGE_MIN_COUNT",
    "MANIFEST_TARGET_ENTRIES",
    "METADATA_DIR",
    "SNAPSHOTS_MAX",
    "VERSION_HINT",
    "cleanup",
    "clear_manifest_cache",
    "convert",
    "metadata_dir",
    "metadata_path",
    "read_version_hint",
    "snapshot_id_for",
    "table_uuid",
]

logger = logging.getLogger("serialake")

METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
#: Entries a manifest holds at most; a removal rewrites one manifest of at most this many.
MANIFEST_TARGET_ENTRIES = 10_000
#: Manifests a snapshot may have before its smaller ones are merged.
MANIFEST_MERGE_MIN_COUNT = 100
#: Earlier metadata files named in ``metadata-log`` (within the log retention).
METADATA_LOG_MAX = 100
#: Snapshots a metadata file keeps at most (the newest), whatever the retention: every conversion
#: rewrites the list, so a table committing every second for 30 days must not carry 2.6 million.
SNAPSHOTS_MAX = 1_000
#: Versions probed by name after the version hint before listing the metadata directory.
_PROBE_LIMIT = 8
_FORMAT_VERSION = 2


def metadata_dir(table_path: str) -> str:
    """``<table>/metadata``."""
    return f"{table_path.rstrip('/')}/{METADATA_DIR}"


def metadata_path(table_path: str, version: int) -> str:
    """``<table>/metadata/v<version>.metadata.json``."""
    return f"{metadata_dir(table_path)}/v{version}.metadata.json"


def table_uuid(delta_table_id: str) -> str:
    """The Iceberg table uuid of a Delta table: its id when that is a uuid, else a uuid derived from it."""
    try:
        return str(uuid.UUID(delta_table_id))
    except (ValueError, TypeError, AttributeError):
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"delta-table-id:{delta_table_id}"))


def snapshot_id_for(iceberg_uuid: str, version: int) -> int:
    """The Iceberg snapshot id of Delta version ``version``: positive, 63 bits, the same for every writer."""
    digest = hashlib.sha256(f"{iceberg_uuid}:{version}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)) or 1


def _version_of(name: str) -> int | None:
    """``v12.metadata.json`` -> 12."""
    if name.startswith("v") and name.endswith(".metadata.json"):
        digits = name[1 : -len(".metadata.json")]
        if digits.isdigit():
            return int(digits)
    return None


def read_version_hint(log: DeltaLog) -> int | None:
    """The version in ``metadata/version-hint.text``, or None (absent or unreadable)."""
    return _read_hint(log.store, metadata_dir(log.table_path))


def _read_hint(store: LogStore, directory: str) -> int | None:
    try:
        text = store.read(f"{directory}/{VERSION_HINT}").decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _listed_versions(store: LogStore, directory: str) -> list[int]:
    """Versions of the metadata files in the directory (``v*`` names sort after manifests and lists)."""
    found = (_version_of(st.name) for st in store.list_from(directory, "v"))
    return sorted(v for v in found if v is not None)


def _load_json(store: LogStore, path: str) -> dict[str, Any] | None:
    try:
        data = store.read(path)
    except FileNotFoundError:
        return None
    value = json.loads(data)
    return value if isinstance(value, dict) else None


def _previous(store: LogStore, directory: str, version: int) -> tuple[str, dict[str, Any]] | None:
    """The newest metadata of a version before ``version``: the hint, then names after it, else a listing."""
    hint = _read_hint(store, directory)
    if hint is not None and hint < version and version - 1 - hint <= _PROBE_LIMIT:
        for k in range(version - 1, hint - 1, -1):
            path = f"{directory}/v{k}.metadata.json"
            found = _load_json(store, path)
            if found is not None:
                return path, found
    for k in reversed([v for v in _listed_versions(store, directory) if v < version]):
        path = f"{directory}/v{k}.metadata.json"
        found = _load_json(store, path)
        if found is not None:
            return path, found
    return None


def _advance_hint(store: LogStore, directory: str, version: int) -> None:
    """Move ``version-hint.text`` forward to ``version`` (never back).

    The hint is a plain overwrite, not a compare-and-swap: two converters can interleave so that
    the older version lands last. So each writer reads the hint back after writing and raises
    it again to the newest metadata file listed; the last writer to finish leaves the newest.
    """
    path = f"{directory}/{VERSION_HINT}"
    want = version
    for _ in range(3):
        current = _read_hint(store, directory)
        if current is not None and current >= want:
            return
        store.write(path, str(want).encode())
        newest = max(_listed_versions(store, directory), default=want)
        current = _read_hint(store, directory)
        want = max(want, newest)
        if current is not None and current >= want:
            return


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


# -- the conversion ---------------------------------------------------------------------------


def convert(log: DeltaLog, snapshot: Snapshot) -> str:
    """Write the Iceberg metadata of ``snapshot`` (a snapshot of ``log``'s table); returns its path.

    When ``v<version>.metadata.json`` exists already (another writer converted this version),
    that file is the result. ``IcebergConversionError`` says what in the table prevents the
    conversion (column mapping ids, statistics, deletion vectors); storage errors are the
    store's ``OSError``. All I/O goes through ``log.store``.
    """
    return _Conversion(log, snapshot).run()


class _Conversion:
    def __init__(self, delta_log: DeltaLog, snapshot: Snapshot) -> None:
        self.log = delta_log
        self.snap = snapshot
        self.table = delta_log.table_path
        self.version = snapshot.version
        self.store = delta_log.store
        self.dir = metadata_dir(self.table)
        self.uuid = table_uuid(snapshot.metadata.id)
        self.token = uuid.uuid4().hex
        self.written: list[str] = []
        self.entries_written: dict[str, list[dict[str, Any]]] = {}
        self.entries_read: dict[str, list[dict[str, Any]]] = {}  # read to find the touched ones; used once more
        self.manifests_made = 0

    def fail(self, reason: str, **kwargs: Any) -> IcebergConversionError:
        return IcebergConversionError(reason, table=self.table, version=self.version, **kwargs)

    # -- top level ----------------------------------------------------------------------------
    def run(self) -> str:
        target = metadata_path(self.table, self.version)
        existing = _load_json(self.store, target)
        if existing is not None:
            self._check_same_table(existing, target)
            _advance_hint(self.store, self.dir, self.version)
            return target
        schema = convert_schema(self.snap.schema, table=self.table, version=self.version)
        previous = _previous(self.store, self.dir, self.version)
        if previous is not None:
            self._check_same_table(previous[1], previous[0])
        hint = _read_hint(self.store, self.dir)
        if hint is not None and hint >= self.version:  # a newer version converted, or another table's leftovers
            newer = f"{self.dir}/v{hint}.metadata.json"
            self._check_same_table(_load_json(self.store, newer) or {"table-uuid": self.uuid}, newer)
        body = self._metadata(schema, previous)
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        try:
            self.store.put_if_absent(target, data)
        except FileAlreadyExistsError:
            self._discard_written()  # another converter won this version; our files are referenced by nothing
            existing = _load_json(self.store, target)
            if existing is not None:
                self._check_same_table(existing, target)
        _advance_hint(self.store, self.dir, self.version)
        return target

    def _check_same_table(self, existing: Mapping[str, Any], path: str) -> None:
        if existing.get("table-uuid") != self.uuid:
            raise self.fail(
                f"{path} belongs to another table (table-uuid {existing.get('table-uuid')}; this Delta table's "
                f"id gives {self.uuid})",
                file=path,
                help=f"The metadata directory is left over from a table deleted or replaced at this path: "
                f"remove {self.dir} and convert again.",
            )

    def _discard_written(self) -> None:
        for path in self.written:
            try:
                self.store.delete(path)
            except OSError as e:
                logger.debug("could not delete unreferenced Iceberg file %s: %s", path, e)

    def _put(self, name: str, data: bytes) -> str:
        path = f"{self.dir}/{name}"
        self.store.put_if_absent(path, data)
        self.written.append(path)
        return path

    # -- table metadata -----------------------------------------------------------------------
    def _metadata(self, schema: IcebergSchema, previous: tuple[str, dict[str, Any]] | None) -> dict[str, Any]:
        prev_path, prev = previous if previous is not None else (None, None)
        schemas: list[dict[str, Any]] = list(prev.get("schemas", [])) if prev else []
        schema_id = self._schema_id(schemas, schema)
        specs: list[dict[str, Any]] = list(prev.get("partition-specs", [])) if prev else []
        last_partition_id = int(prev.get("last-partition-id", 999)) if prev else 999
        fields, last_partition_id = partition_fields(
            schema, self.snap.partition_columns, specs, last_partition_id, table=self.table, version=self.version
        )
        spec_id = self._spec_id(specs, fields)
        schema_json = json.dumps(next(s for s in schemas if s["schema-id"] == schema_id), separators=(",", ":"))
        stamp = max(int(self.snap.timestamp), int(prev.get("last-updated-ms", 0)) if prev else 0)

        snapshots: list[dict[str, Any]] = list(prev.get("snapshots", [])) if prev else []
        parent = None
        if prev is not None and prev.get("current-snapshot-id") is not None:
            parent = next((s for s in snapshots if s.get("snapshot-id") == prev["current-snapshot-id"]), None)
        prev_version = _delta_version(prev) if prev else None
        changes = self._changes(prev_version) if prev_version is not None else None

        snapshot_id = snapshot_id_for(self.uuid, self.version)
        sequence = self.version + 1
        ctx = ManifestContext(schema_json, schema_id, spec_id, tuple(fields), snapshot_id, sequence)
        new_snapshot: dict[str, Any] | None = None
        reusable = (
            prev is not None and parent is not None and changes is not None
            and self._same_files_layout(prev, schema, spec_id)
        )
        current: dict[str, Any]
        if reusable and parent is not None and changes is not None and changes.empty:
            current = parent  # commits without file changes (properties, schema): no new snapshot
        else:
            planned = None
            if reusable and parent is not None and changes is not None:
                planned = self._incremental(ctx, schema, parent, changes)
            if planned is None:
                planned = self._full(ctx, schema, parent)
            records, counts = planned
            operation = changes.operation() if changes is not None else ("overwrite" if parent else "append")
            new_snapshot = self._write_snapshot(ctx, parent, records, counts, operation, stamp)
            snapshots = [s for s in snapshots if s.get("snapshot-id") != snapshot_id] + [new_snapshot]
            current = new_snapshot

        retention = props.get(self.snap.configuration, props.LOG_RETENTION)
        cutoff = stamp - int(retention)
        current_id = current["snapshot-id"]
        kept = [s for s in snapshots if s.get("snapshot-id") == current_id or int(s.get("timestamp-ms", 0)) >= cutoff]
        if len(kept) > SNAPSHOTS_MAX:
            newest = sorted(kept, key=lambda s: int(s.get("sequence-number", 0)))[-SNAPSHOTS_MAX:]
            keep = {s.get("snapshot-id") for s in newest} | {current_id}
            kept = [s for s in kept if s.get("snapshot-id") in keep]
        kept_ids = {s["snapshot-id"] for s in kept}
        snapshot_log = list(prev.get("snapshot-log", [])) if prev else []
        expired_at = max((i for i, e in enumerate(snapshot_log) if e.get("snapshot-id") not in kept_ids), default=-1)
        snapshot_log = snapshot_log[expired_at + 1 :]
        if new_snapshot is not None:
            snapshot_log.append({"timestamp-ms": new_snapshot["timestamp-ms"], "snapshot-id": current_id})
        metadata_log = list(prev.get("metadata-log", [])) if prev else []
        if prev is not None and prev_path is not None:
            metadata_log.append({"timestamp-ms": int(prev.get("last-updated-ms", stamp)), "metadata-file": prev_path})
        metadata_log = [e for e in metadata_log if int(e.get("timestamp-ms", 0)) >= cutoff][-METADATA_LOG_MAX:]

        last_column_id = max([schema.max_id, int(prev.get("last-column-id", 0)) if prev else 0])
        last_sequence = max(sequence if new_snapshot is not None else 0, int(prev.get("last-sequence-number", 0))
                            if prev else 0)  # fmt: skip
        return {
            "format-version": _FORMAT_VERSION,
            "table-uuid": self.uuid,
            "location": self.table,
            "last-sequence-number": last_sequence,
            "last-updated-ms": stamp,
            "last-column-id": last_column_id,
            "current-schema-id": schema_id,
            "schemas": schemas,
            "default-spec-id": spec_id,
            "partition-specs": specs,
            "last-partition-id": last_partition_id,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {
                "format-version": str(_FORMAT_VERSION),
                "delta-version": str(self.version),
                "delta-timestamp": str(int(self.snap.timestamp)),
                "delta-table-id": str(self.snap.metadata.id),
                "schema.name-mapping.default": schema.name_mapping,
            },
            "current-snapshot-id": current_id,
            "refs": {"main": {"snapshot-id": current_id, "type": "branch"}},
            "snapshots": kept,
            "snapshot-log": snapshot_log,
            "metadata-log": metadata_log,
            "statistics": [],
            "partition-statistics": [],
        }

    @staticmethod
    def _schema_id(schemas: list[dict[str, Any]], schema: IcebergSchema) -> int:
        """The id of an equal earlier schema, else of ``schema`` appended with the next id."""
        for s in schemas:
            if s.get("fields") == schema.struct["fields"]:
                return int(s["schema-id"])
        schema_id = max((int(s["schema-id"]) for s in schemas), default=-1) + 1
        schemas.append({"type": "struct", "schema-id": schema_id, "fields": schema.struct["fields"]})
        return schema_id

    @staticmethod
    def _spec_id(specs: list[dict[str, Any]], fields: Sequence[PartitionField]) -> int:
        wanted = [{"name": f.name, "transform": "identity", "source-id": f.source_id, "field-id": f.field_id}
                  for f in fields]  # fmt: skip
        for s in specs:
            if s.get("fields") == wanted:
                return int(s["spec-id"])
        spec_id = max((int(s["spec-id"]) for s in specs), default=-1) + 1
        specs.append({"spec-id": spec_id, "fields": wanted})
        return spec_id

    def _same_files_layout(self, prev: Mapping[str, Any], schema: IcebergSchema, spec_id: int) -> bool:
        """Whether the earlier manifests still describe files correctly: same spec, no column changed type."""
        if int(prev.get("default-spec-id", -1)) != spec_id:
            return False
        old = next((s for s in prev.get("schemas", []) if s.get("schema-id") == prev.get("current-schema-id")), None)
        if old is None:
            return False
        before, after = primitive_types(old), primitive_types(schema.struct)
        return all(before[i] == t for i, t in after.items() if i in before)

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

    # -- snapshots ----------------------------------------------------------------------------
    def _write_snapshot(
        self,
        ctx: ManifestContext,
        parent: Mapping[str, Any] | None,
        records: list[dict[str, Any]],
        counts: dict[str, int],
        operation: str,
        stamp: int,
    ) -> dict[str, Any]:
        parent_id = parent["snapshot-id"] if parent is not None else None
        data = manifest_list_bytes(
            records, snapshot_id=ctx.snapshot_id, parent_id=parent_id, sequence_number=ctx.sequence_number
        )
        manifest_list = self._put(f"snap-{ctx.snapshot_id}-{self.token}.avro", data)
        total_files = sum(_live(r) for r in records)
        total_records = sum(int(r["added_rows_count"]) + int(r["existing_rows_count"]) for r in records)
        summary = {
            "operation": operation,
            "added-data-files": str(counts["added_files"]),
            "deleted-data-files": str(counts["deleted_files"]),
            "added-records": str(counts["added_records"]),
            "deleted-records": str(counts["deleted_records"]),
            "added-files-size": str(counts["added_size"]),
            "removed-files-size": str(counts["removed_size"]),
            "total-data-files": str(total_files),
            "total-records": str(total_records),
            "total-delete-files": "0",
            "total-position-deletes": "0",
            "total-equality-deletes": "0",
            "delta-version": str(self.version),
        }
        if "total_size" in counts:
            summary["total-files-size"] = str(counts["total_size"])
        elif parent is not None and str(parent.get("summary", {}).get("total-files-size", "")).isdigit():
            total = int(parent["summary"]["total-files-size"]) + counts["added_size"] - counts["removed_size"]
            summary["total-files-size"] = str(total)
        snapshot: dict[str, Any] = {
            "snapshot-id": ctx.snapshot_id,
            "sequence-number": ctx.sequence_number,
            "timestamp-ms": stamp,
            "manifest-list": manifest_list,
            "summary": summary,
            "schema-id": ctx.schema_id,
        }
        if parent_id is not None:
            snapshot["parent-snapshot-id"] = parent_id
        return snapshot

    def _full(
        self, ctx: ManifestContext, schema: IcebergSchema, parent: Mapping[str, Any] | None
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Every live file as an ADDED entry of new manifests."""
        entries = [self._entry(ctx, schema, add, ADDED) for add in self.snap.all_files]
        records = self._write_entries(ctx, entries)
        size = sum(e["data_file"]["file_size_in_bytes"] for e in entries)
        counts = {
            "added_files": len(entries),
            "added_records": sum(e["data_file"]["record_count"] for e in entries),
            "added_size": size,
            "deleted_files": 0,
            "deleted_records": 0,
            "removed_size": 0,
            "total_size": size,
        }
        if parent is not None:  # the new snapshot replaces all the parent's files
            summary = parent.get("summary", {})
            for key, name in (("deleted_files", "total-data-files"), ("deleted_records", "total-records"),
                              ("removed_size", "total-files-size")):  # fmt: skip
                value = str(summary.get(name, ""))
                counts[key] = int(value) if value.isdigit() else 0
        return records, counts

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

    # -- one data file ------------------------------------------------------------------------
    def _entry(self, ctx: ManifestContext, schema: IcebergSchema, add: AddFile, status: int) -> dict[str, Any]:
        """The manifest entry of a live Delta file (IcebergCompatV2's checks on it included)."""
        if add.deletion_vector is not None:
            raise self.fail(
                "the data file has a deletion vector, which Iceberg (IcebergCompatV2) cannot represent",
                file=add.path,
                help="Disable deletion vectors (delta.enableDeletionVectors = false) and purge them "
                "(REORG TABLE ... APPLY (PURGE)), then convert again.",
            )
        stats = _parse_stats(add.stats)
        records = stats.get("numRecords") if stats is not None else None
        if isinstance(records, Decimal) and records == records.to_integral_value():
            records = int(records)
        if not isinstance(records, int) or isinstance(records, bool) or records < 0:
            raise self.fail(
                "the data file has no record count (stats.numRecords), which an Iceberg manifest requires",
                file=add.path,
                help="Recompute the file's statistics (rewrite it, e.g. with OPTIMIZE or by rewriting the "
                "partition), then convert again.",
            )
        if add.size is None:
            raise self.fail("the data file has no size (add.size)", file=add.path)
        pv = add.partition_values or {}
        partition: dict[str, Any] = {}
        by_source: dict[int, Any] = {}
        for f in ctx.spec_fields:
            raw = pv[f.physical] if f.physical in pv else pv.get(f.name)
            try:
                value = internal_partition_value(raw, f.delta_type, f.iceberg_type)
            except ValueError as e:
                raise self.fail(f"partition column '{f.name}': {e}", file=add.path, column=f.name) from None
            by_source[f.source_id] = value
            partition[ctx.partition_key(f.name)] = avro_value(f.iceberg_type, value)
        value_counts: list[dict[str, int]] = []
        null_counts: list[dict[str, int]] = []
        lowers: list[dict[str, Any]] = []
        uppers: list[dict[str, Any]] = []
        mins = stats.get("minValues") if stats is not None else None
        maxs = stats.get("maxValues") if stats is not None else None
        nulls = stats.get("nullCount") if stats is not None else None
        for leaf in schema.leaves:
            fid = leaf.field_id
            if fid in by_source:  # a partition column: every row holds the partition value
                value = by_source[fid]
                value_counts.append({"key": fid, "value": records})
                null_counts.append({"key": fid, "value": records if value is None else 0})
                if value is not None and leaf.iceberg_type not in ("float", "double"):
                    encoded = single_value(leaf.iceberg_type, value)
                    lowers.append({"key": fid, "value": encoded})
                    uppers.append({"key": fid, "value": encoded})
                continue
            n = _lookup(nulls, leaf.physical)
            if isinstance(n, Decimal) and n == n.to_integral_value():
                n = int(n)
            if isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= records:
                value_counts.append({"key": fid, "value": records})
                null_counts.append({"key": fid, "value": n})
                if n == records:
                    continue  # only nulls: no bounds
            lo = lower_bound(leaf.delta_type, leaf.iceberg_type, _lookup(mins, leaf.physical))
            hi = upper_bound(leaf.delta_type, leaf.iceberg_type, _lookup(maxs, leaf.physical))
            if lo is not None:
                lowers.append({"key": fid, "value": single_value(leaf.iceberg_type, lo)})
            if hi is not None:
                uppers.append({"key": fid, "value": single_value(leaf.iceberg_type, hi)})
        return {
            "status": status,
            "snapshot_id": ctx.snapshot_id,
            "sequence_number": ctx.sequence_number,
            "file_sequence_number": ctx.sequence_number,
            "data_file": {
                "content": 0,
                "file_path": absolute_path(self.table, add.path),
                "file_format": "PARQUET",
                "partition": partition,
                "record_count": records,
                "file_size_in_bytes": int(add.size),
                "column_sizes": None,
                "value_counts": value_counts or None,
                "null_value_counts": null_counts or None,
                "nan_value_counts": None,
                "lower_bounds": lowers or None,
                "upper_bounds": uppers or None,
                "key_metadata": None,
                "split_offsets": None,
                "equality_ids": None,
                "sort_order_id": None,
            },
        }


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


def _parse_stats(text: str | None) -> dict[str, Any] | None:
    """Delta stats JSON with exact decimals (a float would round a decimal bound)."""
    if not text:
        return None
    try:
        value = json.loads(text, parse_float=Decimal)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _lookup(tree: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(name)
    return tree


def _delta_version(metadata: Mapping[str, Any]) -> int | None:
    value = str(metadata.get("properties", {}).get("delta-version", ""))
    return int(value) if value.isdigit() else None


# -- cleanup ----------------------------------------------------------------------------------


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
