"""CLONE: shallow and deep, at a version or timestamp, by path or by name, replacing or not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import SparkSession

from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.model.validate import is_absolute_path
from serialake.exceptions import DeltaAnalysisException

pytestmark = pytest.mark.spark


def rows(spark: SparkSession, path: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


def source(spark: SparkSession, path: str, *, dvs: bool = False) -> DeltaTable:
    spark.createDataFrame([("a", 1), ("b", 2), ("c", 3)], "key string, value int").write.format("delta") \
        .save(path)  # v0
    if dvs:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    spark.createDataFrame([("d", 4), ("e", 5), ("f", 6)], "key string, value int").repartition(1) \
        .write.format("delta").mode("append").save(path)
    return DeltaTable.forPath(spark, path)


def test_shallow_clone_lists_the_source_files(spark: SparkSession, tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    dt = source(spark, src, dvs=True)
    dt.delete("key = 'e'")  # a deletion vector the clone must carry
    target = str(tmp_path / "shallow")
    clone = dt.clone(target, True, False, {"foo": "bar"})
    assert rows(spark, target) == rows(spark, src)
    snap = DeltaLog.for_table(target).update()
    assert all(is_absolute_path(f.path) for f in snap.all_files)
    assert snap.metadata.configuration["foo"] == "bar"
    assert snap.metadata.id != DeltaLog.for_table(src).update().metadata.id
    assert not any(name.endswith(".parquet") for name in os.listdir(target))  # nothing copied
    info = clone.history(1).collect()[0]
    assert info["operation"] == "CLONE" and info["operationParameters"]["isShallow"] == "true"
    # The clone is a table of its own: writes to it leave the source alone; delta-rs reads it.
    spark.createDataFrame([("z", 26)], "key string, value int").write.format("delta").mode("append").save(target)
    assert ("z", 26) in rows(spark, target) and ("z", 26) not in rows(spark, src)
    # VACUUM of the clone never touches the source's files.
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        DeltaTable.forPath(spark, target).vacuum(0)
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert len(rows(spark, src)) == 5


def test_deep_clone_is_independent(spark: SparkSession, tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    dt = source(spark, src, dvs=True)
    dt.delete("key = 'e'")
    target = str(tmp_path / "deep")
    dt.clone(target)  # deep by default
    snap = DeltaLog.for_table(target).update()
    assert not any(is_absolute_path(f.path) for f in snap.all_files)
    assert any(f.deletion_vector is not None for f in snap.all_files)
    expected = rows(spark, src)
    import shutil

    shutil.rmtree(src)  # the deep clone needs nothing of the source
    assert rows(spark, target) == expected


def test_clone_at_version_timestamp_and_replace(spark: SparkSession, tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    spark.createDataFrame([("a", 1)], "key string, value int").write.format("delta").save(src)
    time.sleep(0.05)
    between = time.time()
    time.sleep(0.05)
    dt = DeltaTable.forPath(spark, src)
    spark.createDataFrame([("b", 2)], "key string, value int").write.format("delta").mode("append").save(src)
    old = str(tmp_path / "old")
    dt.cloneAtVersion(0, old, True)
    assert rows(spark, old) == [("a", 1)]
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        dt.clone(old, True)
    dt.clone(old, True, True)  # replace: the latest version
    assert rows(spark, old) == [("a", 1), ("b", 2)]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(between)) + f".{int(between % 1 * 1000):03d}"
    at = str(tmp_path / "at")
    dt.cloneAtTimestamp(stamp, at)
    assert rows(spark, at) == [("a", 1)]
    # delta-rs reads a deep clone (it does not read a shallow clone's absolute paths: delta-rs 1.6).
    got = deltalake.DeltaTable(at).to_pyarrow_table().to_pydict()
    assert list(zip(got["key"], got["value"])) == [("a", 1)]
    with pytest.raises(ValueError, match="version needs to be an int"):
        dt.cloneAtVersion("0", at)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="isShallow needs to be a boolean"):
        dt.clone(at, isShallow=10)  # type: ignore[arg-type]


def test_sql_clone_by_name(spark: SparkSession, tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    source(spark, src)
    spark.sql(f"CREATE TABLE copy SHALLOW CLONE delta.`{src}` VERSION AS OF 0 TBLPROPERTIES ('k' = 'v')")
    assert sorted(tuple(r) for r in spark.table("copy").collect()) == [("a", 1), ("b", 2), ("c", 3)]
    assert spark.sql("SHOW TBLPROPERTIES copy ('k')").collect()[0]["value"] == "v"
    spark.sql(f"CREATE TABLE IF NOT EXISTS copy DEEP CLONE delta.`{src}`")  # exists: nothing happens
    assert spark.table("copy").count() == 3
    spark.sql(f"CREATE OR REPLACE TABLE copy DEEP CLONE delta.`{src}`")
    assert spark.table("copy").count() == 6
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        spark.sql(f"CREATE TABLE copy CLONE delta.`{src}`")
