"""Deletion vector files written while rebasing: only those the commit references are left.

Rebasing a transaction over a winner that changed the same file writes a new deletion vector
(the merged rows). When a later winner then conflicts, the commit fails and none of those
vectors may stay in the table directory; when a later rebase replaces one, the replaced file
goes; when the commit lands, exactly the vectors it references stay. Winners' vectors and the
ones the operation wrote itself are never touched here.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import (
    RowIndexSet,
    dv_absolute_path,
    read_deletion_vector,
    write_deletion_vector,
)
from serialake.core.model.actions import AddFile, Metadata
from serialake.core.txn.row_level import COMPACTED_FROM_TAG
from serialake.exceptions import ConcurrentAppendException, ConcurrentDeleteDeleteException

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
]})


def _write(table: str, ids: list[int]) -> AddFile:
    rel = f"part-{uuid.uuid4().hex}.parquet"
    full = os.path.join(table, rel)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), full)
    stats = {"numRecords": len(ids), "minValues": {"id": min(ids)}, "maxValues": {"id": max(ids)},
             "nullCount": {"id": 0}}
    return AddFile(path=rel, partition_values={}, size=os.path.getsize(full), modification_time=0,
                   data_change=True, stats=json.dumps(stats))


def _table(tmp_path: Path, level: str = "WriteSerializable") -> DeltaLog:
    log = DeltaLog(str(tmp_path / "t"))
    t = log.start_transaction()
    t.update_metadata(Metadata(schema_string=SCHEMA, configuration={
        "delta.enableDeletionVectors": "true", "delta.isolationLevel": level}))
    os.makedirs(log.table_path, exist_ok=True)
    t.commit([_write(log.table_path, list(range(10)))], operation="CREATE TABLE")
    return log


def _mark(log: DeltaLog, add: AddFile, rows: list[int]) -> list:
    """remove(F, old dv) + add(F, old ∪ rows): a DELETE through deletion vectors (row index == id)."""
    old = (
        read_deletion_vector(log.table_path, add.deletion_vector) if add.deletion_vector else RowIndexSet.from_iter([])
    )
    dv = write_deletion_vector(log.table_path, old | RowIndexSet.from_iter(rows))
    return [add.remove(), replace(add, deletion_vector=dv)]


def _delete(txn, log: DeltaLog, ids: list[int]) -> list:
    files = txn.filter_files([f"id IN ({', '.join(map(str, ids))})"])
    assert len(files) == 1
    return _mark(log, files[0], ids)


def _compact(log: DeltaLog, files: list[AddFile]) -> list:
    """OPTIMIZE of ``files`` (no vectors) into one output tagged with the row mapping."""
    ids = [v for f in files for v in pq.read_table(os.path.join(log.table_path, f.path)).column("id").to_pylist()]
    sources = [[f.path, f.dv_id, f.num_records] for f in files]
    g = replace(_write(log.table_path, ids), data_change=False, tags={COMPACTED_FROM_TAG: json.dumps(sources)})
    return [f.remove(data_change=False) for f in files] + [g]


def _dv_files(log: DeltaLog) -> set[str]:
    return {str(p) for p in Path(log.table_path).rglob("deletion_vector_*.bin")}


def _referenced_dv_files(log: DeltaLog) -> set[str]:
    snap = DeltaLog(log.table_path).update()
    return {dv_absolute_path(log.table_path, f.deletion_vector) for f in snap.all_files if f.deletion_vector}


def _live_ids(log: DeltaLog) -> list[int]:
    out: list[int] = []
    for f in DeltaLog(log.table_path).update().all_files:
        ids = pq.read_table(os.path.join(log.table_path, f.path)).column("id").to_pylist()
        gone = set(read_deletion_vector(log.table_path, f.deletion_vector)) if f.deletion_vector else set()
        out += [v for i, v in enumerate(ids) if i not in gone]
    return sorted(out)


# -- a later winner conflicts: no vector of the rebase is left --------------------------------


def test_rebase_then_same_row_conflict_leaves_no_rebase_vector(tmp_path):
    log = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    w1 = log.start_transaction()
    w1.commit(_delete(w1, log, [9]), operation="DELETE")  # disjoint: T rebases, merging the vectors
    w2 = log.start_transaction()
    w2.commit(_delete(w2, log, [5]), operation="DELETE")  # the same row as T: T fails
    before = _dv_files(log)
    with pytest.raises(ConcurrentDeleteDeleteException):
        t.commit(t_actions, operation="DELETE")
    assert _dv_files(log) == before  # the merged vector T wrote over W1 is gone, the winners' stay
    assert _referenced_dv_files(log) <= before
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 7, 8]


def test_rebase_then_append_conflict_leaves_no_rebase_vector(tmp_path):
    log = _table(tmp_path, level="Serializable")
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    w1 = log.start_transaction()
    w1.commit(_delete(w1, log, [9]), operation="DELETE")
    log.start_transaction().commit([_write(log.table_path, [5, 50])], operation="WRITE")  # a new id = 5
    before = _dv_files(log)
    with pytest.raises(ConcurrentAppendException):
        t.commit(t_actions, operation="DELETE")
    assert _dv_files(log) == before


def test_carry_into_compaction_then_conflict_leaves_no_rebase_vector(tmp_path):
    log = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    opt = log.start_transaction()
    opt.commit(_compact(log, opt.snapshot.all_files), operation="OPTIMIZE")  # T's deletion moves to G
    w = log.start_transaction()
    w.commit(_delete(w, log, [5]), operation="DELETE")  # deletes the same row of G
    before = _dv_files(log)
    with pytest.raises(ConcurrentDeleteDeleteException):
        t.commit(t_actions, operation="DELETE")
    assert _dv_files(log) == before
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 7, 8, 9]


# -- the commit lands: exactly the vectors it references are new -------------------------------


def test_rebase_commit_keeps_exactly_the_committed_vector(tmp_path):
    log = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    before = _dv_files(log)
    t.commit(t_actions, operation="DELETE")
    new = _dv_files(log) - before
    assert len(new) == 1 and new <= _referenced_dv_files(log)
    assert _dv_files(log) >= before  # nothing of the winner's (or the operation's own) is removed
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 7, 8]


def test_later_rebase_deletes_the_vector_it_supersedes(tmp_path):
    log = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    for row in (9, 7):  # two winners on the same file: T rebases twice, the second merge replaces the first
        w = log.start_transaction()
        w.commit(_delete(w, log, [row]), operation="DELETE")
    before = _dv_files(log)
    t.commit(t_actions, operation="DELETE")
    new = _dv_files(log) - before
    committed = [a for a in t.committed_actions or [] if isinstance(a, AddFile) and a.deletion_vector]
    assert len(committed) == 1
    assert new == {dv_absolute_path(log.table_path, committed[0].deletion_vector)}
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 8]


def test_later_rebase_then_conflict_leaves_none(tmp_path):
    log = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    for row in (9, 7, 5):  # two disjoint rebases, then a winner on T's row
        w = log.start_transaction()
        w.commit(_delete(w, log, [row]), operation="DELETE")
    before = _dv_files(log)
    with pytest.raises(ConcurrentDeleteDeleteException):
        t.commit(t_actions, operation="DELETE")
    assert _dv_files(log) == before
