"""Streaming writes: ``writeStream.format("delta")`` into a serialake table vs plain
``writeStream.format("parquet")``, on the same data in the same run.

Both queries read the same Spark Parquet file source (a directory the benchmark fills with
Parquet files written by pyarrow: id long, grp int, s string, v double) and write it out
unchanged:

- **latency**: a running query of each kind (default trigger: the next batch starts as soon
  as the previous ends; both run, fed in turns) is handed one new 10,000-row file at a
  time; the time from the file's appearance to ``processAllAvailable()`` returning (the
  batch written and committed: Spark's file sink records it in ``_spark_metadata``,
  serialake commits a Delta version with the batch's ``SetTransaction``) is one sample.
  Median and p90 of ``--batches`` samples each, after two untimed warm-up batches.
- **throughput**: ``--files`` files of ``--file-rows`` rows drained with
  ``Trigger.AvailableNow`` and ``maxFilesPerTrigger`` (``--per-batch`` files a micro-batch),
  from ``start()`` to the end of the query: sustained rows per second, the median of
  ``--runs`` runs into fresh targets and checkpoints.

Usage: ``python -m bench.streaming [--batches N] [--files N] [--file-rows N] [--per-batch N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

BATCH_ROWS = 10_000
SCHEMA = "id long, grp int, s string, v double"


def _file(directory: str, index: int, rows: int) -> None:
    """Parquet file ``index`` of ``rows`` rows in ``directory``, appearing at once (written aside, renamed)."""
    first = index * rows
    ids = pa.array(range(first, first + rows), pa.int64())
    table = pa.table({
        "id": ids,
        "grp": pa.array([i % 8 for i in range(first, first + rows)], pa.int32()),
        "s": pa.array([f"row-{i}" for i in range(first, first + rows)]),
        "v": pa.array([i * 0.5 for i in range(first, first + rows)], pa.float64()),
    })  # fmt: skip
    tmp = os.path.join(directory, f".part-{index:05d}.parquet.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, os.path.join(directory, f"part-{index:05d}.parquet"))


def _query(spark: Any, src: str, fmt: str, target: str, checkpoint: str, *, per_batch: int | None = None,
           available_now: bool = False) -> Any:  # fmt: skip
    reader = spark.readStream.schema(SCHEMA)
    if per_batch:
        reader = reader.option("maxFilesPerTrigger", per_batch)
    writer = reader.parquet(src).writeStream.format(fmt).option("checkpointLocation", checkpoint)
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start(target)


def _latency(spark: Any, root: str, batches: int) -> dict[str, list[float]]:
    """Per format, the seconds from a new file's appearance to its batch being written, ``batches`` times.

    Both queries run at once and are fed in turns (the order alternating each round), so that
    neither meets only a warmer JVM or a quieter machine.
    """
    queries: dict[str, tuple[str, Any]] = {}
    samples: dict[str, list[float]] = {"parquet": [], "delta": []}
    try:
        for fmt in samples:
            src = os.path.join(root, f"latency-src-{fmt}")
            os.makedirs(src)
            ck = os.path.join(root, f"latency-ck-{fmt}")
            queries[fmt] = (src, _query(spark, src, fmt, os.path.join(root, f"latency-{fmt}"), ck))
        for i in range(batches + 2):  # two warm-up batches
            order = list(samples) if i % 2 else list(reversed(samples))
            for fmt in order:
                src, q = queries[fmt]
                _file(src, i, BATCH_ROWS)
                start = time.perf_counter()
                q.processAllAvailable()
                if i >= 2:
                    samples[fmt].append(time.perf_counter() - start)
    finally:
        for _, q in queries.values():
            q.stop()
    return samples


def _throughput(spark: Any, root: str, src: str, fmt: str, per_batch: int, run: int) -> float:
    """Seconds from ``start()`` to the end of an ``AvailableNow`` query draining ``src``."""
    target = os.path.join(root, f"tp-{fmt}-{run}")
    start = time.perf_counter()
    q = _query(spark, src, fmt, target, target + "-ck", per_batch=per_batch, available_now=True)
    q.awaitTermination()
    elapsed = time.perf_counter() - start
    shutil.rmtree(target, ignore_errors=True)
    return elapsed


def _check(root: str, rows: int) -> None:
    """The serialake target holds every row once (a benchmark of a wrong sink measures nothing)."""
    from deltalake import DeltaTable

    ids = DeltaTable(os.path.join(root, "latency-delta")).to_pyarrow_table(columns=["id"]).column("id")
    if len(ids) != rows or len(set(ids.to_pylist())) != rows:
        raise AssertionError(f"the delta sink wrote {len(ids)} rows, expected {rows} distinct")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--file-rows", type=int, default=100_000)
    ap.add_argument("--per-batch", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)

    import serialake

    spark = serialake.spark_session(app_name="bench-streaming")
    root = tempfile.mkdtemp(prefix="serialake-bench-streaming-")
    try:
        latency = _latency(spark, root, args.batches)
        _check(root, (args.batches + 2) * BATCH_ROWS)
        src = os.path.join(root, "throughput-src")
        os.makedirs(src)
        for i in range(args.files):
            _file(src, i, args.file_rows)
        total = args.files * args.file_rows
        # Alternated so that neither runs only on a warmer (or busier) machine.
        seconds: dict[str, list[float]] = {"parquet": [], "delta": []}
        for run in range(args.runs):
            for fmt in ("parquet", "delta"):
                seconds[fmt].append(_throughput(spark, root, src, fmt, args.per_batch, run))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def p90(xs: list[float]) -> float:
        return sorted(xs)[max(0, int(round(0.9 * len(xs))) - 1)]

    out: list[dict[str, Any]] = []
    for stat, fn in (("p50", statistics.median), ("p90", p90)):
        ours, theirs = fn(latency["delta"]) * 1000, fn(latency["parquet"]) * 1000
        out.append({
            "measure": f"latency of one {BATCH_ROWS:,}-row micro-batch, {stat} ms ({args.batches} batches)",
            "serialake (format delta)": round(ours, 1),
            "Spark parquet sink": round(theirs, 1),
            "ratio (serialake/parquet)": round(ours / theirs, 2),
        })  # fmt: skip
    ours_s, theirs_s = statistics.median(seconds["delta"]), statistics.median(seconds["parquet"])
    out.append({
        "measure": (f"sustained rows/s, {total:,} rows in micro-batches of {args.per_batch * args.file_rows:,} "
                    f"(AvailableNow, median of {args.runs})"),
        "serialake (format delta)": round(total / ours_s),
        "Spark parquet sink": round(total / theirs_s),
        "ratio (serialake/parquet)": round(theirs_s / ours_s, 2),
    })  # fmt: skip
    print(json.dumps(out, indent=2))
    return out


def bench_rows(quick: bool) -> list[dict[str, Any]]:
    return main(["--batches", "10", "--files", "16", "--runs", "1"] if quick else [])


if __name__ == "__main__":
    main()
