"""Deletion vectors: DELETE cost, and the false-conflict rate of writers on disjoint rows.

1. DELETE of 0.1% of a 10-million-row table: serialake with deletion vectors (rows are
   marked, no data file rewritten) against delta-rs's copy-on-write DELETE, same data;
   one untimed run each, then the median of ``bench.dml.RUNS`` runs on fresh copies.
2. 8 concurrent writers each UPDATE their own rows (disjoint ids) of the same files:
   serialake with deletion vectors and row-level concurrency (8 threads on one Spark
   session) against delta-rs (8 processes). A failed update is a false conflict: no two
   writers touch the same row.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from bench.dml import ROWS, make_base, median_run


def _rs_updater(path: str, ids: list[int], q: Any) -> None:
    from deltalake import DeltaTable

    ok = failed = 0
    for i in ids:
        try:
            DeltaTable(path).update(updates={"value": "value + 1"}, predicate=f"id = {i}")
            ok += 1
        except Exception:  # noqa: BLE001 - any failed commit counts
            failed += 1
    q.put((ok, failed))


def false_conflicts_deltars(path: str, writers: int, per_writer: int) -> tuple[int, int]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rs_updater, args=(path, [w * 1000 + k for k in range(per_writer)], q))
             for w in range(writers)]
    for p in procs:
        p.start()
    res = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sum(r[0] for r in res), sum(r[1] for r in res)


def false_conflicts_serialake(spark: Any, path: str, writers: int, per_writer: int) -> tuple[int, int]:
    from serialake import DeltaTable
    from serialake.exceptions import DeltaConcurrentModificationException

    counts = [[0, 0] for _ in range(writers)]
    barrier = threading.Barrier(writers)

    def work(w: int) -> None:
        barrier.wait()
        for k in range(per_writer):
            try:
                DeltaTable.forPath(spark, path).update(f"id = {w * 1000 + k}", {"value": "value + 1"})
                counts[w][0] += 1
            except DeltaConcurrentModificationException:
                counts[w][1] += 1

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def bench_rows(quick: bool = False) -> list[dict[str, Any]]:
    from deltalake import DeltaTable as RsTable

    import serialake
    from serialake import DeltaTable

    rows = ROWS // 10 if quick else ROWS
    root = tempfile.mkdtemp(prefix="bench-dv-")
    out: list[dict[str, Any]] = []
    try:
        base = os.path.join(root, "base")
        make_base(base, rows, 10)
        spark = serialake.spark_session("serialake-bench")
        DeltaTable.forPath(spark, base).toDF().limit(10).count()
        cut = rows // 1000
        dv_base = os.path.join(root, "dv-base")
        shutil.copytree(base, dv_base)
        DeltaTable.forPath(spark, dv_base).setTableProperties({"delta.enableDeletionVectors": "true"})
        t_ours, s_ours = median_run(dv_base, os.path.join(root, "ours"),
                                    lambda p: DeltaTable.forPath(spark, p).delete(f"key < {cut}"))
        t_theirs, s_theirs = median_run(base, os.path.join(root, "theirs"),
                                        lambda p: RsTable(p).delete(f"key < {cut}"))
        row = {"benchmark": f"DELETE 0.1% of {rows:,} rows", "serialake (DV) s": t_ours,
               "delta-rs (copy-on-write) s": t_theirs, "speed-up": t_theirs / t_ours,
               "serialake MB written": s_ours["bytes_written"] / 1e6,
               "delta-rs MB written": s_theirs["bytes_written"] / 1e6}
        out.append(row)
        print(json.dumps(row), file=sys.stderr)

        writers, per = 8, 3 if quick else 5
        small_ours = os.path.join(root, "small-ours")
        make_base(small_ours, 100_000, 2)
        small_theirs = os.path.join(root, "small-theirs")
        shutil.copytree(small_ours, small_theirs)
        DeltaTable.forPath(spark, small_ours).setTableProperties({"delta.enableDeletionVectors": "true"})
        t0 = time.perf_counter()
        ok, failed = false_conflicts_serialake(spark, small_ours, writers, per)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        rs_ok, rs_failed = false_conflicts_deltars(small_theirs, writers, per)
        t_theirs = time.perf_counter() - t0
        row = {"benchmark": f"{writers} writers x {per} UPDATEs of disjoint rows in the same files",
               "serialake false conflicts %": 100.0 * failed / (ok + failed),
               "delta-rs false conflicts %": 100.0 * rs_failed / (rs_ok + rs_failed),
               "serialake s": t_ours, "delta-rs s": t_theirs}
        out.append(row)
        print(json.dumps(row), file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    bench_rows("--quick" in sys.argv)
