"""Snapshot load time, serialake vs delta-rs, on the same two tables.

- big: 10,000 commits and 50,000 live files, checkpointed (the last checkpoint 5 commits
  before the end, as a table checkpointing every 10 commits would have it);
- flat: 1,000 commits and no checkpoint (every commit file is replayed).

serialake: ``DeltaLog(path).update()`` on a fresh log object (no cache), then the file list
is materialised (``all_files``). delta-rs: ``DeltaTable(path)`` (which loads the file list).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
]}


def build(path: str, commits: int, files: int, checkpoint_at: int | None) -> None:
    """A table of ``commits`` commits adding ``files`` files in all (some commits also remove)."""
    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile, Metadata
    from serialake.storage import LocalLogStore

    log = DeltaLog(path, store=LocalLogStore(fsync=False))
    t = log.start_transaction()
    t.update_metadata(Metadata(schema_string=json.dumps(SCHEMA), partition_columns=("p",),
                               configuration={"delta.checkpointInterval": "1000000000"}))
    t.commit([], operation="CREATE TABLE")
    per = max(1, files // (commits - 1))
    n = 0
    for c in range(1, commits):
        adds = []
        for _ in range(per if n < files else 0):
            adds.append(AddFile(path=f"p={n % 100}/f-{n}.parquet", partition_values={"p": str(n % 100)},
                                size=1000 + n, modification_time=1_700_000_000_000, data_change=True,
                                stats=json.dumps({"numRecords": 100, "minValues": {"id": n},
                                                  "maxValues": {"id": n + 99}, "nullCount": {"id": 0}})))
            n += 1
        log.start_transaction().commit(adds or [AddFile(path=f"p=0/extra-{c}.parquet", partition_values={"p": "0"},
                                                        size=1, modification_time=0)], operation="WRITE")
        if checkpoint_at is not None and c == checkpoint_at:
            log.checkpoint(c)


def _median_time(fn: Callable[[], Any], runs: int) -> float:
    fn()  # warm-up (imports, page cache)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def load_serialake(path: str) -> int:
    """Snapshot ready: version, protocol, metadata and the live-file index (files built lazily)."""
    from serialake.core import DeltaLog

    snap = DeltaLog(path).update()
    return snap.num_files


def load_serialake_all_files(path: str) -> int:
    """Snapshot plus every live ``AddFile`` object built (what a full scan plan needs)."""
    from serialake.core import DeltaLog

    return len(DeltaLog(path).update().all_files)


def load_deltars(path: str) -> int:
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    return dt.version()


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="shrink the tables for a quick run")
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-load-")
    rows = []
    try:
        cases = [
            (int(10_000 * args.scale), int(50_000 * args.scale), True),
            (int(1_000 * args.scale), int(5_000 * args.scale), False),
        ]
        for commits, files, cp in cases:
            name = f"{commits:,} commits, {files:,} files, " + ("checkpointed" if cp else "no checkpoint")
            path = os.path.join(root, f"t{commits}-{int(cp)}")
            build(path, commits, files, commits - 6 if cp else None)
            ours = _median_time(lambda path=path: load_serialake(path), args.runs)
            ours_all = _median_time(lambda path=path: load_serialake_all_files(path), args.runs)
            theirs = _median_time(lambda path=path: load_deltars(path), args.runs)
            row = {"table": name, "serialake_s": ours, "serialake_all_files_s": ours_all, "delta_rs_s": theirs,
                   "ratio": ours / theirs, "ratio_all_files": ours_all / theirs}
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
