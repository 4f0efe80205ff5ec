"""Latency of whole queries over several tables at STRICT SERIALIZABLE and SERIALIZABLE.

``N`` tables (2 or 10) of 1,000 rows each; ``C`` committer processes (0, 2, 8) commit to
them round-robin as fast as they can (commits that add no rows, so every query reads the
same data and only the log moves). One query reads every table:
``SELECT (SELECT max(k) FROM t0) + (SELECT max(k) FROM t1) + ...``.

- serialake: ``serialake.sql`` in one SparkSession, at STRICT SERIALIZABLE (a fresh
  consistent cut per query; the cut's retries under load are counted) and at
  SERIALIZABLE (the session's cut served while this process has seen nothing newer);
  p50 and p99 of the whole query (bind, cut, Spark plan and run, collect);
- delta-rs: the same query through ``QueryBuilder`` (DataFusion) over one kept
  ``DeltaTable`` per table, each refreshed with ``update_incremental()`` before the query,
  one after the other (no cut: the versions may never have coexisted). A refresh that
  fails with a spurious log "gap" while commits land is counted and the table loaded again.

The ratio compares the STRICT query with delta-rs' query: it includes Spark's per-query
cost (planning and a job), which delta-rs' in-process engine does not pay.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

_COMMITTER = r"""
import sys, time
from serialake.core import DeltaLog
paths, stop = sys.argv[1].split(","), float(sys.argv[2])
i = 0
while time.time() < stop:
    DeltaLog.for_table(paths[i % len(paths)]).start_transaction().commit([], "WRITE")
    i += 1
"""


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(len(values) * q) - 1))] * 1000


def _load(cls: Any, path: str) -> Any:
    """A delta-rs table object, retried through its spurious log "gap" (``consistent_reads``)."""
    from bench.consistent_reads import _load_until_ok

    table = _load_until_ok(cls, path)
    if table is None:
        raise RuntimeError(f"delta-rs could not load {path} within 10 s while commits landed")
    return table


def _query(n: int) -> str:
    return "SELECT " + " + ".join(f"(SELECT max(k) FROM mtq_t{i})" for i in range(n)) + " AS total"


def _measure(spark: Any, n_tables: int, committers: int, seconds: float) -> dict[str, Any]:
    from deltalake import DeltaTable, QueryBuilder

    import serialake
    from serialake.core.tables import cut

    root = tempfile.mkdtemp(prefix="serialake-mtq-bench-")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        paths = []
        for i in range(n_tables):
            path = os.path.join(root, f"t{i}")
            serialake.write(spark.range(1000).selectExpr("id AS k"), path)
            serialake.sql.register(f"mtq_t{i}", path)
            paths.append(path)
        expected = n_tables * 999
        sql = _query(n_tables)
        stop = time.time() + 3 * seconds + 30
        procs = [subprocess.Popen([sys.executable, "-c", _COMMITTER, ",".join(paths), str(stop)])
                 for _ in range(committers)]  # fmt: skip
        time.sleep(1.0 if committers else 0)
        results: dict[str, list[float]] = {}
        before = dict(cut.CUT_STATS)
        for level in ("STRICT SERIALIZABLE", "SERIALIZABLE"):
            serialake.sql(spark, f"SET TRANSACTION ISOLATION LEVEL {level}")
            times = results.setdefault(level, [])
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline or len(times) < 5:
                t = time.perf_counter()
                row = serialake.sql(spark, sql).first()
                times.append(time.perf_counter() - t)
                assert row is not None and row["total"] == expected, row
            if level == "STRICT SERIALIZABLE":
                cuts = cut.CUT_STATS["cuts"] - before["cuts"]
                retries = (cut.CUT_STATS["attempts"] - before["attempts"] - cuts) / max(cuts, 1)
        serialake.sql(spark, "SET TRANSACTION ISOLATION LEVEL STRICT SERIALIZABLE")
        kept = [_load(DeltaTable, p) for p in paths]
        theirs, failed = [], 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline or len(theirs) < 5:
            t = time.perf_counter()
            qb = QueryBuilder()
            for i, table in enumerate(kept):
                try:
                    table.update_incremental()
                except Exception:  # noqa: BLE001 - a spurious "gap" while commits land: load it again
                    failed += 1
                    kept[i] = table = _load(DeltaTable, paths[i])
                qb.register(f"mtq_t{i}", table)
            got = qb.execute(sql).read_all().column(0)[0].as_py()
            theirs.append(time.perf_counter() - t)
            assert got == expected, got
    finally:
        for p in procs:
            p.kill()
            p.wait(30)
        for i in range(n_tables):
            serialake.sql.unregister(f"mtq_t{i}")
        shutil.rmtree(root, ignore_errors=True)
    strict, serializable = results["STRICT SERIALIZABLE"], results["SERIALIZABLE"]
    return {
        "tables": n_tables,
        "committer processes": committers,
        "STRICT p50 ms": _p(strict, 0.5),
        "STRICT p99 ms": _p(strict, 0.99),
        "cut retries per query": retries,
        "SERIALIZABLE p50 ms": _p(serializable, 0.5),
        "SERIALIZABLE p99 ms": _p(serializable, 0.99),
        "delta-rs refresh + query p50 ms": _p(theirs, 0.5),
        "ratio STRICT p50 (serialake/delta-rs)": statistics.median(strict) / statistics.median(theirs),
        "delta-rs refresh errors": failed,
    }


def bench_rows(quick: bool) -> list[dict[str, Any]]:
    import serialake

    spark = serialake.spark_session()
    seconds = 3.0 if quick else 8.0
    _measure(spark, 2, 0, 1.0)  # warm-up: Spark's first jobs compile code
    return [_measure(spark, n, c, seconds) for n in (2, 10) for c in (0, 2, 8)]


if __name__ == "__main__":
    import json

    for r in bench_rows("--quick" in sys.argv):
        print(json.dumps(r))
