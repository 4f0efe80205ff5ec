"""Multi-table transactions checked: reads at a cut are strict serializable, per-table refreshes are caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from serialake.core import DeltaLog
from serialake.core.tables import derived
from serialake.verify.checker import SERIALIZABLE_FORBIDDEN, STRICT_SERIALIZABLE_FORBIDDEN, check
from serialake.verify.multitable import MultiTableConfig, create_tables, run_multitable
from serialake.verify.runner import run_verify

pytestmark = pytest.mark.concurrency


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "serializable"])
def test_reads_at_a_cut_are_valid(tmp_path: Path, strict: bool) -> None:
    result = run_multitable(tmp_path, MultiTableConfig(txns=120, strict=strict, seed=1, fsync=False))
    assert not result.crashed, result.crashed
    assert result.counts.get("reader:ok", 0) == 2 * 120
    assert result.counts.get("maintainer:ok", 0) > 10
    report = check(
        result.history,
        realtime=strict,
        forbidden=STRICT_SERIALIZABLE_FORBIDDEN if strict else SERIALIZABLE_FORBIDDEN,
    )
    assert report.valid, report.summary()


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "serializable"])
def test_per_table_refresh_is_caught(tmp_path: Path, strict: bool) -> None:
    """The negative control: the same readers without a cut give states that never existed."""
    for seed in range(3):  # likely, not certain, in one short run
        result = run_multitable(
            tmp_path / str(seed), MultiTableConfig(txns=80, strict=strict, control=True, seed=seed, fsync=False)
        )
        report = check(
            result.history,
            realtime=strict,
            forbidden=STRICT_SERIALIZABLE_FORBIDDEN if strict else SERIALIZABLE_FORBIDDEN,
        )
        if not report.valid:
            return
    pytest.fail("three runs of readers that refresh each table on its own were all found valid")


def test_tables_declare_the_derived_one(tmp_path: Path) -> None:
    paths = create_tables(tmp_path, fsync=False)
    d = DeltaLog.for_table(paths["d"]).update()
    assert derived.declared_sources(d) == [DeltaLog.for_table(paths["a"]).table_path]


def test_runner_reports_the_sections(tmp_path: Path) -> None:
    report = run_verify(
        2, 60, ["Serializable"], row_level=False, multi_table=True, control=True, workdir=str(tmp_path)
    )
    titles = [lv.title for lv in report.levels if lv.title]
    assert any("STRICT SERIALIZABLE reads" in t for t in titles)
    assert any("SERIALIZABLE reads" in t and "STRICT" not in t for t in titles)
    assert any("multi-table write transactions" in t for t in titles)
    assert len(report.multitable_controls) == 3  # two of the reads, one of the write transactions
    assert report.valid, report.render()
    assert "multi-table negative control" in report.render()
    assert "multi-table write negative control" in report.render()
