"""Copy-on-write DML and OPTIMIZE, serialake (Spark) vs delta-rs, on the same data in one run.

A 10-million-row table (10 files of 1M rows, written once by delta-rs so both start from
identical files) is copied fresh for every operation and library:
DELETE of 1% of rows, UPDATE of 1%, MERGE of a 1% upsert batch (half updates, half
inserts), and OPTIMIZE of a 1,000-small-file table. Spark start-up is excluded: each
operation runs once untimed per library (JIT and code generation warm up, as in any
long-lived pipeline), then ``RUNS`` times on fresh copies; the median is reported. Files
rewritten and bytes written come from each commit.
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

ROWS = 10_000_000
FILES = 10


def make_base(path: str, rows: int, files: int) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(7)
    per = rows // files
    for i in range(files):
        ids = np.arange(i * per, (i + 1) * per, dtype=np.int64)
        table = pa.table({
            "id": ids,
            "key": rng.integers(0, rows, per, dtype=np.int64),
            "value": rng.random(per),
            "name": pa.array(np.char.add("n", (ids % 1000).astype(str))),
        })
        write_deltalake(path, table, mode="append")


def make_small_files(path: str, n_files: int, rows_per_file: int) -> None:
    """A table of ``n_files`` small Parquet files, written with pyarrow, committed in one commit."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile, Metadata

    os.makedirs(path, exist_ok=True)
    adds = []
    for i in range(n_files):
        ids = np.arange(i * rows_per_file, (i + 1) * rows_per_file, dtype=np.int64)
        name = f"part-{i:05d}.parquet"
        pq.write_table(pa.table({"id": ids, "value": np.random.default_rng(i).random(rows_per_file)}),
                       os.path.join(path, name))
        stats = {"numRecords": rows_per_file, "minValues": {"id": int(ids[0])}, "maxValues": {"id": int(ids[-1])},
                 "nullCount": {"id": 0, "value": 0}}
        adds.append(AddFile(path=name, partition_values={}, size=os.path.getsize(os.path.join(path, name)),
                            modification_time=0, data_change=True, stats=json.dumps(stats)))
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "value", "type": "double", "nullable": True, "metadata": {}}]}
    txn = DeltaLog(path).start_transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(schema)))
    txn.commit(adds, operation="WRITE")


def last_commit_summary(path: str) -> dict[str, Any]:
    """Files added/removed and bytes written by a table's latest commit (read with our core)."""
    from serialake.core import DeltaLog

    log = DeltaLog(path)
    snap = log.update()
    entry = log.read_commit(snap.version)
    adds = [a for a in entry.actions if type(a).__name__ == "AddFile"]
    removes = [a for a in entry.actions if type(a).__name__ == "RemoveFile"]
    new_paths = {r.path for r in removes}
    data_bytes = sum(a.size or 0 for a in adds if a.path not in new_paths or a.deletion_vector is None)
    dv_files = {a.deletion_vector.path_or_inline_dv: a.deletion_vector.size_in_bytes
                for a in adds if a.deletion_vector is not None}
    return {"files_added": len(adds), "files_removed": len(removes),
            "bytes_written": data_bytes + sum(dv_files.values())}


RUNS = 3  # timed runs per operation and library; the median is reported
WARMUPS = 1  # untimed runs first (the JVM's JIT and Spark's code generation warm up)


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_run(base: str, scratch: str, fn: Callable[[str], Any], *, runs: int = RUNS,
               warmups: int = WARMUPS) -> tuple[float, dict[str, Any]]:
    """Median seconds of ``fn(copy)`` over ``runs`` fresh copies of ``base`` (after ``warmups``
    untimed ones), and the commit summary of the last run. Copying is not timed."""
    times: list[float] = []
    summary: dict[str, Any] = {}
    for i in range(warmups + runs):
        p = f"{scratch}-{i}"
        shutil.copytree(base, p)
        try:
            t = _timed(lambda p=p: fn(p))
            summary = last_commit_summary(p)
        finally:
            shutil.rmtree(p, ignore_errors=True)
        if i >= warmups:
            times.append(t)
    return statistics.median(times), summary


def ops_serialake(spark: Any, rows: int) -> dict[str, Callable[[str], Any]]:
    from serialake import DeltaTable

    cut = rows // 100

    def merge(p: str) -> Any:
        # Half the batch updates existing rows (every other id of the last 1%), half inserts new ids.
        src = spark.range(0, cut).selectExpr(
            f"{rows - cut} + id * 2 as id", "id as key", "0.5 as value", "'merged' as name")
        return (DeltaTable.forPath(spark, p).alias("t").merge(src.alias("s"), "t.id = s.id")
                .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    return {
        "DELETE 1%": lambda p: DeltaTable.forPath(spark, p).delete(f"key < {cut}"),
        "UPDATE 1%": lambda p: DeltaTable.forPath(spark, p).update(f"key < {cut}", {"value": "value + 1"}),
        "MERGE 1% upsert": merge,
    }


def ops_deltars(rows: int) -> dict[str, Callable[[str], Any]]:
    import numpy as np
    import pyarrow as pa
    from deltalake import DeltaTable

    cut = rows // 100

    def merge(p: str) -> Any:
        ids = np.arange(0, cut, dtype=np.int64)
        src = pa.table(
            {"id": rows - cut + ids * 2, "key": ids, "value": np.full(cut, 0.5), "name": pa.array(["merged"] * cut)}
        )
        return (DeltaTable(p).merge(src, "t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all().when_not_matched_insert_all().execute())

    return {
        "DELETE 1%": lambda p: DeltaTable(p).delete(f"key < {cut}"),
        "UPDATE 1%": lambda p: DeltaTable(p).update(updates={"value": "value + 1"}, predicate=f"key < {cut}"),
        "MERGE 1% upsert": merge,
    }


def bench_rows(quick: bool = False) -> list[dict[str, Any]]:
    from deltalake import DeltaTable as RsTable

    import serialake
    from serialake import DeltaTable

    rows = ROWS // 10 if quick else ROWS
    root = tempfile.mkdtemp(prefix="bench-dml-")
    out: list[dict[str, Any]] = []
    try:
        base = os.path.join(root, "base")
        make_base(base, rows, FILES)
        small = os.path.join(root, "small")
        make_small_files(small, 1000, 1000)
        spark = serialake.spark_session("serialake-bench")
        DeltaTable.forPath(spark, base).toDF().limit(10).count()  # start Spark before timing
        ours, theirs = ops_serialake(spark, rows), ops_deltars(rows)
        ours["OPTIMIZE"] = lambda p: DeltaTable.forPath(spark, p).optimize().executeCompaction()
        theirs["OPTIMIZE"] = lambda p: RsTable(p).optimize.compact()
        for name in ours:
            label = "OPTIMIZE 1,000 files of 1,000 rows" if name == "OPTIMIZE" else f"{name} of {rows:,} rows"
            row: dict[str, Any] = {"operation": label}
            source = small if name == "OPTIMIZE" else base
            for impl, fn in (("serialake", ours[name]), ("delta-rs", theirs[name])):
                row[f"{impl} s"], s = median_run(source, os.path.join(root, f"{impl}-{len(out)}"), fn)
                row[f"{impl} files rewritten"] = s["files_removed"]
                row[f"{impl} MB written"] = s["bytes_written"] / 1e6
            row["ratio (serialake/delta-rs)"] = row["serialake s"] / row["delta-rs s"]
            out.append(row)
            print(json.dumps(row), file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    bench_rows("--quick" in sys.argv)
