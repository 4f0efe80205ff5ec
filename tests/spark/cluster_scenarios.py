"""Writes, DML and OPTIMIZE against a Spark standalone cluster, run as a script by ``test_cluster``.

The test run has one in-process SparkSession (local mode), so the cluster's driver runs
here, in a process of its own: ``python cluster_scenarios.py CONFIG.json``. CONFIG holds
``master``, ``shared_root``, ``private_seed`` (a table the executors see only as a private
copy, or null), ``s3`` (an S3 table URI and the options to reach it, or null) and ``out``,
where the results are written as JSON.

DML and OPTIMIZE are forced onto the Spark path (the driver engines are turned off), so
every data file is written by executors.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import serialake
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile
from serialake.spark.direct import DATA_IO_CONF
from serialake.spark.session import spark_session
from serialake.spark.table import DeltaTable

CONF = {
    "spark.serialake.dml.local.maxBytes": "0",
    "spark.serialake.optimize.local.maxBytes": "0",
    "spark.pyspark.python": sys.executable,
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # Start only when both workers' executors are up, so tasks land on both.
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
}


def version(path: str) -> int | None:
    log = DeltaLog.for_table(path)
    return log.update().version if log.table_exists() else None


def table_files(path: str) -> list[str]:
    """Every file under the table directory except the log (staging leftovers show up here)."""
    if path.startswith("s3://"):
        from serialake.storage.datafiles import Access

        return sorted(f.path for f in Access.here(path).walk(path) if not f.path.startswith("_delta_log/"))
    out = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "_delta_log")
        out.extend(os.path.relpath(os.path.join(root, n), path) for n in sorted(names))
    return out


def rows(spark: Any, path: str) -> list[list[Any]]:
    df = serialake.read(spark, path)
    return sorted([r["id"], r["v"], r["p"]] for r in df.collect())


def private_scenario(spark: Any, seed: str) -> dict[str, Any]:
    """Each operation against a table the executors cannot share: the error it raised and what changed."""
    new_table = os.path.join(os.path.dirname(seed), "new")
    more = spark.range(100, 110).selectExpr("id", "id * 10 AS v", "CAST(id % 2 AS INT) AS p")
    source = spark.range(5, 15).selectExpr("id", "-id AS v", "CAST(id % 2 AS INT) AS p")
    ops: dict[str, tuple[str, Callable[[], Any]]] = {
        "create": (new_table, lambda: serialake.write(more, new_table)),
        "append": (seed, lambda: serialake.write(more, seed, mode="append")),
        "overwrite": (seed, lambda: serialake.write(more, seed, mode="overwrite")),
        "delete": (seed, lambda: DeltaTable.forPath(spark, seed).delete("id % 2 = 0")),
        "update": (seed, lambda: DeltaTable.forPath(spark, seed).update("id < 5", {"v": "v + 1"})),
        "merge": (
            seed,
            lambda: DeltaTable.forPath(spark, seed)
            .alias("t")
            .merge(source.alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute(),
        ),
        "optimize": (seed, lambda: DeltaTable.forPath(spark, seed).optimize().executeCompaction()),
    }
    results: dict[str, Any] = {"seed_rows": rows(spark, seed)}
    for name, (path, op) in ops.items():
        before = {"version": version(path), "files": table_files(path) if os.path.isdir(path) else []}
        error: dict[str, Any] | None = None
        try:
            op()
        except Exception as e:  # noqa: BLE001 - reported to the test, which checks the type
            error = {
                "type": type(e).__name__,
                "message": str(e),
                "attributes": {k: getattr(e, k, None) for k in ("table", "staging", "job_rows", "found_rows")},
            }
        after = {"version": version(path), "files": table_files(path) if os.path.isdir(path) else []}
        results[name] = {"path": path, "error": error, "before": before, "after": after}
    results["rows_after"] = rows(spark, seed)
    return results


def direct_private_scenario(spark: Any, seed: str) -> dict[str, Any]:
    """An append written directly by executors that cannot share the table: the error and what changed."""
    more = spark.range(200, 210, 1, 2).selectExpr("id", "id * 10 AS v", "CAST(id % 2 AS INT) AS p")
    before = {"version": version(seed), "files": table_files(seed)}
    error: dict[str, Any] | None = None
    try:
        serialake.write(more, seed, mode="append")
    except Exception as e:  # noqa: BLE001 - reported to the test, which checks the type
        error = {"type": type(e).__name__, "message": str(e), "table": getattr(e, "table", None)}
    after = {"version": version(seed), "files": table_files(seed)}
    return {"path": seed, "error": error, "before": before, "after": after}


def shared_scenario(spark: Any, path: str) -> dict[str, Any]:
    """Every operation against a table on a directory the executors share: versions, adds and rows."""

    def data(lo: int, hi: int, v: str) -> Any:
        return spark.range(lo, hi, 1, 2).selectExpr("id", f"{v} AS v", "CAST(id % 3 AS INT) AS p")

    table = lambda: DeltaTable.forPath(spark, path)  # noqa: E731
    ops: list[tuple[str, Callable[[], Any]]] = [
        ("create", lambda: serialake.write(data(0, 30, "id * 10"), path, partitionBy="p")),
        ("append", lambda: serialake.write(data(30, 40, "id * 10"), path, mode="append")),
        ("overwrite", lambda: serialake.write(data(0, 40, "id * 100"), path, mode="overwrite")),
        ("delete", lambda: table().delete("id % 5 = 0")),
        ("update", lambda: table().update("id < 10", {"v": "v + 1"})),
        (
            "merge",
            lambda: table()
            .alias("t")
            .merge(data(35, 45, "-id").alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute(),
        ),
        ("optimize", lambda: table().optimize().executeCompaction()),
    ]
    results: dict[str, Any] = {}
    for name, op in ops:
        op()
        v = version(path)
        assert v is not None
        entry = DeltaLog.for_table(path).read_commit(v)
        info = entry.commit_info
        results[name] = {
            "version": v,
            "operation": info.operation if info else None,
            "adds": sum(isinstance(a, AddFile) for a in entry.actions),
            "rows": rows(spark, path),
        }
    results["files"] = table_files(path)
    return results


def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    spark = spark_session("serialake-cluster-scenarios", master=config["master"], **CONF)
    results: dict[str, Any] = {}
    try:
        if config.get("private_seed"):
            results["private"] = private_scenario(spark, config["private_seed"])
        results["shared"] = shared_scenario(spark, os.path.join(config["shared_root"], "t"))
        # Spark's own writer straight to final names, the file list from the job (the route of
        # object-store tables Spark has a connector for), on the same two kinds of directory.
        spark.conf.set(DATA_IO_CONF, "spark")
        if config.get("private_seed"):
            results["direct_private"] = direct_private_scenario(spark, config["private_seed"])
        results["direct"] = shared_scenario(spark, os.path.join(config["shared_root"], "direct"))
        spark.conf.unset(DATA_IO_CONF)
        if config.get("s3"):
            # Only the driver is told where S3 is: the executors (no AWS variables in their
            # environment, no shared disk for S3 data) get the settings with each job.
            from serialake.storage import s3

            s3.configure(config["s3"]["options"])
            results["s3"] = shared_scenario(spark, config["s3"]["table"])
    except Exception:  # noqa: BLE001 - the test shows it
        results["crash"] = traceback.format_exc()
    finally:
        results["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        Path(config["out"]).write_text(json.dumps(results, indent=1))
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
