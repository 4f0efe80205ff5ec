"""``write``: a DataFrame into a Delta table (append, overwrite, replaceWhere) as one commit.

Data files are written first (``serialake.spark.data_write.write_data_files``); the commit through
the core transaction then makes them visible atomically. A failed or conflicting commit
leaves only unreferenced files, which are deleted here when nothing was committed
(``core.written.commit_or_clean_up``; ``vacuum`` would remove them otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.dv.dv_policy import uses_deletion_vectors
from serialake.core.log import cdf as core_cdf
from serialake.core.model import clustering, constraints, features
from serialake.core.model import properties as props
from serialake.core.model.actions import Action, AddCDCFile, AddFile, Metadata, RemoveFile, SetTransaction, now_ms
from serialake.core.model.schema import ArrayType, DataType, MapType, StructField, StructType, merge_schemas
from serialake.core.predicates import expressions as P
from serialake.core.txn.post_commit import after_commit
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.core.txn.written import commit_or_clean_up, remove_written
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from serialake.spark import data_read, data_write, invariants, scans, transaction, write_settings
from serialake.spark.backend import backend
from serialake.spark.columns import WIDENING, quote_name
from serialake.spark.invariants import check_rows
from serialake.spark.replace_rows import (
    Matched,
    ReplaceRows,
    check_combination,
    match_rows,
    resolve_replace,
    write_changes,
)
from serialake.spark.replace_rows import metrics as replace_metrics
from serialake.spark.schemas import conform, to_delta_schema, to_spark_schema
from serialake.spark.streaming import batch_txn

__all__ = [
    "MODES",
    "add_schema_features",
    "align_to_schema",
    "check_not_null",
    "check_rows",
    "write",
    "write_checked_files",
]

MODES = {"append": "Append", "overwrite": "Overwrite", "error": "ErrorIfExists", "errorifexists": "ErrorIfExists",
         "ignore": "Ignore"}

def write(
    df: DataFrame,
    path: str,
    mode: str = "append",
    partitionBy: str | Sequence[str] | None = None,
    replaceWhere: str | None = None,
    mergeSchema: bool = False,
    overwriteSchema: bool = False,
    properties: Mapping[str, Any] | None = None,
    userMetadata: str | None = None,
    txnAppId: str | None = None,
    txnVersion: int | None = None,
    maxRecordsPerFile: int | None = None,
    partitionOverwriteMode: str | None = None,
    clusterBy: str | Sequence[str] | None = None,
    replaceUsing: str | None = None,
    replaceOn: str | None = None,
    targetAlias: str | None = None,
    *,
    table_operation: str | None = None,
    streaming_update: Mapping[str, str] | None = None,
    replace_source: DataFrame | None = None,
    replace_by_position: bool = False,
    new_table_properties: Mapping[str, Any] | None = None,
) -> int | None:
    """Write ``df`` to the Delta table at ``path``; returns the committed version (None: skipped).

    Modes as ``df.write.format("delta").mode(...)``: ``append``; ``overwrite`` (everything,
    or with ``replaceWhere`` only the rows matching that SQL condition; written rows must
    match it); ``error``/``errorifexists`` and ``ignore`` for an existing table. The first
    write creates the table. ``mergeSchema`` adds new columns, ``overwriteSchema`` (with
    ``overwrite``) replaces schema and partitioning. ``properties`` are table properties
    (set at creation, or changed in this commit). ``txnAppId``/``txnVersion`` make the write
    idempotent: it is skipped when that application already committed that version.
    ``partitionOverwriteMode="dynamic"`` (with ``overwrite``) replaces only the partitions
    the written rows fall in, as Spark's dynamic partition overwrite does; ``static`` (the
    default) replaces the whole table. ``clusterBy`` makes a created (or schema-overwritten)
    table a liquid-clustered one (``serialake.core.model.clustering``); given for an existing
    table, it must name its clustering columns.
    ``table_operation`` (``CREATE TABLE AS SELECT``, ``CREATE OR REPLACE TABLE AS SELECT``,
    ...) commits the write as a creation or replacement of the whole table: a concurrent
    one fails with ``ProtocolChangedException``. ``streaming_update`` (the streaming sink's
    ``outputMode``, ``queryId``, ``epochId``) records the commit as ``STREAMING UPDATE``.
    Inside ``serialake.streaming.idempotent`` a write without ``txnAppId`` commits with the
    micro-batch's txn (``streaming.batch_txn``).
    ``replaceUsing`` (columns, comma-separated) or ``replaceOn`` (a condition; ``targetAlias``
    names the table in it) with ``overwrite`` replace the table's rows that some written row
    matches, as delta-spark's options do (``spark.replace_rows``); ``replace_source`` is the
    DataFrame the rows are matched from when ``df`` was derived from it (``insertInto``,
    whose columns go by position: ``replace_by_position``). ``targetAlias`` also names the
    table in a ``replaceWhere`` condition. ``new_table_properties`` (the ``delta.*`` options
    of ``df.write``) apply only when this write creates the table, as delta-spark's do.

    The session's Delta settings apply as delta-spark reads them when it writes
    (``spark.write_settings``): those not implemented are refused; without ``txnAppId`` and
    ``txnVersion``, ``spark.databricks.delta.write.txnAppId`` / ``write.txnVersion`` make the
    write idempotent (``write.txnVersion.autoReset.enabled`` unsets the version after it).
    """
    spark = df.sparkSession
    write_settings.check_session_settings(spark, table=path)
    app_id, app_version = txnAppId, txnVersion
    from_session = False
    if app_id is None and app_version is None and streaming_update is None:
        app_id, app_version = write_settings.session_txn(spark)
        from_session = app_id is not None
    replace = ReplaceRows.of(
        replaceUsing, replaceOn, targetAlias, source=replace_source, by_position=replace_by_position
    )
    # A source that is not deterministic is read once (delta-spark materializes it too): the
    # rows matched are the rows written.
    source = replace.source if replace is not None and replace.source is not None else df
    replacing = replace is not None and mode.lower() == "overwrite"
    cached = source.persist() if replacing and not _deterministic(source) else None
    version: int | None = None
    operation = table_operation or ("STREAMING UPDATE" if streaming_update is not None else "WRITE")
    try:
        version = _write(
            df, path, mode, partitionBy, replaceWhere, mergeSchema, overwriteSchema, properties, userMetadata,
            app_id, app_version, maxRecordsPerFile, partitionOverwriteMode, clusterBy, targetAlias, replace,
            table_operation=table_operation, streaming_update=streaming_update,
            new_table_properties=new_table_properties,
        )  # fmt: skip
    finally:
        # Once committed, what follows are steps after the commit: they warn, never raise (core.txn.post_commit).
        if cached is not None:
            after_commit("unpersist the cached source", path, version, cached.unpersist, operation=operation)
    if from_session:
        after_commit(
            "reset write.txnVersion (autoReset)", path, version, _reset_session_txn_version, spark, operation=operation
        )
    return version


def _reset_session_txn_version(spark: Any) -> None:
    """``write.txnVersion.autoReset.enabled``: unset the session's ``write.txnVersion`` after a write."""
    if write_settings.session_flag(spark, "write.txnVersion.autoReset.enabled", False):
        spark.conf.unset(write_settings.SETTINGS_PREFIX + "write.txnVersion")


def _deterministic(df: DataFrame) -> bool:
    """Whether Spark computes the same rows each time it runs ``df``'s plan (as far as its analysis knows)."""
    try:
        return backend(df.sparkSession).is_deterministic(df)
    except Exception:  # noqa: BLE001 - not known (Spark Connect): not deterministic, the safe answer (persisted)
        return False


def _write(
    df: DataFrame,
    path: str,
    mode: str,
    partitionBy: str | Sequence[str] | None,
    replaceWhere: str | None,
    mergeSchema: bool,
    overwriteSchema: bool,
    properties: Mapping[str, Any] | None,
    userMetadata: str | None,
    txnAppId: str | None,
    txnVersion: int | None,
    maxRecordsPerFile: int | None,
    partitionOverwriteMode: str | None,
    clusterBy: str | Sequence[str] | None,
    targetAlias: str | None,
    replace: ReplaceRows | None,
    *,
    table_operation: str | None,
    streaming_update: Mapping[str, str] | None,
    new_table_properties: Mapping[str, Any] | None,
) -> int | None:
    """``write`` once the session's settings are applied (see there)."""
    if replace is not None:
        check_combination(
            replace, overwrite=mode.lower() == "overwrite", replace_where=replaceWhere,
            partition_overwrite_mode=partitionOverwriteMode, overwrite_schema=overwriteSchema,
        )  # fmt: skip
    mode_key = _check_arguments(mode, replaceWhere, overwriteSchema, txnAppId, txnVersion)
    dynamic = _dynamic_overwrite(mode_key, partitionOverwriteMode, replaceWhere, overwriteSchema)
    parts = [partitionBy] if isinstance(partitionBy, str) else list(partitionBy or [])
    _check_unique_columns(df.schema, path)

    log = DeltaLog.for_table(path)
    txn = transaction.start(log, "WRITE", df.sparkSession)
    snap = txn.snapshot
    table = log.table_path
    replacing = replace is not None and mode_key == "overwrite"
    if replacing and snap is None:
        raise DeltaTableNotFoundError(f"[DELTA_PATH_DOES_NOT_EXIST] {table} doesn't exist, or is not a Delta table.")
    if snap is not None:
        if mode_key in ("error", "errorifexists"):
            raise DeltaAnalysisException(
                f"Table {table} already exists (save mode '{mode}'). Use mode 'append' or 'overwrite'."
            )
        if mode_key == "ignore":
            return None
    if txnAppId is not None:
        done = txn.txn_version(txnAppId)
        if done is not None and done >= int(txnVersion):  # type: ignore[arg-type]
            return None
    elif batch_txn.join(txn):
        return None  # this micro-batch's write is already committed
    # Tables the data was computed from: a read of this one makes the write not blind.
    scans.record_scans(txn, df)

    replace_schema = snap is None or (overwriteSchema and replaceWhere is None)
    metadata: Metadata | None
    identity_values: invariants.IdentityValues | None = None
    if replace_schema:
        # overwriteSchema keeps the partitioning unless told otherwise (or told to cluster).
        if not parts and snap is not None and not clusterBy:
            parts = [c for c in snap.partition_columns if c.lower() in {n.lower() for n in df.columns}]
        if snap is None and new_table_properties:
            properties = {**new_table_properties, **(properties or {})}
        data, metadata = _new_table(df, table, parts, properties, snap.metadata if snap else None)
        # The schema is the data's: only CHECK constraints (kept by overwriteSchema) can apply.
        data = invariants.enforce(
            data, StructType.from_json(metadata.schema_string or ""), metadata.configuration, table, given=data.columns
        )
    else:
        assert snap is not None
        identity_values = invariants.IdentityValues(snap.schema, table, given=df.columns, from_user=True)
        data, metadata = _existing_table(df, snap.metadata, table, parts, mergeSchema, properties, identity_values)
    if metadata is not None:
        txn.update_metadata(metadata, replace_table=table_operation is not None)
        assert metadata.schema_string is not None  # built from a schema just above
        add_schema_features(txn, StructType.from_json(metadata.schema_string))
    domains = _clustering(txn, snap, clusterBy, replace_schema, table)
    final_meta = txn.metadata
    # The new metadata, or the table's, whose schema _existing_table parsed.
    assert final_meta is not None and final_meta.schema_string is not None
    schema = StructType.from_json(final_meta.schema_string)
    part_cols = list(final_meta.partition_columns)

    removes: list[Action] = []
    params: dict[str, Any] = {"mode": MODES[mode_key], "partitionBy": _json_list(part_cols)}
    if replaceWhere is not None:
        params["predicate"] = _json_list([replaceWhere])
    if dynamic:
        params["dynamicPartitionOverwrite"] = "true"
    if replace is not None:
        params.update(replace.parameters)
    matched: Matched | None = None
    new_rows = data
    if replacing:
        assert snap is not None and replace is not None
        matched, data = _replace_matching(txn, snap, replace, df, data)
        removes = list(matched.actions)
    elif mode_key == "overwrite" and not dynamic:
        if replaceWhere is None:
            removed = txn.read_whole_table()
        else:
            removed, data = _replace_where(txn, data, replaceWhere, schema, part_cols, targetAlias)
        stamp = now_ms()
        removes = [f.remove(timestamp=stamp) for f in removed]

    written_dvs = matched.written_dvs if matched is not None else []
    try:
        adds = write_checked_files(
            data,
            table,
            part_cols,
            max_records_per_file=maxRecordsPerFile,
            configuration=final_meta.configuration,
            schema=schema,
        )
    except DeltaAnalysisException as e:
        remove_written(table, [], written_dvs)
        if matched is None or replace is None:
            raise
        raise DeltaAnalysisException(
            "[DELTA_REPLACE_ON_OR_USING_TABLE_CONSTRAINT_VIOLATION] Written data violates a table constraint during "
            f"REPLACE ON/USING '{replace.text}'.\n{e}"
        ) from None
    except BaseException:
        remove_written(table, [], written_dvs)
        raise
    changes: list[AddCDCFile] = []
    if matched is not None and matched.record_changes:
        assert snap is not None
        try:
            changes = write_changes(snap, matched.deleted, new_rows)
        except BaseException:
            remove_written(table, adds, written_dvs)
            raise
    if identity_values is not None:
        identity_values.record(txn)
    if dynamic and snap is not None:
        try:
            removed = _partitions_written(txn, adds, schema, part_cols)
        except BaseException:
            remove_written(table, adds)
            raise
        stamp = now_ms()
        removes = [f.remove(timestamp=stamp) for f in removed]
    actions: list[Action] = [*removes, *adds, *changes, *domains]
    if txnAppId is not None:
        actions.append(SetTransaction(app_id=txnAppId, version=int(txnVersion), last_updated=now_ms()))  # type: ignore[arg-type]
    if matched is not None:
        metrics = replace_metrics(adds, matched, changes)
    else:
        metrics = _metrics(adds, [r for r in removes if isinstance(r, RemoveFile)])
    if matched is not None and not actions and snap is not None and (txn.metadata, txn.protocol) == (
        snap.metadata,
        snap.protocol,
    ):
        # As delta-spark: a replaceOn / replaceUsing overwrite that replaces no row and writes none
        # commits nothing.
        return int(snap.version)
    operation = table_operation or "WRITE"
    if streaming_update is not None:
        operation, params = "STREAMING UPDATE", dict(streaming_update)
    return commit_or_clean_up(
        txn, actions, operation, params, metrics, new_files=[*adds, *changes], new_dvs=written_dvs,
        user_metadata=userMetadata,
    )  # fmt: skip


def _replace_matching(
    txn: OptimisticTransaction, snap: Any, replace: ReplaceRows, df: DataFrame, data: DataFrame
) -> tuple[Matched, DataFrame]:
    """replaceUsing / replaceOn in overwrite: the rows replaced (``replace_rows.match_rows``) and the
    data to write (the new rows, and with copy-on-write the other rows of the files they leave)."""
    source = replace.source if replace.source is not None else df
    spark = df.sparkSession
    cond = resolve_replace(spark, replace, snap, source)
    if core_cdf.enabled(snap.metadata) and not uses_deletion_vectors(snap) and len(data.columns) != len(
        snap.schema.fields
    ):
        raise UnsupportedFeatureError(
            f"Table {snap.table_path} records change data: a {replace.option} write that adds columns "
            "(mergeSchema) is not supported on it without deletion vectors. Add the columns first "
            "(ALTER TABLE ... ADD COLUMNS), or enable delta.enableDeletionVectors."
        )
    matched = match_rows(spark, txn, snap, replace, source, cond)
    if matched.kept is None:
        return matched, data
    names = [_q(c) for c in data.columns]
    return matched, data.unionByName(matched.kept, allowMissingColumns=True).select(*names)


def _dynamic_overwrite(mode_key: str, setting: str | None, replace_where: str | None, overwrite_schema: bool) -> bool:
    """Whether an overwrite replaces only the partitions it writes (``partitionOverwriteMode``)."""
    if setting is None:
        return False
    kind = setting.strip().lower()
    if kind not in ("static", "dynamic"):
        raise DeltaIllegalArgumentException(f"partitionOverwriteMode must be 'static' or 'dynamic', not {setting!r}")
    if kind == "static" or mode_key != "overwrite":
        return False
    if replace_where is not None:
        raise DeltaIllegalArgumentException(
            "replaceWhere and partitionOverwriteMode='dynamic' cannot both be set: replaceWhere names the rows "
            "to replace, dynamic overwrite the partitions written"
        )
    if overwrite_schema:
        raise DeltaIllegalArgumentException(
            "overwriteSchema cannot be used with partitionOverwriteMode='dynamic': "
            "a new schema replaces the whole table"
        )
    return True


def _partitions_written(
    txn: OptimisticTransaction, adds: Sequence[AddFile], schema: StructType, part_cols: Sequence[str]
) -> list[AddFile]:
    """The table's files in the partitions ``adds`` fall in (every file for an unpartitioned table).

    The files are chosen by a predicate over the partition columns, which the transaction
    records as read: a concurrent write into one of those partitions conflicts, one into
    another partition does not.
    """
    if not part_cols:
        return txn.read_whole_table()
    if not adds:
        return []
    from serialake.core.model.partition_values import parse_partition_value

    types = {c: schema.field(c).data_type for c in part_cols}  # type: ignore[union-attr]
    seen: set[tuple[tuple[str, str | None], ...]] = set()
    terms: list[P.Expr] = []
    for add in adds:
        values = {k.lower(): v for k, v in (add.partition_values or {}).items()}
        key = tuple((c, values.get(c.lower())) for c in part_cols)
        if key in seen:
            continue
        seen.add(key)
        parts: list[P.Expr] = []
        for c, raw in key:
            value = parse_partition_value(raw, types[c])
            column = P.Column(c)
            parts.append(P.IsNull(column) if value is None else P.Comparison("=", column, P.Literal(value)))
        terms.append(P.conjunction(parts))
    return txn.filter_files([P.disjunction(terms)])


def _check_arguments(
    mode: str, replace_where: str | None, overwrite_schema: bool, app_id: str | None, app_version: int | None
) -> str:
    """The save mode's key, after checking the options fit together."""
    mode_key = mode.lower()
    if mode_key not in MODES:
        raise DeltaIllegalArgumentException(f"Unknown save mode '{mode}'. Valid modes: {', '.join(MODES)}")
    if (app_id is None) != (app_version is None):
        raise DeltaIllegalArgumentException("Give both txnAppId and txnVersion for an idempotent write, or neither")
    if replace_where is not None and mode_key != "overwrite":
        raise DeltaIllegalArgumentException(f"replaceWhere needs mode 'overwrite', not '{mode}'")
    if overwrite_schema and mode_key != "overwrite":
        raise DeltaIllegalArgumentException(f"overwriteSchema needs mode 'overwrite', not '{mode}'")
    return mode_key


# ---------------------------------------------------------------------------------------------
# Schema: new tables, existing tables, alignment
# ---------------------------------------------------------------------------------------------


def _clustering(
    txn: OptimisticTransaction, snap: Any, cluster_by: str | Sequence[str] | None, replacing: bool, table: str
) -> Sequence[Action]:
    """The ``delta.clustering`` domain a write sets: for a new (or replaced) table, from ``clusterBy``."""
    columns = [cluster_by] if isinstance(cluster_by, str) else list(cluster_by or [])
    if not replacing:
        current = clustering.clustering_columns(snap.domain_metadata, snap.schema, table)
        if columns and [c.lower() for c in columns] != [c.lower() for c in (current or [])]:
            raise DeltaAnalysisException(
                f"Table {table} is clustered by [{', '.join(current or [])}], not [{', '.join(columns)}]. Change its "
                "clustering with ALTER TABLE ... CLUSTER BY, or overwrite it with overwriteSchema."
            )
        return []
    if not columns:
        return clustering.clustering_removed(snap)
    return [clustering.cluster_table(txn, columns, table)[1]]


def _new_table(
    df: DataFrame,
    table: str,
    parts: list[str],
    properties: Mapping[str, Any] | None,
    old: Metadata | None,
) -> tuple[DataFrame, Metadata]:
    """Metadata for a table created (or whose schema is overwritten) by this write."""
    schema = to_delta_schema(_as_nullable(df.schema))
    resolved = []
    for name in parts:
        f = schema.field(name)
        if f is None:
            raise DeltaAnalysisException(
                f"Partition column '{name}' is not a column of the data written to {table} "
                f"(columns: {', '.join(schema.field_names)})"
            )
        if isinstance(f.data_type, (StructType, ArrayType, MapType)):
            raise DeltaAnalysisException(
                f"Cannot partition table {table} by column '{f.name}' of type {f.data_type.simple_string()}"
            )
        resolved.append(f.name)
    conf = dict(old.configuration) if old is not None else {}
    conf.update(props.validate_properties(properties or {}, table=table))
    if old is not None:
        metadata = replace(old, schema_string=schema.to_json(), partition_columns=tuple(resolved), configuration=conf)
    else:
        metadata = Metadata(schema_string=schema.to_json(), partition_columns=tuple(resolved), configuration=conf)
    return df, metadata


def _existing_table(
    df: DataFrame,
    meta: Metadata,
    table: str,
    parts: list[str],
    merge: bool,
    properties: Mapping[str, Any] | None,
    identity_values: invariants.IdentityValues | None = None,
) -> tuple[DataFrame, Metadata | None]:
    """The data aligned to the table, and new metadata when the schema or properties change."""
    if parts and [p.lower() for p in parts] != [p.lower() for p in meta.partition_columns]:
        raise DeltaAnalysisException(
            f"Partition columns [{', '.join(parts)}] do not match the partitioning of table {table} "
            f"([{', '.join(meta.partition_columns)}]). Leave partitionBy out, or overwrite with "
            "overwriteSchema=True to repartition."
        )
    schema = meta.schema
    conf = dict(meta.configuration)
    if properties:
        changed = props.validate_properties(properties, table=table)
        constraints.refuse_constraint_properties(
            {k: v for k, v in changed.items() if conf.get(k) != v}, table
        )
        conf.update(changed)
    data, merged = align_to_schema(
        df, schema, table=table, merge=merge, configuration=conf, identity_values=identity_values
    )
    if merged is None and conf == meta.configuration:
        return data, None
    return data, replace(meta, schema_string=(merged or schema).to_json(), configuration=conf)


def align_to_schema(
    df: DataFrame,
    schema: StructType,
    *,
    table: str,
    merge: bool = False,
    configuration: Mapping[str, str] | None = None,
    identity_values: invariants.IdentityValues | None = None,
) -> tuple[DataFrame, StructType | None]:
    """``df`` with the table's columns in table order (missing nullable ones as NULL).

    Returns the new schema when ``merge`` added columns, or struct fields at any depth (also
    in arrays and maps), else None. Raises
    ``SchemaMismatchError`` naming every missing, extra or mistyped column. Generated
    columns the data lacks are computed, and those it gives checked; the table's CHECK
    constraints (in ``configuration``) and NOT NULL columns are checked row by row while
    the data is written (``invariants.enforce``).
    """
    spark_schema = to_spark_schema(schema)
    generated = {g.name.lower() for g in constraints.generated_columns(schema)}
    given = {f.name.lower(): f for f in df.schema.fields}
    given_names = [f.name for f in df.schema.fields]
    columns: list[Column] = []
    problems: list[str] = []
    not_null: list[str] = []
    fields = list(schema.fields)
    evolved = False
    for index, tf in enumerate(spark_schema.fields):
        sf = given.pop(tf.name.lower(), None)
        if sf is None:
            if not tf.nullable and tf.name.lower() in generated:
                not_null.append(tf.name)  # computed below, then checked
            elif not tf.nullable:
                problems.append(f"column '{tf.name}' ({tf.dataType.simpleString()} NOT NULL) is missing")
            columns.append(F.lit(None).cast(tf.dataType).alias(tf.name))
            continue
        conformed = _conform(sf, tf)
        if conformed is None and merge:
            wider = _with_nested_fields(fields[index], sf)
            if wider is not None:  # the data's struct has fields the table's lacks: they join it
                target = to_spark_schema(StructType((wider,))).fields[0]
                conformed = conform(F.col(_q(sf.name)), sf.dataType, target.dataType).alias(tf.name)
                fields[index], evolved = wider, True
        if conformed is None:
            problems.append(
                f"column '{tf.name}' has type {sf.dataType.simpleString()} in the data but "
                f"{tf.dataType.simpleString()} in the table"
            )
            continue
        columns.append(conformed)
        if not tf.nullable and sf.nullable:
            not_null.append(tf.name)
    extra = [f for f in df.schema.fields if f.name.lower() in given]
    if extra and not merge:
        problems.append(
            "the data has column(s) not in the table: "
            + ", ".join(f"'{f.name}' ({f.dataType.simpleString()})" for f in extra)
            + " (set mergeSchema=True to add them)"
        )
    if problems:
        raise SchemaMismatchError(
            f"A schema mismatch was detected when writing to table {table}: " + "; ".join(problems) + ".\n"
            f"Table schema: {schema.simple_string()}\nData schema: {df.schema.simpleString()}"
        )
    merged = StructType(tuple(fields)) if evolved else None
    if extra:
        added = to_delta_schema(_as_nullable(T.StructType(extra)))
        merged = StructType(tuple(fields) + added.fields)
        columns.extend(F.col(_q(f.name)) for f in extra)
    aligned = invariants.enforce(
        df.select(*columns), merged or schema, configuration or {}, table, given=given_names,
        identity_values=identity_values,
    )
    return check_not_null(aligned, not_null, table), merged


def _with_nested_fields(table_field: StructField, data_field: T.StructField) -> StructField | None:
    """``table_field`` with the struct fields ``data_field`` adds at any depth (``merge_schemas``),
    when every field the data holds then fits its table field; else None."""
    data = to_delta_schema(T.StructType([data_field])).fields[0]
    merged = merge_schemas(StructType((table_field,)), StructType((data,))).fields[0]
    if merged == table_field or not _fits(data.data_type, merged.data_type):
        return None
    return merged


def _fits(given: DataType, target: DataType) -> bool:
    """Whether data of type ``given`` is stored as ``target`` unchanged or widened (structs by name)."""
    if isinstance(given, StructType) and isinstance(target, StructType):
        return all((t := target.field(g.name)) is not None and _fits(g.data_type, t.data_type) for g in given.fields)
    if isinstance(given, ArrayType) and isinstance(target, ArrayType):
        return _fits(given.element_type, target.element_type)
    if isinstance(given, MapType) and isinstance(target, MapType):
        return _fits(given.key_type, target.key_type) and _fits(given.value_type, target.value_type)
    a, b = given.simple_string(), target.simple_string()
    return a == b or target.to_json_value() in WIDENING.get(str(given.to_json_value()), ())


def _conform(given: T.StructField, target: T.StructField) -> Column | None:
    """The data column as the table column (name, widened type), or None if incompatible."""
    col = F.col(_q(given.name))
    if _same_type(given.dataType, target.dataType):
        return col.alias(target.name) if given.name != target.name else col
    if target.dataType.typeName() in WIDENING.get(given.dataType.typeName(), ()):
        return col.cast(target.dataType).alias(target.name)
    return None


def _same_type(a: T.DataType, b: T.DataType) -> bool:
    """Equal types, ignoring nullability and field metadata (names compare case-insensitively)."""
    return _shape(json.loads(a.json())) == _shape(json.loads(b.json()))


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (v.lower() if k == "name" and isinstance(v, str) else _shape(v))
            for k, v in value.items()
            if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")
        }
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


def nullable_type(data_type: T.DataType) -> T.DataType:
    """``data_type`` with every field, element and value nullable, recursively (as Delta creates
    tables from DataFrames, and as Spark reads Parquet files)."""
    if isinstance(data_type, T.StructType):
        return T.StructType(
            [T.StructField(f.name, nullable_type(f.dataType), True, f.metadata) for f in data_type.fields]
        )
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(nullable_type(data_type.elementType), True)
    if isinstance(data_type, T.MapType):
        return T.MapType(nullable_type(data_type.keyType), nullable_type(data_type.valueType), True)
    return data_type


def _as_nullable(schema: T.StructType) -> T.StructType:
    """Every field of ``schema`` nullable, recursively (``nullable_type``)."""
    result = nullable_type(schema)
    assert isinstance(result, T.StructType)
    return result


def _check_unique_columns(schema: T.StructType, table: str) -> None:
    seen: dict[str, str] = {}
    for name in schema.fieldNames():
        if name.lower() in seen:
            raise DeltaAnalysisException(
                f"Found duplicate column(s) in the data written to {table}: '{seen[name.lower()]}' and '{name}'"
            )
        seen[name.lower()] = name


def add_schema_features(txn: OptimisticTransaction, schema: StructType) -> None:
    """Add the table features the schema needs (timestampNtz, generatedColumns) to the commit's protocol."""
    needed = features.schema_features(schema)
    protocol = txn.protocol
    if protocol is not None:
        needed = [f for f in needed if not features.has_feature(protocol, f)]
    if not needed:
        return
    meta = txn.metadata
    txn.update_protocol(features.required_protocol(meta.configuration if meta else {}, needed, base=protocol))


_q = quote_name


# ---------------------------------------------------------------------------------------------
# Row checks, replaceWhere, files
# ---------------------------------------------------------------------------------------------


def check_not_null(df: DataFrame, columns: Sequence[str], table: str) -> DataFrame:
    """``df`` whose write fails (``DeltaAnalysisException`` naming the column) on a NULL in ``columns``."""
    if not columns:
        return df
    return check_rows(
        df,
        [F.col(_q(c)).isNotNull() for c in columns],
        [f"NOT NULL constraint violated for column '{c}' of table {table}" for c in columns],
    )


def write_checked_files(
    df: DataFrame,
    table: str,
    partition_columns: Sequence[str],
    *,
    data_change: bool = True,
    max_records_per_file: int | None = None,
    configuration: Mapping[str, str] | None = None,
    schema: StructType | None = None,
) -> list[AddFile]:
    """``data_write.write_data_files`` where a failed ``check_rows`` check raises ``DeltaAnalysisException``."""
    try:
        return data_write.write_data_files(
            df,
            table,
            partition_columns,
            data_change=data_change,
            max_records_per_file=max_records_per_file,
            configuration=configuration,
            schema=schema,
        )
    except Exception as e:  # noqa: BLE001 - Spark wraps the check's error in several layers
        message = invariants.check_failure(e)
        if message is None:
            raise
        raise DeltaAnalysisException(message) from None


def _replace_where(
    txn: OptimisticTransaction,
    data: DataFrame,
    condition: str,
    schema: StructType,
    part_cols: Sequence[str],
    target_alias: str | None = None,
) -> tuple[list[AddFile], DataFrame]:
    """Files replaceWhere removes, and the data to write: new rows plus the kept old ones.

    Files are chosen by partition values and stats. When the condition reads data
    columns, the rows of those files that do not satisfy it are written back. Every
    written row must satisfy the condition, unless the session's
    ``spark.databricks.delta.replaceWhere.constraintCheck.enabled`` is false; with
    ``replaceWhere.dataColumns.enabled`` false the condition may name partition columns
    only (delta-spark's settings). ``target_alias`` (the ``targetAlias`` option) may qualify
    the table's columns in the condition.
    """
    table = txn.table_path
    spark = data.sparkSession
    expr: P.Expr | None = P.parse_predicate(condition)
    if target_alias:
        expr = P.strip_qualifier(expr, target_alias)  # type: ignore[arg-type]
        if expr is None:
            raise DeltaAnalysisException(
                f"replaceWhere '{condition}' on table {table} qualifies a column by another name than the "
                f"targetAlias '{target_alias}'"
            )
    assert expr is not None
    refs = {name for _, name in P.column_refs(expr)}
    unknown = sorted(n for n in refs if schema.field(n) is None)
    if unknown:
        raise DeltaAnalysisException(
            f"replaceWhere '{condition}' on table {table} refers to unknown column(s) "
            f"{', '.join(unknown)} (columns: {', '.join(schema.field_names)})"
        )
    parts = {c.lower() for c in part_cols}
    on_data_columns = write_settings.session_flag(spark, "replaceWhere.dataColumns.enabled", True)
    if not on_data_columns:
        outside = sorted(n for n in refs if n.lower() not in parts)
        if outside:
            raise DeltaAnalysisException(
                f"[DELTA_NON_PARTITION_COLUMN_REFERENCE] Predicate references non-partition column '{outside[0]}'. "
                f"Only the partition columns may be referenced: [{', '.join(part_cols)}]"
            )
    # Without the data-columns mode, delta-spark checks the written files' partitions whatever the setting.
    check = not on_data_columns or write_settings.session_flag(spark, "replaceWhere.constraintCheck.enabled", True)
    spark_cond = F.expr(condition)
    framed = data.alias(target_alias) if target_alias else data
    checked = check_rows(
        framed,
        [spark_cond],
        [f"[DELTA_REPLACE_WHERE_MISMATCH] Data written to table {table} does not match replaceWhere '{condition}'; "
         "every written row must satisfy it"],
    ) if check else data  # fmt: skip
    snap = txn.snapshot
    if snap is None:  # creating the table: nothing to replace
        return [], checked
    files = txn.filter_files([expr])
    if all(n.lower() in parts for n in refs) or not files:
        return files, checked
    old = data_read.read_files_df(spark, snap, files)
    kept = (old.alias(target_alias) if target_alias else old).filter(~F.coalesce(spark_cond, F.lit(False)))
    names = [_q(f.name) for f in schema.fields]
    combined = checked.select(*names).unionByName(kept.select(*names), allowMissingColumns=True).select(*names)
    return files, combined


def _json_list(values: Sequence[str]) -> str:
    """A list as delta-spark writes it in operationParameters (compact JSON)."""
    return json.dumps(list(values), separators=(",", ":"))


def _metrics(adds: Sequence[AddFile], removes: Sequence[RemoveFile]) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "numFiles": len(adds),
        "numOutputRows": sum(a.num_records or 0 for a in adds),
        "numOutputBytes": sum(a.size or 0 for a in adds),
    }
    if removes:
        metrics["numRemovedFiles"] = len(removes)
        metrics["numRemovedBytes"] = sum(r.size or 0 for r in removes)
    return metrics
