"""Change data feed reads: 1M changed rows, serialake's ``changes_df`` against delta-rs ``load_cdf``.

One table with ``delta.enableChangeDataFeed`` (1M rows in 10 files, written by delta-rs),
then three commits whose changes are read back by both libraries from the same files:

1. ``UPDATE`` of half the rows (serialake, copy-on-write on Spark): 500k rows before and
   after = 1M change rows in ``_change_data`` files;
2. an append of 1M rows (another partition): read from its add actions as inserts;
3. ``DELETE`` of that partition (whole files removed, no change files): 1M deletes read
   from the removed files.

Each read is timed from the call to the rows in the caller's hands, as Arrow:
``changes_df(...).toArrow()`` (Spark job, rows collected to the driver) against
``DeltaTable.load_cdf(...).read_all()``; also the rows consumed inside Spark, nothing
collected (``changes_df(...).write.format("noop")``: every column read and the plan run
whole, unlike ``count()``, which reads no column). One untimed run each, then the median of
``RUNS``. Both give the same number of rows (checked). The ratio is serialake / delta-rs
(below 1: serialake faster). A reference row reads the first version as a table
(``serialake.read(...).toArrow()`` against delta-rs ``to_pyarrow_table()``, in the same columns): what a Spark
read of that many rows costs here without the change feed.
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

RUNS = 3
ROWS = 1_000_000
FILES = 10


def _make_table(path: str, rows: int, files: int) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(7)
    per = rows // files
    for i in range(files):
        ids = np.arange(i * per, (i + 1) * per, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "part": pa.array(np.full(per, "base")),
                "key": rng.integers(0, rows, per, dtype=np.int64),
                "value": rng.random(per),
                "name": pa.array([f"n{j % 1000}" for j in range(per)]),
            }
        )
        write_deltalake(
            path,
            table,
            mode="append",
            partition_by=["part"],
            configuration={"delta.enableChangeDataFeed": "true"} if i == 0 else None,
        )


def _median(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    fn()  # untimed: JIT, code generation, caches
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _noop(df: Any) -> int:
    """Run ``df`` whole in Spark, collecting nothing (Spark's ``noop`` sink)."""
    df.write.format("noop").mode("overwrite").save()
    return 0


def _row(read: str, rows: int, t_ours: float | None, t_noop: float, t_theirs: float) -> dict[str, Any]:
    """One result row (``t_ours`` None: not measured through ``toArrow``), also printed to stderr."""
    row = {
        "read": read,
        "rows": rows,
        "serialake toArrow s": t_ours,
        "serialake in Spark s": t_noop,
        "delta-rs s": t_theirs,
        "ratio (toArrow / delta-rs)": t_ours / t_theirs if t_ours is not None else None,
        "ratio (in Spark / delta-rs)": t_noop / t_theirs,
    }
    print(json.dumps(row), file=sys.stderr)
    return row


def bench_rows(quick: bool = False) -> list[dict[str, Any]]:
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable

    import serialake
    from serialake.spark import dml
    from serialake.spark.cdf import changes_df
    from serialake.spark.dml.engine import DML_MAX_BYTES_CONF

    rows = ROWS // 10 if quick else ROWS
    runs = 1 if quick else RUNS
    root = tempfile.mkdtemp(prefix="bench-cdf-")
    out: list[dict[str, Any]] = []
    try:
        path = os.path.join(root, "t")
        _make_table(path, rows, FILES)
        spark = serialake.spark_session("serialake-bench")
        spark.conf.set(DML_MAX_BYTES_CONF, "0")  # the UPDATE on Spark (a big rewrite)
        base = RsTable(path).version()
        dml.run_update(spark, path, "id % 2 = 0", {"value": "value + 1"})
        extra = spark.range(rows, 2 * rows).selectExpr(
            "id", "'new' AS part", "id AS key", "CAST(0.5 AS DOUBLE) AS value", "'appended' AS name"
        )
        serialake.write(extra.repartition(FILES), path)
        dml.run_delete(spark, path, "part = 'new'")
        cases = [
            (f"UPDATE of {rows // 2:,} rows: {rows:,} change rows from _change_data files", base + 1),
            (f"append of {rows:,} rows: inserts read from the added files", base + 2),
            (f"whole-file DELETE of {rows:,} rows: deletes read from the removed files", base + 3),
        ]
        for title, version in cases:

            def ours(v: int = version) -> int:
                return int(changes_df(spark, path, v, v).toArrow().num_rows)

            def ours_noop(v: int = version) -> int:
                return _noop(changes_df(spark, path, v, v))

            def theirs(v: int = version) -> int:
                return int(pa.table(RsTable(path).load_cdf(starting_version=v, ending_version=v).read_all()).num_rows)

            t_ours, n_ours = _median(ours, runs)
            t_noop, _ = _median(ours_noop, runs)
            t_theirs, n_theirs = _median(theirs, runs)
            assert n_ours == n_theirs, (title, n_ours, n_theirs)
            out.append(_row(title, n_ours, t_ours, t_noop, t_theirs))
        # For reference: the table's 1M rows read as a table (Spark's fixed costs, no change feed).
        t_ours, n_ours = _median(lambda: serialake.read(spark, path, version=base).toArrow().num_rows, runs)
        t_noop, _ = _median(lambda: _noop(serialake.read(spark, path, version=base)), runs)
        t_theirs, n_theirs = _median(lambda: RsTable(path, version=base).to_pyarrow_table().num_rows, runs)
        assert n_ours == n_theirs == rows, (n_ours, n_theirs)
        title = f"reference: version {base} read as a table ({rows:,} rows), not as changes"
        out.append(_row(title, n_ours, t_ours, t_noop, t_theirs))
        # The three versions in one read, sorted by _commit_version (run in Spark: 3M rows are more
        # than this driver collects comfortably).
        t_noop, _ = _median(lambda: _noop(changes_df(spark, path, base + 1)), runs)
        t_theirs, n_theirs = _median(
            lambda: pa.table(RsTable(path).load_cdf(starting_version=base + 1).read_all()).num_rows, runs
        )
        n_ours = changes_df(spark, path, base + 1).count()
        assert n_ours == n_theirs, (n_ours, n_theirs)
        title = f"the three versions in one read ({n_ours:,} rows, serialake ordered by _commit_version)"
        out.append(_row(title, n_ours, None, t_noop, t_theirs))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    bench_rows("--quick" in sys.argv)
