"""ALTER TABLE ... {ALTER|CHANGE} COLUMN, RENAME TO and SET LOCATION through plain ``spark.sql``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.exceptions import (
    ConcurrentAppendException,
    DeltaAnalysisException,
)
from serialake.spark import dml
from serialake.sql.errors import SqlError

pytestmark = pytest.mark.spark


def schema_of(path: str) -> list[tuple[str, str, bool, str | None]]:
    snap = DeltaLog.for_table(path).update()
    return [(f.name, f.data_type.simple_string(), f.nullable, f.metadata.get("comment")) for f in snap.schema.fields]


def test_positions_comments_and_nullability(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (a LONG, b STRING NOT NULL, c INT) USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1, 'x', 10)")
    spark.sql(f"ALTER TABLE delta.`{path}` CHANGE COLUMN a a LONG AFTER b")  # Hive's form
    assert [n for n, *_ in schema_of(path)] == ["b", "a", "c"]
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN c FIRST")
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN c COMMENT 'the c'")
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN b DROP NOT NULL")
    assert schema_of(path) == [("c", "int", True, "the c"), ("b", "string", True, None), ("a", "bigint", True, None)]
    # The data follows the schema's order; NULL is now allowed in b.
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (20, NULL, 2)")
    got = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    assert got == [(10, "x", 1), (20, None, 2)]
    ops = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    changes = [r for r in ops if r["operation"] == "CHANGE COLUMN"]
    assert len(changes) == 4
    assert changes[0]["operationParameters"]["position"] == "AFTER b"
    assert json.loads(changes[2]["operationParameters"]["column"])["metadata"] == {"comment": "the c"}


def test_nested_fields(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT, s STRUCT<a: INT, b: STRING NOT NULL>) USING delta")
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN s.b FIRST")
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN s.b DROP NOT NULL")
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN s.a COMMENT 'inner'")
    snap = DeltaLog.for_table(path).update()
    inner = snap.schema.field("s").data_type
    assert [(f.name, f.nullable, f.metadata.get("comment")) for f in inner.fields] == [
        ("b", True, None), ("a", True, "inner")
    ]  # fmt: skip
    with pytest.raises(DeltaAnalysisException, match="'s.zz' does not exist"):
        spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN s.zz COMMENT 'x'")


def test_set_not_null_checks_existing_rows_then_every_write(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a"), (2, None)], "id int, v string").write.format("delta").save(path)
    version = DeltaLog.for_table(path).update().version
    with pytest.raises(DeltaAnalysisException, match="1 row"):
        spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN v SET NOT NULL")
    assert DeltaLog.for_table(path).update().version == version
    spark.sql(f"DELETE FROM delta.`{path}` WHERE v IS NULL")
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN v SET NOT NULL")
    assert schema_of(path)[1] == ("v", "string", False, None)
    with pytest.raises(DeltaAnalysisException, match="NOT NULL constraint violated for column 'v'"):
        spark.createDataFrame([(3, None)], "id int, v string").write.format("delta").mode("append").save(path)
    assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == [(1, "a")]


def test_set_not_null_fails_when_a_concurrent_write_commits_first(spark: SparkSession, tmp_path: Path) -> None:
    """The check read the whole table: a NULL appended meanwhile cannot slip under the new rule."""
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a")], "id int, v string").write.format("delta").save(path)

    def append_null() -> None:
        spark.createDataFrame([(2, None)], "id int, v string").write.format("delta").mode("append").save(path)

    with pytest.raises(ConcurrentAppendException):
        dml.change_column(spark, path, ["v"], nullable=False, before_commit=append_null)
    assert schema_of(path)[1][2] is True


def test_refused_changes_name_the_table_and_change_nothing(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (a LONG, p STRING) USING delta PARTITIONED BY (p)")
    version = DeltaLog.for_table(path).update().version
    with pytest.raises(DeltaAnalysisException, match="column mapping"):
        spark.sql(f"ALTER TABLE delta.`{path}` CHANGE COLUMN a renamed LONG")
    with pytest.raises(DeltaAnalysisException, match="from bigint to int"):
        spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN a TYPE INT")
    with pytest.raises(DeltaAnalysisException, match="'nope'"):
        spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN a AFTER nope")
    with pytest.raises(SqlError, match="Expected what to change"):
        serialake.sql(spark, f"ALTER TABLE delta.`{path}` ALTER COLUMN a")
    assert DeltaLog.for_table(path).update().version == version
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN a TYPE BIGINT")  # the same type: nothing to commit
    assert DeltaLog.for_table(path).update().version == version


def test_rename_table_and_set_location(spark: SparkSession, tmp_path: Path) -> None:
    spark.sql("CREATE TABLE old_name (b STRING, a LONG) USING delta")
    spark.sql("INSERT INTO old_name VALUES ('x', 1)")
    spark.sql("ALTER TABLE old_name RENAME TO new_name")
    assert spark.table("new_name").count() == 1
    assert not spark.catalog.tableExists("old_name")
    spark.sql("CREATE TABLE other (b STRING) USING delta")
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        spark.sql("ALTER TABLE new_name RENAME TO other")
    elsewhere = str(tmp_path / "elsewhere")
    spark.createDataFrame([("y", 2), ("z", 3)], "b string, a long").write.format("delta").save(elsewhere)
    spark.sql(f"ALTER TABLE new_name SET LOCATION '{elsewhere}'")
    assert sorted(r["a"] for r in spark.table("new_name").collect()) == [2, 3]
    mismatched = str(tmp_path / "mismatched")
    spark.createDataFrame([(1,)], "q int").write.format("delta").save(mismatched)
    with pytest.raises(DeltaAnalysisException, match="differs"):
        spark.sql(f"ALTER TABLE new_name SET LOCATION '{mismatched}'")
    assert spark.table("new_name").count() == 2
