"""Session read isolation (``SET TRANSACTION_ISOLATION``) and the snapshots reads use.

STRICT SERIALIZABLE (the default) refreshes a table to its latest committed version
before every read, so a read that starts after a commit finished sees it. SERIALIZABLE
may serve a read from the snapshot this session read last (no log listing), which is
consistent but possibly older; a session's own writes through ``serialake.sql`` move that
snapshot forward, so it never reads older than what it wrote. The other SQL levels run as
SERIALIZABLE. The level is a Spark conf of the session, so it is visible in ``SET``.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from serialake.core import DeltaLog
from serialake.core.snapshot import Snapshot
from serialake.exceptions import DeltaTableNotFoundError
from serialake.sql.parser import ISOLATION_LEVELS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_ISOLATION",
    "ISOLATION_CONF",
    "note_write",
    "read_snapshot",
    "session_isolation",
    "set_session_isolation",
]

ISOLATION_CONF = "spark.serialake.transactionIsolation"
DEFAULT_ISOLATION = "STRICT SERIALIZABLE"

_cache: weakref.WeakKeyDictionary[Any, dict[str, Snapshot]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


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
    """The snapshot a read of ``path`` uses at the session's level (or the one asked for)."""
    log = DeltaLog.for_table(path)
    if not log.table_exists():
        label = f"Table {name} (location {log.table_path})" if name else f"{log.table_path}"
        raise DeltaTableNotFoundError(f"{label} is not a Delta table (no _delta_log commits found)")
    if version is not None or timestamp is not None:
        return log.snapshot(version=version, timestamp=timestamp)
    if session_isolation(spark) == "SERIALIZABLE":
        with _lock:
            cached = _cache.get(spark, {}).get(log.table_path)
        if cached is not None:
            return cached
    snap = log.update()
    _remember(spark, log.table_path, snap)
    return snap


def note_write(spark: SparkSession, path: str) -> None:
    """After this session wrote ``path``: later SERIALIZABLE reads see at least that write."""
    log = DeltaLog.for_table(path)
    try:
        _remember(spark, log.table_path, log.update())
    except DeltaTableNotFoundError:
        pass


def _remember(spark: SparkSession, path: str, snap: Snapshot) -> None:
    with _lock:
        per = _cache.setdefault(spark, {})
        old = per.get(path)
        if old is None or old.version <= snap.version:
            per[path] = snap
