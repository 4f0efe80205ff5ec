"""Shared fixtures: one SparkSession per test run, and fresh table paths."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_counter = itertools.count()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one local SparkSession of the test run (pyspark is imported only when needed)."""
    from serialake.spark.session import spark_session

    session = spark_session("serialake-tests")
    yield session
    session.stop()


@pytest.fixture
def tmp_table(tmp_path: Path) -> str:
    """A fresh path (not yet created) for a table."""
    return str(tmp_path / f"table{next(_counter)}")
