"""DELETE, UPDATE and ADD COLUMNS (copy-on-write) against plain-Spark reference results and delta-rs.

Every step is checked three ways: the table read by serialake, the same computation done
with ordinary DataFrame operations on the original rows, and the table read by delta-rs.
Helpers prefixed ``_`` are shared with the other DML test modules.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata, RemoveFile
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import dml, read, write
from serialake.spark.dml.engines import spark as spark_engine

pytestmark = pytest.mark.spark

SCHEMA = "id long, date string, country string, x int, s string"
COLUMNS = ["id", "date", "country", "x", "s"]
DATES = ["2009-12-30", "2009-12-31", "2010-01-02", "2010-01-03"]


def _base_rows(n: int = 24) -> list[tuple[Any, ...]]:
    """Rows spread over four dates and two countries; some NULL x values."""
    return [
        (i, DATES[i % 4], "fr" if i % 3 else "de", None if i % 7 == 0 else i * 10, f"s{i}")
        for i in range(n)
    ]


def _make_table(
    spark: SparkSession,
    path: str,
    rows: Sequence[tuple[Any, ...]],
    *,
    partition_by: Sequence[str] = (),
    files: int = 2,
    properties: dict[str, str] | None = None,
) -> DataFrame:
    """Write ``rows`` in about ``files`` files per partition; returns the rows as a plain DataFrame."""
    df = spark.createDataFrame(list(rows), SCHEMA)
    ordered = df.repartitionByRange(files, "id") if files > 1 else df.coalesce(1)
    write(ordered, path, partitionBy=list(partition_by) or None, properties=properties)
    return df


def _rows(df: DataFrame, columns: Sequence[str] = COLUMNS) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.select(*columns).collect()), key=repr)


def _table_rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    return _rows(read(spark, path))


def _delta_rs_rows(path: str, columns: Sequence[str] = COLUMNS) -> list[tuple[Any, ...]]:
    """The table as delta-rs reads it (its DataFusion scan, which applies deletion vectors)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = pa.RecordBatchReader.from_stream(DeltaTable(path).scan()).read_all().select(list(columns))
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def _delta_rs_arrow_rows(path: str, columns: Sequence[str] = COLUMNS) -> list[tuple[Any, ...]]:
    """The table via delta-rs's pyarrow path (tables without deletion vectors)."""
    from deltalake import DeltaTable

    table = DeltaTable(path).to_pyarrow_table().select(list(columns))
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def _check(spark: SparkSession, path: str, expected: DataFrame, *, dvs: bool = False) -> None:
    """serialake and delta-rs both read exactly the reference rows."""
    want = _rows(expected)
    assert _table_rows(spark, path) == want
    assert _delta_rs_rows(path) == want
    if not dvs:
        assert _delta_rs_arrow_rows(path) == want


def _commit(path: str, version: int | None) -> list[Any]:
    """The actions of commit ``version`` (which must exist)."""
    assert version is not None
    return list(DeltaLog.for_table(path).read_commit(version).actions)


def _commit_info(path: str, version: int | None) -> dict[str, Any]:
    assert version is not None
    entry = DeltaLog.for_table(path).read_commit(version)
    assert entry.commit_info is not None
    return dict(entry.commit_info.values)


def _writers(path: str, version: int | None) -> list[str]:
    """The Parquet writer (created_by) of each data file commit ``version`` wrote."""
    actions = _commit(path, version)
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    return [pq.read_metadata(os.path.join(path, a.path)).created_by
            for a in actions if isinstance(a, AddFile) and a.path not in removed]


def _live_paths(path: str) -> set[str]:
    return {f.path for f in DeltaLog.for_table(path).update().all_files}


def _not(cond: str) -> Column:
    """Rows a DELETE keeps: the condition is not TRUE (NULL keeps the row)."""
    return ~F.coalesce(F.expr(cond), F.lit(False))


LAYOUTS = {"unpartitioned": (), "partitioned": ("date",)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_delete_matches_reference(spark: SparkSession, tmp_table: str, layout: str) -> None:
    ref = _make_table(spark, tmp_table, _base_rows(), partition_by=LAYOUTS[layout])
    # A data condition (SQL string): NULL x rows are kept, as in SQL.
    r = dml.run_delete(spark, tmp_table, "x > 150 AND country = 'fr'")
    n = ref.filter("x > 150 AND country = 'fr'").count()
    ref = ref.filter(_not("x > 150 AND country = 'fr'"))
    _check(spark, tmp_table, ref)
    assert r.num_affected_rows == n == r.metrics["numDeletedRows"] == 6
    info = _commit_info(tmp_table, r.version)
    assert info["operation"] == "DELETE" and info["isBlindAppend"] is False
    assert json.loads(info["operationParameters"]["predicate"]) == ["x > 150 AND country = 'fr'"]
    assert info["operationMetrics"]["numDeletedRows"] == "6"
    assert int(info["operationMetrics"]["numCopiedRows"]) == r.metrics["numCopiedRows"] > 0

    # A Column condition on the partition column: whole files go, nothing is rewritten.
    before = _live_paths(tmp_table)
    r = dml.run_delete(spark, tmp_table, F.col("date") == "2009-12-30")
    n = ref.filter("date = '2009-12-30'").count()
    ref = ref.filter(_not("date = '2009-12-30'"))
    _check(spark, tmp_table, ref)
    assert r.num_affected_rows == n == 4
    if layout == "partitioned":
        assert r.metrics["numAddedFiles"] == 0 and r.metrics["numCopiedRows"] == 0
        assert _live_paths(tmp_table) < before
        params = _commit_info(tmp_table, r.version)["operationParameters"]
        assert json.loads(params["predicate"]) == ["(date = '2009-12-30')"]

    # No matching row: nothing is committed.
    version = DeltaLog.for_table(tmp_table).update().version
    r = dml.run_delete(spark, tmp_table, "id = 999")
    assert r.version is None and r.num_affected_rows == 0
    assert DeltaLog.for_table(tmp_table).update().version == version

    # The DataFrame API of delta-spark's SQL: one row with num_affected_rows; no condition deletes all.
    out = dml.delete(spark, tmp_table)
    assert out.columns == ["num_affected_rows"] and out.collect()[0][0] == ref.count()
    _check(spark, tmp_table, ref.limit(0))


def test_delete_rewrites_only_files_with_matching_rows(spark: SparkSession, tmp_table: str) -> None:
    _make_table(spark, tmp_table, _base_rows(), files=3)  # ids 0-7, 8-15, 16-23 in three files
    before = DeltaLog.for_table(tmp_table).update().all_files
    assert len(before) == 3
    r = dml.run_delete(spark, tmp_table, "id = 9 OR s = 's10'")
    actions = _commit(tmp_table, r.version)
    removed = [a for a in actions if isinstance(a, RemoveFile)]
    added = [a for a in actions if isinstance(a, AddFile)]
    assert len(removed) == 1 and len(added) == 1 and removed[0].data_change and added[0].data_change
    assert added[0].num_records == 6
    assert _live_paths(tmp_table) == ({f.path for f in before} - {removed[0].path}) | {added[0].path}
    # A file losing all its rows is removed without writing an empty one.
    r = dml.run_delete(spark, tmp_table, "id >= 16")
    assert r.metrics["numRemovedFiles"] == 1 and r.metrics["numAddedFiles"] == 0
    assert sorted(row.id for row in read(spark, tmp_table).collect()) == [i for i in range(16) if i not in (9, 10)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_update_matches_reference(spark: SparkSession, tmp_table: str, layout: str) -> None:
    ref = _make_table(spark, tmp_table, _base_rows(), partition_by=LAYOUTS[layout])
    # SQL strings: expressions over the row's own columns; NULL condition rows untouched.
    cond = "x >= 100 AND date > '2010-01-01'"
    r = dml.run_update(spark, tmp_table, cond, {"s": "concat(s, '!')", "x": "x + 1"})
    hit = F.coalesce(F.expr(cond), F.lit(False))
    ref = ref.select(
        "id", "date", "country",
        F.when(hit, F.col("x") + 1).otherwise(F.col("x")).alias("x"),
        F.when(hit, F.concat("s", F.lit("!"))).otherwise(F.col("s")).alias("s"),
    )  # fmt: skip
    _check(spark, tmp_table, ref)
    assert r.num_affected_rows == 7 and r.metrics["numUpdatedRows"] == 7
    info = _commit_info(tmp_table, r.version)
    assert info["operation"] == "UPDATE" and info["operationMetrics"]["numUpdatedRows"] == "7"

    # Columns, and an update of the partition column itself (rows move partitions).
    r = dml.run_update(spark, tmp_table, F.col("id") < 3, {"date": F.lit("2011-01-01"), "x": F.col("id") * -1})
    hit = F.col("id") < 3
    ref = ref.select(
        "id",
        F.when(hit, F.lit("2011-01-01")).otherwise(F.col("date")).alias("date"),
        "country",
        F.when(hit, (F.col("id") * -1).cast("int")).otherwise(F.col("x")).alias("x"),
        "s",
    )
    _check(spark, tmp_table, ref)
    assert r.num_affected_rows == 3
    if layout == "partitioned":
        parts = {(f.partition_values or {}).get("date") for f in DeltaLog.for_table(tmp_table).update().all_files}
        assert "2011-01-01" in parts

    # delta-spark's update() returns num_affected_rows; no condition updates every row.
    out = dml.update(spark, tmp_table, set={"country": "upper(country)"})
    assert out.collect()[0].num_affected_rows == 24
    _check(spark, tmp_table, ref.withColumn("country", F.upper("country")).select(*COLUMNS))


def test_dml_errors_name_table_and_column(spark: SparkSession, tmp_table: str) -> None:
    _make_table(spark, tmp_table, _base_rows(8), files=1)
    with pytest.raises(DeltaAnalysisException, match=r"DELETE condition on table .*table"):
        dml.run_delete(spark, tmp_table, "nope = 1")
    with pytest.raises(DeltaAnalysisException, match="column 'nope' does not exist"):
        dml.run_update(spark, tmp_table, "id = 1", {"nope": "1"})
    with pytest.raises(DeltaIllegalArgumentException, match="non-empty 'set'"):
        dml.run_update(spark, tmp_table, "id = 1", {})
    with pytest.raises(DeltaAnalysisException, match="UPDATE SET expressions"):
        dml.run_update(spark, tmp_table, "id = 1", {"x": "missing + 1"})
    assert DeltaLog.for_table(tmp_table).update().version == 0


def test_alias_in_conditions(spark: SparkSession, tmp_table: str) -> None:
    ref = _make_table(spark, tmp_table, _base_rows(8), files=1)
    dml.run_update(spark, tmp_table, "t.id = 2", {"t.s": "upper(t.s)"}, alias="t")
    dml.run_delete(spark, tmp_table, F.col("t.id") == 3, alias="t")
    ref = ref.filter("id != 3").withColumn("s", F.when(F.col("id") == 2, F.upper("s")).otherwise(F.col("s")))
    _check(spark, tmp_table, ref.select(*COLUMNS))


def test_add_columns_commits_only_metadata(spark: SparkSession, tmp_table: str) -> None:
    ref = _make_table(spark, tmp_table, _base_rows(6), files=1)
    version = dml.add_columns(spark, tmp_table, "score DOUBLE COMMENT 'new', tag STRING")
    actions = _commit(tmp_table, version)
    kinds = sorted(type(a).__name__ for a in actions)
    assert kinds == ["CommitInfo", "Metadata"]
    meta = next(a for a in actions if isinstance(a, Metadata))
    assert [f.name for f in meta.schema.fields] == [*COLUMNS, "score", "tag"]
    assert meta.schema.field("score").metadata == {"comment": "new"}
    assert _commit_info(tmp_table, version)["operation"] == "ADD COLUMNS"
    cols = [*COLUMNS, "score", "tag"]
    expected = ref.withColumn("score", F.lit(None).cast("double")).withColumn("tag", F.lit(None).cast("string"))
    assert _rows(read(spark, tmp_table), cols) == _rows(expected, cols)
    assert _delta_rs_arrow_rows(tmp_table, cols) == _rows(expected, cols)
    # The new column is writable by DML.
    dml.run_update(spark, tmp_table, "id = 1", {"tag": "'one'"})
    assert read(spark, tmp_table).filter("tag = 'one'").count() == 1
    with pytest.raises(DeltaAnalysisException, match="already exists"):
        dml.add_columns(spark, tmp_table, "TAG int")
    with pytest.raises(DeltaAnalysisException, match="NOT NULL"):
        dml.add_columns(spark, tmp_table, "z int NOT NULL")


def test_update_values_outside_the_driver_subset_run_on_spark(spark: SparkSession, tmp_path: Any) -> None:
    """An integral overflow found on the driver hands the UPDATE to Spark, which raises its ANSI
    error (nothing committed, no file left behind); Column values and casts run on Spark."""
    path = str(tmp_path / "t")
    write(spark.createDataFrame([(1, 2**31 - 1, "a"), (2, 5, "b")], "id long, x int, s string"), path)
    version = DeltaLog.for_table(path).update().version
    with pytest.raises(Exception, match="(?i)overflow"):
        dml.run_update(spark, path, "id = 1", {"x": "x + 1"})
    assert DeltaLog.for_table(path).update().version == version
    assert not [n for n in os.listdir(path) if n.startswith("_staging")]
    parquet_files = [n for n in os.listdir(path) if n.endswith(".parquet")]
    assert len(parquet_files) == len(DeltaLog.for_table(path).update().all_files)
    done = dml.run_update(spark, path, "id = 2", {"x": F.col("x") * 2, "s": "cast(x AS string)"})
    assert _writers(path, done.version) and all("parquet-mr" in w for w in _writers(path, done.version))
    exact = dml.run_update(spark, path, "id = 1", {"x": "x - 1", "s": "'z'"})
    assert all("parquet-cpp" in w for w in _writers(path, exact.version))
    assert sorted(tuple(r) for r in read(spark, path).collect()) == [(1, 2**31 - 2, "z"), (2, 10, "5")]


def test_not_null_columns_are_enforced(spark: SparkSession, tmp_table: str) -> None:
    from serialake.spark import DeltaTable

    (
        DeltaTable.create(spark).location(tmp_table)
        .addColumn("id", "BIGINT", nullable=False).addColumn("s", "STRING").execute()
    )  # fmt: skip
    write(spark.createDataFrame([(1, "a"), (2, "b")], "id long, s string"), tmp_table)
    with pytest.raises(DeltaAnalysisException, match="NOT NULL constraint violated for column 'id'"):
        dml.run_update(spark, tmp_table, "id = 1", {"id": "NULL"})
    assert sorted(r.id for r in read(spark, tmp_table).collect()) == [1, 2]
    assert not [n for n in os.listdir(tmp_table) if n.startswith("_staging")]


@pytest.mark.parametrize("properties", [None, {"delta.enableDeletionVectors": "true"}], ids=["cow", "dv"])
@pytest.mark.parametrize("engine", ["driver", "spark"])
@pytest.mark.parametrize(
    "condition",
    ["x > 100 AND country = 'fr'", "x IS NULL OR id IN (3, 5, NULL) OR NOT (date <=> '2009-12-31') AND id < 3",
     "upper(s) = 'S4' OR x >= 200.5"],
)
def test_rows_found_on_driver_or_by_spark_agree(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, properties: Any, engine: str, condition: str
) -> None:
    """DELETE / UPDATE find the same rows whether the driver evaluates the condition (exact
    subset, small files) or a Spark job does; conditions outside the subset always use Spark."""
    exact = "upper" not in condition
    spark_jobs: list[int] = []
    real = spark_engine.touched_files
    monkeypatch.setattr(spark_engine, "touched_files", lambda *a, **k: spark_jobs.append(1) or real(*a, **k))
    spark.conf.set(dml.DML_MAX_BYTES_CONF, str(1 << 30) if engine == "driver" else "0")
    try:
        ref = _make_table(spark, str(tmp_path / "d"), _base_rows(), properties=properties)
        _make_table(spark, str(tmp_path / "u"), _base_rows(), properties=properties)
        deleted = dml.run_delete(spark, str(tmp_path / "d"), condition)
        updated = dml.run_update(spark, str(tmp_path / "u"), condition, {"s": "'changed'"})
    finally:
        spark.conf.unset(dml.DML_MAX_BYTES_CONF)
    assert bool(spark_jobs) == (engine == "spark" or not exact)
    # The files written: by pyarrow on the driver when everything is exact, else by Spark.
    for table, result in (("d", deleted), ("u", updated)):
        for writer in _writers(str(tmp_path / table), result.version):
            assert ("parquet-cpp" in writer) == (engine == "driver" and exact), (table, writer)
    assert deleted.num_affected_rows == ref.where(condition).count() == updated.num_affected_rows > 0
    _check(spark, str(tmp_path / "d"), ref.where(f"NOT coalesce(({condition}), false)"), dvs=properties is not None)
    _check(spark, str(tmp_path / "u"), ref.withColumn("s", F.when(F.expr(f"coalesce(({condition}), false)"),
                                                                 F.lit("changed")).otherwise(F.col("s"))),
           dvs=properties is not None)
