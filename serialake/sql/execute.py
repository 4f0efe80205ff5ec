"""Running parsed statements with Spark and serialake's table API; each returns a DataFrame.

DML goes through ``DeltaTable`` (delta-spark's Python API names) and ``serialake.write``,
so SQL and the Python API share one implementation and one set of conflict rules.
Results have the columns Delta's SQL returns (``num_affected_rows``, ...), taken from the
commit's ``operationMetrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from sqlglot import exp

from serialake.core import DeltaLog
from serialake.core.log.deltalog import format_ms
from serialake.core.model import features
from serialake.core.model.schema import StructType
from serialake.core.predicates.expressions import ParsedCondition
from serialake.core.tables import catalog
from serialake.core.txn.post_commit import after_commit
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError
from serialake.spark import dml, isolation, transaction
from serialake.spark.table import DeltaTable, IdentityGenerator
from serialake.spark.write import write
from serialake.sql.errors import SqlError, UnsupportedStatementError
from serialake.sql.insert import run_insert
from serialake.sql.parser import DIALECT
from serialake.sql.results import empty, rows
from serialake.sql.statements import (
    AddColumns,
    AddConstraint,
    Atomic,
    BeginTransaction,
    ChangeColumn,
    Clone,
    ClusterBy,
    ColumnSpec,
    CommitTransaction,
    ConvertToDelta,
    CreateTable,
    CreateTempView,
    Delete,
    DescribeDetail,
    DescribeHistory,
    DescribeTable,
    DropColumns,
    DropConstraint,
    DropFeature,
    DropTable,
    Generate,
    Insert,
    Merge,
    Optimize,
    Passthrough,
    Query,
    RenameColumn,
    RenameTable,
    Reorg,
    Restore,
    RollbackTransaction,
    SetIsolation,
    SetLocation,
    SetProperties,
    ShowIsolation,
    ShowProperties,
    Statement,
    SyncMetadata,
    UnsetProperties,
    Update,
    UpgradeUniform,
    Vacuum,
)
from serialake.sql.tables import (
    Binding,
    bind_query,
    define_view,
    delta_tables_in,
    expand_views,
    resolve,
    run_query,
    timestamp_millis,
    try_resolve,
)
from serialake.storage import normalize_table_path

__all__ = ["execute"]


def execute(spark: SparkSession, st: Statement) -> DataFrame | None:
    """Run one parsed statement; its result (None when building it failed after a commit: ``_done``)."""
    handler = _HANDLERS.get(type(st))
    if handler is None:  # pragma: no cover - every statement type has a handler
        raise UnsupportedStatementError(type(st).__name__, statement=st.text)
    if type(st) in _TRANSACTION_CONTROL:
        return handler(spark, st)
    # Inside the session's BEGIN ... COMMIT: the statement runs in its transaction (a failure aborts it).
    with transaction.entered(spark):
        if not isinstance(st, _IN_TRANSACTION) and transaction.active(spark) is not None:
            words = " ".join(st.text.split()[:2]).upper() or type(st).__name__
            raise transaction.refusal(words, _target(st))
        return handler(spark, st)


def _target(st: Statement) -> str:
    """The table a statement names, for messages (its text when it names none)."""
    ref = getattr(st, "table", None) or getattr(st, "target", None)
    name = getattr(ref, "name", None) or getattr(ref, "path", None)
    return str(name) if name else "its table"


# ---------------------------------------------------------------------------------------------
# Transactions across tables (BEGIN / COMMIT / ROLLBACK, BEGIN ATOMIC ... END)
# ---------------------------------------------------------------------------------------------


def _begin(spark: SparkSession, st: BeginTransaction) -> DataFrame:
    transaction.begin(spark)
    return empty(spark)


def _commit(spark: SparkSession, st: CommitTransaction) -> DataFrame:
    transaction.end(spark, commit=True)
    return empty(spark)


def _rollback(spark: SparkSession, st: RollbackTransaction) -> DataFrame:
    transaction.end(spark, commit=False)
    return empty(spark)


def _atomic(spark: SparkSession, st: Atomic) -> DataFrame | None:
    """The statements as one transaction: all committed at END, or none (the error is raised)."""
    result: DataFrame | None = None
    with transaction.transaction(spark):
        for inner in st.statements:
            if isinstance(inner, BeginTransaction | CommitTransaction | RollbackTransaction | Atomic):
                raise UnsupportedStatementError(
                    "BEGIN / COMMIT / ROLLBACK inside BEGIN ATOMIC ... END", statement=inner.text
                )
            result = execute(spark, inner)
    return result if result is not None else empty(spark)


# ---------------------------------------------------------------------------------------------
# Queries and pass-through
# ---------------------------------------------------------------------------------------------


def _query(spark: SparkSession, st: Query) -> DataFrame:
    return run_query(spark, st.expression)


def _passthrough(spark: SparkSession, st: Passthrough) -> DataFrame:
    if st.expression is None:
        return spark.sql(st.text)
    # A query's views are expanded (they read their tables now); a DDL statement's names are not reads.
    expanded = expand_views(spark, st.expression) if isinstance(st.expression, exp.Query) else st.expression
    if not delta_tables_in(expanded):
        return spark.sql(st.text)
    return run_query(spark, expanded)


def _create_temp_view(spark: SparkSession, st: CreateTempView) -> DataFrame:
    """A temporary view: Spark gets one (for ``spark.sql``, over the tables as they are now), and
    ``serialake.sql`` statements expand its query, reading its tables when they run."""
    df = run_query(spark, st.query)
    if st.replace:
        df.createOrReplaceTempView(st.name)
    else:
        df.createTempView(st.name)
    define_view(spark, st.name, st.query)
    return empty(spark)


# ---------------------------------------------------------------------------------------------
# CREATE / DROP TABLE
# ---------------------------------------------------------------------------------------------


def _create_table(spark: SparkSession, st: CreateTable) -> DataFrame | None:
    name = st.table.name
    location = _create_location(st)
    log = DeltaLog.for_table(location)
    exists = log.table_exists()
    if exists and st.mode == "create":
        if st.if_not_exists:
            _register(name, location, st.location)
            return empty(spark)
        if name is not None and catalog.lookup(name) is not None:
            raise DeltaAnalysisException(
                f"Table {st.table.text} already exists (at {log.table_path}). Use CREATE TABLE IF NOT EXISTS, "
                "CREATE OR REPLACE TABLE, or drop it first."
            )
        if st.query is not None:
            raise DeltaAnalysisException(f"Table {st.table.text} already exists at {log.table_path}.")
        if st.columns:
            _check_same_schema(log, st)
        _register(name, location, st.location)
        return empty(spark)
    if not exists and st.mode == "replace":
        raise DeltaTableNotFoundError(f"Cannot REPLACE table {st.table.text}: there is no table at {log.table_path}.")
    operation = {"create": "CREATE", "replace": "REPLACE", "createOrReplace": "CREATE OR REPLACE"}[st.mode]
    version: int | None
    if st.query is not None:
        df = run_query(spark, st.query)
        version = write(
            df,
            location,
            mode="overwrite" if exists else "error",
            partitionBy=list(st.partition_by) or None,
            overwriteSchema=exists,
            properties=st.properties or None,
            clusterBy=list(st.cluster_by) or None,
            table_operation=f"{operation} TABLE AS SELECT",
        )
        after_commit(
            "register the table name in the catalog", location, version, _register, name, location, st.location,
            operation=f"{operation} TABLE AS SELECT",
        )  # fmt: skip
    elif st.columns:
        builder = {
            "create": DeltaTable.createIfNotExists if st.if_not_exists else DeltaTable.create,
            "replace": DeltaTable.replace,
            "createOrReplace": DeltaTable.createOrReplace,
        }[st.mode](spark).location(location)
        for col in st.columns:
            generator: Any = col.generated
            by_default = None
            if col.identity is not None:
                start, step, always = col.identity
                generator = IdentityGenerator(start, step) if always else None
                by_default = None if always else IdentityGenerator(start, step)
            builder = builder.addColumn(
                col.name, col.type, nullable=col.nullable, generatedAlwaysAs=generator,
                generatedByDefaultAs=by_default, comment=col.comment,
            )
        if st.partition_by:
            builder = builder.partitionedBy(*st.partition_by)
        if st.cluster_by:
            builder = builder.clusterBy(*st.cluster_by)
        for key, value in st.properties.items():
            builder = builder.property(key, value)
        if st.comment is not None:
            builder = builder.comment(st.comment)
        if name is not None:
            builder = builder.tableName(name)  # registered by the builder once created
        _, version = builder.run()
    else:
        raise DeltaTableNotFoundError(
            f"CREATE TABLE {st.table.text} without columns needs an existing Delta table at its location "
            f"({log.table_path} has none)."
        )
    return _done(spark, location, version, f"{operation} TABLE")


def _create_location(st: CreateTable) -> str:
    if st.table.path is not None:
        if st.location and normalize_table_path(st.location) != normalize_table_path(st.table.path):
            raise SqlError(
                f"CREATE TABLE {st.table.text} LOCATION '{st.location}': a path table cannot have another location.",
                statement=st.text,
            )
        return normalize_table_path(st.table.path)
    assert st.table.name is not None
    return catalog.table_location(st.table.name, st.location, exclusive=st.mode == "create" and not st.if_not_exists)


def _check_same_schema(log: DeltaLog, st: CreateTable) -> None:
    """CREATE TABLE (cols) LOCATION of an existing table: allowed when the schemas agree."""
    have = log.update().schema
    given = StructType.from_ddl(", ".join(f"`{c.name}` {c.type}" for c in st.columns))
    if _shape(have) != _shape(given):
        raise DeltaAnalysisException(
            f"Table {st.table.text}: a Delta table already exists at {log.table_path} with schema "
            f"{have.simple_string()}, which differs from the one given ({given.simple_string()}). "
            "Leave out the column list to register it as it is, or use CREATE OR REPLACE TABLE."
        )


def _register(name: str | None, location: str, given: str | None = None) -> None:
    """Register ``name`` (when given) at ``location``; a table created with a LOCATION is external."""
    if name is not None:
        catalog.register(name, location, managed=False if given is not None else None)


def _drop_table(spark: SparkSession, st: DropTable) -> DataFrame:
    if st.table.name is None:
        raise UnsupportedStatementError(
            f"DROP TABLE on a path ({st.table.text})",
            statement=st.text,
            hint="Path tables have no catalog entry; delete the directory to remove the data.",
        )
    # A managed table's files go with it (as with delta-spark); an external table keeps them.
    if not catalog.drop_table(st.table.name):
        if spark.catalog.tableExists(st.table.name):
            return spark.sql(st.text)
        if not st.if_exists:
            raise DeltaTableNotFoundError(f"Cannot DROP TABLE {st.table.name}: it is not registered.")
    return empty(spark)


# ---------------------------------------------------------------------------------------------
# DELETE / UPDATE / MERGE
# ---------------------------------------------------------------------------------------------


def _delete(spark: SparkSession, st: Delete) -> DataFrame | None:
    # The operation opens the table (one refresh of its log) and takes the condition as parsed here.
    path = resolve(st.table)
    with _bound_condition(spark, st.where) as (condition, needs_alias):
        alias = (st.alias or st.table.short_name) if needs_alias else None
        result = dml.run_delete(spark, path, condition or st.condition, alias=alias)
    return _done(spark, path, result.version, "DELETE", lambda s: dml.affected_rows_df(s, result))


def _update(spark: SparkSession, st: Update) -> DataFrame | None:
    path = resolve(st.table)
    with _bound_condition(spark, st.where) as (condition, needs_alias):
        alias = (st.alias or st.table.short_name) if needs_alias else None
        result = dml.run_update(spark, path, condition or st.condition, dict(st.assignments), alias=alias)
    return _done(spark, path, result.version, "UPDATE", lambda s: dml.affected_rows_df(s, result))


@contextmanager
def _bound_condition(
    spark: SparkSession, where: ParsedCondition | None
) -> Iterator[tuple[ParsedCondition | None, bool]]:
    """``where`` ready for the operation, and whether the target must keep its alias.

    A condition with subqueries reads other tables (or the target itself): they are bound
    to views of the snapshots the session's level reads (one consistent cut), alive until
    the operation is done; the operation records those reads in its transaction.
    """
    if where is None or not where.subquery:
        yield where, False
        return
    binding = Binding(spark)
    try:
        tree = expand_views(spark, sqlglot.parse_one(where.text, read=DIALECT))
        bound = bind_query(spark, tree, binding)
        yield replace(where, text=bound.sql(DIALECT)), True
    finally:
        binding.drop()


def _merge(spark: SparkSession, st: Merge) -> DataFrame | None:
    path = resolve(st.target)
    source = run_query(spark, exp.select("*").from_(st.source) if isinstance(st.source, exp.Table) else st.source)
    builder = dml.merge(spark, path, source.alias(st.source_alias), st.condition, alias=st.target_alias)
    if st.schema_evolution:
        builder = builder.withSchemaEvolution()
    for c in st.clauses:
        sets = dict(c.assignments)
        if c.match == "matched":
            if c.action == "update":
                builder = builder.whenMatchedUpdate(condition=c.condition, set=sets)
            elif c.action == "update_all":
                builder = builder.whenMatchedUpdateAll(condition=c.condition)
            else:
                builder = builder.whenMatchedDelete(condition=c.condition)
        elif c.match == "not_matched":
            if c.action == "insert":
                builder = builder.whenNotMatchedInsert(condition=c.condition, values=sets)
            else:
                builder = builder.whenNotMatchedInsertAll(condition=c.condition)
        elif c.action == "update":
            builder = builder.whenNotMatchedBySourceUpdate(condition=c.condition, set=sets)
        else:
            builder = builder.whenNotMatchedBySourceDelete(condition=c.condition)
    result = builder.run()
    return _done(spark, path, result.version, "MERGE", lambda s: dml.merge_result_df(s, result))


# ---------------------------------------------------------------------------------------------
# ALTER TABLE
# ---------------------------------------------------------------------------------------------


def _set_properties(spark: SparkSession, st: SetProperties) -> DataFrame | None:
    table, log = _table(spark, st.table)
    version = table.setTableProperties(dict(st.properties))
    return _done(spark, log.table_path, version, "SET TBLPROPERTIES")


def _unset_properties(spark: SparkSession, st: UnsetProperties) -> DataFrame | None:
    table, log = _table(spark, st.table)
    version = table.unsetTableProperties(list(st.keys), ifExists=st.if_exists)
    return _done(spark, log.table_path, version, "UNSET TBLPROPERTIES")


def _change_column(spark: SparkSession, st: ChangeColumn) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.change_column(
        spark, path, st.column, new_name=st.new_name, data_type=st.data_type, comment=st.comment,
        nullable=st.nullable, first=st.first, after=st.after,
    )  # fmt: skip
    return _done(spark, path, version, "CHANGE COLUMN")


def _rename_column(spark: SparkSession, st: RenameColumn) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.rename_column(path, st.column, st.new_name)
    return _done(spark, path, version, "RENAME COLUMN")


def _drop_columns(spark: SparkSession, st: DropColumns) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.drop_columns(path, st.columns, if_exists=st.if_exists)
    return _done(spark, path, version, "DROP COLUMNS")


def _clone(spark: SparkSession, st: Clone) -> DataFrame | None:
    """CREATE ... CLONE: ``dml.run_clone`` to the table's path (or its name's location)."""
    name = st.table.name
    target = st.table.path or st.location or name  # a name alone: the clone finds (or makes) its location
    assert target is not None
    timestamp = None
    if st.timestamp is not None:
        timestamp = format_ms(timestamp_millis(spark, st.timestamp)).removesuffix(" UTC")
    done = dml.run_clone(
        resolve(st.source), target, shallow=st.shallow, replace_target=st.mode != "create",
        must_exist=st.mode == "replace", if_not_exists=st.if_not_exists, properties=st.properties,
        version=st.version, timestamp=timestamp,
    )  # fmt: skip
    if done is None:
        return empty(spark)
    path, version = done
    if name is not None:
        after_commit(
            "register the table name in the catalog", path, version, catalog.register, name, path, operation="CLONE"
        )
    return _done(spark, path, version, "CLONE")


def _cluster_by(spark: SparkSession, st: ClusterBy) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.cluster_by(path, list(st.columns))
    return _done(spark, path, version, "CLUSTER BY")


def _rename_table(spark: SparkSession, st: RenameTable) -> DataFrame:
    if st.table.name is None:
        raise DeltaAnalysisException(f"ALTER TABLE {st.table.text} RENAME TO: only a table name can be renamed.")
    catalog.rename(st.table.name, st.new_name)
    return empty(spark)


def _set_location(spark: SparkSession, st: SetLocation) -> DataFrame:
    """The name now refers to the Delta table at the location, whose schema must be the table's."""
    if st.table.name is None:
        raise DeltaAnalysisException(f"ALTER TABLE {st.table.text} SET LOCATION: only a named table has a location.")
    old = DeltaLog.for_table(_existing(st.table)).update()
    try:
        new = DeltaLog.for_table(st.location).update()
    except DeltaTableNotFoundError:
        raise DeltaTableNotFoundError(
            f"Cannot set the location of table {st.table.name} to {st.location}: it is not a Delta table."
        ) from None
    if _shape(old.schema) != _shape(new.schema):
        raise DeltaAnalysisException(
            f"Cannot set the location of table {st.table.name} to {st.location}: its schema "
            f"{new.schema.simple_string()} differs from the table's {old.schema.simple_string()}."
        )
    catalog.register(st.table.name, new.table_path)
    return empty(spark)


def _shape(schema: Any) -> list[tuple[str, str]]:
    """A schema's column names (case-insensitive) and types, for "the same columns" checks."""
    return [(f.name.lower(), f.data_type.simple_string()) for f in schema.fields]


def _add_columns(spark: SparkSession, st: AddColumns) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.add_columns(spark, path, T.StructType(spark_fields(st.columns)))
    return _done(spark, path, version, "ADD COLUMNS")


def spark_fields(columns: tuple[ColumnSpec, ...]) -> list[T.StructField]:
    """Spark ``StructField``s for column specs (types parsed by Spark, comments as metadata)."""
    from pyspark.sql.types import _parse_datatype_string

    out = []
    for c in columns:
        meta = {"comment": c.comment} if c.comment is not None else {}
        out.append(T.StructField(c.name, _parse_datatype_string(c.type), c.nullable, meta))
    return out


def _drop_feature(spark: SparkSession, st: DropFeature) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.drop_feature(spark, path, st.feature, st.truncate_history)
    return _done(spark, path, version, "DROP FEATURE")


# ---------------------------------------------------------------------------------------------
# Maintenance and inspection
# ---------------------------------------------------------------------------------------------


def _optimize(spark: SparkSession, st: Optimize) -> DataFrame | None:
    table, log = _table(spark, st.table)
    builder = table.optimize()
    if st.where:
        builder = builder.where(st.where)
    if st.zorder_by:
        result = builder.run_zorder(list(st.zorder_by))
    else:
        result = builder.run_compaction(full=st.full)
    return _done(spark, log.table_path, result.version, "OPTIMIZE", lambda _: builder.result_df(result))


def _reorg(spark: SparkSession, st: Reorg) -> DataFrame | None:
    path = _existing(st.table)
    metrics = dml.purge_deletion_vectors(spark, path, st.where)
    counts = [(k, int(v)) for k, v in metrics.items() if k not in ("version", "workAlreadyDoneIn")]
    return _done(spark, path, metrics.get("version"), "REORG", lambda s: rows(s, [("path", path)] + counts))


def _upgrade_uniform(spark: SparkSession, st: UpgradeUniform) -> DataFrame | None:
    path = _existing(st.table)
    metrics = dml.upgrade_uniform(spark, path, st.compat_version)
    counts = [(k, int(v)) for k, v in metrics.items() if k != "version"]
    return _done(spark, path, metrics.get("version"), "REORG", lambda s: rows(s, [("path", path)] + counts))


def _sync_metadata(spark: SparkSession, st: SyncMetadata) -> DataFrame:
    """Write the Iceberg metadata of the table's latest version now; its path and version."""
    from serialake.core import DeltaLog, iceberg
    from serialake.core.model import uniform

    path = _existing(st.table)
    log = DeltaLog.for_table(path)
    snap = log.update()
    if not uniform.iceberg_enabled(snap.configuration):
        raise DeltaAnalysisException(
            f"MSCK REPAIR TABLE ... SYNC METADATA: table {log.table_path} is not a UniForm table "
            "(delta.universalFormat.enabledFormats does not include 'iceberg')."
        )
    location = iceberg.convert(log, snap)
    return rows(spark, [("path", path), ("version", snap.version), ("metadata", location)])


def _describe_history(spark: SparkSession, st: DescribeHistory) -> DataFrame:
    table, _ = _table(spark, st.table)
    return table.history(st.limit)


def _add_constraint(spark: SparkSession, st: AddConstraint) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.add_constraint(spark, path, st.name, st.expression)
    return _done(spark, path, version, "ADD CONSTRAINT")


def _drop_constraint(spark: SparkSession, st: DropConstraint) -> DataFrame | None:
    path = _existing(st.table)
    version = dml.drop_constraint(path, st.name, if_exists=st.if_exists)
    return _done(spark, path, version, "DROP CONSTRAINT")


def _convert(spark: SparkSession, st: ConvertToDelta) -> DataFrame | None:
    table, version = dml.convert_to_delta(spark, dml.parquet_identifier_path(st.identifier), st.partition_schema)
    return _done(spark, table, version, "CONVERT")


def _generate(spark: SparkSession, st: Generate) -> DataFrame:
    dml.generate(_existing(st.table), st.mode)
    return empty(spark)


def _show_properties(spark: SparkSession, st: ShowProperties) -> DataFrame:
    """The table's properties, with its protocol as ``delta.minReaderVersion`` / ``delta.feature.*``."""
    path = try_resolve(st.table)
    if path is None:
        return spark.sql(st.text)
    snap = isolation.read_snapshot(spark, path, name=st.table.name)
    shown = dict(snap.configuration)
    protocol = snap.protocol
    shown["delta.minReaderVersion"] = str(protocol.min_reader_version)
    shown["delta.minWriterVersion"] = str(protocol.min_writer_version)
    if protocol.min_writer_version >= 7:
        for feature in features.table_features(protocol):
            shown[f"delta.feature.{feature}"] = "supported"
    schema = "key string, value string"
    if st.key is not None:
        value = next((v for k, v in shown.items() if k.lower() == st.key.lower()), None)
        if value is None:
            value = f"Table {st.table.text} does not have property: {st.key}"
        return spark.createDataFrame([(st.key, value)], schema)
    return spark.createDataFrame(sorted(shown.items()), schema)


def _describe_detail(spark: SparkSession, st: DescribeDetail) -> DataFrame:
    table, _ = _table(spark, st.table)
    return table.detail()


def _describe_table(spark: SparkSession, st: DescribeTable) -> DataFrame:
    path = try_resolve(st.table)
    if path is None:
        return spark.sql(st.text)
    snap = isolation.read_snapshot(spark, path, name=st.table.name)
    rows: list[tuple[str, str, str | None]] = [
        (f.name, f.data_type.simple_string(), f.metadata.get("comment")) for f in snap.schema.fields
    ]
    if snap.partition_columns:
        rows.append(("# Partition Information", "", ""))
        rows.append(("# col_name", "data_type", "comment"))
        for name in snap.partition_columns:
            f = snap.schema.field(name)
            rows.append((name, f.data_type.simple_string() if f else "", None))
    if st.extended:
        rows.append(("", "", ""))
        rows.append(("# Detailed Table Information", "", ""))
        rows.append(("Name", st.table.name or "", ""))
        rows.append(("Location", snap.table_path, ""))
        rows.append(("Provider", "delta", ""))
        rows.append(("Version", str(snap.version), ""))
        rows.append(("Isolation Level", snap.isolation_level, ""))
        conf = ", ".join(f"{k}={v}" for k, v in sorted(snap.configuration.items()))
        rows.append(("Table Properties", f"[{conf}]", ""))
    schema = T.StructType(
        [T.StructField("col_name", T.StringType()), T.StructField("data_type", T.StringType()),
         T.StructField("comment", T.StringType())]  # fmt: skip
    )
    return spark.createDataFrame(rows, schema)


def _vacuum(spark: SparkSession, st: Vacuum) -> DataFrame | None:
    table, _ = _table(spark, st.table)
    return table.vacuum(st.retain_hours, dryRun=st.dry_run)


def _restore(spark: SparkSession, st: Restore) -> DataFrame | None:
    path = _existing(st.table)
    if st.version is not None:
        result = dml.run_restore(path, version=st.version)
    else:
        assert st.timestamp is not None
        ms = timestamp_millis(spark, st.timestamp)
        result = dml.run_restore(path, timestamp=format_ms(ms).removesuffix(" UTC"))
    return _done(spark, path, result.version, "RESTORE", lambda s: dml.restore_metrics_df(s, result))


def _set_isolation(spark: SparkSession, st: SetIsolation) -> DataFrame:
    isolation.set_session_isolation(spark, st.requested)
    return empty(spark)


def _show_isolation(spark: SparkSession, st: ShowIsolation) -> DataFrame:
    return rows(spark, [("transaction_isolation", isolation.session_isolation(spark))])


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _done(
    spark: SparkSession,
    path: str,
    version: int | None,
    operation: str,
    build: Callable[[SparkSession], DataFrame] = empty,
) -> DataFrame | None:
    """The result of a statement that committed ``version`` of the table at ``path`` (None: nothing).

    Noting the write for the session's reads and building the result (``build``, an empty one
    by default) are steps after the commit (``core.txn.post_commit``): a failure warns, and the
    statement returns None instead of its result DataFrame rather than raise.
    """
    isolation.note_committed(spark, path, version, operation)
    return after_commit(
        "build the result DataFrame", path, version, build, spark, operation=operation,
        instead="(None instead of the result DataFrame)",
    )  # fmt: skip


def _existing(ref: Any) -> str:
    path = resolve(ref)
    if not DeltaLog.for_table(path).table_exists():
        label = f"Table {ref.name} (location {path})" if ref.name else path
        raise DeltaTableNotFoundError(f"{label} is not a Delta table (no _delta_log commits found).")
    return path


def _table(spark: SparkSession, ref: Any) -> tuple[DeltaTable, DeltaLog]:
    """The table ``ref`` names (its existence checked once) and its log."""
    path = _existing(ref)
    table = DeltaTable(spark, path)
    return table, table.deltaLog


_HANDLERS: dict[type, Callable[[SparkSession, Any], DataFrame | None]] = {
    Query: _query,
    Passthrough: _passthrough,
    CreateTempView: _create_temp_view,
    CreateTable: _create_table,
    DropTable: _drop_table,
    Insert: run_insert,
    Delete: _delete,
    Update: _update,
    Merge: _merge,
    SetProperties: _set_properties,
    UnsetProperties: _unset_properties,
    AddColumns: _add_columns,
    ChangeColumn: _change_column,
    RenameColumn: _rename_column,
    DropColumns: _drop_columns,
    ClusterBy: _cluster_by,
    Clone: _clone,
    RenameTable: _rename_table,
    SetLocation: _set_location,
    DropFeature: _drop_feature,
    Optimize: _optimize,
    Reorg: _reorg,
    UpgradeUniform: _upgrade_uniform,
    SyncMetadata: _sync_metadata,
    DescribeHistory: _describe_history,
    DescribeDetail: _describe_detail,
    AddConstraint: _add_constraint,
    DropConstraint: _drop_constraint,
    ShowProperties: _show_properties,
    ConvertToDelta: _convert,
    Generate: _generate,
    DescribeTable: _describe_table,
    Vacuum: _vacuum,
    Restore: _restore,
    SetIsolation: _set_isolation,
    ShowIsolation: _show_isolation,
    BeginTransaction: _begin,
    CommitTransaction: _commit,
    RollbackTransaction: _rollback,
    Atomic: _atomic,
}

_TRANSACTION_CONTROL = (BeginTransaction, CommitTransaction, RollbackTransaction, Atomic)

#: Statements that may run inside a transaction across tables (the others are refused there).
_IN_TRANSACTION = (
    Query, Passthrough, CreateTempView, Insert, Delete, Update, Merge, DescribeHistory, DescribeDetail,
    DescribeTable, ShowProperties, SetIsolation, ShowIsolation,
)  # fmt: skip
