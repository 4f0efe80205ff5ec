"""One Delta data file as an Iceberg manifest entry: partition values, record count, column bounds.

IcebergCompatV2's checks on a file are made here: no deletion vector, a record count in the
stats, a size. Stats JSON is read with exact decimals (a float would round a decimal bound).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from serialake.core.iceberg.errors import IcebergConversionError
from serialake.core.iceberg.manifests import ManifestContext
from serialake.core.iceberg.schema import IcebergSchema
from serialake.core.iceberg.values import avro_value, internal_partition_value, lower_bound, single_value, upper_bound
from serialake.core.model.actions import AddFile
from serialake.core.model.paths import absolute_path

__all__ = ["manifest_entry"]


def manifest_entry(
    ctx: ManifestContext,
    schema: IcebergSchema,
    add: AddFile,
    status: int,
    *,
    table: str,
    fail: Callable[..., IcebergConversionError],
) -> dict[str, Any]:
    """The manifest entry of a live Delta file (IcebergCompatV2's checks on it included).

    ``fail(reason, **kwargs)`` makes the ``IcebergConversionError`` raised (naming the table and version).
    """
    if add.deletion_vector is not None:
        raise fail(
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
        raise fail(
            "the data file has no record count (stats.numRecords), which an Iceberg manifest requires",
            file=add.path,
            help="Recompute the file's statistics (rewrite it, e.g. with OPTIMIZE or by rewriting the "
            "partition), then convert again.",
        )
    if add.size is None:
        raise fail("the data file has no size (add.size)", file=add.path)
    pv = add.partition_values or {}
    partition: dict[str, Any] = {}
    by_source: dict[int, Any] = {}
    for f in ctx.spec_fields:
        raw = pv[f.physical] if f.physical in pv else pv.get(f.name)
        try:
            value = internal_partition_value(raw, f.delta_type, f.iceberg_type)
        except ValueError as e:
            raise fail(f"partition column '{f.name}': {e}", file=add.path, column=f.name) from None
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
            "file_path": absolute_path(table, add.path),
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
