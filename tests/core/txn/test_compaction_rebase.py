"""Compactions rebased over each other and over DML that empties a file (deletion-vector tables).

Core API only, on real Parquet files: T starts first (the loser), W commits between T's
start and T's commit. Files hold ids in physical order, so a row index is a position in
the file's id list. Every test checks the final rows exactly (no row lost or doubled).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector, write_deletion_vector
from serialake.core.model.actions import Action, AddFile, CommitInfo, Metadata, RemoveFile
from serialake.core.txn import row_matching
from serialake.core.txn.row_level import COMPACTED_FROM_TAG
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import ConcurrentDeleteDeleteException

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
]})
LEVELS = ["WriteSerializable", "Serializable"]


def _write(table: str, ids: Sequence[int], p: int | None) -> AddFile:
    rel = (f"p={p}/" if p is not None else "") + f"part-{uuid.uuid4().hex}.parquet"
    full = os.path.join(table, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(list(ids), pa.int64())}), full)
    stats = {"numRecords": len(ids), "minValues": {"id": min(ids)}, "maxValues": {"id": max(ids)},
             "nullCount": {"id": 0}}
    return AddFile(path=rel, partition_values={"p": str(p)} if p is not None else {}, size=os.path.getsize(full),
                   modification_time=0, data_change=True, stats=json.dumps(stats))


def _table(tmp_path: Path, groups: Sequence[Sequence[int]], *, partitioned: bool = False, dvs: bool = True,
           level: str = "WriteSerializable") -> tuple[DeltaLog, list[AddFile]]:
    """A table with one file per id group (partitioned: file i in partition p = i % 2)."""
    path = str(tmp_path / f"t{uuid.uuid4().hex[:8]}")
    log = DeltaLog(path)
    conf = {"delta.isolationLevel": level, **({"delta.enableDeletionVectors": "true"} if dvs else {})}
    t = log.start_transaction()
    t.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",) if partitioned else (),
                               configuration=conf))
    files = [_write(path, ids, i % 2 if partitioned else None) for i, ids in enumerate(groups)]
    t.commit(files, operation="CREATE TABLE")
    return log, files


def _ids_of(log: DeltaLog, f: AddFile) -> list[int]:
    ids = pq.read_table(os.path.join(log.table_path, f.path)).column("id").to_pylist()
    gone = set(read_deletion_vector(log.table_path, f.deletion_vector)) if f.deletion_vector else set()
    return [v for i, v in enumerate(ids) if i not in gone]


def _live_ids(log: DeltaLog) -> list[int]:
    return sorted(v for f in DeltaLog(log.table_path).update().all_files for v in _ids_of(log, f))


def _current(log: DeltaLog, f: AddFile) -> AddFile:
    return next(a for a in DeltaLog(log.table_path).update().all_files if a.path == f.path)


def _compact(log: DeltaLog, files: Sequence[AddFile], *, tag: bool = True) -> list[Action]:
    """OPTIMIZE of ``files`` into one output: their live rows in order, tagged with the mapping.

    ``tag=False``: a sorting compaction (ZORDER, clustering) instead: the rows in descending id
    order, no mapping.
    """
    ids: list[int] = []
    sources = []
    for f in files:
        live = _ids_of(log, f)
        ids += live
        sources.append([f.path, f.dv_id, len(live)])
    p = (files[0].partition_values or {}).get("p")
    g = replace(_write(log.table_path, ids if tag else sorted(ids, reverse=True), int(p) if p is not None else None),
                data_change=False, tags={COMPACTED_FROM_TAG: json.dumps(sources)} if tag else None)
    return [f.remove(data_change=False) for f in files] + [g]


def _mark(log: DeltaLog, f: AddFile, rows: Sequence[int]) -> list[Action]:
    """A DML marking ``rows`` of ``f`` deleted: remove(F, old dv) + add(F, old | rows)."""
    old = read_deletion_vector(log.table_path, f.deletion_vector) if f.deletion_vector else RowIndexSet.from_iter([])
    dv = write_deletion_vector(log.table_path, old | RowIndexSet.from_iter(rows))
    return [f.remove(), replace(f, deletion_vector=dv)]


def _metrics(log: DeltaLog, version: int) -> dict[str, str]:
    ci = DeltaLog(log.table_path).read_commit(version).commit_info
    assert isinstance(ci, CommitInfo)
    return dict(ci.values.get("operationMetrics") or {})


def _optimize(t: OptimisticTransaction, actions: list[Action]) -> int:
    adds = sum(1 for a in actions if isinstance(a, AddFile))
    removes = sum(1 for a in actions if isinstance(a, RemoveFile))
    metrics = {"numAddedFiles": adds, "numRemovedFiles": removes}
    return t.commit(actions, operation="OPTIMIZE", operation_metrics=metrics)


def _files(log: DeltaLog, t: OptimisticTransaction) -> list[AddFile]:
    assert t.snapshot is not None
    return sorted(t.snapshot.all_files, key=lambda f: _ids_of(log, f)[0])


# -- A: two compactions of the same files -------------------------------------------------------


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_the_same_compaction_twice_finds_its_work_done(tmp_path: Path, partitioned: bool) -> None:
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4], [5, 6, 7], [8]], partitioned=partitioned)
    t, w = log.start_transaction(), log.start_transaction()
    parts = [[f for f in _files(log, t) if not partitioned or f.partition_values == {"p": str(p)}] for p in (0, 1)]
    bins = parts if partitioned else [parts[0]]
    t_actions = [a for b in bins for a in _compact(log, b)]
    w_actions = [a for b in bins for a in _compact(log, b)]
    assert _optimize(w, w_actions) == 1
    assert _optimize(t, t_actions) == 1  # the version that already holds the work
    assert t.committed is not None and t.committed.work_already_done
    assert t.committed_actions == []
    assert DeltaLog(log.table_path).update().version == 1
    assert w.committed is not None and not w.committed.work_already_done
    assert len(w.committed_actions or []) == len(w_actions) + 1  # with its commitInfo
    assert _live_ids(log) == list(range(9))


def test_partial_overlap_drops_only_the_outputs_holding_compacted_inputs(tmp_path: Path) -> None:
    log, _ = _table(tmp_path, [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]])
    t, w = log.start_transaction(), log.start_transaction()
    a, b, c, d, e = _files(log, t)
    kept = _compact(log, [d, e])
    t_actions = _compact(log, [a, c]) + kept
    w.commit(_compact(log, [a, b]), operation="OPTIMIZE")
    assert _optimize(t, t_actions) == 2
    assert t.committed is not None and not t.committed.work_already_done
    final = DeltaLog(log.table_path).read_commit(2)
    assert {x.path for x in final.actions if isinstance(x, RemoveFile)} == {d.path, e.path}
    assert [x.path for x in final.actions if isinstance(x, AddFile)] == [kept[-1].path]
    assert _metrics(log, 2) == {"numAddedFiles": "1", "numRemovedFiles": "2"}
    snap = DeltaLog(log.table_path).update()
    assert c.path in {f.path for f in snap.all_files}  # c was only in the dropped output: untouched
    assert _live_ids(log) == list(range(10))


def test_a_winner_overlapping_every_output_leaves_nothing(tmp_path: Path) -> None:
    log, _ = _table(tmp_path, [[0, 1], [2, 3], [4, 5], [6, 7]])
    t, w = log.start_transaction(), log.start_transaction()
    a, b, c, d = _files(log, t)
    t_actions = _compact(log, [a, b]) + _compact(log, [c, d])
    w.commit(_compact(log, [b, c]), operation="OPTIMIZE")
    assert _optimize(t, t_actions) == 1 and t.committed is not None and t.committed.work_already_done
    assert _live_ids(log) == list(range(8))


def test_compaction_after_a_delete_and_a_compaction(tmp_path: Path) -> None:
    """W1 marks a row of A, W2 compacts A (with W1's vector) and B; our compaction of A, B yields."""
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4]])
    t = log.start_transaction()
    a, b = _files(log, t)
    t_actions = _compact(log, [a, b])
    w1 = log.start_transaction()
    w1.commit(_mark(log, a, [1]), operation="DELETE")
    w2 = log.start_transaction()
    w2.commit(_compact(log, [_current(log, a), b]), operation="OPTIMIZE")
    assert _optimize(t, t_actions) == 2 and t.committed is not None and t.committed.work_already_done
    assert _live_ids(log) == [0, 2, 3, 4]


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_untagged_loser_finds_its_work_done(tmp_path: Path, partitioned: bool) -> None:
    """A sorting compaction (no mapping) loses to a compaction of the same files: every row of its
    output is found, by content, in the winner's; nothing is left to commit."""
    log, _ = _table(tmp_path, [[0, 1], [2, 3], [4, 5], [6, 7]], partitioned=partitioned)
    t, w = log.start_transaction(), log.start_transaction()
    files = [f for f in _files(log, t) if f.partition_values in ({}, {"p": "0"})]
    t_actions = _compact(log, files, tag=False)  # e.g. ZORDER
    w.commit(_compact(log, files), operation="OPTIMIZE")
    assert _optimize(t, t_actions) == 1 and t.committed is not None and t.committed.work_already_done
    assert _live_ids(log) == list(range(8))


def test_untagged_loser_keeps_the_inputs_the_winner_left(tmp_path: Path) -> None:
    """The winner compacted two of our three inputs: their rows are marked deleted in our sorted output
    (found by content), our removes of them dropped; the third input is still compacted by us."""
    log, _ = _table(tmp_path, [[0, 1], [2, 3], [4, 5]])
    t, w = log.start_transaction(), log.start_transaction()
    a, b, c = _files(log, t)
    t_actions = _compact(log, [a, b, c], tag=False)  # ids 5 4 3 2 1 0
    w.commit(_compact(log, [a, b]), operation="OPTIMIZE")
    assert _optimize(t, t_actions) == 2 and t.committed is not None and not t.committed.work_already_done
    final = DeltaLog(log.table_path).read_commit(2).actions
    assert [x.path for x in final if isinstance(x, RemoveFile)] == [c.path]
    (g,) = [x for x in final if isinstance(x, AddFile)]
    assert not g.data_change and g.deletion_vector is not None
    assert sorted(read_deletion_vector(log.table_path, g.deletion_vector)) == [2, 3, 4, 5]  # ids 3..0
    assert json.loads(g.stats or "{}")["tightBounds"] is False
    assert _metrics(log, 2) == {"numAddedFiles": "1", "numRemovedFiles": "1"}
    assert _live_ids(log) == list(range(6))


def test_untagged_loser_beyond_the_size_bound_keeps_the_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(row_matching, "MAX_MATCH_BYTES", 1)
    log, _ = _table(tmp_path, [[0, 1], [2, 3]])
    t, w = log.start_transaction(), log.start_transaction()
    files = _files(log, t)
    w.commit(_compact(log, files), operation="OPTIMIZE")
    with pytest.raises(ConcurrentDeleteDeleteException):
        t.commit(_compact(log, files, tag=False), operation="OPTIMIZE")
    assert not [n for n in os.listdir(log.table_path) if n.endswith(".bin")]  # no rebase vector left behind


def test_without_deletion_vectors_two_compactions_still_conflict(tmp_path: Path) -> None:
    log, _ = _table(tmp_path, [[0, 1], [2, 3]], dvs=False)
    t, w = log.start_transaction(), log.start_transaction()
    files = _files(log, t)
    w.commit(_compact(log, files), operation="OPTIMIZE")
    with pytest.raises(ConcurrentDeleteDeleteException):
        t.commit(_compact(log, files), operation="OPTIMIZE")


# -- C (i): the compaction loses to a DML that emptied one input ---------------------------------


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_compaction_after_a_delete_of_every_row_of_an_input(tmp_path: Path, partitioned: bool) -> None:
    log, _ = _table(tmp_path, [[0, 1, 2, 3], [4, 5, 6], [7, 8]], partitioned=partitioned)
    pre = log.start_transaction()
    first = _files(log, pre)[0]
    pre.commit(_mark(log, first, [1]), operation="DELETE")  # the emptied input has a vector already
    t = log.start_transaction()
    files = [f for f in _files(log, t) if f.partition_values in ({}, {"p": "0"})]
    a = files[0]
    t_actions = _compact(log, files)
    w = log.start_transaction()
    w.commit([a.remove()], operation="DELETE")
    assert _optimize(t, t_actions) == 3 and t.committed is not None and not t.committed.work_already_done
    final = DeltaLog(log.table_path).read_commit(3).actions
    assert a.path not in {x.path for x in final if isinstance(x, RemoveFile)}
    (g,) = [x for x in final if isinstance(x, AddFile)]
    assert g.deletion_vector is not None and g.deletion_vector.cardinality == 3  # ids 0, 2, 3
    assert _metrics(log, 3) == {"numAddedFiles": "1", "numRemovedFiles": str(len(files) - 1)}
    assert _live_ids(log) == list(range(4, 9))


def test_compaction_after_a_copy_on_write_rewrite_of_an_input(tmp_path: Path) -> None:
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4]])
    t = log.start_transaction()
    a, b = _files(log, t)
    t_actions = _compact(log, [a, b])
    w = log.start_transaction()  # UPDATE id = 1 without vectors: A rewritten as A'
    w.commit([a.remove(), _write(log.table_path, [0, 100, 2], None)], operation="UPDATE")
    _optimize(t, t_actions)
    assert _live_ids(log) == [0, 2, 3, 4, 100]


def test_compaction_after_earlier_marks_then_emptying(tmp_path: Path) -> None:
    """W1 marks a row of A (carried into our output), W2 removes the rest of A."""
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4]])
    t = log.start_transaction()
    a, b = _files(log, t)
    t_actions = _compact(log, [a, b])
    w1 = log.start_transaction()
    w1.commit(_mark(log, a, [0]), operation="DELETE")
    w2 = log.start_transaction()
    w2.commit([_current(log, a).remove()], operation="DELETE")
    assert _optimize(t, t_actions) == 3
    assert _live_ids(log) == [3, 4]


def test_compaction_of_only_emptied_inputs_finds_its_work_done(tmp_path: Path) -> None:
    """Like REORG of one file whose every row a concurrent DELETE removed."""
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4]])
    t = log.start_transaction()
    a, b = _files(log, t)
    t_actions = _compact(log, [a])
    w = log.start_transaction()
    w.commit([a.remove()], operation="DELETE")
    assert _optimize(t, t_actions) == 1 and t.committed is not None and t.committed.work_already_done
    assert _live_ids(log) == [3, 4]


def test_output_left_without_live_rows_is_dropped(tmp_path: Path) -> None:
    """Both inputs emptied, one of them only after a row mark: the output goes, nothing is left."""
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4]])
    t = log.start_transaction()
    a, b = _files(log, t)
    t_actions = _compact(log, [a, b])
    w1 = log.start_transaction()
    w1.commit(_mark(log, b, [1]), operation="DELETE")
    w2 = log.start_transaction()
    w2.commit([a.remove()], operation="DELETE")
    w3 = log.start_transaction()
    w3.commit([_current(log, b).remove()], operation="DELETE")
    assert _optimize(t, t_actions) == 3 and t.committed is not None and t.committed.work_already_done
    assert _live_ids(log) == []


# -- C (ii): a DML that empties a file loses to a compaction of it ------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_delete_of_every_row_of_a_compacted_file(tmp_path: Path, level: str, partitioned: bool) -> None:
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4], [5, 6]], partitioned=partitioned, level=level)
    pre = log.start_transaction()
    pre.commit(_mark(log, _files(log, pre)[0], [2]), operation="DELETE")
    t = log.start_transaction()
    a = t.filter_files(["id IN (0, 1)"])[0]  # DELETE WHERE id IN (0, 1): every live row of A
    w = log.start_transaction()
    files = [f for f in _files(log, w) if f.partition_values in ({}, {"p": "0"})]
    w.commit(_compact(log, files), operation="OPTIMIZE")
    assert t.commit([a.remove()], operation="DELETE") == 3
    final = DeltaLog(log.table_path).read_commit(3).actions
    (g,) = [x for x in final if isinstance(x, AddFile)]
    assert g.data_change and g.deletion_vector is not None and g.deletion_vector.cardinality == 2
    assert [x.path for x in final if isinstance(x, RemoveFile)] == [g.path]
    assert _live_ids(log) == [3, 4, 5, 6]


def test_delete_emptying_one_input_and_marking_another_of_one_output(tmp_path: Path) -> None:
    """Both carried into the one compacted file: one remove(G) and one add(G) with both marks."""
    log, _ = _table(tmp_path, [[0, 1], [2, 3, 4]])
    t = log.start_transaction()
    a, b = sorted(t.filter_files(["id IN (0, 1, 3)"]), key=lambda f: _ids_of(log, f)[0])
    t_actions = [a.remove(), *_mark(log, b, [1])]
    w = log.start_transaction()
    w.commit(_compact(log, [a, b]), operation="OPTIMIZE")
    assert t.commit(t_actions, operation="DELETE") == 2
    final = DeltaLog(log.table_path).read_commit(2).actions
    assert len([x for x in final if isinstance(x, AddFile)]) == 1
    assert len([x for x in final if isinstance(x, RemoveFile)]) == 1
    assert _live_ids(log) == [2, 4]


def test_delete_emptying_every_input_removes_the_compacted_file(tmp_path: Path) -> None:
    log, _ = _table(tmp_path, [[0, 1], [2, 3], [4]])
    t = log.start_transaction()
    a, b = sorted(t.filter_files(["id < 4"]), key=lambda f: _ids_of(log, f)[0])
    w = log.start_transaction()
    w.commit(_compact(log, [a, b]), operation="OPTIMIZE")
    assert t.commit([a.remove(), b.remove()], operation="DELETE") == 2
    final = DeltaLog(log.table_path).read_commit(2).actions
    assert not [x for x in final if isinstance(x, AddFile)]
    assert _live_ids(log) == [4]


def test_delete_emptying_a_file_of_an_untagged_compaction(tmp_path: Path) -> None:
    """Every row of A is found by content in the sorted output and marked deleted there."""
    log, _ = _table(tmp_path, [[0, 1], [2, 3]])
    t = log.start_transaction()
    a = t.filter_files(["id < 2"])[0]
    w = log.start_transaction()
    w.commit(_compact(log, _files(log, w), tag=False), operation="OPTIMIZE")  # ids 3 2 1 0
    assert t.commit([a.remove()], operation="DELETE") == 2
    final = DeltaLog(log.table_path).read_commit(2).actions
    (g,) = [x for x in final if isinstance(x, AddFile)]
    assert [x.path for x in final if isinstance(x, RemoveFile)] == [g.path]
    assert g.data_change and g.deletion_vector is not None
    assert sorted(read_deletion_vector(log.table_path, g.deletion_vector)) == [2, 3]
    assert _live_ids(log) == [2, 3]


def test_delete_of_an_untagged_compaction_beyond_the_size_bound_conflicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(row_matching, "MAX_MATCH_BYTES", 1)
    log, _ = _table(tmp_path, [[0, 1], [2, 3]])
    t = log.start_transaction()
    a = t.filter_files(["id < 2"])[0]
    w = log.start_transaction()
    w.commit(_compact(log, _files(log, w), tag=False), operation="OPTIMIZE")
    with pytest.raises(ConcurrentDeleteDeleteException):
        t.commit([a.remove()], operation="DELETE")
    assert _live_ids(log) == [0, 1, 2, 3]


def test_delete_marking_rows_of_two_inputs_of_one_output(tmp_path: Path) -> None:
    """Marks in two files compacted into one G: one remove(G) and one add(G) holding both."""
    log, _ = _table(tmp_path, [[0, 1], [2, 3, 4]])
    t = log.start_transaction()
    a, b = sorted(t.filter_files(["id IN (1, 3)"]), key=lambda f: _ids_of(log, f)[0])
    t_actions = [*_mark(log, a, [1]), *_mark(log, b, [1])]
    w = log.start_transaction()
    w.commit(_compact(log, [a, b]), operation="OPTIMIZE")
    assert t.commit(t_actions, operation="DELETE") == 2
    final = DeltaLog(log.table_path).read_commit(2).actions
    assert len([x for x in final if isinstance(x, AddFile)]) == 1
    assert len([x for x in final if isinstance(x, RemoveFile)]) == 1
    assert _live_ids(log) == [0, 2, 4]


# -- D: sorting compactions (no mapping) and DML, rows located by content ---------------------------


def _sort_compact(
    log: DeltaLog, files: Sequence[AddFile], outputs: int = 2, split: Sequence[Sequence[int]] | None = None
) -> list[Action]:
    """A sorting compaction of ``files`` (one partition): live rows in descending id order, dealt
    round-robin into ``outputs`` files (so each input is spread over several), or into the files of
    ids ``split``; no mapping."""
    ids = sorted((v for f in files for v in _ids_of(log, f)), reverse=True)
    groups = split or [ids[k::outputs] for k in range(outputs)]
    assert sorted(v for g in groups for v in g) == sorted(ids)
    p = (files[0].partition_values or {}).get("p")
    adds = [replace(_write(log.table_path, g, int(p) if p is not None else None), data_change=False) for g in groups]
    return [f.remove(data_change=False) for f in files] + adds


def _output_rows(log: DeltaLog, version: int) -> dict[str, tuple[list[int], list[int]]]:
    """Each add of ``version``: (its ids, its deleted rows)."""
    out = {}
    for a in DeltaLog(log.table_path).read_commit(version).actions:
        if isinstance(a, AddFile):
            ids = pq.read_table(os.path.join(log.table_path, a.path)).column("id").to_pylist()
            gone = sorted(read_deletion_vector(log.table_path, a.deletion_vector)) if a.deletion_vector else []
            out[a.path] = (ids, gone)
    return out


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("order", ["dml_loses", "compaction_loses"])
def test_marks_of_two_inputs_and_a_sorting_compaction(tmp_path: Path, order: str, level: str) -> None:
    """A DELETE of ids 1, 4 and 6 (in two inputs) and a sorting compaction of all three inputs into two
    outputs: the marks land on the rows holding those ids, in whichever outputs hold them."""
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4, 5], [6, 7]], level=level)
    t = log.start_transaction()
    a, b, c = _files(log, t)
    dml = [*_mark(log, a, [1]), *_mark(log, c, [0])]  # ids 1 and 6
    dml += _mark(log, b, [1])  # id 4
    opt = _sort_compact(log, [a, b, c])  # [7 5 3 1] and [6 4 2 0]
    w = log.start_transaction()
    if order == "dml_loses":
        w.commit(opt, operation="OPTIMIZE")
        assert t.commit(dml, operation="DELETE") == 2
        final = DeltaLog(log.table_path).read_commit(2).actions
        assert len([x for x in final if isinstance(x, RemoveFile)]) == 2  # one remove(G) + add(G) per output
        assert all(x.data_change for x in final if isinstance(x, (AddFile, RemoveFile)))
    else:
        w.commit(dml, operation="DELETE")
        assert _optimize(t, opt) == 2
        final = DeltaLog(log.table_path).read_commit(2).actions
        removed = {x.path: x for x in final if isinstance(x, RemoveFile)}
        assert set(removed) == {a.path, b.path, c.path} and not any(x.data_change for x in removed.values())
        current = {f.path: f.dv_id for f in DeltaLog(log.table_path).read_commit(1).actions if isinstance(f, AddFile)}
        assert {p: r.dv_id for p, r in removed.items()} == current  # removed as the DELETE left them
    marked = {v for ids, gone in _output_rows(log, 2).values() for i, v in enumerate(ids) if i in gone}
    assert marked == {1, 4, 6}
    assert _live_ids(log) == [0, 2, 3, 5, 7]


@pytest.mark.parametrize("order", ["dml_loses", "compaction_loses"])
def test_identical_rows_in_two_inputs_lose_one_copy(tmp_path: Path, order: str) -> None:
    """Ids 2 and 2 in A and B (identical rows): a DML deleting A's copy deletes exactly one copy."""
    log, _ = _table(tmp_path, [[0, 1, 2], [2, 3]])
    t = log.start_transaction()
    a, b = _files(log, t)
    dml = _mark(log, a, [2])
    opt = _sort_compact(log, [a, b], outputs=1)  # 3 2 2 1 0
    w = log.start_transaction()
    if order == "dml_loses":
        w.commit(opt, operation="OPTIMIZE")
        assert t.commit(dml, operation="DELETE") == 2
    else:
        w.commit(dml, operation="DELETE")
        assert _optimize(t, opt) == 2
    ((ids, gone),) = [x for x in _output_rows(log, 2).values() if x[1]]
    assert ids == [3, 2, 2, 1, 0] and gone == [1]  # the lowest free equal row
    assert _live_ids(log) == [0, 1, 2, 3]


def test_sorting_compaction_after_a_delete_of_every_row_of_an_input(tmp_path: Path) -> None:
    log, _ = _table(tmp_path, [[0, 1, 2], [3, 4], [5, 6]])
    t = log.start_transaction()
    a, b, c = _files(log, t)
    opt = _sort_compact(log, [a, b, c])  # [6 4 2 0] and [5 3 1]: A's rows in both
    w = log.start_transaction()
    w.commit([a.remove()], operation="DELETE")
    assert _optimize(t, opt) == 2
    final = DeltaLog(log.table_path).read_commit(2).actions
    assert a.path not in {x.path for x in final if isinstance(x, RemoveFile)}  # the DELETE removed it
    assert _metrics(log, 2) == {"numAddedFiles": "2", "numRemovedFiles": "2"}
    assert _live_ids(log) == [3, 4, 5, 6]


def test_sorting_compaction_with_an_output_of_only_emptied_rows_drops_it(tmp_path: Path) -> None:
    """The DELETE emptied A and B: the output holding only their rows goes; C's output stays."""
    log, _ = _table(tmp_path, [[0, 2], [4, 6], [1, 3]])
    t = log.start_transaction()
    first = {_ids_of(log, f)[0]: f for f in _files(log, t)}
    a, b, c = first[0], first[4], first[1]
    opt = _sort_compact(log, [a, b, c], split=[[6, 4, 2, 0], [3, 1]])  # A and B, then C
    w = log.start_transaction()
    w.commit([a.remove(), b.remove()], operation="DELETE")
    assert _optimize(t, opt) == 2
    final = DeltaLog(log.table_path).read_commit(2).actions
    assert [x.path for x in final if isinstance(x, RemoveFile)] == [c.path]
    (g,) = [x for x in final if isinstance(x, AddFile)]
    assert g.deletion_vector is None and _ids_of(log, g) == [3, 1]
    assert _metrics(log, 2) == {"numAddedFiles": "1", "numRemovedFiles": "1"}
    assert _live_ids(log) == [1, 3]
