"""The Spark list-append workload: appends computed from a DataFrame read of the target.

With read tracking the histories are VALID; without it (the negative control) the checker
must find the write skew and lost updates that blind copy-on-writes let through, so these
tests fail when read tracking breaks.
"""

from __future__ import annotations

import json
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from serialake.spark import scans
from serialake.verify import dataframes as dfw
from serialake.verify.checker import SERIALIZABLE_FORBIDDEN, STRICT_SERIALIZABLE_FORBIDDEN, check
from serialake.verify.history import Recorder
from serialake.verify.runner import main
from serialake.verify.workload import error_class

pytestmark = pytest.mark.spark

# Caught by the checker when reads of the target are not part of the write's transaction.
BLIND_WRITE_ANOMALIES = {"G2-item", "G-single", "lost-update", "incompatible-order"}


def test_crossed_appends_conflict_with_tracking_and_skew_without(spark: SparkSession, tmp_path: Path) -> None:
    """T1 reads k1 and appends to k0, T2 reads k0 and appends to k1; both read before either writes."""
    original = scans.record_scans
    for tracking in (True, False):
        table = str(tmp_path / f"t-{tracking}")
        dfw.create_table(spark, table, "Serializable")
        rec = Recorder()
        h1, h2 = rec.invoke(dfw.append_mops("k1", "k0", 1)), rec.invoke(dfw.append_mops("k0", "k1", 2), process=1)
        p1 = dfw.plan_append(spark, table, "k1", "k0", 1)
        p2 = dfw.plan_append(spark, table, "k0", "k1", 2)
        assert isinstance(p1, dfw.PlannedAppend) and isinstance(p2, dfw.PlannedAppend)
        with nullcontext() if tracking else dfw.read_tracking_off():
            r1, r2 = dfw.commit_append(p1), dfw.commit_append(p2)
        for h, r in ((h1, r1), (h2, r2)):
            rec.complete(h, r.outcome, r.mops, r.error, r.commit_version, r.attempts)  # type: ignore[arg-type]
        report = check(rec.history(), forbidden=SERIALIZABLE_FORBIDDEN)
        assert r1.outcome == "ok" and r1.commit_version == 1
        if tracking:
            assert r2.outcome == "fail" and error_class(r2.error) == "ConcurrentAppendException", r2
            assert report.valid, report.summary()
        else:
            assert r2.outcome == "ok" and r2.commit_version == 2
            assert "G2-item" in report.violations, report.summary()
    assert scans.record_scans is original  # restored


def test_valid_with_read_tracking(spark: SparkSession, tmp_path: Path) -> None:
    cfg = dfw.DataFrameConfig(threads=3, txns=5, key_count=2, seed=1)
    result = dfw.run_dataframe_workload(spark, str(tmp_path / "t"), cfg, tmp_path / "h")
    assert not [s.crashed for s in result.stats if s.crashed]
    history = result.history
    assert len(history) == cfg.threads * cfg.txns
    kinds = dfw.new_kind_counts(history)
    errors = Counter(error_class(t.error) for t in history if t.outcome == "fail")
    assert kinds["ok"] > 0 and kinds["info"] == 0, kinds
    assert errors["ConcurrentAppendException"] > 0, errors  # contention was real
    assert set(errors) <= {"ConcurrentAppendException", "ConcurrentDeleteReadException",
                           "ConcurrentDeleteDeleteException"}, errors  # fmt: skip
    report = check(history, realtime=True, process=True, forbidden=SERIALIZABLE_FORBIDDEN)
    assert report.valid, report.summary()
    assert not report.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN, report.summary()
    assert dfw.audit_table(result.table_path, history) == []


def test_control_without_read_tracking_is_caught(spark: SparkSession, tmp_path: Path) -> None:
    """Few keys, so crossed reads and stale copies are frequent; a few seeds at most."""
    original = scans.record_scans
    found: set[str] = set()
    for seed in range(3):
        cfg = dfw.DataFrameConfig(threads=3, txns=5, key_count=2, read_only_fraction=0.1, seed=seed)
        with dfw.read_tracking_off():
            result = dfw.run_dataframe_workload(spark, str(tmp_path / f"t{seed}"), cfg, tmp_path / f"h{seed}")
        assert scans.record_scans is original  # restored
        assert not [s.crashed for s in result.stats if s.crashed]
        found = set(check(result.history, forbidden=SERIALIZABLE_FORBIDDEN).violations)
        if found:
            break
    assert found & BLIND_WRITE_ANOMALIES, found


def test_runner_section(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``serialake verify --dataframes`` adds a checked section per level to the JSON report."""
    code = main([
        "--processes", "2", "--txns", "5", "--levels", "Serializable", "--crash-trials", "0", "--no-row-level",
        "--dataframes", "--df-threads", "2", "--df-txns", "2", "--workdir", str(tmp_path), "--json",
    ])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["valid"], out
    section = out["levels"][-1]
    assert section["level"].startswith("Serializable (Spark DataFrames")
    assert section["txns"] == 4 and section["valid"] and section["log_problems"] == []
