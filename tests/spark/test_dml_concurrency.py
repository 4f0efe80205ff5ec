"""Concurrent DML on one table: the seeds' conflict scenarios with real Spark jobs.

Interleaving is deterministic: an operation plans (pinned snapshot, files read, new files
written) and its ``before_commit`` hook runs the other operation to completion, then it
commits. Threads on the one session (both planning at once, then committing) and a second
process committing through the core show the same outcomes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import read_deletion_vector
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    MetadataChangedException,
)
from serialake.spark import dml, read, write
from tests.spark.test_dml import SCHEMA, _base_rows, _make_table

pytestmark = pytest.mark.spark

DV = {"delta.enableDeletionVectors": "true"}
CUTOFF = "2010-01-01"
MERGE_SCHEMA = "id long, date string, country string, x int, s string"


def _version(path: str) -> int:
    return DeltaLog.for_table(path).update().version


# ---------------------------------------------------------------------------------------------
# UPDATE date > X vs DELETE date < X (seed example; matrix 21 and 22)
# ---------------------------------------------------------------------------------------------


def _delete_old(spark: SparkSession, path: str, hook: Callable[[], Any] | None = None) -> Any:
    return dml.run_delete(spark, path, f"date < '{CUTOFF}'", before_commit=hook)


def _update_new(spark: SparkSession, path: str, hook: Callable[[], Any] | None = None) -> Any:
    return dml.run_update(spark, path, f"date > '{CUTOFF}'", {"s": "'new'"}, before_commit=hook)


def test_update_vs_delete_unpartitioned_conflict(spark: SparkSession, tmp_table: str) -> None:
    _make_table(spark, tmp_table, _base_rows(12), files=1)  # one file holds both sides of the cutoff
    with pytest.raises(ConcurrentAppendException) as e:
        _delete_old(spark, tmp_table, hook=lambda: _update_new(spark, tmp_table))
    assert e.value.winning_operation == "UPDATE" and "not partitioned" in str(e.value)
    assert _version(tmp_table) == 1  # only the UPDATE committed
    assert read(spark, tmp_table).where(f"date < '{CUTOFF}'").count() == 6


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_update_vs_delete_in_threads(spark: SparkSession, tmp_table: str, partitioned: bool) -> None:
    """Both plan at the same time (Spark jobs in parallel), then both try to commit."""
    _make_table(spark, tmp_table, _base_rows(12), partition_by=("date",) if partitioned else (), files=1)
    barrier = threading.Barrier(2, timeout=120)
    outcomes: dict[str, Any] = {}

    def run(name: str, op: Callable[..., Any]) -> None:
        try:
            outcomes[name] = op(spark, tmp_table, hook=barrier.wait)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertions
            barrier.abort()
            outcomes[name] = e

    threads = [threading.Thread(target=run, args=a) for a in (("update", _update_new), ("delete", _delete_old))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    failures = [v for v in outcomes.values() if isinstance(v, BaseException)]
    if partitioned:
        assert not failures and _version(tmp_table) == 2
        assert read(spark, tmp_table).where(f"date < '{CUTOFF}'").count() == 0
        assert read(spark, tmp_table).where("s != 'new'").count() == 0
    else:
        assert len(failures) == 1 and isinstance(failures[0], ConcurrentAppendException), failures
        assert _version(tmp_table) == 1


# ---------------------------------------------------------------------------------------------
# MERGE into partitions (matrix 23 and 24)
# ---------------------------------------------------------------------------------------------

D1, C1, D2, C2 = "2010-01-02", "fr", "2010-01-03", "de"


def _merge_table(spark: SparkSession, path: str) -> None:
    rows = [(i, (D1, D2)[i % 2], (C1, C2)[i % 2], i, f"s{i}") for i in range(8)]
    write(spark.createDataFrame(rows, MERGE_SCHEMA).coalesce(1), path, partitionBy=["date", "country"])


def _merge(spark: SparkSession, path: str, date: str, country: str, explicit: bool, hook: Any = None) -> Any:
    source = spark.createDataFrame(
        [(0 if date == D1 else 1, date, country, 100, "upd"), (50 if date == D1 else 51, date, country, 1, "ins")],
        MERGE_SCHEMA,
    ).alias("s")
    cond = "s.id = t.id AND s.date = t.date AND s.country = t.country"
    if explicit:
        cond += f" AND t.date = '{date}' AND t.country = '{country}'"
    return (
        dml.merge(spark, path, source, cond, alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .run(before_commit=hook)
    )


def test_merges_into_different_partitions(spark: SparkSession, tmp_table: str) -> None:
    _merge_table(spark, tmp_table)
    # Only s.date = t.date: the whole table was read, so the other partition's new files conflict.
    with pytest.raises(ConcurrentAppendException) as e:
        _merge(spark, tmp_table, D1, C1, False, hook=lambda: _merge(spark, tmp_table, D2, C2, False))
    assert "read the whole table" in str(e.value) and "t.date" in str(e.value)
    assert e.value.partition == {"date": D2, "country": C2}
    assert _version(tmp_table) == 1
    # Spelled out: each reads only its partition, and both commit.
    r = _merge(spark, tmp_table, D1, C1, True, hook=lambda: _merge(spark, tmp_table, D2, C2, True))
    assert r.version == 3
    got = {(row.id, row.s) for row in read(spark, tmp_table).where("s IN ('upd', 'ins')").collect()}
    assert got == {(0, "upd"), (1, "upd"), (50, "ins"), (51, "ins")}


_OTHER_PROCESS = textwrap.dedent(
    """
    import json, os, sys, uuid
    import pyarrow as pa, pyarrow.parquet as pq
    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile

    path, date, country = sys.argv[1:4]
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    txn.filter_files([f"date = '{date}' AND country = '{country}'"])  # reads its partition: not blind
    rel = f"date={date}/country={country}/part-{uuid.uuid4()}.parquet"
    os.makedirs(os.path.join(path, os.path.dirname(rel)), exist_ok=True)
    table = pa.table({"id": pa.array([77], pa.int64()), "x": pa.array([7], pa.int32()), "s": ["other"]})
    pq.write_table(table, os.path.join(path, rel))
    stats = {"numRecords": 1, "minValues": {"id": 77, "x": 7, "s": "other"},
             "maxValues": {"id": 77, "x": 7, "s": "other"}, "nullCount": {"id": 0, "x": 0, "s": 0}}
    add = AddFile(path=rel, partition_values={"date": date, "country": country},
                  size=os.path.getsize(os.path.join(path, rel)), modification_time=0, data_change=True,
                  stats=json.dumps(stats))
    print(txn.commit([add], operation="MERGE"))
    """
)


def _other_process_writes(path: str, date: str, country: str) -> None:
    subprocess.run([sys.executable, "-c", _OTHER_PROCESS, path, date, country], check=True, capture_output=True)


def test_merge_against_another_process(spark: SparkSession, tmp_table: str) -> None:
    _merge_table(spark, tmp_table)
    with pytest.raises(ConcurrentAppendException):
        _merge(spark, tmp_table, D1, C1, False, hook=lambda: _other_process_writes(tmp_table, D2, C2))
    r = _merge(spark, tmp_table, D1, C1, True, hook=lambda: _other_process_writes(tmp_table, D2, C2))
    assert r.version == 3
    assert read(spark, tmp_table).where("id IN (0, 50)").count() == 2
    assert read(spark, tmp_table).where("id = 77").count() == 2  # one row from each other-process commit


def test_insert_select_from_the_target_is_not_blind(spark: SparkSession, tmp_table: str) -> None:
    """INSERT INTO t SELECT ... FROM t WHERE date = D1: concurrent changes to D1 conflict, others do not."""
    _merge_table(spark, tmp_table)

    def insert(hook: Callable[[], Any]) -> Any:
        version = _version(tmp_table)
        copy = read(spark, tmp_table, version=version).where(f"date = '{D1}'").withColumn("id", F.col("id") + 1000)
        return dml.run_insert(spark, tmp_table, copy, read_predicate=f"date = '{D1}'", read_version=version,
                              before_commit=hook)  # fmt: skip

    with pytest.raises(ConcurrentAppendException):
        insert(lambda: dml.run_update(spark, tmp_table, f"date = '{D1}' AND id = 0", {"s": "'w'"}))
    r = insert(lambda: dml.run_update(spark, tmp_table, f"date = '{D2}'", {"s": "'w2'"}))
    assert r.version == 3 and not _commit_info_blind(tmp_table, 3)
    assert read(spark, tmp_table).where("id >= 1000").count() == 4


def _commit_info_blind(path: str, version: int) -> bool:
    info = DeltaLog.for_table(path).read_commit(version).commit_info
    assert info is not None
    return bool(info.is_blind_append)


# ---------------------------------------------------------------------------------------------
# OPTIMIZE and metadata changes (matrix 14, 15, 16, 6)
# ---------------------------------------------------------------------------------------------


def _small_files(spark: SparkSession, path: str, properties: dict[str, str] | None = None) -> None:
    """Two files: ids 0-5 and 6-11."""
    for b in range(2):
        rows = _base_rows(12)[6 * b : 6 * (b + 1)]
        write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, properties=properties)


def test_optimize_vs_blind_append_commits(spark: SparkSession, tmp_table: str) -> None:
    _small_files(spark, tmp_table)
    extra = spark.createDataFrame([(99, CUTOFF, "fr", 1, "x")], SCHEMA)
    r = dml.optimize(spark, tmp_table).run_compaction(before_commit=lambda: write(extra, tmp_table))
    assert r.version == 3
    assert sorted(row.id for row in read(spark, tmp_table).collect()) == [*range(12), 99]
    assert DeltaLog.for_table(tmp_table).update().num_files == 2  # the compacted file and the append


def test_optimize_vs_delete_of_the_same_files(spark: SparkSession, tmp_path: Any) -> None:
    first, second = str(tmp_path / "optimize_first"), str(tmp_path / "delete_first")
    _small_files(spark, first)
    _small_files(spark, second)
    # OPTIMIZE started first; a DELETE rewrote one of its inputs.
    with pytest.raises(ConcurrentDeleteDeleteException) as e:
        dml.optimize(spark, first).run_compaction(before_commit=lambda: dml.run_delete(spark, first, "id = 3"))
    assert e.value.winning_operation == "DELETE"
    # DELETE started first; OPTIMIZE compacted the file it rewrites.
    with pytest.raises(ConcurrentDeleteDeleteException):
        dml.run_delete(spark, second, "id = 3", before_commit=lambda: dml.optimize(spark, second).run_compaction())
    assert read(spark, second).where("id = 3").count() == 1


def test_add_column_fails_concurrent_writes(spark: SparkSession, tmp_table: str) -> None:
    _make_table(spark, tmp_table, _base_rows(6), files=1)
    with pytest.raises(MetadataChangedException, match="schema"):
        dml.run_update(
            spark, tmp_table, "id = 1", {"s": "'x'"}, before_commit=lambda: dml.add_columns(spark, tmp_table, "c INT")
        )
    with pytest.raises(MetadataChangedException):
        dml.add_columns(spark, tmp_table, "d INT", before_commit=lambda: dml.add_columns(spark, tmp_table, "e INT"))
    assert [f.name for f in DeltaLog.for_table(tmp_table).update().schema.fields][-2:] == ["c", "e"]


# ---------------------------------------------------------------------------------------------
# Row-level concurrency with deletion vectors (matrix section 4)
# ---------------------------------------------------------------------------------------------


def _dv_table(spark: SparkSession, path: str) -> None:
    _small_files(spark, path, properties=DV)


def _ids(spark: SparkSession, path: str) -> list[int]:
    return sorted(r.id for r in read(spark, path).collect())


def test_r1_disjoint_deletes_in_one_file(spark: SparkSession, tmp_table: str) -> None:
    _dv_table(spark, tmp_table)
    r = dml.run_delete(spark, tmp_table, "id = 5", before_commit=lambda: dml.run_delete(spark, tmp_table, "id = 1"))
    assert r.version == 3
    assert _ids(spark, tmp_table) == [i for i in range(12) if i not in (1, 5)]
    dvs = [f.deletion_vector for f in DeltaLog.for_table(tmp_table).update().all_files if f.deletion_vector]
    assert len(dvs) == 1 and len(read_deletion_vector(tmp_table, dvs[0])) == 2


def test_r2_update_and_delete_of_the_same_row(spark: SparkSession, tmp_table: str) -> None:
    _dv_table(spark, tmp_table)
    with pytest.raises(ConcurrentDeleteDeleteException, match="same row"):
        dml.run_update(
            spark, tmp_table, "id = 5", {"s": "'u'"}, before_commit=lambda: dml.run_delete(spark, tmp_table, "id = 5")
        )
    assert 5 not in _ids(spark, tmp_table)


def test_r3_update_vs_blind_append(spark: SparkSession, tmp_table: str) -> None:
    _dv_table(spark, tmp_table)
    extra = spark.createDataFrame([(99, CUTOFF, "fr", 1, "x")], SCHEMA)
    r = dml.run_update(spark, tmp_table, "id = 5", {"s": "'u'"}, before_commit=lambda: write(extra, tmp_table))
    assert r.version == 3 and 99 in _ids(spark, tmp_table)


def test_r4_optimize_and_delete_of_a_compacted_row(spark: SparkSession, tmp_path: Any) -> None:
    first, second = str(tmp_path / "optimize_first"), str(tmp_path / "delete_first")
    _dv_table(spark, first)
    _dv_table(spark, second)
    dml.optimize(spark, first).run_compaction(before_commit=lambda: dml.run_delete(spark, first, "id = 7"))
    dml.run_delete(spark, second, "id = 7", before_commit=lambda: dml.optimize(spark, second).run_compaction())
    for path in (first, second):
        assert _ids(spark, path) == [i for i in range(12) if i != 7]
        (f,) = DeltaLog.for_table(path).update().all_files  # one compacted file carrying the delete
        assert f.deletion_vector is not None and f.deletion_vector.cardinality == 1


def test_r5_zorder_and_delete_both_commit(spark: SparkSession, tmp_table: str) -> None:
    """ZORDER writes no row mapping: the DELETE's row is found by its values in the z-ordered output
    and marked there (matrix R5: may conflict; here it commits)."""
    _dv_table(spark, tmp_table)
    v = DeltaLog.for_table(tmp_table).update().version
    r = dml.optimize(spark, tmp_table).run_zorder(
        ["x"], before_commit=lambda: dml.run_delete(spark, tmp_table, "id = 7")
    )
    assert r.version == v + 2
    assert _ids(spark, tmp_table) == [i for i in range(12) if i != 7]


def test_r6_merge_and_update_of_other_rows_in_one_file(spark: SparkSession, tmp_table: str) -> None:
    _dv_table(spark, tmp_table)
    source = spark.createDataFrame([(2, "m2"), (3, "m3")], "id long, s string").alias("s")
    r = (
        dml.merge(spark, tmp_table, source, "t.id = s.id", alias="t")
        .whenMatchedUpdate(set={"s": "s.s"})
        .run(before_commit=lambda: dml.run_update(spark, tmp_table, "id = 4", {"s": "'u4'"}))
    )
    assert r.version == 3
    got = {row.id: row.s for row in read(spark, tmp_table).where("id IN (2, 3, 4)").collect()}
    assert got == {2: "m2", 3: "m3", 4: "u4"}
    assert _ids(spark, tmp_table) == list(range(12))
