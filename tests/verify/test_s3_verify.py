"""``serialake verify --s3``: the list-append workload and the crash trials with the log on S3.

Every server here is moto on 127.0.0.1 behind ``serialake.verify.s3server``'s wrapper, which
serialises conditional PUTs: plain moto can let two racing creators of one commit both win,
and these checks rely on exactly one winner, as on S3. The tests' own server is started by
a fixture and stopped by its pid; the CLI run starts and stops its own, and the test checks
that its pid is gone afterwards.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.actions import AddFile, CommitInfo
from serialake.storage import s3 as s3store
from serialake.verify.crash import INTENTS_SUFFIX, S3_CRASH_POINTS, _create_table, check_table, run_crash_trials
from serialake.verify.history import History
from serialake.verify.runner import main, run_verify
from serialake.verify.s3server import S3Server

pytestmark = [pytest.mark.s3, pytest.mark.concurrency]


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    srv = S3Server().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def bucket(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for key, value in server.environment().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    s3store._stores.clear()  # stores read the environment when made
    yield server.new_bucket()
    s3store._stores.clear()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _interleaved(history: History) -> tuple[int, int]:
    """(processes that committed a write, times consecutive commits came from different processes)."""
    commits = sorted((t.commit_version, t.process) for t in history if t.outcome == "ok" and t.attempts is not None)
    switches = sum(1 for (_, a), (_, b) in zip(commits, commits[1:]) if a != b)
    return len({p for _, p in commits}), switches


def test_cli_s3_run_is_valid_at_both_levels_and_catches_the_control(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 processes per level on a moto server the command starts itself (and stops by its pid):
    both levels VALID, with real contention, the negative control caught, crash trials VALID."""
    argv = ["--s3", "--processes", "8", "--txns", "10", "--crash-trials", "7", "--control"]
    t0 = time.monotonic()
    rc = main([*argv, "--json", "--workdir", str(tmp_path)])
    elapsed = time.monotonic() - t0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert rc == 0 and data["valid"] is True, captured.out[-3000:]
    levels = {lv["level"]: lv for lv in data["levels"]}
    assert set(levels) == {"Serializable (S3)", "WriteSerializable (S3)"}  # no row-level sections on S3
    for name, lv in levels.items():
        assert lv["valid"] and lv["checker_valid"] and not lv["log_problems"] and not lv["worker_problems"], name
        assert lv["txns"] == 80 and lv["processes"] == 8 and lv["faulty_processes"] == 4
        assert lv["store"].startswith("moto on 127.0.0.1:")
        assert lv["committed"] > 10
        assert sum(lv["aborted"].values()) + lv["retries"] > 0, lv  # contention: conflicts or rebased commits
        assert sum(lv["faults"].values()) > 0, lv
    # Histories are kept in the workdir: commits from many processes, interleaved in the log.
    for level in ("Serializable", "WriteSerializable"):
        history = History.merge(sorted((tmp_path / f"{level}-history").glob("history-*.jsonl")))
        writers, switches = _interleaved(history)
        assert writers >= 4 and switches >= 4, (level, writers, switches)
    control = data["control"]
    assert control is not None and control["valid"] and control["violations"]  # caught, as expected
    assert control["title"] == "negative control on S3 (conflict checks disabled)"
    crash = data["crash"]
    assert crash["valid"] and crash["store"] == "S3" and crash["trials"] == 7
    assert set(crash["kills"]) == set(S3_CRASH_POINTS)
    # The command's own server is gone: stopped by its pid.
    pid = data["s3"]["pid"]
    assert isinstance(pid, int) and data["s3"]["root"].startswith("s3://t-")
    deadline = time.monotonic() + 5
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(pid)
    assert elapsed < 120  # ~35 s on 2 idle cores


def test_s3_uri_run_uses_the_given_bucket_and_cleans_up(bucket: str, server: S3Server) -> None:
    """``--s3-uri``: the tables go under the given prefix (endpoint from the AWS variables) and are
    deleted after a valid run; the faulty processes wrap the S3 store in the fault-injecting store."""
    report = run_verify(
        4, 8, ["WriteSerializable"], s3_uri=f"s3://{bucket}/runs", seed=5, workdir=None, faulty_processes=2
    )
    assert report.valid, report.render()
    (level,) = report.levels
    assert level.txns == 32 and level.store.startswith(f"s3://{bucket}/runs/verify-")
    assert not any(k.startswith("s3_") for k in level.faults)  # no fault proxy in front of a given S3
    assert report.s3_tables is None
    assert server.client().list_objects_v2(Bucket=bucket, Prefix="runs/")["KeyCount"] == 0  # nothing left behind


def test_s3_workload_refuses_what_does_not_run_on_s3(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="do not run on S3"):
        run_verify(2, 2, ["Serializable"], s3=True, multi_table=True)
    assert main(["--s3", "--dataframes"]) == 2
    assert main(["--s3-uri", "gs://bucket/x"]) == 2
    assert "--s3-uri" in capsys.readouterr().err


def test_crash_trials_on_s3_reach_every_point_and_keep_every_invariant(bucket: str, tmp_path: Path) -> None:
    """SIGKILL before the data file's commit, before the conditional PUT, after the PUT landed but
    before its response was used, after the commit, around checkpoints: the table always loads,
    a replay from version 0 equals the snapshot, every acknowledged commit is there once."""
    report = run_crash_trials(14, workdir=tmp_path, seed=11, table_root=f"s3://{bucket}/crash", trials_per_table=7)
    assert report.valid, "\n".join(report.violations[:20])
    assert report.store == "S3" and report.tables == 2
    targeted = [p for p in S3_CRASH_POINTS if p != "random"]
    assert all(report.reached.get(p, 0) >= 1 for p in targeted), report.reached  # each point really hit
    assert sum(report.reached.values()) >= 10, report.reached  # of 12 targeted kills
    assert report.acked_commits > 5 and report.checkpoints > 0
    assert report.unacked_commits >= 1  # an after-put kill left a commit nobody acknowledged
    assert report.orphans_vacuumed > 0  # data files PUT before a kill, never committed
    assert report.temp_files_left == 0


def _ack(path: Path, version: int, txn_id: str, add: str) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps({"version": version, "txnId": txn_id, "add": add, "remove": [], "txn": {}}) + "\n")


def test_check_table_on_s3_sees_missing_acks_duplicates_phantoms_and_gaps(bucket: str, tmp_path: Path) -> None:
    """The crash checks are not vacuous on S3 either: a lost acknowledged commit, a live file not in
    the bucket, a commit nobody attempted, the same txnId twice, a gap in the versions."""
    table = f"s3://{bucket}/checked"
    _create_table(table)
    log = DeltaLog(table)
    store = log.store
    store.write(f"{table}/p=a/x.parquet", b"PAR1 not really")
    add = AddFile(path="p=a/x.parquet", partition_values={"p": "a"}, size=15, data_change=True)
    v = log.start_transaction().commit([add])
    ci = log.read_commit(v).commit_info
    assert ci is not None and ci.txn_id is not None
    ack = tmp_path / "ack.jsonl"
    _ack(ack, v, ci.txn_id, add.path)
    intents = tmp_path / f"ack.jsonl{INTENTS_SUFFIX}"
    intents.write_text(ci.txn_id + "\n")
    assert check_table(table, [ack], intent_files=[intents]) == []
    # An acknowledged commit the log does not have.
    lost = tmp_path / "lost.jsonl"
    _ack(lost, v + 5, "lost", add.path)
    assert any("beyond the latest" in p for p in check_table(table, [lost]))
    # A phantom: a live file that is not in the bucket.
    ghost = AddFile(path="p=b/ghost.parquet", partition_values={"p": "b"}, size=15, data_change=True)
    log.start_transaction().commit([ghost])
    problems = check_table(table, [ack], intent_files=[intents])
    assert any("ghost.parquet is missing from the bucket" in p for p in problems), problems
    # ... and a phantom commit: no writer ever tried to commit its txnId.
    assert any(f"commit {v + 1} " in p and "phantom" in p for p in problems), problems
    # A duplicate: the same txnId committed twice.
    raw = store.read(log.commit_path(v))
    store.write(f"{table}/p=a/again.parquet", b"PAR1 not really")
    store.put_if_absent(log.commit_path(v + 2), raw.replace(b"p=a/x.parquet", b"p=a/again.parquet"))
    problems = check_table(table, [ack])
    assert any("txnId" in p and "also at version" in p for p in problems), problems
    # A gap: a commit two versions ahead of the last one.
    info = CommitInfo({"txnId": uuid.uuid4().hex, "operation": "WRITE"})
    store.put_if_absent(log.commit_path(v + 4), json.dumps({"commitInfo": info.values}).encode() + b"\n")
    problems = check_table(table, [ack])
    assert problems and any("not 0.." in p or "does not load" in p for p in problems), problems
