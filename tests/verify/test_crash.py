"""SIGKILL crash trials, the table checks they rely on, and the vacuum rule."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from serialake.core.log.deltalog import DeltaLog
from serialake.core.log.logfiles import LAST_CHECKPOINT, checkpoint_name
from serialake.core.model.actions import AddFile
from serialake.storage.local import LocalLogStore
from serialake.verify.crash import (
    CRASH_POINTS,
    HOUR_MS,
    _create_table,
    check_table,
    check_vacuum,
    replay_from_zero,
    run_crash_trials,
    vacuum_plan,
)

pytestmark = pytest.mark.concurrency


def _write(table: str, rel: str, age_ms: int = 0) -> AddFile:
    full = os.path.join(table, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    Path(full).write_bytes(b"PAR1 not really")
    if age_ms:
        t = time.time() - age_ms / 1000
        os.utime(full, (t, t))
    return AddFile(path=rel, partition_values={"p": rel[2]}, size=15, data_change=True)


def _table(tmp_path: Path) -> tuple[str, DeltaLog]:
    table = str(tmp_path / "t")
    _create_table(table)
    return table, DeltaLog(table, store=LocalLogStore(fsync=False))


def test_a_hundred_crash_trials_keep_every_invariant(tmp_path: Path) -> None:
    report = run_crash_trials(105, workdir=tmp_path, seed=7)
    assert report.valid, "\n".join(report.violations[:20])
    assert sum(report.kills.values()) == 105
    targeted = [p for p in CRASH_POINTS if p != "random"]
    assert all(report.reached.get(p, 0) >= 10 for p in targeted), report.reached  # each point really hit
    assert report.acked_commits > 50 and report.checkpoints > 10
    assert report.orphans_vacuumed > 0  # killed writers left data files that vacuum reclaimed
    assert report.duration_s < 90  # ~15 s on 2 idle cores; generous for loaded CI machines


def test_vacuum_plan_deletes_only_unreferenced_files_past_retention(tmp_path: Path) -> None:
    table, log = _table(tmp_path)
    day = 24 * HOUR_MS
    live = _write(table, "p=a/live.parquet", age_ms=3 * day)
    old_gone = _write(table, "p=a/old-gone.parquet", age_ms=3 * day)
    new_gone = _write(table, "p=b/new-gone.parquet", age_ms=3 * day)
    log.start_transaction().commit([live, old_gone, new_gone])
    now = int(time.time() * 1000)
    log.start_transaction().commit([old_gone.remove(timestamp=now - 2 * day), new_gone.remove(timestamp=now)])
    _write(table, "p=a/orphan-old.parquet", age_ms=2 * day)
    _write(table, "p=c/orphan-new.parquet")
    _write(table, "p=a/.hidden.crc", age_ms=2 * day)
    snap = log.update()
    plan = vacuum_plan(snap, day, now)
    assert set(plan.delete) == {"p=a/old-gone.parquet", "p=a/orphan-old.parquet"}
    assert plan.too_young == ("p=c/orphan-new.parquet",)
    assert {"p=a/live.parquet", "p=b/new-gone.parquet"} <= plan.referenced
    assert vacuum_plan(snap, 7 * day, now).delete == ()
    problems, deleted = check_vacuum(table, read_data=False)
    assert problems == [] and deleted == 4  # retention 0: everything unreferenced goes
    assert os.path.exists(os.path.join(table, "p=a/live.parquet"))


def test_check_table_sees_a_partial_commit_and_a_missing_ack(tmp_path: Path) -> None:
    """The checker of the crash invariants is not vacuous either."""
    table, log = _table(tmp_path)
    rel = "p=a/x.parquet"
    v = log.start_transaction().commit([_write(table, rel)])
    ack = tmp_path / "ack.jsonl"
    txn_id = log.read_commit(v).commit_info.txn_id  # type: ignore[union-attr]
    ack.write_text(json.dumps({"version": v, "txnId": txn_id, "add": rel, "remove": [], "txn": {}}) + "\n")
    assert check_table(table, [ack]) == []
    with open(ack, "a") as fh:
        fh.write(json.dumps({"version": v + 5, "txnId": "lost", "add": rel, "remove": [], "txn": {}}) + "\n")
    assert any("beyond the latest" in p for p in check_table(table, [ack]))
    Path(log.commit_path(v + 1)).write_text('{"commitInfo":{"txnId":"half"}}\n{"add":{"path":"p=a/y.parq')
    problems = check_table(table, [])
    assert problems and ("does not load" in problems[0] or "does not parse" in " ".join(problems))


def test_loader_falls_back_when_last_checkpoint_points_at_a_missing_checkpoint(tmp_path: Path) -> None:
    table, log = _table(tmp_path)
    for i in range(5):  # checkpointInterval=2: checkpoints at 2 and 4
        log.start_transaction().commit([_write(table, f"p=a/f{i}.parquet")])
        log.wait_for_checkpoints()
    last = json.loads(Path(log.log_path, LAST_CHECKPOINT).read_text())
    assert last["version"] == 4
    os.unlink(os.path.join(log.log_path, checkpoint_name(4)))
    DeltaLog.clear_cache()
    snap = DeltaLog(table).update()
    assert snap.version == 5 and snap.segment is not None and snap.segment.checkpoint is not None
    assert snap.segment.checkpoint.version == 2
    assert {f.path for f in snap.all_files} == {path for path, _ in replay_from_zero(log, 5).files}
    assert check_table(table, []) == []
