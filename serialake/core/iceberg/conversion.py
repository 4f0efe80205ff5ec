"""Iceberg metadata for a Delta snapshot, written beside the Delta log (Delta UniForm, IcebergCompatV2).

``convert(log, snapshot)`` writes ``<table>/metadata/v<version>.metadata.json``: the table
metadata (schemas, partition specs, snapshots, logs) with a new snapshot whose manifest list
and manifests list the snapshot's live files. The parts, each in its module: where the files
live, the table's identity and the version hint (``metadata_files``); the earlier snapshot's
manifests reused (``incremental``, else the conversion is full: every live file written anew,
here); one data file as a manifest entry (``data_files``); deleting what nothing refers to
(``cleanup``).

Earlier snapshots are carried forward (Iceberg time travel) until they are older than the Delta
log retention (``delta.logRetentionDuration``), at most ``SNAPSHOTS_MAX`` of them; the current
snapshot is always kept.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from serialake.core.iceberg.data_files import manifest_entry
from serialake.core.iceberg.errors import IcebergConversionError
from serialake.core.iceberg.incremental import _Incremental, _live
from serialake.core.iceberg.manifests import ADDED, ManifestContext, manifest_list_bytes
from serialake.core.iceberg.metadata_files import (
    _advance_hint,
    _load_json,
    _previous,
    _read_hint,
    metadata_dir,
    metadata_path,
    snapshot_id_for,
    table_uuid,
)
from serialake.core.iceberg.schema import (
    IcebergSchema,
    PartitionField,
    convert_schema,
    partition_fields,
    primitive_types,
)
from serialake.core.model import properties as props
from serialake.core.model.actions import AddFile
from serialake.exceptions import FileAlreadyExistsError

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog
    from serialake.core.log.snapshot import Snapshot

__all__ = ["SNAPSHOTS_MAX", "convert"]

logger = logging.getLogger("serialake")

#: Earlier metadata files named in ``metadata-log`` (within the log retention).
METADATA_LOG_MAX = 100
#: Snapshots a metadata file keeps at most (the newest), whatever the retention: every conversion
#: rewrites the list, so a table committing every second for 30 days must not carry 2.6 million.
SNAPSHOTS_MAX = 1_000
_FORMAT_VERSION = 2


def convert(log: DeltaLog, snapshot: Snapshot) -> str:
    """Write the Iceberg metadata of ``snapshot`` (a snapshot of ``log``'s table); returns its path.

    When ``v<version>.metadata.json`` exists already (another writer converted this version),
    that file is the result. ``IcebergConversionError`` says what in the table prevents the
    conversion (column mapping ids, statistics, deletion vectors); storage errors are the
    store's ``OSError``. All I/O goes through ``log.store``.
    """
    return _Conversion(log, snapshot).run()


class _Conversion(_Incremental):
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

    def _entry(self, ctx: ManifestContext, schema: IcebergSchema, add: AddFile, status: int) -> dict[str, Any]:
        """The manifest entry of a live Delta file (``data_files.manifest_entry``)."""
        return manifest_entry(ctx, schema, add, status, table=self.table, fail=self.fail)


def _delta_version(metadata: Mapping[str, Any]) -> int | None:
    value = str(metadata.get("properties", {}).get("delta-version", ""))
    return int(value) if value.isdigit() else None
