"""What a MERGE and a SQL DELETE touch: serialake modules loaded and run, log accesses, parses.

Usage: ``python -m bench.trace_paths [--json]``. Not a timing. Each operation runs in a fresh
process on a fresh table (written first, which loads the write path):

- ``loaded``: serialake modules the operation's first run imports (beyond those that
  importing serialake, starting Spark and writing the table loaded);
- then, on a second run of the same operation (warm), a profile hook records every
  serialake function called: ``modules`` (distinct serialake modules whose code ran),
  ``log refreshes`` (``DeltaLog.update``), ``log listings`` (full listings of
  ``_delta_log``, ``logfiles.list_log``) and ``parses`` (``sqlglot.parse_one`` calls made
  by serialake: how often a condition is parsed).

Run it against another checkout with ``PYTHONPATH=<checkout> python -m bench.trace_paths``
(from that checkout) to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

OPERATIONS = (
    "MERGE (DeltaTable API)",
    "SQL DELETE",
    "SQL MERGE",
    "MERGE on Spark (driver off)",
    "SQL DELETE on Spark (driver off)",
)
_COUNTED = {
    ("serialake/core/log/deltalog.py", "update"): "log refreshes",
    ("serialake/core/log/logfiles.py", "list_log"): "log listings",
}


def _trace(run: Callable[[], Any]) -> dict[str, Any]:
    modules: set[str] = set()
    counts = {"log refreshes": 0, "log listings": 0, "parses": 0}
    root = os.sep + "serialake" + os.sep

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = code.co_filename
        if root in name:
            rel = "serialake/" + name.split(root, 1)[1].replace(os.sep, "/")
            modules.add(rel)
            key = _COUNTED.get((rel, code.co_name))
            if key:
                counts[key] += 1
        elif code.co_name == "parse_one" and "sqlglot" in name:
            caller = frame.f_back
            if caller is not None and root in caller.f_code.co_filename:
                counts["parses"] += 1

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return {"modules": len(modules), **counts, "module list": sorted(modules)}


def _one(operation: str) -> dict[str, Any]:
    """Run ``operation`` twice in this (fresh) process: what its first run loads, what its second runs."""
    import shutil
    import tempfile

    import serialake
    from serialake.spark import DeltaTable, write

    spark = serialake.spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    base = tempfile.mkdtemp(prefix="serialake-trace-")
    try:
        path = os.path.join(base, "t")
        rows = [(i, i % 7, f"s{i}") for i in range(2000)]
        write(spark.createDataFrame(rows, "id long, g long, s string").repartition(4), path)
        source = spark.createDataFrame([(i, 9, "new") for i in range(0, 3000, 10)], "id long, g long, s string")
        source.createOrReplaceTempView("trace_src")
        counter = iter(range(1, 10**6))

        def merge() -> None:
            (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(source.alias("s"), "t.id = s.id")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )

        def sql_delete() -> None:
            serialake.sql(spark, f"DELETE FROM delta.`{path}` WHERE id = {next(counter) * 7}")

        def sql_merge() -> None:
            serialake.sql(
                spark,
                f"MERGE INTO delta.`{path}` AS t USING trace_src AS s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
            )

        runs = dict(zip(OPERATIONS, (merge, sql_delete, sql_merge, merge, sql_delete), strict=True))
        if "driver off" in operation:
            spark.conf.set("spark.serialake.dml.local.maxBytes", "0")
        run = runs[operation]
        before = {m for m in sys.modules if m.startswith("serialake")}
        run()
        loaded = sorted(m for m in sys.modules if m.startswith("serialake") and m not in before)
        return {"loaded": len(loaded), "loaded list": loaded, **_trace(run)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.one)))
        return 0
    out = {}
    for operation in OPERATIONS:
        done = subprocess.run(
            [sys.executable, "-m", "bench.trace_paths", "--one", operation],
            capture_output=True,
            text=True,
            check=True,
        )
        out[operation] = json.loads(done.stdout.strip().splitlines()[-1])
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for name, r in out.items():
        print(
            f"{name}: loads {r['loaded']} modules, runs {r['modules']}; {r['log refreshes']} log refreshes, "
            f"{r['log listings']} log listings, {r['parses']} condition parses"
        )
        print("    loaded:", " ".join(m.removeprefix("serialake.") for m in r["loaded list"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
