"""Session read isolation (``SET TRANSACTION_ISOLATION``) and the snapshots reads use.

A query reads every table it names at one consistent cut: versions that were all the
latest at one real instant (``read_cut``).

- STRICT SERIALIZABLE (the default): the instant lies after the query started, so a commit
  acknowledged before then is always seen (``core.cut.consistent_cut``: refresh every
  table, check none moved, retry; at most ``CUT_TIMEOUT_CONF`` ms, then
  ``ConsistentReadError``). Cost: one refresh and one probe per table per attempt; a
  query over one table is never retried.
- SERIALIZABLE: a consistent cut that may be older. When every table of the query comes
  from one cut this session already read, and this process has seen no newer version of
  any of them since (its own writes included: ``DeltaLog.known_version``), that cut is
  served without touching the log; otherwise a fresh cut is read as above, so a read is
  never older than the session's own writes or than what it already saw.

Reads combined later. ``serialake.read`` calls and statements are separate reads, each at
its own instant; a DataFrame may still combine them. After each read, the tables this
session read just before (up to ``_COMPANIONS``) are probed: those that did not move are
recorded in the process's ledger of cuts with the new read (``core.cut.extend``), so a
DataFrame that combines them is known to read one state. Writes and queries that consume
such a DataFrame check its versions with ``core.cut.check_together``.

Derived tables (``core.tables.derived``). A table whose property ``serialake.maintainedFrom``
names its sources is kept up to date from them by some job; each of its commits records
which source versions it was computed from. At STRICT SERIALIZABLE a statement reading it
must reflect every source commit acknowledged before the statement started: the
statement waits for it to catch up (at most ``DERIVED_WAIT_CONF`` ms, then
``DerivedTableLagError``), through derived tables of derived tables too. Sources read by
the same statement are read at the versions the derived table reflects. At SERIALIZABLE
nothing waits.

Inside ``serialake.snapshot(...)`` (``core.cut.pin``) every read uses the pinned cut.

The other SQL levels run as SERIALIZABLE. The level is a Spark conf of the session, so it
is visible in ``SET``.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from serialake.core import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.core.tables import cut, derived
from serialake.core.tables.cut import ISOLATION_LEVELS
from serialake.core.txn.post_commit import after_commit
from serialake.exceptions import DeltaTableNotFoundError
from serialake.spark import transaction

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CUT_TIMEOUT_CONF",
    "DEFAULT_ISOLATION",
    "ISOLATION_CONF",
    "note_committed",
    "note_write",
    "read_cut",
    "read_snapshot",
    "session_isolation",
    "set_session_isolation",
]

ISOLATION_CONF = "spark.serialake.transactionIsolation"
DEFAULT_ISOLATION = "STRICT SERIALIZABLE"

CUT_TIMEOUT_CONF = "spark.serialake.read.cutTimeoutMs"
CUT_TIMEOUT_DEFAULT_MS = 10_000
DERIVED_WAIT_CONF = "spark.serialake.read.derivedWaitMs"
DERIVED_WAIT_DEFAULT_MS = 30_000
MAINTAINED_FROM = derived.MAINTAINED_FROM

# Per session: each table's last snapshot and the id of the cut it was read in.
_cache: weakref.WeakKeyDictionary[Any, dict[str, tuple[Snapshot, int]]] = weakref.WeakKeyDictionary()
# Per session: the tables it read most recently (oldest first), confirmed with each new read.
_recent: weakref.WeakKeyDictionary[Any, dict[str, None]] = weakref.WeakKeyDictionary()
_COMPANIONS = 8
_lock = threading.Lock()
_cut_ids = itertools.count(1)


def session_isolation(spark: SparkSession) -> str:
    """The session's read isolation level (STRICT SERIALIZABLE unless set)."""
    value = spark.conf.get(ISOLATION_CONF, DEFAULT_ISOLATION) or DEFAULT_ISOLATION
    return ISOLATION_LEVELS.get(value.upper(), DEFAULT_ISOLATION)


def set_session_isolation(spark: SparkSession, level: str) -> str:
    """Set the session's level (a key of ``ISOLATION_LEVELS``); returns the level it runs at."""
    effective = ISOLATION_LEVELS[level.upper()]
    spark.conf.set(ISOLATION_CONF, effective)
    return effective


def read_snapshot(
    spark: SparkSession, path: str, *, version: int | None = None, timestamp: Any = None, name: str | None = None
) -> Snapshot:
    """The snapshot a read of ``path`` uses at the session's level (or the version asked for)."""
    log = DeltaLog.for_table(path)
    if version is not None or timestamp is not None:
        if not log.table_exists():
            label = cut.label(log.table_path, name)
            raise DeltaTableNotFoundError(f"{label} is not a Delta table (no _delta_log commits found)")
        return log.snapshot(version=version, timestamp=timestamp)
    return read_cut(spark, [(path, name)])[log.table_path]


def read_cut(spark: SparkSession, tables: Sequence[tuple[str, str | None]]) -> dict[str, Snapshot]:
    """The latest snapshots of ``tables`` (path, name or None) at one consistent cut (see module docstring).

    Keys are the tables' normalized paths.
    """
    logs: dict[str, tuple[DeltaLog, str | None]] = {}
    for path, name in tables:
        log = DeltaLog.for_table(path)
        logs.setdefault(log.table_path, (log, name))
    tx = transaction.active(spark)
    if tx is not None:  # inside serialake.transaction: its snapshots, with its own writes applied
        return tx.snapshots_for_read(list(logs))
    pinned = cut.pinned(spark)
    if pinned is not None:
        return {p: cut.pinned_snapshot(pinned, p, logs[p][1]) for p in logs}
    if session_isolation(spark) == "SERIALIZABLE":
        with _lock:
            per = _cache.get(spark, {})
            entries = [per.get(p) for p in logs]
        served = {p: e[0] for p, e in zip(logs, entries, strict=True) if e is not None}
        if (
            len(served) == len(logs)
            and len({e[1] for e in entries if e is not None}) == 1
            # (-1: the process forgot the table, e.g. it was dropped: read it afresh)
            and all(0 <= log.known_version() <= served[p].version for p, (log, _) in logs.items())
        ):
            return served
    snaps = derived.read_cut(
        {p: name for p, (_, name) in logs.items()},
        strict=session_isolation(spark) != "SERIALIZABLE",
        timeout_s=_cut_timeout_s(spark),
        wait_s=_wait_s(spark),
        cut_advice=f"Raise {CUT_TIMEOUT_CONF}, or read at SERIALIZABLE (which may serve an older consistent cut).",
        wait_advice=f"Raise {DERIVED_WAIT_CONF}, or read at SERIALIZABLE (no wait, possibly older).",
    )
    cut.record({p: snap.version for p, snap in snaps.items()})  # derived tables may have moved sources back
    _remember_cut(spark, snaps)
    _confirm_companions(spark, snaps)
    return snaps


def _confirm_companions(spark: SparkSession, snaps: dict[str, Snapshot]) -> None:
    """Record ``snaps`` in the ledger with the session's recent reads that still hold (``cut.extend``)."""
    with _lock:
        recent = _recent.setdefault(spark, {})
        per = _cache.get(spark, {})
        earlier = {p: per[p][0].version for p in recent if p not in snaps and p in per}
        for p in snaps:
            recent.pop(p, None)
            recent[p] = None
        while len(recent) > _COMPANIONS:
            del recent[next(iter(recent))]
    if earlier:
        cut.extend(snaps, earlier)


def _wait_s(spark: SparkSession) -> float:
    return _ms_conf(spark, DERIVED_WAIT_CONF, DERIVED_WAIT_DEFAULT_MS)


def _cut_timeout_s(spark: SparkSession) -> float:
    return _ms_conf(spark, CUT_TIMEOUT_CONF, CUT_TIMEOUT_DEFAULT_MS)


def _ms_conf(spark: SparkSession, key: str, default_ms: int) -> float:
    """A duration setting in ms, as seconds (the default when unset or not a number)."""
    raw = spark.conf.get(key, None)
    try:
        return max(0.0, float(raw)) / 1000 if raw else default_ms / 1000
    except ValueError:
        return default_ms / 1000


def _remember_cut(spark: SparkSession, snaps: dict[str, Snapshot]) -> None:
    cut = next(_cut_ids)
    with _lock:
        per = _cache.setdefault(spark, {})
        for path, snap in snaps.items():
            old = per.get(path)
            if old is None or old[0].version <= snap.version:
                per[path] = (snap, cut)


def note_committed(spark: SparkSession, path: str, version: int | None, operation: str) -> None:
    """``note_write`` after ``operation`` committed ``version`` of ``path``: a step after the commit
    (``core.txn.post_commit``), which warns instead of raising. ``version`` None: nothing was committed."""
    after_commit("note the write for the session's reads", path, version, note_write, spark, path, operation=operation)


def note_write(spark: SparkSession, path: str) -> None:
    """After this session wrote ``path``: later SERIALIZABLE reads see at least that write."""
    log = DeltaLog.for_table(path)
    try:
        _remember_cut(spark, {log.table_path: log.update()})
    except DeltaTableNotFoundError:
        pass
