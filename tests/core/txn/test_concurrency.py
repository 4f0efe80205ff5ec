"""Real concurrency: separate processes hammer one table through the core API.

Blind appenders and read-modify-write writers run together. Afterwards the log must
hold every acknowledged commit exactly once (by txnId), no unacknowledged one twice,
blind appends never fail, and every failure is one of the six conflict exceptions.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random

import pytest

from serialake.core import DeltaLog
from serialake.exceptions import DeltaConcurrentModificationException
from tests.core.conftest import add_file

pytestmark = pytest.mark.concurrency

SIX = {
    "ProtocolChangedException",
    "MetadataChangedException",
    "ConcurrentTransactionException",
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
}


def _worker(path: str, kind: str, n: int, seed: int, out: str) -> None:
    DeltaLog.clear_cache()
    rng = random.Random(seed)
    log = DeltaLog(path)
    results = []
    for _ in range(n):
        txn = log.start_transaction()
        p = rng.randint(0, 3)
        try:
            if kind == "blind":
                v = txn.commit([add_file(p)], operation="WRITE")
            else:  # read-modify-write on one partition: rewrite one file of it
                files = txn.filter_files([f"p = {p}"])
                actions = [add_file(p)] + ([files[0].remove()] if files else [])
                v = txn.commit(actions, operation="UPDATE")
            results.append({"ok": True, "version": v, "txnId": txn.txn_id, "kind": kind})
        except DeltaConcurrentModificationException as e:
            results.append({"ok": False, "error": type(e).__name__, "txnId": txn.txn_id, "kind": kind})
    with open(out, "w") as f:
        json.dump(results, f)


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_processes_hammering_one_table(make_table, tmp_path, level):
    log = make_table(level=level, files=[0, 1, 2, 3])
    ctx = mp.get_context("fork")
    kinds = ["blind", "blind", "rmw", "rmw"]
    procs = []
    for i, kind in enumerate(kinds):
        out = str(tmp_path / f"out{i}.json")
        p = ctx.Process(target=_worker, args=(log.table_path, kind, 40, i, out))
        p.start()
        procs.append((p, out))
    results = []
    for p, out in procs:
        p.join(120)
        assert p.exitcode == 0
        results.extend(json.load(open(out)))

    snap = DeltaLog(log.table_path).update()
    in_log: dict[str, int] = {}
    for v in range(1, snap.version + 1):
        ci = DeltaLog(log.table_path).read_commit(v).commit_info
        assert ci.txn_id not in in_log, f"txn {ci.txn_id} committed twice"
        in_log[ci.txn_id] = v
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    assert len({r["version"] for r in ok}) == len(ok)
    for r in ok:
        assert in_log[r["txnId"]] == r["version"]
    for r in failed:
        assert r["error"] in SIX
        assert r["txnId"] not in in_log
        assert r["kind"] != "blind", "a blind append must never fail"
    assert len(in_log) == len(ok) == snap.version
    # Every file added by an acknowledged commit is live unless a later commit removed it.
    adds = removes = 0
    for v in range(0, snap.version + 1):
        acts = DeltaLog(log.table_path).read_commit(v).actions
        adds += sum(1 for a in acts if type(a).__name__ == "AddFile")
        removes += sum(1 for a in acts if type(a).__name__ == "RemoveFile")
    assert snap.num_files == adds - removes
    assert os.path.isdir(log.log_path)
