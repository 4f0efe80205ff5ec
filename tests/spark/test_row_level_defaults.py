"""Which tables get row-level concurrency by default (issue #41), with real Spark jobs.

- A table created clustered (SQL ``CLUSTER BY``, ``DeltaTable.create().clusterBy``, the writers'
  ``clusterBy``, CTAS) gets deletion vectors unless ``delta.enableDeletionVectors`` is set
  (``clustering.cluster_table``), so its conflicts are resolved by rows.
- A partitioned table with deletion vectors is resolved by rows too; ``delta.enableRowLevelConcurrency
  = false`` is the explicit off switch on any table.

Each pair is planned from one version: the loser plans, its ``before_commit`` hook runs the winner
to completion, then the loser commits; both orders, both isolation levels. The rows are checked
exactly with serialake and with delta-rs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import read_deletion_vector
from serialake.core.model import clustering, features
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
)
from serialake.spark import dml, read, write

pytestmark = pytest.mark.spark

SCHEMA = "id long, p int, s string"
N = 12  # rows of the one data file (of partition p = 0 on the partitioned table)
LEVELS = ["Serializable", "WriteSerializable"]
LAYOUTS = ["clustered", "partitioned"]
ORDERS = ["a_first", "b_first"]  # which of the pair commits first (runs inside the other's hook)
Row = tuple[int, int, str]


def _make(spark: SparkSession, path: str, layout: str, level: str, props: dict[str, str] | None = None) -> None:
    """One file of N rows (id i, p 0, s 's<i>'): a clustered table created by SQL with no DV
    property (the default gives it deletion vectors), or a table partitioned by p with them;
    plus a file in another partition / of other ids the pairs never touch."""
    conf = {"delta.isolationLevel": level, **(props or {})}
    rows = [(i, 0, f"s{i}") for i in range(N)]
    other = [(100 + i, 1, f"s{100 + i}") for i in range(3)]
    if layout == "clustered":
        tbl = ", ".join(f"'{k}' = '{v}'" for k, v in conf.items())
        spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, p INT, s STRING) USING delta CLUSTER BY (id) "
                  f"TBLPROPERTIES ({tbl})")  # fmt: skip
        write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, mode="append")
        write(spark.createDataFrame(other, SCHEMA).coalesce(1), path, mode="append")
    else:
        dvs = {"delta.enableDeletionVectors": "true", **conf}
        write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, partitionBy=["p"], properties=dvs)
        write(spark.createDataFrame(other, SCHEMA).coalesce(1), path, mode="append")


def _expected(deleted: set[int] = frozenset(), updated: dict[int, str] | None = None) -> list[Row]:
    base = [(i, 0, f"s{i}") for i in range(N)] + [(100 + i, 1, f"s{100 + i}") for i in range(3)]
    return sorted((i, p, (updated or {}).get(i, s)) for i, p, s in base if i not in deleted)


def _check(spark: SparkSession, path: str, want: list[Row]) -> None:
    """serialake and delta-rs read exactly ``want``."""
    from deltalake import DeltaTable as RsTable

    got = sorted(tuple(r) for r in read(spark, path).select("id", "p", "s").collect())
    assert got == want
    table = RsTable(path)
    if "deletionVectors" in (table.protocol().reader_features or []):
        # delta-rs's pyarrow path refuses the deletionVectors reader feature; its DataFusion scan applies them.
        arrow = pa.RecordBatchReader.from_stream(table.scan()).read_all()
    else:
        arrow = table.to_pyarrow_table()
    theirs = sorted((r["id"], int(r["p"]), r["s"]) for r in arrow.select(["id", "p", "s"]).to_pylist())
    assert theirs == want


def _shared_file_vector(path: str) -> list[int]:
    """The deleted rows of the file holding ids 0..N-1 (it is still the one file of p = 0)."""
    snap = DeltaLog.for_table(path).update()
    (f,) = [f for f in snap.all_files if (f.partition_values or {}).get("p", "0") == "0" and f.num_records == N]
    assert f.deletion_vector is not None
    return sorted(read_deletion_vector(path, f.deletion_vector))


Op = Callable[[SparkSession, str, Any], Any]


def _delete(cond: str) -> Op:
    return lambda spark, path, hook: dml.run_delete(spark, path, cond, before_commit=hook)


def _update(cond: str, value: str) -> Op:
    return lambda spark, path, hook: dml.run_update(spark, path, cond, {"s": f"'{value}'"}, before_commit=hook)


def _pair(spark: SparkSession, path: str, a: Op, b: Op, order: str) -> None:
    """Plan the second committer, commit the first inside its hook, then commit the second."""
    first, second = (a, b) if order == "a_first" else (b, a)
    second(spark, path, lambda: first(spark, path, None))


# -- the clustered table's default -----------------------------------------------------------------


def _dv_on(path: str) -> bool:
    snap = DeltaLog.for_table(path).update()
    conf = snap.metadata.configuration
    return (
        conf.get("delta.enableDeletionVectors") == "true"
        and {"deletionVectors", *clustering.FEATURES} <= features.writer_features(snap.protocol)
        and "deletionVectors" in features.reader_features(snap.protocol)
    )


def test_every_way_of_creating_a_clustered_table_turns_deletion_vectors_on(spark: SparkSession, tmp_path: Path) -> None:
    names = ("sql", "builder", "writer", "v2", "ctas", "replace", "plain", "off", "session_off")
    made: dict[str, str] = {name: str(tmp_path / name) for name in names}
    spark.sql(f"CREATE TABLE delta.`{made['sql']}` (id BIGINT, s STRING) USING delta CLUSTER BY (id)")
    DeltaTable.create(spark).location(made["builder"]).addColumn("id", "bigint").clusterBy("id").execute()
    spark.range(3).write.format("delta").clusterBy("id").save(made["writer"])
    spark.range(3).writeTo("rl_v2").using("delta").clusterBy("id").create()
    made["v2"] = DeltaTable.forName(spark, "rl_v2").path
    spark.sql(f"CREATE TABLE delta.`{made['ctas']}` USING delta CLUSTER BY (id) AS SELECT id FROM range(3)")
    spark.sql(f"CREATE TABLE delta.`{made['replace']}` (id BIGINT) USING delta")
    spark.sql(f"CREATE OR REPLACE TABLE delta.`{made['replace']}` (id BIGINT) USING delta CLUSTER BY (id)")
    for name in ("sql", "builder", "writer", "v2", "ctas", "replace"):
        assert _dv_on(made[name]), name
    # Not clustered: no default. Set explicitly (in the table or the session's defaults): kept.
    spark.sql(f"CREATE TABLE delta.`{made['plain']}` (id BIGINT) USING delta")
    spark.sql(f"CREATE TABLE delta.`{made['off']}` (id BIGINT) USING delta CLUSTER BY (id) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")  # fmt: skip
    setting = "spark.databricks.delta.properties.defaults.enableDeletionVectors"
    spark.conf.set(setting, "false")
    try:
        spark.sql(f"CREATE TABLE delta.`{made['session_off']}` (id BIGINT) USING delta CLUSTER BY (id)")
    finally:
        spark.conf.unset(setting)
    for name in ("plain", "off", "session_off"):
        snap = DeltaLog.for_table(made[name]).update()
        assert snap.metadata.configuration.get("delta.enableDeletionVectors") in (None, "false"), name
        assert "deletionVectors" not in features.writer_features(snap.protocol), name
    # ALTER TABLE ... CLUSTER BY of an existing table changes no property.
    spark.sql(f"ALTER TABLE delta.`{made['plain']}` CLUSTER BY (id)")
    assert "delta.enableDeletionVectors" not in DeltaLog.for_table(made["plain"]).update().metadata.configuration


# -- pairs on one file --------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_deletes_of_different_rows_of_one_file_both_commit(
    spark: SparkSession, tmp_table: str, layout: str, level: str, order: str
) -> None:
    _make(spark, tmp_table, layout, level)
    v = DeltaLog.for_table(tmp_table).update().version
    _pair(spark, tmp_table, _delete("id = 5"), _delete("id = 9"), order)
    assert DeltaLog.for_table(tmp_table).update().version == v + 2
    assert _shared_file_vector(tmp_table) == [5, 9]
    _check(spark, tmp_table, _expected({5, 9}))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_delete_and_update_of_different_rows_of_one_file_both_commit(
    spark: SparkSession, tmp_table: str, layout: str, level: str, order: str
) -> None:
    _make(spark, tmp_table, layout, level)
    v = DeltaLog.for_table(tmp_table).update().version
    _pair(spark, tmp_table, _delete("id = 5"), _update("id = 9", "u"), order)
    assert DeltaLog.for_table(tmp_table).update().version == v + 2
    assert _shared_file_vector(tmp_table) == [5, 9]  # the UPDATE moved row 9 to a new file
    _check(spark, tmp_table, _expected({5}, {9: "u"}))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_same_row_still_conflicts(spark: SparkSession, tmp_table: str, layout: str, level: str, order: str) -> None:
    """The later one fails (matrix R2): the UPDATE second marked the row the DELETE marked; the DELETE
    second finds the row it would delete rewritten by the UPDATE (a new row matching its condition)."""
    _make(spark, tmp_table, layout, level)
    v = DeltaLog.for_table(tmp_table).update().version
    expected: tuple[type[Exception], str] = (
        (ConcurrentDeleteDeleteException, "same row") if order == "a_first" else (ConcurrentAppendException, "UPDATE")
    )
    with pytest.raises(expected[0], match=expected[1]):
        _pair(spark, tmp_table, _delete("id = 5"), _update("id = 5", "u"), order)
    assert DeltaLog.for_table(tmp_table).update().version == v + 1
    _check(spark, tmp_table, _expected({5}) if order == "a_first" else _expected(updated={5: "u"}))


# -- the off switch -----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_row_level_off_switch_restores_file_level_outcomes(spark: SparkSession, tmp_table: str, layout: str) -> None:
    props = {"delta.enableRowLevelConcurrency": "false"}
    if layout == "clustered":
        props["delta.enableDeletionVectors"] = "true"
    _make(spark, tmp_table, layout, "WriteSerializable", props)
    v = DeltaLog.for_table(tmp_table).update().version
    with pytest.raises((ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException)):
        _pair(spark, tmp_table, _delete("id = 5"), _delete("id = 9"), "a_first")
    assert DeltaLog.for_table(tmp_table).update().version == v + 1
    _check(spark, tmp_table, _expected({5}))


def test_clustered_table_without_deletion_vectors_keeps_file_level_rules(spark: SparkSession, tmp_table: str) -> None:
    """``delta.enableDeletionVectors = false`` set explicitly: copy-on-write, so the file conflicts."""
    _make(spark, tmp_table, "clustered", "WriteSerializable", {"delta.enableDeletionVectors": "false"})
    with pytest.raises(ConcurrentAppendException):
        _pair(spark, tmp_table, _delete("id = 5"), _delete("id = 9"), "a_first")
    _check(spark, tmp_table, _expected({5}))


# -- OPTIMIZE of a clustered table against a DELETE --------------------------------------------------


@pytest.mark.parametrize("order", ["optimize_first", "delete_first"])
@pytest.mark.parametrize("level", LEVELS)
def test_clustering_optimize_and_delete_of_one_row(spark: SparkSession, tmp_table: str, level: str, order: str) -> None:
    """Clustering OPTIMIZE reorders rows (z-order of the clustering columns), so its outputs carry no
    in-order row mapping (``serialake.compactedFrom``); the DELETE's row is found in them by its values
    (``core.txn.row_matching``) and both commit, in either order (matrix R5: may conflict). The row is
    deleted exactly once, every other row stays once, and OPTIMIZE's files stay clustered."""
    _make(spark, tmp_table, "clustered", level)
    v = DeltaLog.for_table(tmp_table).update().version
    delete = _delete("id = 7")

    def optimize(spark: SparkSession, path: str, hook: Any) -> Any:
        return dml.optimize(spark, path).run_compaction(before_commit=hook)

    first, second = (optimize, delete) if order == "optimize_first" else (delete, optimize)
    result = second(spark, tmp_table, lambda: first(spark, tmp_table, None))
    assert result.version == v + 2
    _check(spark, tmp_table, _expected({7}))
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.all_files and all(f.clustering_provider == clustering.PROVIDER for f in snap.all_files)
    marked = [f for f in snap.all_files if f.deletion_vector is not None]
    assert [f.deletion_vector.cardinality for f in marked if f.deletion_vector] == [1]  # one row, one file
