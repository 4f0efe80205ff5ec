"""A fault-injecting log store for tests and verification runs.

Wraps a real store and, with given probabilities, loses the response of a put that did
land (an indeterminate commit), fails a put before it lands, fails or slows listings,
and slows puts. Every injected fault is counted so a test can check it happened.

Over a ``LocalLogStore`` it also fails one step of a write with a chosen errno
(``FaultPlan.step_errno``), so the store's own classification of the failure (not done,
outcome unknown, not durable) is what a test sees.

``FaultPlan`` is also what ``serialake verify`` gives its faulty processes
(``serialake.verify.workload.default_faults``), and ``LogStoreWrapper``, the store that
hands every call to the one it wraps, is the base of any store that changes a few of
them (the demo's commit gate too).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from serialake.storage.base import FileStatus, LogStore
from serialake.storage.local import LocalLogStore

__all__ = ["FaultPlan", "FaultyLogStore", "InjectedFault", "LogStoreWrapper"]


class InjectedFault(OSError):
    """An I/O error injected on purpose; the outcome of the operation may be unknown."""


@dataclass
class FaultPlan:
    """Probabilities (0..1) and delays of each fault; only ``*.json`` commit puts are affected.

    ``step_errno`` maps a step of a ``LocalLogStore`` write (``mkdir``, ``create``, ``write``,
    ``fsync``, ``link``, ``replace``, ``linked``, ``fsync-dir``: see ``LocalLogStore.fault_hook``)
    to the errno it fails with, for files whose name ends with ``step_suffix``, the first
    ``step_times`` times (every time when None). ``fail_put`` raises an error that does not
    say whether the put happened (it did not): the caller must check. Every fault is off by
    default.
    """

    lose_put_response: float = 0.0
    fail_put: float = 0.0
    fail_list: float = 0.0
    fail_read: float = 0.0
    slow_put_s: float = 0.0
    slow_list_s: float = 0.0
    seed: int | None = None
    step_errno: dict[str, int] = field(default_factory=dict)
    step_suffix: str = ".json"
    step_times: int | None = None


class LogStoreWrapper(LogStore):
    """A ``LogStore`` that hands every call to ``inner``; subclasses override the calls they change."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner

    def read(self, path: str) -> bytes:
        return self.inner.read(path)

    def list_from(self, directory: str, start_name: str = "") -> list[FileStatus]:
        return self.inner.list_from(directory, start_name)

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.inner.put_if_absent(path, data)

    def write(self, path: str, data: bytes) -> None:
        self.inner.write(path, data)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def modification_time(self, path: str) -> int:
        return self.inner.modification_time(path)

    def status(self, path: str) -> FileStatus | None:
        return self.inner.status(path)

    def read_timed(self, path: str) -> tuple[bytes, int]:
        return self.read(path), self.inner.modification_time(path)  # through ``read``: its faults apply

    def open_input(self, path: str) -> Any:
        return self.inner.open_input(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)


class FaultyLogStore(LogStoreWrapper):
    """``LogStore`` that injects the faults of a ``FaultPlan`` into ``inner``."""

    def __init__(self, inner: LogStore, plan: FaultPlan) -> None:
        super().__init__(inner)
        self.plan = plan
        self.counts: Counter[str] = Counter()  # faults injected, by kind
        self.commit_puts = 0  # commit puts attempted
        self._rng = random.Random(plan.seed)
        self._lock = threading.Lock()
        if isinstance(inner, LocalLogStore):
            inner.fault_hook = self._step_fault

    def _step_fault(self, step: str, path: str) -> None:
        err = self.plan.step_errno.get(step)
        if err is None or not path.endswith(self.plan.step_suffix):
            return
        key = f"fail_{step}"
        with self._lock:
            if self.plan.step_times is not None and self.counts[key] >= self.plan.step_times:
                return
            self.counts[key] += 1
        raise InjectedFault(err, f"{os.strerror(err)} (injected at {step})", path)

    def _roll(self, p: float) -> bool:
        if p <= 0:
            return False
        with self._lock:
            return self._rng.random() < p

    def read(self, path: str) -> bytes:
        if path.endswith(".json") and self._roll(self.plan.fail_read):
            self.counts["fail_read"] += 1
            raise InjectedFault(f"injected read failure: {path}")
        return self.inner.read(path)

    def list_from(self, directory: str, start_name: str = "") -> list[FileStatus]:
        if self.plan.slow_list_s:
            time.sleep(self.plan.slow_list_s)
        if self._roll(self.plan.fail_list):
            self.counts["fail_list"] += 1
            raise InjectedFault(f"injected listing failure: {directory}")
        return self.inner.list_from(directory, start_name)

    def put_if_absent(self, path: str, data: bytes) -> None:
        commit = path.endswith(".json")
        if commit:
            with self._lock:
                self.commit_puts += 1
        if commit and self.plan.slow_put_s:
            time.sleep(self._rng.uniform(0, self.plan.slow_put_s))
        if commit and self._roll(self.plan.fail_put):
            self.counts["fail_put"] += 1
            raise InjectedFault(f"injected put failure (nothing written): {path}")
        self.inner.put_if_absent(path, data)
        if commit and self._roll(self.plan.lose_put_response):
            self.counts["lost_put_response"] += 1
            raise InjectedFault(f"injected lost response (the commit was written): {path}")
