"""ALTER TABLE ... ADD COLUMNS / {ALTER|CHANGE} COLUMN / UNSET TBLPROPERTIES: metadata commits.

Every concurrent write to the table then fails with ``MetadataChangedException``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.model import clustering, constraints
from serialake.core.model import properties as props
from serialake.core.model.schema import (
    SchemaError,
    StructField,
    StructType,
    change_field,
    field_path,
    remove_field,
    rename_field,
)
from serialake.core.txn.written import BeforeCommit, commit_or_clean_up
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    UnsupportedFeatureError,
)
from serialake.spark import data_read, transaction
from serialake.spark.columns import column_mapping_mode, quote_name
from serialake.spark.dml.kernel import open_transaction
from serialake.spark.schemas import to_delta_schema

__all__ = ["add_columns", "change_column", "cluster_by", "drop_columns", "rename_column", "unset_properties"]


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
        added = to_delta_schema(struct).fields
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


def change_column(
    spark: SparkSession,
    table_path: str,
    column: Sequence[str],
    *,
    new_name: str | None = None,
    data_type: str | None = None,
    comment: str | None = None,
    nullable: bool | None = None,
    first: bool = False,
    after: str | None = None,
    before_commit: BeforeCommit = None,
) -> int:
    """``ALTER TABLE ... {ALTER|CHANGE} COLUMN``: a column's comment, nullability or position.

    ``column`` is the path of the column (a nested field: ``["s", "a"]``). ``data_type``
    must be the column's type: Delta changes a type only with type widening, which
    serialake does not write. ``new_name`` must be the column's name: renaming needs column
    mapping. ``nullable=False`` (SET NOT NULL) first checks, in the transaction, that no row
    holds NULL there; it read the whole table, so a concurrent write fails it. Returns the
    committed version.
    """
    txn, snap = open_transaction(table_path, "CHANGE COLUMN")
    table = snap.table_path
    dotted = ".".join(column)
    old = _field_at(snap.schema, column, table)
    base, parts = snap.schema, tuple(snap.partition_columns)
    if new_name is not None and new_name.strip("`") != old.name:
        base, parts = _renamed(snap, column, new_name)  # renamed and changed in one commit
        column = [*column[:-1], new_name.strip("`")]
    if data_type is not None:
        wanted = StructType.from_ddl(f"`x` {data_type}").fields[0].data_type
        if wanted.simple_string() != old.data_type.simple_string():
            raise DeltaAnalysisException(
                f"ALTER TABLE CHANGE COLUMN is not supported for changing column '{dotted}' of table {table} "
                f"from {old.data_type.simple_string()} to {wanted.simple_string()}: Delta changes a column's type "
                "only with type widening. Overwrite the table with the new schema (overwriteSchema) instead."
            )
    if old.name.lower() in {c.lower() for c in snap.partition_columns} and nullable is False:
        raise DeltaAnalysisException(f"Cannot SET NOT NULL on partition column '{dotted}' of table {table}.")
    try:
        schema = change_field(base, column, comment=comment, nullable=nullable, first=first, after=after)
    except SchemaError as e:
        raise DeltaAnalysisException(f"Cannot change column '{dotted}' of table {table}: {e}") from None
    if nullable is False and old.nullable:
        _check_no_nulls(spark, txn, snap, [*column[:-1], old.name], table)
    if schema == snap.schema:
        return snap.version  # nothing changes: no commit (as SET TBLPROPERTIES of the same value)
    constraints.validate_generated_columns(schema, table)
    txn.update_metadata(replace(snap.metadata, schema_string=schema.to_json(), partition_columns=parts))
    new = _field_at(schema, column, table)
    params: dict[str, str] = {"column": json.dumps(new.to_json_value(), separators=(",", ":"))}
    if first:
        params["position"] = "FIRST"
    elif after is not None:
        params["position"] = f"AFTER {after}"
    return commit_or_clean_up(txn, [], "CHANGE COLUMN", params, {}, before_commit=before_commit)


def _require_mapping(snap: Any, action: str) -> None:
    """Renaming and dropping columns rewrite no file: they need column mapping (``name`` or ``id``)."""
    if column_mapping_mode(snap) == "none":
        raise DeltaAnalysisException(
            f"Cannot {action} of table {snap.table_path}: it needs column mapping, so that data files keep the "
            "column under its physical name. Enable it with ALTER TABLE ... SET TBLPROPERTIES "
            "('delta.columnMapping.mode' = 'name') (no file is rewritten), then retry."
        )


def _referenced_by(snap: Any, names: Sequence[str]) -> str | None:
    """What refers to column ``names`` (a path) by name: a CHECK constraint or a generated column."""
    top = names[0].lower()
    for check in constraints.check_constraints(snap.configuration):
        if top in constraints.referenced_columns(check.expression, what=f"CHECK constraint {check.name}"):
            return f"CHECK constraint {check.name}"
    for generated in constraints.generated_columns(snap.schema):
        if top in constraints.referenced_columns(generated.expression, what=f"generated column {generated.name}"):
            return f"generated column {generated.name}"
    return None


def rename_column(
    table_path: str, column: Sequence[str], new_name: str, *, before_commit: BeforeCommit = None
) -> int:
    """``ALTER TABLE ... RENAME COLUMN a TO b`` (a nested field: ``["s", "a"]``): a metadata commit.

    Needs column mapping: the column keeps its id and physical name, so no data file is
    rewritten. A partition column is renamed in the partitioning too; a column a CHECK
    constraint or a generated column refers to cannot be renamed (drop those first).
    Concurrent writes fail with ``MetadataChangedException``. Returns the committed version.
    """
    txn, snap = open_transaction(table_path, "RENAME COLUMN")
    if new_name.strip("`") == _field_at(snap.schema, column, snap.table_path).name:
        return snap.version
    schema, parts = _renamed(snap, column, new_name)
    txn.update_metadata(replace(snap.metadata, schema_string=schema.to_json(), partition_columns=parts))
    params = {"oldColumnPath": ".".join(column), "newColumnPath": ".".join([*column[:-1], new_name.strip("`")])}
    return commit_or_clean_up(txn, [], "RENAME COLUMN", params, {}, before_commit=before_commit)


def _renamed(snap: Any, column: Sequence[str], new_name: str) -> tuple[StructType, tuple[str, ...]]:
    """The schema and partition columns with ``column`` named ``new_name`` (checked: see ``rename_column``)."""
    table = snap.table_path
    dotted = ".".join(column)
    _require_mapping(snap, f"rename column '{dotted}'")
    old = _field_at(snap.schema, column, table)
    new_name = new_name.strip("`")
    if not new_name:
        raise DeltaAnalysisException(f"Cannot rename column '{dotted}' of table {table} to an empty name")
    parent = field_path(snap.schema, column[:-1])[-1].data_type if len(column) > 1 else snap.schema
    assert isinstance(parent, StructType)
    clash = next((f.name for f in parent.fields if f.name.lower() == new_name.lower() and f is not old), None)
    if clash is not None:
        raise DeltaAnalysisException(
            f"Cannot rename column '{dotted}' of table {table} to '{new_name}': column '{clash}' already exists."
        )
    user = _referenced_by(snap, column)
    if user is not None:
        raise DeltaAnalysisException(f"Cannot rename column '{dotted}' of table {table}: {user} refers to it. "
                                     "Drop it first.")
    parts = tuple(
        new_name if len(column) == 1 and c.lower() == old.name.lower() else c for c in snap.partition_columns
    )
    return rename_field(snap.schema, column, new_name), parts


def drop_columns(
    table_path: str,
    columns: Sequence[Sequence[str]],
    *,
    if_exists: bool = False,
    before_commit: BeforeCommit = None,
) -> int:
    """``ALTER TABLE ... DROP COLUMN[S]``: remove columns (paths) from the schema in a metadata commit.

    Needs column mapping: the data stays in the files, unread, until they are rewritten;
    the ids are never given out again. Partition and clustering columns, the last column,
    and columns a CHECK constraint or generated column refers to cannot be dropped. With
    ``if_exists`` missing columns are skipped. Returns the committed version (the read
    version when nothing is dropped).
    """
    txn, snap = open_transaction(table_path, "DROP COLUMNS")
    table = snap.table_path
    names = ", ".join(".".join(c) for c in columns)
    _require_mapping(snap, f"drop column(s) {names}")
    schema = snap.schema
    dropped = []
    parts = {c.lower() for c in snap.partition_columns}
    clustered = {c.lower() for c in clustering.clustering_columns(snap.domain_metadata, snap.schema, table) or []}
    for column in columns:
        dotted = ".".join(column)
        try:
            field_path(schema, column)
        except SchemaError as e:
            if if_exists:
                continue
            raise DeltaAnalysisException(f"Cannot drop column '{dotted}' of table {table}: {e}") from None
        if len(column) == 1 and column[0].lower() in parts:
            raise DeltaAnalysisException(f"Cannot drop partition column '{dotted}' of table {table}.")
        if dotted.lower() in clustered:
            raise DeltaAnalysisException(
                f"Cannot drop clustering column '{dotted}' of table {table}: change the clustering first "
                "(ALTER TABLE ... CLUSTER BY)."
            )
        user = _referenced_by(snap, column)
        if user is not None:
            raise DeltaAnalysisException(f"Cannot drop column '{dotted}' of table {table}: {user} refers to it.")
        schema = remove_field(schema, column)
        dropped.append(dotted)
    if not dropped:
        return snap.version
    if not schema.fields:
        raise DeltaAnalysisException(f"Cannot drop every column of table {table}.")
    txn.update_metadata(replace(snap.metadata, schema_string=schema.to_json()))
    params = {"columns": json.dumps(dropped)}
    return commit_or_clean_up(txn, [], "DROP COLUMNS", params, {}, before_commit=before_commit)


def cluster_by(table_path: str, columns: Sequence[str], *, before_commit: BeforeCommit = None) -> int:
    """``ALTER TABLE ... CLUSTER BY (cols)`` / ``CLUSTER BY NONE`` (no columns): the clustering columns.

    Only the ``delta.clustering`` domain changes (and, the first time, the protocol gains the
    ``clustering`` feature); no file is rewritten: the next OPTIMIZE clusters by the new
    columns the files not yet clustered. A partitioned table cannot be clustered. A
    concurrent change of the clustering fails this one (the domain is written by both).
    """
    txn, snap = open_transaction(table_path, "CLUSTER BY")
    table = snap.table_path
    current = clustering.clustering_columns(snap.domain_metadata, snap.schema, table)
    if current is None and not columns:
        return snap.version  # CLUSTER BY NONE on a table never clustered: nothing to change
    names, domain = clustering.cluster_table(txn, list(columns), table)
    params = {"oldClusteringColumns": ",".join(current or []), "newClusteringColumns": ",".join(names)}
    return commit_or_clean_up(txn, [domain], "CLUSTER BY", params, {}, before_commit=before_commit)


def _field_at(schema: StructType, path: Sequence[str], table: str) -> StructField:
    try:
        return field_path(schema, path)[-1]
    except SchemaError as e:
        raise DeltaAnalysisException(f"Table {table}: {e}") from None


def _check_no_nulls(spark: SparkSession, txn: Any, snap: Any, column: Sequence[str], table: str) -> None:
    files = txn.read_whole_table()
    if not files:
        return
    col = F.col(".".join(quote_name(p) for p in column))
    nulls = data_read.read_files_df(spark, snap, files).filter(col.isNull()).count()
    if nulls:
        raise DeltaAnalysisException(
            f"Cannot SET NOT NULL on column '{'.'.join(column)}' of table {table}: {nulls} row(s) at version "
            f"{snap.version} hold NULL there. Update or delete them first."
        )


def unset_properties(table_path: str, keys: Sequence[str], *, if_exists: bool = False) -> int:
    """Remove table properties in one metadata commit (``UNSET TBLPROPERTIES``); the version."""
    log = DeltaLog.for_table(table_path)
    transaction.refuse("ALTER TABLE", log.table_path)
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
