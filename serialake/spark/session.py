"""A local SparkSession configured for serialake (UTC, small shuffles, quiet logs)."""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from serialake.spark.backend import backend

__all__ = ["DEFAULT_CONF", "ship_serialake", "spark_session", "use_executor_python"]

DEFAULT_MASTER = "local[2]"

# Settings every serialake session starts with; keyword arguments override them.
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    # Timestamps as INT64 micros: INT96 has no Parquet statistics, so no data skipping.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    # Reads pass explicit file lists: stat them on the driver rather than in a Spark job.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "10000",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
    # The UI is off, yet Spark keeps its history in the driver's heap: 1,000 SQL executions
    # (plans and metrics), 1,000 jobs and stages, 100,000 tasks. A session that runs many
    # operations (a pipeline, a test suite: ~0.1 MB of heap per execution measured) keeps less.
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    "spark.ui.dagGraph.retainedRootRDDs": "100",
    # Spark caches the status of every data file it has listed (up to 250 MB of heap by default),
    # of tables long gone too; a Delta data file never changes, and the recent ones are enough.
    "spark.sql.hive.filesourcePartitionFileCacheSize": str(32 << 20),
}


def spark_session(
    app_name: str = "serialake", *, master: str | None = None, remote: str | None = None, **conf: Any
) -> SparkSession:
    """The active SparkSession, or a new local one (``local[2]`` unless ``master`` is given).

    ``remote`` (or ``SPARK_REMOTE`` when neither it nor ``master`` is given): a Spark Connect
    URL (``sc://host:port``): a Connect client session on that server, configured the same way
    (only the runtime SQL settings of ``DEFAULT_CONF`` apply: the server's own are the server's).

    ``conf`` keys are Spark settings (pass dotted keys as ``**{"spark.x": "y"}``). When a
    session is already active it is reused and only runtime-settable ``conf`` is applied.
    The session is configured for delta-spark's idioms (``serialake.configure``:
    ``format("delta")``, ``spark.sql``, tables by name). Executors run this Python
    (``spark.pyspark.python``) unless ``conf`` or ``PYSPARK_PYTHON`` names another: on a
    standalone cluster their Python must match the driver's.
    """
    from serialake.dropin import configure

    url = remote or (None if master else os.environ.get("SPARK_REMOTE"))
    if url:
        return _remote_session(app_name, url, conf)
    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in conf.items():
            active.conf.set(key, str(value))
        return configure(active)
    builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
    defaults = dict(DEFAULT_CONF)
    if not os.environ.get("PYSPARK_PYTHON"):
        defaults["spark.pyspark.python"] = sys.executable
    settings = {**defaults, **{k: str(v) for k, v in conf.items()}}
    for key, value in settings.items():
        builder = builder.config(key, value)
    use_executor_python(settings.get("spark.pyspark.python"))
    spark = builder.getOrCreate()
    backend(spark).set_log_level("ERROR")
    _silence_task_failure_logs(spark)
    return configure(spark)


def _remote_session(app_name: str, url: str, conf: dict[str, Any]) -> SparkSession:
    """A Spark Connect client session on ``url`` (``spark_session``), configured for serialake."""
    from serialake.dropin import configure

    spark = SparkSession.builder.remote(url).appName(app_name).getOrCreate()
    runtime = {k: v for k, v in DEFAULT_CONF.items() if k.startswith("spark.sql.") and "hive" not in k}
    for key, value in {**runtime, **{k: str(v) for k, v in conf.items()}}.items():
        try:
            spark.conf.set(key, value)
        except Exception:  # noqa: BLE001 - a static setting of the server's: left as the server has it
            if key in conf:
                raise
    return configure(spark)


def ship_serialake(spark: SparkSession, directory: str | None = None) -> str:
    """Make this process's serialake importable by ``spark``'s Python tasks; returns the zip shipped.

    For executors that lack serialake: a remote Spark Connect server (the zip becomes one of the
    session's artifacts, ``spark.addArtifacts(..., pyfile=True)``) or a classic cluster
    (``SparkContext.addPyFile``). Only serialake's own package is shipped: its dependencies
    (pyarrow, obstore) must be installed in the executors' Python. ``directory``: where the zip
    is written (a temporary directory by default).
    """
    import tempfile
    import zipfile

    import serialake

    package = os.path.dirname(os.path.abspath(serialake.__file__))
    out_dir = directory or tempfile.mkdtemp(prefix="serialake-ship-")
    target = os.path.join(out_dir, "serialake.zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for root, dirs, files in os.walk(package):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith((".py", ".typed", ".json", ".sql")):
                    full = os.path.join(root, name)
                    z.write(full, os.path.relpath(full, os.path.dirname(package)))
    backend(spark).add_python_files(target)
    return target


def use_executor_python(python: str | None) -> None:
    """Make ``python`` the executors' Python for the SparkContext about to start.

    PySpark takes its workers' Python from ``PYSPARK_PYTHON`` when the context starts
    (``SparkContext.pythonExec``), not from ``spark.pyspark.python``, which only
    ``spark-submit`` reads: without this, workers run whatever ``python3`` is on the PATH,
    which may lack pyarrow (Arrow UDFs, reading and writing S3 data files fail) or serialake.
    """
    if python and not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = python


# Loggers that print a failed task's stack trace before the driver re-raises it as an exception.
_TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.util.Utils",
)


def _silence_task_failure_logs(spark: SparkSession) -> None:
    """Turn off logs that duplicate errors the caller receives anyway (e.g. failed write checks)."""
    try:
        backend(spark).silence_loggers(_TASK_FAILURE_LOGGERS)
    except Exception:  # noqa: BLE001 - cosmetic only (e.g. Spark Connect has no JVM handle)
        pass
