"""Transactions across tables (``core.txn.group``): locks, staging, one decision, publication.

docs/concurrency.md, "Transactions across tables". Crash trials: ``test_group_crash_trials.py``.
"""

from __future__ import annotations

import json
import os
import threading
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.log import groups
from serialake.core.model.actions import AddFile, Metadata
from serialake.core.tables.cut import consistent_cut
from serialake.core.txn.group import GroupTransaction
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentTransactionException,
    ConflictReason,
    DeltaConcurrentModificationException,
)
from tests.core.conftest import SCHEMA, add_file


class Stop(BaseException):
    """Stops a group at a step as a crash would: nothing after it runs, nothing is cleaned up."""


def stop_at(step_name: str, count: int = 1):
    seen = {"n": 0}

    def step(name: str, table: str) -> None:
        if name == step_name:
            seen["n"] += 1
            if seen["n"] >= count:
                raise Stop(name)

    return step


def parquet_add(table: str, ids: list[int], p: int | None = None) -> AddFile:
    """A real tiny Parquet file in ``table`` (columns id, x; p a partition) and its add."""
    name = f"part-{uuid.uuid4().hex}.parquet"
    rel = f"p={p}/{name}" if p is not None else name
    full = os.path.join(table, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array(ids, pa.int32())}), full)
    stats = json.dumps({"numRecords": len(ids), "minValues": {"id": min(ids)}, "maxValues": {"id": max(ids)},
                        "nullCount": {"id": 0}})
    return AddFile(path=rel, partition_values={"p": str(p)} if p is not None else {}, size=os.path.getsize(full),
                   modification_time=0, data_change=True, stats=stats)


def new_table(path: str, partitioned: bool = True, files: list[AddFile] | None = None) -> DeltaLog:
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",) if partitioned else ()))
    txn.commit(files if files is not None else [add_file(1), add_file(2)], operation="CREATE TABLE")
    return log


@pytest.fixture
def tables(tmp_path):
    made = iter(range(1_000_000))

    def make(n: int = 2, partitioned: bool = True) -> list[DeltaLog]:
        return [new_table(str(tmp_path / f"t{next(made):04d}"), partitioned) for _ in range(n)]

    return make


def staged(log: DeltaLog) -> list[str]:
    d = os.path.join(log.log_path, groups.STAGED_DIR)
    return os.listdir(d) if os.path.isdir(d) else []


def _ops(log: DeltaLog) -> list[str | None]:
    return [e.commit_info.operation if e.commit_info else None for _, e in reversed(log.history())]


def _group_write(
    logs: list[DeltaLog], step=None, reads: dict[DeltaLog, list[str]] | None = None, p: int = 5
) -> GroupTransaction:
    g = GroupTransaction(step=step)
    for log, preds in (reads or {}).items():
        g.read(log, preds)
    for log in logs:
        txn = g.write(log)
        g.add(txn, [add_file(p)], "WRITE")
    return g


# -- committing together ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_tables_committed_together(tables, n):
    logs = tables(n)
    g = _group_write(logs)
    res = g.commit()
    for log in logs:
        snap = log.update()
        assert snap.version == 2 and res.locks[log.table_path] == 1 and res.versions[log.table_path] == 2
        assert _ops(log) == ["CREATE TABLE", groups.LOCK_OPERATION, "WRITE"]
        lock, pub = log.read_commit(1).commit_info, log.read_commit(2).commit_info
        assert lock is not None and pub is not None
        assert [a for a in log.read_commit(1).actions if type(a).__name__ != "CommitInfo"] == []
        rec = pub.values[groups.GROUP_KEY]
        assert rec["txnId"] == g.txn_id == lock.values[groups.GROUP_KEY]["txnId"]
        assert {p["table"]: p["version"] for p in rec["participants"]} == {lg.table_path: 2 for lg in logs}
        assert len(snap.all_files) == 3
        assert not staged(log)
    coordinator = min(lg.table_path for lg in logs)
    decision = json.loads(open(groups.decision_path(coordinator, g.txn_id)).read())
    assert decision["decision"] == "commit" and decision["txnId"] == g.txn_id


def test_delta_rs_reads_every_version(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    logs = [new_table(p, partitioned=False, files=[parquet_add(p, [1, 2])]) for p in paths]
    g = GroupTransaction()
    for log in logs:
        g.add(g.write(log), [parquet_add(log.table_path, [3, 4, 5])], "WRITE")
    g.commit()
    for p in paths:
        for version, rows in ((0, 2), (1, 2), (2, 5)):
            dt = deltalake.DeltaTable(p, version=version)
            assert dt.to_pyarrow_table().num_rows == rows, (p, version)
        assert deltalake.DeltaTable(p).version() == 2


def test_a_table_only_read_gets_a_lock_and_no_publication(tables):
    a, b = tables(2)
    g = _group_write([b], reads={a: ["p = 1"]})
    res = g.commit()
    assert a.update().version == 1 and _ops(a)[-1] == groups.LOCK_OPERATION
    assert res.versions == {b.table_path: 2} and res.locks == {a.table_path: 1, b.table_path: 1}


# -- serializability across tables ---------------------------------------------------------------


def _skew_pair(a: DeltaLog, b: DeltaLog) -> tuple[GroupTransaction, GroupTransaction]:
    """T1 reads A writes B, T2 reads B writes A; both read before either commits."""
    t1 = _group_write([b], reads={a: ["p = 1"]}, p=1)
    t2 = _group_write([a], reads={b: ["p = 1"]}, p=1)
    return t1, t2


@pytest.mark.parametrize("first", [0, 1])
def test_write_skew_across_two_tables_refused(tables, first):
    a, b = tables(2)
    t1, t2 = _skew_pair(a, b)
    pair = [t1, t2]
    pair[first].commit()
    with pytest.raises(ConcurrentAppendException) as e:
        pair[1 - first].commit()
    loser_read = b if first == 0 else a  # the loser read the table the winner wrote
    assert e.value.table == loser_read.table_path
    # Nothing of the loser is anywhere: its written table holds only its lock (an empty version).
    loser_wrote = a if first == 0 else b
    assert len(loser_wrote.update().all_files) == 2  # as created: the winner wrote the other table


def test_write_skew_with_threads_racing(tables):
    for _ in range(5):
        a, b = tables(2)
        t1, t2 = _skew_pair(a, b)
        outcomes: list[object] = []
        barrier = threading.Barrier(2)

        def run(g: GroupTransaction, barrier: threading.Barrier = barrier, outcomes: list = outcomes) -> None:
            barrier.wait()
            try:
                outcomes.append(g.commit())
            except DeltaConcurrentModificationException as e:
                outcomes.append(e)

        threads = [threading.Thread(target=run, args=(g,)) for g in (t1, t2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [o for o in outcomes if isinstance(o, Exception)]
        assert len(errors) == 1, outcomes
        committed = len(a.update().all_files) + len(b.update().all_files)
        assert committed == 5  # 2 + 2 created, one group's one file


# -- single-table writers racing a group ----------------------------------------------------------


def test_single_writer_on_a_disjoint_partition_commits_beside_a_group(tables):
    a, b = tables(2)
    g = GroupTransaction()
    txn = g.write(a)
    files = txn.filter_files(["p = 1"])
    g.add(txn, [add_file(1), files[0].remove()], "UPDATE")
    g.add(g.write(b), [add_file(3)], "WRITE")
    other = a.start_transaction()
    other_files = other.filter_files(["p = 2"])
    other.commit([add_file(2), other_files[0].remove()], operation="UPDATE")
    g.commit()
    later = a.start_transaction()
    later.filter_files(["p = 1"])
    assert later.commit([add_file(1)], operation="UPDATE") == 4  # 1: other, 2: lock, 3: group, 4: this


def test_single_writer_overlapping_a_group_conflicts_either_way(tables):
    a, b = tables(2)
    # The single writer first: the group's lock meets it and conflicts.
    g = GroupTransaction()
    txn = g.write(a)
    files = txn.filter_files(["p = 1"])
    g.add(txn, [add_file(1), files[0].remove()], "UPDATE")
    g.add(g.write(b), [add_file(3)], "WRITE")
    other = a.start_transaction()
    other_files = other.filter_files(["p = 1"])
    other.commit([add_file(1), other_files[0].remove()], operation="UPDATE")
    with pytest.raises(DeltaConcurrentModificationException) as e:
        g.commit()
    assert e.value.table == a.table_path
    assert b.update().version == 0  # a (first in the order) conflicted at its lock: b was never locked
    # The group first: the single writer meets its lock and publication and conflicts.
    late = a.start_transaction()
    late.filter_files(["p = 2"])
    g2 = GroupTransaction()
    t2 = g2.write(a)
    t2.filter_files(["p = 2"])  # (not a blind append: WriteSerializable lets those pass)
    g2.add(t2, [add_file(2)], "WRITE")
    g2.add(g2.write(b), [add_file(3)], "WRITE")
    g2.commit()
    with pytest.raises(ConcurrentAppendException):
        late.commit([add_file(2)], operation="UPDATE")


# -- contest: stalled and decided groups ---------------------------------------------------------


def test_a_writer_aborts_a_stalled_group_after_the_wait(tables, monkeypatch):
    monkeypatch.setattr(groups, "LOCK_WAIT_S", 0.05)
    a, b = tables(2)
    g = _group_write([a, b], step=stop_at("lock", 2))  # stalled after its locks, before staging
    with pytest.raises(Stop):
        g.commit()
    assert a.update().version == 1  # the reader aborted it: the lock stays an empty version
    decision = json.loads(open(groups.decision_path(a.table_path, g.txn_id)).read())
    assert decision["decision"] == "abort"
    txn = b.start_transaction()
    assert txn.commit([add_file(1)]) == 2  # after b's (aborted) lock
    assert not staged(a)
    assert len(a.update().all_files) == 2 and len(b.update().all_files) == 3


def test_a_group_aborted_by_a_contender_raises_concurrent_transaction(tables, monkeypatch):
    monkeypatch.setattr(groups, "LOCK_WAIT_S", 0.0)
    a, b = tables(2)

    def contend(name: str, table: str) -> None:
        if name == "staged":  # another reader of b meets its lock before the group decides: it aborts it
            t = threading.Thread(target=DeltaLog(b.table_path).update)
            t.start()
            t.join()

    g = _group_write([a, b], step=contend)
    with pytest.raises(ConcurrentTransactionException) as e:
        g.commit()
    assert e.value.conflict_reason == ConflictReason.GROUP_ABORTED and "aborted" in str(e.value)
    for log in (a, b):
        assert len(DeltaLog(log.table_path).update().all_files) == 2
        assert _ops(DeltaLog(log.table_path))[-1] == groups.LOCK_OPERATION


def test_a_decided_group_is_published_by_the_next_writer_then_it_commits(tables):
    a, b = tables(2)
    g = _group_write([a, b], step=stop_at("decided"))
    with pytest.raises(Stop):
        g.commit()
    fresh = DeltaLog(a.table_path)  # another process's view: the lock is the newest commit
    txn = fresh.start_transaction()  # its snapshot's refresh publishes the group first
    assert txn.read_version == 2
    assert txn.commit([add_file(1)]) == 3
    ops = _ops(fresh)
    assert ops == ["CREATE TABLE", groups.LOCK_OPERATION, "WRITE", "WRITE"]


def test_a_decided_group_is_published_by_a_writer_meeting_its_lock_as_a_winner(tables):
    a, b = tables(2)
    writer = DeltaLog(a.table_path).start_transaction()  # read version 0, before the group
    g = _group_write([a, b], step=stop_at("decided"))
    with pytest.raises(Stop):
        g.commit()
    assert writer.commit([add_file(7)]) == 3  # met the lock at 1: published the group at 2, then itself
    assert len(DeltaLog(b.table_path).update().all_files) == 3


def test_a_consistent_cut_holds_a_decided_group_in_every_table(tables):
    a, b, c = tables(3)
    g = _group_write([a, b, c], step=stop_at("published", 1))
    with pytest.raises(Stop):
        g.commit()
    assert os.path.exists(a.commit_path(2)) and not os.path.exists(b.commit_path(2))
    DeltaLog.clear_cache()
    snaps = consistent_cut({lg.table_path: None for lg in (a, b, c)}, timeout_s=5)
    assert {p: s.version for p, s in snaps.items()} == {lg.table_path: 2 for lg in (a, b, c)}
    assert all(len(s.all_files) == 3 for s in snaps.values())


def _skew_child(a_path: str, b_path: str, which: int, barrier, out) -> None:
    DeltaLog.clear_cache()
    a, b = DeltaLog.for_table(a_path), DeltaLog.for_table(b_path)
    g = _group_write([b], reads={a: ["p = 1"]}, p=1) if which == 0 else _group_write([a], reads={b: ["p = 1"]}, p=1)
    barrier.wait()  # both planned (read) before either commits
    try:
        g.commit()
        got = [which, "ok", None]
    except DeltaConcurrentModificationException as e:
        got = [which, type(e).__name__, e.table]
    with open(f"{out}.{which}", "w") as f:
        json.dump(got, f)
    os._exit(0)


def test_write_skew_with_processes_racing(tables):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for _ in range(4):
        a, b = tables(2)
        barrier, out = ctx.Barrier(2), a.table_path + ".out"
        procs = [ctx.Process(target=_skew_child, args=(a.table_path, b.table_path, w, barrier, out)) for w in (0, 1)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        got = sorted(tuple(json.load(open(f"{out}.{w}"))) for w in (0, 1))
        oks = [g for g in got if g[1] == "ok"]
        assert len(oks) == 1, got
        loser = next(g for g in got if g[1] != "ok")
        assert loser[1] in ("ConcurrentAppendException", "ConcurrentTransactionException"), got
        DeltaLog.clear_cache()
        assert len(DeltaLog.for_table(a.table_path).update().all_files) + len(
            DeltaLog.for_table(b.table_path).update().all_files
        ) == 5


# -- a writer outside serialake takes the reserved version ------------------------------------------


def _foreign_commit(log: DeltaLog, version: int, actions_json: list[dict]) -> None:
    """A commit as another engine writes it: no lock known, put at ``version`` directly."""
    lines = [{"commitInfo": {"timestamp": 1, "operation": "WRITE", "engineInfo": "other-engine"}}, *actions_json]
    log.store.put_if_absent(log.commit_path(version), "\n".join(json.dumps(x) for x in lines).encode())


def _foreign_add(p: int) -> dict:
    a = add_file(p)
    return {"add": {"path": a.path, "partitionValues": {"p": str(p)}, "size": 100, "modificationTime": 0,
                    "dataChange": True, "stats": a.stats}}


def test_a_foreign_commit_at_the_reserved_version_is_checked_and_published_after(tables):
    a, b = tables(2)

    def foreign(name: str, table: str) -> None:
        if name == "decided":
            _foreign_commit(a, 2, [_foreign_add(9)])

    g = _group_write([a, b], step=foreign)
    res = g.commit()
    assert res.versions == {a.table_path: 3, b.table_path: 2}
    assert _ops(a) == ["CREATE TABLE", groups.LOCK_OPERATION, "WRITE", "WRITE"]
    assert len(a.update().all_files) == 4


def test_a_reader_publishes_a_crashed_group_after_a_foreign_commit(tables):
    a, b = tables(2)
    g = _group_write([a, b], step=stop_at("decided"))
    with pytest.raises(Stop):
        g.commit()
    _foreign_commit(a, 2, [_foreign_add(9)])
    DeltaLog.clear_cache()
    snap = DeltaLog.for_table(a.table_path).update()  # the lock at 1 is not followed by its publication
    assert snap.version == 3 and len(snap.all_files) == 4
    assert groups.group_of(DeltaLog.for_table(a.table_path).read_commit(3).commit_info)["txnId"] == g.txn_id


def test_a_conflicting_foreign_commit_raises_group_publication_error(tables):
    from serialake.exceptions import GroupPublicationError

    a, b = tables(2)
    g = GroupTransaction()
    txn = g.write(a)
    victim = txn.filter_files(["p = 1"])[0]
    g.add(txn, [victim.remove(), add_file(1)], "UPDATE")
    g.add(g.write(b), [add_file(1)], "WRITE")

    def foreign(name: str, table: str) -> None:
        if name == "decided":  # another engine removes the file the group rewrites
            rm = {"remove": {"path": victim.path, "deletionTimestamp": 1, "dataChange": True}}
            _foreign_commit(a, 2, [rm])

    g.step = foreign
    with pytest.raises(GroupPublicationError) as e:
        g.commit()
    assert e.value.table == a.table_path and e.value.txn_id == g.txn_id and e.value.foreign_version == 2
    assert a.table_path in str(e.value) and g.txn_id in str(e.value)


def test_a_writer_computed_from_a_locked_table_resolves_its_lock(tables, monkeypatch):
    monkeypatch.setattr(groups, "LOCK_WAIT_S", 0.01)
    a, b, x = tables(3)
    g = _group_write([a, b], step=stop_at("staged"))
    with pytest.raises(Stop):
        g.commit()
    txn = x.start_transaction()
    txn.record_table_read(a.table_path, 1)
    txn.commit([add_file(1)])
    decision = json.loads(open(groups.decision_path(a.table_path, g.txn_id)).read())
    assert decision["decision"] == "abort" and not staged(a)


def test_in_commit_timestamps_increase_through_lock_and_publication(tmp_path):
    logs = []
    for name in ("a", "b"):
        log = DeltaLog.for_table(str(tmp_path / name))
        txn = log.start_transaction()
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",),
                                     configuration={"delta.enableInCommitTimestamps": "true"}))
        txn.commit([add_file(1)], operation="CREATE TABLE")
        logs.append(log)
    _group_write(logs).commit()
    for log in logs:
        stamps = [log.read_commit(v).commit_info.values["inCommitTimestamp"] for v in range(3)]
        assert stamps == sorted(stamps) and len(set(stamps)) == 3


def test_a_table_created_in_a_group_is_refused_before_anything_is_written(tables, tmp_path):
    from serialake.exceptions import DeltaIllegalArgumentException

    (a,) = tables(1)
    g = GroupTransaction()
    g.add(g.write(a), [add_file(1)])
    new = g.write(str(tmp_path / "new"))
    new.update_metadata(Metadata(schema_string=SCHEMA))
    g.add(new, [add_file()])
    with pytest.raises(DeltaIllegalArgumentException, match="does not exist"):
        g.commit()
    assert a.update().version == 0


@pytest.mark.parametrize("how", ["conflict", "contender"])
def test_an_aborted_group_deletes_the_data_files_it_was_given(tables, monkeypatch, how):
    monkeypatch.setattr(groups, "LOCK_WAIT_S", 0.0)
    a, b = tables(2, partitioned=False)
    g = GroupTransaction()
    written = {}
    for log in (a, b):
        txn = g.write(log)
        txn.filter_files()
        add = parquet_add(log.table_path, [1, 2])
        written[log.table_path] = os.path.join(log.table_path, add.path)
        g.add(txn, [add], "WRITE", new_files=[add])
    if how == "conflict":  # a winner in b (not a blind append), which the group read whole
        w = b.start_transaction()
        w.filter_files()
        w.commit([add_file()])
        expected: type[Exception] = ConcurrentAppendException
    else:
        def contend(name: str, table: str) -> None:
            if name == "staged":
                t = threading.Thread(target=DeltaLog(b.table_path).update)
                t.start()
                t.join()

        g.step = contend
        expected = ConcurrentTransactionException
    with pytest.raises(expected):
        g.commit()
    assert not any(os.path.exists(p) for p in written.values())
    assert not staged(a) and not staged(b)
    assert len(DeltaLog(a.table_path).update().all_files) == 2


def test_a_writer_meeting_an_undecided_lock_as_a_winner_aborts_it_then_commits(tables, monkeypatch):
    monkeypatch.setattr(groups, "LOCK_WAIT_S", 0.05)
    a, b = tables(2)
    writer = DeltaLog(b.table_path).start_transaction()  # read version 0, before the group
    writer.filter_files(["p = 5"])
    g = _group_write([a, b], step=stop_at("lock", 2))  # stalled after locking a and b
    with pytest.raises(Stop):
        g.commit()
    assert writer.commit([add_file(5)], operation="UPDATE") == 2  # met b's lock at 1: aborted it
    decision = json.loads(open(groups.decision_path(a.table_path, g.txn_id)).read())
    assert decision["decision"] == "abort" and "met the lock at version 1" in decision["reason"]
    assert len(DeltaLog(a.table_path).update().all_files) == 2


# -- in-commit timestamps turned on by a group ---------------------------------------------------


@pytest.mark.parametrize("winners", [0, 2])
def test_a_group_enabling_in_commit_timestamps_records_the_publication_version(tables, winners):
    # The body lands at L+1, not at the lock's version L (nor at the read version + 1 when others
    # committed meanwhile): the enablement version and timestamp are those of the publication.
    a, b = tables(2)
    g = GroupTransaction()
    ta = g.write(a)
    meta = ta.metadata
    ta.update_metadata(Metadata(schema_string=meta.schema_string, partition_columns=meta.partition_columns,
                                configuration={**meta.configuration, "delta.enableInCommitTimestamps": "true"}))
    g.add(ta, [add_file(5)], "SET TBLPROPERTIES")
    g.add(g.write(b), [add_file(5)], "WRITE")
    for _ in range(winners):  # single-table commits between the group's read and its lock
        a.start_transaction().commit([add_file(7)], operation="WRITE")
    res = g.commit()
    version = res.versions[a.table_path]
    assert version == res.locks[a.table_path] + 1 == 2 + winners
    conf = a.update().metadata.configuration
    ci = a.read_commit(version).commit_info
    assert ci is not None
    assert conf["delta.inCommitTimestampEnablementVersion"] == str(version)
    assert conf["delta.inCommitTimestampEnablementTimestamp"] == str(ci.values["inCommitTimestamp"])
    lock = a.read_commit(version - 1).commit_info
    assert lock is not None and int(lock.values.get("inCommitTimestamp", 0)) < int(ci.values["inCommitTimestamp"])
    DeltaLog.clear_cache()
    assert DeltaLog.for_table(a.table_path).update().version == version


def test_a_group_enabling_in_commit_timestamps_after_a_foreign_commit_records_where_it_landed(tables):
    a, b = tables(2)

    def foreign(name: str, table: str) -> None:
        if name == "decided":
            _foreign_commit(a, 2, [_foreign_add(9)])

    g = GroupTransaction(step=foreign)
    ta = g.write(a)
    meta = ta.metadata
    ta.update_metadata(Metadata(schema_string=meta.schema_string, partition_columns=meta.partition_columns,
                                configuration={**meta.configuration, "delta.enableInCommitTimestamps": "true"}))
    g.add(ta, [add_file(5)], "SET TBLPROPERTIES")
    g.add(g.write(b), [add_file(5)], "WRITE")
    res = g.commit()
    assert res.versions[a.table_path] == 3  # the lock at 1, the foreign commit at 2
    conf = a.update().metadata.configuration
    ci = a.read_commit(3).commit_info
    assert ci is not None
    assert conf["delta.inCommitTimestampEnablementVersion"] == "3"
    assert conf["delta.inCommitTimestampEnablementTimestamp"] == str(ci.values["inCommitTimestamp"])
