"""Every ``ConflictReason`` comes from a real conflict (issue #41, "the reason as a field").

Each case drives two transactions through ``serialake.core`` on a temp table (W commits
between T's start and T's commit) and checks what T's exception says: its class, its
``conflict_reason``, the winner's version and operation, the error class in the message's
first line, and that all of it survives pickling. ``test_every_reason_has_a_case`` makes a
new member without a case fail.
"""

from __future__ import annotations

import json
import os
import pickle
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector, write_deletion_vector
from serialake.core.model.actions import AddFile, DomainMetadata, Metadata, Protocol, SetTransaction
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    ConflictReason,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from tests.core.conftest import SCHEMA, add_file

R = ConflictReason


@dataclass(frozen=True)
class Case:
    name: str
    exc: type[DeltaConcurrentModificationException]
    reason: ConflictReason
    operation: str  # the winner's
    run: Callable[[Any, Any], tuple[Callable[[], Any], int]]  # (make_table, tmp_path) -> (T's commit, W's version)


# -- helpers ----------------------------------------------------------------------------------


def _raw_commit(log: DeltaLog, operation: str, *actions: dict[str, Any]) -> int:
    """Write the next commit by hand (a writer outside serialake); returns its version."""
    version = log.update().version + 1
    ci = {"commitInfo": {"timestamp": 0, "operation": operation, "operationParameters": {}}}
    lines = [json.dumps(a) for a in (ci, *actions)]
    with open(os.path.join(log.table_path, "_delta_log", f"{version:020d}.json"), "x") as f:
        f.write("\n".join(lines) + "\n")
    return version


_DV_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "x", "type": "long", "nullable": True, "metadata": {}},
]})


def _write(table: str, ids: list[int]) -> AddFile:
    """A Parquet file of rows ``id = x = ids[i]`` (row index i), with stats."""
    rel = f"part-{uuid.uuid4().hex}.parquet"
    full = os.path.join(table, rel)
    os.makedirs(table, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array(ids, pa.int64())}), full)
    stats = {"numRecords": len(ids), "minValues": {"id": min(ids), "x": min(ids)},
             "maxValues": {"id": max(ids), "x": max(ids)}, "nullCount": {"id": 0, "x": 0}}
    return AddFile(path=rel, partition_values={}, size=os.path.getsize(full), modification_time=0,
                   data_change=True, stats=json.dumps(stats))


def _dv_table(tmp_path: Any, level: str = "WriteSerializable") -> DeltaLog:
    """An unpartitioned table with deletion vectors (row-level concurrency), one file of ids 0..9."""
    log = DeltaLog(str(tmp_path / "dv"))
    t = log.start_transaction()
    t.update_metadata(Metadata(schema_string=_DV_SCHEMA, configuration={
        "delta.enableDeletionVectors": "true", "delta.isolationLevel": level}))
    t.commit([_write(log.table_path, list(range(10)))], operation="CREATE TABLE")
    return log


def _mark(log: DeltaLog, add: AddFile, rows: list[int]) -> list[Any]:
    """Delete ``rows`` of ``add`` through its deletion vector: remove(F) + add(F, vector)."""
    old = RowIndexSet.from_iter([])
    if add.deletion_vector:
        old = read_deletion_vector(log.table_path, add.deletion_vector)
    dv = write_deletion_vector(log.table_path, old | RowIndexSet.from_iter(rows))
    return [add.remove(), replace(add, deletion_vector=dv)]


def _delete(txn: Any, log: DeltaLog, ids: list[int]) -> list[Any]:
    (f,) = txn.filter_files([f"id IN ({', '.join(map(str, ids))})"])
    return _mark(log, f, ids)  # row index == id


def _version(log: DeltaLog) -> int:
    return DeltaLog(log.table_path).update().version


# -- one case per way a conflict arises ---------------------------------------------------------


def _concurrent_create(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    path = str(tmp_path / "new")
    t, w = DeltaLog(path).start_transaction(), DeltaLog(path).start_transaction()
    for txn in (t, w):
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",)))
    w.commit([add_file(1)], operation="CREATE TABLE")
    return (lambda: t.commit([add_file(2)], operation="CREATE TABLE")), 0


def _concurrent_replace(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t, w = log.start_transaction(), log.start_transaction()
    for txn in (t, w):
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",)))
    w.commit([f.remove() for f in log.update().all_files] + [add_file(1)], operation="CREATE OR REPLACE TABLE")
    return (lambda: t.commit([add_file(2)], operation="CREATE OR REPLACE TABLE")), 1


def _protocol_change(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t, w = log.start_transaction(), log.start_transaction()
    w.update_protocol(Protocol(1, 3))
    w.commit([], operation="UPGRADE PROTOCOL")
    t.update_protocol(Protocol(1, 4))
    return (lambda: t.commit([], operation="UPGRADE PROTOCOL")), 1


def _feature_dropped(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()  # writer 2: the appendOnly and invariants features, implicitly
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    # A writer outside serialake moves the table to writer 7 with no features: appendOnly is gone.
    v = _raw_commit(log, "DROP FEATURE",
                    {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": []}})
    return (lambda: t.commit([add_file(1)])), v


def _unsupported_protocol(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t = log.start_transaction()
    features = ["appendOnly", "invariants", "noSuchWriterFeature"]  # the legacy ones kept, one unknown
    v = _raw_commit(log, "UPGRADE PROTOCOL",
                    {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": features}})
    return (lambda: t.commit([add_file(1)])), v


def _metadata_change(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t, w = log.start_transaction(), log.start_transaction()
    w.update_metadata(w.metadata.with_configuration(**{"delta.appendOnly": "false"}))
    w.commit([], operation="SET TBLPROPERTIES")
    return (lambda: t.commit([add_file(1)])), 1


def _both_change_metadata(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t, w = log.start_transaction(), log.start_transaction()
    # Enabling deletion vectors alone would be adopted by a writer that changes no metadata.
    w.update_metadata(w.metadata.with_configuration(**{"delta.enableDeletionVectors": "true"}))
    w.commit([], operation="SET TBLPROPERTIES")
    t.update_metadata(t.metadata.with_configuration(**{"delta.appendOnly": "false"}))
    return (lambda: t.commit([], operation="SET TBLPROPERTIES")), 1


def _same_app_id(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t, w = log.start_transaction(), log.start_transaction()
    t.txn_version("app1")
    w.txn_version("app1")
    w.commit([add_file(1), SetTransaction("app1", 5)], operation="STREAMING UPDATE")
    return (lambda: t.commit([add_file(1), SetTransaction("app1", 5)], operation="STREAMING UPDATE")), 1


def _same_domain(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t, w = log.start_transaction(), log.start_transaction()
    w.commit([DomainMetadata("my.domain", '{"a": 1}')], operation="SET DOMAIN")
    return (lambda: t.commit([DomainMetadata("my.domain", '{"a": 2}')], operation="SET DOMAIN")), 1


def _empty_read_predicates(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table(level="Serializable")
    t = log.start_transaction()
    t.read_whole_table()
    log.start_transaction().commit([add_file(1)], operation="WRITE")
    return (lambda: t.commit([add_file(2)])), 1


def _file_level_changes(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table(level="Serializable")
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    log.start_transaction().commit([add_file(1)], operation="WRITE")
    return (lambda: t.commit([add_file(2)])), 1


def _row_level_append(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = _dv_table(tmp_path, level="Serializable")
    t = log.start_transaction()  # UPDATE ... WHERE id = 3
    t_actions = _delete(t, log, [3]) + [_write(log.table_path, [3])]
    log.start_transaction().commit([_write(log.table_path, [3, 50])], operation="WRITE")  # a new row id = 3
    return (lambda: t.commit(t_actions, operation="UPDATE")), _version(log)


def _row_level_delete_read(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = _dv_table(tmp_path)
    t = log.start_transaction()  # reads x >= 8, deletes row 9 only
    (f,) = t.filter_files(["x >= 8"])
    t_actions = _mark(log, f, [9])
    w = log.start_transaction()
    w.commit(_delete(w, log, [8]), operation="DELETE")  # a row T read
    return (lambda: t.commit(t_actions, operation="MERGE")), _version(log)


def _file_removed_read(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table()
    t = log.start_transaction()
    a = t.filter_files(["p = 1"])[0]
    w = log.start_transaction()
    w.filter_files(["p = 1"])
    w.commit([a.remove()], operation="DELETE")
    return (lambda: t.commit([add_file(2)])), 1


def _file_removed_delete(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = make_table(files=[1, 1])
    inputs = log.update().all_files
    t = log.start_transaction()  # OPTIMIZE: reads nothing, removes its inputs
    w = log.start_transaction()
    w.filter_files(["p = 1"])
    w.commit([inputs[0].remove()], operation="DELETE")
    return (lambda: t.commit([f.remove(data_change=False) for f in inputs] + [add_file(1, data_change=False)],
                             operation="OPTIMIZE")), 1


def _same_rows_deleted(make_table: Any, tmp_path: Any) -> tuple[Callable[[], Any], int]:
    log = _dv_table(tmp_path)
    t = log.start_transaction()  # UPDATE row 5
    t_actions = _delete(t, log, [5]) + [_write(log.table_path, [5])]
    w = log.start_transaction()
    w.commit(_delete(w, log, [5]), operation="DELETE")  # DELETE row 5
    return (lambda: t.commit(t_actions, operation="UPDATE")), _version(log)


CASES = [
    Case("concurrent_create", ProtocolChangedException, R.CONCURRENT_CREATE, "CREATE TABLE", _concurrent_create),
    Case("concurrent_replace", ProtocolChangedException, R.CONCURRENT_REPLACE, "CREATE OR REPLACE TABLE",
         _concurrent_replace),
    Case("protocol_change", ProtocolChangedException, R.PROTOCOL_CHANGE, "UPGRADE PROTOCOL", _protocol_change),
    Case("feature_dropped", ProtocolChangedException, R.FEATURE_DROPPED, "DROP FEATURE", _feature_dropped),
    Case("unsupported_protocol", ProtocolChangedException, R.UNSUPPORTED_PROTOCOL, "UPGRADE PROTOCOL",
         _unsupported_protocol),
    Case("metadata_change", MetadataChangedException, R.METADATA_CHANGE, "SET TBLPROPERTIES", _metadata_change),
    Case("both_change_metadata", MetadataChangedException, R.BOTH_CHANGE_METADATA, "SET TBLPROPERTIES",
         _both_change_metadata),
    Case("same_app_id", ConcurrentTransactionException, R.SAME_APP_ID, "STREAMING UPDATE", _same_app_id),
    Case("same_domain", ConcurrentTransactionException, R.SAME_DOMAIN, "SET DOMAIN", _same_domain),
    Case("empty_read_predicates", ConcurrentAppendException, R.EMPTY_READ_PREDICATES, "WRITE",
         _empty_read_predicates),
    Case("file_level_changes", ConcurrentAppendException, R.FILE_LEVEL_CHANGES, "WRITE", _file_level_changes),
    Case("row_level_append", ConcurrentAppendException, R.ROW_LEVEL_CHANGES, "WRITE", _row_level_append),
    Case("row_level_delete_read", ConcurrentDeleteReadException, R.ROW_LEVEL_CHANGES, "DELETE",
         _row_level_delete_read),
    Case("file_removed_read", ConcurrentDeleteReadException, R.FILE_REMOVED, "DELETE", _file_removed_read),
    Case("file_removed_delete", ConcurrentDeleteDeleteException, R.FILE_REMOVED, "DELETE", _file_removed_delete),
    Case("same_rows_deleted", ConcurrentDeleteDeleteException, R.SAME_ROWS_DELETED, "DELETE", _same_rows_deleted),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_conflict_carries_its_reason(case: Case, make_table: Any, tmp_path: Any) -> None:
    commit, winner = case.run(make_table, tmp_path)
    with pytest.raises(DeltaConcurrentModificationException) as info:
        commit()
    e = info.value
    assert type(e) is case.exc, str(e)
    assert e.conflict_reason is case.reason, str(e)
    assert e.winning_version == winner
    assert e.winning_operation == case.operation
    error_class = f"{case.exc.error_class}.{case.reason.value}"
    assert e.getErrorClass() == e.getCondition() == error_class
    assert str(e).splitlines()[0].startswith(f"{case.exc.__name__}: [{error_class}] ")
    params = e.getMessageParameters()
    assert params["reason"] == case.reason.value and params["version"] == str(winner)
    assert params["operation"] == case.operation
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is case.exc and back.conflict_reason is case.reason
    assert (back.winning_version, back.winning_operation, back.reason) == (winner, case.operation, e.reason)
    assert str(back) == str(e)


def test_every_reason_has_a_case() -> None:
    # GROUP_ABORTED has no winning commit (a contender's decision record): tests/core/txn/test_group_commit.py
    assert {c.reason for c in CASES} | {ConflictReason.GROUP_ABORTED} == set(ConflictReason)


def test_reason_is_a_string_and_says_whether_a_retry_can_succeed() -> None:
    assert ConflictReason.ROW_LEVEL_CHANGES == "ROW_LEVEL_CHANGES"
    assert ConflictReason("FILE_REMOVED") is ConflictReason.FILE_REMOVED
    assert not ConflictReason.SAME_APP_ID.retryable and not ConflictReason.UNSUPPORTED_PROTOCOL.retryable
    assert ConflictReason.FILE_LEVEL_CHANGES.retryable


def test_external_construction_falls_back_to_the_class_default() -> None:
    e = ConcurrentAppendException("rows were added", table="/t", winning_version=3, winning_operation="WRITE")
    assert e.conflict_reason is ConflictReason.FILE_LEVEL_CHANGES
    assert e.getErrorClass() == "DELTA_CONCURRENT_APPEND.FILE_LEVEL_CHANGES" and e.getSqlState() == "2D521"
    given = ConcurrentAppendException("x", conflict_reason="ROW_LEVEL_CHANGES")
    assert given.conflict_reason is ConflictReason.ROW_LEVEL_CHANGES
    w = ConcurrentWriteException("a concurrent commit")  # no rule raises it: no reason, the class alone
    assert w.conflict_reason is None and w.getErrorClass() == "DELTA_CONCURRENT_WRITE"
    assert str(w).startswith("ConcurrentWriteException: [DELTA_CONCURRENT_WRITE] a concurrent commit")
    assert pickle.loads(pickle.dumps(w)).conflict_reason is None


def test_importable_from_the_package() -> None:
    import serialake

    assert serialake.ConflictReason is ConflictReason
