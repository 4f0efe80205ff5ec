"""A local Spark Connect server for the test run, and a Connect client session on it (issue #43).

The server is started from the pyspark installation (``spark-submit`` of
``SparkConnectServer``, the jar pyspark ships in ``jars/``) on a free port of 127.0.0.1, in
its own process group, and stopped by that group's id at the end of the run. Its Python
workers run this interpreter with this checkout on ``PYTHONPATH`` (they import serialake).
"""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 180.0


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def connect_jar() -> str | None:
    """The Spark Connect server's jar bundled with pyspark, or None."""
    found = sorted(glob.glob(os.path.join(_spark_home(), "jars", "spark-connect_*.jar")))
    return found[0] if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class ConnectServer:
    """A Spark Connect server process (group) on 127.0.0.1."""

    def __init__(self, log_dir: Path) -> None:
        self.port = _free_port()
        self.log = log_dir / "connect-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> ConnectServer:
        home = _spark_home()
        env = dict(os.environ)
        env["SPARK_HOME"] = home
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYSPARK_PYTHON"] = sys.executable
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        cmd = [
            os.path.join(home, "bin", "spark-submit"),
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", "serialake-connect-tests",
            "--master", "local[2]",
            "--driver-memory", "1g",
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.ui.showConsoleProgress=false",
            "--conf", "spark.sql.session.timeZone=UTC",
            "--conf", "spark.sql.shuffle.partitions=4",
            "--conf", "spark.default.parallelism=4",
            "--conf", "spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "spark-internal",
        ]  # fmt: skip
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepts(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited ({self.proc.returncode}); see {self.log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"no Spark Connect server listening after {START_TIMEOUT_S:.0f} s: {self.log}")
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the group started with the server: spark-submit, its JVM, workers
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A local Spark Connect server for the test run (skipped only when pyspark ships no Connect jar)."""
    if connect_jar() is None:
        pytest.skip(f"no Spark Connect server jar in {_spark_home()}/jars (pyspark without spark-connect)")
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    yield server
    server.stop()


def new_connect_session(server: ConnectServer) -> SparkSession:
    """A new Connect client session on ``server``, configured for serialake.

    PySpark decides per process whether ``pyspark.sql.functions`` build Connect or classic
    columns (``SPARK_CONNECT_MODE_ENABLED``, which ``builder.remote`` sets): the tests run
    both kinds of session in one process, so the fixtures below set it for a Connect test only.
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    import serialake

    mode = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    session = ConnectSession.builder.remote(server.url).create()
    if mode is None:  # as it was
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return serialake.configure(session)


@pytest.fixture(scope="session")
def connect_session(connect_server: ConnectServer) -> Iterator[SparkSession]:
    """A Spark Connect client session on the test run's local server, configured for serialake."""
    session = new_connect_session(connect_server)
    yield session
    session.stop()
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@pytest.fixture
def connect_mode(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """PySpark in Connect mode for the test (``pyspark.sql.functions`` build Connect columns)."""
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    yield


@pytest.fixture
def connect(connect_session: SparkSession, connect_mode: None) -> SparkSession:
    """The Connect client session, PySpark in Connect mode for the test."""
    return connect_session


@pytest.fixture(params=["classic", "connect"])
def session(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> SparkSession:
    """The same test body over a classic session and over a Spark Connect client session."""
    if request.param == "classic":
        monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)
        spark: SparkSession = request.getfixturevalue("spark")
        return spark
    return request.getfixturevalue("connect")
