"""The row-level workload with delta-spark writer processes among serialake's, through ``serialake verify``.

Valid when delta-spark appends with one MERGE (its read and write in one delta-spark
transaction); caught when its appends are a read followed by a blind UPDATE (the negative
control). Skipped, with the peer's one-line reason, where ``make peer`` could not set up
delta-spark.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from peer.client import VENV, unavailable
from serialake.verify.history import History
from serialake.verify.mixed import MixedAudit
from serialake.verify.runner import main

pytestmark = [pytest.mark.spark, pytest.mark.peer, pytest.mark.slow, pytest.mark.concurrency, pytest.mark.soak]

SERIALAKE_PROCESSES = 2
# Lost updates, and what they do to the reads that follow.
BLIND_WRITE_ANOMALIES = {"lost-update", "incompatible-order", "G-single", "G2-item", "G1c", "G0"}


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """One ``serialake verify`` run: the mixed section at Serializable and its negative control."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("mixed")
    argv = [
        "--processes", str(SERIALAKE_PROCESSES), "--txns", "400", "--levels", "Serializable", "--crash-trials", "0",
        "--control", "--delta-spark-python", str(VENV / "bin" / "python"), "--delta-spark-jars", str(VENV / "jars"),
        "--delta-spark-processes", "2", "--workdir", str(work), "--json", "--seed", "3",
    ]  # fmt: skip
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    (work / "report.json").write_text(buf.getvalue())
    report = json.loads(buf.getvalue())
    report["exit_code"] = code
    return report, work


def test_mixed_history_is_valid_and_the_log_audited(mixed_run: tuple[dict, Path]) -> None:
    report, _ = mixed_run
    (level,) = report["levels"]
    assert level["workers"] == "mixed" and level["delta_spark_processes"] == 2
    assert not level["worker_problems"], level["worker_problems"]
    assert level["checker_valid"], level["checker_summary"]
    assert level["log_problems"] == [], level["log_problems"]
    ds = level["delta_spark"]
    assert ds["append_txns"] > 0 and ds["read_only"] > 0, ds
    assert ds["committed"] > 0, ds  # delta-spark committed in the quiet parts of the pacing cycle
    assert ds["log_commits"]["delta-spark"] == ds["committed"], ds  # each commit exactly one MERGE's
    assert set(ds["aborted"]) <= {"ConcurrentAppendException", "ConcurrentDeleteReadException", "MissingKeyRow"}, ds
    assert ds["unknown"] == {}, ds
    assert level["valid"]


def test_blind_overwrites_are_caught(mixed_run: tuple[dict, Path]) -> None:
    report, _ = mixed_run
    control = report["control"]
    assert control["expect_invalid"] and control["delta_spark"]["committed"] > 0, control
    assert set(control["violations"]) & BLIND_WRITE_ANOMALIES, control["checker_summary"]
    assert control["valid"]  # caught: as it must be
    assert report["valid"] and report["exit_code"] == 0


def test_audit_ties_each_commit_to_its_engine(mixed_run: tuple[dict, Path]) -> None:
    """The same log, with a delta-spark MERGE's transaction claimed by a serialake process: the audit says so."""
    _, work = mixed_run
    section = work / "Serializable-mixed"
    history = History.merge(sorted((section / "history").glob("history-*.jsonl")))
    assert MixedAudit(SERIALAKE_PROCESSES)(str(section / "table"), history) == []
    i, t = next(
        (i, t) for i, t in enumerate(history)
        if t.process >= SERIALAKE_PROCESSES and t.outcome == "ok" and t.commit_version is not None
        and any(f == "append" for f, _, _ in t.mops)
    )  # fmt: skip
    forged = History([*history[:i], replace(t, process=0), *history[i + 1 :]])
    problems = MixedAudit(SERIALAKE_PROCESSES)(str(section / "table"), forged)
    assert any(f"version {t.commit_version} (delta-spark): written by delta-spark" in p for p in problems), problems


def test_the_options_go_together(tmp_path: Path) -> None:
    assert main(["--delta-spark-python", str(tmp_path / "python"), "--crash-trials", "0"]) == 2
    assert main(["--delta-spark-python", str(tmp_path / "python"), "--delta-spark-jars", str(tmp_path)]) == 2
