"""Generated columns and CHECK constraints: every path that stores rows computes or checks them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import serialake
from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.model import features
from serialake.exceptions import DeltaAnalysisException
from serialake.sql.errors import SqlError

pytestmark = pytest.mark.spark


def rows(spark: SparkSession, path: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


def generated_table(spark: SparkSession, path: str) -> DeltaTable:
    return (
        DeltaTable.create(spark)
        .location(path)
        .addColumn("id", "int", nullable=False)
        .addColumn("price", "double")
        .addColumn("with_tax", T.DoubleType(), generatedAlwaysAs="price * 2")
        .addColumn("day", "date")
        .addColumn("month", "int", generatedAlwaysAs="month(day)")
        .partitionedBy("month")
        .execute()
    )


def test_builder_generated_columns_are_in_the_log_and_not_in_read_schemas(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dt = generated_table(spark, path)
    snap = DeltaLog.for_table(path).update()
    assert snap.schema.field("with_tax").metadata == {"delta.generationExpression": "price * 2"}
    assert features.has_feature(snap.protocol, "generatedColumns")
    assert all("delta.generationExpression" not in f.metadata for f in dt.toDF().schema.fields)


def test_writes_compute_missing_generated_columns_and_check_given_ones(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    generated_table(spark, path)
    df = spark.createDataFrame([(1, 10.0, "2024-03-05")], "id int, price double, day string").withColumn(
        "day", F.to_date("day")
    )
    df.write.format("delta").mode("append").save(path)
    given = spark.createDataFrame(
        [(2, 1.5, 3.0, None, None)], "id int, price double, with_tax double, day date, month int"
    )
    given.write.format("delta").mode("append").save(path)
    assert rows(spark, path) == [
        (1, 10.0, 20.0, __import__("datetime").date(2024, 3, 5), 3),
        (2, 1.5, 3.0, None, None),
    ]
    wrong = spark.createDataFrame([(3, 1.0, 5.0)], "id int, price double, with_tax double")
    with pytest.raises(DeltaAnalysisException, match=r"Generated column 'with_tax' .* price \* 2 .*\"price\":1\.0"):
        wrong.write.format("delta").mode("append").save(path)
    assert DeltaLog.for_table(path).update().version == 2  # the failed write committed nothing


def test_sql_insert_update_and_merge_recompute_generated_columns(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (col1 INT NOT NULL, col2 INT GENERATED ALWAYS AS (col1 + 10) COMMENT 'g') "
        "USING delta"
    )
    snap = DeltaLog.for_table(path).update()
    assert snap.schema.field("col2").metadata == {"delta.generationExpression": "col1 + 10", "comment": "g"}
    spark.sql(f"INSERT INTO delta.`{path}` (col1, col2) VALUES (1, 11)")
    spark.sql(f"INSERT INTO delta.`{path}` (col1) VALUES (5)")
    with pytest.raises(DeltaAnalysisException, match="col2"):
        spark.sql(f"INSERT INTO delta.`{path}` (col1, col2) VALUES (7, 7)")
    dt = DeltaTable.forPath(spark, path)
    dt.update("col1 = 1", {"col1": F.lit(2)})
    assert rows(spark, path) == [(2, 12), (5, 15)]
    # An UPDATE that assigns the generated column is checked, not recomputed.
    with pytest.raises(DeltaAnalysisException, match="col2"):
        dt.update("col1 = 5", {"col2": F.lit(99)})
    dt.update("col1 = 5", {"col1": F.lit(6), "col2": F.lit(16)})
    source = spark.createDataFrame([(2, 20), (30, None)], "k int, v int")
    (
        dt.alias("t")
        .merge(source.alias("s"), "t.col1 = s.k")
        .whenMatchedUpdate(set={"col1": "s.v"})
        .whenNotMatchedInsert(values={"col1": "s.k"})
        .execute()
    )
    assert rows(spark, path) == [(6, 16), (20, 30), (30, 40)]


def test_merge_star_clauses_check_generated_values_row_by_row(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (k INT, v INT, g INT GENERATED ALWAYS AS (v * 2)) USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` (k, v) VALUES (1, 1), (2, 2)")
    dt = DeltaTable.forPath(spark, path)
    # Clause 1 assigns g (checked), clause 2 only v (g recomputed): both in one MERGE.
    source = spark.createDataFrame([(1, 10, 20), (2, 30, 0)], "k int, v int, g int")
    (
        dt.alias("t")
        .merge(source.alias("s"), "t.k = s.k")
        .whenMatchedUpdateAll(condition="s.k = 1")
        .whenMatchedUpdate(set={"v": "s.v"})
        .execute()
    )
    assert rows(spark, path) == [(1, 10, 20), (2, 30, 60)]
    bad = spark.createDataFrame([(3, 1, 5)], "k int, v int, g int")
    with pytest.raises(DeltaAnalysisException, match="Generated column 'g'"):
        dt.alias("t").merge(bad.alias("s"), "t.k = s.k").whenNotMatchedInsertAll().execute()
    assert rows(spark, path) == [(1, 10, 20), (2, 30, 60)]


def test_generation_expressions_are_validated_when_the_table_is_created(spark: SparkSession, tmp_path: Path) -> None:
    cases = {
        "rand()": "not deterministic",
        "current_date()": "not deterministic",
        "nope + 1": "unknown column",
        "b + 1": "references generated column",
        "concat(a, 'x')": "gives string",
    }
    for i, (expression, message) in enumerate(cases.items()):
        path = str(tmp_path / f"t{i}")
        builder = (
            DeltaTable.create(spark)
            .location(path)
            .addColumn("a", "int")
            .addColumn("b", "int", generatedAlwaysAs="a + 1")
            .addColumn("c", "int", generatedAlwaysAs=expression)
        )
        with pytest.raises(DeltaAnalysisException, match=message):
            builder.execute()
        assert not DeltaLog.for_table(path).table_exists()
    with pytest.raises(SqlError, match="cannot be a generated column"):
        serialake.sql(spark, f"ALTER TABLE delta.`{tmp_path / 't0'}` ADD COLUMNS (z INT GENERATED ALWAYS AS (1))")


def test_check_constraints_of_a_table_are_enforced_on_every_write(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)
    # A table created by another writer with a CHECK constraint (as Delta's ADD CONSTRAINT leaves it).
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    meta = txn.metadata
    assert meta is not None
    from dataclasses import replace

    txn.update_metadata(replace(meta, configuration={"delta.constraints.positive": "id >= 0"}))
    txn.update_protocol(features.required_protocol({"delta.constraints.positive": "id >= 0"}, base=txn.protocol))
    txn.commit([], "ADD CONSTRAINT", {"name": "positive", "expr": "id >= 0"})
    version = log.update().version
    with pytest.raises(DeltaAnalysisException, match=r"CHECK constraint positive \(id >= 0\) .* \{\"id\":-1\}"):
        spark.createDataFrame([(-1,)], "id long").write.format("delta").mode("append").save(path)
    with pytest.raises(DeltaAnalysisException, match="CHECK constraint positive"):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES (-5)")
    dt = DeltaTable.forPath(spark, path)
    with pytest.raises(DeltaAnalysisException, match="CHECK constraint positive"):
        dt.update("id = 2", {"id": F.lit(-2)})
    with pytest.raises(DeltaAnalysisException, match="CHECK constraint positive"):
        dt.alias("t").merge(spark.range(1).alias("s"), "t.id = s.id").whenMatchedUpdate(set={"id": "-7"}).execute()
    with pytest.raises(DeltaAnalysisException, match="CHECK constraint positive"):
        spark.createDataFrame([(-1,)], "id long").write.format("delta").mode("overwrite").option(
            "overwriteSchema", "true"
        ).save(path)
    assert log.update().version == version
    dt.update("id = 2", {"id": F.lit(20)})
    assert [r[0] for r in dt.toDF().orderBy("id").collect()] == [0, 1, 20]
    assert json.loads(log.update().metadata.schema_string or "{}")["fields"][0]["name"] == "id"


def test_add_constraint_checks_existing_rows_then_every_write(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(5).write.format("delta").save(path)
    with pytest.raises(DeltaAnalysisException, match=r"1 row\(s\) of table .* violate the new CHECK constraint small"):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT small CHECK (id < 4)")
    assert DeltaLog.for_table(path).update().version == 0
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT small CHECK (id < (2 + 3))")
    snap = DeltaLog.for_table(path).update()
    assert snap.configuration["delta.constraints.small"] == "id < (2 + 3)"
    assert features.has_feature(snap.protocol, "checkConstraints")
    shown = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert shown["delta.constraints.small"] == "id < (2 + 3)"
    assert shown["delta.minWriterVersion"] == str(snap.protocol.min_writer_version)
    assert spark.sql(f"SHOW TBLPROPERTIES delta.`{path}` ('delta.constraints.small')").collect()[0].value == (
        "id < (2 + 3)"
    )
    with pytest.raises(DeltaAnalysisException, match="CHECK constraint small"):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES (7)")
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT small CHECK (id > 0)")
    with pytest.raises(DeltaAnalysisException, match="ADD CONSTRAINT"):
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.constraints.other' = 'id > 0')")
    with pytest.raises(DeltaAnalysisException, match="not boolean"):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT num CHECK (id + 1)")
    spark.sql(f"ALTER TABLE delta.`{path}` DROP CONSTRAINT small")
    spark.sql(f"ALTER TABLE delta.`{path}` DROP CONSTRAINT IF EXISTS small")
    with pytest.raises(DeltaAnalysisException, match="nonexistent constraint"):
        spark.sql(f"ALTER TABLE delta.`{path}` DROP CONSTRAINT small")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (7)")
    assert sorted(r[0] for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2, 3, 4, 7]


def test_a_row_appended_while_a_constraint_is_added_cannot_escape_it(spark: SparkSession, tmp_path: Path) -> None:
    from serialake.exceptions import ConcurrentAppendException
    from serialake.spark import dml

    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)

    def violating_append() -> None:
        spark.createDataFrame([(100,)], "id long").write.format("delta").mode("append").save(path)

    with pytest.raises(ConcurrentAppendException):
        dml.add_constraint(spark, path, "small", "id < 10", before_commit=violating_append)
    assert "delta.constraints.small" not in DeltaLog.for_table(path).update().configuration
