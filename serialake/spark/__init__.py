"""The Spark side: sessions, writing and reading DataFrames, and the ``DeltaTable`` API.

Importing this package starts nothing; ``spark_session()`` creates (or reuses) a session.
"""

from __future__ import annotations

from serialake.spark.read import read
from serialake.spark.session import spark_session
from serialake.spark.table import DeltaTable, DeltaTableBuilder
from serialake.spark.write import write

__all__ = ["DeltaTable", "DeltaTableBuilder", "read", "spark_session", "write"]
