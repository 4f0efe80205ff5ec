"""``DeltaLog``: one table's transaction log, its snapshots and its commits.

One ``DeltaLog`` per table path per process (``DeltaLog.for_table`` caches it). It keeps
the latest snapshot and refreshes it incrementally: new commits are found by probing
the next version numbers, never by replaying from version 0 when state is at hand.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from serialake.core.log import groups
from serialake.core.log.checkpoint import read_checkpoint, write_checkpoint_table
from serialake.core.log.children import WorkerError, quiet_worker
from serialake.core.log.logfiles import (
    LAST_CHECKPOINT,
    LOG_DIR,
    CheckpointRef,
    LogSegment,
    build_segment,
    checkpoint_name,
    list_log,
    version_of,
)
from serialake.core.log.snapshot import Snapshot, TableState, commit_timestamp, parse_commit, parse_commit_items
from serialake.core.model import properties as props
from serialake.core.model.actions import Action, AddFile, CommitInfo, Metadata, now_ms
from serialake.exceptions import (
    CheckpointError,
    CorruptLogError,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    StorageWriteError,
)
from serialake.storage import LocalLogStore, LogStore, normalize_table_path, store_for
from serialake.storage.base import FileStatus, errno_text, os_error_advice

if TYPE_CHECKING:
    from serialake.core.txn.transaction import OptimisticTransaction

log = logging.getLogger("serialake")


class CommitEntry:
    """One commit as read from the log: its actions and timestamp.

    Read from the log, a commit keeps its adds as their checked JSON objects until its
    ``actions`` are first asked for: a conflict check against a winning commit reads the
    paths, partition values and flags it needs from ``items`` and builds an ``AddFile`` only
    for a file a rule looks at closely, so validating against many winners builds no object
    per file.
    """

    __slots__ = ("_actions", "_items", "timestamp", "version")

    def __init__(self, version: int, items: Sequence[Any], timestamp: int) -> None:
        self.version = version
        self.timestamp = timestamp
        items = tuple(items)
        for x in items:
            if type(x) is dict:
                self._items: tuple[Any, ...] | None = items
                self._actions: tuple[Action, ...] | None = None
                break
        else:
            self._actions, self._items = items, None

    @property
    def actions(self) -> tuple[Action, ...]:
        """Every action, as objects (built on first use, then kept)."""
        actions = self._actions
        if actions is None:
            with _BUILD_LOCK:
                if self._actions is None:
                    items = self._items or ()
                    self._actions = tuple(AddFile._from_obj(x) if type(x) is dict else x for x in items)
                    self._items = None
                actions = self._actions
        return actions

    @property
    def items(self) -> tuple[Any, ...]:
        """The actions, adds as their checked JSON objects (dicts) while ``actions`` is not built."""
        items = self._items
        if items is None:
            return self.actions
        return items

    @property
    def commit_info(self) -> CommitInfo | None:
        for a in self.items:
            if type(a) is CommitInfo:
                return a
        return None


_BUILD_LOCK = threading.Lock()
_T = TypeVar("_T")


def _checkpoint_interval(metadata: Metadata | None) -> int:
    """``delta.checkpointInterval`` of the table (its default without metadata)."""
    return int(props.get(metadata.configuration if metadata is not None else {}, props.CHECKPOINT_INTERVAL))


class DeltaLog:
    """Access to one table's ``_delta_log``."""

    #: Every log of this process that is still referenced, by (table path, store): while anything
    #: holds a log (a transaction, a reader, a scheduled checkpoint) it stays its table's one
    #: instance here. Of those nothing holds, the ``RECENT_LOGS`` most recently opened are kept
    #: (their snapshots make the next read cheap); older ones are dropped with their snapshots and
    #: commit caches, and reopening one replays from its newest checkpoint. A process that visits
    #: many tables (a catalog-wide job, a test suite) keeps its memory bounded.
    _instances: weakref.WeakValueDictionary[tuple[str, int], DeltaLog] = weakref.WeakValueDictionary()
    _recent: OrderedDict[tuple[str, int], DeltaLog] = OrderedDict()
    RECENT_LOGS = 64
    _instances_lock = threading.Lock()
    _COMMIT_CACHE = 512
    #: Background checkpoints of tables holding at least this many files are written by this
    #: process's checkpoint worker (``core/log/checkpoint_worker.py``), a child at idle priority:
    #: here they would take CPU the commits need (~2 us per file, every checkpointInterval
    #: commits; measured at 10,000 files and an interval of 100, a quarter of four writers'
    #: commit rate on two cores) and hold the interpreter lock in slices, each delaying this
    #: process's commits by up to the lock's 5 ms switch interval. Already at 500 to 2,000 files
    #: a checkpoint here holds the lock 9 to 24 ms, while the worker's one-time start (~0.5 s of
    #: CPU) runs at idle priority and was measured not to slow the writers. Below it, where a
    #: checkpoint costs a few ms, no child is started (small tables, short-lived tools).
    #: ``SERIALAKE_CHECKPOINT_PROCESS`` = ``always`` / ``never`` overrides (``auto`` by default);
    #: only tables on the default local store qualify.
    WORKER_CHECKPOINT_FILES = 500
    #: The checkpoint worker's checkpoints of a table take at most about this share of one CPU. One
    #: due by ``delta.checkpointInterval`` is put off while the table's newest checkpoint is younger
    #: than the CPU time the worker's last one took divided by this share, and written (at the newest
    #: version) when that time has passed, if no other is newer. At idle priority, checkpoints still
    #: slow the writers that run beside them: each evicts their caches and holds CPUs in the kernel
    #: (measured at 15,000 files, interval 100, four writers on two cores: ~15 ms each, ~20 written in
    #: 5 s, 6% fewer commits than with none; a 1 s gap between them: 2 written, the commits of none).
    #: A new reader replays at most that time's commits (0.75 s at 15 ms a checkpoint) past the
    #: newest checkpoint.
    CHECKPOINT_CPU_SHARE = 0.02

    def __init__(self, table_path: str, store: LogStore | None = None) -> None:
        self.table_path = normalize_table_path(table_path)
        self.log_path = os.path.join(self.table_path, LOG_DIR)
        self._log_prefix = os.path.join(self.log_path, "")  # the log path and its separator
        self.store = store or store_for(self.table_path)
        self._lock = threading.RLock()
        self._snapshot: Snapshot | None = None
        self._commits: OrderedDict[int, CommitEntry] = OrderedDict()
        self._commits_lock = threading.Lock()
        self._checkpointer: ThreadPoolExecutor | None = None
        self._pending_checkpoint: Future | None = None
        self._latest_checkpoint_request = -1
        self.last_checkpoint_error: BaseException | None = None
        self._checkpoint_cpu: float | None = None  # CPU seconds of the worker's last checkpoint here
        self._checkpoint_later: threading.Timer | None = None  # a put-off checkpoint (CHECKPOINT_CPU_SHARE)
        #: Whether this process's last commit here found commits of others it had not seen (a hint:
        #: the next commit reads the log before its first put, ``OptimisticTransaction._attempts``).
        self.contended = False
        #: Lock commits (version, their txnId) resolved without a publication: not looked at again.
        self._resolved_locks: set[tuple[int, str]] = set()

    # -- construction -----------------------------------------------------------
    @classmethod
    def for_table(cls, path: str, store: LogStore | None = None) -> DeltaLog:
        """The (process-wide cached) log of the table at ``path``."""
        key = (normalize_table_path(path), id(store) if store is not None else 0)
        with cls._instances_lock:
            inst = cls._instances.get(key)
            if inst is None:
                inst = cls(path, store)
                cls._instances[key] = inst
            cls._recent[key] = inst
            cls._recent.move_to_end(key)
            while len(cls._recent) > cls.RECENT_LOGS:
                cls._recent.popitem(last=False)
            return inst

    @classmethod
    def clear_cache(cls) -> None:
        with cls._instances_lock:
            cls._instances.clear()
            cls._recent.clear()

    @classmethod
    def invalidate(cls, path: str) -> None:
        """Forget what this process knows of the table at ``path`` (every cached log of it): the
        next refresh loads it afresh. For a table about to be removed (DROP TABLE): its
        scheduled checkpoints are cancelled or waited for first, so none is written into the
        removed directory afterwards (it would corrupt a table created again there)."""
        key = normalize_table_path(path)
        with cls._instances_lock:
            logs = [inst for (p, _), inst in list(cls._instances.items()) if p == key]
        for inst in logs:
            inst._settle_checkpoints()
            with inst._lock:
                inst._snapshot = None
                with inst._commits_lock:
                    inst._commits.clear()

    def _settle_checkpoints(self) -> None:
        """Cancel a put-off checkpoint and wait for the scheduled one (its failure is not raised)."""
        with self._lock:
            later, self._checkpoint_later = self._checkpoint_later, None
            self._latest_checkpoint_request = 1 << 62  # queued requests now skip themselves
        if later is not None:
            later.cancel()
            if later is not threading.current_thread() and later.ident is not None:
                later.join()  # (it may have run: its request is then the one waited for below)
        fut = self._pending_checkpoint
        if fut is not None:
            with contextlib.suppress(BaseException):
                fut.result()
        with self._lock:
            self._latest_checkpoint_request = -1

    def __repr__(self) -> str:
        return f"DeltaLog({self.table_path!r})"

    # -- files ------------------------------------------------------------------
    def commit_path(self, version: int) -> str:
        return f"{self._log_prefix}{version:020d}.json"  # os.path.join(log_path, commit_name(version))

    def table_exists(self) -> bool:
        """Whether the path holds a Delta table (a commit or checkpoint in ``_delta_log``)."""
        try:
            self._latest_segment()
        except DeltaTableNotFoundError:
            return False
        return True

    def read_commit(self, version: int) -> CommitEntry:
        """Commit ``version`` (cached); ``FileNotFoundError`` when it does not exist."""
        entry = self._commits.get(version)  # (one read of the cache is atomic: its lock is for changing it)
        if entry is None:
            entry = self._read_new_commit(version)
            if entry is None:
                path = self.commit_path(version)
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return entry

    def _read_new_commit(self, version: int) -> CommitEntry | None:
        """``read_commit`` of a version not cached: read, parse and check it, then remember it.

        None when there is no such commit: a writer probes for the next version after each
        commit it sees, and the answer is usually no (returned, not raised through the layers).
        """
        got = self._retrying(self.store.read_timed_if_exists, self.commit_path(version))
        if got is None:
            return None
        data, mtime = got
        items = parse_commit_items(data, self.table_path, version)
        stamp = commit_timestamp(items, -1)  # the in-commit timestamp; else the file's time
        entry = CommitEntry(version, items, stamp if stamp >= 0 else mtime)
        self._remember(entry)
        return entry

    def _read_with_retry(self, path: str) -> bytes:
        """Read a log file, retrying transient I/O errors (a missing file is not transient)."""
        return self._retrying(self.store.read, path)

    def _retrying(self, read: Callable[[str], _T], path: str, attempts: int = 5) -> _T:
        """``read(path)``, retrying transient I/O errors (a missing file is not transient)."""
        for i in range(attempts):
            try:
                return read(path)
            except FileNotFoundError:
                raise
            except OSError:
                if i == attempts - 1:
                    raise
                time.sleep(0.001 * 2**i)
        raise AssertionError("unreachable")

    def remember_commit(self, version: int, actions: list[Action]) -> None:
        """Cache a commit this process just wrote, so refreshing does not read it back."""
        self._remember(CommitEntry(version, actions, commit_timestamp(actions, now_ms())))

    def _remember(self, entry: CommitEntry) -> None:
        commits = self._commits
        with self._commits_lock:
            commits[entry.version] = entry
            while len(commits) > self._COMMIT_CACHE:
                commits.popitem(last=False)  # the oldest

    def commits_after(self, version: int, limit: int | None = None) -> list[CommitEntry]:
        """Commits ``version+1, version+2, ...`` that exist now, found by probing names."""
        out: list[CommitEntry] = []
        v = version + 1
        first_cached = newest_cached = -1  # indexes in ``out`` of remembered commits
        commits = self._commits
        while limit is None or len(out) < limit:
            entry = commits.get(v)
            if entry is None:
                entry = self._read_new_commit(v)
                if entry is None:
                    break
            else:
                newest_cached = len(out)
                if first_cached < 0:
                    first_cached = newest_cached
            out.append(entry)
            v += 1
        if out and newest_cached == len(out) - 1 and not self.store.exists(self.commit_path(out[-1].version)):
            # Remembered from a table that was deleted (and maybe re-created) at this path: the
            # newest remembered commit is checked (one look, however many are remembered). A
            # commit read after it shows the log goes on past it: a table created again that
            # got as far would hold that version too, so looking would tell nothing.
            with self._commits_lock:
                self._commits.clear()
            del out[first_cached:]
        return out

    # -- snapshots --------------------------------------------------------------
    def _latest_segment(self, version: int | None = None) -> LogSegment:
        return build_segment(self.store, self.table_path, self.log_path, version)

    def _load(self, segment: LogSegment) -> Snapshot:
        state = TableState()
        ts = 0
        if segment.checkpoint is not None:
            state.apply(read_checkpoint(self.store, self.log_path, segment.checkpoint))
            ts = segment.checkpoint.files[0].modification_time
        for v, st in segment.commits:
            entry = self._entry_from_listing(v, st.modification_time)
            state.apply(entry.actions)
            ts = entry.timestamp
        return Snapshot(self.table_path, segment.version, state, segment, ts)

    def _entry_from_listing(self, version: int, mtime: int) -> CommitEntry:
        with self._commits_lock:
            entry = self._commits.get(version)
        if entry is not None:
            return entry
        try:
            data = self._read_with_retry(self.commit_path(version))
        except FileNotFoundError:
            raise CorruptLogError(
                f"Table {self.table_path}: commit version {version} disappeared while loading"
            ) from None
        actions = parse_commit(data, self.table_path, version)
        entry = CommitEntry(version, actions, commit_timestamp(actions, mtime))
        self._remember(entry)
        return entry

    def update(self) -> Snapshot:
        """The latest snapshot, refreshed by reading only commits newer than the cached one.

        A table removed under the cache (its directory deleted, by this process or another) is
        seen on the refresh that finds no newer commit: the cached version's commit file is
        gone (one existence check, the same one a commit's refresh makes anyway). The cache
        is then dropped and the table loaded afresh: ``DeltaTableNotFoundError`` when nothing
        is there, a table created again at the path otherwise.

        A commit this refresh read that is the lock of a transaction across tables, not followed by
        its publication, is resolved first (``groups.resolve_lock``: the publication put after it,
        or the group aborted), so a snapshot holds all of such a transaction or none of it. Without
        a lock this costs a look at each new commit's ``commitInfo``, already parsed.
        """
        while True:
            before = self._snapshot
            snap = self._refresh()
            first = before.version + 1 if before is not None and before.version <= snap.version else 0
            first = min(first, snap.version)  # (the newest always: a lock this thread left as its own)
            if not self._resolve_locks(max(first, snap.version - self._COMMIT_CACHE + 1), snap.version):
                return snap

    def _resolve_locks(self, first: int, last: int) -> bool:
        """Resolve the unresolved locks among commits ``first..last`` (cached ones); whether one was published."""
        commits = self._commits
        published = False
        for v in range(first, last + 1):
            entry = commits.get(v)
            ci = entry.commit_info if entry is not None else None
            if not groups.is_lock(ci):
                continue
            assert ci is not None
            key = (v, str(ci.values.get("txnId")))
            if key in self._resolved_locks:
                continue
            if v < last:  # followed by a commit: only a written table's lock not followed by its publication
                rec = groups.group_of(ci) or {}
                nxt = commits.get(v + 1)
                after = groups.group_of(nxt.commit_info) if nxt is not None else None
                if not rec.get("writes") or (after is not None and after.get("txnId") == rec.get("txnId")):
                    self._resolved_locks.add(key)
                    continue
            outcome = groups.resolve_lock(self, v, ci)
            if outcome != "own":
                self._resolved_locks.add(key)
            published = published or outcome == "published"
        return published

    def _refresh(self) -> Snapshot:
        with self._lock:
            snap = self._snapshot
            new = self.commits_after(snap.version) if snap is not None else []
            # A newer commit found (read now, or remembered and seen still there) shows the log goes
            # on; without one, the cached version itself must still be there (version 0 too).
            if snap is not None and not new and not self.store.exists(self.commit_path(snap.version)):
                snap = self._snapshot = None  # deleted or replaced under us: never served again
                with self._commits_lock:
                    self._commits.clear()
            if snap is None:
                snap = self._load(self._latest_segment())
            elif new:
                snap = snap.with_commits([(e.version, e.items, e.timestamp) for e in new])
            self._snapshot = snap
            return snap

    def known_version(self) -> int:
        """The newest version this process has seen of the table (read or written; -1: none), no I/O."""
        snap = self._snapshot
        with self._commits_lock:
            newest = max(self._commits, default=-1)
        return max(snap.version if snap is not None else -1, newest)

    def snapshot(self, version: int | None = None, timestamp: Any = None) -> Snapshot:
        """The table at ``version``, at a ``timestamp`` (ms, datetime or ISO string), or latest."""
        if version is not None and timestamp is not None:
            raise DeltaIllegalArgumentException("Give a version or a timestamp, not both")
        if timestamp is not None:
            version = self.version_at_timestamp(timestamp)
        if version is None:
            return self.update()
        if version < 0:
            raise DeltaIllegalArgumentException(f"Table {self.table_path}: version {version} is negative")
        cached = self._snapshot
        if cached is not None and cached.version == version:
            return cached
        if cached is not None and cached.version < version:
            # Incremental from the cached state when the target is ahead of it.
            latest = self.update()
            if latest.version == version:
                return latest
        return self._load(self._latest_segment(version))

    def commit_timestamps(self) -> list[tuple[int, int]]:
        """``(version, timestamp_ms)`` of every commit still in the log, made non-decreasing."""
        out: list[tuple[int, int]] = []
        last = -1
        listed = {v: st for st in list_log(self.store, self.log_path) if (v := version_of(st.name)) is not None}
        if listed:
            # A listing concurrent with commits can miss one it shows the successor of: ask by name.
            for v in range(min(listed), max(listed)):
                if v not in listed and (found := self.store.status(self.commit_path(v))) is not None:
                    listed[v] = found
        for v, st in sorted(listed.items()):
            ts = st.modification_time
            with self._commits_lock:
                entry = self._commits.get(v)
            if entry is not None:
                ts = entry.timestamp
            ts = max(ts, last + 1) if last >= 0 else ts
            out.append((v, ts))
            last = ts
        return out

    def version_at_timestamp(self, timestamp: Any) -> int:
        """The latest version committed at or before ``timestamp``."""
        ts = to_millis(timestamp)
        stamps = self.commit_timestamps()
        if not stamps:
            raise DeltaTableNotFoundError(f"{self.table_path} is not a Delta table")
        times = [t for _, t in stamps]
        i = bisect.bisect_right(times, ts)
        if i == 0:
            raise DeltaIllegalArgumentException(
                f"Table {self.table_path}: timestamp {format_ms(ts)} is before the earliest available "
                f"version {stamps[0][0]} ({format_ms(stamps[0][1])})"
            )
        return stamps[i - 1][0]

    # -- transactions -----------------------------------------------------------
    def start_transaction(
        self, snapshot: Snapshot | None = None, *, isolation_level: str | None = None, **options: Any
    ) -> OptimisticTransaction:
        """A transaction pinned to ``snapshot`` (the latest when None; none for a new table)."""
        from serialake.core.txn.transaction import OptimisticTransaction

        if snapshot is None:
            try:
                snapshot = self.update()
            except DeltaTableNotFoundError:
                snapshot = None
        return OptimisticTransaction(self, snapshot, isolation_level=isolation_level, **options)

    def history(self, limit: int | None = None) -> list[tuple[int, CommitEntry]]:
        """Newest-first commits with their commitInfo (as many as are still in the log)."""
        latest = self.update().version
        out: list[tuple[int, CommitEntry]] = []
        v = latest
        while v >= 0 and (limit is None or len(out) < limit):
            try:
                out.append((v, self.read_commit(v)))
            except FileNotFoundError:
                break
            v -= 1
        return out

    # -- checkpoints ------------------------------------------------------------
    def snapshot_from(self, base: Snapshot, version: int) -> Snapshot:
        """The snapshot at ``version`` built from an older ``base`` plus the commits in between."""
        if version == base.version:
            return base
        entries = [self.read_commit(v) for v in range(base.version + 1, version + 1)]
        return base.with_commits([(e.version, e.items, e.timestamp) for e in entries])

    def checkpoint(self, version: int | None = None, base: Snapshot | None = None) -> dict[str, Any]:
        """Write a classic checkpoint at ``version`` (latest when None); returns ``_last_checkpoint``.

        With ``base`` (an older snapshot) the state is built incrementally from it.
        """
        if base is not None and version is not None and base.version <= version:
            snap = self.snapshot_from(base, version)
        else:
            snap = self.snapshot(version)
        retention = props.get(snap.configuration, props.DELETED_FILE_RETENTION)
        cutoff = int(time.time() * 1000) - retention
        table = snap.checkpoint_table(cutoff)
        try:
            return write_checkpoint_table(self.store, self.log_path, snap.version, table, snap.num_files)
        except OSError as e:
            raise StorageWriteError(
                f"Table {self.table_path}: writing the checkpoint of version {snap.version} failed "
                f"({errno_text(e)}); {os_error_advice(e.errno, self.log_path)}. "
                "The table is intact: readers replay the commits instead.",
                table=self.table_path,
                path=e.filename or self.log_path,
                errno=e.errno,
                strerror=e.strerror,
                version=snap.version,
            ) from e

    def maybe_checkpoint_async(self, version: int, metadata: Metadata | None, base: Snapshot | None = None) -> None:
        """Schedule a checkpoint after committing ``version`` (the table's ``metadata`` then) if the
        interval says so.

        Runs on a background thread; a failure is logged and kept in
        ``last_checkpoint_error``, never raised into the commit that triggered it.
        """
        interval = metadata.derived(_checkpoint_interval) if metadata is not None else _checkpoint_interval(None)
        if version == 0 or version % interval != 0:
            return
        self._request_checkpoint(version, base)

    def _request_checkpoint(self, version: int, base: Snapshot | None, paced: bool = True) -> None:
        with self._lock:
            # Requests queue on one thread; a request overtaken by a newer one is dropped.
            self._latest_checkpoint_request = max(self._latest_checkpoint_request, version)
            if self._checkpointer is None:
                self._checkpointer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="serialake-checkpoint")
            self._pending_checkpoint = self._checkpointer.submit(self._checkpoint_quietly, version, base, paced)

    def _checkpoint_quietly(self, version: int, base: Snapshot | None, paced: bool = True) -> None:
        try:
            if version < self._latest_checkpoint_request:
                return  # a newer checkpoint is queued: skip this stale one
            cached = self._snapshot
            if cached is not None and cached.version <= version and (base is None or cached.version > base.version):
                base = cached
            if self._checkpoint_in_worker(base):
                wait = self._checkpoint_wait() if paced else 0.0
                if wait > 0:  # put off (CHECKPOINT_CPU_SHARE)
                    self._checkpoint_when_due(wait)
                    return
                try:
                    self.checkpoint_in_worker(version)
                    self.cleanup_expired_records()
                    return
                except (CheckpointError, OSError) as e:  # no worker here, or it failed: here, as for small tables
                    log.info("checkpoint worker for %s at version %d failed (%s); writing it here", self.table_path,
                             version, e)  # fmt: skip
            self.checkpoint_if_due(version, base, unless_busy=True)
            self.cleanup_expired_records()
        except BaseException as e:  # noqa: BLE001 - a checkpoint must never fail a commit
            self.last_checkpoint_error = e
            log.warning("checkpoint of %s at version %d failed: %s", self.table_path, version, e)

    def cleanup_expired_records(self, older_than_ms: int | None = None) -> list[str]:
        """Delete the records of transactions across tables (decisions, staged bodies) that no reader
        or writer needs and are older than ``older_than_ms`` (by default, the table's
        ``delta.logRetentionDuration`` ago; nothing when ``delta.enableExpiredLogCleanup`` is false),
        as Delta deletes expired log files after a checkpoint (``groups.cleanup``). Run after each
        background checkpoint; a failure is logged, never raised. Returns the paths deleted."""
        try:
            snap = self._snapshot
            conf = snap.configuration if snap is not None else {}
            if older_than_ms is None:
                if not props.get(conf, "delta.enableExpiredLogCleanup"):
                    return []
                older_than_ms = now_ms() - int(props.get(conf, props.LOG_RETENTION))
            return groups.cleanup(self, older_than_ms)
        except Exception as e:  # noqa: BLE001 - clean-up is a chore: it never fails the caller
            log.warning("clean-up of the transaction records of %s failed: %s", self.table_path, e)
            return []

    def _checkpoint_wait(self) -> float:
        """Seconds before a worker checkpoint is due by ``CHECKPOINT_CPU_SHARE`` (<= 0: now)."""
        cpu = self._checkpoint_cpu
        if not cpu:
            return 0.0
        try:
            newest = self.store.status(os.path.join(self.log_path, LAST_CHECKPOINT))
        except OSError:
            return 0.0
        if newest is None:
            return 0.0
        return cpu / self.CHECKPOINT_CPU_SHARE - (time.time() - newest.modification_time / 1000)

    def _checkpoint_when_due(self, wait: float) -> None:
        """Ask for a checkpoint of the newest version in ``wait`` seconds (one such request at a time).

        A daemon timer: a process that exits first leaves the put-off checkpoint unwritten, as
        the next writer's interval would have; readers replay the commits since the newest.
        """
        with self._lock:
            later = self._checkpoint_later
            if later is not None and later.is_alive():
                return
            later = threading.Timer(wait, self._checkpoint_newest)
            later.daemon = True
            later.name = "serialake-checkpoint-later"
            self._checkpoint_later = later
            later.start()

    def _checkpoint_newest(self, paced: bool = True) -> None:
        """Ask for a checkpoint of the newest version this process knows (a put-off one's turn)."""
        version = self.known_version()
        if version > 0:
            self._request_checkpoint(version, None, paced)

    def checkpoint_if_due(
        self, version: int, base: Snapshot | None = None, *, unless_busy: bool = False
    ) -> dict[str, Any] | None:
        """Write the checkpoint of ``version`` unless one at or past it exists; its ``_last_checkpoint``
        (None when skipped). Built from ``base`` or the newest checkpoint (``_checkpoint_base``).

        ``unless_busy`` (background checkpoints): also skipped while another process of this
        machine writes a checkpoint of the table (``LogStore.unless_busy``). Writers committing
        faster than a checkpoint is written would otherwise each write one at once, of a table
        with more files each time, for a newer one to replace a moment later; the commit that
        reaches the next interval after it asks again.
        """
        from serialake.core.log.logfiles import read_last_checkpoint

        with self.store.unless_busy(self.log_path) if unless_busy else contextlib.nullcontext(True) as free:
            if not free:
                return None
            last = read_last_checkpoint(self.store, self.log_path)
            if last is not None and last["version"] >= version:
                return None  # another writer already checkpointed at or past this version
            return self.checkpoint(version, base=self._checkpoint_base(last, base, version))

    def _checkpoint_base(self, last: dict | None, base: Snapshot | None, version: int) -> Snapshot | None:
        """What to build the checkpoint of ``version`` from: ``base``, or the newest checkpoint when cheaper.

        A snapshot refreshed commit by commit holds each file as an object, and turning every
        one into a checkpoint row is most of a checkpoint's cost (77 ms of CPU at 10,000 files,
        every ``checkpointInterval`` commits, taken from the committers' CPUs). The newest
        checkpoint's rows are read in Arrow and copied column by column, so building from it
        plus the commits since costs ~9 ms. Used when ``base`` holds more file objects than
        there are commits since that checkpoint; ``base`` when it cannot be read.
        """
        if last is None or last.get("parts") or last.get("v2Checkpoint") or not isinstance(last.get("version"), int):
            return base
        at = last["version"]
        if at >= version or (base is not None and len(base.file_state.extra) <= version - at):
            return base
        try:
            # (Its modification time would only date the snapshot at ``at``; the commits after it date ours.)
            name = checkpoint_name(at)
            ref = CheckpointRef(at, "classic", (FileStatus(name, int(last.get("sizeInBytes") or 0), 0),))
            return self._load(LogSegment(self.log_path, at, ref))
        except Exception as e:  # noqa: BLE001 - gone (cleaned up), another engine's, unreadable: the slow way
            log.debug("checkpoint of %s at version %d built without checkpoint %d: %s", self.table_path, version, at, e)
            return base

    def _checkpoint_in_worker(self, base: Snapshot | None) -> bool:
        """Whether a background checkpoint goes to the checkpoint worker (see ``WORKER_CHECKPOINT_FILES``)."""
        mode = os.environ.get("SERIALAKE_CHECKPOINT_PROCESS", "auto").strip().lower()
        if mode not in ("auto", "always"):
            return False  # "never"
        store = self.store
        # The worker rebuilds the store from the path: only the default local store, as it is.
        if type(store) is not LocalLogStore or store.fault_hook is not None:
            return False
        # Rows held, not live files: counting live files could compute the live masks here.
        return mode == "always" or (base is not None and base.rows_held() >= self.WORKER_CHECKPOINT_FILES)

    def checkpoint_in_worker(self, version: int) -> dict[str, Any] | None:
        """``checkpoint_if_due(version)`` run by this process's checkpoint worker (``core/log/checkpoint_worker.py``,
        local tables); None when a checkpoint at or past ``version`` was there already, or another
        process was writing one.

        The commit path never waits for it; the checkpoint thread waits for the worker's
        answer. A failure raises ``CheckpointError`` with the worker's error.
        """
        request = {"table": self.table_path, "version": version, "fsync": bool(getattr(self.store, "fsync", True))}
        try:
            answer = quiet_worker("serialake.core.log.checkpoint_worker").call(request)
        except WorkerError as e:
            answer = {"ok": False, "error": f"the checkpoint worker failed: {e}"}
        if not answer.get("ok"):
            raise CheckpointError(
                f"Table {self.table_path}: the checkpoint of version {version} (written by the checkpoint worker "
                f"process) failed: {answer.get('error')}. The table is intact: readers replay the commits instead."
            )
        last = answer.get("last")
        cpu = answer.get("cpu")
        if isinstance(last, dict) and isinstance(cpu, (int, float)):
            self._checkpoint_cpu = float(cpu)  # (a skipped one costs next to nothing: not counted)
        return last if isinstance(last, dict) else None

    def wait_for_checkpoints(self) -> None:
        """Block until the scheduled checkpoints are written (tests and short-lived tools); one put
        off (``CHECKPOINT_CPU_SHARE``) is asked for now, at the newest version, and waited for too."""
        with self._lock:
            later, self._checkpoint_later = self._checkpoint_later, None
        if later is not None and later.is_alive():
            later.cancel()
            later.join()  # (cancelled before it ran, or it ran: either way it asks for nothing more)
            self._checkpoint_newest(paced=False)
        fut = self._pending_checkpoint
        if fut is not None:
            fut.result()


def to_millis(ts: Any) -> int:
    """Milliseconds since the epoch from ms, seconds-float, datetime, date or an ISO string."""
    import datetime as dt

    if isinstance(ts, bool):
        raise DeltaIllegalArgumentException(f"Not a timestamp: {ts!r}")
    if isinstance(ts, int):
        return ts
    if isinstance(ts, float):
        return int(ts * 1000)
    if isinstance(ts, str):
        text = ts.strip().replace("Z", "+00:00")
        try:
            ts = dt.datetime.fromisoformat(text)
        except ValueError:
            raise DeltaIllegalArgumentException(
                f"The provided timestamp ('{ts}') cannot be converted to a valid timestamp "
                "(use e.g. '2024-05-01', '2024-05-01 10:30:00' or ISO 8601 with a zone)"
            ) from None
    if isinstance(ts, dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.UTC)
        return int(ts.timestamp() * 1000)
    if isinstance(ts, dt.date):
        return int(dt.datetime(ts.year, ts.month, ts.day, tzinfo=dt.UTC).timestamp() * 1000)
    raise DeltaIllegalArgumentException(f"Not a timestamp: {ts!r}")


def format_ms(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
