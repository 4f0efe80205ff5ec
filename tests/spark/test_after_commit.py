"""No step after a commit turns the committed result into an error (issue 42).

For each kind of operation a real step after its commit is made to fail (the checkpoint's
scheduling, caching the commit, deleting unreferenced files, the metrics, the result
DataFrame, noting the write for the session's reads, registering a table name): the call
returns normally with the committed result, the table is at the new version with the right
rows, and an ``AfterCommitWarning`` names the table, the version and the step. A failure
before the commit still raises and commits nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.tables import catalog
from serialake.core.txn import written as written_module
from serialake.core.txn.post_commit import AfterCommitWarning
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.spark import isolation, read, write
from serialake.spark.dml import merge_command, optimize_command, restore_command
from serialake.spark.dml.optimize_command import DeltaOptimizeBuilder
from serialake.sql import insert as sql_insert

pytestmark = pytest.mark.spark


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("disk on fire")


def _table(spark: SparkSession, path: str, batches: int = 1, rows: int = 6) -> int:
    """``batches`` appends of ``rows`` rows (ids 0...), one file each; the table's version."""
    for b in range(batches):
        df = spark.range(b * rows, (b + 1) * rows).withColumn("v", F.col("id") * 10).coalesce(1)
        write(df, path, mode="append")
    return _version(path)


def _version(path: str) -> int:
    return DeltaLog(path).update().version  # a fresh log: read from the files, no cache


def _rows(spark: SparkSession, path: str) -> list[tuple[int, int]]:
    return sorted((r["id"], r["v"]) for r in read(spark, path).collect())


def _operation(path: str, version: int) -> str:
    info = DeltaLog(path).read_commit(version).commit_info
    assert info is not None
    return str(info.values["operation"])


def _warned(record: pytest.WarningsRecorder, table: str, version: int, step: str) -> AfterCommitWarning:
    """The one ``AfterCommitWarning`` of ``step``; it names the table, the version, the step and the cause."""
    found = [w.message for w in record if isinstance(w.message, AfterCommitWarning) and step in w.message.step]
    assert len(found) == 1, [str(w.message) for w in record]
    w = found[0]
    assert (w.table, w.version) == (table, version)
    text = str(w)
    assert table in text and f"version {version}" in text and step in text and "disk on fire" in text
    return w


# -- steps after the commit fail: the committed result is returned ------------------------------
def test_optimize_returns_when_its_result_dataframe_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table, batches=3)
    monkeypatch.setattr(DeltaOptimizeBuilder, "result_df", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = DeltaTable.forPath(spark, tmp_table).optimize().executeCompaction()
    assert result is None  # the result DataFrame could not be built; the commit stands
    w = _warned(record, tmp_table, before + 1, "build the result DataFrame")
    assert w.operation == "OPTIMIZE"
    assert _version(tmp_table) == before + 1 and _operation(tmp_table, before + 1) == "OPTIMIZE"
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(18)]
    assert DeltaLog(tmp_table).update().num_files == 1


def test_optimize_returns_the_metrics_known_before_the_commit_when_the_final_ones_fail(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table, batches=2)
    monkeypatch.setattr(optimize_command, "_final_metrics", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = DeltaTable.forPath(spark, tmp_table).optimize().run_compaction()
    assert result.version == before + 1
    assert result.metrics["numRemovedFiles"] == 2 and result.metrics["numAddedFiles"] == 1
    _warned(record, tmp_table, before + 1, "compute the metrics")
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(12)]


def test_delete_returns_when_scheduling_the_checkpoint_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table)
    monkeypatch.setattr(DeltaLog, "maybe_checkpoint_async", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = DeltaTable.forPath(spark, tmp_table).delete("id < 2")
    assert result is not None and result.collect()[0]["num_affected_rows"] == 2
    w = _warned(record, tmp_table, before + 1, "schedule a checkpoint")
    assert w.operation == "DELETE"
    monkeypatch.undo()
    assert _version(tmp_table) == before + 1
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(2, 6)]


def test_update_returns_when_deleting_unreferenced_files_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table)
    monkeypatch.setattr(written_module, "_discard_unused", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = DeltaTable.forPath(spark, tmp_table).update("id = 1", {"v": "-1"})
    assert result is not None and result.collect()[0]["num_affected_rows"] == 1
    w = _warned(record, tmp_table, before + 1, "does not reference")
    assert w.operation == "UPDATE"
    assert _version(tmp_table) == before + 1
    assert _rows(spark, tmp_table) == sorted([(i, i * 10) for i in range(6) if i != 1] + [(1, -1)])


def test_merge_returns_when_its_result_dataframe_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table)
    source = spark.createDataFrame([(1, 111), (9, 999)], "id long, v long")
    monkeypatch.setattr(merge_command, "merge_result_df", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = (
            DeltaTable.forPath(spark, tmp_table).alias("t")
            .merge(source.alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        )  # fmt: skip
    assert result is None
    w = _warned(record, tmp_table, before + 1, "build the result DataFrame")
    assert w.operation == "MERGE"
    assert _version(tmp_table) == before + 1 and _operation(tmp_table, before + 1) == "MERGE"
    assert _rows(spark, tmp_table) == sorted([(i, i * 10) for i in range(6) if i != 1] + [(1, 111), (9, 999)])


def test_append_returns_its_version_when_caching_the_commit_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table)
    monkeypatch.setattr(DeltaLog, "remember_commit", _boom)  # a step of the commit loop, after the put landed
    with pytest.warns(AfterCommitWarning) as record:
        version = write(spark.range(6, 8).withColumn("v", F.col("id") * 10), tmp_table, mode="append")
    assert version == before + 1
    w = _warned(record, tmp_table, before + 1, "cache the commit")
    assert w.operation == "WRITE"
    assert _version(tmp_table) == before + 1
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(8)]


def test_dataframe_writer_save_returns_when_noting_the_write_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table)
    monkeypatch.setattr(isolation, "note_write", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        spark.range(6, 9).withColumn("v", F.col("id") * 10).write.format("delta").mode("append").save(tmp_table)
    _warned(record, tmp_table, before + 1, "note the write")
    monkeypatch.undo()
    assert _version(tmp_table) == before + 1
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(9)]


def test_restore_returns_when_its_result_dataframe_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _table(spark, tmp_table)
    before = _table(spark, tmp_table, batches=1, rows=6)  # (ids 0-5 again: 12 rows)
    monkeypatch.setattr(restore_command, "restore_metrics_df", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = DeltaTable.forPath(spark, tmp_table).restoreToVersion(first)
    assert result is None
    w = _warned(record, tmp_table, before + 1, "build the result DataFrame")
    assert w.operation == "RESTORE"
    assert _version(tmp_table) == before + 1 and _operation(tmp_table, before + 1) == "RESTORE"
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(6)]


def test_sql_insert_returns_when_its_steps_after_the_commit_fail(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table)
    monkeypatch.setattr(isolation, "note_write", _boom)
    monkeypatch.setattr(sql_insert, "metric", _boom)  # reading the row count back from the commit
    with pytest.warns(AfterCommitWarning) as record:
        result = spark.sql(f"INSERT INTO delta.`{tmp_table}` VALUES (6, 60), (7, 70)")
    assert result is not None and [tuple(r) for r in result.collect()] == [(None, None)]  # counts not known
    _warned(record, tmp_table, before + 1, "note the write")
    _warned(record, tmp_table, before + 1, "read the inserted row count")
    monkeypatch.undo()
    assert _version(tmp_table) == before + 1
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(8)]


def test_sql_delete_returns_none_when_its_result_dataframe_fails(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _table(spark, tmp_table)
    from serialake.spark import dml

    monkeypatch.setattr(dml, "affected_rows_df", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = spark.sql(f"DELETE FROM delta.`{tmp_table}` WHERE id >= 4")
    assert result is None
    w = _warned(record, tmp_table, before + 1, "build the result DataFrame")
    assert w.operation == "DELETE"
    assert _rows(spark, tmp_table) == [(i, i * 10) for i in range(4)]


def test_sql_create_table_as_select_returns_when_registering_the_name_fails(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = str(tmp_path / "ctas")
    monkeypatch.setattr(catalog, "register", _boom)
    with pytest.warns(AfterCommitWarning) as record:
        result = spark.sql(f"CREATE TABLE after_commit_ctas LOCATION '{location}' AS SELECT id, id * 10 AS v "
                           "FROM range(3)")  # fmt: skip
    assert result is not None and result.collect() == []
    w = _warned(record, location, 0, "register the table name")
    assert w.operation == "CREATE TABLE AS SELECT"
    monkeypatch.undo()
    assert _version(location) == 0 and _rows(spark, location) == [(0, 0), (1, 10), (2, 20)]
    assert catalog.lookup("after_commit_ctas") is None  # the step that failed did not happen


# -- a failure before the commit still raises and commits nothing -------------------------------
def _kinds(spark: SparkSession, path: str) -> dict[str, Callable[[], Any]]:
    table = DeltaTable.forPath(spark, path)
    source = spark.createDataFrame([(1, 111)], "id long, v long")
    return {
        "optimize": lambda: table.optimize().executeCompaction(),
        "delete": lambda: table.delete("id < 2"),
        "update": lambda: table.update("id = 1", {"v": "-1"}),
        "merge": lambda: table.alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdateAll().execute(),
        "write": lambda: write(spark.range(6, 8).withColumn("v", F.col("id")), path, mode="append"),
        "restore": lambda: table.restoreToVersion(0),
        "sql": lambda: spark.sql(f"INSERT INTO delta.`{path}` VALUES (6, 60)"),
    }


@pytest.mark.parametrize("kind", ["optimize", "delete", "update", "merge", "write", "restore", "sql"])
def test_a_failure_before_the_commit_still_raises_and_commits_nothing(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder, kind: str
) -> None:
    before = _table(spark, tmp_table, batches=2)
    rows = _rows(spark, tmp_table)
    run = _kinds(spark, tmp_table)[kind]
    monkeypatch.setattr(OptimisticTransaction, "_prepare", _boom)  # inside commit(), before anything is written
    with pytest.raises(RuntimeError, match="disk on fire"):
        run()
    monkeypatch.undo()
    assert _version(tmp_table) == before and _rows(spark, tmp_table) == rows
    assert not [w for w in recwarn if isinstance(w.message, AfterCommitWarning)]
