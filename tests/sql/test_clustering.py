"""Liquid clustering: clusterBy / CLUSTER BY, the ``delta.clustering`` domain, OPTIMIZE clustering."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import SparkSession

from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.model import clustering, features
from serialake.exceptions import ConcurrentTransactionException, DeltaAnalysisException, ProtocolChangedException
from serialake.spark import dml

pytestmark = pytest.mark.spark


def detail(spark: SparkSession, table: str) -> list[str]:
    return list(spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["clusteringColumns"])


def append(spark: SparkSession, table: str, start: int, n: int) -> None:
    rows = spark.range(start, start + n).selectExpr("cast(id as string) key", "id as value", "cast(id % 7 as int) v2")
    rows.repartition(3).write.format("delta").mode("append").saveAsTable(table)


def test_builder_records_the_domain_and_features(spark: SparkSession) -> None:
    dt = (
        DeltaTable.create(spark).tableName("clustered").addColumn("key", "string").addColumn("value", "bigint")
        .addColumn("v2", "int").clusterBy("v2", "value").execute()
    )  # fmt: skip
    assert detail(spark, "clustered") == ["v2", "value"]
    snap = DeltaLog.for_table(dt.path).update()
    assert {"clustering", "domainMetadata"} <= features.writer_features(snap.protocol)
    domain = snap.domain_metadata[clustering.DOMAIN]
    assert json.loads(domain.configuration) == {"clusteringColumns": [["v2"], ["value"]]}
    # Replacing without clusterBy leaves an unclustered table.
    DeltaTable.replace(spark).tableName("clustered").addColumn("key", "string").execute()
    assert detail(spark, "clustered") == []
    with pytest.raises(DeltaAnalysisException, match="both partitioned"):
        DeltaTable.create(spark).tableName("both").addColumn("a", "int").partitionedBy("a").clusterBy("a").execute()
    with pytest.raises(DeltaAnalysisException, match="does not exist"):
        DeltaTable.create(spark).tableName("bad").addColumn("a", "int").clusterBy("nope").execute()
    with pytest.raises(DeltaAnalysisException, match="no min/max statistics"):
        DeltaTable.create(spark).tableName("bad").addColumn("a", "array<int>").clusterBy("a").execute()
    with pytest.raises(TypeError):
        DeltaTable.create(spark).clusterBy([1])  # type: ignore[list-item]


def test_optimize_clusters_new_files_incrementally(spark: SparkSession) -> None:
    spark.sql("CREATE TABLE events (key STRING, value BIGINT, v2 INT) USING delta CLUSTER BY (v2, value)")
    for i in range(3):
        append(spark, "events", i * 100, 100)
    path = DeltaTable.forName(spark, "events").path
    before = DeltaLog.for_table(path).update().all_files
    result = spark.sql("OPTIMIZE events").collect()[0].metrics
    assert result.numFilesRemoved == len(before) and result.numFilesAdded == 1
    assert result.clusteringStats.inputOtherFiles.numFiles == len(before) and result.zOrderStats is None
    (clustered,) = DeltaLog.for_table(path).update().all_files
    assert clustered.clustering_provider == clustering.PROVIDER and clustered.num_records == 300
    # The rows are ordered by the clustering columns' z-value: v2 (few values) drives the order.
    import pyarrow.parquet as pq

    v2 = pq.read_table(f"{path}/{clustered.path}", columns=["v2"]).column("v2").to_pylist()
    runs = sum(1 for a, b in zip(v2, v2[1:]) if a != b)
    assert runs < 60  # unclustered (id order) has ~300 changes of v2
    # Only files no OPTIMIZE clustered yet are rewritten; FULL rewrites everything.
    append(spark, "events", 1000, 10)
    again = spark.sql("OPTIMIZE events").collect()[0].metrics
    assert again.numFilesRemoved == 3 and again.numFilesAdded == 1
    full = spark.sql("OPTIMIZE events FULL").collect()[0].metrics
    assert full.numFilesRemoved == 2 and full.clusteringStats.inputZCubeFiles.numFiles == 2
    assert spark.table("events").count() == 310
    # An independent reader agrees. The table has deletion vectors (a clustered table's default): delta-rs's
    # pyarrow path refuses that reader feature, its DataFusion scan applies them.
    import pyarrow as pa

    assert pa.RecordBatchReader.from_stream(deltalake.DeltaTable(path).scan()).read_all().num_rows == 310
    with pytest.raises(DeltaAnalysisException, match="clustered by"):
        spark.sql("OPTIMIZE events ZORDER BY (value)")
    with pytest.raises(DeltaAnalysisException, match="no WHERE"):
        spark.sql("OPTIMIZE events WHERE v2 = 1")


def test_alter_cluster_by_and_ctas(spark: SparkSession, tmp_path: Path) -> None:
    spark.sql("CREATE TABLE plain (a INT, b STRING) USING delta")
    spark.sql("ALTER TABLE plain CLUSTER BY (b)")
    assert detail(spark, "plain") == ["b"]
    spark.sql("ALTER TABLE plain CLUSTER BY NONE")
    assert detail(spark, "plain") == []
    spark.sql("CREATE TABLE parted (a INT, p STRING) USING delta PARTITIONED BY (p)")
    with pytest.raises(DeltaAnalysisException, match="both partitioned"):
        spark.sql("ALTER TABLE parted CLUSTER BY (a)")
    spark.sql("CREATE TABLE made CLUSTER BY (id) AS SELECT id, id * 2 AS twice FROM range(20)")
    assert detail(spark, "made") == ["id"] and spark.table("made").count() == 20
    # PySpark's writers: df.write.clusterBy(...) and writeTo(...).clusterBy(...).
    by_writer = str(tmp_path / "by_writer")
    spark.range(10).write.format("delta").clusterBy("id").save(by_writer)
    assert DeltaTable.forPath(spark, by_writer).detail().collect()[0]["clusteringColumns"] == ["id"]
    spark.range(10, 12).write.format("delta").mode("append").clusterBy("id").save(by_writer)
    spark.range(3).writeTo("by_v2").using("delta").clusterBy("id").create()
    assert detail(spark, "by_v2") == ["id"]
    path = str(tmp_path / "w")
    spark.range(5).write.format("delta").save(path)
    with pytest.raises(DeltaAnalysisException, match="is clustered by"):
        from serialake import write

        write(spark.range(2), path, clusterBy=["id"])


def test_concurrent_clustering_changes_conflict(spark: SparkSession) -> None:
    spark.sql("CREATE TABLE racing (a INT, b STRING) USING delta")
    path = DeltaTable.forName(spark, "racing").path
    # The first clustering of a table also changes its protocol: that is what conflicts first.
    with pytest.raises(ProtocolChangedException):
        dml.cluster_by(path, ["a"], before_commit=lambda: dml.cluster_by(path, ["b"]))
    assert detail(spark, "racing") == ["b"]
    with pytest.raises(ConcurrentTransactionException, match="delta.clustering"):
        dml.cluster_by(path, ["a"], before_commit=lambda: dml.cluster_by(path, ["a", "b"]))
    assert detail(spark, "racing") == ["a", "b"]
