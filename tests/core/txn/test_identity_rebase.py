"""Identity values re-based over a concurrent allocation: the shift, and commits through the core (no Spark)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.model import identity
from serialake.core.model.actions import AddFile, Metadata
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import DeltaAnalysisException, MetadataChangedException


def col(start: int, step: int, mark: int | None = None) -> identity.IdentityColumn:
    return identity.IdentityColumn("id", start, step, mark, False)


@pytest.mark.parametrize(
    ("start", "step", "first", "last", "mark", "shift"),
    [
        (1, 1, 1, 5, 3, 3),  # past 3: 4..8
        (1, 1, 1, 5, 5, 5),
        (5, 3, 8, 20, 17, 12),  # 20..32, still 5 + 3k
        (5, 3, 8, 20, 18, 12),
        (5, 3, 8, 20, 19, 12),
        (5, 3, 8, 20, 20, 15),
        (-10, -7, -17, -45, -31, -21),  # negative step: below -31, still -10 - 7k
        (-10, -7, -17, -45, -32, -21),
        (-10, -7, -17, -45, -38, -28),
        (1, 1, 10, 20, 3, 0),  # already past the mark
        (10, -5, 5, -5, 7, 0),
    ],
)
def test_shift_is_the_smallest_multiple_of_the_step_past_the_mark(
    start: int, step: int, first: int, last: int, mark: int, shift: int
) -> None:
    c = col(start, step)
    got = identity.rebase_shift(c, first, last, mark, table="t")
    assert got == shift
    assert got % step == 0 and got * step >= 0  # a multiple of the step, in its direction
    assert c.is_past(first + got, mark)
    assert ((first + got) - start) % step == (first - start) % step
    if got:
        assert not c.is_past(first + got - step, mark)  # and the smallest one


def test_shift_past_the_bigint_range_names_table_and_column() -> None:
    top, bottom = identity.LONG_MAX, identity.LONG_MIN
    assert identity.rebase_shift(col(1, 1), top - 3, top - 2, top - 2, table="/x/t") == 2  # just fits
    with pytest.raises(DeltaAnalysisException, match=r"Identity column 'id' of table /x/t.*overflow BIGINT"):
        identity.rebase_shift(col(1, 1), top - 3, top - 1, top - 1, table="/x/t")
    with pytest.raises(DeltaAnalysisException, match="overflow BIGINT"):
        identity.rebase_shift(col(-1, -1), bottom + 3, bottom + 1, bottom + 1, table="/x/t")


def test_next_base_stays_aligned_with_start() -> None:
    assert col(5, 3, None).next_base == 5
    assert col(5, 3, 11).next_base == 14
    assert col(5, 3, 12).next_base == 14  # a mark off the grid (a given value): the next aligned one
    assert col(-10, -7, -20).next_base == -24
    assert col(5, 3, 0).next_base == 5


# -- commits through the core: two allocations from one mark ------------------------------------

def _schema(step: int = 1, start: int = 1, mark: int | None = None, by_default: bool = False,
            physical: str | None = None) -> str:  # fmt: skip
    meta: dict[str, object] = {identity.START: start, identity.STEP: step, identity.ALLOW_EXPLICIT_INSERT: by_default}
    if mark is not None:
        meta[identity.HIGH_WATER_MARK] = mark
    if physical:
        meta["delta.columnMapping.id"] = 1
        meta["delta.columnMapping.physicalName"] = physical
    v_meta = {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-v"} if physical else {}
    return json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": meta},
        {"name": "v", "type": "string", "nullable": True, "metadata": v_meta},
    ]})  # fmt: skip


def _table(tmp_path: Path, **kw: object) -> DeltaLog:
    log = DeltaLog(str(tmp_path / "t"))
    txn = log.start_transaction()
    conf = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"} if kw.get("physical") else {}
    txn.update_metadata(Metadata(schema_string=_schema(**kw), configuration=conf))  # type: ignore[arg-type]
    txn.commit([], operation="CREATE TABLE")
    return log


def _allocate(log: DeltaLog, txn: OptimisticTransaction, ids: list[int], *, explicit: bool = False) -> AddFile:
    """Write a file of ``ids`` and raise the mark as a generating write does (declared)."""
    snap = txn.snapshot
    assert snap is not None
    c = identity.identity_columns(snap.schema)[0]
    field = snap.schema.fields[0]
    name = field.metadata.get("delta.columnMapping.physicalName", "id")
    path = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(pa.table({name: pa.array(ids, pa.int64()), "v": pa.array([str(i) for i in ids])}),
                   os.path.join(log.table_path, path))  # fmt: skip
    mark = c.raised(min(ids), max(ids))
    assert mark is not None
    schema = identity.with_high_water_marks(snap.schema, {"id": mark})
    meta = snap.metadata
    txn.update_metadata(Metadata(schema_string=schema.to_json(), partition_columns=meta.partition_columns,
                                 configuration=dict(meta.configuration), id=meta.id, created_time=meta.created_time))
    first, last = (ids[0], ids[-1])
    txn.record_identity_allocation(identity.Allocation("id", None if explicit else first,
                                                       None if explicit else last, explicit_past=explicit))
    stats = json.dumps({"numRecords": len(ids), "minValues": {name: min(ids)}, "maxValues": {name: max(ids)},
                        "nullCount": {name: 0}})  # fmt: skip
    return AddFile(path=path, size=1, modification_time=0, stats=stats, partition_values={})


def _ids(log: DeltaLog) -> list[int]:
    snap = log.update()
    name = snap.schema.fields[0].metadata.get("delta.columnMapping.physicalName", "id")
    out: list[int] = []
    for f in snap.all_files:
        out += pq.read_table(os.path.join(log.table_path, f.path)).column(name).to_pylist()
        stats = f.parsed_stats() or {}
        got = pq.read_table(os.path.join(log.table_path, f.path)).column(name).to_pylist()
        assert stats["minValues"][name] == min(got) and stats["maxValues"][name] == max(got)
    return sorted(out)


@pytest.mark.parametrize(("start", "step", "physical"), [(5, 3, None), (-10, -7, None), (1, 1, "col-id")])
def test_the_second_allocation_is_rebased_past_the_first(
    tmp_path: Path, start: int, step: int, physical: str | None
) -> None:
    log = _table(tmp_path, start=start, step=step, physical=physical)
    gen = [start + step * k for k in range(4)]
    t, w = log.start_transaction(), log.start_transaction()
    t_add = _allocate(log, t, gen)
    w_add = _allocate(log, w, gen[:3])
    w.commit([w_add], "WRITE")
    t.commit([t_add], "WRITE")
    ids = _ids(log)
    assert len(ids) == 7 and len(set(ids)) == 7
    assert all((i - start) % step == 0 for i in ids)
    mark = identity.identity_columns(log.update().schema)[0].high_water_mark
    assert mark == (max(ids) if step > 0 else min(ids))
    assert mark == start + step * 6  # the loser's values moved by 3 steps, right past the winner's mark
    # The loser's unpublished original stays for its writer's clean-up; no rewritten copy is left over.
    assert t.committed_actions is not None
    assert len([a for a in t.committed_actions if isinstance(a, AddFile)]) == 1


def test_an_explicit_value_past_the_mark_still_conflicts(tmp_path: Path) -> None:
    log = _table(tmp_path, by_default=True, mark=3)
    t, w = log.start_transaction(), log.start_transaction()
    t_add = _allocate(log, t, [4, 1000], explicit=True)
    w.commit([_allocate(log, w, [4, 5])], "WRITE")
    with pytest.raises(MetadataChangedException, match="given explicitly"):
        t.commit([t_add], "WRITE")


def test_a_winner_changing_more_than_marks_still_conflicts(tmp_path: Path) -> None:
    log = _table(tmp_path)
    t, w = log.start_transaction(), log.start_transaction()
    t_add = _allocate(log, t, [1, 2])
    meta = log.update().metadata
    w.update_metadata(meta.with_configuration(**{"delta.appendOnly": "true"}))
    w.commit([], "SET TBLPROPERTIES")
    with pytest.raises(MetadataChangedException):
        t.commit([t_add], "WRITE")


def test_a_winner_allocating_does_not_fail_a_writer_that_changes_no_metadata(tmp_path: Path) -> None:
    log = _table(tmp_path)
    t, w = log.start_transaction(), log.start_transaction()
    w.commit([_allocate(log, w, [1, 2])], "WRITE")
    t.commit([AddFile(path=f"{uuid.uuid4()}.parquet", size=1, modification_time=0, partition_values={})], "WRITE")
    assert identity.identity_columns(log.update().schema)[0].high_water_mark == 2


def test_shift_overflow_is_a_conflict_naming_the_column(tmp_path: Path) -> None:
    top = identity.LONG_MAX - 1
    log = _table(tmp_path, mark=top - 2)
    t, w = log.start_transaction(), log.start_transaction()
    t_add = _allocate(log, t, [top - 1, top])
    w.commit([_allocate(log, w, [top - 1, top])], "WRITE")
    with pytest.raises(MetadataChangedException, match="Identity column 'id'.*overflow BIGINT"):
        t.commit([t_add], "WRITE")


def test_files_that_cannot_be_rewritten_are_a_conflict_saying_why(tmp_path: Path) -> None:
    """The rebase was decided, rewriting our file failed (it is gone): ``MetadataChangedException``, as before."""
    from serialake.exceptions import ConflictReason

    log = _table(tmp_path)
    t, w = log.start_transaction(), log.start_transaction()
    t_add = _allocate(log, t, [1, 2])
    w_add = _allocate(log, w, [1, 2])
    w.commit([w_add], "WRITE")
    os.remove(os.path.join(log.table_path, t_add.path))
    with pytest.raises(MetadataChangedException, match="Re-basing this write's identity values failed") as e:
        t.commit([t_add], "WRITE")
    assert e.value.conflict_reason is ConflictReason.BOTH_CHANGE_METADATA
    assert "The table metadata was changed by a concurrent commit (schema)." in str(e.value)
    assert e.value.__context__ is None  # raised as the rule raised it, not while handling the OSError
    assert [n for n in os.listdir(log.table_path) if n.endswith(".parquet")] == [w_add.path]  # none of ours left
