"""OPTIMIZE (compaction with its row mapping, Z-order) and RESTORE, checked against references and delta-rs."""

from __future__ import annotations

import json
import os
import time

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import read_deletion_vector
from serialake.core.model.actions import AddFile, RemoveFile
from serialake.core.txn.row_level import COMPACTED_FROM_TAG
from serialake.exceptions import DeltaAnalysisException
from serialake.spark import dml, read, write
from serialake.spark.dml import COMPACTION_MAX_BYTES_CONF
from tests.spark.test_dml import (
    COLUMNS,
    SCHEMA,
    _base_rows,
    _check,
    _commit,
    _commit_info,
    _delta_rs_rows,
    _live_paths,
    _make_table,
    _rows,
)

pytestmark = pytest.mark.spark

DV = {"delta.enableDeletionVectors": "true"}


@pytest.fixture(params=["driver", "spark"])
def engine(request: pytest.FixtureRequest, spark: SparkSession) -> object:
    """Compaction of small bins on the driver (pyarrow), or forced onto Spark."""
    spark.conf.set(COMPACTION_MAX_BYTES_CONF, "64m" if request.param == "driver" else "0")
    yield request.param
    spark.conf.unset(COMPACTION_MAX_BYTES_CONF)


def _assert_engine(path: str, adds: list[AddFile], engine: str) -> None:
    """The compacted files were written by the engine under test (the Parquet writer says which)."""
    for a in adds:
        writer = pq.read_metadata(os.path.join(path, a.path)).created_by
        assert ("parquet-cpp" in writer) == (engine == "driver"), (engine, writer)


def _append_batches(
    spark: SparkSession,
    path: str,
    batches: int,
    partition_by: tuple[str, ...] = (),
    properties: dict[str, str] | None = None,
) -> DataFrame:
    """``batches`` appends of 6 rows each (one file per partition per append); the union of the rows."""
    rows = _base_rows(6 * batches)
    for b in range(batches):
        df = spark.createDataFrame(rows[6 * b : 6 * (b + 1)], SCHEMA).coalesce(1)
        write(df, path, partitionBy=list(partition_by) or None, properties=properties)
    return spark.createDataFrame(rows, SCHEMA)


def _file_ids(path: str, add: AddFile) -> list[int]:
    """Ids of a data file in physical order, without rows its deletion vector deletes."""
    ids = pq.read_table(os.path.join(path, add.path), columns=["id"]).column("id").to_pylist()
    gone = set(read_deletion_vector(path, add.deletion_vector)) if add.deletion_vector else set()
    return [v for i, v in enumerate(ids) if i not in gone]


def _assert_mapping(path: str, inputs: dict[str, AddFile], outputs: list[AddFile]) -> None:
    """Each output holds its inputs' live rows in the recorded order, with the recorded counts."""
    for out in outputs:
        sources = json.loads((out.tags or {})[COMPACTED_FROM_TAG])
        expected: list[int] = []
        for src_path, dv_id, live in sources:
            src = inputs[src_path]
            assert dv_id == (src.deletion_vector.unique_id if src.deletion_vector else None)
            ids = _file_ids(path, src)
            assert len(ids) == live
            expected += ids
        assert _file_ids(path, out) == expected
        assert out.num_records == len(expected) and out.deletion_vector is None


@pytest.mark.parametrize("partition_by", [(), ("date",)], ids=["unpartitioned", "partitioned"])
def test_compaction_bin_packs_with_row_mapping(
    spark: SparkSession, tmp_table: str, partition_by: tuple, engine: str
) -> None:
    ref = _append_batches(spark, tmp_table, 3, partition_by)
    snap = DeltaLog.for_table(tmp_table).update()
    inputs = {f.path: f for f in snap.all_files}
    n_parts = len({tuple((f.partition_values or {}).items()) for f in inputs.values()})
    out = dml.optimize(spark, tmp_table).executeCompaction()
    (row,) = out.collect()
    assert out.columns == ["path", "metrics"] and row.path == snap.table_path
    assert (row.metrics.numFilesRemoved, row.metrics.numFilesAdded) == (len(inputs), n_parts)
    assert row.metrics.partitionsOptimized == n_parts
    m = row.metrics.asDict()
    assert m["zOrderStats"] is None and m["clusteringStats"] is None
    assert (m["numBins"], m["numBatches"], m["totalConsideredFiles"]) == (n_parts, 1, len(inputs))
    assert m["filesRemoved"]["totalFiles"] == len(inputs)
    assert m["filesRemoved"]["totalSize"] == sum(f.size for f in inputs.values())
    assert m["startTimeMs"] <= m["endTimeMs"] and m["numTableColumns"] == len(snap.schema.fields)
    version = DeltaLog.for_table(tmp_table).update().version
    actions = _commit(tmp_table, version)
    adds = [a for a in actions if isinstance(a, AddFile)]
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    assert {r.path for r in removes} == set(inputs) and not any(a.data_change for a in adds + removes)
    info = _commit_info(tmp_table, version)
    assert info["operation"] == "OPTIMIZE" and info["isolationLevel"] == "SnapshotIsolation"
    assert info["operationMetrics"]["numRemovedFiles"] == str(len(inputs))
    _assert_mapping(tmp_table, inputs, adds)
    _assert_engine(tmp_table, adds, engine)
    _check(spark, tmp_table, ref)
    # Nothing left to compact: no commit.
    assert dml.optimize(spark, tmp_table).run_compaction().version is None


def test_compaction_where_and_target_size(spark: SparkSession, tmp_table: str) -> None:
    ref = _append_batches(spark, tmp_table, 4, ("date",))
    before = DeltaLog.for_table(tmp_table).update().all_files
    r = dml.optimize(spark, tmp_table).where("date = '2009-12-31'").run_compaction()
    untouched = {f.path for f in before if f.partition_values["date"] != "2009-12-31"}
    assert untouched < _live_paths(tmp_table) and r.metrics["numRemovedFiles"] == 4
    params = _commit_info(tmp_table, r.version)["operationParameters"]
    assert json.loads(params["predicate"]) == ["('date = 2009-12-31)"]  # Catalyst's form, as delta-spark writes it
    # A target of about two files (sizes are within 1.5x of each other): two bins of two.
    other = [f for f in before if f.partition_values["date"] == "2010-01-02"]
    target = 2 * max(f.size for f in other) + 1
    r = dml.optimize(spark, tmp_table, target_file_size=target).where("date = '2010-01-02'").run_compaction()
    assert r.metrics["numRemovedFiles"] == 4 and r.metrics["numAddedFiles"] == 2
    # Files at or above the target are left alone.
    smallest = min(f.size for f in DeltaLog.for_table(tmp_table).update().all_files)
    assert dml.optimize(spark, tmp_table, target_file_size=smallest).run_compaction().version is None
    _check(spark, tmp_table, ref)
    with pytest.raises(DeltaAnalysisException, match="non-partition column"):
        dml.optimize(spark, tmp_table).where("id > 3").executeCompaction()


def test_compaction_of_files_with_deletion_vectors(spark: SparkSession, tmp_table: str, engine: str) -> None:
    ref = _append_batches(spark, tmp_table, 3, properties=DV)
    dml.run_delete(spark, tmp_table, "id IN (1, 8, 9, 17)")
    inputs = {f.path: f for f in DeltaLog.for_table(tmp_table).update().all_files}
    assert sum(1 for f in inputs.values() if f.deletion_vector) == 3
    r = dml.optimize(spark, tmp_table).run_compaction()
    adds = [a for a in _commit(tmp_table, r.version) if isinstance(a, AddFile)]
    assert len(adds) == 1 and r.metrics["numDeletionVectorsRemoved"] == 3
    _assert_mapping(tmp_table, inputs, adds)
    _assert_engine(tmp_table, adds, engine)
    _check(spark, tmp_table, ref.where("id NOT IN (1, 8, 9, 17)"), dvs=True)
    # A lone file with deleted rows is rewritten to drop them.
    dml.run_delete(spark, tmp_table, "id = 2")
    (single,) = DeltaLog.for_table(tmp_table).update().all_files
    assert single.deletion_vector is not None
    r = dml.optimize(spark, tmp_table).run_compaction()
    (out,) = DeltaLog.for_table(tmp_table).update().all_files
    assert out.deletion_vector is None and out.num_records == 13
    _assert_mapping(tmp_table, {single.path: single}, [out])


def test_zorder(spark: SparkSession, tmp_table: str) -> None:
    ref = _append_batches(spark, tmp_table, 2, ("date",))
    # Z-order by one column sorts each partition's rows by it; the rows are unchanged.
    dml.run_update(spark, tmp_table, "id < 4", {"x": "100 - id"})
    ref = ref.withColumn("x", F.when(F.col("id") < 4, 100 - F.col("id")).otherwise(F.col("x")).cast("int"))
    before = _live_paths(tmp_table)
    out = dml.optimize(spark, tmp_table).executeZOrderBy("x")
    metrics = out.collect()[0].metrics
    assert metrics.numFilesRemoved == len(before)
    # delta-spark's zOrderStats: every partition rewritten whole into one cube.
    z = metrics.zOrderStats
    assert (z.strategyName, z.numOutputCubes, z.inputNumCubes) == ("all", 4, 0)
    assert z.mergedFiles.num == len(before) and z.inputOtherFiles.num == len(before) and z.inputCubeFiles.num == 0
    files = DeltaLog.for_table(tmp_table).update().all_files
    assert not before & {f.path for f in files} and len(files) == 4
    for f in files:
        assert not (f.tags or {}).get(COMPACTED_FROM_TAG)
        xs = pq.read_table(os.path.join(tmp_table, f.path), columns=["x"]).column("x").to_pylist()
        assert xs == sorted(xs, key=lambda v: (v is not None, v))  # NULLs first, then ascending
    info = _commit_info(tmp_table, DeltaLog.for_table(tmp_table).update().version)
    assert info["operationParameters"]["zOrderBy"] == '["x"]'
    _check(spark, tmp_table, ref.select(*COLUMNS))
    # Two columns interleave; still the same rows.
    dml.optimize(spark, tmp_table).executeZOrderBy(["x", "id"])
    _check(spark, tmp_table, ref.select(*COLUMNS))
    with pytest.raises(DeltaAnalysisException, match="partition column"):
        dml.optimize(spark, tmp_table).executeZOrderBy("date")
    with pytest.raises(DeltaAnalysisException, match="column 'nope' does not exist"):
        dml.optimize(spark, tmp_table).executeZOrderBy("nope")


@pytest.mark.parametrize("properties", [{}, DV], ids=["copy-on-write", "deletion-vectors"])
def test_restore(spark: SparkSession, tmp_table: str, properties: dict[str, str]) -> None:
    ref = _make_table(spark, tmp_table, _base_rows(12), partition_by=("date",), properties=properties)  # v0
    dml.run_delete(spark, tmp_table, "id IN (1, 2)")  # v1
    time.sleep(0.05)
    stamp = DeltaLog.for_table(tmp_table).update().timestamp
    time.sleep(0.05)
    dml.run_update(spark, tmp_table, "id > 8", {"s": "'late'"})  # v2
    dml.add_columns(spark, tmp_table, "extra INT")  # v3
    v1_rows = _rows(read(spark, tmp_table, version=1))
    out = dml.restoreToVersion(spark, tmp_table, 1)  # v4
    (m,) = out.collect()
    assert out.columns == [
        "table_size_after_restore", "num_of_files_after_restore", "num_removed_files", "num_restored_files",
        "removed_files_size", "restored_files_size",
    ]  # fmt: skip
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.version == 4 and [f.name for f in snap.schema.fields] == COLUMNS  # metadata restored too
    assert m.num_of_files_after_restore == snap.num_files and m.table_size_after_restore == snap.size_in_bytes()
    assert m.num_removed_files > 0 and m.num_restored_files > 0
    assert _rows(read(spark, tmp_table)) == v1_rows == _rows(ref.where("id NOT IN (1, 2)"))
    assert _delta_rs_rows(tmp_table) == v1_rows
    info = _commit_info(tmp_table, 4)
    assert info["operation"] == "RESTORE" and info["operationParameters"]["version"] == "1"
    assert all(a.data_change for a in _commit(tmp_table, 4) if isinstance(a, (AddFile, RemoveFile)))
    # By timestamp: the state just after v1 again (an empty restore still commits, as Delta does).
    r = dml.run_restore(tmp_table, timestamp=stamp)
    assert r.metrics["numRestoredFiles"] == 0 and r.metrics["numRemovedFiles"] == 0
    dml.restoreToVersion(spark, tmp_table, 0)
    _check(spark, tmp_table, ref, dvs=bool(properties))


def test_restore_errors(spark: SparkSession, tmp_table: str) -> None:
    _make_table(spark, tmp_table, _base_rows(6), files=1)
    (first,) = DeltaLog.for_table(tmp_table).update().all_files
    dml.run_delete(spark, tmp_table, "id = 1")
    with pytest.raises(DeltaAnalysisException, match="available versions are 0 to 1"):
        dml.restoreToVersion(spark, tmp_table, 5)
    os.remove(os.path.join(tmp_table, first.path))  # as VACUUM would
    with pytest.raises(DeltaAnalysisException, match=f"were deleted .*{first.path}"):
        dml.restoreToVersion(spark, tmp_table, 0)
    assert DeltaLog.for_table(tmp_table).update().version == 1
