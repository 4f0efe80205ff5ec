"""delta-spark's idioms in a configured session: ``format("delta")``, ``spark.sql``, tables by name.

Every test uses plain PySpark calls only (no ``serialake.`` function) after the session
set-up, as existing delta-spark code does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import serialake
from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.exceptions import (
    ConcurrentAppendException,
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
)

pytestmark = pytest.mark.spark


def ids(df: Any) -> list[int]:
    return sorted(r[0] for r in df.collect())


def table_of(spark: SparkSession, n: int, start: int = 0) -> Any:
    return spark.range(start, start + n).withColumn("part", (F.col("id") % 2).cast("string"))


def test_the_test_session_is_configured(spark: SparkSession) -> None:
    assert serialake.configure(spark) is spark
    assert spark.conf.get("spark.serialake.enabled") == "true"


def test_save_and_load_with_the_default_error_mode(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table_of(spark, 5).write.format("delta").save(path)
    assert ids(spark.read.format("delta").load(path)) == [0, 1, 2, 3, 4]
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        table_of(spark, 3, 10).write.format("delta").save(path)  # errorifexists, as Spark's default
    table_of(spark, 3, 10).write.format("delta").mode("ignore").save(path)
    assert ids(spark.read.format("delta").load(path)) == [0, 1, 2, 3, 4]
    table_of(spark, 2, 20).write.mode("append").format("delta").save(path)
    assert ids(spark.read.load(path, format="delta")) == [0, 1, 2, 3, 4, 20, 21]
    table_of(spark, 2, 30).write.save(path, format="delta", mode="overwrite")
    assert ids(spark.read.format("delta").option("path", path).load()) == [30, 31]
    log = DeltaLog.for_table(path)
    assert log.update().version == 2
    assert [r["operation"] for r in DeltaTable.forPath(spark, path).history().collect()] == ["WRITE"] * 3


def test_file_metadata_column_is_reachable(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's hidden ``_metadata`` column names each row's data file, as with delta-spark, with or
    without partitions and deletion vectors; ``select *`` does not show it."""
    path = str(tmp_path / "t")
    table_of(spark, 40).repartition(4).write.format("delta").partitionBy("part").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    DeltaTable.forPath(spark, path).delete("id % 10 = 0")
    df = spark.read.format("delta").load(path)
    assert df.columns == ["id", "part"]
    files = {os.path.basename(r[0]) for r in df.select("_metadata.file_path").distinct().collect()}
    snap = DeltaLog.for_table(path).update()
    assert files == {os.path.basename(f.path) for f in snap.all_files}
    rows = df.filter("part = '1'").select("id", "_metadata.file_path", "_metadata.file_size").collect()
    assert sorted(r["id"] for r in rows) == [i for i in range(40) if i % 2 and i % 10]
    sizes = {os.path.basename(f.path): f.size for f in snap.all_files}
    assert all(sizes[os.path.basename(r["file_path"])] == r["file_size"] for r in rows)


def test_filters_on_a_loaded_table_skip_files(spark: SparkSession, tmp_path: Path) -> None:
    """``load(path).filter(...)`` reads only the files the condition can match (partition values,
    then stats), with the rows a plain filter gives; a write computed from it records that narrower read."""
    path = str(tmp_path / "t")
    spark.range(0, 400, 1, 4).withColumn("part", (F.col("id") % 2).cast("string")).write.format("delta") \
        .partitionBy("part").save(path)  # 8 files: ids in 4 ranges x 2 partitions
    files = len(DeltaLog.for_table(path).update().all_files)

    def scanned(df: Any) -> int:
        return len(df.inputFiles())

    df = spark.read.format("delta").load(path)
    assert scanned(df) == files
    by_partition = df.filter("part = '1'")
    assert scanned(by_partition) == files // 2
    by_stats = df.where(F.col("id") < 50)  # a Column: its SQL skips files, the Column filters rows
    assert scanned(by_stats) == 2 and ids(by_stats) == list(range(50))
    both = df.filter("part = '0'").filter(F.col("id") >= 350)
    assert scanned(both) == 1 and ids(both) == list(range(350, 400, 2))
    # A condition the core does not read (a Python UDF) is Spark's alone: same rows, every file.
    odd = F.udf(lambda v: v % 7 == 0, "boolean")
    assert ids(df.filter(odd("id"))) == list(range(0, 400, 7))
    # Time travel keeps its version when filtered.
    table_of(spark, 1, 1000).write.format("delta").mode("append").save(path)
    old = spark.read.format("delta").option("versionAsOf", 0).load(path).filter("id >= 398")
    assert ids(old) == [398, 399]


def test_time_travel_options_read_old_versions(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table_of(spark, 2).write.format("delta").save(path)
    time.sleep(0.02)
    between = time.time()
    time.sleep(0.02)
    table_of(spark, 2, 10).write.format("delta").mode("append").save(path)
    reader = spark.read.format("delta")
    assert ids(reader.option("versionAsOf", 0).load(path)) == [0, 1]
    assert ids(spark.read.format("delta").option("versionAsOf", "1").load(path)) == [0, 1, 10, 11]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(between)) + f".{int(between % 1 * 1000):03d}"
    assert ids(spark.read.format("delta").option("timestampAsOf", stamp).load(path)) == [0, 1]
    with pytest.raises(DeltaIllegalArgumentException, match="both"):
        spark.read.format("delta").option("versionAsOf", 0).option("timestampAsOf", stamp).load(path)
    same = serialake.read(spark, path, version=0)
    assert sorted(map(tuple, same.collect())) == sorted(
        map(tuple, spark.read.format("delta").option("versionAsOf", 0).load(path).collect())
    )


def test_writer_options(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table_of(spark, 6).write.format("delta").partitionBy("part").save(path)
    snap = DeltaLog.for_table(path).update()
    assert snap.metadata.partition_columns == ("part",)
    # replaceWhere: only the matching rows go
    (table_of(spark, 2, 100).filter("part = '0'").write.format("delta").mode("overwrite")
     .option("replaceWhere", "part = '0'").save(path))  # fmt: skip
    assert ids(spark.read.format("delta").load(path)) == [1, 3, 5, 100]
    # mergeSchema adds a column; without it the write is refused
    wider = table_of(spark, 1, 200).withColumn("extra", F.lit("x"))
    with pytest.raises(Exception, match="(?i)schema"):
        wider.write.format("delta").mode("append").save(path)
    wider.write.format("delta").mode("append").option("mergeSchema", "true").save(path)
    assert "extra" in spark.read.format("delta").load(path).columns
    # overwriteSchema replaces the schema
    (spark.range(3).withColumnRenamed("id", "k").write.format("delta").mode("overwrite")
     .option("overwriteSchema", True).save(path))  # fmt: skip
    assert spark.read.format("delta").load(path).columns == ["k"]
    # userMetadata, idempotent writes, maxRecordsPerFile
    (spark.range(10).withColumnRenamed("id", "k").coalesce(1).write.format("delta").mode("append")
     .option("userMetadata", "nightly").option("txnAppId", "job").option("txnVersion", 1)
     .option("maxRecordsPerFile", 3).save(path))  # fmt: skip
    (spark.range(10).withColumnRenamed("id", "k").write.format("delta").mode("append")
     .options(txnAppId="job", txnVersion="1").save(path))  # fmt: skip  # already committed: skipped
    assert spark.read.format("delta").load(path).count() == 13
    last = DeltaTable.forPath(spark, path).history(1).collect()[0]
    assert last["userMetadata"] == "nightly"
    assert last["operationMetrics"]["numFiles"] == "4"  # ten rows, three a file


def test_dynamic_partition_overwrite(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id INT, p STRING").write.format("delta").partitionBy(
        "p"
    ).save(path)
    new = spark.createDataFrame([(10, "a"), (30, "c")], "id INT, p STRING")
    new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic").save(path)
    got = sorted(map(tuple, spark.read.format("delta").load(path).collect()))
    assert got == [(2, "b"), (10, "a"), (30, "c")]
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        spark.createDataFrame([(20, "b")], "id INT, p STRING").write.format("delta").mode("overwrite").save(path)
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    got = sorted(map(tuple, spark.read.format("delta").load(path).collect()))
    assert got == [(10, "a"), (20, "b"), (30, "c")]
    with pytest.raises(DeltaIllegalArgumentException, match="replaceWhere"):
        (new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic")
         .option("replaceWhere", "p = 'a'").save(path))  # fmt: skip


def _racing_add(log: DeltaLog, part: str, original: Any) -> Any:
    """``original`` (a step just before a commit), preceded by another writer's commit of a file in ``part``."""
    from serialake.core.model.actions import AddFile

    def hooked(*args: Any, **kwargs: Any) -> Any:
        log.start_transaction().commit([AddFile(path=f"p={part}/racer-{time.monotonic_ns()}.parquet",
                                                partition_values={"p": part}, size=1, modification_time=0,
                                                data_change=True)])  # fmt: skip
        return original(*args, **kwargs)

    return hooked


def test_dynamic_overwrite_conflicts_only_in_its_partitions(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partitions a dynamic overwrite replaces are read: at Serializable, a concurrent append
    into one of them fails it, one into another partition does not. (At WriteSerializable a
    blind append never conflicts: it is ordered after the overwrite.)"""
    import importlib

    write_mod = importlib.import_module("serialake.spark.write")

    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a"), (2, "b")], "id INT, p STRING").write.format("delta").partitionBy("p").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')")
    log = DeltaLog.for_table(path)
    original = write_mod.commit_or_clean_up
    new = spark.createDataFrame([(10, "a")], "id INT, p STRING")
    monkeypatch.setattr(write_mod, "commit_or_clean_up", _racing_add(log, "b", original))
    new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic").save(path)
    monkeypatch.setattr(write_mod, "commit_or_clean_up", _racing_add(log, "a", original))
    with pytest.raises(ConcurrentAppendException):
        new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic").save(path)


def test_tables_by_name_agree_everywhere(spark: SparkSession, tmp_path: Path, tmp_catalog: Path) -> None:
    table_of(spark, 4).write.format("delta").saveAsTable("events")
    location = serialake.sql.lookup("events")
    assert location is not None and location.startswith(str(tmp_catalog.parent))
    assert ids(spark.table("events")) == [0, 1, 2, 3]
    assert ids(spark.read.table("events")) == [0, 1, 2, 3]
    assert ids(spark.read.format("delta").table("default.events")) == [0, 1, 2, 3]
    assert ids(spark.sql("SELECT id FROM events WHERE id > 1")) == [2, 3]
    assert ids(DeltaTable.forName(spark, "events").toDF()) == [0, 1, 2, 3]
    assert spark.catalog.tableExists("events")
    assert "events" in [t.name for t in spark.catalog.listTables()]
    described = {r[0] for r in spark.sql("DESCRIBE TABLE events").collect()}
    assert {"id", "part"} <= described
    detail = spark.sql("DESCRIBE DETAIL events").collect()[0]
    assert detail["location"].rstrip("/").endswith(location.rstrip("/").split("/")[-1])
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        table_of(spark, 1).write.format("delta").saveAsTable("events")
    table_of(spark, 1, 50).write.mode("append").saveAsTable("events")  # its format is kept: Delta
    table_of(spark, 1, 60).write.format("delta").mode("ignore").saveAsTable("events")
    assert ids(spark.table("events")) == [0, 1, 2, 3, 50]
    table_of(spark, 1, 70).write.format("delta").mode("overwrite").saveAsTable("events")
    assert ids(spark.table("events")) == [70]
    with pytest.raises(DeltaTableNotFoundError):
        DeltaTable.forName(spark, "no_such_table")


def test_save_as_table_at_a_path_and_insert_into(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "ext")
    spark.createDataFrame([(1, "a")], "id INT, s STRING").write.format("delta").option("path", path).saveAsTable(
        "ext"
    )
    assert DeltaLog.for_table(path).table_exists()
    # insertInto matches by position, not by name
    spark.createDataFrame([("b", 2)], "x STRING, y INT").selectExpr("y", "x").write.insertInto("ext")
    assert sorted(map(tuple, spark.table("ext").collect())) == [(1, "a"), (2, "b")]
    spark.createDataFrame([(3, "c")], "a INT, b STRING").write.insertInto("ext", overwrite=True)
    assert sorted(map(tuple, spark.table("ext").collect())) == [(3, "c")]
    with pytest.raises(DeltaAnalysisException, match="position"):
        spark.range(1).write.insertInto("ext")


def test_write_to_v2(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id INT, p STRING")
    df.writeTo("v2").using("delta").partitionedBy("p").tableProperty("delta.appendOnly", "false").create()
    location = serialake.sql.lookup("v2")
    assert location is not None
    snap = DeltaLog.for_table(location).update()
    assert snap.metadata.partition_columns == ("p",)
    assert snap.metadata.configuration.get("delta.appendOnly") == "false"
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        df.writeTo("v2").using("delta").create()
    spark.createDataFrame([(3, "c")], "id INT, p STRING").writeTo("v2").append()
    assert ids(spark.table("v2")) == [1, 2, 3]
    spark.createDataFrame([(20, "b")], "id INT, p STRING").writeTo("v2").overwrite(F.col("p") == "b")
    assert ids(spark.table("v2")) == [1, 3, 20]
    spark.createDataFrame([(30, "c")], "id INT, p STRING").writeTo("v2").overwritePartitions()
    assert ids(spark.table("v2")) == [1, 20, 30]
    spark.createDataFrame([(9, "z")], "id INT, p STRING").writeTo("v2").using("delta").createOrReplace()
    assert ids(spark.table("v2")) == [9]
    with pytest.raises(DeltaTableNotFoundError):
        df.writeTo("not_there").using("delta").append()
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        df.writeTo("not_there").append()  # no provider, no serialake table: Spark's own error


def test_spark_sql_runs_delta_statements_and_passes_the_rest(spark: SparkSession, tmp_path: Path) -> None:
    location = str(tmp_path / "s")
    spark.sql(f"CREATE TABLE s (id BIGINT, name STRING) USING delta LOCATION '{location}'")
    spark.sql("INSERT INTO s VALUES (1, 'a'), (2, 'b')")
    spark.sql("UPDATE s SET name = 'B' WHERE id = 2")
    spark.sql("DELETE FROM s WHERE id = 1")
    assert [tuple(r) for r in spark.sql("SELECT * FROM s").collect()] == [(2, "B")]
    assert [tuple(r) for r in spark.sql(f"SELECT count(*) FROM delta.`{location}`").collect()] == [(1,)]
    history = spark.sql("DESCRIBE HISTORY s").collect()
    assert [r["operation"] for r in history][:2] == ["DELETE", "UPDATE"]
    # statements serialake does not know are Spark's, unchanged
    assert spark.sql("SELECT 1 AS one").collect()[0]["one"] == 1
    spark.sql("SET spark.sql.shuffle.partitions=4")
    assert spark.sql("SHOW DATABASES").count() >= 1
    with pytest.raises(AnalysisException):
        spark.sql("SELECT * FROM no_such_table_anywhere")
    # parameterized queries stay Spark's
    assert spark.sql("SELECT :x AS x", args={"x": 5}).collect()[0]["x"] == 5


def test_conflicts_keep_their_class_through_spark_sql(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DELETE through plain ``spark.sql`` that loses to a concurrent append into what it read
    (Serializable) raises ``ConcurrentAppendException`` itself, not a wrapped error."""
    from serialake.spark.dml import delete_command

    location = str(tmp_path / "c")
    spark.createDataFrame([(1, "a"), (2, "b")], "id INT, p STRING").write.format("delta").partitionBy("p").save(
        location
    )
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')")
    log = DeltaLog.for_table(location)
    racing = _racing_add(log, "a", delete_command.commit_or_clean_up)
    monkeypatch.setattr(delete_command, "commit_or_clean_up", racing)
    with pytest.raises(ConcurrentAppendException):
        spark.sql(f"DELETE FROM delta.`{location}` WHERE p = 'a'")


def test_other_sessions_are_untouched(spark: SparkSession, tmp_path: Path) -> None:
    other = spark.newSession()
    assert other.conf.get("spark.serialake.enabled", "false") == "false"
    path = str(tmp_path / "plain")
    spark.range(3).write.format("parquet").save(path)  # other formats: Spark's own writer
    assert sorted(r[0] for r in spark.read.parquet(path).collect()) == [0, 1, 2]
    with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
        other.range(1).write.format("delta").save(str(tmp_path / "d"))  # no Delta source in plain Spark
    assert not os.path.exists(os.path.join(tmp_path, "d", "_delta_log"))
