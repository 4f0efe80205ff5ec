"""Child processes kept off the committing process's CPU (checkpoints, Iceberg conversions of big tables).

``run_quiet_child`` runs ``python -m <module> ...`` with this package importable and waits
for it; ``quiet_child`` puts a started child at idle priority on the other CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["quiet_child", "run_quiet_child"]


def run_quiet_child(module: str, args: Sequence[str], timeout: float = 3600) -> tuple[int, str, str]:
    """``python -m module args`` with this package importable, kept off the committer's CPU
    (``quiet_child``): its exit code, stdout's last line and stderr's last line (the error)."""
    import subprocess
    import sys

    import serialake

    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(serialake.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", module, *args]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
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
    """Keep a child (checkpoint, Iceberg conversion) off the committing process's CPU, from its first instruction.

    Measured on two cores: a CPU-bound child, even at idle priority, left free to run on the
    CPU a committer sleeps on in ``fsync`` delayed that commit's wake-up by 3-9 ms (p99 of
    small commits 0.5 -> 4-9 ms); the same child held on the other CPU, not at all. So the
    child runs at idle priority (Linux ``SCHED_IDLE``) on every allowed CPU but the one this
    process is on, set here rather than by the child, whose interpreter start-up and imports
    would otherwise run first at normal priority. Best effort: nothing here can fail a commit.
    """
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    try:
        cpus = os.sched_getaffinity(0)
        if len(cpus) < 2:
            return
        with open("/proc/self/stat", "rb") as f:
            current = int(f.read().rsplit(b")", 1)[1].split()[36])
        os.sched_setaffinity(pid, (cpus - {current}) or cpus)
    except (AttributeError, OSError, ValueError, IndexError):
        pass
