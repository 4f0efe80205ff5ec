"""DELETE / UPDATE / MERGE on tables with deletion vectors: rows marked, files kept, every reader agrees."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from serialake.core.dv.deletion_vectors import read_deletion_vector
from serialake.core.model.actions import AddFile, RemoveFile
from serialake.spark import dml
from tests.spark.test_dml import COLUMNS, _base_rows, _check, _commit, _live_paths, _make_table
from tests.spark.test_merge import _reference, _source

pytestmark = pytest.mark.spark

DV = {"delta.enableDeletionVectors": "true"}
LAYOUTS = {"unpartitioned": (), "partitioned": ("date",)}


def _dv_pairs(path: str, version: int | None) -> dict[str, tuple[RemoveFile, AddFile]]:
    """Files a commit changed through deletion vectors: path -> (remove old, add new)."""
    actions = _commit(path, version)
    removes = {a.path: a for a in actions if isinstance(a, RemoveFile)}
    return {a.path: (removes[a.path], a) for a in actions if isinstance(a, AddFile) and a.path in removes}


def _cardinality(f: AddFile | RemoveFile) -> int:
    return f.deletion_vector.cardinality if f.deletion_vector else 0


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_delete_and_update_mark_rows(spark: SparkSession, tmp_table: str, layout: str) -> None:
    ref = _make_table(spark, tmp_table, _base_rows(16), partition_by=LAYOUTS[layout], files=1, properties=DV)
    original = _live_paths(tmp_table)
    r = dml.run_delete(spark, tmp_table, "id IN (1, 5)")
    ref = ref.where("id NOT IN (1, 5)")
    _check(spark, tmp_table, ref, dvs=True)
    assert _live_paths(tmp_table) == original  # no data file rewritten
    assert r.metrics["numDeletionVectorsAdded"] == len(_dv_pairs(tmp_table, r.version))
    assert r.metrics["numAddedFiles"] == 0 and r.num_affected_rows == 2
    for old, new in _dv_pairs(tmp_table, r.version).values():
        assert old.deletion_vector is None and new.deletion_vector is not None
        assert old.data_change and new.data_change and new.num_records == old.num_records
        assert json.loads(new.stats or "{}")["tightBounds"] is False

    # A second delete in the same file: the new vector is the union of both.
    r = dml.run_delete(spark, tmp_table, F.col("id") == 9)
    ref = ref.where("id != 9")
    _check(spark, tmp_table, ref, dvs=True)
    ((old, new),) = _dv_pairs(tmp_table, r.version).values()
    assert r.metrics["numDeletionVectorsUpdated"] == 1 and old.deletion_vector is not None
    assert set(read_deletion_vector(tmp_table, new.deletion_vector)) > set(
        read_deletion_vector(tmp_table, old.deletion_vector)
    )

    # UPDATE: the old versions of the rows are marked deleted, only the new versions are written.
    r = dml.run_update(spark, tmp_table, "x >= 100", {"s": "upper(s)", "x": "x * 2"})
    hit = F.coalesce(F.col("x") >= 100, F.lit(False))
    ref = ref.select(
        "id", "date", "country",
        F.when(hit, F.col("x") * 2).otherwise(F.col("x")).alias("x"),
        F.when(hit, F.upper("s")).otherwise(F.col("s")).alias("s"),
    )  # fmt: skip
    _check(spark, tmp_table, ref, dvs=True)
    updated = ref.where(hit).count()
    added = [a for a in _commit(tmp_table, r.version) if isinstance(a, AddFile) and a.path not in original]
    assert sum(a.num_records or 0 for a in added) == updated == r.num_affected_rows
    gone = original - _live_paths(tmp_table)  # only files whose every row is now deleted leave
    assert r.metrics["numCopiedRows"] == 0 and r.metrics["numRemovedFiles"] == len(gone)
    assert len(gone) == (1 if layout == "partitioned" else 0)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_merge_marks_rows(spark: SparkSession, tmp_table: str, layout: str) -> None:
    target = _make_table(spark, tmp_table, _base_rows(16), partition_by=LAYOUTS[layout], files=1, properties=DV)
    original = _live_paths(tmp_table)
    source = _source(spark)
    r = (
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedDelete("s.op = 'delete'")
        .whenMatchedUpdate("s.op = 'update'", {"x": "s.x", "s": "concat(t.s, '+', s.s)"})
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll("s.op != 'skip'")
        .whenNotMatchedBySourceDelete("t.x IS NULL")
        .whenNotMatchedBySourceUpdate("t.date = '2009-12-31'", {"s": "'orphan'"})
        .run()
    )
    _check(spark, tmp_table, _reference(target, source), dvs=True)
    m = r.metrics
    assert m["numTargetRowsCopied"] == 0
    assert m["numOutputRows"] == m["numTargetRowsUpdated"] + m["numTargetRowsInserted"]
    pairs = _dv_pairs(tmp_table, r.version)
    removed = {a.path: a for a in _commit(tmp_table, r.version) if isinstance(a, RemoveFile)}
    newly_marked = sum(_cardinality(new) - _cardinality(old) for old, new in pairs.values()) + sum(
        (f.num_records or 0) - _cardinality(f) for p, f in removed.items() if p not in pairs
    )
    assert newly_marked == m["numTargetRowsUpdated"] + m["numTargetRowsDeleted"]
    assert set(pairs) <= original
    assert m["numTargetDeletionVectorsAdded"] == len(pairs)


def test_file_losing_every_row_is_removed(spark: SparkSession, tmp_table: str) -> None:
    ref = _make_table(spark, tmp_table, _base_rows(12), files=2, properties=DV)  # ids 0-5 and 6-11
    dml.run_delete(spark, tmp_table, "id < 3")
    r = dml.run_delete(spark, tmp_table, "id < 6 OR id = 11")
    actions = _commit(tmp_table, r.version)
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    adds = [a for a in actions if isinstance(a, AddFile)]
    assert len(removes) == 2 and len(adds) == 1  # the first file goes, the second gets a vector
    assert r.metrics["numRemovedFiles"] == 1 and r.metrics["numDeletionVectorsRemoved"] == 1
    assert r.metrics["numDeletionVectorsAdded"] == 1 and r.num_affected_rows == 4
    _check(spark, tmp_table, ref.where("id >= 6 AND id != 11").select(*COLUMNS), dvs=True)
