"""Child processes at idle CPU priority (checkpoints, Iceberg conversions of big tables).

``run_quiet_child`` runs ``python -m <module> ...`` with this package importable and waits
for it; ``quiet_worker`` keeps one such child alive per module, answering requests (one JSON
line in, one out), so work that recurs every few commits does not pay an interpreter start
each time; ``quiet_child`` puts a started child at idle priority.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["QuietWorker", "WorkerError", "quiet_child", "quiet_worker", "run_quiet_child"]


def run_quiet_child(module: str, args: Sequence[str], timeout: float = 3600) -> tuple[int, str, str]:
    """``python -m module args`` with this package importable, at idle priority
    (``quiet_child``): its exit code, stdout's last line and stderr's last line (the error)."""
    cmd = [sys.executable, "-m", module, *args]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env())
    quiet_child(child.pid)
    try:
        out, err = child.communicate(timeout=timeout)
    except BaseException:
        child.kill()
        child.wait()
        raise
    last = (out.strip().splitlines() or [""])[-1]
    reason = (err.strip().splitlines() or [f"exit code {child.returncode}"])[-1]
    return child.returncode, last, reason


def quiet_child(pid: int) -> None:
    """Run a child (checkpoint, Iceberg conversion) only on CPU time the committers leave, from its
    first instruction (``pid`` 0: this process, as the child itself asks again once started).

    The child is put at idle priority (Linux ``SCHED_IDLE``; the lowest nice elsewhere) here,
    by the parent, rather than by the child, whose interpreter start-up and imports would
    otherwise run first at normal priority. A committer waking from ``fsync`` preempts it at
    once: measured on two cores, one writer's commit p99 stayed 0.7-0.8 ms beside two
    CPU-bound idle-class children. It is not pinned to a CPU: four writers' workers, each
    held off its parent's CPU of the moment, sometimes all sat on one CPU, and the scheduler
    then crowded the writers onto the other (run-queue wait per commit 550 -> 950 us, a
    quarter less throughput, in 9 of 49 runs; unpinned, none of 27). Best effort: nothing
    here can fail a commit.
    """
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except (AttributeError, OSError):
        pass


def _child_env() -> dict[str, str]:
    """This process's environment, with this package importable by the child."""
    import serialake

    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(serialake.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


class WorkerError(OSError):
    """A quiet worker died, hung or answered nonsense (the request's outcome is unknown to the caller)."""


class QuietWorker:
    """One long-lived ``python -m module --serve`` child, at idle priority (``quiet_child``).

    ``call`` sends one request (a JSON object on a line of the child's stdin) and waits for
    its answer (a JSON object on a line of its stdout); calls are serialised, the child
    works one request at a time. A child that died is started again on the next call; a
    call to a child that died under it is sent once more to a new one (requests must be
    idempotent). The child exits when its stdin closes: when this process exits or
    ``close`` is called, after finishing the request in hand. A forked copy of this process
    starts a child of its own (the pipes belong to the parent's calls).
    """

    def __init__(self, module: str) -> None:
        self.module = module
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._pending = b""
        self.starts = 0

    def call(self, request: Mapping[str, Any], timeout: float = 3600) -> dict[str, Any]:
        line = (json.dumps(request) + "\n").encode()
        with self._lock:
            for attempt in (1, 2):
                child = self._running()
                try:
                    assert child.stdin is not None
                    child.stdin.write(line)
                    child.stdin.flush()
                    return self._answer(child, timeout)
                except (BrokenPipeError, WorkerError) as e:
                    code = child.poll()
                    self._stop(child)
                    if attempt == 2 or code is None:  # it hung, or died twice: give up
                        raise WorkerError(f"{e}" if code is None else f"{e} (exit code {code})") from None
        raise AssertionError("unreachable")

    def _running(self) -> subprocess.Popen[bytes]:
        child = self._child  # (None in a forked copy: ``_forget_parents_workers``)
        if child is not None and child.poll() is None:
            return child
        if child is not None:
            self._stop(child)
        cmd = [sys.executable, "-m", self.module, "--serve"]
        child = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_child_env(),
            close_fds=True,
        )  # fmt: skip
        quiet_child(child.pid)
        self._child, self._pending = child, b""
        self.starts += 1
        return child

    def _answer(self, child: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
        assert child.stdout is not None
        fd = child.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerError(f"{self.module} gave no answer in {timeout:.0f}s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise WorkerError(f"{self.module} exited before answering")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise WorkerError(f"{self.module} answered {line[:200]!r}")
        return answer

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        if child.poll() is None:
            child.kill()
        child.wait()
        _close_pipes(child)
        self._child = None

    def close(self) -> None:
        """Let the child finish what it is doing and exit (its stdin closes); do not wait for it."""
        with self._lock:
            child, self._child = self._child, None
            if child is not None:
                _close_pipes(child)


def _close_pipes(child: subprocess.Popen[bytes]) -> None:
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


_WORKERS: dict[str, QuietWorker] = {}
_WORKERS_LOCK = threading.Lock()


def quiet_worker(module: str) -> QuietWorker:
    """This process's ``QuietWorker`` for ``module`` (created on first use, its child on first call)."""
    with _WORKERS_LOCK:
        worker = _WORKERS.get(module)
        if worker is None:
            worker = _WORKERS[module] = QuietWorker(module)
        return worker


@atexit.register
def _close_workers() -> None:
    for worker in list(_WORKERS.values()):
        worker.close()


def _forget_parents_workers() -> None:
    """In a forked child: the parent's workers and locks are the parent's; start afresh."""
    global _WORKERS_LOCK
    _WORKERS_LOCK = threading.Lock()
    for worker in _WORKERS.values():
        worker._lock = threading.Lock()
        worker._child, worker._pending = None, b""


os.register_at_fork(after_in_child=_forget_parents_workers)
