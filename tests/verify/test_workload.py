"""The list-append workload against real tables: valid per level, and a negative control."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.actions import AddFile
from serialake.storage.local import LocalLogStore
from serialake.verify.checker import (
    SERIALIZABLE_FORBIDDEN,
    STRICT_SERIALIZABLE_FORBIDDEN,
    WRITE_SERIALIZABLE_FORBIDDEN,
    check,
)
from serialake.verify.runner import main, run_verify
from serialake.verify.workload import (
    FaultSpec,
    WorkloadConfig,
    audit_log,
    create_table,
    execute_txn,
    key_index,
    key_name,
    read_key,
    retire_keys,
    retired_below,
    run_workload,
)

pytestmark = pytest.mark.concurrency

FORBIDDEN = {"Serializable": SERIALIZABLE_FORBIDDEN, "WriteSerializable": WRITE_SERIALIZABLE_FORBIDDEN}


def _file(key: str, values: list[int], rv: int, name: str) -> AddFile:
    tags = {"list": " ".join(map(str, values)), "rv": str(rv)}
    return AddFile(path=f"k={key}/{name}", partition_values={"k": key}, size=1, tags=tags)


def test_read_key_shows_every_live_file_in_writer_order() -> None:
    """Two live files (a lost update) read as both lists, so the checker sees duplicates."""
    assert read_key([]) == []
    assert read_key([_file("x", [1, 2], 3, "a")]) == [1, 2]
    files = [_file("x", [1, 2, 5], 4, "b"), _file("x", [1, 2, 4], 4, "a"), _file("x", [1], 1, "z")]
    assert read_key(files) == [1, 1, 2, 4, 1, 2, 5]


def test_execute_txn_reads_its_own_appends_and_rewrites_the_partition(tmp_path: Path) -> None:
    log = create_table(str(tmp_path / "t"), "Serializable", fsync=False)
    first = execute_txn(log, [("append", "x", 1), ("r", "x", None), ("append", "y", 2)])
    assert first.outcome == "ok" and first.commit_version == 1 and first.attempts == 1
    assert first.mops[1] == ("r", "x", (1,))
    second = execute_txn(log, [("r", "y", None), ("append", "x", 3), ("r", "x", None)])
    assert second.mops[0] == ("r", "y", (2,)) and second.mops[2] == ("r", "x", (1, 3))
    reader = execute_txn(log, [("r", "x", None), ("r", "z", None)])
    assert reader.outcome == "ok" and reader.attempts is None and reader.commit_version == 2
    assert reader.mops == (("r", "x", (1, 3)), ("r", "z", ()))
    snap = log.update()
    assert sorted(f.partition_values["k"] for f in snap.all_files) == ["x", "y"]  # one file per key
    assert {f.path for f in snap.tombstones} == {f"k=x/part-{_txn_id(log, 1)}-x.parquet"}


def _txn_id(log: DeltaLog, version: int) -> str:
    ci = log.read_commit(version).commit_info
    assert ci is not None and ci.txn_id is not None
    return ci.txn_id


class _BrokenStore(LocalLogStore):
    """Commits raise an unexpected error after landing: the outcome is unknown to the caller."""

    def put_if_absent(self, path: str, data: bytes) -> None:
        super().put_if_absent(path, data)
        if path.endswith(".json"):
            raise RuntimeError("connection reset after the write")


def test_an_unexpected_commit_error_is_recorded_as_unknown(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    create_table(path, "Serializable", fsync=False)
    res = execute_txn(DeltaLog(path, store=_BrokenStore(fsync=False)), [("append", "x", 7)])
    assert res.outcome == "info" and res.error and res.error.startswith("RuntimeError")
    assert DeltaLog(path).update().version == 1  # it did land: "info" was the honest answer


def _run(tmp_path: Path, **kw: Any) -> Any:
    cfg = WorkloadConfig(**{"processes": 4, "txns": 40, "fsync": False, "seed": 3, **kw})
    result = run_workload(str(tmp_path / "table"), cfg, tmp_path / "work")
    assert result.exit_codes == [0] * cfg.processes
    assert not [s.crashed for s in result.stats if s.crashed]
    return result


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_workload_is_valid_at_each_level(tmp_path: Path, level: str) -> None:
    result = _run(tmp_path, isolation_level=level, faulty_processes=2)
    history = result.history
    assert len(history) == 160
    report = check(history, realtime=True, process=True, forbidden=FORBIDDEN[level])
    assert report.valid, report.summary()
    # Commits are linearizable: real-time and process order hold too.
    assert not (report.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN), report.summary()
    assert audit_log(result.table_path, history) == []
    counts = history.counts()
    assert counts["ok"] > 40 and counts["fail"] > 0  # there was contention, and some commits won
    # Aborts are conflicts, or an injected read/list fault before anything was written.
    assert all(t.error and t.error.startswith(("Concurrent", "InjectedFault")) for t in history if t.outcome == "fail")
    assert sum(sum(s.faults.values()) for s in result.stats) > 0


def test_lost_put_responses_neither_lose_nor_duplicate_commits(tmp_path: Path) -> None:
    """Every put's response is lost a third of the time: the commit loop finds its own txnId."""
    faults = FaultSpec(
        lose_put_response=0.3, fail_put=0.1, fail_list=0.1, fail_read=0.05, slow_put_s=0.001, slow_list_s=0.001
    )
    result = _run(tmp_path, processes=3, txns=30, faulty_processes=3, faults=faults)
    assert sum(s.faults.get("lost_put_response", 0) for s in result.stats) > 3
    assert audit_log(result.table_path, result.history) == []
    assert check(result.history, forbidden=SERIALIZABLE_FORBIDDEN).valid
    retries = sum(s.retries for s in result.stats)
    assert retries > 0


def test_negative_control_without_conflict_checks_is_caught(tmp_path: Path) -> None:
    """With conflict detection switched off the checker must find anomalies: it is not vacuous."""
    result = _run(tmp_path, key_count=4, disable_conflict_checks=True)
    assert result.history.counts()["fail"] == 0  # nothing ever conflicts now
    report = check(result.history, forbidden=SERIALIZABLE_FORBIDDEN)
    assert not report.valid
    assert report.anomaly_types & {"lost-update", "G-single", "G1c", "G0", "G2-item"}, report.summary()


def test_run_verify_report(tmp_path: Path) -> None:
    report = run_verify(3, 20, ["WriteSerializable"], control=True, workdir=str(tmp_path))
    assert report.valid
    (level,) = report.levels
    assert level.level == "WriteSerializable" and level.txns == 60
    assert level.committed + level.read_only + level.aborted_total + level.unknown_total == 60
    assert report.control is not None and report.control.violations
    text = report.render()
    assert "WriteSerializable: VALID" in text and "slowest commit" in text and "as expected" in text
    assert "cost per txn: workers" in text and "(120 txns checked)" in text  # 60 + 60 of the control
    data = report.to_dict()
    json.dumps(data)
    assert data["txns"] == 120 and level.cpu_s is not None and level.cpu_s > 0
    cost = data["levels"][0]["cost_ms_per_txn"]
    assert cost["workers_cpu"] > 0 and cost["check"] >= 0 and set(cost) == {"workers_cpu", "wall", "check", "audit"}


@pytest.mark.parametrize("row_level", [False, True], ids=["files", "rows"])
def test_old_keys_are_retired_and_no_txn_observes_it(tmp_path: Path, row_level: bool) -> None:
    """A fast-moving window: keys a window behind lose their data, the live files stay few, still VALID."""
    result = _run(tmp_path, processes=3, txns=60, key_count=2, rotate_every=2, faulty_processes=1,
                  row_level=row_level)  # fmt: skip
    report = check(result.history, realtime=True, process=True, forbidden=SERIALIZABLE_FORBIDDEN)
    assert report.valid and not (report.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN), report.summary()
    assert audit_log(result.table_path, result.history) == []  # retirements are recognised, not attributed
    assert sum(s.retirements for s in result.stats) > 3
    snap = DeltaLog(result.table_path).update()
    first_live = retired_below(result.config, snap.version)
    assert first_live > 5
    if row_level:  # no live row of a retired key is left (bar a retirement still due)
        assert len(snap.all_files) <= 2 * result.config.key_count + 4
    else:
        keys = {key_index(f.partition_values["k"]) for f in snap.all_files}
        assert min(keys) >= first_live - 2 * result.config.processes


def test_a_txn_refuses_keys_that_may_be_retired(tmp_path: Path) -> None:
    log = create_table(str(tmp_path / "t"), "Serializable", fsync=False)
    for i in range(4):
        assert execute_txn(log, [("append", key_name(i), i)]).outcome == "ok"
    res = execute_txn(log, [("r", key_name(3), None), ("append", key_name(1), 9)], lambda v: v - 1)
    assert res.outcome == "fail" and res.error and res.error.startswith("StaleKeyWindow")
    assert key_name(1) in res.error and log.update().version == 4  # refused before reading or writing
    assert execute_txn(log, [("append", key_name(3), 10)], lambda v: v - 1).outcome == "ok"
    assert retire_keys(log, lambda v: 3) is not None
    assert sorted(f.partition_values["k"] for f in log.update().all_files) == [key_name(3)]
    assert retire_keys(log, lambda v: 3) is None  # nothing left to retire: no commit


def test_cli_json_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--processes", "2", "--txns", "10", "--levels", "serializable", "--crash-trials", "7"]
    rc = main([*argv, "--json", "--workdir", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["valid"] is True
    assert data["levels"][0]["level"] == "Serializable" and data["levels"][0]["txns"] == 20
    assert data["crash"]["trials"] == 7 and data["crash"]["valid"] is True
    assert main(["--levels", "ReadUncommitted"]) == 2


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_row_level_workload_on_deletion_vectors_is_valid(tmp_path, level):
    """Keys as rows of shared files, updated through deletion vectors: row-level rebases, no anomaly."""
    from serialake.core import DeltaLog
    from serialake.verify.checker import (
        SERIALIZABLE_FORBIDDEN,
        WRITE_SERIALIZABLE_FORBIDDEN,
        check,
    )
    from serialake.verify.workload import WorkloadConfig, audit_log, run_workload

    cfg = WorkloadConfig(processes=4, txns=30, isolation_level=level, row_level=True, key_count=6, seed=3)
    result = run_workload(str(tmp_path / "t"), cfg, tmp_path / "h")
    forbidden = SERIALIZABLE_FORBIDDEN if level == "Serializable" else WRITE_SERIALIZABLE_FORBIDDEN
    report = check(result.history, forbidden=forbidden)
    assert report.valid, report.summary()
    assert audit_log(str(tmp_path / "t"), result.history) == []
    counts = result.history.counts()
    assert counts["ok"] > 0
    snap = DeltaLog(str(tmp_path / "t")).update()
    assert snap.protocol.reader_features and "deletionVectors" in snap.protocol.reader_features
    # Rows of different keys were changed in the shared first file by concurrent commits.
    first = DeltaLog(str(tmp_path / "t")).read_commit(1)
    assert any(type(a).__name__ == "RemoveFile" for a in first.actions)


def test_row_level_negative_control_is_caught(tmp_path):
    from serialake.verify.checker import check
    from serialake.verify.workload import WorkloadConfig, run_workload

    cfg = WorkloadConfig(processes=4, txns=25, isolation_level="Serializable", row_level=True, key_count=3,
                         disable_conflict_checks=True, seed=5)
    result = run_workload(str(tmp_path / "t"), cfg, tmp_path / "h")
    assert not check(result.history).valid
