"""Blind-append commit throughput: N processes appending to one table, serialake vs delta-rs.

On the local file system, or (``--s3``) on an S3 server started on 127.0.0.1 (moto, with
conditional PUTs serialised as on S3: ``tests.s3server``), where both libraries commit by
``If-None-Match`` PUTs (delta-rs with ``conditional_put=etag``).

Data files are not written (each commit adds one pre-described file), so what is timed is
the log path: snapshot refresh, conflict checks, the atomic commit itself and its fsyncs.
delta-rs is driven through its cheapest commit path, ``DeltaTable.create_write_transaction``, after
refreshing its table object (``update_incremental()``) before each commit, as delta-rs writers do; the
refresh is timed with the commit, as serialake's snapshot refresh is.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from typing import Any

SCHEMA_FIELDS = [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]
INTERVAL = "100"  # both libraries checkpoint every 100 commits (delta-rs's default)


def _create_serialake(path: str) -> None:
    from serialake.core import DeltaLog
    from serialake.core.actions import Metadata

    txn = DeltaLog(path).start_transaction()
    txn.update_metadata(
        Metadata(
            schema_string=json.dumps({"type": "struct", "fields": SCHEMA_FIELDS}),
            configuration={"delta.checkpointInterval": INTERVAL},
        )
    )
    txn.commit([], operation="CREATE TABLE")


def _create_deltars(path: str, options: dict[str, str] | None = None) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable

    DeltaTable.create(
        path, schema=pa.schema([("id", pa.int64())]), configuration={"delta.checkpointInterval": INTERVAL},
        storage_options=options,
    )  # fmt: skip


def _worker_serialake(path: str, wid: int, duration: float, start_at: float, q: Any) -> None:
    from serialake.core import DeltaLog
    from serialake.core.actions import AddFile
    from serialake.exceptions import DeltaError

    log = DeltaLog(path)
    ok = fail = 0
    latencies: list[float] = []
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + duration
    i = 0
    while time.time() < end:
        i += 1
        add = AddFile(path=f"w{wid}-{i}.parquet", partition_values={}, size=100, modification_time=0,
                      data_change=True, stats='{"numRecords":1}')
        t0 = time.perf_counter()
        try:
            log.start_transaction().commit([add], operation="WRITE")
            ok += 1
        except DeltaError:
            fail += 1
        latencies.append(time.perf_counter() - t0)
    log.wait_for_checkpoints()
    q.put((ok, fail, latencies))


def _worker_deltars(
    path: str, wid: int, duration: float, start_at: float, q: Any, options: dict[str, str] | None = None
) -> None:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    dt = DeltaTable(path, storage_options=options)
    schema = dt.schema()
    ok = fail = 0
    latencies: list[float] = []
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + duration
    i = 0
    while time.time() < end:
        i += 1
        add = AddAction(path=f"w{wid}-{i}.parquet", size=100, partition_values={}, modification_time=0,
                        data_change=True, stats='{"numRecords":1}')
        t0 = time.perf_counter()
        try:
            # Refresh first, as a delta-rs writer does: a stale table object would make every commit
            # re-check all commits since its snapshot (serialake's timed commit includes its refresh too).
            dt.update_incremental()
            dt.create_write_transaction([add], mode="append", schema=schema)
            ok += 1
        except Exception:  # noqa: BLE001 - count every failed commit
            fail += 1
        latencies.append(time.perf_counter() - t0)
    q.put((ok, fail, latencies))


def run_one(impl: str, writers: int, duration: float, s3: Any = None) -> dict[str, Any]:
    """One run: ``writers`` processes for ``duration`` seconds; returns commits/s and failures.

    ``s3``: a started ``tests.s3server.S3Server``; the table goes in a new bucket on it.
    """
    root = tempfile.mkdtemp(prefix=f"bench-{impl}-")
    path = os.path.join(root, "t")
    options: dict[str, str] | None = None
    if s3 is not None:
        path = f"s3://{s3.new_bucket()}/t"
        os.environ.update(s3.environment())  # serialake's processes read the AWS variables
        options = {**s3.environment(), "conditional_put": "etag"}
    try:
        if impl == "serialake":
            _create_serialake(path)
        else:
            _create_deltars(path, options)
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        start_at = time.time() + 2.0  # let every process import first
        if impl == "serialake":
            procs = [ctx.Process(target=_worker_serialake, args=(path, w, duration, start_at, q))
                     for w in range(writers)]  # fmt: skip
        else:
            procs = [ctx.Process(target=_worker_deltars, args=(path, w, duration, start_at, q, options))
                     for w in range(writers)]  # fmt: skip
        for p in procs:
            p.start()
        results = [q.get(timeout=duration + 120) for _ in procs]
        for p in procs:
            p.join()
        ok = sum(r[0] for r in results)
        fail = sum(r[1] for r in results)
        lat = sorted(x for r in results for x in r[2])
        return {
            "impl": impl,
            "writers": writers,
            "commits": ok,
            "failed": fail,
            "commits_per_s": ok / duration,
            "failed_pct": 100.0 * fail / max(1, ok + fail),
            "p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
            "p99_ms": 1000 * lat[int(len(lat) * 0.99)] if lat else None,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writers", default="1,4,8")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--s3", action="store_true", help="on an S3 server started on 127.0.0.1")
    args = ap.parse_args(argv)
    server = None
    if args.s3:
        from tests.s3server import S3Server

        server = S3Server().start()
    rows = []
    try:
        for w in [int(x) for x in args.writers.split(",")]:
            for impl in ("serialake", "delta-rs"):
                r = run_one(impl, w, args.duration, server)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr)
    finally:
        if server is not None:
            server.stop()
    return rows


if __name__ == "__main__":
    main()
