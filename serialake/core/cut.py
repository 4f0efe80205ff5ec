"""Consistent cuts: the latest versions of several tables as they all were at one instant.

A query over several tables must never see rows of table B without rows of table A that
were committed before them. ``consistent_cut`` refreshes every table (pass 1), then probes
each for its next commit (pass 2); when one moved in between, both passes run again after
a short randomised backoff, until ``timeout_s`` (then ``ConsistentReadError``). Why the
result is a cut: each table held its version from its refresh in pass 1 to its probe in
pass 2, and every refresh of pass 1 ends before any probe of pass 2 starts, so at the end of
pass 1 every table held its version, and that instant lies after the call started (a
commit acknowledged before it is always seen). One table needs no second pass.

``pin`` makes a cut the one every read of a session uses inside a ``with`` block (a
read-only multi-statement transaction: ``serialake.snapshot``); ``pinned`` tells readers
(SQL statements, ``serialake.read``) which snapshots are pinned for their session.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from serialake.core.log import DeltaLog
from serialake.core.snapshot import Snapshot
from serialake.exceptions import ConsistentReadError, DeltaTableNotFoundError

__all__ = ["CUT_STATS", "consistent_cut", "label", "pin", "pinned", "pinned_snapshot"]

# Cuts taken in this process and their attempts (a cut that needed a retry counts twice or more).
CUT_STATS = {"cuts": 0, "attempts": 0}
_stats_lock = threading.Lock()
_PINNED: contextvars.ContextVar[tuple[Any, dict[str, Snapshot]] | None] = contextvars.ContextVar(
    "serialake_pinned_cut", default=None
)


def consistent_cut(
    tables: Mapping[str, str | None], timeout_s: float, *, advice: str = ""
) -> dict[str, Snapshot]:
    """The latest snapshots of ``tables`` (path -> name for messages, or None) at one instant.

    Keys of the result are the tables' normalized paths. ``advice`` ends the error raised
    when no cut is found within ``timeout_s``.
    """
    logs: dict[str, tuple[DeltaLog, str | None]] = {}
    for path, name in tables.items():
        log = DeltaLog.for_table(path)
        logs.setdefault(log.table_path, (log, name))
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while True:
        attempt += 1
        snaps = {p: _latest(log, name) for p, (log, name) in logs.items()}
        moved = [
            p
            for p, (log, _) in logs.items()
            if len(logs) > 1 and log.store.exists(log.commit_path(snaps[p].version + 1))
        ]
        if not moved:
            with _stats_lock:
                CUT_STATS["cuts"] += 1
                CUT_STATS["attempts"] += attempt
            return snaps
        if time.monotonic() >= deadline:
            names = ", ".join(label(p, logs[p][1]) for p in logs)
            raise ConsistentReadError(
                f"Could not read {names} at one instant within {timeout_s:g} s ({attempt} attempts): "
                f"{', '.join(label(p, logs[p][1]) for p in moved)} kept committing between the two passes."
                + (f" {advice}" if advice else "")
            )
        time.sleep(min(0.05, 0.0002 * 2**attempt) * random.uniform(0.5, 1.5))


@contextlib.contextmanager
def pin(session: Any, snaps: Mapping[str, Snapshot]) -> Iterator[None]:
    """Inside the block, reads of ``session`` use exactly ``snaps`` (by normalized path), nothing else."""
    token = _PINNED.set((session, dict(snaps)))
    try:
        yield
    finally:
        _PINNED.reset(token)


def pinned(session: Any) -> dict[str, Snapshot] | None:
    """The snapshots pinned for ``session`` in this context (None when no ``pin`` block is active)."""
    current = _PINNED.get()
    return current[1] if current is not None and current[0] is session else None


def pinned_snapshot(pinned_snaps: Mapping[str, Snapshot], path: str, name: str | None = None) -> Snapshot:
    """``path``'s snapshot in a pinned cut (normalized path); ``ConsistentReadError`` for a table outside it."""
    snap = pinned_snaps.get(path)
    if snap is None:
        raise ConsistentReadError(
            f"{label(path, name)} is not part of the snapshot this block reads "
            f"(serialake.snapshot of {', '.join(sorted(pinned_snaps))}): add it to the snapshot's tables."
        )
    return snap


def label(path: str, name: str | None) -> str:
    """How a table is named in messages: its name and location, or its path."""
    return f"Table {name} (location {path})" if name else path


def _latest(log: DeltaLog, name: str | None) -> Snapshot:
    try:
        return log.update()
    except DeltaTableNotFoundError:
        raise DeltaTableNotFoundError(
            f"{label(log.table_path, name)} is not a Delta table (no _delta_log commits found)"
        ) from None
