"""Shared fixtures: one SparkSession per test run, fresh table paths, a table catalog per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from peer.client import DeltaSparkPeer

_counter = itertools.count()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one local SparkSession of the test run (pyspark is imported only when needed)."""
    from serialake.spark.session import spark_session

    session = spark_session("serialake-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def delta_spark() -> Iterator[DeltaSparkPeer]:
    """delta-spark (4.4, in its own environment and JVM) as a reader and writer beside serialake.

    One worker process for the test run, started on first use and stopped by its process id;
    skipped, with the reason in one line, where ``make peer`` could not set it up.
    """
    from peer.client import DeltaSparkPeer, unavailable

    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    peer = DeltaSparkPeer().start()
    yield peer
    peer.stop()


@pytest.fixture(autouse=True)
def tmp_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh catalog file for the test (never the user's); in-process names are forgotten afterwards."""
    from serialake.core.tables import catalog

    path = tmp_path / "catalog" / "catalog.json"
    monkeypatch.setenv(catalog.CATALOG_ENV, str(path))
    yield path
    path.unlink(missing_ok=True)  # the test's own file; only in-process names remain
    for name in catalog.list_tables():
        catalog.unregister(name)


@pytest.fixture
def tmp_table(tmp_path: Path) -> str:
    """A fresh path (not yet created) for a table."""
    return str(tmp_path / f"table{next(_counter)}")
