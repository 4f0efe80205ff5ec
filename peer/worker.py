"""The delta-spark worker: one SparkSession with delta-spark, driven by JSON requests.

Runs under ``.venv-delta/bin/python`` (delta-spark's environment, never serialake's); with
``--engine serialake`` under serialake's Python, a serialake session instead (same protocol). Reads one
request per line on standard input, ``{"id": n, "code": "...", "args": {...}}``, runs the code
in a thread (so a request blocked at a gate leaves the worker free for the next one) and
answers on the file descriptor given by ``--reply-fd`` with ``{"id": n, "result": ...}`` or
``{"id": n, "error": {"type", "java_class", "message"}}``. The code sees ``spark``,
``DeltaTable``, ``F``, ``args``, ``rows(df)`` and two gates, and sets ``result``: ``gate(dir)``
registers the SQL function ``peer_gate`` (blocks a read, below), ``commit_gate(table, dir)``
blocks the next commit to ``table`` (``peer/java``: any operation, after it has done all but
the put of its commit file).
Spark's own output goes to standard output and error, never to the reply descriptor.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from peer.plain import plain, plain_rows  # noqa: E402

_write_lock = threading.Lock()
_ENGINE = "delta-spark"


def _serialake_session(warehouse: str, conf: dict[str, str]) -> Any:
    """``--engine serialake``: serialake's own session (its drop-in), for settings or jars that
    the test run's session lacks (e.g. the S3A connector)."""
    import serialake

    return serialake.spark_session(
        "serialake-worker",
        **{
            "spark.sql.warehouse.dir": warehouse,
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            **conf,
        },
    )


def _session(jars_dir: str, warehouse: str, conf: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    jars = sorted(glob.glob(os.path.join(jars_dir, "*.jar")))
    if not jars:
        raise SystemExit(f"no delta-spark jars in {jars_dir}: run `make peer`")
    conf = dict(conf)
    extra = conf.pop("spark.jars", "")  # more jars (e.g. the S3A connector): added to delta-spark's
    settings = {
        "spark.jars": ",".join(jars + [j for j in extra.split(",") if j]),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.warehouse.dir": warehouse,
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={warehouse}",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.driver.memory": "1g",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.pyspark.python": sys.executable,
        # Local tables' commits go through the gate of peer/java (a no-op until armed).
        "spark.delta.logStore.file.impl": "serialake.peer.GatedLogStore",
        **conf,
    }
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("delta-spark-peer").master(conf.get("spark.master", "local[2]"))
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _gate_udf(directory: str) -> Any:
    """A condition that is true for every row, and blocks at its first row until released.

    It creates ``<directory>/reached`` when Spark first evaluates it (the operation has pinned
    its snapshot and is reading), then waits for ``<directory>/release``: the caller commits
    something else in between, so delta-spark commits second from the version it read.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    def passes(_: Any) -> bool:
        reached = os.path.join(directory, "reached")
        if not os.path.exists(reached):
            open(reached, "a").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(directory, "release")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {directory} was never released")
            time.sleep(0.02)
        return True

    return F.udf(passes, BooleanType())


def _error(exc: BaseException) -> dict[str, Any]:
    java_class = None
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if java is not None:
        try:
            java_class = java.getClass().getName()
        except Exception:  # noqa: BLE001 - the JVM may be gone
            java_class = None
    return {
        "type": type(exc).__name__,
        "java_class": java_class,
        "message": str(exc)[:4000],
        "traceback": traceback.format_exc()[-4000:],
    }


def _reply(out: Any, message: dict[str, Any]) -> None:
    text = json.dumps(message, default=str) + "\n"
    with _write_lock:
        out.write(text)
        out.flush()


def _run(spark: Any, request: dict[str, Any], out: Any) -> None:
    from pyspark.sql import functions as F

    if _ENGINE == "serialake":
        from serialake import DeltaTable
    else:
        from delta.tables import DeltaTable

    def gate(directory: str) -> Any:
        udf = _gate_udf(directory)
        spark.udf.register("peer_gate", udf)
        return udf

    def commit_gate(table: str, directory: str) -> None:
        spark._jvm.serialake.peer.GatedLogStore.arm(table, directory)

    scope: dict[str, Any] = {
        "spark": spark,
        "DeltaTable": DeltaTable,
        "F": F,
        "args": request.get("args") or {},
        "rows": lambda df: plain_rows(df.collect()),
        "plain": plain,
        "gate": gate,
        "commit_gate": commit_gate,
        "result": None,
    }
    try:
        exec(compile(request["code"], f"<peer request {request['id']}>", "exec"), scope)
        _reply(out, {"id": request["id"], "result": plain(scope.get("result"))})
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
        _reply(out, {"id": request["id"], "error": _error(exc)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--conf", default="{}", help="extra Spark settings, as a JSON object")
    parser.add_argument("--engine", choices=("delta-spark", "serialake"), default="delta-spark")
    options = parser.parse_args()
    global _ENGINE
    _ENGINE = options.engine
    out = os.fdopen(options.reply_fd, "w", buffering=1)
    try:
        if _ENGINE == "serialake":
            spark = _serialake_session(options.warehouse, json.loads(options.conf))
            versions = {"spark": spark.version, "serialake": _version("serialake")}
        else:
            spark = _session(options.jars, options.warehouse, json.loads(options.conf))
            import delta  # noqa: F401 - installs delta's Python exception classes

            versions = {"spark": spark.version, "delta": _version("delta-spark")}
    except BaseException as exc:  # noqa: BLE001
        _reply(out, {"id": 0, "error": _error(exc)})
        return
    _reply(out, {"id": 0, "result": versions})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        threading.Thread(target=_run, args=(spark, request, out), daemon=True).start()
    spark.stop()


def _version(package: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(package)


if __name__ == "__main__":
    main()
