"""Crash trials of transactions across tables: a child process commits a group over several tables and is
SIGKILLed at a step of the protocol (after its data files, after k locks, after staging, after the decision,
after k publications) or at a random moment; then a reader in this process finds every table holding all of
the group or none of it, and a following writer of each table commits; then the records' clean-up leaves no
decision record and no staged body (one can be left before it only after its body was published) and
changes no table.

The same on S3 (a moto server on 127.0.0.1, conditional PUTs serialised as on S3): the child is started
from a fork server (the S3 client does not survive ``fork``). ``make test`` runs a few S3 trials; ``make
verify`` runs every kill point and ``SERIALAKE_GROUP_S3_TRIALS`` random moments
(``test_s3_kill_at_each_step_full``, skipped unless that variable is set).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from serialake.core import DeltaLog
from serialake.core.log import groups
from serialake.core.model.actions import Metadata
from serialake.core.tables.cut import consistent_cut
from serialake.core.txn.group import GroupTransaction
from serialake.storage import is_local_path
from serialake.verify.workload import apply_environment, fork_server
from tests.core.conftest import SCHEMA, add_file

pytestmark = pytest.mark.concurrency

MARK = "group-"


def _write_data(path: str, rel: str) -> None:
    data = b"PAR1 not really: the log is what is checked"
    if not is_local_path(path):
        DeltaLog.for_table(path).store.write(f"{path}/{rel}", data)
        return
    full = os.path.join(path, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(data)


def _child(
    paths: list[str], kill_at: tuple[str, int] | None, env: dict[str, str] | None = None, delay: float | None = None
) -> None:
    if env:
        apply_environment(env)  # (a fork server's child: its environment is the server's, taken at its start)
    DeltaLog.clear_cache()
    if delay is not None:  # killed at a random moment of its work (timed here: a fork server's child starts slowly)
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
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
        _write_data(path, add.path)
        g.add(txn, [add], "WRITE", new_files=[add])
    step("data", "")
    g.commit()
    os._exit(0)


def _tables(base: str, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = f"{base.rstrip('/')}/t{i}"
        log = DeltaLog(path)
        txn = log.start_transaction()
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",)))
        txn.commit([add_file(1), add_file(2)], operation="CREATE TABLE")
        paths.append(log.table_path)
    return paths


def _group_rows(path: str) -> int:
    return sum(1 for f in DeltaLog.for_table(path).update().all_files if os.path.basename(f.path).startswith(MARK))


def _staged(path: str) -> list[str]:
    log = DeltaLog.for_table(path)
    return [st.name for st in log.store.list_from(os.path.join(log.log_path, groups.STAGED_DIR))]


KILL_POINTS: list[tuple[str, int] | None] = [
    ("data", 1), ("prepared", 1), ("lock", 1), ("lock", 2), ("lock", 3), ("staged", 1), ("decided", 1),
    ("published", 1), ("published", 2), None,
]  # fmt: skip
#: Whether the group is in every table after a kill at that point (None: it ran to its end).
COMMITTED = {("decided", 1), ("published", 1), ("published", 2), None}


def _trial(
    base: str, n: int, kill_at: tuple[str, int] | None, delay: float | None = None, env: dict[str, str] | None = None
) -> bool:
    paths = _tables(base, n)
    ctx = mp.get_context("fork") if env is None else fork_server()
    proc = ctx.Process(target=_child, args=(paths, kill_at, env, delay if env is not None else None))
    proc.start()
    if delay is not None and env is None:
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(120)
    assert proc.exitcode is not None
    assert proc.exitcode == (0 if kill_at is None and delay is None else proc.exitcode), proc.exitcode
    DeltaLog.clear_cache()  # the reader: a process that knows nothing of the group
    consistent_cut({p: None for p in paths}, timeout_s=10)
    found = [_group_rows(p) for p in paths]
    assert found in ([0] * n, [1] * n), (kill_at, delay, found)
    # A staged body is left only where the group published its body and was killed before deleting the
    # staged copy (readers skip a lock followed by its publication): the clean-up below deletes it.
    assert not any(_staged(p) for p in paths) or found[0] == 1, (kill_at, [_staged(p) for p in paths])
    for p in paths:  # a following writer of each table commits (reading the group's partition)
        txn = DeltaLog.for_table(p).start_transaction()
        txn.filter_files(["p = 1"])
        txn.commit([add_file(1)], operation="UPDATE")
    assert [_group_rows(p) for p in paths] == found
    # Then the clean-up (every record old enough): no decision record or staged body is left, nothing changes.
    for p in paths:
        groups.cleanup(DeltaLog.for_table(p), 1 << 62)
    for p in paths:
        log = DeltaLog.for_table(p)
        assert not log.store.list_from(os.path.join(log.log_path, groups.GROUPS_DIR)), (kill_at, delay, p)
    assert not any(_staged(p) for p in paths)
    DeltaLog.clear_cache()
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


# -- on S3 -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    pytest.importorskip("moto")
    from serialake.storage import s3 as s3store
    from tests.s3server import S3Server

    server = S3Server().start()
    try:
        with pytest.MonkeyPatch.context() as mp_:
            for key, value in server.environment().items():
                mp_.setenv(key, value)
            s3store._stores.clear()  # (stores read the environment when made)
            yield {**server.environment(), "bucket": server.new_bucket()}
    finally:
        server.stop()
        s3store._stores.clear()


def _s3_trial(s3_env: dict[str, str], n: int, kill_at: tuple[str, int] | None, delay: float | None = None) -> bool:
    env = {k: v for k, v in s3_env.items() if k != "bucket"}
    DeltaLog.clear_cache()
    return _trial(f"s3://{s3_env['bucket']}/{uuid.uuid4().hex[:12]}", n, kill_at, delay, env=env)


#: What ``make test`` runs on S3: a kill before the decision, at it, and half published.
S3_QUICK = [("lock", 2), ("staged", 1), ("decided", 1), ("published", 1)]


@pytest.mark.s3
@pytest.mark.parametrize("kill_at", S3_QUICK, ids=lambda k: f"{k[0]}{k[1]}")
def test_s3_kill_at_a_step(s3_env, kill_at):
    assert _s3_trial(s3_env, 2, kill_at) == (kill_at in COMMITTED)


@pytest.mark.s3
def test_s3_kill_at_a_random_moment(s3_env):
    for seed in range(2):
        _s3_trial(s3_env, 2, kill_at=None, delay=random.Random(seed).uniform(0.0, 0.5))


@pytest.mark.s3
@pytest.mark.skipif(not os.environ.get("SERIALAKE_GROUP_S3_TRIALS"), reason="make verify: SERIALAKE_GROUP_S3_TRIALS")
def test_s3_kill_at_each_step_full(s3_env):
    """Every kill point for 2 and 3 tables, then ``SERIALAKE_GROUP_S3_TRIALS`` kills at random moments."""
    outcomes = []
    for n in (2, 3):
        for kill_at in KILL_POINTS:
            if kill_at is None or kill_at[1] <= n:
                outcomes.append((n, kill_at, _s3_trial(s3_env, n, kill_at)))
                assert outcomes[-1][2] == (kill_at in COMMITTED), outcomes[-1]
    rng = random.Random(44)
    committed = 0
    for _ in range(int(os.environ["SERIALAKE_GROUP_S3_TRIALS"])):
        committed += _s3_trial(s3_env, rng.choice([2, 3]), kill_at=None, delay=rng.uniform(0.0, 0.6))
    print(f"{len(outcomes)} kill points and {os.environ['SERIALAKE_GROUP_S3_TRIALS']} random kills on S3: "
          f"all or nothing every time ({committed} of the random ones committed)")
