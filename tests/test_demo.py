"""``serialake demo``: the commit gate (no Spark) and a smoke run of the whole demo."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata
from serialake.demo import LEVELS, ROUNDS, _Ticket, gated_commits, main
from serialake.exceptions import ConcurrentAppendException

SCHEMA = '{"type":"struct","fields":[{"name":"p","type":"integer","nullable":true,"metadata":{}}]}'


def _add(p: int, name: str) -> AddFile:
    return AddFile(path=f"p={p}/{name}.parquet", partition_values={"p": str(p)}, size=1, modification_time=0)


def test_commit_gate_holds_a_commit_until_released(tmp_path: Path) -> None:
    log = DeltaLog(str(tmp_path / "t"))
    txn = log.start_transaction()
    txn.update_metadata(
        Metadata(schema_string=SCHEMA, partition_columns=("p",), configuration={"delta.isolationLevel": "Serializable"})
    )
    txn.commit([_add(1, "a")], operation="CREATE TABLE")
    table = DeltaLog.for_table(log.table_path)
    errors: list[BaseException] = []
    with gated_commits(table.table_path) as gate:
        ticket = _Ticket("reader of p=1")
        held = table.start_transaction()
        held.filter_files(["p = 1"])

        def commit_held() -> None:
            gate.attach(ticket)
            try:
                held.commit([_add(2, "b")], operation="WRITE")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        thread = threading.Thread(target=commit_held)
        thread.start()
        assert ticket.arrived.wait(10)
        assert table.update().version == 0  # held before its commit file was written
        table.start_transaction().commit([_add(1, "c")], operation="WRITE")  # no ticket: passes at once
        ticket.release.set()
        thread.join(10)
    assert table.store is gate.inner  # restored
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentAppendException)
    assert errors[0].winning_version == 1


def test_rounds_cover_both_outcomes_at_each_level() -> None:
    for level in LEVELS:
        expected = [job.expected(level) for rnd in ROUNDS for job in rnd.jobs]
        assert "commit" in expected and any(e.endswith("Exception") for e in expected)
    r1 = ROUNDS[0].jobs
    assert {j.expected("WriteSerializable") for j in r1} == {"commit"}
    assert "ConcurrentAppendException" in {j.expected("Serializable") for j in r1}


def test_unknown_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--levels", "Snapshot"]) == 2
    assert "unknown level 'Snapshot'" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_demo_runs_and_every_outcome_is_the_expected_one(
    spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from serialake.demo import run_demo

    monkeypatch.setenv("SERIALAKE_CATALOG", str(tmp_path / "catalog.json"))
    console = Console(record=True, width=140)
    report = run_demo(spark, str(tmp_path / "demo"), console=console)  # type: ignore[arg-type]
    assert report.ok, [(o.level, o.job, o.result, o.expected) for o in report.outcomes if not o.as_expected]
    for level in LEVELS:
        mine = [o for o in report.outcomes if o.level == level]
        assert any(o.status == "committed" for o in mine) and any(o.status == "conflicted" for o in mine)
        assert len(report.history[level]) >= 10
    assert Path(report.timeline_png or "").stat().st_size > 10_000
    text = console.export_text()
    for word in ("ConcurrentAppendException", "ConcurrentDeleteDeleteException", "MetadataChangedException",
                 "Help:", "DESCRIBE HISTORY events", "Timeline", "STRICT SERIALIZABLE"):  # fmt: skip
        assert word in text
    assert [r["count"] for r in report.reads][1] == report.reads[0]["count"]  # SERIALIZABLE: cached snapshot
    assert report.reads[2]["count"] > report.reads[0]["count"]  # STRICT: sees the other process's commit
    reads = {r["read"]: r for r in report.multi_table}
    torn = reads["two separate reads, one after the other"]
    assert (torn["orders"], torn["shipments"]) == (0, 1)  # what per-table reads give
    assert reads["a write combining them"]["result"].startswith("refused")
    together = reads["serialake.read(spark, [orders, shipments])"]
    assert (together["orders"], together["shipments"]) == (1, 1)
    sql = reads["one serialake.sql query"]
    assert (sql["orders"], sql["shipments"]) == (1, 1)
    strict = reads["STRICT SERIALIZABLE: SELECT total FROM order_totals"]
    assert strict["total"] == 3 and strict["waitedS"] >= 1.0  # waited for the job, saw order 2
    serializable = reads["SERIALIZABLE: orders and order_totals together"]
    assert serializable["ordersSum"] == serializable["total"] == 3 and serializable["waitedS"] < 1.0
    assert not (tmp_path / "catalog.json").exists()  # the demo registers names in-process only
    json.dumps(report.to_dict(), default=str)
