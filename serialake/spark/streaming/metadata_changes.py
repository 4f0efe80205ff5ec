"""What a metadata change changed, in words: why a stream stops at a commit (``metadata_changes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serialake.core.model.actions import Metadata
from serialake.core.model.identity import HIGH_WATER_MARK
from serialake.core.model.schema import StructField, physical_name

__all__ = ["column_list", "metadata_changes"]


# ---------------------------------------------------------------------------------------------
# What a metadata change changed
# ---------------------------------------------------------------------------------------------


def metadata_changes(old: Metadata, new: Metadata) -> list[str]:
    """What ``new`` changes in ``old``'s schema, partitioning and properties, in words (empty: nothing).

    An identity column's high-water mark is left out: every write that generates values
    moves it, and it changes nothing a reader sees.
    """
    out: list[str] = []
    if tuple(old.partition_columns) != tuple(new.partition_columns):
        before_parts, after_parts = column_list(old.partition_columns), column_list(new.partition_columns)
        out.append(f"partitioning changed from {before_parts} to {after_parts}")
    before, after = old.schema, new.schema
    old_fields = {f.name: f for f in before.fields}
    new_fields = {f.name: f for f in after.fields}
    added = [f for name, f in new_fields.items() if name not in old_fields]
    dropped = [f for name, f in old_fields.items() if name not in new_fields]
    if added:
        out.append("column(s) added: " + ", ".join(f"{f.name} {f.data_type.simple_string()}" for f in added))
    if dropped:
        out.append("column(s) dropped: " + ", ".join(f.name for f in dropped))
    for name, f in new_fields.items():
        g = old_fields.get(name)
        if g is None or _field_json(g) == _field_json(f):
            continue
        if g.data_type != f.data_type:
            types = f"{g.data_type.simple_string()} to {f.data_type.simple_string()}"
            out.append(f"column {name} changed type from {types}")
        elif g.nullable != f.nullable:
            out.append(f"column {name} became {'nullable' if f.nullable else 'NOT NULL'}")
        elif physical_name(g) != physical_name(f):
            out.append(f"column {name} now stored as {physical_name(f)}")
        else:
            out.append(f"column {name} changed its metadata (comment, constraints, generation)")
    if not added and not dropped and list(old_fields) != list(new_fields):
        out.append("columns reordered: " + ", ".join(new_fields))
    changed = {k: v for k, v in new.configuration.items() if old.configuration.get(k) != v}
    unset = [k for k in old.configuration if k not in new.configuration]
    if changed:
        out.append("properties set: " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
    if unset:
        out.append("properties unset: " + ", ".join(sorted(unset)))
    return out


def _field_json(f: StructField) -> Any:
    value = f.to_json_value()
    meta = value.get("metadata")
    if isinstance(meta, dict) and HIGH_WATER_MARK in meta:
        value["metadata"] = {k: v for k, v in meta.items() if k != HIGH_WATER_MARK}
    return value


def column_list(names: Sequence[str]) -> str:
    """``[a, b]``."""
    return "[" + ", ".join(names) + "]"
