"""Transactions across tables (``core.txn.group``): their commit latency and abort rate, against
the same writes committed as separate single-table commits, in the same run.

**Latency** (one process, no contention): a transaction writes ``N`` tables (2 or 10), each
one appended file in partition ``p = k`` after reading that partition. As a group: one
``GroupTransaction`` (a lock commit in each table, a staged body each, one decision record,
the publications). As separate commits: one ``OptimisticTransaction`` per table, committed
one after the other (no atomicity, reads of other tables unchecked). The two alternate
iteration by iteration, so load on a shared machine falls on both; p50 and p99 of the whole
transaction (start, read, commit) and their ratios.

**Contention**: ``P`` processes, each running transactions for a fixed time over a pool of
``M`` tables of ``K`` partitions. Each transaction reads partition ``k`` of 2 tables and
appends to partition ``k`` of 2 tables (picked at random; reads feeding writes: a
concurrent write to a partition read is a conflict). As groups: every read is validated and
a conflict aborts the whole transaction (nothing committed anywhere). As separate commits:
each written table commits on its own, validating only the reads of that table; a
transaction whose second commit conflicts after its first landed is counted as **partial**
(the state no serial run gives, which the group prevents). No retries: an abort is counted
and the process goes on with its next transaction.

Data files are not written (each commit adds one pre-described file), so what is timed is
the log path, as in ``bench.commit_throughput``. Local file system; no delta-rs column:
delta-rs has no transactions across tables (docs/concurrency.md, "Transactions across
tables").

Usage: ``python -m bench.multi_table_commits [--quick]`` (``python -m bench.run --only groups``
writes the rows into bench/README.md).
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
]})  # fmt: skip


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(len(values) * q) - 1))] * 1000


def _create(path: str) -> str:
    from serialake.core import DeltaLog
    from serialake.core.model.actions import Metadata

    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",),
                                 configuration={"delta.checkpointInterval": "100"}))
    txn.commit([], operation="CREATE TABLE")
    return log.table_path


def _add(k: int) -> Any:
    from serialake.core.model.actions import AddFile

    return AddFile(path=f"p={k}/part-{uuid.uuid4().hex}.parquet", partition_values={"p": str(k)}, size=100,
                   modification_time=0, data_change=True, stats='{"numRecords":10}')


def _group(reads: list[str], writes: list[str], k: int) -> None:
    """One transaction as a group: every read validated, all or nothing."""
    from serialake.core.txn.group import GroupTransaction

    pred = [f"p = {k}"]
    g = GroupTransaction()
    for path in reads:
        if path not in writes:
            g.read(path, pred)
    for path in writes:
        txn = g.write(path)
        if path in reads:
            txn.filter_files(pred)
        g.add(txn, [_add(k)], "WRITE")
    g.commit()


def _separate(reads: list[str], writes: list[str], k: int) -> int:
    """The same writes as single-table commits, one after the other; how many landed before a conflict."""
    from serialake.core import DeltaLog
    from serialake.exceptions import DeltaConcurrentModificationException

    pred = [f"p = {k}"]
    done = 0
    for path in writes:
        txn = DeltaLog.for_table(path).start_transaction()
        if path in reads:
            txn.filter_files(pred)
        try:
            txn.commit([_add(k)], "WRITE")
        except DeltaConcurrentModificationException as e:
            e.committed_before = done  # type: ignore[attr-defined]
            raise
        done += 1
    return done


def latency(n_tables: int, iterations: int) -> dict[str, Any]:
    """p50 / p99 of an ``n_tables`` transaction as one group and as separate commits (alternating)."""
    root = tempfile.mkdtemp(prefix="serialake-groups-bench-")
    try:
        paths = [_create(os.path.join(root, f"t{i}")) for i in range(n_tables)]
        group: list[float] = []
        separate: list[float] = []
        for i in range(iterations + 3):  # the first 3 of each: warm-up
            k = i % 4
            for kind in (("group", "separate") if i % 2 else ("separate", "group")):
                t = time.perf_counter()
                if kind == "group":
                    _group(paths, paths, k)
                else:
                    _separate(paths, paths, k)
                if i >= 3:
                    (group if kind == "group" else separate).append(time.perf_counter() - t)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "workload": f"{n_tables} tables, 1 append each (1 process)",
        "transactions": iterations,
        "group p50 ms": _p(group, 0.5),
        "group p99 ms": _p(group, 0.99),
        "separate p50 ms": _p(separate, 0.5),
        "separate p99 ms": _p(separate, 0.99),
        "ratio p50 (group/separate)": statistics.median(group) / statistics.median(separate),
        "ratio p99 (group/separate)": _p(group, 0.99) / _p(separate, 0.99),
    }


def _worker(kind: str, paths: list[str], parts: int, start: float, seconds: float, seed: int, out: str) -> None:
    from serialake.core import DeltaLog
    from serialake.exceptions import DeltaConcurrentModificationException

    DeltaLog.clear_cache()
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    times: list[float] = []
    while time.time() < start:
        time.sleep(0.001)
    stop = start + seconds
    while time.time() < stop:
        reads, writes, k = rng.sample(paths, 2), sorted(rng.sample(paths, 2)), rng.randrange(parts)
        t = time.perf_counter()
        try:
            if kind == "group":
                _group(reads, writes, k)
            else:
                _separate(reads, writes, k)
            counts["committed"] += 1
            times.append(time.perf_counter() - t)
        except DeltaConcurrentModificationException as e:
            counts["partial" if getattr(e, "committed_before", 0) else "aborted"] += 1
            counts[f"reason {e.conflict_reason}"] += 1
        except Exception as e:  # noqa: BLE001 - counted, reported, the run goes on
            counts[f"failed {type(e).__name__}"] += 1
    with open(out, "w") as f:
        json.dump({"counts": counts, "times": times}, f)


def contention(kind: str, processes: int, tables: int, parts: int, seconds: float) -> dict[str, Any]:
    """``processes`` writers over ``tables`` tables for ``seconds``: commits, aborts, partial commits."""
    root = tempfile.mkdtemp(prefix="serialake-groups-contention-")
    try:
        paths = [_create(os.path.join(root, f"t{i}")) for i in range(tables)]
        ctx = mp.get_context("fork")
        start = time.time() + 0.5
        outs = [os.path.join(root, f"w{i}.json") for i in range(processes)]
        procs = [ctx.Process(target=_worker, args=(kind, paths, parts, start, seconds, i, outs[i]))
                 for i in range(processes)]  # fmt: skip
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(seconds + 120)
        counts: Counter[str] = Counter()
        times: list[float] = []
        for out in outs:
            with open(out) as f:
                got = json.load(f)
            counts.update(got["counts"])
            times += got["times"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    tried = counts["committed"] + counts["aborted"] + counts["partial"]
    reasons = ", ".join(f"{k[7:]} {v}" for k, v in sorted(counts.items()) if k.startswith("reason "))
    failed = ", ".join(f"{k[7:]} {v}" for k, v in sorted(counts.items()) if k.startswith("failed "))
    return {
        "workload": f"{processes} processes x {seconds:g} s, {tables} tables x {parts} partitions, "
        "read 2 write 2 (same partition)",
        "commits as": "one group per transaction" if kind == "group" else "separate single-table commits",
        "transactions": tried,
        "committed": counts["committed"],
        "aborted (nothing written)": counts["aborted"],
        "partial (some tables written)": counts["partial"],
        "abort %": 100.0 * (counts["aborted"] + counts["partial"]) / max(tried, 1),
        "committed/s": counts["committed"] / seconds,
        "committed p50 ms": _p(times, 0.5) if times else None,
        "conflict reasons": reasons or "–",
        **({"other failures": failed} if failed else {}),
    }


def bench_rows(quick: bool) -> list[dict[str, Any]]:
    iterations = 30 if quick else 200
    rows = [latency(n, iterations) for n in (2, 10)]
    seconds = 3.0 if quick else 10.0
    for processes, tables, parts in ((4, 4, 2), (4, 8, 4)):
        for kind in ("group", "separate"):
            rows.append(contention(kind, processes, tables, parts, seconds))
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    rows = bench_rows("--quick" in (argv or []))
    for r in rows:
        print(json.dumps(r))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
