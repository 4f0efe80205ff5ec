"""tests/sql/test_dropin.py again, its ``spark`` the Spark Connect client session (issue #43)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession


@pytest.fixture
def spark(connect_session: SparkSession, connect_mode: None) -> SparkSession:
    """The Connect client session, PySpark in Connect mode for the test."""
    return connect_session
