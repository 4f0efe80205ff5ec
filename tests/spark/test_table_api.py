"""``DeltaTable``: delta-spark's Python API (forPath, history, detail, vacuum, properties, builder)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from serialake.core import DeltaLog
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    InvalidPropertyError,
)
from serialake.spark import DeltaTable, read, write
from serialake.spark.dml import RETENTION_CHECK_CONF
from serialake.sql import sql as serialake_sql

pytestmark = pytest.mark.spark

HISTORY_COLUMNS = [
    "version", "timestamp", "userId", "userName", "operation", "operationParameters", "job", "notebook",
    "clusterId", "readVersion", "isolationLevel", "isBlindAppend", "operationMetrics", "userMetadata", "engineInfo",
]
DETAIL_COLUMNS = [
    "format", "id", "name", "description", "location", "createdAt", "lastModified", "partitionColumns",
    "clusteringColumns", "numFiles", "sizeInBytes", "properties", "minReaderVersion", "minWriterVersion",
    "tableFeatures",
]
DAY_S = 86_400


@pytest.fixture
def no_retention_check(spark: SparkSession) -> Iterator[None]:
    spark.conf.set(RETENTION_CHECK_CONF, "false")
    yield
    spark.conf.unset(RETENTION_CHECK_CONF)


def test_for_path_to_df_alias(spark: SparkSession, tmp_table: str) -> None:
    assert not DeltaTable.isDeltaTable(spark, tmp_table)
    with pytest.raises(DeltaTableNotFoundError, match="is not a Delta table"):
        DeltaTable.forPath(spark, tmp_table)
    write(spark.createDataFrame([(1, "a")], "id long, s string"), tmp_table)
    assert DeltaTable.isDeltaTable(spark, tmp_table)
    table = DeltaTable.forPath(spark, tmp_table)
    assert [tuple(r) for r in table.toDF().collect()] == [(1, "a")]
    write(spark.createDataFrame([(2, "b")], "id long, s string"), tmp_table)
    assert table.toDF().count() == 2  # toDF reads the latest version
    assert [r.id for r in table.alias("t").toDF().select("t.id").orderBy("t.id").collect()] == [1, 2]


def test_history_and_detail(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(1, 1)], "id long, p int"), tmp_table, partitionBy="p", userMetadata="first")
    write(spark.createDataFrame([(2, 2)], "id long, p int"), tmp_table)
    table = DeltaTable.forPath(spark, tmp_table)
    history = table.history()
    assert history.columns == HISTORY_COLUMNS
    h = history.collect()
    assert [r.version for r in h] == [1, 0]
    assert h[0].operation == "WRITE" and h[0].operationParameters == {"mode": "Append", "partitionBy": '["p"]'}
    assert h[0].readVersion == 0 and h[0].isBlindAppend is True and h[0].engineInfo.startswith("serialake")
    assert h[0].operationMetrics["numFiles"] == "1" and h[0].operationMetrics["numOutputRows"] == "1"
    assert h[1].userMetadata == "first" and h[1].readVersion is None and h[1].isolationLevel == "WriteSerializable"
    assert h[0].timestamp >= h[1].timestamp
    assert [r.version for r in table.history(1).collect()] == [1]

    detail = table.detail()
    assert detail.columns == DETAIL_COLUMNS
    (d,) = detail.collect()
    snap = DeltaLog.for_table(tmp_table).update()
    assert (d.format, d.id, d.location) == ("delta", snap.metadata.id, "file:" + snap.table_path)
    assert d.partitionColumns == ["p"] and d.clusteringColumns == [] and d.numFiles == 2
    assert d.sizeInBytes == sum(f.size for f in snap.all_files)
    assert (d.minReaderVersion, d.minWriterVersion, d.tableFeatures) == (1, 2, ["appendOnly", "invariants"])


def test_builder(spark: SparkSession, tmp_table: str) -> None:
    table = (
        DeltaTable.create(spark)
        .location(tmp_table)
        .tableName("events")
        .comment("all events")
        .addColumn("id", "BIGINT", nullable=False, comment="key")
        .addColumn("day", "DATE")
        .addColumns(spark.createDataFrame([], "payload map<string,string>").schema)
        .partitionedBy("day")
        .property("delta.appendOnly", "true")
        .property("owner", "me")
        .execute()
    )
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.version == 0 and snap.partition_columns == ("day",)
    assert snap.metadata.name == "events" and snap.metadata.description == "all events"
    assert snap.configuration == {"delta.appendOnly": "true", "owner": "me"}
    assert [(f.name, f.nullable) for f in snap.schema.fields] == [("id", False), ("day", True), ("payload", True)]
    assert table.toDF().columns == ["id", "day", "payload"] and table.toDF().count() == 0
    assert table.history().collect()[0].operation == "CREATE TABLE"

    with pytest.raises(DeltaAnalysisException, match="already exists"):
        DeltaTable.create(spark).location(tmp_table).addColumn("id", "BIGINT").execute()
    DeltaTable.createIfNotExists(spark).location(tmp_table).addColumn("x", "INT").execute()
    assert DeltaLog.for_table(tmp_table).update().version == 0

    write(spark.createDataFrame([(1, None, None)], "id long, day date, payload map<string,string>"), tmp_table)
    DeltaTable.replace(spark).location(tmp_table).addColumn("x", "INT").execute()
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.schema.field_names == ["x"] and snap.num_files == 0 and snap.configuration == {}
    assert DeltaTable.forPath(spark, tmp_table).history(1).collect()[0].operation == "REPLACE TABLE"

    other = tmp_table + "-other"
    with pytest.raises(DeltaTableNotFoundError):
        DeltaTable.replace(spark).location(other).addColumn("x", "INT").execute()
    DeltaTable.createOrReplace(spark).location(other).addColumn("x", "INT").execute()
    assert DeltaLog.for_table(other).update().version == 0
    with pytest.raises(DeltaAnalysisException, match="Partition column 'nope'"):
        DeltaTable.createOrReplace(spark).location(other).addColumn("x", "INT").partitionedBy("nope").execute()


def test_properties_and_protocol(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(1,)], "id long"), tmp_table)
    table = DeltaTable.forPath(spark, tmp_table)
    table.setTableProperties({"delta.checkpointInterval": "5", "team": "core"})
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.configuration == {"delta.checkpointInterval": "5", "team": "core"}
    assert table.history(1).collect()[0].operation == "SET TBLPROPERTIES"
    with pytest.raises(InvalidPropertyError, match="delta.checkpointInterval"):
        table.setTableProperties({"delta.checkpointInterval": "-1"})
    with pytest.raises(InvalidPropertyError, match="delta.nope"):
        table.setTableProperties({"delta.nope": "1"})

    table.unsetTableProperties(["team"])
    assert DeltaLog.for_table(tmp_table).update().configuration == {"delta.checkpointInterval": "5"}
    with pytest.raises(DeltaAnalysisException, match="team"):
        table.unsetTableProperties(["team"])
    table.unsetTableProperties(["team"], ifExists=True)

    table.setTableProperties({"delta.enableDeletionVectors": "true"})
    protocol = DeltaLog.for_table(tmp_table).update().protocol
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert "deletionVectors" in (protocol.reader_features or ())
    assert "deletionVectors" in (protocol.writer_features or ())
    version = DeltaLog.for_table(tmp_table).update().version
    table.upgradeTableProtocol(1, 2)  # lower than the table's: kept as it is (delta-spark's rule)
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.version == version and snap.protocol == protocol


def test_upgrade_protocol(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(1,)], "id long"), tmp_table)
    table = DeltaTable.forPath(spark, tmp_table)
    table.upgradeTableProtocol(1, 7)
    protocol = DeltaLog.for_table(tmp_table).update().protocol
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 7)
    assert set(protocol.writer_features or ()) == {"appendOnly", "invariants"}
    assert table.history(1).collect()[0].operation == "UPGRADE PROTOCOL"
    assert table.toDF().count() == 1


def _age(path: str, days: float) -> None:
    old = time.time() - days * DAY_S
    os.utime(path, (old, old))


def test_vacuum(spark: SparkSession, tmp_table: str, no_retention_check: None) -> None:
    write(spark.createDataFrame([(1, 1), (2, 2)], "id long, p int").coalesce(1), tmp_table, partitionBy="p")
    old_files = [os.path.join(tmp_table, f.path) for f in DeltaLog.for_table(tmp_table).update().all_files]
    write(spark.createDataFrame([(3, 1)], "id long, p int"), tmp_table, mode="overwrite")
    live = [os.path.join(tmp_table, f.path) for f in DeltaLog.for_table(tmp_table).update().all_files]
    orphan_old = os.path.join(tmp_table, "p=9", "orphan-old.parquet")
    orphan_new = os.path.join(tmp_table, "orphan-new.parquet")
    stale_staging = os.path.join(tmp_table, "_staging", "abandoned")
    os.makedirs(os.path.dirname(orphan_old))
    os.makedirs(stale_staging)
    for path in (orphan_old, orphan_new, os.path.join(stale_staging, "part.parquet")):
        open(path, "wb").close()
    for path in (orphan_old, *live, *old_files, os.path.join(stale_staging, "part.parquet"), stale_staging):
        _age(path, 30)
    table = DeltaTable.forPath(spark, tmp_table)

    # Default retention (7 days): only the old orphan and the abandoned staging dir go; tombstoned
    # files are kept while their tombstones are younger than the retention.
    deleted = [r.path for r in table.vacuum().collect()]
    assert deleted == ["file:" + orphan_old]
    assert not os.path.exists(stale_staging) and not os.path.exists(os.path.dirname(orphan_old))
    assert all(os.path.exists(p) for p in (*live, *old_files, orphan_new))

    # Zero retention: tombstoned files go too; referenced files and the log stay.
    deleted = sorted(r.path for r in table.vacuum(0).collect())
    assert deleted == sorted("file:" + p for p in [*old_files, orphan_new])
    assert all(os.path.exists(p) for p in live)
    assert [tuple(r) for r in table.toDF().collect()] == [(3, 1)]
    assert os.path.exists(os.path.join(tmp_table, "_delta_log", "00000000000000000000.json"))
    ops = [r.operation for r in table.history(4).collect()]
    assert ops == ["VACUUM END", "VACUUM START", "VACUUM END", "VACUUM START"]
    assert read(spark, tmp_table).count() == 1

    # Version 0's files are gone: reading it names the table, the version and the VACUUM.
    for attempt in (lambda: read(spark, tmp_table, version=0),
                    lambda: serialake_sql(spark, f"SELECT * FROM delta.`{tmp_table}` VERSION AS OF 0")):
        with pytest.raises(DeltaAnalysisException) as info:
            attempt()
        msg = str(info.value)
        assert f"Cannot read table {tmp_table} at version 0" in msg
        assert "no longer exist" in msg and "VACUUM (version" in msg
    assert read(spark, tmp_table, version=1).count() == 1  # the latest files are all there


def test_vacuum_retention_check(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(1,)], "id long"), tmp_table)
    with pytest.raises(DeltaIllegalArgumentException, match=RETENTION_CHECK_CONF.replace(".", r"\.")):
        DeltaTable.forPath(spark, tmp_table).vacuum(1)
    assert DeltaTable.forPath(spark, tmp_table).vacuum(24 * 8).count() == 0
