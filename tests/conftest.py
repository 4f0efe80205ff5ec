"""Shared fixtures: one SparkSession per test run, fresh table paths, a table catalog per test."""

from __future__ import annotations

import itertools
import os
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


@pytest.fixture(autouse=True)
def _spark_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """What a Spark test leaves in the one session goes with it, so the suite's memory stays flat.

    The test's own temporary views are dropped, cached data unpersisted and running streams stopped;
    a temporary view of serialake's own (``serialake.sql`` names its views with ``VIEW_PREFIX``) left
    behind fails the test. With ``SERIALAKE_TEST_MEMORY=<file>``, each Spark test appends the
    driver's heap in use after a full GC and the Python process's resident memory (MB) to the file.
    """
    if "spark" not in request.fixturenames:
        yield
        return
    spark = request.getfixturevalue("spark")
    before = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    yield
    from serialake.sql.tables import VIEW_PREFIX

    left = {t.name for t in spark.catalog.listTables() if t.isTemporary} - before
    for q in spark.streams.active:
        q.stop()
    for name in left:
        spark.catalog.dropTempView(name)
    spark.catalog.clearCache()
    ours = sorted(n for n in left if n.startswith(VIEW_PREFIX))
    assert not ours, f"serialake left its temporary views behind: {ours}"
    out = os.environ.get("SERIALAKE_TEST_MEMORY")
    if out:
        import gc

        gc.collect()
        jvm = spark.sparkContext._jvm
        jvm.java.lang.System.gc()
        runtime = jvm.java.lang.Runtime.getRuntime()
        heap = (runtime.totalMemory() - runtime.freeMemory()) >> 20
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
        with open(out, "a") as f:
            f.write(f"{request.node.nodeid},{heap},{rss}\n")
