"""Session read isolation (``SET TRANSACTION_ISOLATION``) and the snapshots reads use.

A query reads every table it names at one consistent cut: versions that were all the
latest at one real instant (``read_cut``).

- STRICT SERIALIZABLE (the default): the instant lies after the query started, so a commit
  acknowledged before then is always seen (``core.cut.consistent_cut``: refresh every
  table, check none moved, retry; at most ``CUT_TIMEOUT_CONF`` ms, then
  ``ConsistentReadError``). Cost: one refresh and one probe per table per attempt; a
  query over one table is never retried.
- SERIALIZABLE: a consistent cut that may be older. When every table of the query comes
  from one cut this session already read (and none was written by it since), that cut is
  served without touching the log; otherwise a fresh cut is read as above, so a read is
  never older than the session's own writes or than what it already saw.

Derived tables. A table whose property ``serialake.maintainedFrom`` names its sources
(comma-separated names or paths) is kept up to date from them by some job; each of its
commits records which source versions it was computed from (``commitInfo``
``serialake.readTables``). At STRICT SERIALIZABLE a statement reading it must reflect
every source commit acknowledged before the statement started: when the derived table has
not caught up with the sources' versions in the cut, the statement waits for it (polling,
at most ``DERIVED_WAIT_CONF`` ms, then ``DerivedTableLagError`` naming the table, the
source, the version needed and the version reflected). Sources read by the same statement
are read at the versions the derived table reflects, so the two agree. At SERIALIZABLE
nothing waits: sources read with a derived table are read at the versions it reflects
(consistent, possibly older), declared or not.

Inside ``serialake.snapshot(...)`` (``core.cut.pin``) every read uses the pinned cut.

The other SQL levels run as SERIALIZABLE. The level is a Spark conf of the session, so it
is visible in ``SET``.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from serialake.core import DeltaLog, cut
from serialake.core.snapshot import Snapshot
from serialake.core.transaction import READ_TABLES_KEY
from serialake.exceptions import DeltaTableNotFoundError, DerivedTableLagError
from serialake.sql import catalog
from serialake.sql.parser import ISOLATION_LEVELS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CUT_TIMEOUT_CONF",
    "DEFAULT_ISOLATION",
    "ISOLATION_CONF",
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
MAINTAINED_FROM = "serialake.maintainedFrom"  # table property: the sources a derived table is kept from
_REFLECTED_SCAN_COMMITS = 10_000  # how far back a derived table's commits are searched for its sources

# Per session: each table's last snapshot and the id of the cut it was read in.
_cache: weakref.WeakKeyDictionary[Any, dict[str, tuple[Snapshot, int]]] = weakref.WeakKeyDictionary()
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
    pinned = cut.pinned(spark)
    if pinned is not None:
        return {p: cut.pinned_snapshot(pinned, p, logs[p][1]) for p in logs}
    if session_isolation(spark) == "SERIALIZABLE":
        with _lock:
            per = _cache.get(spark, {})
            entries = [per.get(p) for p in logs]
        if all(e is not None for e in entries) and len({e[1] for e in entries if e is not None}) == 1:
            return {p: e[0] for p, e in zip(logs, entries, strict=True) if e is not None}
    strict = session_isolation(spark) != "SERIALIZABLE"
    timeout = _cut_timeout_s(spark)
    snaps = _strict_cut(logs, timeout)
    declared = {p: _declared_sources(snaps[p]) for p in logs}
    if strict and any(src not in snaps for srcs in declared.values() for src in srcs):
        # The sources of derived tables join the cut: their versions are what must be reflected.
        everything = dict(logs)
        for srcs in declared.values():
            for src in srcs:
                everything.setdefault(src, (DeltaLog.for_table(src), None))
        snaps = _strict_cut(everything, timeout)
    snaps = _with_derived(spark, snaps, logs, declared, strict)
    snaps = {p: snaps[p] for p in logs}
    _remember_cut(spark, snaps)
    return snaps


def _declared_sources(snap: Snapshot) -> list[str]:
    """The normalized paths a derived table declares in ``serialake.maintainedFrom`` (names or paths)."""
    raw = next((v for k, v in snap.configuration.items() if k.lower() == MAINTAINED_FROM.lower()), None)
    if not raw:
        return []
    out = []
    for item in (i.strip() for i in raw.split(",")):
        if item:
            located = catalog.lookup(item)
            out.append(DeltaLog.for_table(located if located is not None else item).table_path)
    return out


def reflected_version(snap: Snapshot, source: str, *, back: int = _REFLECTED_SCAN_COMMITS) -> int:
    """The newest version of ``source`` that ``snap`` was computed from (its commits' ``readTables``).

    Searches ``snap``'s last ``back`` commits; -1 if none of them read ``source``.
    """
    log = DeltaLog.for_table(snap.table_path)
    for v in range(snap.version, max(-1, snap.version - back), -1):
        try:
            info = log.read_commit(v).commit_info
        except FileNotFoundError:
            break
        reads = info.values.get(READ_TABLES_KEY) if info is not None else None
        versions = [int(r["version"]) for r in reads or () if isinstance(r, dict) and r.get("table") == source]
        if versions:
            return max(versions)
    return -1


def _with_derived(
    spark: SparkSession,
    snaps: dict[str, Snapshot],
    logs: dict[str, tuple[DeltaLog, str | None]],
    declared: dict[str, list[str]],
    strict: bool,
) -> dict[str, Snapshot]:
    """Derived tables caught up with their sources (STRICT, waiting); sources read as they reflect."""
    out = dict(snaps)
    for path in logs:
        log, name = logs[path]
        if strict and declared[path]:
            needed = {src: out[src].version for src in declared[path]}
            out[path] = _wait_until_reflected(spark, log, name, out[path], needed)
        for source in logs:
            if source == path:
                continue
            if source in declared[path]:
                r = reflected_version(out[path], source)
            elif not strict:  # undeclared: derived when its latest commit read the source
                r = reflected_version(out[path], source, back=1)
            else:
                continue  # STRICT: an undeclared table never holds a source back
            if 0 <= r != out[source].version:
                out[source] = DeltaLog.for_table(source).snapshot(version=r)
    return out


def _wait_until_reflected(
    spark: SparkSession, log: DeltaLog, name: str | None, snap: Snapshot, needed: dict[str, int]
) -> Snapshot:
    """``snap``, or a newer snapshot of the derived table, that reflects each source at ``needed``."""
    raw = spark.conf.get(DERIVED_WAIT_CONF, None)
    try:
        wait_s = max(0.0, float(raw)) / 1000 if raw else DERIVED_WAIT_DEFAULT_MS / 1000
    except ValueError:
        wait_s = DERIVED_WAIT_DEFAULT_MS / 1000
    deadline = time.monotonic() + wait_s
    pause = 0.01
    while True:
        behind = {s: (v, reflected_version(snap, s)) for s, v in needed.items()}
        behind = {s: vr for s, vr in behind.items() if vr[1] < vr[0]}
        if not behind:
            return snap
        if time.monotonic() >= deadline:
            source, (want, have) = next(iter(behind.items()))
            raise DerivedTableLagError(
                f"{cut.label(log.table_path, name)} is maintained from {source} ({MAINTAINED_FROM}) and reflects "
                f"its version {have} (as of its own version {snap.version}), but this statement must see version "
                f"{want}, committed before it started; waited {wait_s:g} s. Is its maintaining job running? "
                f"Raise {DERIVED_WAIT_CONF}, or read at SERIALIZABLE (no wait, possibly older)."
            )
        time.sleep(pause)
        pause = min(0.2, pause * 1.5)
        snap = log.update()


def _strict_cut(logs: dict[str, tuple[DeltaLog, str | None]], timeout_s: float) -> dict[str, Snapshot]:
    advice = f"Raise {CUT_TIMEOUT_CONF}, or read at SERIALIZABLE (which may serve an older consistent cut)."
    return cut.consistent_cut({p: name for p, (_, name) in logs.items()}, timeout_s, advice=advice)


def _cut_timeout_s(spark: SparkSession) -> float:
    raw = spark.conf.get(CUT_TIMEOUT_CONF, None)
    try:
        return max(0.0, float(raw)) / 1000 if raw else CUT_TIMEOUT_DEFAULT_MS / 1000
    except ValueError:
        return CUT_TIMEOUT_DEFAULT_MS / 1000


def _remember_cut(spark: SparkSession, snaps: dict[str, Snapshot]) -> None:
    cut = next(_cut_ids)
    with _lock:
        per = _cache.setdefault(spark, {})
        for path, snap in snaps.items():
            old = per.get(path)
            if old is None or old[0].version <= snap.version:
                per[path] = (snap, cut)


def note_write(spark: SparkSession, path: str) -> None:
    """After this session wrote ``path``: later SERIALIZABLE reads see at least that write."""
    log = DeltaLog.for_table(path)
    try:
        _remember_cut(spark, {log.table_path: log.update()})
    except DeltaTableNotFoundError:
        pass
