"""Row-level concurrency (conflict-matrix section 4) through the core API, on real Parquet files.

Files are written with pyarrow and deletion vectors with the core DV module, so these
tests exercise the conflict rules exactly; the Spark DML tests exercise the same rules
end to end.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector, write_deletion_vector
from serialake.core.model.actions import AddFile, Metadata
from serialake.core.txn.row_level import COMPACTED_FROM_TAG
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
)

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "x", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
]})


def _write(table: str, ids: list[int], p: int | None = None) -> AddFile:
    rel = (f"p={p}/" if p is not None else "") + f"part-{uuid.uuid4().hex}.parquet"
    full = os.path.join(table, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array(ids, pa.int64())}), full)
    stats = {"numRecords": len(ids), "minValues": {"id": min(ids), "x": min(ids)},
             "maxValues": {"id": max(ids), "x": max(ids)}, "nullCount": {"id": 0, "x": 0}}
    return AddFile(path=rel, partition_values={"p": str(p)} if p is not None else {}, size=os.path.getsize(full),
                   modification_time=0, data_change=True, stats=json.dumps(stats))


def _table(
    tmp_path, level: str = "WriteSerializable", partitioned: bool = False, row_level: bool | None = None
) -> tuple[DeltaLog, AddFile]:
    path = str(tmp_path / "t")
    log = DeltaLog(path)
    t = log.start_transaction()
    conf = {"delta.enableDeletionVectors": "true", "delta.isolationLevel": level}
    if row_level is not None:
        conf["delta.enableRowLevelConcurrency"] = str(row_level).lower()
    t.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",) if partitioned else (),
                               configuration=conf))
    f = _write(path, list(range(10)), 1 if partitioned else None)
    t.commit([f], operation="CREATE TABLE")
    return log, f


def _mark(log: DeltaLog, add: AddFile, rows: list[int]) -> list:
    """remove(F, old dv) + add(F, old ∪ rows)."""
    old = (
        read_deletion_vector(log.table_path, add.deletion_vector) if add.deletion_vector else RowIndexSet.from_iter([])
    )
    dv = write_deletion_vector(log.table_path, old | RowIndexSet.from_iter(rows))
    return [add.remove(), replace(add, deletion_vector=dv)]


def _live_ids(log: DeltaLog) -> list[int]:
    out: list[int] = []
    snap = DeltaLog(log.table_path).update()
    for f in snap.all_files:
        ids = pq.read_table(os.path.join(log.table_path, f.path)).column("id").to_pylist()
        gone = set(read_deletion_vector(log.table_path, f.deletion_vector)) if f.deletion_vector else set()
        out += [v for i, v in enumerate(ids) if i not in gone]
    return sorted(out)


def _delete(txn, log: DeltaLog, ids: list[int]) -> list:
    files = txn.filter_files([f"id IN ({', '.join(map(str, ids))})"])
    assert len(files) == 1
    return _mark(log, files[0], ids)  # row index == id in these files


def test_r1_disjoint_deletes_in_one_file_both_commit(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    assert t.commit(t_actions, operation="DELETE") == 2
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 7, 8]
    assert DeltaLog(log.table_path).update().num_files == 1


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_r1_on_partitioned_table_both_commit(tmp_path, level):
    """Partitioned tables with deletion vectors get row-level resolution by default (issue #41)."""
    log, _ = _table(tmp_path, level=level, partitioned=True)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    assert t.commit(t_actions, operation="DELETE") == 2
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 7, 8]


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_r1_row_level_off_switch_keeps_file_level_rules(tmp_path, partitioned):
    """``delta.enableRowLevelConcurrency=false`` is the explicit off switch, on any table."""
    log, _ = _table(tmp_path, partitioned=partitioned, row_level=False)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    with pytest.raises((ConcurrentDeleteReadException, ConcurrentDeleteDeleteException)):
        t.commit(t_actions, operation="DELETE")
    assert _live_ids(log) == [0, 1, 2, 3, 4, 5, 6, 7, 8]


def test_r2_same_row_fails(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()  # UPDATE row 5: mark it deleted, write the new version
    t_actions = _delete(t, log, [5]) + [_write(log.table_path, [5])]
    w = log.start_transaction()
    w.commit(_delete(w, log, [5]), operation="DELETE")
    with pytest.raises(ConcurrentDeleteDeleteException) as e:
        t.commit(t_actions, operation="UPDATE")
    assert "same row" in str(e.value)
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 7, 8, 9]


def test_r1_a_merged_vector_that_cannot_be_written_keeps_the_file_level_conflict(tmp_path, monkeypatch):
    """Rebasing decided (the rows are disjoint), carrying it out failed: the file-level conflict, as before."""
    from serialake.core.txn import row_level
    from serialake.exceptions import ConflictReason

    log, f = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _delete(t, log, [5])
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")

    def full(table_path, rows):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(row_level, "write_dv", full)
    with pytest.raises(ConcurrentDeleteDeleteException) as e:
        t.commit(t_actions, operation="DELETE")
    assert e.value.conflict_reason is ConflictReason.FILE_REMOVED
    assert "A file this transaction removes was also removed by a concurrent DELETE" in str(e.value)
    assert e.value.winning_version == 1 and f.path in str(e.value)
    assert _live_ids(log) == [0, 1, 2, 3, 4, 5, 6, 7, 8]


def test_winner_deleting_a_row_we_read_fails(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()  # reads x >= 8, deletes row 9 only (e.g. a MERGE that matched 8 and 9)
    files = t.filter_files(["x >= 8"])
    t_actions = _mark(log, files[0], [9])
    w = log.start_transaction()
    w.commit(_delete(w, log, [8]), operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        t.commit(t_actions, operation="MERGE")


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_r3_update_vs_blind_append(tmp_path, level):
    log, _ = _table(tmp_path, level=level)
    t = log.start_transaction()
    t_actions = _delete(t, log, [3]) + [_write(log.table_path, [3])]
    log.start_transaction().commit([_write(log.table_path, [100, 101])], operation="WRITE")
    assert t.commit(t_actions, operation="UPDATE") == 2


def test_r3_serializable_append_matching_the_read_conflicts(tmp_path):
    log, _ = _table(tmp_path, level="Serializable")
    t = log.start_transaction()
    t_actions = _delete(t, log, [3]) + [_write(log.table_path, [3])]
    log.start_transaction().commit([_write(log.table_path, [3, 50])], operation="WRITE")  # a new id = 3
    with pytest.raises(ConcurrentAppendException):
        t.commit(t_actions, operation="UPDATE")


def _compact(log: DeltaLog, files: list[AddFile], with_tag: bool = True) -> list:
    """OPTIMIZE: live rows of ``files`` in order into one new file (tagged with the mapping); without
    the tag, as ZORDER: rows in descending id order."""
    ids: list[int] = []
    sources = []
    for f in files:
        col = pq.read_table(os.path.join(log.table_path, f.path)).column("id").to_pylist()
        gone = set(read_deletion_vector(log.table_path, f.deletion_vector)) if f.deletion_vector else set()
        live = [v for i, v in enumerate(col) if i not in gone]
        ids += live
        sources.append([f.path, f.dv_id, len(live)])
    g = replace(_write(log.table_path, ids if with_tag else sorted(ids, reverse=True)), data_change=False,
                tags={COMPACTED_FROM_TAG: json.dumps(sources)} if with_tag else None)
    return [f.remove(data_change=False) for f in files] + [g]


@pytest.mark.parametrize("order", ["delete_first", "optimize_first"])
def test_r4_optimize_and_delete_both_commit(tmp_path, order):
    log, f = _table(tmp_path)
    pre = log.start_transaction()
    pre.commit(_delete(pre, log, [0]), operation="DELETE")  # the input already has a vector
    opt = log.start_transaction()
    inputs = opt.snapshot.all_files
    opt_actions = _compact(log, inputs)
    dele = log.start_transaction()
    del_actions = _delete(dele, log, [7])
    if order == "delete_first":
        dele.commit(del_actions, operation="DELETE")
        opt.commit(opt_actions, operation="OPTIMIZE")
    else:
        opt.commit(opt_actions, operation="OPTIMIZE")
        dele.commit(del_actions, operation="DELETE")
    assert _live_ids(log) == [1, 2, 3, 4, 5, 6, 8, 9]
    snap = DeltaLog(log.table_path).update()
    assert snap.num_files == 1 and snap.all_files[0].path != f.path


def test_r4_on_partitioned_table_optimize_does_not_conflict(tmp_path):
    log, _ = _table(tmp_path, partitioned=True)
    opt = log.start_transaction()
    opt_actions = _compact(log, opt.snapshot.all_files)
    dele = log.start_transaction()
    dele.commit(_delete(dele, log, [4]), operation="DELETE")
    opt.commit(opt_actions, operation="OPTIMIZE")
    assert _live_ids(log) == [0, 1, 2, 3, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("order", ["delete_first", "zorder_first"])
def test_r5_zorder_without_row_mapping_carries_the_delete_by_content(tmp_path, order):
    """No mapping: the deleted row is found by its values in the reordered output (ids 9..0)."""
    log, f = _table(tmp_path)
    opt = log.start_transaction()
    opt_actions = _compact(log, opt.snapshot.all_files, with_tag=False)
    dele = log.start_transaction()
    del_actions = _delete(dele, log, [7])
    pair = [(dele, del_actions, "DELETE"), (opt, opt_actions, "OPTIMIZE")]
    (t1, a1, op1), (t2, a2, op2) = pair if order == "delete_first" else pair[::-1]
    t1.commit(a1, operation=op1)
    assert t2.commit(a2, operation=op2) == 2
    assert _live_ids(log) == [0, 1, 2, 3, 4, 5, 6, 8, 9]
    (g,) = DeltaLog(log.table_path).update().all_files
    assert g.path != f.path and sorted(read_deletion_vector(log.table_path, g.deletion_vector)) == [2]


def test_r6_merge_and_update_on_other_rows_both_commit(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()  # MERGE: target rows with id IN (1, 2) updated, one insert
    t_actions = _delete(t, log, [1, 2]) + [_write(log.table_path, [1, 2, 42])]
    w = log.start_transaction()  # UPDATE id = 8
    w.commit(_delete(w, log, [8]) + [_write(log.table_path, [8])], operation="UPDATE")
    assert t.commit(t_actions, operation="MERGE") == 2
    assert _live_ids(log) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 42]


def test_three_writers_disjoint_rows_all_commit(tmp_path):
    log, _ = _table(tmp_path)
    txns = [log.start_transaction() for _ in range(3)]
    acts = [_delete(t, log, [r]) for t, r in zip(txns, (2, 4, 6))]
    for t, a in zip(txns, acts):
        t.commit(a, operation="DELETE")
    assert _live_ids(log) == [0, 1, 3, 5, 7, 8, 9]


# -- three-valued evaluation: parts the driver cannot compute are unknown, not a give-up --------

from serialake.core.predicates import expressions as P  # noqa: E402
from serialake.core.predicates import row_eval as RL  # noqa: E402
from serialake.exceptions import DeltaIllegalArgumentException  # noqa: E402


def _verdict(log: DeltaLog, add: AddFile, text: str, rows: list[int] | None = None) -> tuple[list[int], list[int]]:
    reader = RL.RowReader(log.table_path, DeltaLog(log.table_path).update())
    v = reader.evaluate(add, P.parse_predicate(text), RowIndexSet.from_iter(rows) if rows is not None else None)
    return sorted(v.true), sorted(v.undecided)


def _with_nulls(tmp_path) -> tuple[DeltaLog, AddFile]:
    """A table whose one file holds id 0..5 and x = [0, NULL, 2, NULL, 4, 5]."""
    log, _ = _table(tmp_path)
    rel = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"id": pa.array(range(6), pa.int64()),
                             "x": pa.array([0, None, 2, None, 4, 5], pa.int64())}), os.path.join(log.table_path, rel))
    add = AddFile(path=rel, partition_values={}, size=1, modification_time=0, data_change=True,
                  stats=json.dumps({"numRecords": 6}))
    return log, add


def test_and_with_an_unknown_part_decides_the_rows_it_makes_false(tmp_path):
    log, f = _table(tmp_path)
    assert _verdict(log, f, "id = 5 AND my_udf(id)") == ([], [5])
    assert _verdict(log, f, "my_udf(x) AND id IN (2, 3)", [1, 2, 9]) == ([], [2])
    with pytest.raises(RL.CannotEvaluate):
        RL.RowReader(log.table_path, log.update()).matching_rows(f, P.parse_predicate("id = 5 AND my_udf(id)"))


def test_or_with_an_unknown_part_decides_the_rows_it_makes_true(tmp_path):
    log, f = _table(tmp_path)
    assert _verdict(log, f, "id = 5 OR my_udf(id)") == ([5], [0, 1, 2, 3, 4, 6, 7, 8, 9])
    assert _verdict(log, f, "NOT (id = 5 OR my_udf(id))") == ([], [0, 1, 2, 3, 4, 6, 7, 8, 9])
    assert _verdict(log, f, "(id < 3 OR my_udf(id)) AND id < 5 AND NOT (id = 1)") == ([0, 2], [3, 4])


def test_inexact_comparisons_are_unknown_not_guessed(tmp_path):
    log, f = _table(tmp_path)
    # A string literal against a long column needs Spark's cast: unknown, even where pyarrow could guess.
    assert _verdict(log, f, "id < '5' AND id >= 7") == ([], [7, 8, 9])
    assert _verdict(log, f, "x + 1 = 3 OR id = 0") == ([0], [1, 2, 3, 4, 5, 6, 7, 8, 9])


def test_null_values_follow_kleene_logic(tmp_path):
    log, f = _with_nulls(tmp_path)  # x is NULL on rows 1 and 3
    assert _verdict(log, f, "x = 1 AND my_udf(id)") == ([], [])  # NULL AND ? is NULL or FALSE
    assert _verdict(log, f, "x > 1 AND my_udf(id)") == ([], [2, 4, 5])
    assert _verdict(log, f, "x IS NULL OR my_udf(id)") == ([1, 3], [0, 2, 4, 5])
    assert _verdict(log, f, "x = 2 OR my_udf(id)") == ([2], [0, 1, 3, 4, 5])  # NULL OR ? may be TRUE
    assert _verdict(log, f, "NOT (x = 2) AND my_udf(id)") == ([], [0, 4, 5])  # NOT NULL is NULL


def test_deleted_rows_are_neither_true_nor_undecided(tmp_path):
    log, f = _table(tmp_path)
    t = log.start_transaction()
    t.commit(_delete(t, log, [4, 5]), operation="DELETE")
    (g,) = DeltaLog(log.table_path).update().all_files
    assert _verdict(log, g, "id > 2 AND my_udf(id)") == ([], [3, 6, 7, 8, 9])
    assert _verdict(log, g, "id < 6 OR my_udf(id)", [0, 5, 6]) == ([0], [6])


def test_exact_predicates_evaluate_as_before(tmp_path):
    log, f = _with_nulls(tmp_path)
    reader = RL.RowReader(log.table_path, log.update())
    for text, want in [("x >= 2", [2, 4, 5]), ("NOT (x = 2)", [0, 4, 5]), ("x IS NULL OR id = 0", [0, 1, 3]),
                       ("x <=> NULL", [1, 3]), ("x IN (0, NULL)", [0]), ("NOT (x IN (0, NULL))", [])]:
        assert sorted(reader.matching_rows(f, P.parse_predicate(text))) == want, text
        assert _verdict(log, f, text) == (want, []), text


# -- matched rows declared by the operation, and a row evaluator for the undecided rows ----------


def _udf_delete(t, log: DeltaLog, cond: str, ids: list[int], evaluator=None, declare: bool = True) -> list:
    """DELETE WHERE ``cond`` (with a UDF) that matched ``ids``: the transaction knows its matched rows."""
    (f,) = t.filter_files([cond], row_evaluator=evaluator)
    if declare:
        t.record_matched_rows({f.path: RowIndexSet.from_iter(ids)})
    return _mark(log, f, ids)


def test_declared_matched_rows_let_a_delete_of_other_rows_commit(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()  # id >= 5 AND my_udf(id): row 9 is undecided on the driver
    t_actions = _udf_delete(t, log, "id >= 5 AND my_udf(id)", [5])
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    assert t.commit(t_actions, operation="DELETE") == 2
    assert _live_ids(log) == [0, 1, 2, 3, 4, 6, 7, 8]


def test_without_declared_rows_an_undecided_deleted_row_conflicts(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _udf_delete(t, log, "id >= 5 AND my_udf(id)", [5], declare=False)
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        t.commit(t_actions, operation="DELETE")


def test_a_deleted_row_decided_false_on_the_driver_commits_without_declared_rows(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _udf_delete(t, log, "id = 5 AND my_udf(id)", [5], declare=False)
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    assert t.commit(t_actions, operation="DELETE") == 2


def test_declared_rows_of_the_same_row_leave_it_to_delete_delete(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _udf_delete(t, log, "id >= 5 AND my_udf(id)", [5, 7])
    w = log.start_transaction()
    w.commit(_delete(w, log, [5]), operation="DELETE")
    with pytest.raises(ConcurrentDeleteDeleteException, match="same row"):
        t.commit(t_actions, operation="DELETE")


def test_a_deleted_row_among_the_declared_matches_conflicts(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()  # an UPDATE that matched 5 and 9 but changes only 5 (e.g. a MERGE)
    (f,) = t.filter_files(["id >= 5 AND my_udf(id)"])
    t.record_matched_rows({f.path: RowIndexSet.from_iter([5, 9])})
    t_actions = _mark(log, f, [5])
    w = log.start_transaction()
    w.commit(_delete(w, log, [9]), operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        t.commit(t_actions, operation="MERGE")


def test_declared_rows_are_used_only_against_the_vector_they_were_read_with(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()
    t_actions = _udf_delete(t, log, "id >= 5 AND my_udf(id)", [5])
    for row in (0, 9):  # the second winner replaces a vector we did not read: evaluation, undecided
        w = log.start_transaction()
        w.commit(_delete(w, log, [row]), operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        t.commit(t_actions, operation="DELETE")


def test_matched_rows_only_for_files_read(tmp_path):
    log, _ = _table(tmp_path)
    t = log.start_transaction()
    with pytest.raises(DeltaIllegalArgumentException, match="did not read"):
        t.record_matched_rows({"elsewhere.parquet": RowIndexSet.from_iter([1])})


@pytest.mark.parametrize("answer", ["none", "row", "error"])
def test_row_evaluator_decides_undecided_deleted_rows(tmp_path, answer):
    log, _ = _table(tmp_path)
    calls: list[tuple[str, list[int]]] = []

    def evaluator(add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        assert rows is not None
        calls.append((add.path, sorted(rows)))
        if answer == "error":
            raise RuntimeError("the job failed")
        return RowIndexSet.from_iter(list(rows) if answer == "row" else [])

    t = log.start_transaction()
    t_actions = _udf_delete(t, log, "id >= 5 AND my_udf(id)", [5], evaluator, declare=False)
    w = log.start_transaction()
    w.commit(_delete(w, log, [3, 9]), operation="DELETE")  # row 3 is decided FALSE on the driver
    if answer == "none":
        assert t.commit(t_actions, operation="DELETE") == 2
        assert _live_ids(log) == [0, 1, 2, 4, 6, 7, 8]
    else:
        with pytest.raises(ConcurrentDeleteReadException):
            t.commit(t_actions, operation="DELETE")
    assert [rows for _, rows in calls] == [[9]]


@pytest.mark.parametrize("answer", ["none", "row", "error"])
def test_row_evaluator_decides_undecided_appended_rows(tmp_path, answer):
    log, _ = _table(tmp_path, level="Serializable")
    calls: list[list[int]] = []

    def evaluator(add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        assert rows is not None
        calls.append(sorted(rows))
        if answer == "error":
            raise RuntimeError("the job failed")
        return RowIndexSet.from_iter(list(rows) if answer == "row" else [])

    t = log.start_transaction()
    t_actions = _udf_delete(t, log, "id = 5 AND my_udf(x)", [5], evaluator)
    log.start_transaction().commit([_write(log.table_path, [1, 5, 7])], operation="WRITE")  # only 5 undecided
    if answer == "none":
        assert t.commit(t_actions, operation="DELETE") == 2
    else:
        with pytest.raises(ConcurrentAppendException):
            t.commit(t_actions, operation="DELETE")
    assert calls == [[1]]  # the new file's row index of id 5


def test_appended_rows_decided_false_on_the_driver_need_no_evaluator(tmp_path):
    log, _ = _table(tmp_path, level="Serializable")
    t = log.start_transaction()
    t_actions = _udf_delete(t, log, "id = 5 AND my_udf(x)", [5])
    log.start_transaction().commit([_write(log.table_path, [1, 7])], operation="WRITE")
    assert t.commit(t_actions, operation="DELETE") == 2


@pytest.mark.parametrize("answer", ["none", "row"])
def test_confirm_rows_hands_rows_the_driver_finds_true_to_the_evaluator(tmp_path, answer):
    """A MERGE's read predicate is only a necessary condition of its read (``confirm_rows``): the
    driver rules rows out, and the evaluator confirms the rows where the predicate is TRUE."""
    log, _ = _table(tmp_path, level="Serializable")
    calls: list[list[int]] = []

    def evaluator(add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        assert rows is not None
        calls.append(sorted(rows))
        return RowIndexSet.from_iter(list(rows) if answer == "row" else [])

    t = log.start_transaction()
    (f,) = t.filter_files(["id IN (5, 8)"], row_evaluator=evaluator, confirm_rows=True)
    t.record_matched_rows({f.path: RowIndexSet.from_iter([5])})
    t_actions = _mark(log, f, [5])
    log.start_transaction().commit([_write(log.table_path, [1, 8, 7])], operation="WRITE")  # 8: TRUE on the driver
    if answer == "none":
        assert t.commit(t_actions, operation="MERGE") == 2
    else:
        with pytest.raises(ConcurrentAppendException):
            t.commit(t_actions, operation="MERGE")
    assert calls == [[1]]  # only the new file's row of id 8


def test_without_confirm_rows_the_driver_decides_true_rows(tmp_path):
    log, _ = _table(tmp_path, level="Serializable")

    calls: list[object] = []

    def evaluator(add: AddFile, rows: RowIndexSet | None) -> RowIndexSet:
        calls.append(rows)
        return RowIndexSet.from_iter([])

    t = log.start_transaction()
    (f,) = t.filter_files(["id IN (5, 8)"], row_evaluator=evaluator)
    t_actions = _mark(log, f, [5])
    log.start_transaction().commit([_write(log.table_path, [1, 8, 7])], operation="WRITE")
    with pytest.raises(ConcurrentAppendException):
        t.commit(t_actions, operation="MERGE")
    assert calls == []  # the exact predicate decided on the driver
