"""Every scenario of conflict-matrix.md sections 1-3, through the core transaction API.

T starts first (the loser), W commits between T's start and T's commit.
"""

from __future__ import annotations

import pytest

from serialake.core.model.actions import Metadata, Protocol, SetTransaction
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from tests.core.conftest import SCHEMA, add_file

LEVELS = ["Serializable", "WriteSerializable"]


def _file_in(log, p):
    return next(f for f in log.update().all_files if (f.partition_values or {}).get("p") == str(p))


@pytest.mark.parametrize("level", LEVELS)
def test_1_blind_append_vs_blind_append(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    log.start_transaction().commit([add_file(1)])
    assert t.commit([add_file(1)]) == 2


@pytest.mark.parametrize("level", LEVELS)
def test_2_blind_append_vs_rewrite(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    w = log.start_transaction()
    a = w.filter_files(["p = 1"])[0]
    w.commit([a.remove(), add_file(1)], operation="UPDATE")
    assert t.commit([add_file(1)]) == 2


def test_3_serializable_whole_table_read_vs_blind_append(make_table):
    log = make_table(level="Serializable")
    t = log.start_transaction()
    t.read_whole_table()
    log.start_transaction().commit([add_file(1)])
    with pytest.raises(ConcurrentAppendException) as e:
        t.commit([add_file(2)])
    assert e.value.winning_version == 1 and e.value.read_version == 0


def test_4_write_serializable_whole_table_read_vs_blind_append(make_table):
    log = make_table(level="WriteSerializable")
    t = log.start_transaction()
    a = t.read_whole_table()[0]
    log.start_transaction().commit([add_file(1)])
    assert t.commit([a.remove(), add_file(2)]) == 2


@pytest.mark.parametrize("level", LEVELS)
def test_5_whole_table_read_vs_non_blind_add(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    a = t.read_whole_table()[0]
    w = log.start_transaction()
    b = w.filter_files(["p = 3"])[0]
    w.commit([b.remove(), add_file(3)], operation="UPDATE")
    with pytest.raises(ConcurrentAppendException) as e:
        t.commit([a.remove(), add_file(2)])
    assert e.value.winning_operation == "UPDATE"
    assert e.value.partition == {"p": "3"}


@pytest.mark.parametrize("level", LEVELS)
def test_6_metadata_change_fails_blind_append(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    w = log.start_transaction()
    w.update_metadata(w.metadata.with_configuration(**{"delta.appendOnly": "false"}))
    w.commit([], operation="SET TBLPROPERTIES")
    with pytest.raises(MetadataChangedException) as e:
        t.commit([add_file(1)])
    assert "delta.appendOnly" in str(e.value)


@pytest.mark.parametrize("level", LEVELS)
def test_7_disjoint_partitions_commit(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    a = t.filter_files(["p = 3"])[0]
    w = log.start_transaction()
    w.filter_files(["p = 1"])
    w.commit([add_file(1)], operation="MERGE")
    assert t.commit([add_file(2), a.remove()]) == 2


def test_8_serializable_append_into_read_partition(make_table):
    log = make_table(level="Serializable")
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    log.start_transaction().commit([add_file(1)])
    with pytest.raises(ConcurrentAppendException) as e:
        t.commit([add_file(2)])
    assert e.value.partition == {"p": "1"}


def test_8b_write_serializable_blind_append_into_read_partition_commits(make_table):
    log = make_table(level="WriteSerializable")
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    log.start_transaction().commit([add_file(1)])
    assert t.commit([add_file(2)]) == 2


def test_9_serializable_range_predicate_matching_no_file(make_table):
    log = make_table(level="Serializable", files=[1])
    t = log.start_transaction()
    assert t.filter_files(["p >= 2"]) == []
    log.start_transaction().commit([add_file(3)])
    with pytest.raises(ConcurrentAppendException):
        t.commit([add_file(2)])


def test_9b_integer_cast_semantics(make_table):
    """p > 5 must match p = 10 for an integer column (not a string comparison)."""
    log = make_table(level="Serializable", files=[1])
    t = log.start_transaction()
    t.filter_files(["p > 5"])
    log.start_transaction().commit([add_file(10)])
    with pytest.raises(ConcurrentAppendException):
        t.commit([add_file(2)])


def test_9c_range_predicate_disjoint(make_table):
    log = make_table(level="Serializable", files=[1])
    t = log.start_transaction()
    t.filter_files(["p > 5"])
    log.start_transaction().commit([add_file(3)])
    assert t.commit([add_file(2)]) == 2


def test_10_data_column_disjunct_widens_read(make_table):
    log = make_table(level="Serializable")
    t = log.start_transaction()
    a = t.filter_files(["p = 1 OR x > 5"])
    log.start_transaction().commit([add_file(2)])
    with pytest.raises(ConcurrentAppendException):
        t.commit([f.remove() for f in a if f.partition_values["p"] == "1"])


def test_10b_data_column_conjunct_keeps_partition_filter(make_table):
    log = make_table(level="Serializable")
    t = log.start_transaction()
    t.filter_files(["p = 1 AND x > 5"])
    log.start_transaction().commit([add_file(2)])
    assert t.commit([add_file(1)]) == 2


@pytest.mark.parametrize("level", LEVELS)
def test_11_read_file_removed(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    a = t.filter_files(["p = 1"])[0]
    w = log.start_transaction()
    w.filter_files(["p = 1"])
    w.commit([a.remove()], operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException) as e:
        t.commit([add_file(2)])
    assert e.value.file == a.path
    assert e.value.winning_operation == "DELETE"


@pytest.mark.parametrize("level", LEVELS)
def test_11b_read_file_removed_commit_nothing(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    a = t.filter_files(["p = 1"])[0]
    log.start_transaction().commit([a.remove()], operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        t.commit([])


@pytest.mark.parametrize("level", LEVELS)
def test_12_remove_in_other_partition(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    w = log.start_transaction()
    b = w.filter_files(["p = 2"])[0]
    w.commit([b.remove()], operation="DELETE")
    assert t.commit([add_file(1)]) == 2


@pytest.mark.parametrize("level", LEVELS)
def test_13_both_remove_read_file(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    a = t.filter_files(["p = 1"])[0]
    w = log.start_transaction()
    w.filter_files(["p = 1"])
    w.commit([a.remove()], operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        t.commit([a.remove()])


@pytest.mark.parametrize("level", LEVELS)
def test_14_optimize_vs_delete(make_table, level):
    log = make_table(level=level, files=[1, 1])
    snap = log.update()
    inputs = [f for f in snap.all_files]
    t = log.start_transaction()  # OPTIMIZE: reads nothing, removes its inputs
    w = log.start_transaction()
    w.filter_files(["p = 1"])
    w.commit([inputs[0].remove()], operation="DELETE")
    with pytest.raises(ConcurrentDeleteDeleteException) as e:
        t.commit([f.remove(data_change=False) for f in inputs] + [add_file(1, data_change=False)],
                 operation="OPTIMIZE")
    assert e.value.file == inputs[0].path


@pytest.mark.parametrize("level", LEVELS)
def test_15_update_vs_optimize(make_table, level):
    log = make_table(level=level, files=[1, 1])
    t = log.start_transaction()
    a = t.filter_files(["p = 1"])[0]
    snap = log.update()
    w = log.start_transaction()
    w.commit([f.remove(data_change=False) for f in snap.all_files] + [add_file(1, data_change=False)],
             operation="OPTIMIZE")
    with pytest.raises(ConcurrentDeleteDeleteException):
        t.commit([a.remove(), add_file(1)], operation="UPDATE")


@pytest.mark.parametrize("level", LEVELS)
def test_15b_insert_select_vs_optimize_commits(make_table, level):
    log = make_table(level=level, files=[1, 1])
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    snap = log.update()
    log.start_transaction().commit(
        [f.remove(data_change=False) for f in snap.all_files] + [add_file(1, data_change=False)],
        operation="OPTIMIZE",
    )
    assert t.commit([add_file(1)], operation="WRITE") == 2


@pytest.mark.parametrize("level", LEVELS)
def test_16_optimize_vs_blind_append(make_table, level):
    log = make_table(level=level, files=[1, 1])
    inputs = log.update().all_files
    t = log.start_transaction()
    log.start_transaction().commit([add_file(1)])
    v = t.commit([f.remove(data_change=False) for f in inputs] + [add_file(1, data_change=False)],
                 operation="OPTIMIZE")
    assert v == 2
    assert len(log.update().all_files) == 2  # compacted file + the concurrent append
    ci = log.read_commit(2).commit_info
    assert ci.get("isolationLevel") == "SnapshotIsolation"


@pytest.mark.parametrize("level", LEVELS)
def test_17_same_app_id(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    assert t.txn_version("app1") is None
    w = log.start_transaction()
    w.txn_version("app1")
    w.commit([add_file(1), SetTransaction("app1", 5)])
    with pytest.raises(ConcurrentTransactionException) as e:
        t.commit([add_file(1), SetTransaction("app1", 5)])
    assert "app1" in str(e.value)


@pytest.mark.parametrize("level", LEVELS)
def test_18_different_app_ids(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    t.txn_version("app1")
    w = log.start_transaction()
    w.txn_version("app2")
    w.commit([add_file(1), SetTransaction("app2", 1)])
    assert t.commit([add_file(1), SetTransaction("app1", 1)]) == 2
    assert log.update().txn_version("app1") == 1


def test_19_concurrent_protocol_upgrades(make_table):
    log = make_table()
    t = log.start_transaction()
    w = log.start_transaction()
    w.update_protocol(Protocol(1, 3))
    w.commit([], operation="UPGRADE PROTOCOL")
    t.update_protocol(Protocol(1, 4))
    with pytest.raises(ProtocolChangedException):
        t.commit([], operation="UPGRADE PROTOCOL")


def test_19b_protocol_upgrade_adopted_by_blind_append(make_table):
    log = make_table()
    t = log.start_transaction()
    w = log.start_transaction()
    w.update_protocol(Protocol(1, 3))
    w.commit([], operation="UPGRADE PROTOCOL")
    assert t.commit([add_file(1)]) == 2


def test_20_concurrent_create(tmp_path):
    from serialake.core import DeltaLog

    path = str(tmp_path / "new")
    t = DeltaLog(path).start_transaction()
    w = DeltaLog(path).start_transaction()
    for txn in (t, w):
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",)))
    w.commit([add_file(1)], operation="CREATE TABLE")
    with pytest.raises(ProtocolChangedException) as e:
        t.commit([add_file(2)], operation="CREATE TABLE")
    assert "created concurrently" in str(e.value)


def test_21_partitioned_update_and_delete_on_disjoint_ranges(make_table):
    log = make_table(level="Serializable", files=[1, 2, 8, 9])
    t = log.start_transaction()  # DELETE WHERE p < 5
    t_files = t.filter_files(["p < 5"])
    w = log.start_transaction()  # UPDATE WHERE p > 5
    w_files = w.filter_files(["p > 5"])
    w.commit([f.remove() for f in w_files] + [add_file(8), add_file(9)], operation="UPDATE")
    assert t.commit([f.remove() for f in t_files], operation="DELETE") == 2


@pytest.mark.parametrize("level", LEVELS)
def test_22_unpartitioned_update_and_delete_conflict(make_table, level):
    log = make_table(partitioned=False, level=level, files=[None])
    t = log.start_transaction()  # DELETE WHERE x < 5: reads every file
    t_files = t.filter_files(["x < 5"])
    w = log.start_transaction()  # UPDATE WHERE x > 5 rewrites the shared file
    w_files = w.filter_files(["x > 5"])
    w.commit([f.remove() for f in w_files] + [add_file(None)], operation="UPDATE")
    with pytest.raises(ConcurrentAppendException) as e:
        t.commit([f.remove() for f in t_files], operation="DELETE")
    assert "not partitioned" in e.value.help


@pytest.mark.parametrize("level", LEVELS)
def test_23_merges_with_explicit_partition_conditions(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    t_files = t.filter_files(["p = 1"])
    w = log.start_transaction()
    w_files = w.filter_files(["p = 2"])
    w.commit([f.remove() for f in w_files] + [add_file(2)], operation="MERGE")
    assert t.commit([f.remove() for f in t_files] + [add_file(1)], operation="MERGE") == 2


@pytest.mark.parametrize("level", LEVELS)
def test_24_merge_with_implicit_condition_reads_whole_table(make_table, level):
    log = make_table(level=level)
    t = log.start_transaction()
    t_files = t.filter_files([])  # s.date = t.date only: no partition filter can be extracted
    w = log.start_transaction()
    w_files = w.filter_files(["p = 2"])
    w.commit([f.remove() for f in w_files] + [add_file(2)], operation="MERGE")
    with pytest.raises(ConcurrentAppendException) as e:
        t.commit([f.remove() for f in t_files if f.partition_values["p"] == "1"] + [add_file(1)],
                 operation="MERGE")
    assert "explicit" in e.value.help


def test_all_exceptions_share_root():
    for exc in (ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException,
                MetadataChangedException, ProtocolChangedException, ConcurrentTransactionException):
        assert issubclass(exc, DeltaConcurrentModificationException)


def test_exception_message_names_table_version_and_help(make_table):
    log = make_table(level="Serializable")
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    log.start_transaction().commit([add_file(1)])
    with pytest.raises(ConcurrentAppendException) as e:
        t.commit([add_file(2)])
    msg = str(e.value)
    assert log.table_path in msg and "version 1" in msg and "p=1" in msg and "Help:" in msg
    assert "WriteSerializable" in msg  # blind-append winner under Serializable


def test_metadata_enable_deletion_vectors_allowed(make_table):
    log = make_table()
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    w = log.start_transaction()
    w.update_metadata(w.metadata.with_configuration(**{"delta.enableDeletionVectors": "true"}))
    w.commit([], operation="SET TBLPROPERTIES")
    assert t.commit([add_file(1)]) == 2
    snap = log.update()
    assert "deletionVectors" in (snap.protocol.reader_features or ())


def test_no_conflict_retries_over_many_winners(make_table):
    log = make_table(level="Serializable")
    t = log.start_transaction()
    t.filter_files(["p = 1"])
    for _ in range(30):
        log.start_transaction().commit([add_file(2)])
    assert t.commit([add_file(1)]) == 31
    assert t.committed.winners_checked == 30


# -- winners read lean ------------------------------------------------------------
def _count_add_builds(monkeypatch) -> list[int]:
    from serialake.core.model.actions import AddFile

    built = [0]
    original = AddFile._from_obj.__func__

    def counting(cls, obj):
        if cls is AddFile:
            built[0] += 1
        return original(cls, obj)

    monkeypatch.setattr(AddFile, "_from_obj", classmethod(counting))
    return built


def test_checking_winners_builds_no_object_per_file(make_table, monkeypatch):
    from serialake.core import DeltaLog

    log = make_table(level="Serializable")
    loser = log.start_transaction()
    loser.filter_files(["p = 7"])
    writer = DeltaLog(log.table_path)  # another process's view: the loser reads these commits from disk
    for c in range(5):
        writer.start_transaction().commit([add_file(c % 3) for _ in range(40)])
    built = _count_add_builds(monkeypatch)
    assert loser.commit([add_file(7)]) == 6 and loser.committed.winners_checked == 5
    assert built[0] == 0  # 200 adds in other partitions: read as their JSON, none built


def test_a_winner_add_a_rule_looks_at_is_built_alone_and_named(make_table, monkeypatch):
    from serialake.core import DeltaLog

    # Row-level resolution (deletion vectors on, unpartitioned): each add's stats are checked.
    log = make_table(partitioned=False, level="Serializable", props={"delta.enableDeletionVectors": "true"})
    loser = log.start_transaction()
    loser.filter_files(["x > 100"])
    writer = DeltaLog(log.table_path)
    hit = add_file(None, min={"x": 150}, max={"x": 160}, name="hit.parquet")
    writer.start_transaction().commit([add_file(None, min={"x": 1}, max={"x": 5}) for _ in range(30)] + [hit])
    built = _count_add_builds(monkeypatch)
    with pytest.raises(ConcurrentAppendException) as e:
        loser.commit([add_file(None)])
    assert e.value.file == "hit.parquet"
    assert built[0] == 31  # each add the read may cover, built to read its stats; none twice
