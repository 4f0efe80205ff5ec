"""Iceberg v2 manifests and manifest lists: their Avro schemas, and files written and read.

A manifest entry is held as the dict its Avro record is (``status``, ``snapshot_id``,
``sequence_number``, ``file_sequence_number``, ``data_file``), so an entry read from an
earlier manifest is written again as it was, with only its status changed. Maps keyed by
field id (``value_counts``, ``lower_bounds``, ...) are Avro arrays of ``{"key", "value"}``
records, as the spec's Avro appendix says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serialake.core.iceberg import avro
from serialake.core.iceberg.schema import PartitionField
from serialake.core.iceberg.values import decimal_size, from_avro_value, single_value, sort_key

__all__ = [
    "ADDED",
    "DELETED",
    "EXISTING",
    "ManifestContext",
    "list_entry",
    "manifest_bytes",
    "manifest_list_bytes",
    "read_manifest",
    "read_manifest_list",
]

EXISTING, ADDED, DELETED = 0, 1, 2
FORMAT_VERSION = 2
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _required(avro_type: Any, name: str, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": avro_type, "field-id": field_id}


def _optional(avro_type: Any, name: str, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None, "field-id": field_id}


def _id_map(name: str, field_id: int, key_id: int, value_id: int, value_type: str) -> dict[str, Any]:
    """An optional map from field id to ``value_type`` (Iceberg's array-of-pairs map for non-string keys)."""
    pair = {
        "type": "record",
        "name": f"k{key_id}_v{value_id}",
        "fields": [
            _required("int", "key", key_id),
            _required(value_type, "value", value_id),
        ],
    }
    return _optional({"type": "array", "logicalType": "map", "items": pair}, name, field_id)


def avro_name(name: str) -> str:
    """``name`` made a valid Avro name (as Iceberg does: each other character becomes ``_x`` + its hex code)."""
    if _AVRO_NAME.fullmatch(name):
        return name
    out = []
    for i, c in enumerate(name):
        ok = c == "_" or c.isascii() and (c.isalpha() or (c.isdigit() and i > 0))
        out.append(c if ok else f"_x{ord(c):X}")
    return "".join(out)


def _partition_avro_type(f: PartitionField) -> Any:
    t = f.iceberg_type
    if t == "date":
        return {"type": "int", "logicalType": "date"}
    if t in ("timestamp", "timestamptz"):
        return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": t == "timestamptz"}
    if t.startswith("decimal("):
        precision, scale = (int(x) for x in t[8:-1].split(","))
        return {
            "type": "fixed", "name": f"decimal_{f.field_id}", "size": decimal_size(precision),
            "logicalType": "decimal", "precision": precision, "scale": scale,
        }
    return {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
            "string": "string", "binary": "bytes"}[t]  # fmt: skip


def manifest_entry_schema(partition: Sequence[PartitionField]) -> dict[str, Any]:
    """The Avro schema of a v2 ``manifest_entry`` with this partition struct."""
    partition_record = {
        "type": "record",
        "name": "r102",
        "fields": [_optional(_partition_avro_type(f), avro_name(f.name), f.field_id) for f in partition],
    }
    data_file = {
        "type": "record",
        "name": "r2",
        "fields": [
            _required("int", "content", 134),
            _required("string", "file_path", 100),
            _required("string", "file_format", 101),
            _required(partition_record, "partition", 102),
            _required("long", "record_count", 103),
            _required("long", "file_size_in_bytes", 104),
            _id_map("column_sizes", 108, 117, 118, "long"),
            _id_map("value_counts", 109, 119, 120, "long"),
            _id_map("null_value_counts", 110, 121, 122, "long"),
            _id_map("nan_value_counts", 137, 138, 139, "long"),
            _id_map("lower_bounds", 125, 126, 127, "bytes"),
            _id_map("upper_bounds", 128, 129, 130, "bytes"),
            _optional("bytes", "key_metadata", 131),
            _optional({"type": "array", "items": "long", "element-id": 133}, "split_offsets", 132),
            _optional({"type": "array", "items": "int", "element-id": 136}, "equality_ids", 135),
            _optional("int", "sort_order_id", 140),
        ],
    }
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            _required("int", "status", 0),
            _optional("long", "snapshot_id", 1),
            _optional("long", "sequence_number", 3),
            _optional("long", "file_sequence_number", 4),
            _required(data_file, "data_file", 2),
        ],
    }


MANIFEST_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        _required("string", "manifest_path", 500),
        _required("long", "manifest_length", 501),
        _required("int", "partition_spec_id", 502),
        _required("int", "content", 517),
        _required("long", "sequence_number", 515),
        _required("long", "min_sequence_number", 516),
        _required("long", "added_snapshot_id", 503),
        _required("int", "added_files_count", 504),
        _required("int", "existing_files_count", 505),
        _required("int", "deleted_files_count", 506),
        _required("long", "added_rows_count", 512),
        _required("long", "existing_rows_count", 513),
        _required("long", "deleted_rows_count", 514),
        _optional(
            {
                "type": "array",
                "element-id": 508,
                "items": {
                    "type": "record",
                    "name": "r508",
                    "fields": [
                        _required("boolean", "contains_null", 509),
                        _optional("boolean", "contains_nan", 518),
                        _optional("bytes", "lower_bound", 510),
                        _optional("bytes", "upper_bound", 511),
                    ],
                },
            },
            "partitions",
            507,
        ),
        _optional("bytes", "key_metadata", 519),
    ],
}


@dataclass(frozen=True)
class ManifestContext:
    """What every manifest of one snapshot shares: schema, spec, snapshot id and sequence number."""

    schema_json: str  # the Iceberg schema (with its schema-id), as the manifest's "schema" metadata
    schema_id: int
    spec_id: int
    spec_fields: tuple[PartitionField, ...]
    snapshot_id: int
    sequence_number: int

    def spec_json(self) -> str:
        return json.dumps(
            [{"name": f.name, "transform": "identity", "source-id": f.source_id, "field-id": f.field_id}
             for f in self.spec_fields],
            separators=(",", ":"),
        )  # fmt: skip

    def partition_key(self, name: str) -> str:
        """The Avro field name of a partition field."""
        return avro_name(name)


def manifest_bytes(ctx: ManifestContext, entries: Iterable[Mapping[str, Any]]) -> bytes:
    """A data manifest holding ``entries`` (dicts shaped as ``manifest_entry`` records)."""
    return avro.write_file(
        manifest_entry_schema(ctx.spec_fields),
        entries,
        metadata={
            "schema": ctx.schema_json,
            "schema-id": str(ctx.schema_id),
            "partition-spec": ctx.spec_json(),
            "partition-spec-id": str(ctx.spec_id),
            "format-version": str(FORMAT_VERSION),
            "content": "data",
        },
    )


def list_entry(ctx: ManifestContext, path: str, length: int, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The manifest list's ``manifest_file`` record of a manifest this snapshot wrote."""
    counts = {EXISTING: 0, ADDED: 0, DELETED: 0}
    rows = {EXISTING: 0, ADDED: 0, DELETED: 0}
    live_sequence: list[int] = []
    for e in entries:
        status = e["status"]
        counts[status] += 1
        rows[status] += e["data_file"]["record_count"]
        if status != DELETED and e.get("sequence_number") is not None:
            live_sequence.append(e["sequence_number"])
    return {
        "manifest_path": path,
        "manifest_length": length,
        "partition_spec_id": ctx.spec_id,
        "content": 0,
        "sequence_number": ctx.sequence_number,
        "min_sequence_number": min(live_sequence, default=ctx.sequence_number),
        "added_snapshot_id": ctx.snapshot_id,
        "added_files_count": counts[ADDED],
        "existing_files_count": counts[EXISTING],
        "deleted_files_count": counts[DELETED],
        "added_rows_count": rows[ADDED],
        "existing_rows_count": rows[EXISTING],
        "deleted_rows_count": rows[DELETED],
        "partitions": _summaries(ctx, entries),
        "key_metadata": None,
    }


def _summaries(ctx: ManifestContext, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One field summary per partition field, over every entry (deleted ones too: wider is safe)."""
    out = []
    for f in ctx.spec_fields:
        key = ctx.partition_key(f.name)
        has_null = has_nan = False
        low: Any = None
        high: Any = None
        for e in entries:
            value = from_avro_value(f.iceberg_type, e["data_file"]["partition"].get(key))
            if value is None:
                has_null = True
                continue
            if isinstance(value, float) and value != value:
                has_nan = True
                continue
            k = sort_key(value)
            if low is None or k < sort_key(low):
                low = value
            if high is None or k > sort_key(high):
                high = value
        out.append({
            "contains_null": has_null,
            "contains_nan": has_nan,
            "lower_bound": single_value(f.iceberg_type, low) if low is not None else None,
            "upper_bound": single_value(f.iceberg_type, high) if high is not None else None,
        })
    return out


def manifest_list_bytes(
    records: Iterable[Mapping[str, Any]], *, snapshot_id: int, parent_id: int | None, sequence_number: int
) -> bytes:
    """A manifest list (``snap-*.avro``) of ``records`` (``manifest_file`` dicts)."""
    return avro.write_file(
        MANIFEST_FILE_SCHEMA,
        records,
        metadata={
            "snapshot-id": str(snapshot_id),
            "parent-snapshot-id": str(parent_id) if parent_id is not None else "null",
            "sequence-number": str(sequence_number),
            "format-version": str(FORMAT_VERSION),
        },
    )


def read_manifest(data: bytes) -> list[dict[str, Any]]:
    """The entries of a manifest (as dicts)."""
    return avro.read_file(data).records


def read_manifest_list(data: bytes) -> list[dict[str, Any]]:
    """The ``manifest_file`` records of a manifest list."""
    return avro.read_file(data).records
