"""``DeltaTable``: delta-spark's Python table API over serialake's log.

Row-level operations (delete, update, merge, optimize, restore, addColumns) are
implemented in ``serialake.spark.dml``; the methods here delegate to it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.core.model import clustering, constraints, features, identity
from serialake.core.model import properties as props
from serialake.core.model.actions import Metadata, Protocol, now_ms
from serialake.core.model.schema import DataType, SchemaError, StructField, StructType, data_type_from_json_value
from serialake.core.tables import catalog
from serialake.core.txn.post_commit import after_commit
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaConcurrentModificationException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    UnsupportedFeatureError,
)
from serialake.spark import data_read, dml, invariants, scans, transaction
from serialake.spark.arguments import check_assignments, check_condition, check_type
from serialake.spark.columns import quote_name
from serialake.spark.errors import pyspark_errors
from serialake.spark.schemas import to_delta_schema
from serialake.spark.write import add_schema_features
from serialake.storage.datafiles import is_remote

__all__ = ["DeltaTable", "DeltaTableBuilder", "IdentityGenerator"]

_PROTOCOL_KEYS = {props.MIN_READER_VERSION.lower(), props.MIN_WRITER_VERSION.lower()}

_HISTORY_SCHEMA = T.StructType(
    [
        T.StructField("version", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("userId", T.StringType()),
        T.StructField("userName", T.StringType()),
        T.StructField("operation", T.StringType()),
        T.StructField("operationParameters", T.MapType(T.StringType(), T.StringType())),
        T.StructField(
            "job",
            T.StructType(
                [
                    T.StructField(n, T.StringType())
                    for n in ("jobId", "jobName", "jobRunId", "runId", "jobOwnerId", "triggerType")
                ]
            ),
        ),
        T.StructField("notebook", T.StructType([T.StructField("notebookId", T.StringType())])),
        T.StructField("clusterId", T.StringType()),
        T.StructField("readVersion", T.LongType()),
        T.StructField("isolationLevel", T.StringType()),
        T.StructField("isBlindAppend", T.BooleanType()),
        T.StructField("operationMetrics", T.MapType(T.StringType(), T.StringType())),
        T.StructField("userMetadata", T.StringType()),
        T.StructField("engineInfo", T.StringType()),
    ]
)

_DETAIL_SCHEMA = T.StructType(
    [
        T.StructField("format", T.StringType()),
        T.StructField("id", T.StringType()),
        T.StructField("name", T.StringType()),
        T.StructField("description", T.StringType()),
        T.StructField("location", T.StringType()),
        T.StructField("createdAt", T.TimestampType()),
        T.StructField("lastModified", T.TimestampType()),
        T.StructField("partitionColumns", T.ArrayType(T.StringType())),
        T.StructField("clusteringColumns", T.ArrayType(T.StringType())),
        T.StructField("numFiles", T.LongType()),
        T.StructField("sizeInBytes", T.LongType()),
        T.StructField("properties", T.MapType(T.StringType(), T.StringType())),
        T.StructField("minReaderVersion", T.IntegerType()),
        T.StructField("minWriterVersion", T.IntegerType()),
        T.StructField("tableFeatures", T.ArrayType(T.StringType())),
    ]
)


@pyspark_errors
class DeltaTable:
    """A Delta table at a path (``DeltaTable.forPath(spark, path)``)."""

    def __init__(self, spark: SparkSession, path: str, alias: str | None = None) -> None:
        self.spark = spark
        self.deltaLog = DeltaLog.for_table(path)
        self.path = self.deltaLog.table_path
        self._alias = alias

    # -- construction -------------------------------------------------------------
    @classmethod
    def forPath(  # noqa: N802
        cls, sparkSession: SparkSession, path: str, hadoopConf: dict[str, str] | None = None  # noqa: N803
    ) -> DeltaTable:
        """The table at ``path``; ``DeltaTableNotFoundError`` if it is not a Delta table.

        ``hadoopConf`` (file-system settings, as delta-spark takes them) is accepted and
        checked to be a dict of strings; the local file system needs none.
        """
        if not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        if hadoopConf is not None and (
            not isinstance(hadoopConf, dict) or not all(isinstance(k, str) for k in hadoopConf)
        ):
            raise TypeError("hadoopConf must be a dict of str keys")
        if not DeltaLog.for_table(path).table_exists():
            raise DeltaTableNotFoundError(f"{DeltaLog.for_table(path).table_path} is not a Delta table.")
        return cls(sparkSession, path)

    @classmethod
    def forName(cls, sparkSession: SparkSession, tableOrViewName: str) -> DeltaTable:  # noqa: N802, N803
        """The table registered under ``tableOrViewName`` (``CREATE TABLE``, ``saveAsTable``, ...)."""
        if not isinstance(tableOrViewName, str):
            raise TypeError(f"tableOrViewName must be a str, not {type(tableOrViewName).__name__}")
        location = catalog.lookup(tableOrViewName)
        if location is None or not DeltaLog.for_table(location).table_exists():
            raise DeltaTableNotFoundError(f"[DELTA_MISSING_DELTA_TABLE] {tableOrViewName} is not a Delta table.")
        return cls(sparkSession, location)

    @classmethod
    def convertToDelta(  # noqa: N802
        cls,
        sparkSession: SparkSession,  # noqa: N803
        identifier: str,
        partitionSchema: str | T.StructType | None = None,  # noqa: N803
    ) -> DeltaTable:
        """Make the Parquet files at ``parquet.`/path``` a Delta table in place (no data rewritten).

        ``partitionSchema``: the partition columns (StructType or DDL text) when the
        directory is partitioned (``col=value/`` directories).
        """
        check_type(identifier, str, "identifier", "a string")
        path = dml.parquet_identifier_path(identifier)
        table, _ = dml.convert_to_delta(sparkSession, path, partitionSchema)
        return cls(sparkSession, table)

    @classmethod
    def isDeltaTable(cls, sparkSession: SparkSession, identifier: str) -> bool:  # noqa: N802, N803
        """Whether ``identifier`` (a path) holds a Delta table."""
        return DeltaLog.for_table(identifier).table_exists()

    @classmethod
    def create(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:  # noqa: N803
        """A builder that creates a new table (error if it exists)."""
        return DeltaTableBuilder(sparkSession, "create")

    @classmethod
    def createIfNotExists(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:  # noqa: N802, N803
        """A builder that creates the table unless it exists."""
        return DeltaTableBuilder(sparkSession, "createIfNotExists")

    @classmethod
    def replace(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:  # noqa: N803
        """A builder that replaces an existing table (error if there is none)."""
        return DeltaTableBuilder(sparkSession, "replace")

    @classmethod
    def createOrReplace(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:  # noqa: N802, N803
        """A builder that creates the table or replaces it."""
        return DeltaTableBuilder(sparkSession, "createOrReplace")

    def __repr__(self) -> str:
        return f"DeltaTable({self.path!r})"

    # -- reading ------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The latest snapshot of the table (inside ``serialake.transaction``: the transaction's)."""
        tx = transaction.active(self.spark)
        return tx.snapshot_for_read(self.path) if tx is not None else self.deltaLog.update()

    def toDF(self) -> DataFrame:  # noqa: N802
        """The table's rows at its latest version (pinned when called: call again after writes)."""
        snap = self.snapshot()
        df = scans.mark(data_read.read_files_df(self.spark, snap, snap.all_files), snap)
        return df.alias(self._alias) if self._alias else df

    def alias(self, aliasName: str) -> DeltaTable:  # noqa: N803
        """This table under an alias (used by ``toDF`` and in DML conditions)."""
        return type(self)(self.spark, self.path, aliasName)

    # -- DML (serialake.spark.dml) -------------------------------------------------------
    def delete(self, condition: str | Column | None = None) -> DataFrame | None:
        """Delete the rows matching ``condition`` (all rows when None).

        The operations below return their result DataFrame, or None (with an ``AfterCommitWarning``)
        when building it failed after the commit (``core.txn.post_commit``).
        """
        check_condition(condition)
        return dml.delete(self.spark, self.path, condition, alias=self._alias)

    def update(
        self, condition: str | Column | None = None, set: dict[str, str | Column] | None = None  # noqa: A002
    ) -> DataFrame | None:
        """Set columns (SQL strings or Columns) on the rows matching ``condition``."""
        check_assignments(set, "'set'")
        check_condition(condition)
        return dml.update(self.spark, self.path, condition, set, alias=self._alias)

    def merge(self, source: DataFrame, condition: str | Column) -> dml.DeltaMergeBuilder:
        """Start a MERGE of ``source`` into this table; add clauses, then ``execute()``."""
        if source is None:
            raise ValueError("'source' in merge cannot be None")
        if not isinstance(source, DataFrame):
            raise TypeError("Type of 'source' in merge must be DataFrame.")
        if condition is None:
            raise ValueError("'condition' in merge cannot be None")
        check_condition(condition)
        return dml.merge(self.spark, self.path, source, condition, alias=self._alias)

    def optimize(self) -> dml.DeltaOptimizeBuilder:
        """Start an OPTIMIZE: ``.where(...)``, then ``executeCompaction()`` or ``executeZOrderBy(cols)``."""
        return dml.optimize(self.spark, self.path)

    def restoreToVersion(self, version: int) -> DataFrame | None:  # noqa: N802
        """Make the table's data what it was at ``version`` (a new commit)."""
        check_type(version, int, "version", "an int")
        return dml.restoreToVersion(self.spark, self.path, version)

    def restoreToTimestamp(self, timestamp: str | dt.datetime | dt.date) -> DataFrame | None:  # noqa: N802
        """Make the table's data what it was at ``timestamp`` (a new commit).

        ``timestamp``: text as delta-spark takes it (``'2024-05-01 10:00:00'``, a date), or a
        ``datetime`` / ``date``; naive values are UTC.
        """
        check_type(timestamp, (str, dt.datetime, dt.date), "timestamp", "a string")
        return dml.restoreToTimestamp(self.spark, self.path, timestamp)

    def addColumns(self, columns: Any) -> None:  # noqa: N802
        """Add columns (a DDL string such as ``'c STRING'`` or Spark fields): a metadata change."""
        dml.add_columns(self.spark, self.path, columns)

    def clone(
        self, target: str, isShallow: bool = False, replace: bool = False,  # noqa: N803
        properties: dict[str, str] | None = None,
    ) -> DeltaTable:
        """Clone the latest version to ``target`` (a path or a table name); the clone.

        Shallow: the clone lists this table's files; deep (the default): they are copied.
        ``replace`` replaces a table at ``target``; ``properties`` override this table's.
        """
        return self._clone(target, isShallow, replace, properties)

    def cloneAtVersion(  # noqa: N802
        self, version: int, target: str, isShallow: bool = False, replace: bool = False,  # noqa: N803
        properties: dict[str, str] | None = None,
    ) -> DeltaTable:
        """Clone the table as it was at ``version`` (see ``clone``)."""
        check_type(version, int, "version", "an int")
        return self._clone(target, isShallow, replace, properties, version=version)

    def cloneAtTimestamp(  # noqa: N802
        self, timestamp: str, target: str, isShallow: bool = False, replace: bool = False,  # noqa: N803
        properties: dict[str, str] | None = None,
    ) -> DeltaTable:
        """Clone the table as it was at ``timestamp`` (text such as ``'2024-05-01 10:00:00'``; see ``clone``)."""
        check_type(timestamp, str, "timestamp", "a string")
        return self._clone(target, isShallow, replace, properties, timestamp=timestamp)

    def _clone(
        self, target: str, shallow: bool, replace: bool, properties: dict[str, str] | None, **at: Any
    ) -> DeltaTable:
        check_type(target, str, "target", "a string")
        check_type(shallow, bool, "isShallow", "a boolean")
        check_type(replace, bool, "replace", "a boolean")
        if properties is not None:
            check_type(properties, dict, "properties", "a dict")
            for key, value in properties.items():
                check_type(key, str, f"All property keys including {key}", "a str")
                check_type(value, str, f"All property values including {value}", "a str")
        done = dml.run_clone(self.path, target, shallow=shallow, replace_target=replace, properties=properties, **at)
        assert done is not None  # None only for if_not_exists
        return DeltaTable(self.spark, done[0])

    def generate(self, mode: str) -> None:
        """Write manifests for other engines; ``mode`` is ``"symlink_format_manifest"``."""
        check_type(mode, str, "mode", "a string")
        dml.generate(self.path, mode)

    def history(self, limit: int | None = None) -> DataFrame:
        """Commits newest first, with delta-spark's ``DESCRIBE HISTORY`` columns."""
        rows = [_history_row(v, entry) for v, entry in self.deltaLog.history(limit)]
        return self.spark.createDataFrame(rows, _HISTORY_SCHEMA)

    def detail(self) -> DataFrame:
        """One row with delta-spark's ``DESCRIBE DETAIL`` columns."""
        snap = self.snapshot()
        meta = snap.metadata
        protocol = snap.protocol
        row: tuple[Any, ...] = (
            "delta",
            meta.id,
            meta.name,
            meta.description,
            _location_uri(self.path),
            _ts(meta.created_time),
            _ts(snap.timestamp),
            list(meta.partition_columns),
            clustering.clustering_columns(snap.domain_metadata, snap.schema, snap.table_path) or [],
            snap.num_files,
            snap.size_in_bytes(),
            dict(meta.configuration),
            protocol.min_reader_version,
            protocol.min_writer_version,
            sorted(features.table_features(protocol)),
        )
        return self.spark.createDataFrame([row], _DETAIL_SCHEMA)

    # -- maintenance --------------------------------------------------------------
    def vacuum(self, retentionHours: float | None = None, dryRun: bool = False) -> DataFrame | None:  # noqa: N803
        """Delete files no longer referenced and older than the retention; returns their paths
        (``dryRun``: delete nothing, return what would go). The rules: ``dml.vacuum``."""
        return dml.vacuum(self.spark, self.path, retentionHours, dryRun)

    def upgradeTableProtocol(self, readerVersion: int, writerVersion: int) -> None:  # noqa: N802, N803
        """Raise the table's protocol to (readerVersion, writerVersion), keeping its features.

        A version lower than the table's is kept as it is (a protocol is never downgraded).
        """
        for value, name in ((readerVersion, "readerVersion"), (writerVersion, "writerVersion")):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"The {name} needs to be an integer but got '{type(value)}'.")
        transaction.refuse("UPGRADE PROTOCOL", self.path, self.spark)
        txn = self.deltaLog.start_transaction()
        assert txn.snapshot is not None
        new = _upgraded_protocol(txn.snapshot.protocol, readerVersion, writerVersion, self.path)
        if new == txn.snapshot.protocol:
            return
        txn.update_protocol(new)
        txn.commit(
            [],
            "UPGRADE PROTOCOL",
            {"newProtocol": json.dumps({"minReaderVersion": readerVersion, "minWriterVersion": writerVersion})},
        )

    def addFeatureSupport(self, featureName: str) -> None:  # noqa: N802, N803
        """Add table feature ``featureName`` to the protocol (``delta.feature.<name> = supported``).

        A feature the protocol already has (or implies) changes nothing; a table on a legacy
        protocol moves to table features (reader 3 / writer 7 as the feature needs).
        """
        check_type(featureName, str, "featureName", "a string")
        known = features.SUPPORTED_WRITER_FEATURES | features.SUPPORTED_READER_FEATURES
        name = next((f for f in sorted(known) if f.lower() == featureName.lower()), None)
        if name is None:
            raise UnsupportedFeatureError(
                f"[DELTA_UNSUPPORTED_FEATURES_IN_CONFIG] Table {self.path}: unknown or unsupported table feature "
                f"'{featureName}' (serialake supports: {', '.join(sorted(known))})"
            )
        transaction.refuse("ADD FEATURE", self.path, self.spark)
        txn = self.deltaLog.start_transaction()
        snap = txn.snapshot
        assert snap is not None
        if features.has_feature(snap.protocol, name):
            return
        txn.update_protocol(features.required_protocol({}, [name], base=snap.protocol))
        supported = json.dumps({props.FEATURE_PREFIX + name: "supported"}, separators=(",", ":"))
        txn.commit([], "SET TBLPROPERTIES", {"properties": supported})

    def dropFeatureSupport(self, featureName: str, truncateHistory: bool | None = None) -> None:  # noqa: N802, N803
        """Remove table feature ``featureName`` (``ALTER TABLE ... DROP FEATURE``)."""
        check_type(featureName, str, "featureName", "a string")
        if truncateHistory is not None:
            check_type(truncateHistory, bool, "truncateHistory", "a boolean")
        dml.drop_feature(self.spark, self.path, featureName, bool(truncateHistory))

    def setTableProperties(self, properties: dict[str, Any]) -> int:  # noqa: N802
        """Set table properties in one metadata commit (``ALTER TABLE ... SET TBLPROPERTIES``).

        Properties that turn on a table feature (e.g. ``delta.enableDeletionVectors``) upgrade
        the protocol in the same commit; ``delta.minReaderVersion``/``minWriterVersion`` upgrade
        it too and are not stored.
        """
        transaction.refuse("SET TBLPROPERTIES", self.path, self.spark)
        txn = self.deltaLog.start_transaction()
        snap = txn.snapshot
        assert snap is not None
        conf = props.validate_properties(properties, table=self.path)
        constraints.refuse_constraint_properties(conf, self.path)
        versions = {k: int(v) for k, v in conf.items() if k.lower() in _PROTOCOL_KEYS}
        stored = {k: v for k, v in conf.items() if k.lower() not in _PROTOCOL_KEYS}
        txn.update_metadata(replace(snap.metadata, configuration={**snap.metadata.configuration, **stored}))
        if versions:
            base = txn.protocol or snap.protocol
            reader, writer = versions.get(props.MIN_READER_VERSION, 0), versions.get(props.MIN_WRITER_VERSION, 0)
            txn.update_protocol(_upgraded_protocol(base, reader, writer, self.path))
        return txn.commit([], "SET TBLPROPERTIES", {"properties": json.dumps(conf, separators=(",", ":"))})

    def unsetTableProperties(self, keys: Sequence[str], ifExists: bool = False) -> int:  # noqa: N802, N803
        """Remove table properties in one metadata commit (``UNSET TBLPROPERTIES``)."""
        return dml.unset_properties(self.path, keys, if_exists=ifExists)


@dataclass(frozen=True)
class IdentityGenerator:
    """delta-spark's identity column generator: ``IdentityGenerator(start=1, step=1)``.

    ``DeltaTableBuilder.addColumn`` takes it (``generatedAlwaysAs`` / ``generatedByDefaultAs``)
    for a BIGINT identity column (``serialake.core.model.identity``).
    """

    start: int = 1
    step: int = 1

    def __post_init__(self) -> None:
        for name in ("start", "step"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} should be int, found {type(value).__name__}")
        if self.step == 0:
            raise DeltaIllegalArgumentException("IdentityGenerator step cannot be 0")


@pyspark_errors
class DeltaTableBuilder:
    """Fluent builder behind ``DeltaTable.create`` / ``createIfNotExists`` / ``replace`` / ``createOrReplace``."""

    _OPERATIONS = {
        "create": "CREATE TABLE",
        "createIfNotExists": "CREATE TABLE",
        "replace": "REPLACE TABLE",
        "createOrReplace": "CREATE OR REPLACE TABLE",
    }

    def __init__(self, spark: SparkSession | None, mode: str) -> None:
        self._spark = spark
        self._mode = mode
        self._location: str | None = None
        self._name: str | None = None
        self._comment: str | None = None
        self._fields: list[StructField] = []
        self._partitions: list[str] = []
        self._clustering: list[str] = []
        self._properties: dict[str, str] = {}

    def location(self, location: str) -> DeltaTableBuilder:
        """The table's directory (without it, a table by name is managed: in the warehouse directory)."""
        if not isinstance(location, str):
            raise TypeError(f"location should be str, found {type(location).__name__}")
        self._location = location
        return self

    def tableName(self, identifier: str) -> DeltaTableBuilder:  # noqa: N802
        """The table's name in serialake's catalog (registered when the table is created)."""
        if not isinstance(identifier, str):
            raise TypeError(f"Identifier should be str, found {type(identifier).__name__}")
        self._name = identifier
        return self

    def comment(self, comment: str) -> DeltaTableBuilder:
        """The table description."""
        if not isinstance(comment, str):
            raise TypeError(f"Table comment must be str, found {type(comment).__name__}")
        self._comment = comment
        return self

    def addColumn(  # noqa: N802
        self,
        colName: str,  # noqa: N803
        dataType: str | T.DataType,  # noqa: N803
        nullable: bool = True,
        generatedAlwaysAs: str | IdentityGenerator | None = None,  # noqa: N803
        generatedByDefaultAs: IdentityGenerator | None = None,  # noqa: N803
        comment: str | None = None,
    ) -> DeltaTableBuilder:
        """Add a column; ``dataType`` is a SQL type (``"BIGINT"``, ``"array<string>"``) or a Spark type.

        The arguments are delta-spark's, in its order. ``generatedAlwaysAs`` (SQL text) makes
        a generated column: writes compute it when the data lacks it and check it otherwise.
        An ``IdentityGenerator`` makes a BIGINT identity column: ``generatedAlwaysAs`` (writes
        always generate it) or ``generatedByDefaultAs`` (writes may give it).
        """
        if not isinstance(colName, str):
            raise TypeError(f"Column name should be str, found {type(colName).__name__}")
        if not isinstance(dataType, (str, T.DataType)):
            raise TypeError(f"Column data type should be str or DataType, found {type(dataType).__name__}")
        if not isinstance(nullable, bool):
            raise TypeError(f"Column nullable should be bool, found {type(nullable).__name__}")
        if generatedAlwaysAs is not None and generatedByDefaultAs is not None:
            raise ValueError(f"Column {colName}: generatedByDefaultAs and generatedAlwaysAs cannot both be set.")
        if generatedAlwaysAs is not None and not isinstance(generatedAlwaysAs, (str, IdentityGenerator)):
            raise TypeError(
                f"generatedAlwaysAs should be str or IdentityGenerator, found {type(generatedAlwaysAs).__name__}"
            )
        if generatedByDefaultAs is not None and not isinstance(generatedByDefaultAs, IdentityGenerator):
            raise TypeError(
                f"generatedByDefaultAs should be IdentityGenerator, found {type(generatedByDefaultAs).__name__}"
            )
        if comment is not None and not isinstance(comment, str):
            raise TypeError(f"Column comment should be str, found {type(comment).__name__}")
        if isinstance(dataType, str):
            data_type = _parse_type(colName, dataType)
        else:
            data_type = data_type_from_json_value(json.loads(dataType.json()))
        generator = generatedAlwaysAs if isinstance(generatedAlwaysAs, IdentityGenerator) else generatedByDefaultAs
        if generator is not None:
            if data_type.simple_string() != "bigint":
                raise UnsupportedFeatureError(
                    f"Column {colName}: identity columns must be BIGINT, not {data_type.simple_string()}."
                )
            field = identity.identity_field(
                colName, generator.start, generator.step, always=generator is generatedAlwaysAs, comment=comment,
                table=self._name or self._location or "",
            )  # fmt: skip
            self._fields.append(replace(field, nullable=nullable))
            return self
        metadata: dict[str, Any] = {"comment": comment} if comment is not None else {}
        if isinstance(generatedAlwaysAs, str):
            metadata[constraints.GENERATION_EXPRESSION] = generatedAlwaysAs
        self._fields.append(StructField(colName, data_type, nullable, metadata))
        return self

    def addColumns(self, cols: T.StructType | Iterable[T.StructField]) -> DeltaTableBuilder:  # noqa: N802
        """Add the fields of a Spark ``StructType`` (or a list of ``StructField``)."""
        if isinstance(cols, T.StructType):
            struct = cols
        elif isinstance(cols, (list, tuple)) and all(isinstance(f, T.StructField) for f in cols):
            struct = T.StructType(list(cols))
        else:
            raise TypeError(f"Schema must be StructType or a list of StructField, found {type(cols).__name__}")
        self._fields.extend(to_delta_schema(struct).fields)
        return self

    def partitionedBy(self, *cols: str | Sequence[str]) -> DeltaTableBuilder:  # noqa: N802
        """Partition columns (names of added columns)."""
        for name in _column_names(cols, "Partitioning"):
            self._partitions.append(name)
        return self

    def clusterBy(self, *cols: str | Sequence[str]) -> DeltaTableBuilder:  # noqa: N802
        """Liquid clustering columns (``serialake.core.model.clustering``): OPTIMIZE clusters the table by them."""
        self._clustering = _column_names(cols, "Clustering")
        return self

    def property(self, key: str, value: str) -> DeltaTableBuilder:
        """A table property."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"Key and value of property must be string, found {type(key).__name__}, {type(value).__name__}"
            )
        self._properties[key] = value
        return self

    def execute(self) -> DeltaTable:
        """Create or replace the table (and register its name); returns it."""
        return self.run()[0]

    def run(self) -> tuple[DeltaTable, int | None]:
        """``execute``, with the version committed (None: nothing was, the table existed)."""
        if not self._fields:
            raise DeltaAnalysisException(
                f"Table {self._name or self._location} needs at least one column (use addColumn)"
            )
        spark = self._spark or SparkSession.getActiveSession()
        if spark is None:
            raise DeltaIllegalArgumentException("No active SparkSession: pass one to DeltaTable.create(spark)")
        location = self._resolve_location()
        log = DeltaLog.for_table(location)
        shown = self._name or log.table_path
        transaction.refuse("CREATE TABLE", shown, spark)
        txn = log.start_transaction()
        exists = txn.snapshot is not None
        if exists and self._mode == "create":
            raise DeltaAnalysisException(
                f"Table {shown} already exists (at {log.table_path}). Use createIfNotExists, replace or "
                "createOrReplace."
            )
        if exists and self._mode == "createIfNotExists":
            self._register(log.table_path)
            return DeltaTable(spark, log.table_path), None
        if not exists and self._mode == "replace":
            raise DeltaTableNotFoundError(
                f"Table {shown} cannot be replaced as it did not exist (no Delta table at {log.table_path}). "
                "Use createOrReplace."
            )
        schema = StructType(tuple(self._fields))
        metadata = self._metadata(txn.snapshot.metadata if txn.snapshot else None, shown, schema)
        invariants.check_definitions(spark, schema, metadata.configuration, shown)
        txn.update_metadata(metadata, replace_table=True)
        add_schema_features(txn, schema)
        removes: list[Any] = [f.remove() for f in txn.read_whole_table()] if exists else []
        cluster_by: list[str] = []
        if self._clustering:
            cluster_by, domain = clustering.cluster_table(txn, self._clustering, shown)
            removes.append(domain)
        else:
            removes.extend(clustering.clustering_removed(txn.snapshot))
        params: dict[str, Any] = {
            "isManaged": "true" if self._location is None else "false",
            "partitionBy": json.dumps(list(metadata.partition_columns), separators=(",", ":")),
            "clusterBy": json.dumps(cluster_by, separators=(",", ":")),
            # The properties the table gets (column mapping's maxColumnId too), as delta-spark records them.
            "properties": json.dumps(dict((txn.metadata or metadata).configuration), separators=(",", ":")),
        }
        if self._comment is not None:
            params["description"] = self._comment
        operation = self._OPERATIONS[self._mode]
        try:
            version = txn.commit(removes, operation, params)
        except DeltaConcurrentModificationException:
            if self._mode == "createIfNotExists" and not exists and log.table_exists():
                self._register(log.table_path)
                return DeltaTable(spark, log.table_path), None  # another writer created it first
            raise
        after_commit(
            "register the table name in the catalog", log.table_path, version, self._register, log.table_path,
            operation=operation,
        )  # fmt: skip
        return DeltaTable(spark, log.table_path), version

    def _resolve_location(self) -> str:
        """The table's directory: ``location``, else where its name is registered, else a managed one."""
        if self._name is not None:
            return catalog.table_location(self._name, self._location, exclusive=self._mode == "create")
        if self._location is None:
            raise DeltaIllegalArgumentException("Give the table a name (.tableName), a directory (.location), or both")
        return self._location

    def _register(self, location: str) -> None:
        if self._name is not None:
            catalog.register(self._name, location)

    def _metadata(self, old: Metadata | None, table: str, schema: StructType) -> Metadata:
        parts = []
        for name in self._partitions:
            f = schema.field(name)
            if f is None:
                raise DeltaAnalysisException(
                    f"Partition column '{name}' of table {table} is not one of its columns "
                    f"({', '.join(schema.field_names)})"
                )
            parts.append(f.name)
        conf = props.validate_properties(self._properties, table=table)
        fields = dict(
            schema_string=schema.to_json(),
            partition_columns=tuple(parts),
            configuration=conf,
            name=self._name,
            description=self._comment,
        )
        if old is not None:
            return replace(old, created_time=now_ms(), **fields)  # type: ignore[arg-type]
        return Metadata(**fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _parse_type(column: str, text: str) -> DataType:
    """A SQL type; text neither parser accepts raises Spark's ``ParseException`` (as delta-spark does)."""
    try:
        return StructType.from_ddl(f"{quote_name(column)} {text}").fields[0].data_type
    except SchemaError:
        if SparkSession.getActiveSession() is None:
            raise
        from pyspark.sql.types import _parse_datatype_string

        spark_type = _parse_datatype_string(text)  # raises ParseException for text that is no type
        return data_type_from_json_value(json.loads(spark_type.json()))


def _column_names(cols: Sequence[Any], what: str) -> list[str]:
    """Column names given as ``"a", "b"`` or ``["a", "b"]``; ``TypeError`` for anything else."""
    names = list(cols[0]) if len(cols) == 1 and isinstance(cols[0], (list, tuple)) else list(cols)
    for c in names:
        if not isinstance(c, str):
            raise TypeError(f"{what} column must be str, found {c!r} of type {type(c).__name__}")
    return names


def _ts(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


def _str_map(value: Any) -> dict[str, str | None] | None:
    if not isinstance(value, dict):
        return None
    return {str(k): _text(v) for k, v in value.items()}


def _history_row(version: int, entry: Any) -> tuple[Any, ...]:
    info = entry.commit_info.values if entry.commit_info is not None else {}
    job = info.get("job")
    notebook = info.get("notebook")
    read_version = info.get("readVersion")
    return (
        version,
        _ts(entry.timestamp),
        _text(info.get("userId")),
        _text(info.get("userName")),
        _text(info.get("operation")),
        _str_map(info.get("operationParameters")),
        tuple(_text(job.get(k)) for k in ("jobId", "jobName", "jobRunId", "runId", "jobOwnerId", "triggerType"))
        if isinstance(job, dict)
        else None,
        (_text(notebook.get("notebookId")),) if isinstance(notebook, dict) else None,
        _text(info.get("clusterId")),
        int(read_version) if isinstance(read_version, (int, float)) else None,
        _text(info.get("isolationLevel")),
        info.get("isBlindAppend") if isinstance(info.get("isBlindAppend"), bool) else None,
        _str_map(info.get("operationMetrics")),
        _text(info.get("userMetadata")),
        _text(info.get("engineInfo")),
    )


def _upgraded_protocol(current: Protocol, reader: int, writer: int, table: str) -> Protocol:
    """``current`` raised to at least (reader, writer) with every feature it had.

    A version lower than the current one keeps the current one: a protocol is never downgraded.
    """
    reader = max(reader, current.min_reader_version)
    writer = max(writer, current.min_writer_version)
    if reader > 3 or writer > 7:
        raise DeltaIllegalArgumentException(f"Unsupported protocol ({reader}, {writer}) for table {table}")
    if reader >= 3 and writer < 7:
        raise DeltaIllegalArgumentException(
            f"Protocol ({reader}, {writer}) for table {table} is invalid: reader version 3 needs writer version 7"
        )
    readers = features.reader_features(current)
    writers = features.writer_features(current) | readers
    return Protocol(
        min_reader_version=reader,
        min_writer_version=writer,
        reader_features=tuple(sorted(readers)) if reader >= 3 else None,
        writer_features=tuple(sorted(writers)) if writer >= 7 else None,
    )


def _location_uri(location: str) -> str:
    """A table or file location as delta-spark shows it: ``file:/path`` locally, the S3 URI as it is."""
    return location if is_remote(location) else "file:" + location
