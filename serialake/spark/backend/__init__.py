"""The one door to what a Spark session offers beyond PySpark's public DataFrame API.

serialake needs a few things from Spark that PySpark's public API does not give: an
analysed plan's facts (which marked scans it reads and under which filters, whether it is
deterministic, its size estimate, a filter's condition as SQL), Spark's parser, the
session's static configuration, Hadoop file systems, job tags and the status of tagged
jobs, Spark's streaming file sink. ``Backend`` lists them, named by what they do.

``backend(spark)`` is the implementation for a session: ``classic.Classic`` (py4j, over the
session's JVM: the only module of serialake that touches ``_jvm``, ``_jdf``, ``_jc``,
``sparkContext``..., checked by ``tests/spark/test_jvm_door.py``). A Spark Connect session
has no JVM handle: ``connect.Connect`` answers what the server's analysed plan and the client's
expression trees tell, and raises ``UnsupportedFeatureError`` naming the capability otherwise. Any
other kind of session gets ``Unsupported``, whose every capability raises that way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from serialake.spark.backend.classic import Classic, is_classic
from serialake.spark.backend.connect import Connect, is_connect
from serialake.spark.backend.interface import Backend, FileSink, MarkedRelation, ScanConjunct, Unsupported

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Backend", "FileSink", "MarkedRelation", "ScanConjunct", "Unsupported", "backend"]


def backend(spark: SparkSession) -> Backend:
    """The implementation of ``Backend`` for ``spark``'s kind of session."""
    if is_classic(spark):
        return Classic(spark)
    if is_connect(spark):
        return Connect(spark)
    return cast("Backend", Unsupported(spark))
