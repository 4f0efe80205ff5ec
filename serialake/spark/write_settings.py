"""Delta's write options and session settings: which serialake implements, and the refusal of the others.

One allow-list for the options of a batch write (``df.write.format("delta").option(...)``,
``df.writeTo(name).option(...)``) and one for the ``spark.databricks.delta.*`` session
settings delta-spark 4.4 reads when it writes. A Delta option or setting serialake does not
implement is refused with an error naming it, unless its value is one under which serialake
behaves as delta-spark does (an option or setting left at its default, e.g.
``dataChange=true``): nothing Delta would act on is silently ignored.

Options (names case-insensitive, as Spark's are):

- implemented: ``IMPLEMENTED_OPTIONS``, and ``delta.<property>`` (a table property of a table
  the write creates; ignored for an existing table, as delta-spark does);
- Delta's other write options (``UNIMPLEMENTED_OPTIONS``): refused unless at a value that
  changes nothing; ``compression`` is accepted when it names the session's Parquet codec
  (``spark.sql.parquet.compression.codec``), the one serialake writes with;
- ``fs.*`` / ``dfs.*`` (Hadoop file-system settings delta-spark applies to the table's file
  system): refused, serialake's storage takes them from the session;
- Delta's read and streaming options (``versionAsOf``, ``checkpointLocation``, ...) and
  options that are not Delta's (``header``, ...): delta-spark's batch writer ignores them,
  and so does serialake.

Session settings (``spark.databricks.delta.`` + key), checked when a write starts:

- implemented: ``IMPLEMENTED_SETTINGS`` and ``properties.defaults.<property>`` (the table
  properties every new table starts with, ``session_table_defaults``);
- the other settings delta-spark reads on its write path (``WRITE_SETTINGS``: its
  ``WriteIntoDelta``, ``TransactionalWrite``, ``OptimisticTransaction`` and data source):
  refused unless at a value under which serialake behaves as delta-spark does;
- settings delta-spark reads only in other operations (OPTIMIZE, VACUUM, MERGE, streaming,
  ...) are not a write's business: the operation that reads them decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from serialake.core.model import properties as props
from serialake.exceptions import DeltaIllegalArgumentException

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "IMPLEMENTED_OPTIONS",
    "IMPLEMENTED_SETTINGS",
    "SETTINGS_PREFIX",
    "UNIMPLEMENTED_OPTIONS",
    "WRITE_SETTINGS",
    "check_session_settings",
    "check_write_options",
    "option_flag",
    "recorded_option",
    "recorded_write_options",
    "session_flag",
    "session_setting",
    "session_table_defaults",
    "session_txn",
]

SETTINGS_PREFIX = "spark.databricks.delta."

#: Write options serialake implements (lower-case name -> what it does).
IMPLEMENTED_OPTIONS: dict[str, str] = {
    "path": "the table's location",
    "location": "the table's location (writeTo)",
    "replacewhere": "overwrite the rows matching a condition",
    "replaceusing": "overwrite the rows whose columns equal those of a written row",
    "replaceon": "overwrite the rows for which a condition holds against a written row",
    "targetalias": "the table's alias in replaceOn and replaceWhere conditions",
    "mergeschema": "add the data's new columns to the table",
    "overwriteschema": "replace the schema and partitioning with the data's",
    "partitionoverwritemode": "static or dynamic partition overwrite",
    "usermetadata": "commitInfo.userMetadata",
    "txnappid": "idempotent writes: the application id",
    "txnversion": "idempotent writes: the application's version",
    "maxrecordsperfile": "rows per data file at most",
}

#: Delta's write options serialake does not implement: lower-case name -> (its name, the values
#: under which serialake behaves as delta-spark does, what to do instead).
UNIMPLEMENTED_OPTIONS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "datachange": ("dataChange", ("true",), "rearranging data (dataChange=false) is OPTIMIZE's job here"),
    "optimizewrite": ("optimizeWrite", ("false",), "repartition the DataFrame before writing"),
    "writepartitioncolumns": ("writePartitionColumns", ("false",), "partition values are kept in the log only"),
    "usenullintolerantequalitywithdpo": ("useNullIntolerantEqualityWithDPO", ("false",),
                                         "use replaceUsing, whose equality never matches NULL"),
    "parquet.writer.version": ("parquet.writer.version", ("v1",), "files are written as Parquet v1"),
    "spark.sql.parquet.outputtimestamptype": ("spark.sql.parquet.outputTimestampType", ("timestamp_micros",),
                                              "timestamps are written as TIMESTAMP_MICROS"),
    "compression": ("compression", (), "set spark.sql.parquet.compression.codec in the session instead"),
}  # fmt: skip

#: Hadoop file-system settings delta-spark takes from the options (``fs.s3a.access.key``, ...).
_FILE_SYSTEM_PREFIXES = ("fs.", "dfs.")

#: ``properties.defaults.<prop>``: the properties of new tables (``session_table_defaults``).
_DEFAULTS = props.SESSION_DEFAULTS_PREFIX[len(SETTINGS_PREFIX) :].lower()

#: Session settings serialake implements on writes (key after ``SETTINGS_PREFIX``).
IMPLEMENTED_SETTINGS: dict[str, str] = {
    "schema.automerge.enabled": "mergeSchema for every write",
    "commitinfo.usermetadata": "userMetadata for every write",
    "write.txnappid": "idempotent writes: the application id (with write.txnVersion)",
    "write.txnversion": "idempotent writes: the application's version (with write.txnAppId)",
    "write.txnversion.autoreset.enabled": "unset write.txnVersion after each write",
    "replacewhere.constraintcheck.enabled": "replaceWhere checks the written rows against its condition",
    "replacewhere.datacolumns.enabled": "replaceWhere on data columns (false: partition columns only)",
    "replaceon.dataframe.writer.enabled": "the replaceOn option is allowed",
    "replaceusing.dataframe.writer.enabled": "the replaceUsing option is allowed",
    "dynamicpartitionoverwrite.enabled": "partitionOverwriteMode=dynamic is allowed",
    "lastcommitversioninsession": "set by delta-spark after its commits; read by nothing",
}

#: The other settings delta-spark reads on its write path, not implemented here (key after
#: ``SETTINGS_PREFIX``, lower case -> the values under which serialake behaves as delta-spark
#: does, its default first). Any other value is refused.
WRITE_SETTINGS: dict[str, tuple[str, ...]] = {
    "optimizewrite.enabled": ("false",),
    "autocompact.enabled": ("false",),
    "stats.collect": ("true",),
    "stats.collect.using.tableschema": ("true",),
    "history.metricsenabled": ("true",),
    "writechecksumfile.enabled": ("true", "false"),
    "allowarbitraryproperties.enabled": ("false",),
    "legacy.storeoptionsasproperties": ("false",),
    "createemptyschematable.enabled": ("true",),
    "identitycolumn.enabled": ("true",),
    "schema.typecheck.enabled": ("true",),
    "partitioncolumnvalidity.enabled": ("true",),
    "convertemptytonullforstringpartitioncol": ("true",),
    "write.datafilestosubdir": ("false",),
    "replacewhere.datacolumns.metrics.enabled": ("true",),
    "replacewhere.datacolumnswithcdf.enabled": ("true",),
    "insertoverwrite.removemetrics.enabled": ("true",),
    "insertreplaceonorusing.materializesource": ("auto", "none"),
    "commitvalidation.enabled": ("true",),
    "maxcommitattempts": ("10000000",),
    "skiprecordingemptycommits": ("true",),
    "tablepropertyconstraintscheck.enabled": ("true",),
    "replace.protocoldowngradeallowed": ("false",),
    "columnmapping.reusecolumnmetadataduringreplace": ("true",),
    "schema.removeexistsdefault": ("true",),
    "loadfilesystemconfigsfromdataframeoptions": ("true", "false"),
}


def check_write_options(spark: SparkSession, options: Mapping[str, str], *, api: str) -> None:
    """Refuse Delta options of a batch write that serialake does not implement (see the module docstring).

    ``options``: as recorded, names in lower case. ``api``: the call, for the message.
    """
    for key, value in options.items():
        if key in IMPLEMENTED_OPTIONS or key.startswith("delta."):
            continue
        if key.startswith(_FILE_SYSTEM_PREFIXES):
            raise DeltaIllegalArgumentException(
                f"The write option '{key}' is a Hadoop file-system setting, which delta-spark applies to the table's "
                f"file system; serialake does not implement it ({api}). Set it on the session "
                f"(spark.hadoop.{key}) before serialake.configure(spark), and remove the option."
            )
        spec = UNIMPLEMENTED_OPTIONS.get(key)
        if spec is None:
            continue  # a read or streaming option, or not Delta's: delta-spark's batch writer ignores it too
        name, accepted, instead = spec
        text = str(value).strip().lower()
        if key == "compression":
            accepted = (_session_codec(spark),)
        if text in accepted:
            continue
        raise DeltaIllegalArgumentException(
            f"The Delta write option {name}={value!r} is not implemented by serialake ({api}): {instead}. "
            f"Remove the option" + (f" (or give it the value {accepted[0]!r})." if accepted else ".")
        )


def _session_codec(spark: SparkSession) -> str:
    """The Parquet codec serialake writes with: the session's ``spark.sql.parquet.compression.codec``."""
    codec = str(spark.conf.get("spark.sql.parquet.compression.codec", "snappy") or "snappy").lower()
    return {"none": "uncompressed"}.get(codec, codec)


def check_session_settings(spark: SparkSession, *, table: str) -> None:
    """Refuse ``spark.databricks.delta.*`` settings of the session that delta-spark would act on when
    writing and serialake does not implement (see the module docstring); ``table``: the write's."""
    for key, value in _delta_settings(spark).items():
        name = key[len(SETTINGS_PREFIX):].lower()
        if name in IMPLEMENTED_SETTINGS or name.startswith(_DEFAULTS):
            continue
        accepted = WRITE_SETTINGS.get(name)
        if accepted is None or str(value).strip().lower() in accepted:
            continue
        raise DeltaIllegalArgumentException(
            f"The session setting {key}={value} is not implemented by serialake (a write to {table}); delta-spark "
            f"would act on it when writing. Unset it (spark.conf.unset({key!r})) or set it to {accepted[0]!r}."
        )


def _delta_settings(spark: SparkSession) -> dict[str, str]:
    """The session's ``spark.databricks.delta.*`` settings (runtime and static)."""
    try:
        every = spark.conf.getAll
    except Exception:  # noqa: BLE001 - a stopped session, or one without runtime conf
        return {}
    return {k: str(v) for k, v in dict(every).items() if k.startswith(SETTINGS_PREFIX)}


def session_setting(spark: SparkSession, name: str) -> str | None:
    """The session's ``spark.databricks.delta.<name>``, or None when unset."""
    value = spark.conf.get(SETTINGS_PREFIX + name, None)
    return None if value is None else str(value)


def session_flag(spark: SparkSession, name: str, default: bool) -> bool:
    """A boolean ``spark.databricks.delta.<name>`` (``default`` when unset), refused when not true/false."""
    value = session_setting(spark, name)
    if value is None:
        return default
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise DeltaIllegalArgumentException(
            f"The session setting {SETTINGS_PREFIX}{name}={value!r} must be 'true' or 'false'"
        )
    return text == "true"


def session_txn(spark: SparkSession) -> tuple[str | None, int | None]:
    """``spark.databricks.delta.write.txnAppId`` and ``write.txnVersion`` (both or neither): delta-spark's
    idempotent writes by session setting, for writes that give neither option."""
    app_id, version = session_setting(spark, "write.txnAppId"), session_setting(spark, "write.txnVersion")
    if app_id is None and version is None:
        return None, None
    if app_id is None or version is None:
        raise DeltaIllegalArgumentException(
            "[DELTA_INVALID_IDEMPOTENT_WRITES_OPTIONS.MISSING_SESSION_CONFS] Invalid options for idempotent "
            "DataFrame writes: Both spark.databricks.delta.write.txnAppId and spark.databricks.delta.write.txnVersion "
            "must be specified for idempotent Delta writes."
        )
    try:
        number = int(version)
    except ValueError:
        raise DeltaIllegalArgumentException(
            f"The session setting {SETTINGS_PREFIX}write.txnVersion={version!r} must be an integer"
        ) from None
    return app_id, number


def session_table_defaults() -> dict[str, str]:
    """``spark.databricks.delta.properties.defaults.<prop>`` of the active session, as ``delta.<prop>``.

    The core's source of the properties every new table starts with
    (``properties.with_session_defaults``): registered when this module is imported, so by
    every Spark-side write. No active session: none.
    """
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        return {}
    prefix = props.SESSION_DEFAULTS_PREFIX
    return {"delta." + k[len(prefix):]: v for k, v in _delta_settings(spark).items() if k.startswith(prefix)}


props.set_session_defaults_source(session_table_defaults)


# -- the options a reader or writer chain recorded (``serialake.dropin``; the streaming sink) --


def recorded_option(st: dict[str, Any], name: str) -> str | None:
    """An option a reader or writer chain recorded (``serialake.dropin``), by name, case-insensitively
    (as Spark's options are)."""
    return st["options"].get(name.lower())


def option_flag(value: str | None) -> bool:
    """A ``true`` / ``false`` option's value (absent: false)."""
    if value is None:
        return False
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise DeltaIllegalArgumentException(f"Expected 'true' or 'false', got {value!r}")


def _conf(spark: SparkSession, key: str) -> str | None:
    value = spark.conf.get(key, None)
    return None if value is None else str(value)


def recorded_write_options(spark: SparkSession, st: dict[str, Any], mode: str) -> dict[str, Any]:
    """``serialake.write`` keyword arguments from a writer chain's recorded options and the session's settings."""
    merge = recorded_option(st, "mergeSchema")
    if merge is None:
        merge = _conf(spark, "spark.databricks.delta.schema.autoMerge.enabled")
    user_metadata = recorded_option(st, "userMetadata")
    if user_metadata is None:
        user_metadata = _conf(spark, "spark.databricks.delta.commitInfo.userMetadata")
    app_id, app_version = recorded_option(st, "txnAppId"), recorded_option(st, "txnVersion")
    max_records = recorded_option(st, "maxRecordsPerFile")
    overwrite_mode = recorded_option(st, "partitionOverwriteMode")
    replace_where = recorded_option(st, "replaceWhere")
    # As delta-spark: the session's mode applies unless the write names the rows it replaces.
    replacing = recorded_option(st, "replaceUsing") is not None or recorded_option(st, "replaceOn") is not None
    if overwrite_mode is None and replace_where is None and not replacing:
        overwrite_mode = _conf(spark, "spark.sql.sources.partitionOverwriteMode")
    if mode == "overwrite" and overwrite_mode is not None and not session_flag(
        spark, "dynamicPartitionOverwrite.enabled", True
    ):
        if overwrite_mode.strip().lower() == "dynamic":
            raise DeltaIllegalArgumentException(
                "[DELTA_DYNAMIC_PARTITION_OVERWRITE_DISABLED] Dynamic partition overwrite mode is specified by "
                "session config or write options, but it is disabled by "
                "`spark.databricks.delta.dynamicPartitionOverwrite.enabled=false`."
            )
        if not replacing:
            overwrite_mode = None
    try:
        version = None if app_version is None else int(app_version)
        records = None if max_records is None else int(max_records)
    except ValueError as e:
        raise DeltaIllegalArgumentException(f"Invalid writer option: {e}") from None
    return {
        "replaceWhere": replace_where,
        "mergeSchema": option_flag(merge),
        "overwriteSchema": option_flag(recorded_option(st, "overwriteSchema")),
        "userMetadata": user_metadata,
        "txnAppId": app_id,
        "txnVersion": version,
        "maxRecordsPerFile": records if records and records > 0 else None,
        "partitionOverwriteMode": overwrite_mode if mode == "overwrite" else None,
    }
