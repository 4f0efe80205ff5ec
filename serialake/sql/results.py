"""Result DataFrames of statements, shaped as Delta's SQL returns them."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from serialake.core import DeltaLog

__all__ = ["empty", "metric", "rows"]


def metric(log: DeltaLog, version: int | None, key: str) -> int:
    """``operationMetrics[key]`` of commit ``version`` as an int (0 when absent)."""
    if version is None:
        return 0
    info = log.read_commit(version).commit_info
    metrics = info.values.get("operationMetrics", {}) if info is not None else {}
    try:
        return int(metrics.get(key, 0))
    except (TypeError, ValueError):
        return 0


def rows(spark: SparkSession, pairs: list[tuple[str, Any]]) -> DataFrame:
    """One row: ints (and None: a count not known) as BIGINT columns, anything else as STRING."""
    fields = [
        T.StructField(k, T.LongType() if v is None or isinstance(v, int) else T.StringType()) for k, v in pairs
    ]
    return spark.createDataFrame([tuple(v for _, v in pairs)], T.StructType(fields))


def empty(spark: SparkSession) -> DataFrame:
    """No columns, no rows: what DDL returns."""
    return spark.createDataFrame([], T.StructType([]))

