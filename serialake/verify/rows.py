"""The list-append workload with rows in real Parquet files and deletion vectors.

This is the row-level variant of :mod:`serialake.verify.workload`: the table is not
partitioned and has deletion vectors on, so row-level concurrency applies. Key ``x`` is
one live row ``(k='x', list='3 17 42', rv=<read version>)``; rows of many keys share
files. An append marks the key's current row deleted in its file's deletion vector and
writes the key's new row in a new file (one per transaction), exactly like an UPDATE with
deletion vectors. Two transactions appending to different keys of one file therefore
rebase over each other (vectors merged); the same key is the same row and conflicts.
A read returns every live row of the key (by read version), so a lost update shows.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from serialake.core.actions import AddFile, Metadata
from serialake.core.deletion_vectors import RowIndexSet, write_deletion_vector
from serialake.core.row_level import dv_rows
from serialake.core.log import DeltaLog
from serialake.storage.local import LocalLogStore
from serialake.verify.history import Mop

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "k", "type": "string", "nullable": True, "metadata": {}},
    {"name": "list", "type": "string", "nullable": True, "metadata": {}},
    {"name": "rv", "type": "long", "nullable": True, "metadata": {}},
]})


def write_rows(table: str, rows: list[tuple[str, str, int]]) -> AddFile:
    """A new data file holding ``rows`` (k, list, rv), fsynced, described as an AddFile."""
    name = f"part-{uuid.uuid4().hex}.parquet"
    path = os.path.join(table, name)
    data = pa.table({"k": [r[0] for r in rows], "list": [r[1] for r in rows],
                     "rv": pa.array([r[2] for r in rows], pa.int64())})
    pq.write_table(data, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    keys = [r[0] for r in rows]
    stats = {"numRecords": len(rows), "minValues": {"k": min(keys)}, "maxValues": {"k": max(keys)},
             "nullCount": {"k": 0, "list": 0, "rv": 0}}
    return AddFile(path=name, partition_values={}, size=os.path.getsize(path), modification_time=0,
                   data_change=True, stats=json.dumps(stats))


def create_table(path: str, isolation_level: str, keys: Sequence[str], checkpoint_interval: int = 10,
                 fsync: bool = True) -> DeltaLog:
    """The table, with every key's empty row in one shared file."""
    log = DeltaLog(path, store=LocalLogStore(fsync=fsync))
    txn = log.start_transaction()
    conf = {"delta.isolationLevel": isolation_level, "delta.checkpointInterval": str(checkpoint_interval),
            "delta.enableDeletionVectors": "true"}
    txn.update_metadata(Metadata(schema_string=SCHEMA, configuration=conf))
    os.makedirs(path, exist_ok=True)
    txn.commit([write_rows(path, [(k, "", -1) for k in keys])], operation="CREATE TABLE")
    return log


def _live_rows(table: str, f: AddFile, key: str) -> list[tuple[int, str, int]]:
    """``(row index, list, rv)`` of the live rows of ``key`` in file ``f``."""
    data = pq.read_table(os.path.join(table, f.path))
    gone = dv_rows(table, f.deletion_vector)
    ks, lists, rvs = data.column("k").to_pylist(), data.column("list").to_pylist(), data.column("rv").to_pylist()
    return [(i, lists[i], rvs[i]) for i in range(len(ks)) if ks[i] == key and i not in gone]


def file_lists(table: str, f: AddFile) -> list[str]:
    """Every ``list`` value in a data file (for auditing which transaction wrote it)."""
    return pq.read_table(os.path.join(table, f.path), columns=["list"]).column("list").to_pylist()


def execute_txn(log: DeltaLog, mops: Sequence[Mop]) -> Any:
    """Run ``mops`` as one transaction over rows; same outcomes as the file-level workload."""
    from serialake.verify.workload import TxnResult, _err, commit_txn

    table = log.table_path
    try:
        txn = log.start_transaction()
        lists: dict[str, list[int]] = {}
        where: dict[str, list[tuple[AddFile, int]]] = {}
        done: list[Mop] = []
        appended: dict[str, list[int]] = {}
        for f, key, value in mops:
            if key not in lists:
                found = []
                for add in txn.filter_files([f"k = '{key}'"]):
                    found += [(add, i, lst, rv) for i, lst, rv in _live_rows(table, add, key)]
                found.sort(key=lambda x: (x[3], x[0].path))
                lists[key] = [int(v) for _, _, lst, _ in found for v in lst.split()]
                where[key] = [(add, i) for add, i, _, _ in found]
            if f == "r":
                done.append(("r", key, tuple(lists[key])))
            else:
                lists[key].append(value)
                appended.setdefault(key, []).append(value)
                done.append((f, key, value))
    except Exception as e:  # noqa: BLE001 - nothing was written: a definite failure
        return TxnResult("fail", tuple(mops), _err(e))
    if not appended:
        return TxnResult("ok", tuple(done), commit_version=txn.read_version)
    # Mark the keys' current rows deleted, file by file; write the new rows in one new file.
    marks: dict[str, tuple[AddFile, set[int]]] = {}
    for key in appended:
        for add, i in where[key]:
            marks.setdefault(add.path, (add, set()))[1].add(i)
    actions: list[Any] = []
    for add, rows in marks.values():
        old = dv_rows(table, add.deletion_vector)
        dv = write_deletion_vector(table, old | RowIndexSet.from_iter(sorted(rows)))
        actions += [add.remove(), replace(add, deletion_vector=dv)]
    new_rows = [(k, " ".join(map(str, dict.fromkeys(lists[k]))), txn.read_version) for k in appended]
    actions.append(write_rows(table, new_rows))
    return commit_txn(txn, actions, mops, done, "list-append-rows")
