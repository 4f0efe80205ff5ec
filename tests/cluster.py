"""A Spark standalone cluster on 127.0.0.1 for tests: a master and workers from pyspark's installation.

Every process is started in a session of its own (its process group has the process's
id) and stopped by that id: ``SIGTERM`` to the group, then ``SIGKILL`` to whatever of it
is left (the executors and Python workers a worker started are in its group).

Workers can run in a mount namespace of their own (``unshare --mount``, root only) where a
private tmpfs covers one directory: a copy of what that directory held when the worker
started. Executors then read the files that existed before but write where the driver
cannot see, as on a cluster whose executors do not share the driver's disk.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyspark

__all__ = ["StandaloneCluster", "live_group_members", "private_mounts_unavailable", "standalone_cluster"]

_SPARK_HOME = Path(pyspark.__file__).parent
_SPARK_CLASS = _SPARK_HOME / "bin" / "spark-class"
_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"
_STOP_GRACE_SECONDS = 10.0

# Run by `sh -c` inside the worker's new mount namespace: $1 the directory made private,
# $2 an empty directory to bind the original to while it is copied, then the command.
_PRIVATE_MOUNT_SCRIPT = (
    'set -e; root="$1"; snap="$2"; shift 2; '
    'mount --bind "$root" "$snap"; '
    'mount -t tmpfs -o size=512m serialake-private "$root"; '
    'cp -a "$snap"/. "$root"/; '
    'umount "$snap"; '
    'exec "$@"'
)


@dataclass
class StandaloneCluster:
    """A running cluster: its master URL, web UI (JSON status) and the processes started."""

    master_url: str
    web_url: str
    log_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def status(self) -> dict[str, Any]:
        """The master's JSON status (``aliveworkers``, ``workers``, ...)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            result = json.load(response)
        assert isinstance(result, dict)
        return result

    def logs(self) -> str:
        """The tail of every process's log, for a failure message."""
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name} ---\n{text[-3000:]}")
        return "\n".join(parts)


def private_mounts_unavailable() -> str | None:
    """Why workers cannot get a private mount namespace here (None: they can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "workers in their own mount namespace need root (unshare --mount)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"unshare --mount is not permitted here: {probe.stderr.strip()}"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def standalone_cluster(
    work_dir: Path, *, workers: int = 2, private_dir: Path | None = None, timeout: float = 120.0
) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers (1 core, 1 GiB each), stopped on exit.

    ``private_dir``: each worker runs in its own mount namespace where a private tmpfs,
    filled with a copy of the directory's content at start, covers that directory.
    """
    if not _SPARK_CLASS.exists():
        raise RuntimeError(f"pyspark has no {_SPARK_CLASS}: cannot start a standalone cluster")
    log_dir = work_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", log_dir)
    env = {
        **os.environ,
        "SPARK_HOME": str(_SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
    }
    with ExitStack() as logs:
        try:
            master_cmd = [str(_SPARK_CLASS), _MASTER, "--host", "127.0.0.1", "--port", str(port)]
            master_cmd += ["--webui-port", str(web_port)]
            cluster.processes.append(_start(master_cmd, env, logs.enter_context(open(log_dir / "master.log", "wb"))))
            _wait(cluster, timeout, lambda s: s.get("status") == "ALIVE", "the master to be ALIVE")
            for i in range(workers):
                worker_dir = work_dir / f"worker{i}"
                worker_dir.mkdir(parents=True, exist_ok=True)
                cmd = [str(_SPARK_CLASS), _WORKER, cluster.master_url, "--host", "127.0.0.1", "--cores", "1"]
                cmd += ["--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(worker_dir)]
                if private_dir is not None:
                    snap = work_dir / f"worker{i}-original"
                    snap.mkdir(exist_ok=True)
                    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _PRIVATE_MOUNT_SCRIPT,
                           "sh", str(private_dir), str(snap), *cmd]  # fmt: skip
                log = logs.enter_context(open(log_dir / f"worker{i}.log", "wb"))
                cluster.processes.append(_start(cmd, {**env, "SPARK_WORKER_DIR": str(worker_dir)}, log))
            _wait(cluster, timeout, lambda s: s.get("aliveworkers") == workers, f"{workers} workers to register")
            yield cluster
        finally:
            for proc in reversed(cluster.processes):
                _stop(proc)


def _start(cmd: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a new session (process group id = its pid), output to ``log``."""
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip


def _wait(cluster: StandaloneCluster, timeout: float, ready: Callable[[dict[str, Any]], bool], what: str) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        dead = [p for p in cluster.processes if p.poll() is not None]
        if dead:
            raise RuntimeError(
                f"Spark process {dead[0].args!r} exited with {dead[0].returncode} while waiting for {what}\n"
                + cluster.logs()
            )
        try:
            if ready(cluster.status()):
                return
        except OSError as e:  # not listening yet
            last_error = e
        time.sleep(0.5)
    raise RuntimeError(f"Timed out after {timeout:.0f}s waiting for {what} ({last_error})\n" + cluster.logs())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` and everything in its process group (its pid), by that id."""
    group = proc.pid
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(_STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(group, signal.SIGKILL)  # executors and Python workers left in the group
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + _STOP_GRACE_SECONDS
    while live_group_members(group) and time.monotonic() < deadline:
        time.sleep(0.1)


def live_group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (from ``/proc``)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members
