"""The list-append workload with rows in real Parquet files and deletion vectors.

This is the row-level variant of :mod:`serialake.verify.workload`: the table is not
partitioned and has deletion vectors on, so row-level concurrency applies. Key ``x`` is
one live row ``(k='x', list='3 17 42', rv=<read version>)``; rows of many keys share
files. An append marks the key's current row deleted in its file's deletion vector and
writes the key's new row in a new file (one per transaction), exactly like an UPDATE with
deletion vectors; a key with no row yet (the key window moved on) gets its first row the
same way, like an INSERT. Two transactions appending to different keys of one file
therefore rebase over each other (vectors merged); the same key is the same row and
conflicts. A file whose rows are all deleted is removed, as Delta does, and retired keys'
rows are deleted by :func:`retire_keys`, so the live files stay few. A read returns every
live row of the key (by read version), so a lost update shows.

Data files and deletion vectors are immutable, so each process caches what it read of
them (by path and by vector id): a transaction reads only files it has not seen yet.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from serialake.core.dv.deletion_vectors import RowIndexSet, write_deletion_vector
from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.actions import AddFile, DeletionVectorDescriptor, Metadata
from serialake.core.predicates.expressions import Expr, parse_predicate
from serialake.core.txn.row_level import dv_rows
from serialake.storage.local import LocalLogStore
from serialake.verify.history import Mop
from serialake.verify.txn import (
    RETIRE_WORKLOAD,
    TxnResult,
    check_window,
    commit_txn,
    error_text,
    key_name,
)

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "k", "type": "string", "nullable": True, "metadata": {}},
    {"name": "list", "type": "string", "nullable": True, "metadata": {}},
    {"name": "rv", "type": "long", "nullable": True, "metadata": {}},
]})
_CACHED_FILES = 4096  # per process; a file is a few rows


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


def create_table(path: str, keys: Sequence[str], properties: Mapping[str, str], fsync: bool = True) -> DeltaLog:
    """The table with ``properties`` and deletion vectors on, every key's empty row in one shared file."""
    log = DeltaLog(path, store=LocalLogStore(fsync=fsync))
    txn = log.start_transaction()
    conf = {**properties, "delta.enableDeletionVectors": "true"}
    txn.update_metadata(Metadata(schema_string=SCHEMA, configuration=conf))
    os.makedirs(path, exist_ok=True)
    txn.commit([write_rows(path, [(k, "", -1) for k in keys])], operation="CREATE TABLE")
    return log


@lru_cache(maxsize=_CACHED_FILES)
def _file_rows(table: str, path: str) -> dict[str, list[tuple[int, str, int]]]:
    """``key -> [(row index, list, rv)]`` of every row of a data file (deleted or not)."""
    data = pq.ParquetFile(os.path.join(table, path)).read()  # 3x cheaper than read_table's dataset
    out: dict[str, list[tuple[int, str, int]]] = {}
    ks, lists, rvs = data.column("k").to_pylist(), data.column("list").to_pylist(), data.column("rv").to_pylist()
    for i, k in enumerate(ks):
        out.setdefault(k, []).append((i, lists[i], rvs[i]))
    return out


@lru_cache(maxsize=_CACHED_FILES)
def _deleted(table: str, dv: DeletionVectorDescriptor | None) -> frozenset[int]:
    return frozenset(dv_rows(table, dv)) if dv is not None else frozenset()


@lru_cache(maxsize=1024)
def _key_predicate(key: str) -> Expr:
    return parse_predicate(f"k = '{key}'")


def _live_rows(table: str, f: AddFile, key: str) -> list[tuple[int, str, int]]:
    """``(row index, list, rv)`` of the live rows of ``key`` in file ``f``."""
    rows = _file_rows(table, f.path).get(key, [])
    if not rows:
        return []
    gone = _deleted(table, f.deletion_vector)
    return [r for r in rows if r[0] not in gone]


def _is_empty(f: AddFile) -> bool:
    """Every row of ``f`` is deleted (known from the log alone: stats and the vector's cardinality)."""
    stats = f.parsed_stats() or {}
    n = stats.get("numRecords")
    return f.deletion_vector is not None and isinstance(n, int) and f.deletion_vector.cardinality >= n


def _delete_rows(table: str, marks: Iterable[tuple[AddFile, set[int]]]) -> list[Any]:
    """Actions deleting ``rows`` of each file: a new vector, or the file's remove when no row is left."""
    actions: list[Any] = []
    for add, rows in marks:
        new = RowIndexSet.from_iter(sorted(_deleted(table, add.deletion_vector) | rows))
        if len(new) >= (add.parsed_stats() or {}).get("numRecords", len(new) + 1):
            actions.append(add.remove())
        else:
            actions += [add.remove(), replace(add, deletion_vector=write_deletion_vector(table, new))]
    return actions


def retire_keys(log: DeltaLog, first_live: Callable[[int], int]) -> int | None:
    """Delete the rows of keys below ``first_live(read version)``; the commit version, or None if none.

    Like :func:`serialake.verify.workload.retire_keys`, over rows: a DELETE through deletion
    vectors, which concurrent appends to other rows of the same files rebase over.
    """
    table = log.table_path
    txn = log.start_transaction()
    bound = key_name(first_live(txn.read_version))
    marks: list[tuple[AddFile, set[int]]] = []
    for add in txn.filter_files([_below_predicate(bound)]):
        gone = _deleted(table, add.deletion_vector)
        rows = {i for k, found in _file_rows(table, add.path).items() if k < bound for i, _, _ in found}
        if rows - gone or _is_empty(add):
            marks.append((add, rows))
    if not marks:
        return None
    txn.commit(_delete_rows(table, marks), operation="DELETE", operation_parameters={"workload": RETIRE_WORKLOAD})
    return txn.committed.version if txn.committed is not None else None


@lru_cache(maxsize=1024)
def _below_predicate(bound: str) -> Expr:
    return parse_predicate(f"k < '{bound}'")


def row_keys(table: str, path: str) -> dict[int, str]:
    """``row index -> key`` of every row of a data file (deleted or not; for audits)."""
    return {i: k for k, found in _file_rows(table, path).items() for i, _, _ in found}


def deleted_rows(table: str, dv: DeletionVectorDescriptor | None) -> frozenset[int]:
    """The row indexes a deletion vector deletes (none for None; for audits)."""
    return _deleted(table, dv)


def file_lists(table: str, f: AddFile) -> list[str]:
    """Every ``list`` value in a data file (for auditing which transaction wrote it)."""
    return pq.ParquetFile(os.path.join(table, f.path)).read(columns=["list"]).column("list").to_pylist()


def execute_txn(
    log: DeltaLog,
    mops: Sequence[Mop],
    retired: Callable[[int], int] | None = None,
    hold: Callable[[], None] | None = None,
) -> TxnResult:
    """Run ``mops`` as one transaction over rows; same outcomes (and ``retired``) as the file-level workload.

    ``hold()`` runs between the reads and the commit (a long transaction: others commit meanwhile).
    """
    table = log.table_path
    try:
        txn = log.start_transaction()
        if retired is not None:
            check_window(txn.read_version, mops, retired(txn.read_version))
        lists: dict[str, list[int]] = {}
        where: dict[str, list[tuple[AddFile, int]]] = {}
        emptied: dict[str, AddFile] = {}  # files read whose rows are all deleted already
        done: list[Mop] = []
        appended: dict[str, list[int]] = {}
        for f, key, value in mops:
            if key not in lists:
                found = []
                for add in txn.filter_files([_key_predicate(key)]):
                    if _is_empty(add):
                        emptied[add.path] = add
                        continue
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
        return TxnResult("fail", tuple(mops), error_text(e))
    if hold is not None:
        hold()
    if not appended:
        return TxnResult("ok", tuple(done), commit_version=txn.read_version)
    # Mark the keys' current rows deleted, file by file; write the new rows in one new file.
    marks: dict[str, tuple[AddFile, set[int]]] = {}
    for key in appended:
        for add, i in where[key]:
            marks.setdefault(add.path, (add, set()))[1].add(i)
    actions = _delete_rows(table, marks.values())
    # Emptied files left by rebased vector merges go too (a remove of no live rows).
    actions += [add.remove() for path, add in emptied.items() if path not in marks]
    new_rows = [(k, " ".join(map(str, dict.fromkeys(lists[k]))), txn.read_version) for k in appended]
    actions.append(write_rows(table, new_rows))
    return commit_txn(txn, actions, mops, done, "list-append-rows")
