"""Drive delta-spark from serialake's process: :class:`DeltaSparkPeer` runs ``peer/worker.py``.

The worker is a separate process in delta-spark's own environment (``.venv-delta``), with its
own JVM and SparkSession; requests are Python snippets run there, answers are plain values
(``peer.plain``) or the error delta-spark raised, with its Python and JVM class names.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "DeltaSparkPeer", "PeerError", "SerialakeWorker", "s3a_conf", "s3a_jars", "unavailable"]

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-delta"


def s3a_jars() -> list[str]:
    """The S3A connector's jars (hadoop-aws and its AWS SDK, fetched by ``make peer``)."""
    return sorted(str(p) for p in (VENV / "s3a-jars").glob("*.jar"))


def s3a_conf(endpoint: str, *, access_key: str = "testing", secret_key: str = "testing") -> dict[str, str]:
    """Spark settings that open ``s3a://`` URIs on the S3 server at ``endpoint`` (e.g. moto on
    127.0.0.1): the connector's jars, path-style requests, static keys, no TLS."""
    return {
        "spark.jars": ",".join(s3a_jars()),
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


def unavailable() -> str | None:
    """Why the peer cannot run here (one line), or None when ``make peer`` has set it up."""
    reason = VENV / "UNAVAILABLE"
    if reason.exists():
        return "delta-spark peer unavailable: " + reason.read_text().strip()
    if not (VENV / ".installed").exists() or not (VENV / "bin" / "python").exists():
        return "delta-spark peer not set up: run `make peer`"
    return None


class PeerError(Exception):
    """delta-spark raised: ``type`` is its Python class name (``ConcurrentAppendException``),
    ``java_class`` the JVM exception's class when there is one."""

    def __init__(self, type_name: str, java_class: str | None, message: str, trace: str = "") -> None:
        super().__init__(f"{type_name}: {message}")
        self.type = type_name
        self.java_class = java_class
        self.message = message
        self.trace = trace


class DeltaSparkPeer:
    """One delta-spark worker process. ``run`` a snippet and wait; ``submit`` one and go on.

    ``conf``: extra Spark settings for the worker's session. The worker is started by
    :meth:`start` and stopped by its process id (its process group) in :meth:`stop`.
    """

    engine = "delta-spark"

    @property
    def python(self) -> str:
        return str(VENV / "bin" / "python")

    def __init__(self, conf: dict[str, str] | None = None, *, log: str | os.PathLike[str] | None = None) -> None:
        self.conf = dict(conf or {})
        self.workdir = Path(tempfile.mkdtemp(prefix="delta-spark-peer-"))
        self.log_path = Path(log) if log is not None else self.workdir / "worker.log"
        self.versions: dict[str, str] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None

    # -- process ---------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> DeltaSparkPeer:
        reason = unavailable() if self.engine == "delta-spark" else None
        if reason is not None:
            raise RuntimeError(reason)
        read_fd, write_fd = os.pipe()
        command = [
            self.python,
            str(ROOT / "peer" / "worker.py"),
            "--engine", self.engine,
            "--reply-fd", str(write_fd),
            "--jars", str(VENV / "jars"),
            "--warehouse", str(self.workdir / "warehouse"),
            "--conf", json.dumps(self.conf),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "PYTHONPATH"))}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(write_fd,),
                cwd=self.workdir, env=env, start_new_session=True,
            )  # fmt: skip
        os.close(write_fd)
        ready: Future[Any] = Future()
        self._pending[0] = ready
        self._reader = threading.Thread(target=self._read, args=(os.fdopen(read_fd, "r"),), daemon=True)
        self._reader.start()
        try:
            self.versions = ready.result(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the worker and everything it started (its JVM): its process group, by id."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=20)
        except (subprocess.TimeoutExpired, OSError):
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        proc.wait()

    def __enter__(self) -> DeltaSparkPeer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _read(self, replies: Any) -> None:
        for line in replies:
            message = json.loads(line)
            with self._lock:
                future = self._pending.pop(message["id"], None)
            if future is None:
                continue
            if "error" in message:
                e = message["error"]
                future.set_exception(PeerError(e["type"], e.get("java_class"), e["message"], e.get("traceback", "")))
            else:
                future.set_result(message.get("result"))
        tail = self.log_tail()
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(RuntimeError(f"the delta-spark worker exited; its log ends:\n{tail}"))

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- requests --------------------------------------------------------------------------

    def submit(self, code: str, **args: Any) -> Future[Any]:
        """Start ``code`` in the worker (it sets ``result``); the future holds the answer."""
        if self._proc is None or self._proc.stdin is None:
            raise RuntimeError("the delta-spark worker is not running")
        future: Future[Any] = Future()
        request_id = next(self._ids)
        with self._lock:
            self._pending[request_id] = future
        line = json.dumps({"id": request_id, "code": code, "args": args}) + "\n"
        self._proc.stdin.write(line.encode())
        self._proc.stdin.flush()
        return future

    def submit_gated(self, code: str, gate: str | os.PathLike[str], timeout: float = 120.0, **args: Any) -> Future[Any]:
        """Start ``code``, which reads through the SQL function ``peer_gate(col)`` (true for every
        row), and return once delta-spark has pinned its snapshot and blocks at the gate.

        The caller then commits whatever should win, and :meth:`release` lets delta-spark go on:
        it commits second, from the version it read, and runs its own conflict check.
        """
        directory = Path(gate)
        directory.mkdir(parents=True, exist_ok=True)
        future = self.submit(f"gate({str(directory)!r})\n" + code, **args)
        return self._wait_reached(future, directory, timeout, "read (peer_gate)")

    def submit_commit_gated(
        self, code: str, table: str, gate: str | os.PathLike[str], timeout: float = 180.0, **args: Any
    ) -> Future[Any]:
        """Start ``code`` (any delta-spark operation on the local table ``table``) and return once
        it has done everything but put its commit file: snapshot pinned, conflicts with what it
        saw checked, data written. After the caller's commit, :meth:`release` lets it put: it
        finds the version taken and runs delta-spark's conflict check against the winner.

        Raises what delta-spark raised if it fails before committing, and ``RuntimeError`` if
        it finished without a commit (a no-op).
        """
        directory = Path(gate)
        directory.mkdir(parents=True, exist_ok=True)
        # delta-spark holds the table's DeltaLog lock while it puts a commit file (its local
        # log store may show partial writes): held at the gate, it would keep another
        # delta-spark request from committing the winner. The gated request runs in a session
        # of its own without that lock; it puts only after the winner has committed.
        arm = (
            f"commit_gate({os.path.abspath(table)!r}, {str(directory)!r})\n"
            "spark = spark.newSession()\n"
            "spark.conf.set('spark.databricks.delta.commitLock.enabled', 'false')\n"
        )
        future = self.submit(arm + code, **args)
        return self._wait_reached(future, directory, timeout, "commit")

    def _wait_reached(self, future: Future[Any], directory: Path, timeout: float, what: str) -> Future[Any]:
        deadline = time.monotonic() + timeout
        while not (directory / "reached").exists():
            if future.done():
                future.result()  # raises what delta-spark raised
                raise RuntimeError(f"the gated request finished without reaching its {what} gate ({directory})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"delta-spark did not reach the gate {directory} in {timeout} s")
            time.sleep(0.02)
        return future

    @staticmethod
    def release(gate: str | os.PathLike[str]) -> None:
        """Let a request started by :meth:`submit_gated` or :meth:`submit_commit_gated` go on."""
        (Path(gate) / "release").touch()

    def run(self, code: str, timeout: float = 300.0, **args: Any) -> Any:
        """Run ``code`` in the worker and return its ``result`` (raises :class:`PeerError`)."""
        return self.submit(code, **args).result(timeout=timeout)

    def sql(self, text: str) -> list[list[Any]]:
        """``spark.sql(text)`` in delta-spark, its rows sorted (``[]`` for a command without rows)."""
        return self.run("df = spark.sql(args['text'])\nresult = rows(df)", text=text)

    def rows(self, path: str, *, version: int | None = None, columns: list[str] | None = None) -> list[list[Any]]:
        """The rows delta-spark reads from the table at ``path`` (at ``version``), sorted."""
        return self.run(
            "r = spark.read.format('delta')\n"
            "if args['version'] is not None: r = r.option('versionAsOf', args['version'])\n"
            "df = r.load(args['path'])\n"
            "if args['columns']: df = df.select(*args['columns'])\n"
            "result = rows(df)",
            path=path, version=version, columns=columns,
        )  # fmt: skip

    def history(self, path: str) -> list[dict[str, Any]]:
        """delta-spark's ``DeltaTable.history()``: version, operation, parameters, newest first."""
        return self.run(
            "h = DeltaTable.forPath(spark, args['path']).history()\n"
            "result = [r.asDict(recursive=True) for r in h.select('version', 'operation', 'operationParameters',"
            " 'isBlindAppend', 'isolationLevel', 'readVersion', 'operationMetrics').collect()]",
            path=path,
        )

    def detail(self, path: str) -> dict[str, Any]:
        """delta-spark's ``DESCRIBE DETAIL`` of the table at ``path``."""
        return self.run(
            "result = spark.sql(f\"DESCRIBE DETAIL delta.`{args['path']}`\").collect()[0].asDict(recursive=True)",
            path=path,
        )


class SerialakeWorker(DeltaSparkPeer):
    """The same worker running a serialake session in this Python: for Spark settings or jars
    that the calling process's session lacks (the S3A connector). No commit gate there."""

    engine = "serialake"

    def __init__(
        self,
        conf: dict[str, str] | None = None,
        *,
        log: str | os.PathLike[str] | None = None,
        same_spark_as_peer: bool = False,
    ) -> None:
        super().__init__(conf, log=log)
        self.same_spark_as_peer = same_spark_as_peer

    @property
    def python(self) -> str:
        """This Python, or with ``same_spark_as_peer`` the peer environment's (serialake is
        installed there too, on delta-spark's pyspark: for benchmarks on the same Spark)."""
        return str(VENV / "bin" / "python") if self.same_spark_as_peer else sys.executable
