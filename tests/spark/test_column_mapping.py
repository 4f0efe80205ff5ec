"""Column mapping writes: ids and physical names, renames and drops without rewriting files.

Tables with ``delta.columnMapping.mode`` = ``name`` (or ``id``) are created, written, changed by
DML and OPTIMIZE, renamed and dropped from; the files hold physical names and Parquet field
ids, the log's stats and partition values physical names, and delta-rs reads every result.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from serialake.core import DeltaLog
from serialake.exceptions import DeltaAnalysisException, MetadataChangedException, UnsupportedFeatureError
from serialake.spark import DeltaTable, dml

pytestmark = pytest.mark.spark


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=lambda t: [(v is not None, v) for v in t])


def delta_rs_rows(path: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """The table's rows as delta-rs reads them (its query engine: its pyarrow dataset refuses column mapping)."""
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    table = pa.table(QueryBuilder().register("t", RsTable(path)).execute("SELECT * FROM t").read_all())
    assert table.column_names == columns, table.column_names
    data = table.to_pylist()
    return sorted((tuple(r[c] for c in columns) for r in data), key=lambda t: [(v is not None, v) for v in t])


def fields(path: str) -> dict[str, dict[str, Any]]:
    """The table's top-level fields by logical name: their column-mapping metadata."""
    schema = DeltaLog.for_table(path).update().schema
    return {f.name: dict(f.metadata) for f in schema.fields}


def parquet_fields(path: str) -> list[set[tuple[str, int]]]:
    """(name, field id) of the top-level columns of each data file."""
    out = []
    for f in sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True)):
        if "_delta_log" in f or "_change_data" in f:
            continue
        schema = pq.read_schema(f)
        out.append({(fl.name, int(fl.metadata[b"PARQUET:field_id"])) for fl in schema})
    return out


def create(spark: SparkSession, path: str, mode: str = "name", extra: str = "") -> None:
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id LONG, name STRING, info STRUCT<city: STRING, zip: INT>, p STRING) "
        f"USING delta PARTITIONED BY (p) TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}'{extra})"
    )


def test_created_table_writes_physical_names_ids_and_stats(spark: SparkSession, tmp_table: str) -> None:
    create(spark, tmp_table)
    snap = DeltaLog.for_table(tmp_table).update()
    meta = fields(tmp_table)
    ids = {name: m["delta.columnMapping.id"] for name, m in meta.items()}
    physical = {name: m["delta.columnMapping.physicalName"] for name, m in meta.items()}
    assert sorted(ids.values()) == [1, 2, 3, 6]  # info's fields took 4 and 5
    assert all(p.startswith("col-") for p in physical.values())
    assert snap.configuration["delta.columnMapping.maxColumnId"] == "6"
    # Reader version 2 implies column mapping (no reader feature list), as delta-spark writes it.
    assert (snap.protocol.min_reader_version, snap.protocol.reader_features) == (2, None)
    assert "columnMapping" in (snap.protocol.writer_features or ()) and snap.protocol.min_writer_version == 7

    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a', named_struct('city', 'Oslo', 'zip', 1), 'x'), "
              f"(2, 'b', NULL, 'y')")
    log_adds = [a for a in DeltaLog.for_table(tmp_table).update().all_files]
    assert {tuple(a.partition_values) for a in log_adds} == {(physical["p"],)}
    for a in log_adds:
        stats = json.loads(a.stats)
        assert set(stats["minValues"]) >= {physical["id"], physical["name"]}
        assert a.path.startswith(f"{physical['p']}=")
    for file_fields in parquet_fields(tmp_table):
        assert file_fields == {(physical[c], ids[c]) for c in ("id", "name", "info")}  # not the partition column
    nested = pq.read_schema(glob.glob(os.path.join(tmp_table, "*", "*.parquet"))[0]).field(physical["info"]).type
    assert {nested.field(i).name for i in range(nested.num_fields)} == {
        f.metadata["delta.columnMapping.physicalName"] for f in snap.schema.field("info").data_type.fields
    }
    df = spark.read.format("delta").load(tmp_table)
    assert df.columns == ["id", "name", "info", "p"]
    assert rows(df.select("id", "name", "info.city", "p")) == [(1, "a", "Oslo", "x"), (2, "b", None, "y")]
    assert delta_rs_rows(tmp_table, ["id", "name", "info", "p"]) == [
        (1, "a", {"city": "Oslo", "zip": 1}, "x"), (2, "b", None, "y")
    ]


@pytest.mark.parametrize("driver", [True, False], ids=["driver", "spark"])
def test_dml_and_optimize_on_a_mapped_table(spark: SparkSession, tmp_table: str, driver: bool) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{tmp_table}` (id LONG, v STRING, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    )
    confs = [dml.DML_MAX_BYTES_CONF, dml.COMPACTION_MAX_BYTES_CONF]
    old = {c: spark.conf.get(c, None) for c in confs}
    for c in confs:
        spark.conf.set(c, str(1 << 30) if driver else "0")
    try:
        for i in range(3):
            batch = [(i * 10 + j, f"v{j}", "ab"[j % 2]) for j in range(5)]
            spark.createDataFrame(batch, "id long, v string, p string").write.format("delta").mode("append").save(
                tmp_table
            )
        t = DeltaTable.forPath(spark, tmp_table)
        t.delete("id % 10 = 0")
        t.update("id = 11", {"v": "'updated'"})
        source = spark.createDataFrame([(12, "merged", "a"), (99, "new", "b")], "id long, v string, p string")
        (t.alias("t").merge(source.alias("s"), "t.id = s.id")
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())  # fmt: skip
        t.optimize().executeCompaction()
    finally:
        for c, value in old.items():
            if value is None:
                spark.conf.unset(c)
            else:
                spark.conf.set(c, value)
    expected = sorted(
        [(i * 10 + j, f"v{j}", "ab"[j % 2]) for i in range(3) for j in range(1, 5)] + [(99, "new", "b")]
    )
    expected = [(11, "updated", "b") if r[0] == 11 else (12, "merged", "a") if r[0] == 12 else r for r in expected]
    assert rows(spark.read.format("delta").load(tmp_table)) == sorted(expected)
    assert delta_rs_rows(tmp_table, ["id", "v", "p"]) == sorted(expected)
    physical = {n: m["delta.columnMapping.physicalName"] for n, m in fields(tmp_table).items()}
    live = {os.path.join(tmp_table, a.path) for a in DeltaLog.for_table(tmp_table).update().all_files}
    for path in live:
        assert set(pq.read_schema(path).names) == {physical["id"], physical["v"]}


def test_rename_keeps_data_and_ids(spark: SparkSession, tmp_table: str) -> None:
    create(spark, tmp_table)
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a', named_struct('city', 'Oslo', 'zip', 1), 'x')")
    before = fields(tmp_table)
    files = {a.path for a in DeltaLog.for_table(tmp_table).update().all_files}
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN name TO full_name")
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN info.city TO town")
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN p TO region")
    snap = DeltaLog.for_table(tmp_table).update()
    assert {a.path for a in snap.all_files} == files  # no file rewritten
    after = fields(tmp_table)
    assert after["full_name"] == before["name"] and after["region"] == before["p"]
    assert snap.partition_columns == ("region",)
    df = spark.read.format("delta").load(tmp_table)
    assert df.columns == ["id", "full_name", "info", "region"]
    assert rows(df.select("id", "full_name", "info.town", "region")) == [(1, "a", "Oslo", "x")]
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (2, 'b', named_struct('town', 'Rome', 'zip', 2), 'x')")
    assert rows(spark.sql(f"SELECT id, full_name, info.town FROM delta.`{tmp_table}` WHERE region = 'x'")) == [
        (1, "a", "Oslo"), (2, "b", "Rome")
    ]
    assert delta_rs_rows(tmp_table, ["id", "full_name", "info", "region"]) == [
        (1, "a", {"town": "Oslo", "zip": 1}, "x"), (2, "b", {"town": "Rome", "zip": 2}, "x")
    ]
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN id TO full_name")


def test_dropped_column_is_gone_and_a_new_one_of_that_name_starts_empty(spark: SparkSession, tmp_table: str) -> None:
    create(spark, tmp_table)
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a', NULL, 'x')")
    old_id = fields(tmp_table)["name"]["delta.columnMapping.id"]
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` DROP COLUMN name")
    assert spark.read.format("delta").load(tmp_table).columns == ["id", "info", "p"]
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` ADD COLUMNS (name STRING)")
    meta = fields(tmp_table)["name"]
    assert meta["delta.columnMapping.id"] > 6 and meta["delta.columnMapping.id"] != old_id  # never reused
    # The old file still holds the dropped column's data; the new column does not see it.
    assert rows(spark.read.format("delta").load(tmp_table).select("id", "name")) == [(1, None)]
    assert delta_rs_rows(tmp_table, ["id", "info", "p", "name"]) == [(1, None, "x", None)]
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` DROP COLUMNS IF EXISTS (nope, info.zip)")
    assert spark.read.format("delta").load(tmp_table).schema["info"].dataType.fieldNames() == ["city"]
    with pytest.raises(DeltaAnalysisException, match="partition column"):
        spark.sql(f"ALTER TABLE delta.`{tmp_table}` DROP COLUMN p")
    with pytest.raises(DeltaAnalysisException, match="nope"):
        spark.sql(f"ALTER TABLE delta.`{tmp_table}` DROP COLUMN nope")


def test_rename_and_drop_need_column_mapping(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (a LONG, b STRING) USING delta")
    version = DeltaLog.for_table(tmp_table).update().version
    with pytest.raises(DeltaAnalysisException, match="delta.columnMapping.mode"):
        spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN a TO c")
    with pytest.raises(DeltaAnalysisException, match="delta.columnMapping.mode"):
        spark.sql(f"ALTER TABLE delta.`{tmp_table}` DROP COLUMN b")
    assert DeltaLog.for_table(tmp_table).update().version == version


def test_mapping_turned_on_for_an_existing_table(spark: SparkSession, tmp_table: str) -> None:
    spark.createDataFrame([(1, "a", "x")], "id long, v string, p string").write.format("delta") \
        .partitionBy("p").save(tmp_table)  # fmt: skip
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    meta = fields(tmp_table)
    assert {n: m["delta.columnMapping.physicalName"] for n, m in meta.items()} == {"id": "id", "v": "v", "p": "p"}
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN v TO value")
    spark.createDataFrame([(2, "b", "x", 1.5)], "id long, value string, p string, w double").write.format("delta") \
        .mode("append").option("mergeSchema", "true").save(tmp_table)  # fmt: skip
    w = fields(tmp_table)["w"]
    assert w["delta.columnMapping.physicalName"].startswith("col-") and w["delta.columnMapping.id"] == 4
    assert rows(spark.read.format("delta").load(tmp_table)) == [(1, "a", "x", None), (2, "b", "x", 1.5)]
    assert delta_rs_rows(tmp_table, ["id", "value", "p", "w"]) == [(1, "a", "x", None), (2, "b", "x", 1.5)]
    with pytest.raises(UnsupportedFeatureError, match="from 'name' to 'none'"):
        DeltaTable.forPath(spark, tmp_table).setTableProperties({"delta.columnMapping.mode": "none"})


def test_id_mode_and_overwrite_schema(spark: SparkSession, tmp_table: str) -> None:
    create(spark, tmp_table, mode="id")
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a', NULL, 'x')")
    max_before = int(DeltaLog.for_table(tmp_table).update().configuration["delta.columnMapping.maxColumnId"])
    spark.createDataFrame([(5, 2.5)], "k long, d double").write.format("delta").mode("overwrite") \
        .option("overwriteSchema", "true").save(tmp_table)  # fmt: skip
    meta = fields(tmp_table)
    assert set(meta) == {"k", "d"} and min(m["delta.columnMapping.id"] for m in meta.values()) > max_before
    assert rows(spark.read.format("delta").load(tmp_table)) == [(5, 2.5)]
    assert delta_rs_rows(tmp_table, ["k", "d"]) == [(5, 2.5)]


@pytest.mark.parametrize("order", ["rename_first", "append_first"])
def test_rename_against_a_concurrent_append(spark: SparkSession, tmp_table: str, order: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (id LONG, v STRING) USING delta "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a')")

    def append() -> None:
        spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (2, 'b')")

    def rename() -> None:
        dml.rename_column(tmp_table, ["v"], "value")

    if order == "rename_first":
        # The append was planned against the old schema: the rename's metadata change fails it.
        with pytest.raises(MetadataChangedException):
            appended = spark.createDataFrame([(2, "b")], "id long, v string")
            dml.run_insert(spark, tmp_table, appended, before_commit=rename)
        assert rows(spark.read.format("delta").load(tmp_table)) == [(1, "a")]
    else:
        dml.rename_column(tmp_table, ["v"], "value", before_commit=append)  # a blind append: the rename commits
        assert rows(spark.read.format("delta").load(tmp_table)) == [(1, "a"), (2, "b")]
    assert spark.read.format("delta").load(tmp_table).columns == ["id", "value"]


def test_change_data_feed_on_a_mapped_table(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{tmp_table}` (id LONG, v STRING) USING delta "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN v TO value")
    spark.sql(f"UPDATE delta.`{tmp_table}` SET value = 'c' WHERE id = 2")
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 3).load(tmp_table)
    assert rows(changes.select("id", "value", "_change_type")) == [
        (2, "b", "update_preimage"), (2, "c", "update_postimage")
    ]
    physical = fields(tmp_table)["value"]["delta.columnMapping.physicalName"]
    cdc = glob.glob(os.path.join(tmp_table, "_change_data", "*.parquet"))
    assert cdc and all(physical in pq.read_schema(f).names for f in cdc)


def test_merge_with_schema_evolution_gives_new_columns_ids(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (id LONG, v STRING) USING delta "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, 'a'), (2, 'b')")
    source = spark.createDataFrame([(2, "B", 2.5), (3, "c", 3.5)], "id long, v string, score double")
    (DeltaTable.forPath(spark, tmp_table).alias("t").merge(source.alias("s"), "t.id = s.id")
     .withSchemaEvolution().whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())  # fmt: skip
    meta = fields(tmp_table)
    assert meta["score"]["delta.columnMapping.id"] == 3 and meta["score"]["delta.columnMapping.physicalName"] != "score"
    expected = [(1, "a", None), (2, "B", 2.5), (3, "c", 3.5)]
    assert rows(spark.read.format("delta").load(tmp_table)) == expected
    assert delta_rs_rows(tmp_table, ["id", "v", "score"]) == expected


def test_builder_creates_a_mapped_table(spark: SparkSession, tmp_table: str) -> None:
    (DeltaTable.create(spark).location(tmp_table).addColumn("a", "BIGINT").addColumn("b c", "STRING")
     .property("delta.columnMapping.mode", "name").execute())  # fmt: skip
    meta = fields(tmp_table)
    assert [m["delta.columnMapping.id"] for m in meta.values()] == [1, 2]
    spark.createDataFrame([(1, "x")], "a long, `b c` string").write.format("delta").mode("append").save(tmp_table)
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` RENAME COLUMN `b c` TO d")
    assert rows(spark.read.format("delta").load(tmp_table)) == [(1, "x")]
    assert spark.read.format("delta").load(tmp_table).columns == ["a", "d"]


def test_nested_field_added_by_merge_schema_gets_an_id(spark: SparkSession, tmp_table: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{tmp_table}` (id LONG, s STRUCT<a: INT>) USING delta "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (1, named_struct('a', 1))")
    spark.createDataFrame([(2, (2, "x"))], "id long, s struct<a:int, b:string>").write.format("delta") \
        .mode("append").option("mergeSchema", "true").save(tmp_table)  # fmt: skip
    s = DeltaLog.for_table(tmp_table).update().schema.field("s")
    nested = {f.name: f.metadata["delta.columnMapping.id"] for f in s.data_type.fields}  # type: ignore[union-attr]
    assert nested == {"a": 3, "b": 4}
    got = rows(spark.read.format("delta").load(tmp_table).select("id", "s.a", "s.b"))
    assert got == [(1, 1, None), (2, 2, "x")]
    assert delta_rs_rows(tmp_table, ["id", "s"]) == [(1, {"a": 1, "b": None}), (2, {"a": 2, "b": "x"})]
