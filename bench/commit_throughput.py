"""Blind-append commit throughput: N processes appending to one table, serialake vs delta-rs.

On the local file system, or (``--s3``) on an S3 server started on 127.0.0.1 (moto, with
conditional PUTs serialised as on S3: ``tests.s3server``), where both libraries commit by
``If-None-Match`` PUTs (delta-rs with ``conditional_put=etag``).

Data files are not written (each commit adds one pre-described file), so what is timed is
the log path: snapshot refresh, conflict checks, the atomic commit itself and its fsyncs.
delta-rs is driven through its cheapest commit path, ``DeltaTable.create_write_transaction``, after
refreshing its table object (``update_incremental()``) before each commit, as delta-rs writers do; the
refresh is timed with the commit, as serialake's snapshot refresh is.

On the local file system the same run also measures the limit (``impl="limit"``): N
processes doing nothing but what a minimal correct log store must do per commit, in one
``_delta_log`` directory: write a ~1 KB commit body to an unnamed file (``O_TMPFILE``),
fsync it, link it to the next free ``%020d.json`` name (``linkat`` of the descriptor with
``AT_EMPTY_PATH``, the name relative to the directory's descriptor; it fails on EEXIST: then
the next name is tried, no sleep, no reading), fsync the directory (as serialake's store
does). Its operations/s bound what any commit path can reach on this machine.

Each row also says where a commit's time went, per commit, summed over the writer processes
for their timed window: ``user_us`` and ``sys_us`` (``getrusage``), and on Linux ``run_us``
(on a CPU), ``runq_us`` (ready, waiting for a CPU) and ``blocked_us`` (the rest of the wall
time: fsyncs and other waits), from ``/proc/self/task/*/schedstat``. ``blocked_us`` means
that where one thread does the work (serialake's and the limit's writers; not delta-rs's
threaded runtime). Processes a writer starts (serialake's checkpoint worker) are not counted.
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from typing import Any

SCHEMA_FIELDS = [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]
INTERVAL = "100"  # both libraries checkpoint every 100 commits (delta-rs's default)


def _create_serialake(path: str) -> None:
    from serialake.core import DeltaLog
    from serialake.core.model.actions import Metadata

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


def _started(start: Any, duration: float) -> float:
    """Report this process ready (imports done), wait for all to be, and return when to stop."""
    ready, go = start
    ready.put(None)
    go.wait()
    return time.time() + duration


def _usage() -> tuple[float, ...]:
    """This process's (wall, user CPU, system CPU, on-CPU, waited for a CPU) seconds so far, all threads.

    The last two from Linux's ``/proc/self/task/*/schedstat``, for the threads alive now (a
    thread that ended in between is not counted); NaN where it cannot be read.
    """
    r = resource.getrusage(resource.RUSAGE_SELF)
    run = wait = 0.0
    try:
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/schedstat") as f:
                    on_cpu, waited = f.read().split()[:2]
            except FileNotFoundError:
                continue  # the thread ended just now
            run += int(on_cpu) / 1e9
            wait += int(waited) / 1e9
    except (OSError, ValueError):
        run = wait = math.nan
    return time.perf_counter(), r.ru_utime, r.ru_stime, run, wait


def _spent(before: tuple[float, ...]) -> tuple[float, ...]:
    """``_usage()`` since ``before``."""
    return tuple(b - a for a, b in zip(before, _usage(), strict=True))


def _summed(spents: list[tuple[float, ...]]) -> tuple[float, ...]:
    """Several processes' (or runs') ``_spent`` times, added up field by field."""
    return tuple(sum(field) for field in zip(*spents, strict=True))


def _worker_serialake(path: str, wid: int, duration: float, start: Any, q: Any) -> None:
    import pyarrow as pa

    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile
    from serialake.exceptions import DeltaError

    log = DeltaLog(path)
    log.update()  # loaded before the start, as delta-rs's table is
    # What the process's first checkpoint would import, once, inside the timed window: pyarrow's first
    # conversion of Python values imports pandas when it is installed (~0.4 s of CPU per process).
    pa.array([0])
    ok = fail = 0
    latencies: list[float] = []
    end = _started(start, duration)
    before = _usage()
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
    spent = _spent(before)
    log.wait_for_checkpoints()
    q.put((ok, fail, latencies, spent))


#: One limit operation's commit body: ~1 KB, about a blind append's commitInfo and add, padded.
_LIMIT_BODY = (
    json.dumps({"commitInfo": {"timestamp": 0, "operation": "WRITE", "isBlindAppend": True, "txnId": "0" * 36,
                               "operationParameters": {}, "engineInfo": "limit", "pad": "x" * 600}}) + "\n"
    + json.dumps({"add": {"path": "part-00000.parquet", "partitionValues": {}, "size": 100,
                          "modificationTime": 0, "dataChange": True, "stats": '{"numRecords":1}'}}) + "\n"
).encode()


def _worker_limit(path: str, wid: int, duration: float, start: Any, q: Any) -> None:
    """The limit: only fsynced put-if-absent creations of the next free commit name (module docstring)."""
    libc = ctypes.CDLL(None, use_errno=True)
    linkat = libc.linkat
    linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    at_empty_path = 0x1000
    log_dir = os.path.join(path, "_delta_log")
    dir_fd = os.open(log_dir, os.O_RDONLY)
    names = [n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit()]
    version = max((int(n[:20]) for n in names), default=-1) + 1
    ok = 0
    latencies: list[float] = []
    end = _started(start, duration)
    before = _usage()
    while time.time() < end:
        t0 = time.perf_counter()
        fd = os.open(log_dir, os.O_TMPFILE | os.O_WRONLY, 0o644)
        try:
            os.write(fd, _LIMIT_BODY)
            os.fsync(fd)
            while linkat(fd, b"", dir_fd, f"{version:020d}.json".encode(), at_empty_path) != 0:
                err = ctypes.get_errno()
                if err != errno.EEXIST:
                    raise OSError(err, os.strerror(err))
                version += 1  # taken: the next name, at once
        finally:
            os.close(fd)
        os.fsync(dir_fd)
        version += 1
        ok += 1
        latencies.append(time.perf_counter() - t0)
    spent = _spent(before)
    os.close(dir_fd)
    q.put((ok, 0, latencies, spent))


def _worker_deltars(
    path: str, wid: int, duration: float, start: Any, q: Any, options: dict[str, str] | None = None
) -> None:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    dt = DeltaTable(path, storage_options=options)
    schema = dt.schema()
    ok = fail = 0
    latencies: list[float] = []
    end = _started(start, duration)
    before = _usage()
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
    q.put((ok, fail, latencies, _spent(before)))


def run_one(
    impl: str, writers: int, duration: float, s3: Any = None, parent: str | None = None
) -> dict[str, Any]:
    """One run: ``writers`` processes for ``duration`` seconds; returns commits/s and failures.

    ``s3``: a started ``tests.s3server.S3Server``; the table goes in a new bucket on it.
    ``parent``: the local directory to make the table in, and leave it in (a new temporary one,
    removed after the run, when None).
    """
    return _row(impl, writers, duration, *_run(impl, writers, duration, s3, parent))


def _run(
    impl: str, writers: int, duration: float, s3: Any, parent: str | None
) -> tuple[int, int, list[float], tuple[float, ...]]:
    """``run_one``'s commits, failed commits, latencies and the processes' summed ``_spent`` times."""
    root = tempfile.mkdtemp(prefix=f"bench-{impl}-", dir=parent)
    path = os.path.join(root, "t")
    options: dict[str, str] | None = None
    if s3 is not None:
        path = f"s3://{s3.new_bucket()}/t"
        os.environ.update(s3.environment())  # serialake's processes read the AWS variables
        options = {**s3.environment(), "conditional_put": "etag"}
    try:
        if impl == "delta-rs":
            _create_deltars(path, options)
        else:
            _create_serialake(path)  # the limit appends to a table serialake created
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        # Every process imports first, then all start together (a fixed delay was too short on a loaded machine).
        start = (ctx.Queue(), ctx.Event())
        if impl in ("serialake", "limit"):
            target = _worker_serialake if impl == "serialake" else _worker_limit
            procs = [ctx.Process(target=target, args=(path, w, duration, start, q)) for w in range(writers)]
        else:
            procs = [ctx.Process(target=_worker_deltars, args=(path, w, duration, start, q, options))
                     for w in range(writers)]  # fmt: skip
        for p in procs:
            p.start()
        _wait_ready(start[0], procs)
        start[1].set()
        results = [q.get(timeout=duration + 120) for _ in procs]
        for p in procs:
            p.join()
        ok, fail = sum(r[0] for r in results), sum(r[1] for r in results)
        return ok, fail, [x for r in results for x in r[2]], _summed([r[3] for r in results])
    finally:
        if parent is None:  # (a parent's tables are removed with it, after every run: see _local_rows)
            shutil.rmtree(root, ignore_errors=True)


def _wait_ready(ready: Any, procs: list[Any]) -> None:
    """Wait until every process reported ready; fail at once if one died first."""
    import queue

    waiting = len(procs)
    deadline = time.monotonic() + 300
    while waiting:
        try:
            ready.get(timeout=1)
            waiting -= 1
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                codes = [p.exitcode for p in procs]
                raise RuntimeError(f"benchmark workers did not start (exit codes {codes})") from None


def _row(
    impl: str, writers: int, duration: float, ok: int, fail: int, latencies: list[float], spent: tuple[float, ...]
) -> dict[str, Any]:
    lat = sorted(latencies)
    row = {
        "impl": impl,
        "writers": writers,
        "commits": ok,
        "failed": fail,
        "commits_per_s": ok / duration,
        "failed_pct": 100.0 * fail / max(1, ok + fail),
        "p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
        "p99_ms": 1000 * lat[int(len(lat) * 0.99)] if lat else None,
    }
    wall, user, system, run, runq = spent
    per = 1e6 / max(ok + fail, 1)  # seconds in all processes -> microseconds per commit tried
    row.update(user_us=user * per, sys_us=system * per)
    if not math.isnan(run):
        row.update(run_us=run * per, runq_us=runq * per, blocked_us=max(wall - run - runq, 0.0) * per)
    return row


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writers", default="1,4,8")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--s3", action="store_true", help="on an S3 server started on 127.0.0.1")
    ap.add_argument("--impls", default="", help="only these, e.g. limit,serialake (default: all)")
    args = ap.parse_args(argv)
    server = None
    if args.s3:
        from tests.s3server import S3Server

        server = S3Server().start()
    wanted = [i for i in ("limit", "serialake", "delta-rs") if not args.impls or i in args.impls.split(",")]
    rows = []
    parent = None if server is not None else tempfile.mkdtemp(prefix="bench-commits-")
    try:
        for w in [int(x) for x in args.writers.split(",")]:
            if parent is not None:
                rows += _local_rows(w, args.duration, wanted, parent)
                continue
            for impl in [i for i in wanted if i != "limit"]:  # on S3 the server, not the disk, bounds commits
                rows.append(run_one(impl, w, args.duration, server))
                print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        if server is not None:
            server.stop()
        if parent is not None:
            shutil.rmtree(parent, ignore_errors=True)
    return rows


def _local_rows(writers: int, duration: float, impls: list[str], parent: str) -> list[dict[str, Any]]:
    """The local runs at one writer count, each table in ``parent``, all removed only at the end.

    Creating a file costs ext4 0.03 to 0.3 ms of CPU finding a free inode, the most where many
    were freed in the last minutes (it skips recently deleted inodes): removing one run's table
    before the next would slow the next. The limit runs half its time before the libraries and
    half after, so a change of the machine's load during the run shifts it as it shifts them.
    """
    rows: list[dict[str, Any]] = []
    libraries = [i for i in impls if i != "limit"]
    halves = []
    if "limit" in impls:
        halves.append(_run("limit", writers, duration / 2, None, parent))
    for impl in libraries:
        rows.append(run_one(impl, writers, duration, parent=parent))
        print(json.dumps(rows[-1]), file=sys.stderr)
    if "limit" in impls:
        halves.append(_run("limit", writers, duration / 2, None, parent))
        ok, latencies = sum(h[0] for h in halves), [x for h in halves for x in h[2]]
        limit = _row("limit", writers, duration, ok, 0, latencies, _summed([h[3] for h in halves]))
        limit["commits_per_s_halves"] = [2 * h[0] / duration for h in halves]
        rows.insert(0, limit)
        print(json.dumps(limit), file=sys.stderr)
    return rows


if __name__ == "__main__":
    main()
