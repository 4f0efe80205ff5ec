"""Interoperability with delta-rs (the ``deltalake`` package): each reads what the other writes."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from serialake.core import DeltaLog
from serialake.spark import read, write
from serialake.spark.data_write import write_data_files

deltalake = pytest.importorskip("deltalake")

pytestmark = [pytest.mark.spark, pytest.mark.interop]


def _norm(value: Any) -> Any:
    if isinstance(value, dt.datetime):  # Spark gives local naive time, delta-rs aware UTC
        aware = value if value.tzinfo else value.astimezone()
        return aware.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _key(row: dict[str, Any]) -> list[Any]:
    return [(v is not None, str(v)) for v in row.values()]


def spark_rows(df: DataFrame) -> list[dict[str, Any]]:
    return sorted(({k: _norm(v) for k, v in r.asDict().items()} for r in df.collect()), key=_key)


def rs_rows(path: str) -> list[dict[str, Any]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table()
    return sorted(({k: _norm(v) for k, v in r.items()} for r in table.to_pylist()), key=_key)


def test_delta_rs_reads_our_tables(spark: SparkSession, tmp_table: str) -> None:
    utc = dt.UTC
    data = [
        (1, "a b", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 8, 0, 0, 500000, tzinfo=utc), 1.5, True, 3),
        (2, None, dt.date(2024, 1, 2), None, None, False, None),
        (3, "x=y/%z", None, dt.datetime(2024, 2, 1, tzinfo=utc), -2.0, None, 3),
    ]
    schema = "id long, s string, d date, ts timestamp, f double, b boolean, p int"
    write(spark.createDataFrame(data, schema), tmp_table, partitionBy=["p", "s"])
    write(spark.createDataFrame([(4, "q", None, None, None, None, 4)], schema), tmp_table)
    ours = spark_rows(read(spark, tmp_table))
    assert len(ours) == 4
    assert rs_rows(tmp_table) == ours

    # Past a checkpoint (interval 10): delta-rs reads our checkpoint Parquet.
    log = DeltaLog.for_table(tmp_table)
    extra = spark.createDataFrame([(i, "c", None, None, None, None, 5) for i in range(10, 19)], schema)
    for add in write_data_files(extra.coalesce(1), tmp_table, ["p", "s"], max_records_per_file=1):
        log.start_transaction().commit([add], "WRITE", {"mode": "Append"})
    log.wait_for_checkpoints()
    assert os.path.exists(os.path.join(tmp_table, "_delta_log", "00000000000000000010.checkpoint.parquet"))
    write(spark.createDataFrame([(5, "a b", None, None, None, None, 3)], schema), tmp_table, mode="overwrite",
          replaceWhere="p = 3")
    ours = spark_rows(read(spark, tmp_table))
    assert len(ours) == 13 - 2 + 1
    assert rs_rows(tmp_table) == ours
    assert deltalake.DeltaTable(tmp_table).version() == DeltaLog.for_table(tmp_table).update().version


def test_we_read_and_append_to_delta_rs_tables(spark: SparkSession, tmp_table: str) -> None:
    first = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "name": pa.array(["a", None, "c"]),
            "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2), None], pa.date32()),
            "part": pa.array(["x y", "p=q%", None]),
        }
    )
    deltalake.write_deltalake(tmp_table, first, partition_by=["part"])
    deltalake.write_deltalake(tmp_table, first.slice(0, 1), mode="append", partition_by=["part"])
    assert spark_rows(read(spark, tmp_table)) == rs_rows(tmp_table)

    rs = deltalake.DeltaTable(tmp_table)
    rs.create_checkpoint()
    DeltaLog.clear_cache()
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.segment is not None and snap.segment.checkpoint is not None  # loaded from their checkpoint
    assert spark_rows(read(spark, tmp_table)) == rs_rows(tmp_table)
    assert len(read(spark, tmp_table, filter="part = 'x y'").inputFiles()) == 2

    more = spark.createDataFrame([(7, "g", dt.date(2024, 3, 1), "x y"), (8, None, None, "new")],
                                 "id long, name string, day date, part string")
    write(more, tmp_table)
    ours = spark_rows(read(spark, tmp_table))
    assert len(ours) == 6
    assert rs_rows(tmp_table) == ours
