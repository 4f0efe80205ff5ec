"""Writer processes for ``test_s3_many_writers``: one Spark application, or one delta-rs writer.

``python s3_writers.py spark|deltars URI WRITER BATCHES ROWS OUT.json``: appends BATCHES
batches of ROWS rows (``writer``, ``batch``, ``seq`` columns) to the S3 table at URI, then
writes what happened to OUT.json: per batch the committed version, or the error. The S3
endpoint and credentials come from the AWS environment variables. A Spark application
is a process with its own local SparkSession, as a job on another cluster would be; it
also runs a DELETE of its own first batch while the others append.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any


def _spark(uri: str, writer: str, batches: int, rows: int) -> list[dict[str, Any]]:
    import serialake
    from serialake.core import DeltaLog
    from serialake.spark.session import spark_session
    from serialake.spark.table import DeltaTable

    spark = spark_session(f"s3-writer-{writer}", master="local[1]", **{"spark.sql.shuffle.partitions": "1"})
    out: list[dict[str, Any]] = []
    try:
        for b in range(batches):
            df = spark.range(rows).selectExpr(f"'{writer}' AS writer", f"{b} AS batch", "id AS seq")
            try:
                version = serialake.write(df, uri, mode="append")
                out.append({"batch": b, "version": version})
            except Exception as e:  # noqa: BLE001 - reported to the test
                out.append({"batch": b, "error": f"{type(e).__name__}: {e}"})
        try:
            DeltaTable.forPath(spark, uri).delete(f"writer = '{writer}' AND batch = 0")
            info = DeltaLog.for_table(uri).update().version
            out.append({"delete": 0, "version": info})
        except Exception as e:  # noqa: BLE001
            out.append({"delete": 0, "error": f"{type(e).__name__}: {e}"})
    finally:
        spark.stop()
    return out


def _deltars(uri: str, writer: str, batches: int, rows: int) -> list[dict[str, Any]]:
    import os

    import deltalake
    import pyarrow as pa

    options = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    options["conditional_put"] = "etag"
    out: list[dict[str, Any]] = []
    for b in range(batches):
        table = pa.table({"writer": [writer] * rows, "batch": pa.array([b] * rows, pa.int32()),
                          "seq": pa.array(range(rows), pa.int64())})  # fmt: skip
        try:
            deltalake.write_deltalake(uri, table, mode="append", storage_options=options)
            out.append({"batch": b, "version": None})
        except Exception as e:  # noqa: BLE001
            out.append({"batch": b, "error": f"{type(e).__name__}: {e}"})
        time.sleep(0.05)
    return out


def main(argv: list[str]) -> None:
    kind, uri, writer, batches, rows, out_path = argv
    try:
        fn = _spark if kind == "spark" else _deltars
        result: dict[str, Any] = {"results": fn(uri, writer, int(batches), int(rows))}
    except Exception:  # noqa: BLE001
        result = {"crash": traceback.format_exc()}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
