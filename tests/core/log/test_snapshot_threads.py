"""Snapshots are shared between threads: a background checkpoint and transactions read the same one.

The lazily built file index of a snapshot must never be seen half-made or cleared. These
tests switch threads every microsecond so that the interleavings that broke before (a
reader following ``_files_from`` while another thread published the index and cleared it:
``TypeError: 'NoneType' object is not subscriptable``) happen within a second.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from serialake.core import DeltaLog
from serialake.core.log.snapshot import Snapshot, TableState
from serialake.core.model.actions import Action, AddFile, Metadata, Protocol, RemoveFile

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
]})  # fmt: skip


@pytest.fixture
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _add(i: int) -> AddFile:
    return AddFile(path=f"p={i % 3}/f{i}.parquet", partition_values={"p": str(i % 3)}, size=i + 1, modification_time=1)


def _chain(depth: int, per_commit: int) -> tuple[Snapshot, set[str]]:
    """A snapshot made by ``depth`` incremental refreshes of a loaded one (its files not built yet)."""
    state = TableState()
    state.apply([Protocol(1, 2), Metadata(schema_string=SCHEMA, partition_columns=("p",)), *map(_add, range(10))])
    snap = Snapshot("/t", 0, state, None, 0)
    live = {f"p={i % 3}/f{i}.parquet" for i in range(10)}
    n = 10
    for v in range(1, depth + 1):
        actions: list[Action] = [_add(n + k) for k in range(per_commit)]
        live |= {a.path for a in actions}  # type: ignore[attr-defined]
        gone = f"p={(v - 1) % 3}/f{v - 1}.parquet"
        actions.append(RemoveFile(path=gone, deletion_timestamp=1))
        live.discard(gone)
        n += per_commit
        snap = snap.with_commits([(v, actions, v)])
    return snap, live


def _run_together(workers: list[Callable[[], Any]]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(workers))

    def run(fn: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _one_round() -> tuple[list[BaseException], list[set[str]], set[str]]:
    snap, live = _chain(depth=4, per_commit=5)
    seen: list[set[str]] = []

    def files() -> None:
        seen.append({a.path for a in snap.all_files})

    def count() -> None:
        assert snap.num_files == len(live)

    def checkpoint() -> None:
        acts = snap.checkpoint_actions(0)
        seen.append({a.path for a in acts if isinstance(a, AddFile)})

    def child() -> None:
        nxt = snap.with_commits([(snap.version + 1, [_add(10_000)], 99)])
        seen.append({a.path for a in nxt.all_files} - {_add(10_000).path})

    def lookups() -> None:
        assert snap.file(sorted(live)[0]) is not None
        assert len(snap.files_by_path()) == len(live)
        assert len(snap.tombstones) == 4

    errors = _run_together([files, count, checkpoint, child, lookups, files, child, count])
    return errors, seen, live


def test_shared_snapshot_lazy_accessors_race(fast_switching: None) -> None:
    """Many threads build, count and copy one snapshot's files at once; all see the same state."""
    deadline = time.monotonic() + 1.0
    rounds = 0
    while time.monotonic() < deadline or rounds < 20:
        rounds += 1
        errors, seen, live = _one_round()
        assert not errors, f"round {rounds}: {errors[0]!r}"
        assert all(s == live for s in seen)


def test_background_checkpoints_while_transactions_filter_files(tmp_path: Any, fast_switching: None) -> None:
    """Writers in threads of one process commit, start transactions and plan reads on the shared
    cached snapshot while the checkpoint thread builds checkpoints from it (interval 2)."""
    log = DeltaLog(str(tmp_path / "t"))
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",),
                                 configuration={"delta.checkpointInterval": "2"}))
    txn.commit([_add(i) for i in range(3)], operation="CREATE TABLE")
    deadline = time.monotonic() + 1.5
    committed: list[int] = []

    def writer(w: int) -> Callable[[], None]:
        def run() -> None:
            i = 0
            while time.monotonic() < deadline:
                t = log.start_transaction()
                t.filter_files([f"p = {w % 3}"])
                assert t.snapshot is not None and t.snapshot.num_files >= 3
                if i % 2 == 0:  # blind appends never conflict
                    log.start_transaction().commit([_add(1000 * (w + 1) + i)])
                    committed.append(1)
                i += 1

        return run

    def reader() -> None:
        while time.monotonic() < deadline:
            snap = log.update()
            assert len(snap.all_files) == snap.num_files

    errors = _run_together([writer(w) for w in range(4)] + [reader])
    log.wait_for_checkpoints()
    assert not errors, repr(errors[0])
    assert log.last_checkpoint_error is None, repr(log.last_checkpoint_error)
    DeltaLog.clear_cache()
    fresh = DeltaLog(log.table_path).update()
    assert fresh.num_files == 3 + len(committed)
    assert fresh.segment is not None and fresh.segment.checkpoint is not None


def test_refreshing_without_reading_files_keeps_no_chain_of_snapshots() -> None:
    """A writer refreshing commit by commit and never reading files (blind appends) must not keep
    every snapshot alive through the lazily applied commits, and each snapshot still has its files,
    across the bound where the file state is published anyway."""
    import gc
    import weakref

    depth = Snapshot._MAX_PENDING_COMMITS * 2 + 7
    state = TableState()
    state.apply([Protocol(1, 2), Metadata(schema_string=SCHEMA, partition_columns=("p",)), *map(_add, range(10))])
    snap = Snapshot("/t", 0, state, None, 0)
    refs = []
    middle: Snapshot | None = None
    for v in range(1, depth + 1):
        snap = snap.with_commits([(v, [_add(100 + v)], v)])
        refs.append(weakref.ref(snap))
        if v == Snapshot._MAX_PENDING_COMMITS + 3:
            middle = snap
    gc.collect()
    alive = sum(r() is not None for r in refs)
    # The newest and the one this test holds, and the published ancestors they apply commits to.
    assert alive <= 4, f"{alive} of {depth} snapshots alive"
    pending = snap.rows_held()  # without publishing the newest snapshot's files
    assert snap._index is None and pending == 10 + depth
    assert middle is not None and middle.num_files == 10 + Snapshot._MAX_PENDING_COMMITS + 3
    assert snap.num_files == 10 + depth
    assert {a.path for a in snap.all_files} == {_add(i).path for i in [*range(10), *range(101, 101 + depth)]}
