"""Spark's own Parquet writer straight to final file names (``spark.serialake.dataFiles.io=spark``).

The route object-store tables take where Spark has a file system for their URI (S3A on
users' clusters; this pyspark has none, so here it runs on local tables, with the same
code): no staging directory, no rename, the file list from the job's commit record, every
file's footer read back by the driver. Checked against Spark's and delta-rs' reads, through
appends, partitions with awkward values, column mapping with IcebergCompatV2, Spark-side
DML and OPTIMIZE, a failing job and an empty one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.exceptions import DeltaIllegalArgumentException, UnsupportedFeatureError
from serialake.spark import DeltaTable, direct
from serialake.spark.dml.engine import COMPACTION_MAX_BYTES_CONF, DML_MAX_BYTES_CONF
from tests.spark.test_uniform import UNIFORM, delta_rs_rows, same_everywhere, spark_rows

pytestmark = pytest.mark.spark


@pytest.fixture
def direct_io(spark: SparkSession) -> Iterator[SparkSession]:
    """The session writing every table with Spark straight to final names, DML on Spark's side."""
    spark.conf.set(direct.DATA_IO_CONF, "spark")
    spark.conf.set(DML_MAX_BYTES_CONF, "0")
    spark.conf.set(COMPACTION_MAX_BYTES_CONF, "0")
    try:
        yield spark
    finally:
        for key in (direct.DATA_IO_CONF, DML_MAX_BYTES_CONF, COMPACTION_MAX_BYTES_CONF):
            spark.conf.unset(key)


def table_files(path: str) -> set[str]:
    """Every file under the table but its log, relative to it."""
    out = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for name in files:
            out.add(os.path.relpath(os.path.join(root, name), path))
    return out


def committed(path: str) -> set[str]:
    from urllib.parse import unquote

    return {unquote(a.path) for a in DeltaLog.for_table(path).update().all_files}


def test_files_are_written_once_at_final_names_listed_by_the_job(direct_io: SparkSession, tmp_table: str) -> None:
    spark = direct_io
    df = spark.range(0, 5000).select(
        F.col("id"),
        (F.col("id") % 4).cast("string").alias("p"),
        F.when(F.col("id") % 7 == 0, None).otherwise(F.col("id").cast("string")).alias("s"),
    )
    df.repartition(3).write.format("delta").partitionBy("p").option("maxRecordsPerFile", 700).save(tmp_table)
    df.where("id < 100").write.format("delta").mode("append").save(tmp_table)

    files = committed(tmp_table)
    assert table_files(tmp_table) == files  # no staging, no job record, no checksum, nothing uncommitted
    jobs = {f.split("/")[0] for f in files}
    assert len(jobs) == 2 and all(direct.is_job_dir(j) for j in jobs)
    snap = DeltaLog.for_table(tmp_table).update()
    for add in snap.all_files:
        assert add.path.split("/")[1] == f"p={add.partition_values['p']}"
        assert add.stats is not None and '"numRecords"' in add.stats
    assert sum(json.loads(a.stats or "{}")["numRecords"] for a in snap.all_files) == 5100
    assert max(json.loads(a.stats or "{}")["numRecords"] for a in snap.all_files) <= 700
    expected = sorted([(i, str(i % 4), None if i % 7 == 0 else str(i)) for i in range(5000)]
                      + [(i, str(i % 4), None if i % 7 == 0 else str(i)) for i in range(100)])  # fmt: skip
    assert spark_rows(spark.read.format("delta").load(tmp_table).select("id", "p", "s")) == sorted(expected, key=repr)
    assert delta_rs_rows(tmp_table, ["id", "p", "s"]) == sorted(expected, key=repr)


def test_partitioned_write_from_another_thread(direct_io: SparkSession, tmp_table: str) -> None:
    """Pipelines write from worker threads: the sink plans in that thread's JVM thread, which has
    no active session unless the writer makes one (it failed with a NullPointerException)."""
    import threading

    failures: list[BaseException] = []

    def write() -> None:
        try:
            direct_io.range(6).selectExpr("id", "id % 3 AS p").write.format("delta").partitionBy("p").save(tmp_table)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            failures.append(e)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    assert not failures, failures
    got = sorted((r.id, r.p) for r in direct_io.read.format("delta").load(tmp_table).collect())
    assert got == [(i, i % 3) for i in range(6)]


def test_awkward_partition_values_round_trip(direct_io: SparkSession, tmp_table: str) -> None:
    spark = direct_io
    values = ["a b", "x:y", "50%", "slash/in", "é", None, ""]
    rows = [(i, v) for i, v in enumerate(values)]
    spark.createDataFrame(rows, "id long, p string").write.format("delta").partitionBy("p").save(tmp_table)
    got = spark_rows(spark.read.format("delta").load(tmp_table))
    assert got == sorted([(i, None if v in (None, "") else v) for i, v in rows], key=repr)
    assert delta_rs_rows(tmp_table, ["id", "p"]) == got
    assert table_files(tmp_table) == committed(tmp_table)


def test_dml_and_optimize_on_spark_write_directly(direct_io: SparkSession, tmp_table: str) -> None:
    spark = direct_io
    spark.range(0, 400).selectExpr("id", "id % 2 AS p", "'v' AS s").repartition(4).write.format("delta").partitionBy(
        "p"
    ).save(tmp_table)
    t = DeltaTable.forPath(spark, tmp_table)
    t.delete("id % 10 = 0")
    t.update("id % 10 = 1", {"s": "'u'"})
    source = spark.createDataFrame([(2, "m"), (1000, "n")], "id long, s string")
    (t.alias("t").merge(source.alias("s"), "t.id = s.id")
     .whenMatchedUpdate(set={"s": "s.s"})
     .whenNotMatchedInsert(values={"id": "s.id", "p": "s.id % 2", "s": "s.s"}).execute())  # fmt: skip
    t.optimize().executeCompaction()
    expected: dict[int, str] = {i: "v" for i in range(400) if i % 10}
    expected.update({i: "u" for i in range(400) if i % 10 == 1})
    expected.update({2: "m", 1000: "n"})
    want = sorted(((i, i % 2, s) for i, s in expected.items()), key=repr)
    assert spark_rows(spark.read.format("delta").load(tmp_table).select("id", "p", "s")) == want
    assert delta_rs_rows(tmp_table, ["id", "p", "s"]) == want
    assert all(direct.is_job_dir(f.split("/")[0]) for f in committed(tmp_table))
    assert not any(name.endswith(".crc") or "_spark_metadata" in name for name in table_files(tmp_table))


def vacuum(spark: SparkSession, table: str, hours: float) -> None:
    """VACUUM with a retention below the default allowed."""
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(key, "false")
    try:
        DeltaTable.forPath(spark, table).vacuum(hours)
    finally:
        spark.conf.unset(key)


def test_vacuum_removes_what_direct_writes_no_longer_reference(direct_io: SparkSession, tmp_table: str) -> None:
    spark = direct_io
    spark.range(0, 100).selectExpr("id", "id % 3 AS p").write.format("delta").partitionBy("p").save(tmp_table)
    spark.range(0, 50).selectExpr("id", "id % 3 AS p").write.format("delta").mode("overwrite").save(tmp_table)
    vacuum(spark, tmp_table, 0)
    assert table_files(tmp_table) == committed(tmp_table)
    assert spark.read.format("delta").load(tmp_table).count() == 50


def test_vacuum_removes_the_leftovers_of_a_direct_write_that_died(direct_io: SparkSession, tmp_table: str) -> None:
    """A job that died between its tasks and its commit leaves its files and its record: VACUUM
    removes both once older than the retention, and leaves a younger job's alone."""
    import time

    spark = direct_io
    spark.range(0, 10).write.format("delta").save(tmp_table)
    committed_before = committed(tmp_table)
    old = time.time() - 3 * 3600
    leftovers = {"0123456789abcdef": old, "fedcba9876543210": time.time()}
    for job, mtime in leftovers.items():
        for rel in ("part-00000-x.c000.snappy.parquet", "_spark_metadata/0", "_spark_metadata/.0.crc"):
            path = os.path.join(tmp_table, job, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("x")
            os.utime(path, (mtime, mtime))
        for d in (os.path.join(tmp_table, job, "_spark_metadata"), os.path.join(tmp_table, job)):
            os.utime(d, (mtime, mtime))
    vacuum(spark, tmp_table, 1)
    young = {f"fedcba9876543210/{r}" for r in ("part-00000-x.c000.snappy.parquet", "_spark_metadata/0",
                                               "_spark_metadata/.0.crc")}  # fmt: skip
    assert table_files(tmp_table) == committed_before | young
    assert not os.path.exists(os.path.join(tmp_table, "0123456789abcdef"))


def test_uniform_table_written_directly_reads_the_same_everywhere(direct_io: SparkSession, tmp_table: str) -> None:
    spark = direct_io
    spark.sql(
        f"CREATE TABLE delta.`{tmp_table}` (id BIGINT, name STRING, p STRING) USING delta PARTITIONED BY (p) "
        f"TBLPROPERTIES ({UNIFORM})"
    )
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a', 'east'), (2, NULL, 'west'), (3, 'c', NULL)")
    DeltaTable.forPath(spark, tmp_table).update("id = 1", {"name": "'renamed'"})
    rows = same_everywhere(spark, tmp_table)
    assert rows == [(1, "renamed", "east"), (2, None, "west"), (3, "c", None)]
    assert not any(part.startswith("_") for f in committed(tmp_table) for part in f.split("/"))


def test_failed_job_commits_nothing_and_leaves_no_file(direct_io: SparkSession, tmp_table: str) -> None:
    spark = direct_io
    spark.range(0, 10).write.format("delta").save(tmp_table)
    before = table_files(tmp_table)
    bad = spark.range(0, 1000, numPartitions=4).select(
        F.col("id"), F.assert_true(F.col("id") < 900, "row 900 refused").alias("check")
    )
    with pytest.raises(Exception, match="row 900 refused"):
        bad.select("id").where(F.col("check").isNull()).write.format("delta").mode("append").save(tmp_table)
    assert DeltaLog.for_table(tmp_table).update().version == 0
    assert table_files(tmp_table) == before


def test_a_failed_job_s_late_tasks_leave_no_file(direct_io: SparkSession, tmp_table: str) -> None:
    """Spark reports the job failed while its other tasks still run: what they write after that is
    deleted too (the write waits until none of the job's tasks runs)."""
    spark = direct_io
    spark.range(0, 10).write.format("delta").save(tmp_table)
    before = table_files(tmp_table)

    # A JVM-side pause (not a Python UDF, whose tasks Spark's kill interrupts) on the first row of
    # each partition but the failing one's: those tasks finish and commit after the job failed.
    pause = F.expr("reflect('java.lang.Thread', 'sleep', CAST(2000 AS BIGINT))")
    slow = F.when(F.col("id").isin(0, 250, 500), F.length(pause) * 0 + F.col("id")).otherwise(F.col("id"))
    bad = spark.range(0, 1000, numPartitions=4).select(
        slow.alias("id"), F.assert_true(F.col("id") < 900, "row 900 refused").alias("check")
    )
    with pytest.raises(Exception, match="row 900 refused"):
        bad.select("id").where(F.col("check").isNull()).write.format("delta").mode("append").save(tmp_table)
    time.sleep(3.0)  # any task still running would have written its file by now
    assert DeltaLog.for_table(tmp_table).update().version == 0
    assert table_files(tmp_table) == before


def test_another_file_sink_commit_protocol_is_refused_before_writing(direct_io: SparkSession, tmp_table: str) -> None:
    """Only Spark's manifest protocol records the job's files: with another, nothing is written."""
    spark = direct_io
    key = "spark.sql.streaming.commitProtocolClass"
    spark.conf.set(key, "org.apache.spark.internal.io.HadoopMapReduceCommitProtocol")
    try:
        with pytest.raises(UnsupportedFeatureError, match=r"commitProtocolClass.*Nothing was written"):
            spark.range(0, 10).write.format("delta").save(tmp_table)
    finally:
        spark.conf.unset(key)
    assert not os.path.exists(tmp_table) or table_files(tmp_table) == set()


def test_empty_write_adds_no_file_and_no_directory(direct_io: SparkSession, tmp_table: str) -> None:
    spark = direct_io
    spark.range(0, 10).write.format("delta").save(tmp_table)
    before = table_files(tmp_table)
    dirs_before = set(os.listdir(tmp_table))
    spark.range(0, 10).where("id < 0").write.format("delta").mode("append").save(tmp_table)
    assert table_files(tmp_table) == before and set(os.listdir(tmp_table)) == dirs_before
    assert spark.read.format("delta").load(tmp_table).count() == 10


def test_which_route_each_table_takes(spark: SparkSession) -> None:
    s3 = "s3://bucket/table"
    try:
        assert direct.data_io(spark, "/tmp/local-table") == "staged"
        assert direct.data_io(spark, s3) == "python"  # this pyspark has no S3A connector
        assert not direct.spark_opens(spark, s3) and direct.spark_opens(spark, "/tmp/x")
        spark.conf.set(direct.DATA_IO_CONF, "python")
        assert direct.data_io(spark, "/tmp/local-table") == "staged" and direct.data_io(spark, s3) == "python"
        spark.conf.set(direct.DATA_IO_CONF, "spark")
        assert direct.data_io(spark, "/tmp/local-table") == "spark"
        with pytest.raises(UnsupportedFeatureError, match=r"s3://bucket/table.*'s3a'.*Nothing was read or written"):
            direct.data_io(spark, s3)
        spark.conf.set(direct.DATA_IO_CONF, "sometimes")
        with pytest.raises(DeltaIllegalArgumentException, match="spark.serialake.dataFiles.io is 'sometimes'"):
            direct.data_io(spark, "/tmp/local-table")
    finally:
        spark.conf.unset(direct.DATA_IO_CONF)


@pytest.mark.parametrize(
    ("given", "uri"),
    [("/data/t", "file:/data/t"), ("s3://b/t/x", "s3a://b/t/x"), ("s3a://b/t", "s3a://b/t")],
)
def test_hadoop_uri(given: str, uri: str) -> None:
    assert direct.hadoop_uri(given) == uri


@pytest.mark.parametrize(
    ("written", "location"),
    [
        ("file:///data/t/ab/p=a%20b/part-0.parquet", "/data/t/ab/p=a b/part-0.parquet"),
        ("file:/data/t/ab/p=x%253Ay/f.parquet", "/data/t/ab/p=x%3Ay/f.parquet"),
        ("s3a://bucket/t/ab/p=1/f.parquet", "s3://bucket/t/ab/p=1/f.parquet"),
    ],
)
def test_job_file_uris_as_locations(written: str, location: Any) -> None:
    assert direct._location(written) == location


def test_a_job_record_the_driver_cannot_find_is_an_error(tmp_path: Any) -> None:
    """The sink records every job's files, even none: a missing record means the driver looks
    at another storage than the job wrote to, never an empty write."""
    from serialake.exceptions import WrittenFileMissingError
    from serialake.spark.footer_stats import file_stats

    table = str(tmp_path / "t")
    os.makedirs(os.path.join(table, "0123456789abcdef"))
    with pytest.raises(WrittenFileMissingError, match=r"its record of the files.*_spark_metadata/0") as info:
        direct.finish_job(table, "0123456789abcdef", [], data_change=True, describe=dict, stats_of=file_stats)
    assert info.value.table == table and info.value.job_files is None
    assert not os.path.exists(os.path.join(table, "0123456789abcdef"))
