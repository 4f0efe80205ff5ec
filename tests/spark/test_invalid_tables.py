"""Spark refuses invalid tables: no read of a file outside the table, no write on top of them."""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.core.model.paths import absolute_path
from serialake.exceptions import InvalidTableError

pytestmark = pytest.mark.spark


def _files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}


def _append_commit(path: str, version: int, add: dict[str, Any]) -> None:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "w") as f:
        f.write(json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps({"add": add}) + "\n")


def test_spark_append_on_invalid_table_writes_nothing(spark: SparkSession, tmp_table: str) -> None:
    serialake.write(spark.createDataFrame([(1, 1)], "id long, grp long"), tmp_table, partitionBy="grp")
    _append_commit(tmp_table, 1, {"path": "grp=abc/x.parquet", "partitionValues": {"grp": "abc"}, "size": 1,
                                  "modificationTime": 1, "dataChange": True})
    before = _files(tmp_table)
    with pytest.raises(InvalidTableError, match="add.partitionValues.grp") as info:
        serialake.write(spark.createDataFrame([(2, 2)], "id long, grp long"), tmp_table, mode="append")
    assert info.value.version == 1
    assert _files(tmp_table) == before  # no commit, no data file
    with pytest.raises(InvalidTableError):
        serialake.read(spark, tmp_table).count()


def test_spark_read_refuses_a_path_outside_the_table(spark: SparkSession, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    serialake.write(spark.createDataFrame([(1,)], "id long"), table)
    outside = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"id": pa.array([42], pa.int64())}), outside)
    _append_commit(table, 1, {"path": "../secret.parquet", "partitionValues": {}, "size": outside.stat().st_size,
                              "modificationTime": 1, "dataChange": True})
    DeltaLog.clear_cache()
    with pytest.raises(InvalidTableError, match="add.path") as info:
        serialake.read(spark, table).collect()
    assert info.value.table == table and info.value.version == 1


def test_absolute_path_resolution() -> None:
    assert absolute_path("/t", "p=1/a%20b.parquet") == "/t/p=1/a b.parquet"
    assert absolute_path("/t", "p=1/../a.parquet") == "/t/a.parquet"
    assert absolute_path("/t", "/elsewhere/a.parquet") == "/elsewhere/a.parquet"
    assert absolute_path("/t", "file:///elsewhere/a.parquet") == "/elsewhere/a.parquet"
    for bad in ("../a.parquet", "%2E%2E/a.parquet", "p=1/../../a.parquet"):
        with pytest.raises(InvalidTableError, match="leaves the table directory"):
            absolute_path("/t", bad)
