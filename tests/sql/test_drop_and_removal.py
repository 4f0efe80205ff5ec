"""A table dropped (DROP TABLE) or removed from outside (its directory deleted) is gone for the process.

As with delta-spark: DROP TABLE of a managed table deletes its files, so a table created again
under the name starts empty; an external table keeps its files. A table whose directory
another party deleted is not served from this process's cached log: reads say it is not
found, and an ``errorifexists`` write creates it anew.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.tables import catalog
from serialake.exceptions import DeltaAnalysisException, DeltaTableNotFoundError
from serialake.spark import isolation

pytestmark = pytest.mark.spark

SCHEMA = "id int, v string"


def rows_of(spark: SparkSession, name: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in spark.table(name).collect())


def test_drop_of_a_managed_table_deletes_its_files(spark: SparkSession) -> None:
    spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA).write.format("delta").saveAsTable("dm")
    location = catalog.lookup("dm")
    assert location == str(Path(catalog.managed_location("dm"))) and catalog.is_managed("dm")
    DeltaTable.forName(spark, "dm").toDF().collect()  # cached in this process
    spark.sql("DROP TABLE dm")
    assert not os.path.exists(location)
    assert not [p for p in os.listdir(catalog.warehouse_dir()) if "dm" in p]  # nothing left beside it
    assert not spark.catalog.tableExists("dm")
    with pytest.raises(DeltaTableNotFoundError):
        spark.read.format("delta").load(location).collect()
    # Created again under the name: empty, then only its own rows (delta-spark's behaviour).
    spark.createDataFrame([(3, "c")], SCHEMA).write.format("delta").saveAsTable("dm")
    assert rows_of(spark, "dm") == [(3, "c")]
    assert DeltaLog.for_table(location).update().version == 0
    spark.sql("DROP TABLE dm")
    spark.sql("CREATE TABLE dm (id int, v string) USING delta")
    assert rows_of(spark, "dm") == []
    spark.sql("DROP TABLE IF EXISTS dm")
    spark.sql("DROP TABLE IF EXISTS dm")  # gone: nothing to do
    with pytest.raises(DeltaTableNotFoundError):
        spark.sql("DROP TABLE dm")


def test_drop_of_an_external_table_keeps_its_files(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "ext")
    spark.createDataFrame([(1, "a")], SCHEMA).write.format("delta").option("path", path).saveAsTable("de")
    spark.sql(f"CREATE TABLE de2 USING delta LOCATION '{path}'")
    assert not catalog.is_managed("de") and not catalog.is_managed("de2")
    spark.sql("DROP TABLE de")
    spark.sql("DROP TABLE de2")
    assert sorted(map(tuple, spark.read.format("delta").load(path).collect())) == [(1, "a")]
    assert not spark.catalog.tableExists("de")


def test_a_renamed_managed_table_stays_managed(spark: SparkSession) -> None:
    spark.sql("CREATE TABLE dr (id int) USING delta")
    location = catalog.lookup("dr")
    assert location is not None
    spark.sql("ALTER TABLE dr RENAME TO dr2")
    assert catalog.is_managed("dr2")
    spark.sql("DROP TABLE dr2")
    assert not os.path.exists(location)


def test_a_dropped_table_is_not_served_from_a_session_cache(spark: SparkSession) -> None:
    """At SERIALIZABLE a session serves a cut it read before without touching the log: not once the
    process dropped the table."""
    spark.createDataFrame([(1, "a")], SCHEMA).write.format("delta").saveAsTable("ds")
    location = catalog.lookup("ds")
    assert location is not None
    previous = isolation.session_isolation(spark)
    isolation.set_session_isolation(spark, "SERIALIZABLE")
    try:
        assert spark.read.format("delta").load(location).count() == 1
        spark.sql("DROP TABLE ds")
        with pytest.raises(DeltaTableNotFoundError):
            spark.read.format("delta").load(location).count()
    finally:
        isolation.set_session_isolation(spark, previous)


@pytest.mark.parametrize("commits", [1, 3], ids=["version-0", "version-2"])
def test_a_table_removed_from_outside_is_gone(spark: SparkSession, tmp_table: str, commits: int) -> None:
    """``shutil.rmtree`` of a table this process has cached (at version 0 too): a read says it is not
    found, ``errorifexists`` creates it anew, and the new table has only its own rows."""
    for i in range(commits):
        spark.createDataFrame([(i, "old")], SCHEMA).write.format("delta").mode("append").save(tmp_table)
    assert spark.read.format("delta").load(tmp_table).count() == commits
    log = DeltaLog.for_table(tmp_table)
    assert log.update().version == commits - 1
    shutil.rmtree(tmp_table)
    with pytest.raises(DeltaTableNotFoundError):
        spark.read.format("delta").load(tmp_table).collect()
    with pytest.raises(DeltaTableNotFoundError):
        log.update()
    with pytest.raises(DeltaAnalysisException):
        DeltaTable.forPath(spark, tmp_table)
    spark.createDataFrame([(9, "new")], SCHEMA).write.format("delta").mode("errorifexists").save(tmp_table)
    assert sorted(map(tuple, spark.read.format("delta").load(tmp_table).collect())) == [(9, "new")]
    assert log.update().version == 0
    assert [r["operation"] for r in DeltaTable.forPath(spark, tmp_table).history().collect()] == ["WRITE"]

