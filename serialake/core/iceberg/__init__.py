"""Iceberg metadata for Delta tables (Delta UniForm with IcebergCompatV2), in pure Python.

``convert(log, snapshot)`` writes ``<table>/metadata/v<version>.metadata.json`` (with its
manifests and manifest list) so Iceberg readers read the Delta table's current files;
``IcebergConverter`` / ``after_commit`` run it in the background after commits;
``convert_now`` runs it at once; ``cleanup`` deletes Iceberg files nothing refers to.
The layout and the rules are in the docstrings of ``conversion`` (and the modules it names) and
docs/uniform.md.
"""

from __future__ import annotations

from serialake.core.iceberg.cleanup import cleanup
from serialake.core.iceberg.conversion import convert
from serialake.core.iceberg.converter import (
    IcebergConverter,
    after_commit,
    convert_now,
    iceberg_enabled,
)
from serialake.core.iceberg.errors import IcebergConversionError
from serialake.core.iceberg.incremental import clear_manifest_cache
from serialake.core.iceberg.metadata_files import (
    metadata_dir,
    metadata_path,
    read_version_hint,
    snapshot_id_for,
    table_uuid,
)
from serialake.core.iceberg.schema import IcebergSchema, convert_schema

__all__ = [
    "IcebergConversionError",
    "IcebergConverter",
    "IcebergSchema",
    "after_commit",
    "cleanup",
    "clear_manifest_cache",
    "convert",
    "convert_now",
    "convert_schema",
    "iceberg_enabled",
    "metadata_dir",
    "metadata_path",
    "read_version_hint",
    "snapshot_id_for",
    "table_uuid",
]
