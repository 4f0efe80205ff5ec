"""The conflict matrix on delta-spark and on serialake, each alone (peer/parity.py, docs/parity.md).

One run of every cell on both engines; serialake must give the matrix's outcome in every
cell, every difference from delta-spark must have its note, and docs/parity.md must be what
this run generates.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from peer.client import ROOT, DeltaSparkPeer
from peer.parity import CELLS, Result, matches, render, run_parity

# Every run of every cell on both engines (~3 min): make verify runs it (pytest -m soak); make test has
# the mixed-writer pairs (test_mixed_writers.py), which hold delta-spark's outcomes to this document.
pytestmark = [pytest.mark.spark, pytest.mark.peer, pytest.mark.soak]

DOC = ROOT / "docs" / "parity.md"
REGENERATE = ".venv/bin/python -m peer.parity --out docs/parity.md"


@pytest.fixture(scope="module")
def results(spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_path_factory: pytest.TempPathFactory) -> list[Result]:
    return run_parity(spark, delta_spark, tmp_path_factory.mktemp("parity"))


def _where(r: Result) -> str:
    return f"{r.cell.section}/{r.cell.name} {r.level} {r.order}"


def test_serialake_gives_the_matrix_outcome_in_every_cell(results: list[Result]) -> None:
    wrong = [
        f"{_where(r)}: {r.serialake.text()} {r.serialake.detail} (expected {r.expected.text()})"
        for r in results
        if not matches(r.expected, r.serialake)
    ]
    assert not wrong, "serialake is off the matrix:\n" + "\n".join(wrong)


def test_delta_spark_ran_every_serializable_cell(results: list[Result]) -> None:
    """An error (rather than an outcome) would make the comparison meaningless."""
    broken = [f"{_where(r)}: {r.delta_spark.text()}" for r in results if r.delta_spark.rows_ok is None
              and not r.delta_spark.result.startswith("refused")]  # fmt: skip
    assert not broken, "\n".join(broken)
    assert all(r.delta_spark.rows_ok for r in results if r.delta_spark.rows_ok is not None)


def test_every_difference_has_its_note_and_every_note_a_difference(results: list[Result]) -> None:
    unexplained = [_where(r) for r in results if r.differ and r.why().startswith("(no note")]
    assert not unexplained, "differences without a note (Cell.why in peer/parity.py):\n" + "\n".join(unexplained)
    stale = [c.name for c in CELLS if c.why and not any(r.differ and r.cell is c and r.why() == c.why
                                                         for r in results)]  # fmt: skip
    assert not stale, f"notes on cells where the engines agree: {stale}"


def test_the_document_is_what_this_run_generates(results: list[Result], delta_spark: DeltaSparkPeer) -> None:
    fresh = render(results, delta_spark.versions)
    current = DOC.read_text() if DOC.exists() else ""
    if current != fresh:
        diff = "".join(
            difflib.unified_diff(
                current.splitlines(keepends=True), fresh.splitlines(keepends=True), "docs/parity.md", "this run"
            )
        )
        pytest.fail(f"docs/parity.md is out of date; regenerate it with `{REGENERATE}`:\n{diff}", pytrace=False)


def test_the_document_lists_every_cell() -> None:
    text = Path(DOC).read_text()
    for cell in CELLS:
        assert f"**{cell.name}**" in text, cell.name
