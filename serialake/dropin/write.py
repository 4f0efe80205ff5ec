"""What the drop-in entry points (``dropin``) run: Spark's save modes and Delta's options over ``write`` / ``read``.

Each function takes the state a reader or writer chain recorded (format, mode, options,
partitioning) and turns it into one ``serialake.write`` or ``serialake.read`` call, with
the semantics delta-spark gives the same chain.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core.tables import catalog
from serialake.core.txn.post_commit import after_commit
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException, DeltaTableNotFoundError
from serialake.spark import isolation
from serialake.spark.backend import backend
from serialake.spark.read import read
from serialake.spark.write import MODES, write
from serialake.spark.write_settings import check_write_options, session_flag
from serialake.spark.write_settings import option_flag as _flag
from serialake.spark.write_settings import recorded_option as _option
from serialake.spark.write_settings import recorded_write_options as _write_options

__all__ = ["insert_into", "load", "save", "save_as_table", "write_to"]


def _mode(st: dict[str, Any]) -> str:
    """The recorded save mode as ``write`` takes it (``error`` for Spark's default, ``errorifexists``)."""
    given = st["mode"]
    mode = (given or "error").strip().lower()
    if mode in ("default", "errorifexists"):
        return "error"
    if mode not in MODES:
        raise DeltaIllegalArgumentException(
            f"Unknown save mode: {given!r}. Accepted save modes are 'overwrite', 'append', 'ignore', 'error', "
            "'errorifexists', 'default'."
        )
    return mode


def _location(name: str, registered: str | None, given: str | None) -> str:
    """Where table ``name`` is: registered, else the location given, else managed (the warehouse)."""
    return registered or given or catalog.managed_location(name)


def _replace_options(spark: SparkSession, st: dict[str, Any]) -> dict[str, Any]:
    """The ``replaceUsing`` / ``replaceOn`` / ``targetAlias`` options, refused as delta-spark does when the
    session turns them off (``spark.databricks.delta.replaceOn.dataframe.writer.enabled``, ...)."""
    using, on = _option(st, "replaceUsing"), _option(st, "replaceOn")
    for name, value in (("replaceOn", on), ("replaceUsing", using)):
        if value is not None and not session_flag(spark, f"{name}.dataframe.writer.enabled", True):
            raise DeltaAnalysisException(
                f"[DELTA_OPERATION_NOT_ALLOWED] Operation not allowed: `{name}` is not supported for Delta tables"
            )
    return {"replaceUsing": using, "replaceOn": on, "targetAlias": _option(st, "targetAlias")}


def _table_properties(st: dict[str, Any]) -> dict[str, str]:
    """The ``delta.*`` options: table properties of a table the write creates (as delta-spark takes them)."""
    return {k: v for k, v in st["options"].items() if k.startswith("delta.")}


def save(
    df: DataFrame,
    path: str,
    st: dict[str, Any],
    *,
    replace_source: DataFrame | None = None,
    api: str = "df.write.format('delta')",
) -> int | None:
    """``df.write.format("delta")...save(path)``: Spark's save modes (``errorifexists`` by default).

    ``replace_source``: for ``insertInto``, the DataFrame before its columns were renamed to the
    table's by position (what ``replaceUsing`` / ``replaceOn`` match against).
    """
    spark = df.sparkSession
    check_write_options(spark, st["options"], api=api)
    mode = _mode(st)
    version = write(df, path, mode=mode, partitionBy=st["partitionBy"], clusterBy=st["clusterBy"] or None,
                    **_write_options(spark, st, mode), **_replace_options(spark, st),
                    replace_source=replace_source, replace_by_position=replace_source is not None,
                    new_table_properties=_table_properties(st) or None)  # fmt: skip
    isolation.note_committed(spark, path, version, "WRITE")
    return version


def save_as_table(df: DataFrame, name: str, st: dict[str, Any]) -> int | None:
    """``saveAsTable(name)``: the table registered as ``name``, else a new one (managed, or at the ``path`` option)."""
    mode = _mode(st)
    registered = catalog.lookup(name)
    given = _option(st, "path")
    if registered is not None and given is not None and DeltaLog.for_table(given).table_path != registered:
        raise DeltaAnalysisException(
            f"Table {name} already exists at {registered}: saveAsTable cannot give it the location {given}"
        )
    location = _location(name, registered, given)
    exists = DeltaLog.for_table(location).table_exists()
    if exists and registered is not None:
        if mode == "error":
            raise DeltaAnalysisException(
                f"[TABLE_OR_VIEW_ALREADY_EXISTS] Table {name} already exists (at {registered}). "
                "Use mode 'append' or 'overwrite'."
            )
        if mode == "ignore":
            return None
    elif exists and given is None and registered is None:
        raise DeltaAnalysisException(
            f"Cannot create table {name}: its managed location {location} already holds a Delta table. "
            "Register it with CREATE TABLE ... LOCATION, or remove that directory."
        )
    if not exists and (mode != "overwrite" or not _replacing(st)):
        mode = "append"  # creates it (an overwrite that replaces rows needs the table: delta-spark's error)
    version = save(df, location, {**st, "mode": mode}, api=f"saveAsTable({name!r})")
    if registered is None:
        _register(name, location, given, version, "WRITE")
    return version


def insert_into(df: DataFrame, name: str, location: str, st: dict[str, Any], overwrite: bool | None) -> int | None:
    """``insertInto(name)`` of the table at ``location``: the columns matched by position, as Spark
    does; appends unless ``overwrite``."""
    snap = DeltaLog.for_table(location).update()
    if snap is None:
        raise DeltaTableNotFoundError(f"Table {name}: {location} is not a Delta table")
    names = [f.name for f in snap.schema.fields]
    if len(df.columns) != len(names):
        raise DeltaAnalysisException(
            f"Cannot write to {name}: the table has {len(names)} column(s) ({', '.join(names)}), "
            f"the data {len(df.columns)} ({', '.join(df.columns)}); insertInto matches columns by position"
        )
    positional = df.select(*[F.col(f"`{c}`").alias(n) for c, n in zip(df.columns, names, strict=True)])
    mode = "overwrite" if overwrite or (overwrite is None and _mode(st) == "overwrite") else "append"
    return save(positional, location, {**st, "mode": mode, "partitionBy": None},
                replace_source=df if _replacing(st) else None, api=f"insertInto({name!r})")  # fmt: skip


def _replacing(st: dict[str, Any]) -> bool:
    return _option(st, "replaceUsing") is not None or _option(st, "replaceOn") is not None


def write_to(df: DataFrame, name: str, st: dict[str, Any], kind: str, *args: Any) -> int | None:
    """``df.writeTo(name).using("delta")`` then ``create`` / ``replace`` / ``createOrReplace`` /
    ``append`` / ``overwrite(condition)`` / ``overwritePartitions``."""
    spark = df.sparkSession
    check_write_options(spark, st["options"], api=f"df.writeTo({name!r})")
    replace = _replace_options(spark, st)
    replacing = replace["replaceUsing"] is not None or replace["replaceOn"] is not None
    registered = catalog.lookup(name)
    given = _option(st, "path") or _option(st, "location")
    location = _location(name, registered, given)
    exists = DeltaLog.for_table(location).table_exists()
    props = dict(st["properties"]) or None
    opts = _write_options(spark, st, "append")
    common: dict[str, Any] = {
        "properties": props,
        **{k: opts[k] for k in ("userMetadata", "txnAppId", "txnVersion", "maxRecordsPerFile")},
    }
    if kind in ("create", "replace", "createOrReplace"):
        if kind == "create" and exists and registered is not None:
            raise DeltaAnalysisException(f"[TABLE_OR_VIEW_ALREADY_EXISTS] Table {name} already exists (at {location})")
        if kind == "replace" and not (exists and registered is not None):
            raise DeltaTableNotFoundError(f"Cannot replace table {name}: it does not exist")
        if replacing:
            raise DeltaAnalysisException(
                "[DELTA_DFV2_CREATE_REPLACE_INCOMPATIBLE_REPLACE_ON_OR_USING] DataFrame Writer V2 "
                "create()/replace()/createOrReplace() cannot be used with the `replaceOn` or `replaceUsing` option "
                "for Delta tables."
            )
        operation = {"create": "CREATE TABLE AS SELECT", "replace": "REPLACE TABLE AS SELECT",
                     "createOrReplace": "CREATE OR REPLACE TABLE AS SELECT"}[kind]  # fmt: skip
        version = write(df, location, mode="overwrite" if exists else "error", partitionBy=st["partitionBy"],
                        clusterBy=st["clusterBy"] or None, overwriteSchema=exists, table_operation=operation,
                        new_table_properties=_table_properties(st) or None, **common)  # fmt: skip
        if registered is None:
            _register(name, location, given, version, operation)
    else:
        if registered is None or not exists:
            raise DeltaTableNotFoundError(f"[TABLE_OR_VIEW_NOT_FOUND] The table {name} cannot be found")
        common["mergeSchema"] = opts["mergeSchema"]
        if kind == "append":
            version = write(df, location, mode="append", **replace, **common)
        elif kind == "overwrite":
            condition = args[0] if args else None
            if condition is None:
                raise DeltaIllegalArgumentException("overwrite(condition) needs a condition")
            if _option(st, "replaceWhere") is not None:
                raise DeltaIllegalArgumentException(
                    "[DELTA_REPLACE_WHERE_IN_OVERWRITE] You can't use replaceWhere in conjunction with an overwrite "
                    "by filter"
                )
            if replacing:
                raise DeltaIllegalArgumentException(
                    "[DELTA_OVERWRITE_BY_FILTER_INCOMPATIBLE_REPLACE_ON_OR_USING] Overwrite by filter is incompatible "
                    "with the `replaceOn`/`replaceUsing` option."
                )
            text = condition if isinstance(condition, str) else _column_sql(df, condition)
            version = write(df, location, mode="overwrite", replaceWhere=text, **common)
        else:  # overwritePartitions
            if replacing:
                raise DeltaIllegalArgumentException(
                    "[DELTA_DYNAMIC_PARTITION_OVERWRITE_INCOMPATIBLE_REPLACE_ON_OR_USING] Dynamic partition overwrite "
                    "is incompatible with the `replaceOn`/`replaceUsing` option."
                )
            version = write(df, location, mode="overwrite", partitionOverwriteMode="dynamic", **common)
    isolation.note_committed(df.sparkSession, location, version, "WRITE")
    return version


def _register(name: str, location: str, given: str | None, version: int | None, operation: str) -> None:
    """Register ``name`` at ``location`` (external when ``given``) once ``version`` is committed: a step
    after the commit (``core.txn.post_commit``). ``version`` None: nothing was committed, nothing guarded."""
    managed = False if given is not None else None
    after_commit(
        "register the table name in the catalog", location, version,
        lambda: catalog.register(name, location, managed=managed), operation=operation,
    )  # fmt: skip


def _column_sql(df: DataFrame, condition: Any) -> str:
    """The SQL text of a Column condition (``overwrite(F.col("p") == 1)``), as Spark analyses it over ``df``."""
    try:
        sql = backend(df.sparkSession).column_sql(df, condition)
    except Exception:  # noqa: BLE001 - Spark refused the condition (e.g. an unknown column)
        sql = None
    if sql is None:
        raise DeltaIllegalArgumentException(
            f"Cannot use {condition!r} as an overwrite condition: pass it as a SQL string"
        )
    return sql


def load(spark: SparkSession, path: Any, st: dict[str, Any], *, name: str | None = None) -> DataFrame:
    """``spark.read.format("delta").load(path)`` / ``.table(name)``: the latest version or the one asked for."""
    if path is None:
        raise DeltaIllegalArgumentException("'path' is not specified: spark.read.format('delta').load(path)")
    if not isinstance(path, str):
        raise DeltaIllegalArgumentException("A Delta table is read one path at a time: load(path) with a string")
    if st["schema"] is not None:
        raise DeltaAnalysisException(
            f"Delta table {name or path} has its own schema: a user-specified schema (.schema(...)) is not accepted"
        )
    version = _option(st, "versionAsOf")
    timestamp = _option(st, "timestampAsOf")
    if version is not None and timestamp is not None:
        raise DeltaIllegalArgumentException(
            f"Cannot time travel {name or path} by both versionAsOf and timestampAsOf: give one"
        )
    try:
        number = None if version is None else int(version)
    except ValueError:
        raise DeltaIllegalArgumentException(f"versionAsOf must be an integer, not {version!r}") from None
    if _flag(_option(st, "readChangeFeed")) or _flag(_option(st, "readChangeData")):
        return _load_changes(spark, path, st, time_travel=version is not None or timestamp is not None)
    return read(spark, path, version=number, timestamp=timestamp)


def _load_changes(spark: SparkSession, path: str, st: dict[str, Any], *, time_travel: bool) -> DataFrame:
    """``option("readChangeFeed", "true")``: the change data feed (``spark.cdf.changes_df``) between
    ``startingVersion`` / ``startingTimestamp`` and ``endingVersion`` / ``endingTimestamp``."""
    from serialake.spark.cdf import changes_df

    if time_travel:
        raise DeltaIllegalArgumentException(
            f"Reading the change data feed of {path} takes startingVersion/startingTimestamp and "
            "endingVersion/endingTimestamp, not versionAsOf/timestampAsOf"
        )
    return changes_df(
        spark,
        path,
        _option(st, "startingVersion"),
        _option(st, "endingVersion"),
        start_timestamp=_option(st, "startingTimestamp"),
        end_timestamp=_option(st, "endingTimestamp"),
    )
