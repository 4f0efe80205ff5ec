"""Crash trials of transactions across tables: a child process commits a group over several tables and is
SIGKILLed at a step of the protocol (after its data files, after k locks, after staging, after the decision,
after k publications) or at a random moment; then a reader in this process finds every table holding all of
the group or none of it, no staged body left, and a following writer of each table commits.

Local store only (S3 trials are later work: docs/concurrency.md, "Transactions across tables").
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
import uuid

import pytest

from serialake.core import DeltaLog
from serialake.core.log import groups
from serialake.core.model.actions import Metadata
from serialake.core.tables.cut import consistent_cut
from serialake.core.txn.group import GroupTransaction
from tests.core.conftest import SCHEMA, add_file

pytestmark = pytest.mark.concurrency

MARK = "group-"


def _child(paths: list[str], kill_at: tuple[str, int] | None) -> None:
    DeltaLog.clear_cache()
    seen: dict[str, int] = {}

    def step(name: str, table: str) -> None:
        seen[name] = seen.get(name, 0) + 1
        if kill_at is not None and kill_at == (name, seen[name]):
            os.kill(os.getpid(), signal.SIGKILL)

    g = GroupTransaction(step=step)
    for path in paths:
        txn = g.write(path)
        txn.filter_files(["p = 1"])
        add = add_file(1, name=f"{MARK}{uuid.uuid4().hex}.parquet")
        full = os.path.join(path, add.path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(b"PAR1 not really: the log is what is checked")
        g.add(txn, [add], "WRITE", new_files=[add])
    step("data", "")
    g.commit()
    os._exit(0)


def _tables(base: str, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = os.path.join(base, f"t{i}")
        log = DeltaLog(path)
        txn = log.start_transaction()
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",)))
        txn.commit([add_file(1), add_file(2)], operation="CREATE TABLE")
        paths.append(log.table_path)
    return paths


def _group_rows(path: str) -> int:
    return sum(1 for f in DeltaLog.for_table(path).update().all_files if os.path.basename(f.path).startswith(MARK))


def _staged(path: str) -> list[str]:
    d = os.path.join(path, "_delta_log", groups.STAGED_DIR)
    return os.listdir(d) if os.path.isdir(d) else []


KILL_POINTS: list[tuple[str, int] | None] = [
    ("data", 1), ("prepared", 1), ("lock", 1), ("lock", 2), ("lock", 3), ("staged", 1), ("decided", 1),
    ("published", 1), ("published", 2), None,
]  # fmt: skip
#: Whether the group is in every table after a kill at that point (None: it ran to its end).
COMMITTED = {("decided", 1), ("published", 1), ("published", 2), None}


def _trial(base: str, n: int, kill_at: tuple[str, int] | None, delay: float | None = None) -> bool:
    paths = _tables(base, n)
    ctx = mp.get_context("fork")
    proc = ctx.Process(target=_child, args=(paths, kill_at))
    proc.start()
    if delay is not None:
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(60)
    assert proc.exitcode is not None
    DeltaLog.clear_cache()  # the reader: a process that knows nothing of the group
    consistent_cut({p: None for p in paths}, timeout_s=10)
    found = [_group_rows(p) for p in paths]
    assert found in ([0] * n, [1] * n), (kill_at, delay, found)
    assert not any(_staged(p) for p in paths), (kill_at, [_staged(p) for p in paths])
    for p in paths:  # a following writer of each table commits (reading the group's partition)
        txn = DeltaLog.for_table(p).start_transaction()
        txn.filter_files(["p = 1"])
        txn.commit([add_file(1)], operation="UPDATE")
    assert [_group_rows(p) for p in paths] == found
    return found[0] == 1


@pytest.fixture(autouse=True)
def _short_wait(monkeypatch):
    monkeypatch.setattr(groups, "LOCK_WAIT_S", 0.05)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("kill_at", KILL_POINTS, ids=lambda k: "end" if k is None else f"{k[0]}{k[1]}")
def test_kill_at_each_step(tmp_path, n, kill_at):
    if kill_at is not None and kill_at[1] > n:
        pytest.skip(f"{n} tables have no step {kill_at}")
    committed = _trial(str(tmp_path), n, kill_at)
    assert committed == (kill_at in COMMITTED)


@pytest.mark.parametrize("seed", range(8))
def test_kill_at_a_random_moment(tmp_path, seed):
    rng = random.Random(seed)
    _trial(str(tmp_path), rng.choice([2, 3]), kill_at=None, delay=rng.uniform(0.0, 0.04))
