"""Writing and reading through Spark: modes, partitions, replaceWhere, schemas, stats, skipping."""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata, Protocol
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    SchemaMismatchError,
)
from serialake.spark import DeltaTable, read, write
from serialake.spark.data_read import read_files_df
from serialake.spark.data_write import write_data_files

pytestmark = pytest.mark.spark


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """Rows as sorted tuples (None sorts first)."""
    return sorted((tuple(r) for r in df.collect()), key=lambda t: [(v is not None, v) for v in t])


def commit_ops(path: str) -> list[str]:
    return [e.commit_info.operation for _, e in reversed(DeltaLog.for_table(path).history())]


def test_lazy_package_exports(spark: SparkSession) -> None:
    assert serialake.spark_session() is spark
    assert serialake.write is write and serialake.read is read and serialake.DeltaTable is DeltaTable


def test_modes_create_append_overwrite_error_ignore(spark: SparkSession, tmp_table: str) -> None:
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, s string")
    assert write(df, tmp_table, mode="error") == 0
    assert write(spark.createDataFrame([(3, "c")], "id long, s string"), tmp_table) == 1
    assert rows(read(spark, tmp_table)) == [(1, "a"), (2, "b"), (3, "c")]

    with pytest.raises(DeltaAnalysisException, match="already exists"):
        write(df, tmp_table, mode="errorifexists")
    assert write(df, tmp_table, mode="ignore") is None

    assert write(spark.createDataFrame([(9, "z")], "id long, s string"), tmp_table, mode="overwrite") == 2
    assert rows(read(spark, tmp_table)) == [(9, "z")]
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.version == 2 and snap.num_files == 1

    history = DeltaLog.for_table(tmp_table).history()
    infos = {v: e.commit_info for v, e in history}
    assert [infos[v].get("operationParameters")["mode"] for v in (0, 1, 2)] == ["ErrorIfExists", "Append", "Overwrite"]
    assert infos[1].is_blind_append is True and infos[2].is_blind_append is False
    assert infos[2].get("operationMetrics") == {
        "numFiles": "1",
        "numOutputRows": "1",
        "numOutputBytes": str(snap.all_files[0].size),
        "numRemovedFiles": str(len(snap.tombstones)),
        "numRemovedBytes": str(sum(r.size or 0 for r in snap.tombstones)),
    }
    with pytest.raises(DeltaIllegalArgumentException, match="Unknown save mode"):
        write(df, tmp_table, mode="upsert")
    with pytest.raises(DeltaTableNotFoundError):
        read(spark, tmp_table + "-missing")


def test_partitioned_write_with_nulls(spark: SparkSession, tmp_table: str) -> None:
    data = [
        (1, 10, "x", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 10, 30, 0, 123456, tzinfo=dt.UTC)),
        (2, None, "a b=c%/", dt.date(2024, 1, 2), None),
        (3, 10, None, None, dt.datetime(2024, 1, 2, tzinfo=dt.UTC)),
        (4, -5, "", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 10, 30, 0, 123456, tzinfo=dt.UTC)),
    ]
    df = spark.createDataFrame(data, "id long, i int, s string, d date, ts timestamp")
    write(df, tmp_table, partitionBy=["i", "s", "d", "ts"])
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.partition_columns == ("i", "s", "d", "ts")
    values = sorted(json.dumps(f.partition_values, sort_keys=True) for f in snap.all_files)
    assert json.dumps(
        {"d": "2024-01-02", "i": None, "s": "a b=c%/", "ts": None}, sort_keys=True
    ) in values
    assert json.dumps(
        {"d": "2024-01-01", "i": "10", "s": "x", "ts": "2024-01-01 10:30:00.123456"}, sort_keys=True
    ) in values
    for f in snap.all_files:
        assert f.path.startswith("i=") and "/part-" in f.path and f.path.endswith(".snappy.parquet")
        assert os.path.exists(os.path.join(tmp_table, f.path.replace("%25", "%").replace("%20", " ")))
    assert not os.path.exists(os.path.join(tmp_table, "_staging"))
    # An empty string partition value is stored as NULL, as Spark and Delta do.
    expected = [(r[0], r[1], r[2] or None, r[3], r[4]) for r in data]
    got = [(r.id, r.i, r.s, r.d, r.ts.replace(tzinfo=dt.UTC) if r.ts else None)
           for r in read(spark, tmp_table).collect()]
    assert sorted(got, key=lambda t: t[0]) == expected
    assert read(spark, tmp_table).columns == ["id", "i", "s", "d", "ts"]

    with pytest.raises(DeltaAnalysisException, match=r"\[s\].*\[i, s, d, ts\]"):
        write(df, tmp_table, partitionBy=["s"])


def test_replace_where_partition(spark: SparkSession, tmp_table: str) -> None:
    df = spark.createDataFrame([(1, 1), (2, 1), (3, 2), (4, 3)], "id long, p int")
    write(df, tmp_table, partitionBy="p")
    before = {f.path for f in DeltaLog.for_table(tmp_table).update().all_files if f.partition_values["p"] != "1"}
    write(spark.createDataFrame([(10, 1)], "id long, p int"), tmp_table, mode="overwrite", replaceWhere="p = 1")
    snap = DeltaLog.for_table(tmp_table).update()
    assert rows(read(spark, tmp_table)) == [(3, 2), (4, 3), (10, 1)]
    assert before <= {f.path for f in snap.all_files}  # other partitions untouched
    info = snap and DeltaLog.for_table(tmp_table).history(1)[0][1].commit_info
    assert info is not None and info.get("operationParameters")["predicate"] == '["p = 1"]'

    with pytest.raises(DeltaAnalysisException, match="does not match replaceWhere 'p = 1'"):
        write(spark.createDataFrame([(11, 2)], "id long, p int"), tmp_table, mode="overwrite", replaceWhere="p = 1")
    assert DeltaLog.for_table(tmp_table).update().version == snap.version
    with pytest.raises(DeltaAnalysisException, match="unknown column.*nope"):
        write(df, tmp_table, mode="overwrite", replaceWhere="nope = 1")
    with pytest.raises(DeltaIllegalArgumentException, match="overwrite"):
        write(df, tmp_table, replaceWhere="p = 1")


def test_replace_where_data_column_keeps_other_rows(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(i, f"v{i}") for i in range(1, 7)], "id long, v string").coalesce(1), tmp_table)
    write(spark.createDataFrame([(100, "far")], "id long, v string"), tmp_table)  # skipped by stats
    v = write(
        spark.createDataFrame([(4, "new4"), (50, "new50")], "id long, v string"),
        tmp_table,
        mode="overwrite",
        replaceWhere="id > 3 AND id < 60",
    )
    assert rows(read(spark, tmp_table)) == [
        (1, "v1"), (2, "v2"), (3, "v3"), (4, "new4"), (50, "new50"), (100, "far")
    ]
    entry = DeltaLog.for_table(tmp_table).read_commit(v)
    assert entry.commit_info is not None
    assert entry.commit_info.get("operationMetrics")["numRemovedFiles"] == "1"


def test_schema_enforcement_and_merge(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(1, "a")], "id long, s string"), tmp_table)
    with pytest.raises(SchemaMismatchError, match="'extra'"):
        write(spark.createDataFrame([(2, "b", 1.5)], "id long, s string, extra double"), tmp_table)
    with pytest.raises(SchemaMismatchError, match="column 's' has type int in the data but string"):
        write(spark.createDataFrame([(2, 3)], "id long, s int"), tmp_table)
    write(spark.createDataFrame([(2,)], "id int"), tmp_table)  # missing nullable column, int widened to long
    v = write(
        spark.createDataFrame([(3, "c", 1.5)], "ID long, s string, extra double"), tmp_table, mergeSchema=True
    )
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.version == v and snap.schema.field_names == ["id", "s", "extra"]
    assert rows(read(spark, tmp_table)) == [(1, "a", None), (2, None, None), (3, "c", 1.5)]

    write(spark.createDataFrame([("x", 1)], "a string, b int"), tmp_table, mode="overwrite", overwriteSchema=True)
    assert DeltaLog.for_table(tmp_table).update().schema.field_names == ["a", "b"]
    assert rows(read(spark, tmp_table)) == [("x", 1)]


def test_not_null_columns_are_enforced(spark: SparkSession, tmp_table: str) -> None:
    DeltaTable.create(spark).location(tmp_table).addColumn("id", "BIGINT", nullable=False).addColumn(
        "s", "STRING"
    ).execute()
    write(spark.createDataFrame([(1, "a")], "id long, s string"), tmp_table)
    with pytest.raises(DeltaAnalysisException, match="NOT NULL constraint violated for column 'id'"):
        write(spark.createDataFrame([(None, "b")], "id long, s string"), tmp_table)
    with pytest.raises(SchemaMismatchError, match="'id'.*missing"):
        write(spark.createDataFrame([("b",)], "s string"), tmp_table)
    assert rows(read(spark, tmp_table)) == [(1, "a")]


def test_idempotent_writes(spark: SparkSession, tmp_table: str) -> None:
    df = spark.createDataFrame([(1,)], "id long")
    assert write(df, tmp_table, txnAppId="app", txnVersion=1) == 0
    assert write(df, tmp_table, txnAppId="app", txnVersion=1) is None
    assert write(df, tmp_table, txnAppId="app", txnVersion=2) == 1
    assert DeltaLog.for_table(tmp_table).update().txn_version("app") == 2
    assert rows(read(spark, tmp_table)) == [(1,), (1,)]
    with pytest.raises(DeltaIllegalArgumentException):
        write(df, tmp_table, txnAppId="app")


def test_time_travel(spark: SparkSession, tmp_table: str) -> None:
    for i in range(3):
        write(spark.createDataFrame([(i,)], "id long"), tmp_table)
    assert rows(read(spark, tmp_table, version=0)) == [(0,)]
    assert rows(read(spark, tmp_table, version=1)) == [(0,), (1,)]
    stamps = dict(DeltaLog.for_table(tmp_table).commit_timestamps())
    at_v1 = dt.datetime.fromtimestamp(stamps[1] / 1000, dt.UTC)
    assert rows(read(spark, tmp_table, timestamp=at_v1)) == [(0,), (1,)]
    assert rows(read(spark, tmp_table, timestamp=at_v1.isoformat())) == [(0,), (1,)]
    with pytest.raises(DeltaIllegalArgumentException, match="before the earliest"):
        read(spark, tmp_table, timestamp="2000-01-01 00:00:00")
    # A DataFrame is pinned to its snapshot: a later commit does not change it.
    pinned = read(spark, tmp_table)
    write(spark.createDataFrame([(3,)], "id long"), tmp_table)
    assert len(pinned.collect()) == 3 and len(read(spark, tmp_table).collect()) == 4


def test_stats_match_pyarrow(spark: SparkSession, tmp_table: str) -> None:
    long_text = "y" * 40
    data = [
        (1, "b", dt.date(2024, 3, 1), dt.datetime(2024, 3, 1, 12, 0, 0, 123456, tzinfo=dt.UTC), 1.5, "k"),
        (7, long_text, None, dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None, "k"),
        (None, "a", dt.date(2023, 1, 1), None, 2.5, "k"),
    ]
    df = spark.createDataFrame(data, "id long, s string, d date, ts timestamp, f double, p string").coalesce(1)
    write(df, tmp_table, partitionBy="p")
    (add,) = DeltaLog.for_table(tmp_table).update().all_files
    stats = json.loads(add.stats or "{}")
    table = pq.read_table(os.path.join(tmp_table, add.path))
    assert "p" not in table.column_names
    assert stats["numRecords"] == table.num_rows == 3
    for col in ("id", "s", "d", "ts", "f"):
        assert stats["nullCount"][col] == table.column(col).null_count
    mm = {c: pc.min_max(table.column(c)).as_py() for c in ("id", "s", "d", "ts")}
    assert stats["minValues"]["id"] == mm["id"]["min"] == 1 and stats["maxValues"]["id"] == mm["id"]["max"] == 7
    assert stats["minValues"]["s"] == mm["s"]["min"] == "a"
    assert stats["maxValues"]["s"] == long_text[:32] + "\U0010ffff"  # truncated, still an upper bound
    assert stats["minValues"]["d"] == mm["d"]["min"].isoformat() == "2023-01-01"
    assert stats["maxValues"]["d"] == mm["d"]["max"].isoformat()
    assert stats["minValues"]["ts"] == "2024-01-01T00:00:00.000Z"
    assert stats["maxValues"]["ts"] == "2024-03-01T12:00:00.124Z"  # rounded up to whole ms
    assert mm["ts"]["max"].replace(tzinfo=None) == dt.datetime(2024, 3, 1, 12, 0, 0, 123456)
    assert "f" not in stats["minValues"]  # no float min/max: footers ignore NaN


def test_file_skipping(spark: SparkSession, tmp_table: str) -> None:
    df = spark.createDataFrame([(i, i % 2) for i in range(40)], "id long, p int")
    write(df.repartitionByRange(4, "id"), tmp_table, partitionBy="p")
    assert DeltaLog.for_table(tmp_table).update().num_files == 8

    skipped = read(spark, tmp_table, filter="id >= 35 AND p = 1")
    assert len(skipped.inputFiles()) == 1
    assert rows(skipped) == [(35, 1), (37, 1), (39, 1)]
    assert len(read(spark, tmp_table, filter="p = 0").inputFiles()) == 4
    assert len(read(spark, tmp_table, filter="id < 0").inputFiles()) == 0
    assert read(spark, tmp_table, filter="id < 0").count() == 0
    assert read(spark, tmp_table, filter="id = 3", columns=["P"]).columns == ["p"]


def test_read_files_df_internals(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(1, "a"), (2, "a"), (3, "b")], "id long, p string").coalesce(1), tmp_table,
          partitionBy="p")
    snap = DeltaLog.for_table(tmp_table).update()
    (file_a,) = [f for f in snap.all_files if f.partition_values["p"] == "a"]
    df = read_files_df(spark, snap, [file_a], with_file_path=True)
    assert df.columns == ["id", "p", "_file", "_row_index"]
    assert rows(df) == [(1, "a", file_a.path, 0), (2, "a", file_a.path, 1)]
    empty = read_files_df(spark, snap, [], columns=["p"])
    assert empty.columns == ["p"] and empty.count() == 0

    adds = write_data_files(spark.createDataFrame([(5, "c")], "id long, p string"), tmp_table, ["p"],
                            data_change=False, max_records_per_file=1)
    assert len(adds) == 1 and isinstance(adds[0], AddFile) and adds[0].data_change is False
    assert adds[0].partition_values == {"p": "c"} and adds[0].num_records == 1


def test_checkpoints_and_fresh_load(spark: SparkSession, tmp_table: str) -> None:
    write(spark.createDataFrame([(0,)], "id long"), tmp_table)
    log = DeltaLog.for_table(tmp_table)
    adds = write_data_files(spark.range(1, 25).coalesce(1), tmp_table, [], max_records_per_file=1)
    for add in adds:  # 24 more commits, one blind append each
        log.start_transaction().commit([add], "WRITE", {"mode": "Append"})
    log.wait_for_checkpoints()
    log_dir = os.path.join(tmp_table, "_delta_log")
    assert os.path.exists(os.path.join(log_dir, "00000000000000000010.checkpoint.parquet"))
    assert os.path.exists(os.path.join(log_dir, "00000000000000000020.checkpoint.parquet"))
    assert json.load(open(os.path.join(log_dir, "_last_checkpoint")))["version"] == 20
    DeltaLog.clear_cache()
    fresh = DeltaLog.for_table(tmp_table).update()
    assert fresh.version == 24 and fresh.num_files == 25
    assert rows(read(spark, tmp_table)) == [(i,) for i in range(25)]


def test_column_mapped_table_is_read_by_logical_names(spark: SparkSession, tmp_table: str) -> None:
    import pyarrow as pa

    schema = {
        "type": "struct",
        "fields": [
            {"name": "user id", "type": "long", "nullable": True,
             "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-a1"}},
            {"name": "info", "type": {"type": "struct", "fields": [
                {"name": "city", "type": "string", "nullable": True,
                 "metadata": {"delta.columnMapping.id": 3, "delta.columnMapping.physicalName": "col-c3"}}]},
             "nullable": True,
             "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-b2"}},
            {"name": "part", "type": "string", "nullable": True,
             "metadata": {"delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "col-d4"}},
        ],
    }
    os.makedirs(os.path.join(tmp_table, "x"))
    pq.write_table(
        pa.table({"col-a1": pa.array([1, 2], pa.int64()),
                  "col-b2": pa.array([{"col-c3": "Oslo"}, None], pa.struct([("col-c3", pa.string())]))}),
        os.path.join(tmp_table, "x", "f.parquet"),
    )
    txn = DeltaLog.for_table(tmp_table).start_transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(schema), partition_columns=("part",),
                                 configuration={"delta.columnMapping.mode": "name",
                                                "delta.columnMapping.maxColumnId": "4"}))
    txn.update_protocol(Protocol(2, 5))
    txn.commit([AddFile(path="x/f.parquet", partition_values={"col-d4": "p1"},
                        size=os.path.getsize(os.path.join(tmp_table, "x", "f.parquet")), modification_time=0)],
               "CREATE TABLE")
    df = read(spark, tmp_table)
    assert df.columns == ["user id", "info", "part"]
    assert [(r["user id"], r.info.city if r.info else None, r.part) for r in df.orderBy("user id").collect()] == [
        (1, "Oslo", "p1"), (2, None, "p1")
    ]
    # Written back under the physical names (another engine's table: its own names kept).
    write(spark.createDataFrame([(3, ("Rome",), "p2")], "`user id` long, info struct<city:string>, part string"),
          tmp_table)
    assert [(r["user id"], r.info.city if r.info else None, r.part) for r in read(spark, tmp_table).collect()
            if r["user id"] == 3] == [(3, "Rome", "p2")]
    new = [a for a in DeltaLog.for_table(tmp_table).update().all_files if a.path != "x/f.parquet"]
    assert [a.partition_values for a in new] == [{"col-d4": "p2"}]
    assert pq.read_schema(os.path.join(tmp_table, new[0].path)).names == ["col-a1", "col-b2"]


def test_merge_schema_adds_nested_struct_fields(spark: SparkSession, tmp_table: str) -> None:
    """mergeSchema adds fields to structs at any depth (also inside arrays), as Delta does."""
    first = spark.createDataFrame([(1, (1,), [(1,)])], "id long, s struct<a:int>, l array<struct<x:int>>")
    write(first, tmp_table)
    second = spark.createDataFrame(
        [(2, (2, "b"), [(2, 2.5)])], "id long, s struct<a:int, b:string>, l array<struct<x:int, y:double>>"
    )
    with pytest.raises(SchemaMismatchError, match="column 's'"):
        write(second, tmp_table)  # without mergeSchema: refused
    write(second, tmp_table, mergeSchema=True)
    schema = DeltaLog.for_table(tmp_table).update().schema
    assert schema.simple_string() == "struct<id:bigint,s:struct<a:int,b:string>,l:array<struct<x:int,y:double>>>"
    got = sorted((r.id, r.s.a, r.s.b, [(e.x, e.y) for e in r.l]) for r in read(spark, tmp_table).collect())
    assert got == [(1, 1, None, [(1, None)]), (2, 2, "b", [(2, 2.5)])]
    narrower = spark.createDataFrame([(3, (7,))], "id long, s struct<b:int>")
    with pytest.raises(SchemaMismatchError, match="column 's'"):
        write(narrower, tmp_table, mergeSchema=True)  # a field of another type is not merged
