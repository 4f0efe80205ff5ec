"""Row-level concurrency on a partitioned table with deletion vectors: false conflicts and the check's cost.

1. ``WRITERS`` processes UPDATE their own rows (disjoint ids) of the same few files of a table
   partitioned by ``p`` with deletion vectors, through ``serialake.core`` transactions as a
   DELETE/UPDATE on deletion vectors commits: read ``p = <p> AND id = <id>`` (``filter_files``),
   mark the row in the file's vector (``remove(F, dv)`` + ``add(F, dv ∪ {row})``), write the
   row's new version in a new file of the partition. A failed commit is retried with a fresh
   transaction. No two writers touch the same row, so every conflict is a false one. Run with
   ``delta.enableRowLevelConcurrency = false`` (file level: "before") and with the default
   (row level: "after"); the false-conflict rate is conflicts / commit attempts.
2. The commit path's cost of the row-level check, in one process: a commit with no concurrent
   winner against a commit that a winner (an UPDATE of another row of the same file) forces to
   rebase; and the conflict check alone per winner (``rebasing.check_winner``, timed).

Figures are reported, never asserted. Usage: ``python -m bench.row_level_partitioned [--quick]``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from typing import Any

WRITERS = 8
PARTITIONS = 2
FILES_PER_PARTITION = 2
ROWS_PER_WRITER_PER_FILE = 64  # rows of one file = WRITERS * this
SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "x", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
]})  # fmt: skip
MAX_ATTEMPTS = 200  # per operation: a writer gives up (counted) rather than spin forever


def _write_file(table: str, ids: list[int], xs: list[int], p: int) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from serialake.core.model.actions import AddFile

    rel = f"p={p}/part-{uuid.uuid4().hex}.parquet"
    full = os.path.join(table, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array(xs, pa.int64())}), full)
    stats = {"numRecords": len(ids), "minValues": {"id": min(ids), "x": min(xs)},
             "maxValues": {"id": max(ids), "x": max(xs)}, "nullCount": {"id": 0, "x": 0}}  # fmt: skip
    return AddFile(path=rel, partition_values={"p": str(p)}, size=os.path.getsize(full), modification_time=0,
                   data_change=True, stats=json.dumps(stats))  # fmt: skip


def _rows_per_file(writers: int) -> int:
    return writers * ROWS_PER_WRITER_PER_FILE


def create(path: str, writers: int, row_level: bool) -> dict[str, tuple[int, int]]:
    """The table; returns ``path -> (partition, first id)`` of its shared files (ids contiguous per file)."""
    from serialake.core import DeltaLog
    from serialake.core.model.actions import Metadata

    conf = {"delta.enableDeletionVectors": "true", "delta.isolationLevel": "WriteSerializable",
            "delta.checkpointInterval": "1000"}  # fmt: skip
    if not row_level:
        conf["delta.enableRowLevelConcurrency"] = "false"
    txn = DeltaLog(path).start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",), configuration=conf))
    n = _rows_per_file(writers)
    files, layout = [], {}
    for k in range(PARTITIONS * FILES_PER_PARTITION):
        p, first = k // FILES_PER_PARTITION, k * n
        add = _write_file(path, list(range(first, first + n)), [0] * n, p)
        files.append(add)
        layout[add.path] = (p, first)
    txn.commit(files, operation="CREATE TABLE")
    return layout


def update_row(log: Any, path: str, p: int, row: int, row_id: int) -> tuple[Any, list[Any]]:
    """A planned UPDATE of one row of shared file ``path``: the transaction and its actions."""
    from serialake.core.dv.deletion_vectors import RowIndexSet
    from serialake.core.txn.row_level import dv_rows, write_dv

    txn = log.start_transaction()
    files = [f for f in txn.filter_files([f"p = {p} AND id = {row_id}"]) if f.path == path]
    (f,) = files
    marked = RowIndexSet.from_iter(sorted(set(dv_rows(log.table_path, f.deletion_vector)) | {row}))
    new = _write_file(log.table_path, [row_id], [1], p)
    return txn, [f.remove(), replace(f, deletion_vector=write_dv(log.table_path, marked)), new]


def _writer(path: str, layout: dict[str, tuple[int, int]], w: int, writers: int, ops: int, q: Any) -> None:
    from serialake.core import DeltaLog
    from serialake.exceptions import DeltaConcurrentModificationException

    log = DeltaLog(path)
    paths = sorted(layout)
    attempts = conflicts = gave_up = 0
    t0 = time.perf_counter()
    for k in range(ops):
        shared = paths[(k + w) % len(paths)]
        p, first = layout[shared]
        row = (k // len(paths)) * writers + w  # this writer's rows of the file: w, w + writers, ...
        for _ in range(MAX_ATTEMPTS):
            attempts += 1
            txn, actions = update_row(log, shared, p, row, first + row)
            try:
                txn.commit(actions, operation="UPDATE")
                break
            except DeltaConcurrentModificationException:
                conflicts += 1
        else:
            gave_up += 1
    q.put({"attempts": attempts, "conflicts": conflicts, "gave_up": gave_up, "s": time.perf_counter() - t0})


def false_conflicts(root: str, writers: int, ops: int, row_level: bool) -> dict[str, Any]:
    path = os.path.join(root, f"table-{'on' if row_level else 'off'}")
    layout = create(path, writers, row_level)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, layout, w, writers, ops, q)) for w in range(writers)]
    t0 = time.perf_counter()
    for pr in procs:
        pr.start()
    res = [q.get(timeout=1800) for _ in procs]
    for pr in procs:
        pr.join()
    wall = time.perf_counter() - t0
    attempts = sum(r["attempts"] for r in res)
    conflicts = sum(r["conflicts"] for r in res)
    _check_rows(path, layout, writers, ops, sum(r["gave_up"] for r in res))
    return {"attempts": attempts, "conflicts": conflicts, "gave_up": sum(r["gave_up"] for r in res),
            "false_conflict_pct": 100.0 * conflicts / max(attempts, 1),
            "committed_per_s": writers * ops / wall, "wall_s": wall}  # fmt: skip


def _check_rows(path: str, layout: dict[str, tuple[int, int]], writers: int, ops: int, gave_up: int) -> None:
    """Every row once; the updated ones (x = 1) exactly the operations that committed."""
    import pyarrow.parquet as pq

    from serialake.core import DeltaLog
    from serialake.core.txn.row_level import dv_rows

    snap = DeltaLog(path).update()
    ids: list[int] = []
    updated = 0
    for f in snap.all_files:
        t = pq.read_table(os.path.join(path, f.path))
        gone = set(dv_rows(path, f.deletion_vector))
        for i, (v, x) in enumerate(zip(t.column("id").to_pylist(), t.column("x").to_pylist())):
            if i not in gone:
                ids.append(v)
                updated += x
    n = _rows_per_file(writers) * len(layout)
    assert sorted(ids) == list(range(n)), "a row was lost or duplicated"
    assert updated == writers * ops - gave_up, (updated, writers * ops, gave_up)


def check_cost(root: str, runs: int) -> dict[str, Any]:
    """Median ms: a commit with no concurrent winner, a commit rebased over one winner, the check alone."""
    from serialake.core import DeltaLog
    from serialake.core.txn import commit_loop

    path = os.path.join(root, "cost")
    layout = create(path, 4 * runs // ROWS_PER_WRITER_PER_FILE + 1, True)  # rows for 4 * runs updates per file
    shared = sorted(layout)[0]
    p, first = layout[shared]
    log = DeltaLog(path)
    checks: list[float] = []
    real = commit_loop.check_winner

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            checks.append(time.perf_counter() - t0)

    commit_loop.check_winner = timed  # type: ignore[assignment]
    alone, rebased = [], []
    try:
        for k in range(runs):
            txn, actions = update_row(log, shared, p, 2 * k, first + 2 * k)
            t0 = time.perf_counter()
            txn.commit(actions, operation="UPDATE")
            alone.append(time.perf_counter() - t0)
        per_winner_start = len(checks)
        for k in range(runs, 2 * runs):
            txn, actions = update_row(log, shared, p, 2 * k, first + 2 * k)
            w, w_actions = update_row(log, shared, p, 2 * k + 1, first + 2 * k + 1)
            w.commit(w_actions, operation="UPDATE")
            t0 = time.perf_counter()
            txn.commit(actions, operation="UPDATE")
            rebased.append(time.perf_counter() - t0)
        per_winner = checks[per_winner_start:]
    finally:
        commit_loop.check_winner = real  # type: ignore[assignment]
    ms = 1000.0
    return {"commit_alone_ms": statistics.median(alone) * ms, "commit_rebased_ms": statistics.median(rebased) * ms,
            "check_per_winner_ms": statistics.median(per_winner) * ms,
            "checks": len(per_winner)}  # fmt: skip


def bench_rows(quick: bool = False) -> list[dict[str, Any]]:
    ops = 12 if quick else 32
    root = tempfile.mkdtemp(prefix="bench-rl-part-")
    out: list[dict[str, Any]] = []
    try:
        before = false_conflicts(root, WRITERS, ops, row_level=False)
        after = false_conflicts(root, WRITERS, ops, row_level=True)
        files = PARTITIONS * FILES_PER_PARTITION
        for label, r in (("off (delta.enableRowLevelConcurrency=false): before", before),
                         ("on (default): after", after)):  # fmt: skip
            row = {"row-level": label,
                   "workload": f"{WRITERS} processes x {ops} UPDATEs of own rows, {files} shared files, "
                               f"{PARTITIONS} partitions",
                   "commit attempts": r["attempts"], "false conflicts": r["conflicts"],
                   "false conflicts %": r["false_conflict_pct"], "given up": r["gave_up"],
                   "UPDATEs/s": r["committed_per_s"]}  # fmt: skip
            out.append(row)
            print(json.dumps(row), file=sys.stderr)
        cost = check_cost(root, 15 if quick else 40)
        row = {"row-level": "commit path (1 process)",
               "workload": "UPDATE of one row of a shared file: alone vs rebased over a winner's UPDATE of another row",
               "commit, no winner ms": cost["commit_alone_ms"], "commit, rebased ms": cost["commit_rebased_ms"],
               "row-level check per winner ms": cost["check_per_winner_ms"],
               "rebased / alone": cost["commit_rebased_ms"] / max(cost["commit_alone_ms"], 1e-9)}  # fmt: skip
        out.append(row)
        print(json.dumps(row), file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    bench_rows("--quick" in sys.argv)
