"""UniForm: Spark writes to IcebergCompatV2 tables; pyiceberg reads the same rows from the Iceberg metadata.

Tables are created as UniForm tables or upgraded with ``REORG TABLE ... APPLY (UPGRADE
UNIFORM(ICEBERG_COMPAT_VERSION=2))``; after every write, DML and OPTIMIZE the Iceberg
metadata written in the background is read with pyiceberg's ``StaticTable`` and compared
with Spark's and delta-rs' reads. The upgrade's metadata change fails concurrent writers,
and a concurrent append fails the upgrade, in both orders.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from serialake.core import DeltaLog
from serialake.core import iceberg as core_iceberg
from serialake.core.model.uniform import COMPAT_TAG, IcebergCompatError
from serialake.exceptions import (
    ConcurrentAppendException,
    DeltaConcurrentModificationException,
)
from serialake.spark import DeltaTable, dml

pytestmark = pytest.mark.spark

UNIFORM = "'delta.universalFormat.enabledFormats' = 'iceberg', 'delta.enableIcebergCompatV2' = 'true'"


def norm(value: Any) -> Any:
    """A value as both readers give it (maps as sorted pairs, datetimes naive UTC)."""
    if isinstance(value, dict):
        return tuple(sorted((k, norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return tuple(sorted((k, norm(v)) for k, v in value))  # a pyarrow map
        return tuple(norm(v) for v in value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def spark_rows(df: DataFrame) -> list[tuple[Any, ...]]:
    table = df.toArrow() if hasattr(df, "toArrow") else None
    data = table.to_pylist() if table is not None else [r.asDict(recursive=True) for r in df.collect()]
    return sorted((tuple(norm(r[c]) for c in df.columns) for r in data), key=repr)


def iceberg_rows(path: str, columns: list[str], row_filter: str | None = None) -> list[tuple[Any, ...]]:
    """The rows pyiceberg reads from the table's newest Iceberg metadata (after the background conversion)."""
    from pyiceberg.table import StaticTable

    assert core_iceberg.IcebergConverter.wait_all(60)
    log = DeltaLog.for_table(path)
    version = log.update().version
    converter = core_iceberg.IcebergConverter.for_table(log)
    assert converter.last_error is None, converter.last_error
    assert core_iceberg.read_version_hint(log) == version
    table = StaticTable.from_metadata(core_iceberg.metadata_path(log.table_path, version))
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    data = scan.to_arrow()
    assert data.column_names == columns, data.column_names
    return sorted((tuple(norm(r[c]) for c in columns) for r in data.to_pylist()), key=repr)


def delta_rs_rows(path: str, columns: list[str]) -> list[tuple[Any, ...]]:
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    data = pa.table(QueryBuilder().register("t", RsTable(path)).execute("SELECT * FROM t").read_all())
    return sorted((tuple(norm(r[c]) for c in columns) for r in data.to_pylist()), key=repr)


def same_everywhere(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(path)
    expected = spark_rows(df)
    assert iceberg_rows(path, df.columns) == expected
    assert delta_rs_rows(path, df.columns) == expected
    return expected


def test_created_uniform_table_through_writes_dml_and_optimize(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{tmp_table}` (id BIGINT, small INT, name STRING, amount DECIMAL(12, 2), day DATE, "
        "at TIMESTAMP, tags ARRAY<STRING>, attrs MAP<STRING, INT>, info STRUCT<city: STRING, zip: INT>, "
        f"flag BOOLEAN, ratio DOUBLE, p STRING) USING delta PARTITIONED BY (p) TBLPROPERTIES ({UNIFORM})"
    )
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.configuration["delta.columnMapping.mode"] == "name"
    assert {"icebergCompatV2", "columnMapping"} <= set(snap.protocol.writer_features or ())
    spark.sql(
        f"INSERT INTO delta.`{tmp_table}` VALUES "
        "(1, 10, 'a', 1.50, DATE'2024-01-01', TIMESTAMP'2024-01-01 10:00:00.123456', array('x', 'y'), "
        "map('k', 1), named_struct('city', 'Oslo', 'zip', 1), true, 0.5, 'east'), "
        "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'west'), "
        "(3, 30, 'c', -2.25, DATE'2023-12-31', TIMESTAMP'2023-12-31 23:59:59', array(), map(), "
        "named_struct('city', NULL, 'zip', 3), false, -1.0, NULL)"
    )
    same_everywhere(spark, tmp_table)
    # Every file: tagged, holding the partition column (materialized) under its physical name, with field ids.
    snap = DeltaLog.for_table(tmp_table).update()
    p_physical = snap.schema.field("p").metadata["delta.columnMapping.physicalName"]
    for add in snap.all_files:
        assert (add.tags or {}).get(COMPAT_TAG) == "2" and add.deletion_vector is None
        schema = pq.read_schema(os.path.join(tmp_table, add.path))
        assert p_physical in schema.names and all(b"PARQUET:field_id" in (f.metadata or {}) for f in schema)
    t = DeltaTable.forPath(spark, tmp_table)
    t.delete("id = 3")
    t.update("id = 1", {"name": "'renamed'"})
    source = spark.createDataFrame([(2, "merged"), (4, "new")], "id long, name string")
    (t.alias("t").merge(source.alias("s"), "t.id = s.id")
     .whenMatchedUpdate(set={"name": "s.name"}).whenNotMatchedInsert(values={"id": "s.id", "name": "s.name",
                                                                             "p": "'east'"}).execute())  # fmt: skip
    assert not any(f.deletion_vector for f in DeltaLog.for_table(tmp_table).update().all_files)
    t.optimize().executeCompaction()
    rows = same_everywhere(spark, tmp_table)
    assert sorted(r[0] for r in rows) == [1, 2, 4]
    filtered = spark_rows(spark.read.format("delta").load(tmp_table).where("p = 'east' AND id > 1"))
    assert iceberg_rows(tmp_table, spark.read.format("delta").load(tmp_table).columns,
                        "p == 'east' and id > 1") == filtered  # fmt: skip
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` ADD COLUMNS (extra STRING)")
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN name TO label")
    spark.sql(f"INSERT INTO delta.`{tmp_table}` (id, label, extra, p) VALUES (5, 'e', 'x', 'west')")
    same_everywhere(spark, tmp_table)
    # delta-rs reads the table (above) and, not knowing IcebergCompatV2's rules, refuses to write to it.
    import pyarrow as pa
    from deltalake import write_deltalake

    with pytest.raises(Exception, match="IcebergCompatV2"):
        write_deltalake(tmp_table, pa.table({"id": pa.array([9], pa.int64())}), mode="append")


def test_upgrade_an_existing_table_with_deletion_vectors(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (id BIGINT, v STRING, p STRING) USING delta PARTITIONED BY (p) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.createDataFrame([(i, f"v{i}", "ab"[i % 2]) for i in range(20)], "id long, v string, p string") \
        .write.format("delta").mode("append").save(tmp_table)  # fmt: skip
    spark.sql(f"DELETE FROM delta.`{tmp_table}` WHERE id % 3 = 0")
    assert any(f.deletion_vector for f in DeltaLog.for_table(tmp_table).update().all_files)
    expected = spark_rows(spark.read.format("delta").load(tmp_table))
    version = DeltaLog.for_table(tmp_table).update().version
    with pytest.raises(IcebergCompatError, match="REORG TABLE"):
        spark.sql(f"ALTER TABLE delta.`{tmp_table}` SET TBLPROPERTIES ({UNIFORM})")
    assert DeltaLog.for_table(tmp_table).update().version == version  # refused: nothing committed

    spark.sql(f"REORG TABLE delta.`{tmp_table}` APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))")
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.version == version + 1  # one commit: metadata, protocol and the rewritten files
    conf = snap.configuration
    assert conf["delta.enableIcebergCompatV2"] == "true" and conf["delta.universalFormat.enabledFormats"] == "iceberg"
    assert conf["delta.columnMapping.mode"] == "name" and conf["delta.enableDeletionVectors"] == "false"
    assert all((f.tags or {}).get(COMPAT_TAG) == "2" and f.deletion_vector is None for f in snap.all_files)
    assert same_everywhere(spark, tmp_table) == expected
    # Nothing left to do: a second upgrade commits nothing.
    assert dml.upgrade_uniform(spark, tmp_table)["version"] is None
    with pytest.raises(IcebergCompatError, match="deletion vectors"):
        spark.sql(f"ALTER TABLE delta.`{tmp_table}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")


@pytest.mark.parametrize("order", ["upgrade_first", "append_first"])
def test_upgrade_against_a_concurrent_append(spark: SparkSession, tmp_table: str, order: str) -> None:
    spark.createDataFrame([(1, "a")], "id long, v string").write.format("delta").save(tmp_table)
    log = DeltaLog.for_table(tmp_table)

    def append() -> None:
        spark.createDataFrame([(2, "b")], "id long, v string").write.format("delta").mode("append").save(tmp_table)

    if order == "upgrade_first":
        # The append was planned before the upgrade committed: the protocol and metadata change fails it.
        with pytest.raises(DeltaConcurrentModificationException):
            dml.run_insert(spark, tmp_table, spark.createDataFrame([(2, "b")], "id long, v string"),
                           before_commit=lambda: dml.upgrade_uniform(spark, tmp_table))  # fmt: skip
        assert spark_rows(spark.read.format("delta").load(tmp_table)) == [(1, "a")]
        append()  # written for IcebergCompatV2 now
    else:
        # The upgrade read every file; a file appended meanwhile was not written for it: the upgrade fails.
        with pytest.raises(ConcurrentAppendException):
            dml.upgrade_uniform(spark, tmp_table, before_commit=append)
        assert "delta.enableIcebergCompatV2" not in log.update().configuration
        dml.upgrade_uniform(spark, tmp_table)  # retried: both files rewritten
    assert all((f.tags or {}).get(COMPAT_TAG) == "2" for f in log.update().all_files)
    assert same_everywhere(spark, tmp_table) == [(1, "a"), (2, "b")]


def test_a_failed_conversion_never_fails_the_commit(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (id BIGINT) USING delta TBLPROPERTIES ({UNIFORM})")
    core_iceberg.IcebergConverter.wait_all(60)
    for name in glob.glob(os.path.join(tmp_table, "metadata", "*")):
        os.remove(name)
    os.rmdir(os.path.join(tmp_table, "metadata"))
    with open(os.path.join(tmp_table, "metadata"), "w") as f:  # a file where the directory should be
        f.write("in the way")
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1)")  # commits
    core_iceberg.IcebergConverter.wait_all(60)
    converter = core_iceberg.IcebergConverter.for_table(DeltaLog.for_table(tmp_table))
    assert converter.last_error is not None
    assert spark_rows(spark.read.format("delta").load(tmp_table)) == [(1,)]
    os.remove(os.path.join(tmp_table, "metadata"))
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (2)")  # the next conversion catches up
    assert iceberg_rows(tmp_table, ["id"]) == [(1,), (2,)]


def test_vacuum_keeps_the_current_iceberg_metadata_and_drops_the_old(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (id BIGINT) USING delta TBLPROPERTIES ({UNIFORM})")
    for i in range(3):
        spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES ({i})")
    DeltaTable.forPath(spark, tmp_table).delete("id = 0")
    assert iceberg_rows(tmp_table, ["id"]) == [(1,), (2,)]
    metadata = os.path.join(tmp_table, "metadata")
    before = set(os.listdir(metadata))
    old = os.path.getmtime(os.path.join(tmp_table, "_delta_log")) - 30 * 86400
    for name in before:
        os.utime(os.path.join(metadata, name), (old, old))  # everything older than the retention
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(key, "false")
    try:
        dry = {r.path for r in DeltaTable.forPath(spark, tmp_table).vacuum(0.0, dryRun=True).collect()}
        DeltaTable.forPath(spark, tmp_table).vacuum(0.0)
    finally:
        spark.conf.unset(key)
    assert core_iceberg.IcebergConverter.wait_all(60)
    after = set(os.listdir(metadata))
    old_versions = sorted(int(n[1:].split(".")[0]) for n in before if n.endswith(".metadata.json"))
    # VACUUM's own commits are converted too; of the old metadata, at most the newest survives.
    assert not any(f"v{v}.metadata.json" in after for v in old_versions[:-1])
    listed = {os.path.basename(p) for p in dry if "/metadata/" in p}
    assert listed and listed <= before  # DRY RUN lists the old metadata files too
    assert f"v{DeltaLog.for_table(tmp_table).update().version}.metadata.json" in after
    assert iceberg_rows(tmp_table, ["id"]) == [(1,), (2,)]  # the current Iceberg table reads whole
    assert spark_rows(spark.read.format("delta").load(tmp_table)) == [(1,), (2,)]


def test_msck_repair_sync_metadata_writes_the_iceberg_metadata_now(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (id BIGINT, p STRING) USING delta PARTITIONED BY (p) "
              f"TBLPROPERTIES ({UNIFORM})")
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a'), (2, 'b')")
    assert core_iceberg.IcebergConverter.wait_all(60)
    for name in os.listdir(os.path.join(tmp_table, "metadata")):
        os.remove(os.path.join(tmp_table, "metadata", name))  # lost, e.g. copied without it
    result = spark.sql(f"MSCK REPAIR TABLE delta.`{tmp_table}` SYNC METADATA").collect()[0]
    assert result.version == 1 and result.metadata.endswith("v1.metadata.json")
    assert iceberg_rows(tmp_table, ["id", "p"]) == [(1, "a"), (2, "b")]
    plain = os.path.join(os.path.dirname(tmp_table), "plain")
    spark.sql(f"CREATE TABLE delta.`{plain}` (id BIGINT) USING delta")
    with pytest.raises(Exception, match="not a UniForm table"):
        spark.sql(f"MSCK REPAIR TABLE delta.`{plain}` SYNC METADATA")
