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

The ledger. Reads made at different moments (two ``serialake.read`` calls combined in one
DataFrame) may be combined only when their versions held together at some instant. Every
cut this process takes is recorded (``record``); a read of one table also confirms the
tables read just before it (``extend``: probe each for its next commit after the new
table's refresh, the same two-pass argument). ``check_together`` accepts versions found
together in one recorded cut, or all still the latest now (a probe of each), and refuses
the rest with ``ConsistentReadError``: that combination of versions never existed.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import random
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from serialake.core.log.deltalog import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.exceptions import ConsistentReadError, DeltaTableNotFoundError

__all__ = [
    "CUT_STATS",
    "ISOLATION_LEVELS",
    "check_together",
    "consistent_cut",
    "extend",
    "label",
    "pin",
    "pinned",
    "pinned_snapshot",
    "record",
    "together",
]

# Session read isolation levels (Materialize): the requested name -> the level it runs at.
ISOLATION_LEVELS = {
    "STRICT SERIALIZABLE": "STRICT SERIALIZABLE",
    "SERIALIZABLE": "SERIALIZABLE",
    "REPEATABLE READ": "SERIALIZABLE",
    "READ COMMITTED": "SERIALIZABLE",
    "READ UNCOMMITTED": "SERIALIZABLE",
}

# Cuts taken in this process and their attempts (a cut that needed a retry counts twice or more).
CUT_STATS = {"cuts": 0, "attempts": 0}
_stats_lock = threading.Lock()
_PINNED: contextvars.ContextVar[tuple[Any, dict[str, Snapshot]] | None] = contextvars.ContextVar(
    "serialake_pinned_cut", default=None
)


def consistent_cut(tables: Mapping[str, str | None], timeout_s: float, *, advice: str = "") -> dict[str, Snapshot]:
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
            record({p: s.version for p, s in snaps.items()})
            return snaps
        if time.monotonic() >= deadline:
            names = ", ".join(label(p, logs[p][1]) for p in logs)
            raise ConsistentReadError(
                f"Could not read {names} at one instant within {timeout_s:g} s ({attempt} attempts): "
                f"{', '.join(label(p, logs[p][1]) for p in moved)} kept committing between the two passes."
                + (f" {advice}" if advice else "")
            )
        time.sleep(min(0.05, 0.0002 * 2**attempt) * random.uniform(0.5, 1.5))


# -- the ledger: which versions of which tables this process saw together --------------------

_LEDGER_CUTS = 4096  # cuts remembered; older ones are forgotten (a later check then probes)
_ledger: dict[int, dict[str, int]] = {}  # cut id -> {normalized path: version}
_ledger_index: dict[tuple[str, int], set[int]] = {}  # (path, version) -> ids of the cuts holding it
_ledger_lock = threading.Lock()
_ledger_ids = itertools.count(1)


def record(versions: Mapping[str, int]) -> None:
    """Remember that ``versions`` (normalized path -> version) were all the latest at one instant."""
    if len(versions) < 2:
        return  # one table's version always existed on its own
    cut_id = next(_ledger_ids)
    entry = dict(versions)
    with _ledger_lock:
        _ledger[cut_id] = entry
        for key in entry.items():
            _ledger_index.setdefault(key, set()).add(cut_id)
        while len(_ledger) > _LEDGER_CUTS:
            old_id = next(iter(_ledger))
            for key in _ledger.pop(old_id).items():
                ids = _ledger_index.get(key)
                if ids is not None:
                    ids.discard(old_id)
                    if not ids:
                        del _ledger_index[key]


def together(versions: Mapping[str, int]) -> bool:
    """Whether one recorded cut holds every table of ``versions`` at exactly that version."""
    if len(versions) < 2:
        return True
    with _ledger_lock:
        common: set[int] | None = None
        for key in versions.items():
            ids = _ledger_index.get(key, set())
            common = set(ids) if common is None else common & ids
            if not common:
                return False
    return True


def extend(fresh: Mapping[str, Snapshot], earlier: Mapping[str, int]) -> None:
    """After refreshing ``fresh``, record it with every table of ``earlier`` still at its version.

    Pass 2 of the cut argument: each table of ``earlier`` was at its version when it was
    read (before ``fresh`` was refreshed); a probe after the refresh that finds no next
    commit shows it still held that version when the refresh ended. ``fresh`` tables that
    moved meanwhile are left out of the record.
    """
    versions = {p: s.version for p, s in fresh.items()}
    others = {p: v for p, v in earlier.items() if p not in versions}
    if not others:
        return
    held = {p: v for p, v in {**versions, **others}.items() if not _moved(p, v)}
    if all(p in held for p in versions):
        record(held)


def check_together(
    versions: Mapping[str, int], names: Mapping[str, str | None] | None = None, *, what: str = ""
) -> None:
    """Refuse (``ConsistentReadError``) versions of several tables that never held together.

    Accepted: a cut recorded in this process holds them all, or every table is still at
    its version now (then they all held at the first probe). ``what`` names the reader.
    """
    if len(versions) < 2 or together(versions):
        return
    moved = {p: v for p, v in versions.items() if _moved(p, v)}
    if not moved:
        record(versions)
        return
    names = names or {}
    listed = ", ".join(f"{label(p, names.get(p))} at version {v}" for p, v in versions.items())
    changed = ", ".join(label(p, names.get(p)) for p in moved)
    raise ConsistentReadError(
        f"{what or 'This DataFrame'} combines reads made at different moments that never held together: "
        f"{listed}; {changed} committed again between them, so no instant had these versions. Read the "
        f"tables together: serialake.read(spark, [...]) (one DataFrame per table from one cut), a "
        f"serialake.snapshot(spark, [...]) block, or one serialake.sql query."
    )


def _moved(path: str, version: int) -> bool:
    """Whether ``path`` has a commit after ``version``; a table that cannot be probed (its store
    unreachable) counts as moved: nothing is claimed about it, and reads of others go on."""
    log = DeltaLog.for_table(path)
    try:
        return log.store.exists(log.commit_path(version + 1))
    except OSError:
        return True


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
