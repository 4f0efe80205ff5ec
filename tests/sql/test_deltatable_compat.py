"""delta-spark's ``DeltaTable`` API beyond DML: conversion, manifests, features, builders, checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.errors import ParseException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.model import features
from serialake.core.tables import catalog
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError, UnsupportedFeatureError

pytestmark = pytest.mark.spark


def rows(spark: SparkSession, path: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


def test_convert_to_delta_in_place_with_and_without_partitions(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a", 1), ("b", 2), ("c", None)], "key string, value int")
    plain = str(tmp_path / "plain")
    df.write.parquet(plain)
    before = sorted(os.listdir(plain))
    dt = DeltaTable.convertToDelta(spark, f"parquet.`{plain}`")
    assert rows(spark, plain) == [("a", 1), ("b", 2), ("c", None)]
    snap = DeltaLog.for_table(plain).update()
    assert snap.version == 0 and all(f.stats and '"numRecords"' in f.stats for f in snap.all_files)
    assert sorted(n for n in os.listdir(plain) if n != "_delta_log") == before  # nothing rewritten
    assert dt.toDF().count() == 3
    DeltaTable.convertToDelta(spark, f"parquet.`{plain}`")  # already Delta: nothing to do
    assert DeltaLog.for_table(plain).update().version == 0

    parted = str(tmp_path / "parted")
    df.write.partitionBy("value").parquet(parted)
    schema = T.StructType([T.StructField("value", T.IntegerType())])
    DeltaTable.convertToDelta(spark, f"parquet.`{parted}`", schema)
    assert rows(spark, parted) == [("a", 1), ("b", 2), ("c", None)]
    assert list(DeltaLog.for_table(parted).update().partition_columns) == ["value"]
    # Files skipped by partition value: the stats and partition values are usable.
    assert spark.read.format("delta").load(parted).where("value = 2").count() == 1

    sql_parted = str(tmp_path / "sql")
    df.write.partitionBy("value").parquet(sql_parted)
    spark.sql(f"CONVERT TO DELTA parquet.`{sql_parted}` PARTITIONED BY (value INT)")
    assert rows(spark, sql_parted) == [("a", 1), ("b", 2), ("c", None)]

    wrong = str(tmp_path / "wrong")
    df.write.partitionBy("value").parquet(wrong)
    with pytest.raises(DeltaAnalysisException, match="directories deep"):
        DeltaTable.convertToDelta(spark, f"parquet.`{wrong}`")
    assert not DeltaLog.for_table(wrong).table_exists()


def test_generate_symlink_manifests(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(40).repartition(4).write.format("delta").save(path)
    DeltaTable.forPath(spark, path).generate("symlink_format_manifest")
    with open(os.path.join(path, "_symlink_format_manifest", "manifest")) as f:
        listed = [line.strip() for line in f]
    live = DeltaLog.for_table(path).update().all_files
    assert len(listed) == len(live) == 4
    assert all(line.startswith("file:/") and os.path.exists(line[len("file:") :]) for line in listed)

    parted = str(tmp_path / "p")
    spark.range(10).withColumn("p", F.col("id") % 2).write.format("delta").partitionBy("p").save(parted)
    spark.sql(f"GENERATE symlink_format_manifest FOR TABLE delta.`{parted}`")
    assert sorted(os.listdir(os.path.join(parted, "_symlink_format_manifest"))) == ["p=0", "p=1"]
    DeltaTable.forPath(spark, parted).delete("p = 1")
    DeltaTable.forPath(spark, parted).generate("symlink_format_manifest")
    assert sorted(os.listdir(os.path.join(parted, "_symlink_format_manifest"))) == ["p=0"]

    dv = str(tmp_path / "dv")
    spark.range(10).coalesce(1).write.format("delta").option("delta.enableDeletionVectors", "true").save(dv)
    spark.sql(f"ALTER TABLE delta.`{dv}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    DeltaTable.forPath(spark, dv).delete("id = 3")
    with pytest.raises(UnsupportedFeatureError, match="deletion vector"):
        DeltaTable.forPath(spark, dv).generate("symlink_format_manifest")


def test_builders_create_managed_tables_by_name(spark: SparkSession) -> None:
    dt = DeltaTable.create().tableName("managed_t").addColumn("value", dataType="int").execute()
    location = catalog.lookup("managed_t")
    assert location is not None and location.startswith(str(catalog.warehouse_dir()))
    assert dt.path == location
    with pytest.raises(DeltaAnalysisException, match="managed_t already exists"):
        DeltaTable.create(spark).tableName("managed_t").addColumn("x", "int").execute()
    DeltaTable.createIfNotExists().tableName("managed_t").addColumn("x", "int").execute()
    assert DeltaTable.forName(spark, "managed_t").toDF().columns == ["value"]
    DeltaTable.replace().tableName("managed_t").addColumn("key", "int").execute()
    assert spark.table("managed_t").columns == ["key"]
    with pytest.raises(DeltaTableNotFoundError, match="did not exist"):
        DeltaTable.replace(spark).tableName("no_such_t").addColumn("key", "int").execute()


def test_argument_checks_raise_what_delta_spark_raises(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)
    dt = DeltaTable.forPath(spark, path)
    with pytest.raises(TypeError):
        dt.delete(condition=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be None"):
        dt.update({"id": "1"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a dict"):
        dt.update(set=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a Spark SQL Column or a string"):
        dt.update(1, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Values of dict in .* must contain only"):
        dt.update(set={"id": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="version needs to be an int"):
        dt.restoreToVersion("0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timestamp needs to be a string"):
        dt.restoreToTimestamp(12342323232)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be converted to a valid timestamp"):
        dt.restoreToTimestamp("05/04/1999")
    with pytest.raises(ValueError, match="readerVersion"):
        dt.upgradeTableProtocol("abc", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'source' in merge cannot be None"):
        dt.merge(None, "true")  # type: ignore[arg-type]
    builder = DeltaTable.create(spark).location(str(tmp_path / "b"))
    for call in (
        lambda: builder.tableName(1),
        lambda: builder.location(1),
        lambda: builder.comment(1),
        lambda: builder.addColumn("a", 1),
        lambda: builder.addColumn("a", "int", nullable=1),
        lambda: builder.addColumns(1),
        lambda: builder.addColumns([T.StructField("a", T.IntegerType()), 1]),
        lambda: builder.partitionedBy(1, "a"),
        lambda: builder.partitionedBy([1]),
        lambda: builder.property(1, "1"),
        lambda: builder.clusterBy(1, "a"),
    ):
        with pytest.raises(TypeError):
            call()  # type: ignore[no-untyped-call]
    with pytest.raises(ParseException):
        builder.addColumn("a", "1")


def test_protocol_upgrades_never_downgrade_and_features_are_added(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)
    dt = DeltaTable.forPath(spark, path)
    dt.upgradeTableProtocol(1, 3)
    dt.upgradeTableProtocol(1, 2)  # lower: kept as it is
    detail = dt.detail().collect()[0]
    assert (detail.minReaderVersion, detail.minWriterVersion) == (1, 3)
    dt.addFeatureSupport("appendOnly")  # implied by writer version 3: nothing to commit
    assert DeltaLog.for_table(path).update().version == 1
    dt.addFeatureSupport("deletionVectors")
    detail = dt.detail().collect()[0]
    assert (detail.minReaderVersion, detail.minWriterVersion) == (3, 7)
    assert {"appendOnly", "invariants", "checkConstraints", "deletionVectors"} <= set(detail.tableFeatures)
    with pytest.raises(UnsupportedFeatureError, match="DELTA_UNSUPPORTED_FEATURES_IN_CONFIG"):
        dt.addFeatureSupport("abc")
    with pytest.raises(ValueError, match="featureName needs to be a string"):
        dt.addFeatureSupport(12345)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="truncateHistory needs to be a boolean"):
        dt.dropFeatureSupport("deletionVectors", 1)  # type: ignore[arg-type]
    dt.dropFeatureSupport("deletionVectors")
    assert not features.has_feature(DeltaLog.for_table(path).update().protocol, "deletionVectors")
