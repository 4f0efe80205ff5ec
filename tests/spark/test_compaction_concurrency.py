"""Compactions (OPTIMIZE, REORG ... APPLY (PURGE)) concurrent with each other and with DML.

Real Spark jobs: the loser plans from one version and its ``before_commit`` hook runs the
winner to completion, then the loser commits. On tables with deletion vectors bin-packing
compactions do not conflict with each other, REORG has OPTIMIZE's isolation, and a DML
that empties a file meets a compaction of it without conflict, in either order. Each test
checks the final rows exactly with serialake and with delta-rs, and that no data file a
dropped output wrote is left behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, RemoveFile
from serialake.exceptions import ConcurrentDeleteDeleteException
from serialake.spark import dml, read, write
from serialake.spark.dml import DmlResult, purge_deletion_vectors
from tests.helpers import unreferenced_files

pytestmark = pytest.mark.spark

SCHEMA = "id long, p int, s string"
GROUPS = [range(0, 6), range(6, 12), range(12, 18), range(18, 24)]  # one file each; p = id // 12
LAYOUTS = ["unpartitioned", "partitioned"]
LEVELS = ["WriteSerializable", "Serializable"]
Row = tuple[int, int, str]


def _row(i: int) -> Row:
    return (i, i // 12, f"s{i}")


def _make(spark: SparkSession, path: str, layout: str, *, dvs: bool = True, level: str = "WriteSerializable") -> None:
    """Four files of six rows (two per partition when partitioned); with vectors, id 1 is deleted."""
    props = {"delta.isolationLevel": level, **({"delta.enableDeletionVectors": "true"} if dvs else {})}
    for g in GROUPS:
        df = spark.createDataFrame([_row(i) for i in g], SCHEMA).coalesce(1)
        write(df, path, partitionBy=["p"] if layout == "partitioned" else None, properties=props)
    if dvs:
        dml.run_delete(spark, path, "id = 1")  # the first file gets a deletion vector


def _expected(*deleted: int) -> list[Row]:
    gone = {1, *deleted}
    return [_row(i) for g in GROUPS for i in g if i not in gone]


def _check(spark: SparkSession, path: str, want: list[Row]) -> None:
    """serialake and delta-rs read exactly ``want``; no data or vector file is unreferenced."""
    from deltalake import DeltaTable

    got = sorted(tuple(r) for r in read(spark, path).select("id", "p", "s").collect())
    assert got == want
    table = DeltaTable(path)
    if "deletionVectors" in (table.protocol().reader_features or []):
        # delta-rs's pyarrow path refuses the deletionVectors reader feature; its DataFusion scan applies them.
        arrow = pa.RecordBatchReader.from_stream(table.scan()).read_all()
    else:
        arrow = table.to_pyarrow_table()
    theirs = sorted((r["id"], int(r["p"]), r["s"]) for r in arrow.select(["id", "p", "s"]).to_pylist())
    assert theirs == want
    assert unreferenced_files(path) == set()


def _version(path: str) -> int:
    return DeltaLog.for_table(path).update().version


def _actions(path: str, version: int | None) -> tuple[list[RemoveFile], list[AddFile]]:
    assert version is not None
    actions = DeltaLog.for_table(path).read_commit(version).actions
    return [a for a in actions if isinstance(a, RemoveFile)], [a for a in actions if isinstance(a, AddFile)]


def _optimize(spark: SparkSession, path: str, where: str | None = None, target: int | None = None,
              hook: Callable[[], Any] | None = None) -> DmlResult:
    builder = dml.optimize(spark, path, target_file_size=target)
    if where:
        builder = builder.where(where)
    return builder.run_compaction(before_commit=hook)


def _reorg(spark: SparkSession, path: str, hook: Callable[[], Any] | None = None) -> dict[str, Any]:
    return purge_deletion_vectors(spark, path, before_commit=hook)


def _first_file(path: str) -> AddFile:
    return next(f for f in DeltaLog.for_table(path).update().all_files if f.deletion_vector is not None)


# ---------------------------------------------------------------------------------------------
# A. Two compactions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_same_optimize_twice(spark: SparkSession, tmp_table: str, layout: str) -> None:
    _make(spark, tmp_table, layout)
    won: dict[str, DmlResult] = {}
    r = _optimize(spark, tmp_table, hook=lambda: won.setdefault("w", _optimize(spark, tmp_table)))
    w = won["w"]
    assert w.version == _version(tmp_table) and w.metrics["numRemovedFiles"] == 4
    # The loser finds its work done: nothing committed, its outputs deleted, metrics say so.
    assert r.version is None and r.work_already_done_in == w.version
    assert r.metrics["numAddedFiles"] == 0 and r.metrics["numRemovedFiles"] == 0
    _check(spark, tmp_table, _expected())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_optimize_after_a_compaction_of_some_of_its_inputs(spark: SparkSession, tmp_table: str, layout: str) -> None:
    """The loser keeps the outputs whose inputs the winner did not compact."""
    _make(spark, tmp_table, layout)
    sizes = sorted(f.size or 0 for f in DeltaLog.for_table(tmp_table).update().all_files)
    won: dict[str, Any] = {}
    if layout == "partitioned":  # winner: OPTIMIZE WHERE p = 0; loser: every partition
        r = _optimize(spark, tmp_table, hook=lambda: won.setdefault("w", _optimize(spark, tmp_table, "p = 0")))
        w_version = won["w"].version
    else:  # winner: REORG of the file with a vector; loser: two bins of two files
        target = int(sizes[-1] * 2.5)
        r = _optimize(spark, tmp_table, target=target, hook=lambda: won.setdefault("w", _reorg(spark, tmp_table)))
        w_version = won["w"]["version"]
    assert r.version == w_version + 1 and r.work_already_done_in is None
    removed, added = _actions(tmp_table, r.version)
    assert len(removed) == 2 and len(added) == 1
    assert (r.metrics["numRemovedFiles"], r.metrics["numAddedFiles"]) == (2, 1)
    info = DeltaLog.for_table(tmp_table).read_commit(r.version).commit_info
    assert info is not None and info.values["operationMetrics"]["numRemovedFiles"] == "2"
    # Partitioned: the two compacted partitions. Unpartitioned: the purged file, the other file
    # of its bin (left as it was), and the loser's output.
    assert DeltaLog.for_table(tmp_table).update().num_files == (2 if layout == "partitioned" else 3)
    _check(spark, tmp_table, _expected())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_partial_compaction_after_a_full_one(spark: SparkSession, tmp_table: str, layout: str) -> None:
    """REORG (or OPTIMIZE of one partition) loses to an OPTIMIZE of everything: nothing to do."""
    _make(spark, tmp_table, layout)
    won: dict[str, DmlResult] = {}
    hook = lambda: won.setdefault("w", _optimize(spark, tmp_table))  # noqa: E731
    if layout == "partitioned":
        r = _optimize(spark, tmp_table, "p = 0", hook=hook)
        assert r.version is None and r.work_already_done_in == won["w"].version
    else:
        m = _reorg(spark, tmp_table, hook=hook)
        assert m["version"] is None and m["workAlreadyDoneIn"] == won["w"].version
        assert m["numFilesAdded"] == m["numFilesRemoved"] == 0
    assert _version(tmp_table) == won["w"].version
    _check(spark, tmp_table, _expected())


def test_without_deletion_vectors_two_optimizes_conflict(spark: SparkSession, tmp_table: str) -> None:
    _make(spark, tmp_table, "unpartitioned", dvs=False)
    with pytest.raises(ConcurrentDeleteDeleteException):
        _optimize(spark, tmp_table, hook=lambda: _optimize(spark, tmp_table))
    assert _version(tmp_table) == 4
    _check(spark, tmp_table, [_row(i) for g in GROUPS for i in g])


def test_zorder_and_optimize(spark: SparkSession, tmp_path: Any) -> None:
    """ZORDER writes no row mapping, yet neither order conflicts: compactions keep every row, so the serial
    outcome is the rows of the table, unchanged. ZORDER losing to an OPTIMIZE of the same files finds each
    input's rows in its own output by content, marks them deleted there (they live in OPTIMIZE's output)
    and drops its removes: every output empties, so it commits nothing (work already done, its files
    deleted). OPTIMIZE losing to ZORDER drops its tagged output likewise."""
    first, second = str(tmp_path / "zorder_loses"), str(tmp_path / "optimize_loses")
    _make(spark, first, "unpartitioned")
    _make(spark, second, "unpartitioned")
    won: dict[str, DmlResult] = {}
    z = dml.optimize(spark, first).run_zorder(["s"], before_commit=lambda: won.setdefault("w", _optimize(spark, first)))
    assert won["w"].version == _version(first) == 5
    assert z.version is None and z.work_already_done_in == 5
    assert (z.metrics["numAddedFiles"], z.metrics["numRemovedFiles"]) == (0, 0)
    _check(spark, first, _expected())
    r = _optimize(spark, second, hook=lambda: dml.optimize(spark, second).run_zorder(["s"]))
    assert r.version is None and r.work_already_done_in == _version(second)
    _check(spark, second, _expected())


# ---------------------------------------------------------------------------------------------
# B. REORG ... APPLY (PURGE) and a DELETE of another row of a purged file
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("order", ["reorg_loses", "delete_loses"])
def test_reorg_and_delete_of_another_row(spark: SparkSession, tmp_table: str, order: str, layout: str,
                                         level: str) -> None:
    _make(spark, tmp_table, layout, level=level)
    purged = _first_file(tmp_table).path
    if order == "reorg_loses":
        m = _reorg(spark, tmp_table, hook=lambda: dml.run_delete(spark, tmp_table, "id = 3"))
        assert m["version"] == 6 and m["numFilesAdded"] == 1
    else:
        r = dml.run_delete(spark, tmp_table, "id = 3", before_commit=lambda: _reorg(spark, tmp_table))
        assert r.version == 6
    files = DeltaLog.for_table(tmp_table).update().all_files
    assert purged not in {f.path for f in files}
    (out,) = [f for f in files if f.deletion_vector is not None]  # the purged file, id 3 marked
    assert out.deletion_vector is not None and out.deletion_vector.cardinality == 1
    _check(spark, tmp_table, _expected(3))


def test_reorg_writes_the_row_mapping(spark: SparkSession, tmp_table: str) -> None:
    _make(spark, tmp_table, "partitioned")
    source = _first_file(tmp_table)
    m = _reorg(spark, tmp_table)
    _, (out,) = _actions(tmp_table, m["version"])
    assert json.loads((out.tags or {})["serialake.compactedFrom"]) == [[source.path, source.dv_id, 5]]
    assert out.num_records == 5 and not out.data_change
    _check(spark, tmp_table, _expected())


# ---------------------------------------------------------------------------------------------
# C. A compaction and a DML that deletes every row of one of its inputs
# ---------------------------------------------------------------------------------------------

EMPTY_SECOND = "id BETWEEN 6 AND 11"  # every row of the second file (rows marked: remove(F), no re-add)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("order", ["optimize_loses", "delete_loses"])
def test_optimize_and_delete_of_a_whole_input(spark: SparkSession, tmp_table: str, order: str, layout: str,
                                              level: str) -> None:
    _make(spark, tmp_table, layout, level=level)
    emptied = next(f.path for f in DeltaLog.for_table(tmp_table).update().all_files if f.stats and '"id":6' in f.stats)
    if order == "optimize_loses":
        r = _optimize(spark, tmp_table, hook=lambda: dml.run_delete(spark, tmp_table, EMPTY_SECOND))
        assert r.version == 6
        removed, added = _actions(tmp_table, r.version)
        assert emptied not in {x.path for x in removed}  # the DELETE removed it already
        assert r.metrics["numRemovedFiles"] == 3
        assert any(a.deletion_vector is not None and a.deletion_vector.cardinality == 6 for a in added)
    else:
        d = dml.run_delete(spark, tmp_table, EMPTY_SECOND, before_commit=lambda: _optimize(spark, tmp_table))
        assert d.version == 6 and d.num_affected_rows == 6
        removed, added = _actions(tmp_table, d.version)
        assert len(removed) == len(added) == 1 and added[0].data_change
        assert added[0].deletion_vector is not None and added[0].deletion_vector.cardinality == 6
    _check(spark, tmp_table, _expected(*range(6, 12)))


@pytest.mark.parametrize("order", ["optimize_loses", "delete_loses"])
def test_optimize_and_delete_of_a_whole_partition(spark: SparkSession, tmp_table: str, order: str) -> None:
    """DELETE WHERE p = 0 removes whole files: their rows leave the compacted file too."""
    _make(spark, tmp_table, "partitioned")
    if order == "optimize_loses":
        r = _optimize(spark, tmp_table, hook=lambda: dml.run_delete(spark, tmp_table, "p = 0"))
        removed, added = _actions(tmp_table, r.version)
        assert r.version == 6 and len(removed) == 2 and len(added) == 1  # only partition 1's output
    else:
        d = dml.run_delete(spark, tmp_table, "p = 0", before_commit=lambda: _optimize(spark, tmp_table))
        removed, added = _actions(tmp_table, d.version)
        assert d.version == 6 and len(removed) == 1 and not added  # partition 0's compacted file
    _check(spark, tmp_table, [_row(i) for i in range(12, 24)])


@pytest.mark.parametrize("order", ["reorg_loses", "delete_loses"])
def test_reorg_and_delete_of_every_remaining_row(spark: SparkSession, tmp_table: str, order: str) -> None:
    _make(spark, tmp_table, "unpartitioned")
    if order == "reorg_loses":
        won: dict[str, DmlResult] = {}
        m = _reorg(spark, tmp_table, hook=lambda: won.setdefault("d", dml.run_delete(spark, tmp_table, "id < 6")))
        assert m["version"] is None and m["workAlreadyDoneIn"] == won["d"].version
    else:
        d = dml.run_delete(spark, tmp_table, "id < 6", before_commit=lambda: _reorg(spark, tmp_table))
        removed, added = _actions(tmp_table, d.version)
        assert d.version == 6 and len(removed) == 1 and not added  # the purged file, every row gone
    _check(spark, tmp_table, _expected(*range(6)))
