"""Iceberg conversion after commits, in the background, one thread per table (Delta UniForm).

The commit path calls ``after_commit(log, version, configuration)``, as a step after the
commit (``core.txn.post_commit``): for a table with ``delta.universalFormat.enabledFormats``
including ``iceberg`` it hands the version to the table's ``IcebergConverter`` and returns at
once. The converter converts the newest version it
was asked for (versions queued while it worked are skipped: converting 7 covers 5 and 6), on
its own thread, and never raises into the committer: a failure is logged and kept in
``last_error``; the next commit's conversion (or ``convert_now``) tries again. A local table
of ``CHILD_CONVERSION_FILES`` files or more is converted by a child process at idle priority
(``worker``), as big checkpoints are, so the committing process's interpreter lock stays
free. A process that exits waits for the conversions it started (up to ``SERIALAKE_ICEBERG_EXIT_WAIT``
seconds, 60 by default), so a job's last commit is not left without Iceberg metadata.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from serialake.core.iceberg.conversion import convert
from serialake.core.iceberg.errors import IcebergConversionError
from serialake.core.model import uniform

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog
    from serialake.core.log.snapshot import Snapshot

__all__ = [
    "IcebergConverter",
    "after_commit",
    "convert_now",
    "iceberg_enabled",
]

logger = logging.getLogger("serialake")

def iceberg_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether a table's properties ask for Iceberg metadata (``core.uniform.iceberg_enabled``)."""
    return uniform.iceberg_enabled(configuration)


def convert_now(log: DeltaLog, version: int | None = None) -> str:
    """Convert ``version`` (the latest when None) on this thread; returns the metadata file's path.

    For tools and tests; raises what ``convert`` raises.
    """
    return convert(log, log.snapshot(version))


def after_commit(log: DeltaLog, version: int, configuration: Mapping[str, str]) -> None:
    """The commit path's hook: schedule the conversion of ``version`` when the table is a UniForm table.

    Cheap (a property lookup, then a queue). The commit runs it as a step after the commit
    (``core.txn.post_commit.after_commit``): a failure to schedule is warned about, never raised
    into the commit; the conversion's own failures are logged on its thread (``last_error``).
    """
    if iceberg_enabled(configuration):
        IcebergConverter.for_table(log).schedule(log, version)


#: Files from which a local table is converted by a child process (``worker``).
CHILD_CONVERSION_FILES = 50_000


def _in_child(log: DeltaLog, snapshot: Snapshot) -> bool:
    """Whether to convert in a child process (``worker``): big local tables, or as
    ``SERIALAKE_ICEBERG_PROCESS`` (``auto``, ``always``, ``never``) says."""
    from serialake.storage.local import LocalLogStore

    mode = os.environ.get("SERIALAKE_ICEBERG_PROCESS", "auto").strip().lower()
    if mode not in ("auto", "always"):
        return False
    store = log.store  # the child rebuilds the store from the path: only the default local store
    if type(store) is not LocalLogStore or store.fault_hook is not None:
        return False
    return mode == "always" or snapshot.rows_held() >= CHILD_CONVERSION_FILES


def _convert_in_child(log: DeltaLog, version: int) -> str:
    """``convert`` of ``version`` by ``python -m serialake.core.iceberg.worker``; the metadata file's path."""
    from serialake.core.log.children import run_quiet_child

    code, out, reason = run_quiet_child("serialake.core.iceberg.worker", [log.table_path, str(version)])
    if code != 0:
        raise IcebergConversionError(
            f"the conversion in a child process failed: {reason}", table=log.table_path, version=version
        )
    return out


_exit_hook = threading.Lock()
_exit_hook_set = False


def _wait_at_exit() -> None:
    """Register, once, the exit hook that lets running conversions finish (module docstring)."""
    global _exit_hook_set
    with _exit_hook:
        if _exit_hook_set:
            return
        _exit_hook_set = True

    def finish() -> None:
        try:
            seconds = float(os.environ.get("SERIALAKE_ICEBERG_EXIT_WAIT", "60"))
        except ValueError:
            seconds = 60.0
        if not IcebergConverter.wait_all(seconds):
            logger.warning("Iceberg conversions still running after %.0f s at exit were abandoned", seconds)

    atexit.register(finish)


def _log_failure(delta_log: DeltaLog, version: int, error: BaseException) -> None:
    logger.warning("Iceberg conversion of %s at version %d failed: %s", delta_log.table_path, version, error)


class IcebergConverter:
    """Converts one table's versions to Iceberg on one background thread, newest first.

    Attributes:
        last_error: the last conversion's error (None after a success).
        last_error_version: the version that failed.
        converted_version: the newest version converted by this converter (-1: none).
        metadata_path: the metadata file of ``converted_version``.
    """

    _instances: dict[tuple[str, int], IcebergConverter] = {}
    _instances_lock = threading.Lock()

    def __init__(self, table_path: str) -> None:
        self.table_path = table_path
        self._cond = threading.Condition()
        self._requested = -1
        self._done = -1
        self._log: DeltaLog | None = None
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None
        self.last_error_version: int | None = None
        self.converted_version = -1
        self.metadata_path: str | None = None

    @classmethod
    def for_table(cls, log: DeltaLog) -> IcebergConverter:
        """The process's converter of ``log``'s table (one per table path and store)."""
        key = (log.table_path, id(log.store))
        with cls._instances_lock:
            inst = cls._instances.get(key)
            if inst is None:
                inst = cls(log.table_path)
                cls._instances[key] = inst
            return inst

    def schedule(self, log: DeltaLog, version: int) -> None:
        """Ask for ``version`` to be converted (a newer request supersedes it); returns at once."""
        with self._cond:
            if version <= self._requested:
                return
            self._requested = version
            self._log = log
            if self._thread is None:
                _wait_at_exit()
                self._thread = threading.Thread(
                    target=self._run, name=f"serialake-iceberg-{self.table_path}", daemon=True
                )
                self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every requested version is converted (or failed); False when ``timeout`` ran out."""
        with self._cond:
            return self._cond.wait_for(lambda: self._thread is None, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._requested <= self._done or self._log is None:
                    self._thread = None
                    self._cond.notify_all()
                    return
                version, delta_log = self._requested, self._log
            done = version
            try:
                snapshot = delta_log.update()
                if snapshot.version < version:
                    snapshot = delta_log.snapshot(version)
                # The newest version: it covers those queued before it.
                if _in_child(delta_log, snapshot):
                    path = _convert_in_child(delta_log, snapshot.version)
                else:
                    path = convert(delta_log, snapshot)
                done = snapshot.version
                self.metadata_path, self.converted_version = path, max(self.converted_version, done)
                self.last_error = self.last_error_version = None
            except BaseException as e:  # noqa: BLE001 - kept and logged, never raised into a committer
                self.last_error, self.last_error_version = e, version
                _log_failure(delta_log, version, e)
            with self._cond:
                self._done = max(self._done, done)

    @classmethod
    def wait_all(cls, timeout: float | None = None) -> bool:
        """``wait`` on every converter of this process (tests, tools that exit)."""
        with cls._instances_lock:
            converters = list(cls._instances.values())
        return all(c.wait(timeout) for c in converters)

    def __repr__(self) -> str:
        return f"IcebergConverter({self.table_path!r}, converted={self.converted_version})"
