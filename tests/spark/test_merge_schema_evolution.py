"""MERGE with schema evolution: ``withSchemaEvolution()``, the autoMerge setting, and SQL's
``MERGE WITH SCHEMA EVOLUTION``: source columns the clauses assign join the table."""

from __future__ import annotations

from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from serialake.core import DeltaLog
from serialake.exceptions import ConcurrentAppendException, DeltaAnalysisException, MetadataChangedException
from serialake.spark import dml, read, write
from serialake.spark.table import DeltaTable

pytestmark = pytest.mark.spark

AUTO_MERGE = "spark.databricks.delta.schema.autoMerge.enabled"


def _table(spark: SparkSession, path: str, rows: list[Any], schema: str, **kw: Any) -> None:
    write(spark.createDataFrame(rows, schema), path, **kw)


def _rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in read(spark, path).collect())


def _names(path: str) -> list[str]:
    snap = DeltaLog.for_table(path).update()
    return snap.schema.field_names


def test_star_clauses_add_every_source_column(spark: SparkSession, tmp_table: str) -> None:
    _table(spark, tmp_table, [(1, "a"), (2, "b"), (3, "c")], "id long, v string")
    source = spark.createDataFrame([(2, "B", 20, True), (4, "D", 40, False)], "id long, v string, n int, f boolean")
    (
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
    )
    assert _names(tmp_table) == ["id", "v", "n", "f"]
    expected = [(1, "a", None, None), (2, "B", 20, True), (3, "c", None, None), (4, "D", 40, False)]
    assert _rows(spark, tmp_table) == expected
    # The new schema is the table's for every reader.
    dt = deltalake.DeltaTable(tmp_table)
    assert [f.name for f in dt.schema().fields] == ["id", "v", "n", "f"]
    got = sorted(zip(*dt.to_pyarrow_table().to_pydict().values()))
    assert got == expected
    history = DeltaTable.forPath(spark, tmp_table).history(1).collect()[0]
    assert history["operation"] == "MERGE"


def test_explicit_assignment_to_a_source_column_adds_it(spark: SparkSession, tmp_table: str) -> None:
    """delta-spark's own example: ``set={"extra": "-1"}`` names a column only the source has."""
    _table(spark, tmp_table, [("a", 1), ("b", 2), ("c", 3), ("d", 4)], "key string, value int")
    source = spark.createDataFrame([("a", -1), ("b", 0), ("e", -5), ("f", -6)], "key string, extra int")
    (
        DeltaTable.forPath(spark, tmp_table).alias("t")
        .merge(source.alias("s"), "t.key = s.key")
        .whenMatchedUpdate(set={"extra": "-1"})
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
    )
    assert _names(tmp_table) == ["key", "value", "extra"]
    assert _rows(spark, tmp_table) == [
        ("a", 1, -1), ("b", 2, -1), ("c", 3, None), ("d", 4, None), ("e", None, -5), ("f", None, -6)
    ]  # fmt: skip


def test_only_assigned_source_columns_are_added(spark: SparkSession, tmp_table: str) -> None:
    _table(spark, tmp_table, [(1, "a")], "id long, v string")
    source = spark.createDataFrame([(1, "x", 10), (2, "y", 20)], "id long, used string, unused int")
    (
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdate(set={"t.used": "s.used"})
        .whenNotMatchedInsert(values={"id": "s.id", "used": "upper(s.used)"})
        .withSchemaEvolution()
        .execute()
    )
    assert _names(tmp_table) == ["id", "v", "used"]
    assert _rows(spark, tmp_table) == [(1, "a", "x"), (2, None, "Y")]


def test_without_evolution_extra_columns_are_ignored_and_unknown_targets_fail(
    spark: SparkSession, tmp_table: str
) -> None:
    _table(spark, tmp_table, [(1, "a")], "id long, v string")
    source = spark.createDataFrame([(1, "b", 7), (2, "c", 8)], "id long, v string, n int")
    dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t").whenMatchedUpdateAll()\
        .whenNotMatchedInsertAll().execute()
    assert _names(tmp_table) == ["id", "v"]
    assert _rows(spark, tmp_table) == [(1, "b"), (2, "c")]
    version = DeltaLog.for_table(tmp_table).update().version
    with pytest.raises(DeltaAnalysisException, match="'n' does not exist"):
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")\
            .whenMatchedUpdate(set={"n": "s.n"}).execute()
    assert DeltaLog.for_table(tmp_table).update().version == version


def test_session_setting_turns_it_on(spark: SparkSession, tmp_table: str) -> None:
    _table(spark, tmp_table, [(1, "a")], "id long, v string")
    source = spark.createDataFrame([(1, "b", 7)], "id long, v string, n int")
    spark.conf.set(AUTO_MERGE, "true")
    try:
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t").whenMatchedUpdateAll().execute()
    finally:
        spark.conf.unset(AUTO_MERGE)
    assert _rows(spark, tmp_table) == [(1, "b", 7)]


def test_missing_target_columns_are_kept_by_update_all_and_null_for_insert_all(
    spark: SparkSession, tmp_table: str
) -> None:
    _table(spark, tmp_table, [(1, "a", 1.5), (2, "b", 2.5)], "id long, v string, keep double")
    source = spark.createDataFrame([(1, "A", "x"), (3, "C", "z")], "id long, v string, new string")
    with pytest.raises(DeltaAnalysisException, match="no column"):
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t").whenMatchedUpdateAll().execute()
    (
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
    )
    assert _rows(spark, tmp_table) == [(1, "A", 1.5, "x"), (2, "b", 2.5, None), (3, "C", None, "z")]


def test_nested_struct_fields_evolve(spark: SparkSession, tmp_table: str) -> None:
    _table(
        spark, tmp_table, [(1, (1, "x"), [(1, "x")]), (2, (2, "y"), [])],
        "id long, s struct<a:int,b:string>, l array<struct<a:int,b:string>>",
    )  # fmt: skip
    # The source's structs have their fields in another order and one more.
    source = spark.createDataFrame(
        [(1, ("X", True, 10), [("X", True, 10)]), (3, ("Z", False, 30), None)],
        "id long, s struct<b:string,c:boolean,a:int>, l array<struct<b:string,c:boolean,a:int>>",
    )
    (
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
    )
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.schema.simple_string() == (
        "struct<id:bigint,s:struct<a:int,b:string,c:boolean>,l:array<struct<a:int,b:string,c:boolean>>>"
    )
    got = {r["id"]: r for r in read(spark, tmp_table).collect()}
    assert tuple(got[1]["s"]) == (10, "X", True) and [tuple(e) for e in got[1]["l"]] == [(10, "X", True)]
    assert tuple(got[2]["s"]) == (2, "y", None) and got[2]["l"] == []
    assert tuple(got[3]["s"]) == (30, "Z", False) and got[3]["l"] is None


def test_explicit_struct_assignment_evolves_the_struct(spark: SparkSession, tmp_table: str) -> None:
    _table(spark, tmp_table, [(1, (1, "x"))], "id long, s struct<a:int,b:string>")
    source = spark.createDataFrame([(1, (5, "q", 2.0))], "id long, s struct<a:int,b:string,d:double>")
    dml.merge(spark, tmp_table, source.alias("src"), "t.id = src.id", alias="t")\
        .whenMatchedUpdate(set={"s": "src.s"}).withSchemaEvolution().execute()
    assert [tuple(r["s"]) for r in read(spark, tmp_table).collect()] == [(5, "q", 2.0)]


def test_sql_merge_with_schema_evolution(spark: SparkSession, tmp_table: str) -> None:
    from serialake import sql

    _table(spark, tmp_table, [(1, "a")], "id long, v string")
    spark.createDataFrame([(1, "b", 7), (2, "c", 8)], "id long, v string, n int").createOrReplaceTempView("src_evo")
    sql(
        spark,
        f"MERGE WITH SCHEMA EVOLUTION INTO delta.`{tmp_table}` t USING src_evo s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    )
    assert _rows(spark, tmp_table) == [(1, "b", 7), (2, "c", 8)]


def test_partitioned_table_with_deletion_vectors(spark: SparkSession, tmp_table: str) -> None:
    _table(
        spark, tmp_table, [(i, f"p{i % 2}", "v") for i in range(6)], "id long, p string, v string",
        partitionBy=["p"], properties={"delta.enableDeletionVectors": "true"},
    )  # fmt: skip
    source = spark.createDataFrame([(1, "p1", "w", 1.0), (9, "p1", "n", 9.0)], "id long, p string, v string, d double")
    (
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
    )
    rows = _rows(spark, tmp_table)
    assert (1, "p1", "w", 1.0) in rows and (9, "p1", "n", 9.0) in rows and (0, "p0", "v", None) in rows
    assert len(rows) == 7


def test_concurrent_schema_change_fails_the_evolving_merge(spark: SparkSession, tmp_table: str) -> None:
    """The MERGE commits a new schema: a concurrent metadata change wins, and it fails cleanly."""
    _table(spark, tmp_table, [(1, "a")], "id long, v string")
    source = spark.createDataFrame([(1, "b", 7)], "id long, v string, n int")

    def change_properties() -> None:
        DeltaTable.forPath(spark, tmp_table).setTableProperties({"delta.appendOnly": "false"})

    builder = dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")\
        .whenMatchedUpdateAll().withSchemaEvolution()
    with pytest.raises(MetadataChangedException):
        builder.run(before_commit=change_properties)
    assert _names(tmp_table) == ["id", "v"]
    assert _rows(spark, tmp_table) == [(1, "a")]


def test_concurrent_append_of_other_keys_commits(spark: SparkSession, tmp_table: str) -> None:
    """Row-level concurrency (deletion vectors) holds for an evolving MERGE as for any other."""
    _table(spark, tmp_table, [(1, "a"), (2, "b")], "id long, v string",
           properties={"delta.enableDeletionVectors": "true"})
    source = spark.createDataFrame([(1, "z", 7)], "id long, v string, n int")

    def append() -> None:
        write(spark.createDataFrame([(50, "c")], "id long, v string"), tmp_table, mode="append")

    builder = dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")\
        .whenMatchedUpdateAll().withSchemaEvolution()
    builder.run(before_commit=append)
    assert _rows(spark, tmp_table) == [(1, "z", 7), (2, "b", None), (50, "c", None)]

    # An append of a key the MERGE read conflicts, schema evolution or not.
    def append_read_key() -> None:
        write(spark.createDataFrame([(2, "dup", 3)], "id long, v string, n int"), tmp_table, mode="append")

    source = spark.createDataFrame([(2, "y", 8, "new")], "id long, v string, n int, m string")
    builder = dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")\
        .whenMatchedUpdateAll().withSchemaEvolution()
    with pytest.raises(ConcurrentAppendException):
        builder.run(before_commit=append_read_key)
    assert _names(tmp_table) == ["id", "v", "n"]
