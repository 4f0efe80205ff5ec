"""A gap seen while listing the log is re-checked before the table is called corrupt.

A directory listing that overlaps concurrent commits can miss version N while showing
N+1. Since N+1 is only written after N, the loader probes N by name and takes it from
there; only a version absent by name, and still absent from a second listing, is a gap,
and its error names the table, the version and the log.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from serialake.core import DeltaLog
from serialake.core.log.logfiles import build_segment, commit_name
from serialake.exceptions import CorruptLogError
from serialake.storage.base import FileStatus
from serialake.storage.local import LocalLogStore
from tests.core.conftest import add_file


class ForgetfulListing(LocalLogStore):
    """A local store whose first ``misses`` listings leave out the given names."""

    def __init__(self, hide: set[str], misses: int = 1) -> None:
        super().__init__(fsync=False)
        self.hide = hide
        self.misses = misses
        self.listings = 0

    def list_from(self, directory: str, start_name: str = "") -> list[FileStatus]:
        self.listings += 1
        out = super().list_from(directory, start_name)
        if self.listings <= self.misses:
            out = [st for st in out if st.name not in self.hide]
        return out


def _table_with_commits(make_table, n: int) -> DeltaLog:
    log = make_table()
    for _ in range(n):
        log.start_transaction().commit([add_file(1)], operation="WRITE")
    return log


def test_listing_that_misses_a_commit_is_probed_by_name(make_table) -> None:
    log = _table_with_commits(make_table, 4)  # versions 0..4
    store = ForgetfulListing({commit_name(2)})
    segment = build_segment(store, log.table_path, log.log_path)
    assert segment.version == 4
    assert [v for v, _ in segment.commits] == [0, 1, 2, 3, 4]
    assert segment.commits[2][1] == store.status(os.path.join(log.log_path, commit_name(2)))
    assert store.listings == 1  # no relisting: it would race the next commits the same way


def test_listings_that_keep_missing_commits_still_load(make_table) -> None:
    """Every listing misses some commit (a burst of commits): each is found by name."""
    log = _table_with_commits(make_table, 6)
    store = ForgetfulListing({commit_name(1), commit_name(2), commit_name(5)}, misses=100)
    segment = build_segment(store, log.table_path, log.log_path)
    assert [v for v, _ in segment.commits] == list(range(7))
    assert store.listings == 1


def test_true_gap_still_fails_clearly(make_table) -> None:
    log = _table_with_commits(make_table, 3)
    os.unlink(os.path.join(log.log_path, commit_name(2)))
    store = ForgetfulListing(set(), misses=0)
    with pytest.raises(CorruptLogError) as info:
        build_segment(store, log.table_path, log.log_path)
    msg = str(info.value)
    assert log.table_path in msg and "version 2 is missing" in msg and commit_name(2) in msg
    assert store.listings <= 3  # a true gap is confirmed quickly, not retried at length


def test_listing_that_misses_a_new_checkpoint_after_cleanup(make_table) -> None:
    """Older commits cleaned up after a checkpoint the first listing did not show."""
    log = _table_with_commits(make_table, 4)
    log.checkpoint(3)
    os.unlink(os.path.join(log.log_path, "_last_checkpoint"))
    for v in range(3):
        os.unlink(os.path.join(log.log_path, commit_name(v)))
    store = ForgetfulListing({f"{3:020d}.checkpoint.parquet"})
    segment = build_segment(store, log.table_path, log.log_path)
    assert segment.version == 4 and segment.checkpoint is not None and segment.checkpoint.version == 3


def _committer(path: str, seconds: float) -> None:
    DeltaLog.clear_cache()
    log = DeltaLog(path)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log.start_transaction().commit([add_file(1)], operation="WRITE")


@pytest.mark.concurrency
def test_fresh_loads_during_concurrent_commits_never_see_a_gap(make_table) -> None:
    log = make_table()
    ctx = mp.get_context("spawn")
    writers = [ctx.Process(target=_committer, args=(log.table_path, 3.0)) for _ in range(2)]
    for w in writers:
        w.start()
    loads, failures, last = 0, [], -1
    try:
        deadline = time.monotonic() + 30
        while any(w.is_alive() for w in writers) and time.monotonic() < deadline:
            DeltaLog.clear_cache()
            try:
                snap = DeltaLog(log.table_path).update()
            except CorruptLogError as e:
                failures.append(str(e))
                continue
            loads += 1
            assert snap.version >= last  # fresh loads never go back in time
            last = snap.version
    finally:
        for w in writers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
    assert failures == []
    assert loads > 10 and last > 10


def test_a_version_asked_for_that_the_listing_missed_is_found_by_name(make_table) -> None:
    log = _table_with_commits(make_table, 3)  # versions 0..3
    store = ForgetfulListing({commit_name(3)}, misses=100)
    segment = build_segment(store, log.table_path, log.log_path, version=3)
    assert segment.version == 3 and [v for v, _ in segment.commits] == [0, 1, 2, 3]
    from serialake.exceptions import DeltaIllegalArgumentException

    with pytest.raises(DeltaIllegalArgumentException, match="no version 4; the latest version is 3"):
        build_segment(store, log.table_path, log.log_path, version=4)  # truly absent: still refused
