"""serialake against delta-spark, the anchor that matters: same data, same machine, same Spark.

Both engines run in worker processes of the same kind (``peer.client``): delta-spark 4.4 with
its jars, and serialake installed in delta-spark's environment (``make peer``), so both run on
delta-spark's very pyspark with identical session settings (``SETTINGS``). In one run:

- write ``ROWS`` rows (unpartitioned, and partitioned by a column of 100 values);
- read them: ``count()``, and a filter + aggregate;
- DELETE and UPDATE of 1% and of 0.1% of the rows, and a MERGE upsert of 1% (half updates,
  half inserts), each on a fresh copy of one base table (written by delta-spark, so both
  start from the same files), with deletion vectors off and on;
- OPTIMIZE of 1,000 small files;
- the fixed cost of a small operation: a one-row append, DELETE, UPDATE and MERGE on a
  small table, where serialake's driver path (pyarrow, no Spark job) applies.

Each operation runs once untimed per engine first (the JIT and code generation warm up, as in
any long-lived pipeline), then ``RUNS`` times timed; the median is reported, timed inside the
worker around the operation alone. Copies are made before the timer starts.

``python -m bench.delta_spark [--quick] [--rows=N]`` prints the rows; ``python -m bench.run --only
delta_spark`` also writes them into bench/README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

from peer.client import DeltaSparkPeer, SerialakeWorker, unavailable

ROWS = 10_000_000
RUNS = 3
SMALL_RUNS = 7

# One set of Spark settings for both workers (serialake's defaults, made explicit for delta-spark).
SETTINGS = {
    "spark.master": "local[2]",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "10000",
    "spark.ui.enabled": "false",
}

_TIMED = """
import time
def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
"""

# Each operation: code that defines ``op()`` over ``args['p']`` (a table path); ``result`` is its time.
_DATA = (
    "spark.range(args['rows'])"
    ".selectExpr('id', 'id % 100 AS part', 'rand(7) AS value', \"concat('n', id % 1000) AS name\")"
)
_UPDATE = "def op():\n    DeltaTable.forPath(spark, args['p']).update('{condition}', {{'value': 'value + 1'}})\n"
OPERATIONS: dict[str, str] = {
    "write": f"def op():\n    {_DATA}.write.format('delta').save(args['p'])\n",
    "write partitioned": f"def op():\n    {_DATA}.write.format('delta').partitionBy('part').save(args['p'])\n",
    "read count": "def op():\n    spark.read.format('delta').load(args['p']).count()\n",
    "read filter + aggregate": (
        "def op():\n    spark.read.format('delta').load(args['p']).where('value < 0.5 AND part < 50')"
        ".groupBy('part').agg(F.sum('value'), F.count('*')).collect()\n"
    ),
    "DELETE 1%": "def op():\n    DeltaTable.forPath(spark, args['p']).delete('id % 100 = 7')\n",
    "DELETE 0.1%": "def op():\n    DeltaTable.forPath(spark, args['p']).delete('id % 1000 = 7')\n",
    "UPDATE 1%": _UPDATE.format(condition="id % 100 = 7"),
    "UPDATE 0.1%": _UPDATE.format(condition="id % 1000 = 7"),
    "MERGE 1% upsert": (
        "cut = args['rows'] // 100\n"
        "src = spark.range(cut).selectExpr(f\"{args['rows'] - cut} + id * 2 AS id\", 'id % 100 AS part',"
        " '0.5 AS value', \"'merged' AS name\")\n"
        "def op():\n    (DeltaTable.forPath(spark, args['p']).alias('t').merge(src.alias('s'), 't.id = s.id')"
        ".whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())\n"
    ),
    "OPTIMIZE 1,000 files": "def op():\n    DeltaTable.forPath(spark, args['p']).optimize().executeCompaction()\n",
    "one-row append": (
        "row = spark.createDataFrame([(10**9, 1, 0.5, 'x')], 'id long, part long, value double, name string')\n"
        "def op():\n    row.write.format('delta').mode('append').save(args['p'])\n"
    ),
    "one-row DELETE": "def op():\n    DeltaTable.forPath(spark, args['p']).delete('id = 17')\n",
    "one-row UPDATE": "def op():\n    DeltaTable.forPath(spark, args['p']).update('id = 18', {'value': '2.0'})\n",
    "one-row MERGE": (
        "src = spark.createDataFrame([(19, 19, 3.0, 'm')], 'id long, part long, value double, name string')\n"
        "def op():\n    (DeltaTable.forPath(spark, args['p']).alias('t').merge(src.alias('s'), 't.id = s.id')"
        ".whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())\n"
    ),
}


def _time(worker: DeltaSparkPeer, operation: str, path: str, rows: int) -> float:
    code = _TIMED + OPERATIONS[operation] + "result = timed(op)\n"
    return float(worker.run(code, timeout=3600, p=path, rows=rows))


def _prepare(peer: DeltaSparkPeer, root: str, rows: int) -> dict[str, str]:
    """The base tables, written by delta-spark: ``rows`` rows in 10 files, its copy with deletion
    vectors enabled, 1,000 small files, and a small table of 100 rows."""
    tables = {name: os.path.join(root, name) for name in ("base", "base_dv", "small_files", "small", "small_dv")}
    peer.run(
        f"{_DATA}.repartition(10).write.format('delta').save(args['base'])\n"
        "spark.range(1_000_000).selectExpr('id', 'id % 100 AS part', 'rand(3) AS value', \"'s' AS name\")"
        ".repartition(1000).write.format('delta').save(args['small_files'])\n"
        "spark.range(100).selectExpr('id', 'id % 10 AS part', 'rand(5) AS value', \"'t' AS name\")"
        ".coalesce(1).write.format('delta').save(args['small'])\n",
        timeout=3600, rows=rows, **tables,
    )  # fmt: skip
    for plain, dv in (("base", "base_dv"), ("small", "small_dv")):
        shutil.copytree(tables[plain], tables[dv])
        peer.sql(f"ALTER TABLE delta.`{tables[dv]}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    return tables


def _median(workers: dict[str, DeltaSparkPeer], operation: str, source: str | None, scratch: str, rows: int,
            runs: int) -> dict[str, float]:  # fmt: skip
    """Median seconds per engine: one untimed run, then ``runs`` timed ones, engines alternating,
    each on a fresh copy of ``source`` (or a fresh path, for writes)."""
    times: dict[str, list[float]] = {name: [] for name in workers}
    for i in range(runs + 1):
        for name, worker in workers.items():
            path = f"{scratch}-{name}-{i}"
            if source is not None:
                shutil.copytree(source, path)
            try:
                t = _time(worker, operation, path, rows)
            finally:
                shutil.rmtree(path, ignore_errors=True)
            if i > 0:
                times[name].append(t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    quick = "--quick" in argv
    given = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--rows=")), None)
    reason = unavailable()
    if reason is not None:
        print(reason, file=sys.stderr)
        return [{"operation": reason}]
    rows = given or (ROWS // 10 if quick else ROWS)
    runs = 1 if quick else RUNS
    root = tempfile.mkdtemp(prefix="bench-delta-spark-")
    out: list[dict[str, Any]] = []
    peer = DeltaSparkPeer(SETTINGS)
    ours = SerialakeWorker(SETTINGS, same_spark_as_peer=True)
    try:
        peer.start()
        ours.start()
        workers: dict[str, DeltaSparkPeer] = {"serialake": ours, "delta-spark": peer}
        tables = _prepare(peer, root, rows)
        plan: list[tuple[str, str, str | None, int]] = [
            (f"write {rows:,} rows", "write", None, runs),
            (f"write {rows:,} rows, partitioned (100)", "write partitioned", None, runs),
            (f"count {rows:,} rows", "read count", tables["base"], runs),
            (f"filter + aggregate {rows:,} rows", "read filter + aggregate", tables["base"], runs),
        ]
        for dv in (False, True):
            label = ", deletion vectors" if dv else ""
            base = tables["base_dv" if dv else "base"]
            for op in ("DELETE 1%", "DELETE 0.1%", "UPDATE 1%", "UPDATE 0.1%", "MERGE 1% upsert"):
                plan.append((f"{op} of {rows:,} rows{label}", op, base, runs))
        plan.append(("OPTIMIZE 1,000 files of 1,000 rows", "OPTIMIZE 1,000 files", tables["small_files"], runs))
        for dv in (False, True):
            label = ", deletion vectors" if dv else ""
            small = tables["small_dv" if dv else "small"]
            for op in ("one-row append", "one-row DELETE", "one-row UPDATE", "one-row MERGE"):
                plan.append((f"{op} (100-row table{label})", op, small, SMALL_RUNS))
        for label, op, source, n in plan:
            medians = _median(workers, op, source, os.path.join(root, f"run{len(out)}"), rows, n)
            row = {
                "operation": label,
                "serialake s": medians["serialake"],
                "delta-spark s": medians["delta-spark"],
                "ratio (serialake/delta-spark)": medians["serialake"] / max(medians["delta-spark"], 1e-9),
            }
            out.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        ours.stop()
        peer.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


def bench_rows(quick: bool = False) -> list[dict[str, Any]]:
    return main(["--quick"] if quick else [])


if __name__ == "__main__":
    for r in main():
        print(json.dumps(r))
