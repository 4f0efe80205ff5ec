"""Queries over several tables read one consistent cut (STRICT SERIALIZABLE and SERIALIZABLE).

A writer process commits ``A_k`` then ``B_k`` for k = 1, 2, ...: at every instant A holds
at least B's k. A query that ever returns b > a read a state that never existed (a torn
read). At STRICT SERIALIZABLE a query also sees every pair acknowledged before it started.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.exceptions import ConsistentReadError
from serialake.spark import write

pytestmark = pytest.mark.spark

# Appends one row k to a table per commit, A then B, and records the last k of which both
# commits returned (acknowledged) in a progress file.
_WRITER = r"""
import json, os, sys, uuid
import pyarrow as pa, pyarrow.parquet as pq
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, now_ms

a, b, progress, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def append(table, k):
    name = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"k": pa.array([k], pa.int64())}), os.path.join(table, name))
    stats = json.dumps({"numRecords": 1, "minValues": {"k": k}, "maxValues": {"k": k}, "nullCount": {"k": 0}})
    size = os.path.getsize(os.path.join(table, name))
    add = AddFile(path=name, partition_values={}, size=size, modification_time=now_ms(), stats=stats)
    DeltaLog.for_table(table).start_transaction().commit([add], "WRITE")

for k in range(1, n + 1):
    append(a, k)
    append(b, k)
    with open(progress + ".tmp", "w") as f:
        f.write(str(k))
    os.replace(progress + ".tmp", progress)
"""


_BOTH = "SELECT (SELECT max(k) FROM cut_a) AS a, (SELECT max(k) FROM cut_b) AS b"


def _tables(spark: SparkSession, tmp_path: Path) -> tuple[str, str]:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for path in (a, b):
        write(spark.createDataFrame([(0,)], "k long"), path)
    serialake.sql.register("cut_a", a)
    serialake.sql.register("cut_b", b)
    return a, b


def _start_writer(a: str, b: str, progress: Path, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _WRITER, a, b, str(progress), str(n)])


def _acknowledged(progress: Path) -> int:
    try:
        return int(progress.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


@pytest.mark.parametrize("level", ["STRICT SERIALIZABLE", "SERIALIZABLE"])
def test_two_table_query_never_tears(spark: SparkSession, tmp_path: Path, level: str) -> None:
    a, b = _tables(spark, tmp_path)
    progress = tmp_path / "progress"
    serialake.sql(spark, f"SET TRANSACTION ISOLATION LEVEL {level}")
    proc = _start_writer(a, b, progress, 400)
    results = []
    try:
        for _ in range(40):
            acked = _acknowledged(progress)
            row = serialake.sql(spark, _BOTH).first()
            assert row is not None
            results.append((acked, row["a"], row["b"]))
            if proc.poll() is not None:
                break
    finally:
        _stop(proc)
        serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL STRICT SERIALIZABLE")
    torn = [(x, ra, rb) for x, ra, rb in results if rb > ra]
    assert not torn, f"rows of B without the earlier-committed rows of A: {torn[:5]}"
    seen = [(ra, rb) for _, ra, rb in results]
    assert seen == sorted(seen), "a later query of the session saw an older state"
    if level == "STRICT SERIALIZABLE":
        stale = [(x, ra, rb) for x, ra, rb in results if rb < x]
        assert not stale, f"a pair acknowledged before the query started was not seen: {stale[:5]}"
        assert len({ra for _, ra, _ in results}) > 1, "the writer made no progress during the queries"


def test_serializable_never_mixes_a_cached_snapshot_with_a_fresh_one(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
    try:
        assert serialake.sql(spark, "SELECT max(k) AS k FROM cut_a").first()["k"] == 0  # A cached at k=0
        proc = _start_writer(a, b, tmp_path / "progress", 1)  # A_1 then B_1
        assert proc.wait(120) == 0
        row = serialake.sql(spark, _BOTH).first()
        assert (row["a"], row["b"]) == (1, 1)
        # Served from that cut now (no log access): still consistent, possibly older.
        again = serialake.sql(spark, _BOTH).first()
        assert (again["a"], again["b"]) == (1, 1)
    finally:
        serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL STRICT SERIALIZABLE")


def test_temp_view_reads_its_table_when_queried(spark: SparkSession, tmp_path: Path) -> None:
    """The seed's T1/T2: a query of a view after a read of its table sees at least that read."""
    t = str(tmp_path / "t")
    write(spark.createDataFrame([(i,) for i in range(4)], "k long"), t)
    serialake.sql.register("view_src", t)
    serialake.sql(spark, "CREATE TEMP VIEW v_live AS SELECT * FROM view_src WHERE k >= 0")
    serialake.sql(spark, "CREATE TEMP VIEW v_over AS SELECT count(*) AS n FROM v_live")  # a view over a view
    write(spark.createDataFrame([(4,)], "k long"), t)  # committed after the views were created
    assert serialake.sql(spark, "SELECT count(*) AS n FROM view_src").first()["n"] == 5  # T1
    assert serialake.sql(spark, "SELECT count(*) AS n FROM v_live").first()["n"] == 5  # T2
    assert serialake.sql(spark, "SELECT n FROM v_over").first()["n"] == 5
    assert serialake.sql(spark, "SELECT x.k FROM v_live x WHERE x.k = 4").count() == 1  # aliased
    serialake.sql(spark, "DROP VIEW v_over")
    with pytest.raises(Exception, match="(?i)v_over"):
        serialake.sql(spark, "SELECT n FROM v_over").collect()
    serialake.sql(spark, "DROP VIEW v_live")


def test_view_over_two_tables_reads_one_cut(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    serialake.sql(spark, "CREATE OR REPLACE TEMP VIEW v_pair AS " + _BOTH)
    proc = _start_writer(a, b, tmp_path / "progress", 300)
    rows = []
    try:
        for _ in range(25):
            acked = _acknowledged(tmp_path / "progress")
            row = serialake.sql(spark, "SELECT a, b FROM v_pair").first()
            rows.append((acked, row["a"], row["b"]))
    finally:
        _stop(proc)
        serialake.sql(spark, "DROP VIEW v_pair")
    assert not [r for r in rows if r[2] > r[1]], rows
    assert not [r for r in rows if r[2] < r[0]], rows


def test_snapshot_pins_one_cut_for_several_statements(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    write(spark.createDataFrame([(0,)], "k long"), str(tmp_path / "c"))
    serialake.sql.register("cut_c", str(tmp_path / "c"))
    proc = _start_writer(a, b, tmp_path / "progress", 200)
    try:
        while _acknowledged(tmp_path / "progress") < 3 and proc.poll() is None:
            pass
        snap = serialake.snapshot(spark, ["cut_a", b])
        va, vb = snap.versions["cut_a"], snap.versions[b]
        assert vb <= va  # B_k commits after A_k
        with snap:
            first = serialake.sql(spark, _BOTH).first()
            while proc.poll() is None and DeltaLog.for_table(a).update().version < va + 5:
                pass  # the writer moves on meanwhile
            second = serialake.sql(spark, _BOTH).first()
            with pytest.raises(ConsistentReadError, match="not part of the snapshot"):
                serialake.sql(spark, "SELECT count(*) FROM cut_c")
        assert (first["a"], first["b"]) == (second["a"], second["b"])
        assert first["b"] <= first["a"]
        df = snap.read("cut_a")
        assert df.agg({"k": "max"}).first()[0] == first["a"]
        assert snap.sql(_BOTH).first()["b"] == first["b"]
        # Outside the block, statements read the latest cut again.
        assert serialake.sql(spark, _BOTH).first()["a"] >= first["a"]
    finally:
        _stop(proc)


def test_dataframes_read_in_a_snapshot_block_share_its_cut(spark: SparkSession, tmp_path: Path) -> None:
    a, b = _tables(spark, tmp_path)
    proc = _start_writer(a, b, tmp_path / "progress", 200)
    try:
        while _acknowledged(tmp_path / "progress") < 2 and proc.poll() is None:
            pass
        with serialake.snapshot(spark, [a, "cut_b"]) as snap:
            left = serialake.read(spark, a)
            while proc.poll() is None and DeltaLog.for_table(b).update().version < snap.versions["cut_b"] + 3:
                pass  # both tables move on while the block reads
            right = serialake.read(spark, b)
            with pytest.raises(ConsistentReadError, match="not part of the snapshot"):
                serialake.read(spark, str(tmp_path / "elsewhere"))
        ka = left.agg({"k": "max"}).first()[0]
        kb = right.agg({"k": "max"}).first()[0]
        assert kb <= ka  # one instant: B_k is committed after A_k
        assert (ka, kb) == (snap.versions[a], snap.versions["cut_b"])  # version v of each holds k = v
    finally:
        _stop(proc)
