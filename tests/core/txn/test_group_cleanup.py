"""Clean-up of the records of transactions across tables (``groups.cleanup``): decision records and
staged bodies go once no reader or writer needs them, and only then; after each checkpoint by the
log retention (``DeltaLog.cleanup_expired_records``)."""

from __future__ import annotations

import os

import pytest

from serialake.core import DeltaLog
from serialake.core.log import groups
from serialake.core.model.actions import Metadata, now_ms
from serialake.core.txn.group import GroupTransaction
from tests.core.conftest import SCHEMA, add_file
from tests.core.txn.test_group_commit import Stop, new_table, stop_at

LATER = 1 << 62  # older_than_ms: every record is old enough


@pytest.fixture(autouse=True)
def _short_wait(monkeypatch):
    monkeypatch.setattr(groups, "LOCK_WAIT_S", 0.05)


def _files(log: DeltaLog, sub: str) -> list[str]:
    d = os.path.join(log.log_path, sub)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def _group(logs: list[DeltaLog], read: DeltaLog | None = None, step=None) -> GroupTransaction:
    g = GroupTransaction(step=step)
    if read is not None:
        g.read(read, ["p = 5"])
    for log in logs:
        g.add(g.write(log), [add_file(5)], "WRITE")
    return g


def _coordinator(*logs: DeltaLog) -> DeltaLog:
    return min(logs, key=lambda lg: lg.table_path)


def test_a_published_group_loses_its_decision_record(tmp_path):
    a, b = new_table(str(tmp_path / "a")), new_table(str(tmp_path / "b"))
    g = _group([a, b])
    g.commit()
    c = _coordinator(a, b)
    assert _files(c, groups.GROUPS_DIR) == [f"{g.txn_id}.json"]
    assert c.cleanup_expired_records() == []  # younger than the log retention (30 days)
    assert groups.cleanup(c, now_ms() - 3_600_000) == []
    assert groups.cleanup(c, LATER, dry_run=True) == [groups.decision_path(c.table_path, g.txn_id)]
    assert _files(c, groups.GROUPS_DIR) == [f"{g.txn_id}.json"]
    assert groups.cleanup(c, LATER) == [groups.decision_path(c.table_path, g.txn_id)]
    assert _files(c, groups.GROUPS_DIR) == []
    DeltaLog.clear_cache()
    for log in (a, b):  # readers and writers go on as before
        fresh = DeltaLog.for_table(log.table_path)
        assert fresh.update().version == 2 and len(fresh.update().all_files) == 3
        fresh.start_transaction().commit([add_file(6)], "WRITE")


def test_a_decision_stays_while_a_table_only_read_has_the_lock_as_its_newest_commit(tmp_path):
    a, r = new_table(str(tmp_path / "a")), new_table(str(tmp_path / "r"))
    g = _group([a], read=r)
    g.commit()
    c = _coordinator(a, r)
    assert r.update().version == 1  # the lock, nothing after it
    assert groups.cleanup(c, LATER) == []
    assert _files(c, groups.GROUPS_DIR) == [f"{g.txn_id}.json"]
    r.start_transaction().commit([add_file(7)], "WRITE")
    assert groups.cleanup(c, LATER) == [groups.decision_path(c.table_path, g.txn_id)]


def test_an_undecided_group_is_aborted_and_its_staged_bodies_and_decision_go(tmp_path):
    a, b = new_table(str(tmp_path / "a")), new_table(str(tmp_path / "b"))
    g = _group([a, b], step=stop_at("staged"))
    with pytest.raises(Stop):
        g.commit()
    assert _files(a, groups.STAGED_DIR) and _files(b, groups.STAGED_DIR)
    c = _coordinator(a, b)
    other = b if c is a else a
    assert groups.cleanup(c, now_ms() - 3_600_000) == []  # young: the group may still be running
    # The coordinator's own staged body: its lock is contested (abort), the body deleted; then the
    # abort decision goes too, with the other participant's staged body.
    gone = groups.cleanup(c, LATER)
    assert groups.staged_path(c.table_path, 2, g.txn_id) in gone
    assert groups.staged_path(other.table_path, 2, g.txn_id) in gone
    assert groups.decision_path(c.table_path, g.txn_id) in gone
    assert not _files(a, groups.STAGED_DIR) and not _files(b, groups.STAGED_DIR)
    assert not _files(c, groups.GROUPS_DIR)
    DeltaLog.clear_cache()
    for log in (a, b):  # nothing of the group in either table
        snap = DeltaLog.for_table(log.table_path).update()
        assert snap.version == 1 and len(snap.all_files) == 2


def test_a_decided_group_is_published_by_the_clean_up_before_its_record_goes(tmp_path):
    a, b = new_table(str(tmp_path / "a")), new_table(str(tmp_path / "b"))
    g = _group([a, b], step=stop_at("decided"))
    with pytest.raises(Stop):
        g.commit()
    c = _coordinator(a, b)
    other = b if c is a else a
    assert groups.cleanup(other, LATER) == [groups.staged_path(other.table_path, 2, g.txn_id)]
    assert other.read_commit(2).commit_info.values[groups.GROUP_KEY]["txnId"] == g.txn_id  # type: ignore[union-attr]
    gone = groups.cleanup(c, LATER)  # publishes the coordinator's body, then the record is done
    assert gone == [groups.staged_path(c.table_path, 2, g.txn_id), groups.decision_path(c.table_path, g.txn_id)]
    DeltaLog.clear_cache()
    for log in (a, b):
        snap = DeltaLog.for_table(log.table_path).update()
        assert snap.version == 2 and len(snap.all_files) == 3
        assert not _files(log, groups.STAGED_DIR) and not _files(log, groups.GROUPS_DIR)


def test_a_staged_body_without_its_lock_is_deleted(tmp_path):
    a = new_table(str(tmp_path / "a"))
    stray = groups.staged_path(a.table_path, 5, "no-such-group")
    os.makedirs(os.path.dirname(stray))
    with open(stray, "w") as f:
        f.write("{}\n")
    assert groups.cleanup(a, LATER) == [stray] and not os.path.exists(stray)


def test_checkpoints_clean_up_by_the_log_retention(tmp_path):
    logs = []
    for name in ("a", "b"):
        log = DeltaLog.for_table(str(tmp_path / name))
        txn = log.start_transaction()
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",), configuration={
            "delta.checkpointInterval": "4", "delta.logRetentionDuration": "interval 0 seconds"}))
        txn.commit([add_file(1)], operation="CREATE TABLE")
        logs.append(log)
    a, b = logs
    c = _coordinator(a, b)
    g = _group([a, b])
    g.commit()  # versions 1 (lock) and 2
    assert _files(c, groups.GROUPS_DIR) == [f"{g.txn_id}.json"]
    c.start_transaction().commit([add_file(2)], "WRITE")  # 3
    c.start_transaction().commit([add_file(2)], "WRITE")  # 4: a checkpoint, then the clean-up
    c.wait_for_checkpoints()
    assert c.last_checkpoint_error is None
    assert _files(c, groups.GROUPS_DIR) == []


def test_the_clean_up_is_off_with_expired_log_cleanup_off(tmp_path):
    a = DeltaLog.for_table(str(tmp_path / "a"))
    txn = a.start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",), configuration={
        "delta.logRetentionDuration": "interval 0 seconds", "delta.enableExpiredLogCleanup": "false"}))
    txn.commit([add_file(1)], operation="CREATE TABLE")
    b = new_table(str(tmp_path / "b"))
    g = _group([a, b])
    g.commit()
    a.update()
    assert a.cleanup_expired_records() == []
    assert _files(a, groups.GROUPS_DIR) == [f"{g.txn_id}.json"]


def test_a_staged_body_left_after_its_publication_is_deleted(tmp_path):
    a, b = new_table(str(tmp_path / "a")), new_table(str(tmp_path / "b"))
    g = _group([a, b])
    g.commit()
    left = groups.staged_path(a.table_path, 2, g.txn_id)  # (as if the group's delete of it had failed)
    os.makedirs(os.path.dirname(left), exist_ok=True)
    with open(left, "wb") as f:
        f.write(a.store.read(a.commit_path(2)))
    assert groups.cleanup(a, now_ms() - 3_600_000) == []
    assert left in groups.cleanup(a, LATER) and not os.path.exists(left)
    assert a.update().version == 2


def test_a_decision_goes_when_the_body_was_published_after_a_foreign_commit(tmp_path):
    from tests.core.txn.test_group_commit import _foreign_add, _foreign_commit

    a, b = new_table(str(tmp_path / "a")), new_table(str(tmp_path / "b"))

    def foreign(name: str, table: str) -> None:
        if name == "decided":
            _foreign_commit(a, 2, [_foreign_add(9)])

    g = _group([a, b], step=foreign)
    assert g.commit().versions[a.table_path] == 3  # after the foreign commit at the lock's L+1
    c = _coordinator(a, b)
    assert groups.cleanup(c, LATER) == [groups.decision_path(c.table_path, g.txn_id)]
    assert a.update().version == 3 and b.update().version == 2
