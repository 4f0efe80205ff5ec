"""DataFrames over several tables read one state: list reads, and combinations checked where consumed.

``serialake.read(spark, [a, b])`` reads both tables at one consistent cut. Two separate
``serialake.read`` calls are two reads; a DataFrame combining them is refused where
serialake consumes it (a write, a MERGE source, a SQL query over a temp view) when their
versions never held together, and accepted when they did (also when a table moved after
both reads: the ledger remembers they were confirmed together).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import serialake
from serialake.core import DeltaLog
from serialake.exceptions import ConsistentReadError, DeltaIllegalArgumentException
from serialake.spark import DeltaTable, write
from tests.sql.test_consistent_reads import _acknowledged, _start_writer, _stop, _tables

pytestmark = pytest.mark.spark


def _max(df):  # type: ignore[no-untyped-def]
    return df.agg(F.max("k")).first()[0]


def test_list_read_never_tears_under_a_writer(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    progress = tmp_path / "progress"
    proc = _start_writer(a, b, progress, 400)
    results = []
    try:
        for _ in range(30):
            acked = _acknowledged(progress)
            da, db = serialake.read(spark, [a, b])
            row = da.agg(F.max("k").alias("a")).crossJoin(db.agg(F.max("k").alias("b"))).first()
            results.append((acked, row["a"], row["b"]))
            if proc.poll() is not None:
                break
    finally:
        _stop(proc)
    assert not [r for r in results if r[2] > r[1]], results  # B_k without A_k: a torn read
    assert not [r for r in results if r[2] < r[0]], results  # STRICT: acknowledged pairs are seen
    assert len({r[1] for r in results}) > 1, "the writer made no progress during the reads"


def _commit_pair(spark: SparkSession, a: str, b: str, k: int) -> None:
    write(spark.createDataFrame([(k,)], "k long"), a)
    write(spark.createDataFrame([(k,)], "k long"), b)


def test_separate_reads_that_never_held_together_are_refused_by_a_write(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    out = str(tmp_path / "out")
    left = serialake.read(spark, a)  # A at k=0
    _commit_pair(spark, a, b, 1)  # A_1 then B_1
    right = serialake.read(spark, b)  # B at k=1: no instant had A at 0 and B at 1
    torn = left.select(F.max("k").alias("a")).crossJoin(right.select(F.max("k").alias("b")))
    with pytest.raises(ConsistentReadError, match="never held together"):
        write(torn, out)
    assert not DeltaLog.for_table(out).table_exists()  # nothing was written
    target = str(tmp_path / "target")
    write(spark.createDataFrame([(0,)], "k long"), target)
    before = DeltaLog.for_table(target).update().version
    with pytest.raises(ConsistentReadError, match=r"version 0.*version 1|version 1.*version 0"):
        (
            DeltaTable.forPath(spark, target)
            .alias("t")
            .merge(left.unionByName(right).alias("s"), "t.k = s.k")
            .whenNotMatchedInsertAll()
            .execute()
        )
    assert DeltaLog.for_table(target).update().version == before
    # The same reads made together are fine.
    fresh_a, fresh_b = serialake.read(spark, [a, b])
    write(fresh_a.select(F.max("k").alias("a")).crossJoin(fresh_b.select(F.max("k").alias("b"))), out)
    assert [tuple(r) for r in serialake.read(spark, out).collect()] == [(1, 1)]


def test_separate_reads_confirmed_together_stay_usable_after_the_tables_move(
    spark: SparkSession, tmp_path: Path
) -> None:
    a, b = _tables(spark, tmp_path)
    left = serialake.read(spark, a)
    right = serialake.read(spark, b)  # A did not move meanwhile: both held at one instant
    _commit_pair(spark, a, b, 1)  # both move after the reads
    out = str(tmp_path / "out")
    write(left.select(F.max("k").alias("a")).crossJoin(right.select(F.max("k").alias("b"))), out)
    assert [tuple(r) for r in serialake.read(spark, out).collect()] == [(0, 0)]


def test_sql_over_a_temp_view_of_an_older_read_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    serialake.read(spark, a).createOrReplaceTempView("old_a")
    _commit_pair(spark, a, b, 1)
    try:
        with pytest.raises(ConsistentReadError, match="This query"):
            serialake.sql(spark, "SELECT (SELECT max(k) FROM old_a) AS a, (SELECT max(k) FROM cut_b) AS b")
        # A view of a read that still holds is combined freely.
        serialake.read(spark, a).createOrReplaceTempView("old_a")
        row = serialake.sql(spark, "SELECT (SELECT max(k) FROM old_a) AS a, (SELECT max(k) FROM cut_b) AS b").first()
        assert (row["a"], row["b"]) == (1, 1)
    finally:
        spark.catalog.dropTempView("old_a")


def test_the_same_table_read_twice_at_two_versions_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    a, _ = _tables(spark, tmp_path)
    first = serialake.read(spark, a)
    write(spark.createDataFrame([(1,)], "k long"), a)
    second = serialake.read(spark, a)
    with pytest.raises(ConsistentReadError, match="two versions"):
        write(first.unionByName(second), str(tmp_path / "out"))


def test_list_read_argument_errors(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    with pytest.raises(DeltaIllegalArgumentException, match="several tables"):
        serialake.read(spark, [a, b], version=0)
    with pytest.raises(DeltaIllegalArgumentException, match="non-empty"):
        serialake.read(spark, [])


def test_serializable_dataframe_reads_serve_the_session_cut_and_see_own_writes(
    spark: SparkSession, tmp_path: Path
) -> None:
    a, b = _tables(spark, tmp_path)
    serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
    try:
        da, db = serialake.read(spark, [a, b])  # cut at (0, 0)
        proc = _start_writer(a, b, tmp_path / "progress", 3)  # another process moves both
        assert proc.wait(120) == 0
        # Served from the session's cut: consistent, older than the latest (allowed).
        assert (_max(serialake.read(spark, a)), _max(serialake.read(spark, b))) == (0, 0)
        write(spark.createDataFrame([(10,)], "k long"), a)  # the session's own write
        assert _max(serialake.read(spark, a)) == 10  # never older than its own write
        ra, rb = serialake.read(spark, [a, b])
        assert (_max(ra), _max(rb)) == (10, 3)
        assert (_max(da), _max(db)) == (0, 0)
    finally:
        serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL STRICT SERIALIZABLE")
