"""Reads made outside a transaction (``record_read`` at a version, ``record_table_read``)."""

from __future__ import annotations

import pytest

from serialake.core.txn.transaction import READ_TABLES_KEY
from serialake.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException, MetadataChangedException
from tests.core.conftest import add_file


def _append(log, p):
    txn = log.start_transaction()
    return txn.commit([add_file(p)], operation="WRITE")


def test_read_at_older_version_is_checked_from_there(make_table):
    """A read at v0, an append into the read partition at v1, the transaction starts at v1: conflict."""
    log = make_table(level="Serializable")
    _append(log, 1)  # v1: lands after the read (v0), before the transaction starts
    txn = log.start_transaction()
    assert txn.read_version == 1
    txn.record_read(["p = 1"], version=0)
    with pytest.raises(ConcurrentAppendException) as e:
        txn.commit([add_file(2)], operation="WRITE")
    assert e.value.winning_version == 1 and e.value.read_version == 0


def test_read_at_older_version_other_partition_commits(make_table):
    log = make_table(level="Serializable")
    _append(log, 3)
    txn = log.start_transaction()
    txn.record_read(["p = 1"], version=0)
    assert txn.commit([add_file(2)], operation="WRITE") == 2
    ci = log.read_commit(2).commit_info
    assert ci is not None and ci.is_blind_append is False


def test_read_at_older_version_sees_deletes_and_metadata(make_table):
    log = make_table(level="WriteSerializable")
    victim = next(f for f in log.update().all_files if f.partition_values == {"p": "1"})
    log.start_transaction().commit([victim.remove()], operation="DELETE")  # v1 removes a file read at v0
    txn = log.start_transaction()
    txn.record_read(["p = 1"], version=0)
    with pytest.raises(ConcurrentDeleteReadException):
        txn.commit([add_file(2)], operation="WRITE")

    log2 = make_table()
    meta = log2.update().metadata
    from dataclasses import replace

    t = log2.start_transaction()
    t.update_metadata(replace(meta, configuration={"delta.appendOnly": "true"}))
    t.commit([], operation="SET TBLPROPERTIES")
    txn = log2.start_transaction()
    txn.record_read(["p = 2"], version=0)
    with pytest.raises(MetadataChangedException):
        txn.commit([add_file(2)], operation="WRITE")


def test_read_at_current_or_newer_version_is_filter_files(make_table):
    log = make_table(level="Serializable")
    txn = log.start_transaction()
    files = txn.record_read(["p = 1"], version=5)
    assert [f.partition_values for f in files] == [{"p": "1"}]
    assert not txn.history_reads and txn.read_predicates


def test_other_tables_are_versions_in_commit_info(make_table):
    log = make_table()
    txn = log.start_transaction()
    txn.record_table_read("/data/other", 7)
    txn.record_table_read("/data/other", 3)
    version = txn.commit([add_file(1)], operation="WRITE")
    ci = log.read_commit(version).commit_info
    assert ci is not None and ci.is_blind_append is True
    assert ci.values[READ_TABLES_KEY] == [
        {"table": "/data/other", "version": 3},
        {"table": "/data/other", "version": 7},
    ]
