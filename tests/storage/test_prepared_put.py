"""A commit that loses the race for a version puts the same durable bytes at the next one.

The local store writes and fsyncs a commit body once, as an unnamed inode, and links it at
each version tried (``LocalLogStore.prepare_put``); the body is written anew only when
rebasing over a winner changed the actions, or when a link's outcome was unknown.
"""

from __future__ import annotations

import errno
import os
from collections import Counter

import pytest

from serialake.core import DeltaLog
from serialake.core.log.logfiles import commit_name
from serialake.core.model.actions import Metadata
from serialake.core.txn import transaction as transaction_module
from serialake.storage.base import PreparedPut
from serialake.storage.local import LocalLogStore
from tests.core.conftest import SCHEMA, add_file


class CountingStore(LocalLogStore):
    """The real local store, counting each step of its commit writes (``fault_hook``)."""

    def __init__(self, fail: dict[str, int] | None = None) -> None:
        super().__init__(fsync=True)
        self.steps: Counter[str] = Counter()
        self.fail = dict(fail or {})  # step -> errno, injected once
        self.fault_hook = self._count

    def _count(self, step: str, path: str) -> None:
        if not path.endswith(".json"):
            return
        self.steps[step] += 1
        err = self.fail.pop(step, None)
        if err is not None:
            raise OSError(err, os.strerror(err), path)


def _commits(log: DeltaLog) -> list[str]:
    return sorted(n for n in os.listdir(log.log_path) if n.endswith(".json"))


def test_lost_race_links_the_same_durable_bytes_at_the_next_version(make_table) -> None:
    log = make_table()
    store = CountingStore()
    ours = DeltaLog(log.table_path, store=store)
    txn = ours.start_transaction()
    for _ in range(2):  # two winners take versions 1 and 2
        log.start_transaction().commit([add_file(1)], operation="WRITE")
    assert txn.commit([add_file(2)], operation="WRITE") == 3
    # Written and fsynced once; linked at 1 (taken: both winners are read, on to the first missing
    # name), then at 3 without trying 2; the directory synced once.
    assert store.steps == Counter(
        {"mkdir": 1, "create": 1, "write": 1, "fsync": 1, "link": 2, "linked": 1, "fsync-dir": 1}
    )
    assert DeltaLog(log.table_path).read_commit(3).commit_info.txn_id == txn.txn_id
    assert _commits(log) == [commit_name(v) for v in range(4)]
    assert not [n for n in os.listdir(log.log_path) if n.startswith(".")]


def test_body_changed_by_rebasing_is_written_anew(make_table, monkeypatch: pytest.MonkeyPatch) -> None:
    """A winner with a later in-commit timestamp moves ours after it: the new body is what lands."""
    log = make_table(props={"delta.enableInCommitTimestamps": "true"})
    store = CountingStore()
    ours = DeltaLog(log.table_path, store=store)
    txn = ours.start_transaction()
    later = transaction_module.now_ms() + 3_600_000
    monkeypatch.setattr(transaction_module, "now_ms", lambda: later)
    log.start_transaction().commit([add_file(1)], operation="WRITE")
    monkeypatch.undo()
    assert txn.commit([add_file(2)], operation="WRITE") == 2
    assert store.steps["create"] == 2 and store.steps["link"] == 2 and store.steps["fsync-dir"] == 1
    stamps = [DeltaLog(log.table_path).read_commit(v).commit_info.get("inCommitTimestamp") for v in (1, 2)]
    assert stamps == [later, later + 1]


def test_unknown_link_outcome_never_names_the_same_inode_again(make_table) -> None:
    """EIO from linkat hides whether the name was made: the next attempt writes a new inode."""
    log = make_table()
    store = CountingStore(fail={"link": errno.EIO})
    ours = DeltaLog(log.table_path, store=store)
    txn = ours.start_transaction()
    assert txn.commit([add_file(1)], operation="WRITE") == 1
    assert store.steps["create"] == 2 and store.steps["link"] == 2
    assert _commits(log) == [commit_name(0), commit_name(1)]


def test_first_commit_creates_the_log_directory(tmp_path) -> None:
    log = DeltaLog(str(tmp_path / "new"), store=LocalLogStore())
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA))
    assert txn.commit([add_file()], operation="CREATE TABLE") == 0
    assert _commits(log) == [commit_name(0)]


def test_stores_that_change_put_if_absent_keep_it() -> None:
    """A subclass overriding ``put_if_absent`` (a test double, a gate) is called for every put."""

    class Gate(LocalLogStore):
        def put_if_absent(self, path: str, data: bytes) -> None:
            super().put_if_absent(path, data)

    assert type(Gate().prepare_put(b"x")) is PreparedPut
    assert type(LocalLogStore().prepare_put(b"x")) is not PreparedPut
    no_tmpfile = LocalLogStore()
    no_tmpfile._tmpfile_ok = False
    assert type(no_tmpfile.prepare_put(b"x")) is PreparedPut


def _same_directory(fd: int, path: str) -> bool:
    held, now = os.fstat(fd), os.stat(path)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


@pytest.mark.parametrize("how", ["prepared", "put_if_absent", "write"])
def test_a_log_directory_deleted_and_created_again_gets_the_names_and_the_fsync(
    tmp_path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store keeps a descriptor per directory, for linkat and fsync. A table deleted and
    created again at the same path is a new directory: the new names go there, and the fsync
    that makes them durable is of that directory, never of the deleted one."""
    store = LocalLogStore()
    directory = tmp_path / "_delta_log"
    directory.mkdir()
    store.put_if_absent(str(directory / commit_name(0)), b"{}\n")
    first = store._dirs._cache[str(directory)]
    for f in directory.iterdir():
        f.unlink()
    directory.rmdir()
    directory.mkdir()
    path = str(directory / commit_name(0))
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    if how == "prepared":
        put = store.prepare_put(b'{"v":1}\n')
        put.put(path)
        put.close()
    elif how == "put_if_absent":
        store.put_if_absent(path, b'{"v":1}\n')
    else:
        store.write(path, b'{"v":1}\n')
    monkeypatch.undo()
    assert (directory / commit_name(0)).read_bytes() == b'{"v":1}\n'
    now = store._dirs._cache[str(directory)]
    assert _same_directory(now.fd, str(directory))
    assert synced[-1] == now.fd  # the directory fsynced last is the one at the path now
    assert now is not first and first.fd == -1  # the stale descriptor closed once no put used it


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_directory_descriptors_stay_bounded_over_many_tables(tmp_path) -> None:
    """A process writing thousands of tables keeps at most ``limit`` directory descriptors open
    (one per table forever once broke py4j's select() past FD_SETSIZE in a long run)."""
    before = _open_descriptors()
    for i in range(300):
        store = LocalLogStore(fsync=False)  # as ``store_for``: a store per table, one descriptor cache
        d = tmp_path / f"t{i}" / "_delta_log"
        store.put_if_absent(str(d / commit_name(0)), b"{}\n")
        put = store.prepare_put(b'{"v":1}\n')
        put.put(str(d / commit_name(1)))
        put.close()
    assert store._dirs.open_count() == store._dirs.limit
    assert _open_descriptors() - before <= store._dirs.limit
    for i in range(300):  # every table got its commits, each in its own directory
        d = tmp_path / f"t{i}" / "_delta_log"
        assert (d / commit_name(1)).read_bytes() == b'{"v":1}\n'


def test_an_evicted_descriptor_stays_open_while_a_put_holds_it(tmp_path) -> None:
    """Eviction never closes a descriptor between a put's link and its fsync: the number could be
    reused by another file, and the fsync would then sync the wrong one."""
    from serialake.storage.local import _DirHandles

    handles = _DirHandles(limit=2)
    dirs = [tmp_path / f"d{i}" for i in range(4)]
    for d in dirs:
        d.mkdir()
    held = handles.acquire(str(dirs[0]))
    for d in dirs[1:]:
        handles.release(handles.acquire(str(d)))
    assert not held.cached and held.fd >= 0
    assert _same_directory(held.fd, str(dirs[0]))
    os.fsync(held.fd)
    handles.release(held)
    assert held.fd == -1 and handles.open_count() == 2


def test_threads_committing_to_many_tables_share_bounded_descriptors(tmp_path) -> None:
    """Eight threads race commits into 40 tables through one store with room for 4 descriptors:
    every version lands exactly once, in its own table, and nothing stays open past the bound."""
    from concurrent.futures import ThreadPoolExecutor

    from serialake.exceptions import FileAlreadyExistsError
    from serialake.storage.local import _DirHandles

    store = LocalLogStore(fsync=True)
    store._dirs = _DirHandles(limit=4)
    won: list[tuple[int, int, int]] = []

    def writer(w: int) -> None:
        for step in range(60):
            table = (w * 7 + step) % 40
            d = tmp_path / f"t{table}" / "_delta_log"
            version = step // 10
            try:
                store.put_if_absent(str(d / commit_name(version)), f"{table} {w}".encode())
                won.append((table, version, w))
            except FileAlreadyExistsError:
                pass

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(writer, range(8)))
    assert len({(t, v) for t, v, _ in won}) == len(won)  # one winner per version
    for table, version, w in won:
        assert (tmp_path / f"t{table}" / "_delta_log" / commit_name(version)).read_bytes() == f"{table} {w}".encode()
    assert store._dirs.open_count() <= 4
    assert all(h.users == 0 for h in store._dirs._cache.values())


def test_linkat_by_descriptor_refused_falls_back_to_proc(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels before 6.10 refuse linkat(fd, "", AT_EMPTY_PATH) without CAP_DAC_READ_SEARCH (ENOENT):
    the store names the inode through /proc/self/fd instead, and keeps doing so."""
    import ctypes

    from serialake.storage import local

    real = local._linkat
    calls: list[int] = []

    def refusing(olddirfd: int, old: bytes, newdirfd: int, new: bytes, flags: int) -> int:
        calls.append(flags)
        if flags & local._AT_EMPTY_PATH:
            ctypes.set_errno(errno.ENOENT)
            return -1
        return int(real(olddirfd, old, newdirfd, new, flags))

    monkeypatch.setattr(local, "_linkat", refusing)
    store = LocalLogStore()
    directory = tmp_path / "_delta_log"
    directory.mkdir()
    for v in range(3):
        store.put_if_absent(str(directory / commit_name(v)), b'{"v":%d}\n' % v)
    assert sorted(p.name for p in directory.iterdir()) == [commit_name(v) for v in range(3)]
    assert not store._empty_path_ok
    assert calls == [local._AT_EMPTY_PATH, local._AT_SYMLINK_FOLLOW, local._AT_SYMLINK_FOLLOW, local._AT_SYMLINK_FOLLOW]
    with pytest.raises(FileExistsError):  # (FileAlreadyExistsError) never an overwrite, either way
        store.put_if_absent(str(directory / commit_name(1)), b"x")
    assert (directory / commit_name(1)).read_bytes() == b'{"v":1}\n'


class _ObservedStore(LocalLogStore):
    """The real local store (no fault hook), recording the order of its commit puts and log reads."""

    def __init__(self) -> None:
        super().__init__(fsync=True)
        self.events: list[str] = []

    def _link_tmpfile(self, fd: int, path: str) -> int:
        self.events.append(f"link {os.path.basename(path)[:20].lstrip('0') or '0'}")
        return super()._link_tmpfile(fd, path)

    def read_timed_if_exists(self, path: str) -> tuple[bytes, int] | None:
        got = super().read_timed_if_exists(path)
        if path.endswith(".json"):
            self.events.append(f"{'read' if got else 'missing'} {os.path.basename(path)[:20].lstrip('0') or '0'}")
        return got


def test_after_a_lost_race_the_next_commit_reads_the_log_before_its_first_put(make_table) -> None:
    """Where other writers committed lately, those that land while the body is written and synced are read
    first: the put goes straight to the free version (one put), instead of one refused at each winner."""
    log = make_table()
    store = _ObservedStore()
    ours = DeltaLog(log.table_path, store=store)
    first = ours.start_transaction()
    log.start_transaction().commit([add_file(1)], operation="WRITE")  # version 1: ours loses the race
    assert first.commit([add_file(2)], operation="WRITE") == 2
    assert first.committed is not None and first.committed.attempts == 2
    assert ours.contended

    txn = ours.start_transaction()
    store.events.clear()
    for _ in range(2):  # versions 3 and 4 land while ours is being written
        log.start_transaction().commit([add_file(1)], operation="WRITE")
    assert txn.commit([add_file(2)], operation="WRITE") == 5
    assert store.events == ["read 3", "read 4", "missing 5", "link 5"]
    assert txn.committed is not None and txn.committed.attempts == 1 and txn.committed.winners_checked == 2

    # Alone again: one look that finds nothing, then puts at once.
    for version, looked in ((6, ["missing 6"]), (7, [])):
        txn = ours.start_transaction()
        store.events.clear()
        assert txn.commit([add_file(2)], operation="WRITE") == version
        assert store.events == [*looked, f"link {version}"]
    assert not ours.contended


def test_a_conflict_found_before_the_first_put_fails_the_commit_and_writes_nothing(make_table) -> None:
    from serialake.exceptions import MetadataChangedException

    log = make_table()
    ours = DeltaLog(log.table_path, store=LocalLogStore())
    ours.contended = True  # as after a lost race
    txn = ours.start_transaction()
    txn.update_metadata(txn.metadata.with_configuration(**{"delta.appendOnly": "true"}))  # type: ignore[union-attr]
    other = log.start_transaction()
    other.update_metadata(other.metadata.with_configuration(team="x"))  # type: ignore[union-attr]
    other.commit([], operation="SET TBLPROPERTIES")  # version 1
    with pytest.raises(MetadataChangedException):
        txn.commit([add_file(1)], operation="SET TBLPROPERTIES")
    assert _commits(log) == [commit_name(0), commit_name(1)]
    assert not [n for n in os.listdir(log.log_path) if n.startswith(".")]


def test_a_probe_for_a_missing_commit_is_an_answer_not_an_error(make_table) -> None:
    from serialake.storage.base import LogStore

    log = make_table()
    missing = os.path.join(log.log_path, commit_name(7))
    assert LocalLogStore().read_timed_if_exists(missing) is None
    with pytest.raises(FileNotFoundError):
        LocalLogStore().read_timed(missing)
    data, mtime = LocalLogStore().read_timed_if_exists(os.path.join(log.log_path, commit_name(0))) or (b"", 0)
    assert b'"metaData"' in data and mtime > 0
    # The default (for stores that only define read_timed) gives the same answers.
    assert LogStore.read_timed_if_exists(LocalLogStore(), missing) is None
    with pytest.raises(FileNotFoundError):
        log.read_commit(7)
