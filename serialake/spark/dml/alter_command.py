"""ALTER TABLE ... ADD COLUMNS / UNSET TBLPROPERTIES: metadata-only commits.

Every concurrent write to the table then fails with ``MetadataChangedException``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core import properties as props
from serialake.core.schema import StructType
from serialake.core.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    UnsupportedFeatureError,
)
from serialake.spark import io
from serialake.spark.dml.kernel import open_transaction

__all__ = ["add_columns", "unset_properties"]


def add_columns(
    spark: SparkSession | None,
    table_path: str,
    columns: str | T.StructType | Sequence[T.StructField],
    *,
    before_commit: BeforeCommit = None,
) -> int:
    """``ALTER TABLE ADD COLUMNS``: append nullable columns; a commit holding only metaData.

    ``columns`` is a DDL string (``"c1 INT, c2 STRING COMMENT 'x'"``), a Spark StructType or a
    list of StructFields. Every concurrent write to the table then fails with
    ``MetadataChangedException``. Returns the committed version.
    """
    del spark  # schema work only: no Spark job
    txn, snap = open_transaction(table_path, "ADD COLUMNS")
    table = snap.table_path
    if isinstance(columns, str):
        added = StructType.from_ddl(columns).fields
    else:
        struct = columns if isinstance(columns, T.StructType) else T.StructType(list(columns))
        added = io.to_delta_schema(struct).fields
    if not added:
        raise DeltaIllegalArgumentException(f"ADD COLUMNS on table {table}: no columns given")
    seen = {n.lower() for n in snap.schema.field_names}
    for f in added:
        if f.name.lower() in seen:
            raise DeltaAnalysisException(
                f"Cannot add column '{f.name}' to table {table}: a column with that name already exists "
                f"(columns: {', '.join(snap.schema.field_names)})"
            )
        if not f.nullable:
            raise DeltaAnalysisException(
                f"Cannot add column '{f.name}' to table {table} as NOT NULL: existing rows would hold NULL."
            )
        seen.add(f.name.lower())
    schema = StructType(snap.schema.fields + tuple(added))
    txn.update_metadata(replace(snap.metadata, schema_string=schema.to_json()))
    params = {
        "columns": json.dumps([{"column": f.to_json_value()} for f in added], separators=(",", ":")),
    }
    return commit_or_clean_up(txn, [], "ADD COLUMNS", params, {}, before_commit=before_commit)


def unset_properties(table_path: str, keys: Sequence[str], *, if_exists: bool = False) -> int:
    """Remove table properties in one metadata commit (``UNSET TBLPROPERTIES``); the version."""
    log = DeltaLog.for_table(table_path)
    txn = log.start_transaction()
    snap = txn.snapshot
    if snap is None:
        raise DeltaTableNotFoundError(f"Cannot UNSET TBLPROPERTIES: {log.table_path} is not a Delta table.")
    present = {k.lower(): k for k in snap.metadata.configuration}
    missing = [k for k in keys if k.lower() not in present]
    if missing and not if_exists:
        raise DeltaAnalysisException(
            f"Cannot unset property(ies) {', '.join(missing)} of table {log.table_path}: not set. "
            "Pass ifExists=True to ignore absent keys."
        )
    if any(k.lower() == props.COLUMN_MAPPING_MODE.lower() for k in keys if k.lower() in present):
        raise UnsupportedFeatureError(f"Table {log.table_path}: unsetting delta.columnMapping.mode is not supported.")
    drop = {present[k.lower()] for k in keys if k.lower() in present}
    conf = {k: v for k, v in snap.metadata.configuration.items() if k not in drop}
    txn.update_metadata(replace(snap.metadata, configuration=conf))
    params = {"properties": json.dumps(list(keys)), "ifExists": "true" if if_exists else "false"}
    return txn.commit([], "UNSET TBLPROPERTIES", params)
