"""Derived tables (``serialake.maintainedFrom``): STRICT reads wait for them to catch up with
their sources, SERIALIZABLE reads never wait and read sources at the versions they reflect.

A maintainer process keeps table ``d`` from source ``a``: for each new version of ``a`` it
commits one row ``k = max(k of a)`` to ``d``, recording that it read ``a`` at that version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, now_ms
from serialake.exceptions import DerivedTableLagError
from serialake.spark import DeltaTable, isolation, write

pytestmark = pytest.mark.spark

_MAINTAINER = r"""
import json, os, sys, time, uuid
import pyarrow as pa, pyarrow.parquet as pq
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, now_ms

a, d, lag, stop_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
source = DeltaLog.for_table(a)
done = -1
while not os.path.exists(stop_file):
    snap = source.update()
    if snap.version == done:
        time.sleep(0.01)
        continue
    time.sleep(lag)  # a job that takes a while
    k = max(int(pq.read_table(os.path.join(a, f.path)).column("k").to_pylist()[0]) for f in snap.all_files)
    name = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"k": pa.array([k], pa.int64())}), os.path.join(d, name))
    add = AddFile(path=name, partition_values={}, size=os.path.getsize(os.path.join(d, name)),
                  modification_time=now_ms(), stats=json.dumps({"numRecords": 1}))
    txn = DeltaLog.for_table(d).start_transaction()
    txn.record_table_read(source.table_path, snap.version)
    txn.commit([add], "WRITE")
    done = snap.version
"""


def _append(table: str, k: int) -> None:
    name = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"k": pa.array([k], pa.int64())}), os.path.join(table, name))
    add = AddFile(path=name, partition_values={}, size=os.path.getsize(os.path.join(table, name)),
                  modification_time=now_ms(), stats=json.dumps({"numRecords": 1}))  # fmt: skip
    DeltaLog.for_table(table).start_transaction().commit([add], "WRITE")


def _setup(spark: SparkSession, tmp_path: Path) -> tuple[str, str]:
    a, d = str(tmp_path / "a"), str(tmp_path / "d")
    write(spark.createDataFrame([(0,)], "k long"), a)
    write(spark.createDataFrame([(-1,)], "k long"), d)
    DeltaTable.forPath(spark, d).setTableProperties({isolation.MAINTAINED_FROM: "src_a"})
    serialake.sql.register("src_a", a)
    serialake.sql.register("derived_d", d)
    return a, d


def _maintainer(a: str, d: str, lag: float, stop: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _MAINTAINER, a, d, str(lag), str(stop)])


def _stop(proc: subprocess.Popen[bytes], stop: Path) -> None:
    stop.write_text("stop")
    try:
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_strict_read_waits_for_the_derived_table(spark: SparkSession, tmp_path: Path) -> None:
    a, d = _setup(spark, tmp_path)
    stop = tmp_path / "stop"
    proc = _maintainer(a, d, 0.3, stop)
    try:
        for k in range(1, 4):
            _append(a, k)  # acknowledged before the query below starts
            row = serialake.sql(spark, "SELECT max(k) AS k FROM derived_d").first()
            assert row["k"] >= k, "a source commit acknowledged before the query is not reflected"
            both = serialake.sql(spark, "SELECT (SELECT max(k) FROM derived_d) AS d, (SELECT max(k) FROM src_a) AS a")
            r = both.first()
            assert r["d"] == r["a"] >= k  # the source read at the version the derived table reflects
    finally:
        _stop(proc, stop)


def test_a_derived_table_that_does_not_catch_up(spark: SparkSession, tmp_path: Path) -> None:
    a, d = _setup(spark, tmp_path)
    stop = tmp_path / "stop"
    proc = _maintainer(a, d, 0.0, stop)
    _append(a, 1)
    try:
        while serialake.sql(spark, "SELECT max(k) AS k FROM derived_d").first()["k"] < 1:
            pass
    finally:
        _stop(proc, stop)
    _append(a, 2)  # nobody maintains d any more
    spark.conf.set(isolation.DERIVED_WAIT_CONF, "300")
    try:
        with pytest.raises(DerivedTableLagError) as info:
            serialake.sql(spark, "SELECT max(k) FROM derived_d").collect()
        message = str(info.value)
        assert "derived_d" in message and DeltaLog.for_table(a).table_path in message
        assert "version 2" in message and isolation.DERIVED_WAIT_CONF in message
        # SERIALIZABLE never waits: d alone as it is; with its source, the source as d reflects it.
        serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        assert serialake.sql(spark, "SELECT max(k) AS k FROM derived_d").first()["k"] == 1
        r = serialake.sql(spark, "SELECT (SELECT max(k) FROM derived_d) AS d, (SELECT max(k) FROM src_a) AS a").first()
        assert (r["d"], r["a"]) == (1, 1)
    finally:
        spark.conf.unset(isolation.DERIVED_WAIT_CONF)
        serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL STRICT SERIALIZABLE")
