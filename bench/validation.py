"""Cost of validating one transaction against 1,000 winning commits of 100 files each.

T reads one partition and starts; then 1,000 commits land, each adding 100 files to other
partitions; T commits. The time of T's commit is the time to read and check every winner
(from disk: T's log has none of them cached). delta-rs is measured the same way: a
transaction created on a table object loaded before the winners, committed after them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
]}


def _winners(path: str, n_commits: int, n_files: int) -> None:
    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile

    log = DeltaLog(path)
    for c in range(n_commits):
        adds = [
            AddFile(path=f"p={c % 50}/w{c}-{i}.parquet", partition_values={"p": str(c % 50)}, size=1000,
                    modification_time=0, data_change=True,
                    stats='{"numRecords":10,"minValues":{"id":1},"maxValues":{"id":10},"nullCount":{"id":0}}')
            for i in range(n_files)
        ]
        log.start_transaction().commit(adds, operation="WRITE")


def bench_serialake(root: str, n_commits: int, n_files: int) -> float:
    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile, Metadata

    path = os.path.join(root, "ours")
    t = DeltaLog(path).start_transaction()
    t.update_metadata(Metadata(schema_string=json.dumps(SCHEMA), partition_columns=("p",),
                               configuration={"delta.isolationLevel": "Serializable",
                                              "delta.checkpointInterval": "100000"}))
    t.commit([], operation="CREATE TABLE")
    loser = DeltaLog(path).start_transaction()
    loser.filter_files(["p = 999"])
    _winners(path, n_commits, n_files)
    t0 = time.perf_counter()
    v = loser.commit([AddFile(path="p=999/mine.parquet", partition_values={"p": "999"}, size=1,
                              modification_time=0)], operation="WRITE")
    dt = time.perf_counter() - t0
    assert v == n_commits + 1 and loser.committed.winners_checked == n_commits
    return dt


def bench_deltars(root: str, n_commits: int, n_files: int) -> float:
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, CommitProperties

    path = os.path.join(root, "rs")
    schema = pa.schema([("id", pa.int64()), ("p", pa.int32())])
    DeltaTable.create(path, schema=schema, partition_by=["p"],
                      configuration={"delta.checkpointInterval": "100000"})
    loser = DeltaTable(path)
    _winners(path, n_commits, n_files)  # same commits, written by the same code
    add = AddAction(path="p=999/mine.parquet", size=1, partition_values={"p": "999"}, modification_time=0,
                    data_change=True, stats='{"numRecords":1}')
    t0 = time.perf_counter()
    loser.create_write_transaction([add], mode="append", schema=loser.schema(), partition_by=["p"],
                                   commit_properties=CommitProperties(max_commit_retries=n_commits + 10))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--files", type=int, default=100)
    args = ap.parse_args(argv)
    rows = []
    for impl, fn in (("serialake", bench_serialake), ("delta-rs", bench_deltars)):
        root = tempfile.mkdtemp(prefix="bench-validate-")
        try:
            secs = fn(root, args.commits, args.files)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        row = {"impl": impl, "winners": args.commits, "files_per_winner": args.files, "validate_s": secs}
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
