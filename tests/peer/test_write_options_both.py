"""delta-spark's write options and session settings, run as the same script in both engines.

Each case is Python a delta-spark user writes (``spark``, ``F``, ``args['path']``), run in
delta-spark's worker and in serialake's session on tables of their own; both must leave the same
rows, the same table properties and the same last operation, or refuse alike (the same Delta
error class). ``tests/sql/test_write_options.py`` holds the details (metrics, history
parameters, errors) of serialake's side.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from peer.client import DeltaSparkPeer, PeerError
from peer.plain import plain, plain_rows

pytestmark = [pytest.mark.spark, pytest.mark.peer]

# What both engines are compared on, after the case's script (with ``path`` its table).
OUTCOME = """
_detail = spark.sql("DESCRIBE DETAIL delta.`%s`" % args["path"]).collect()[0].asDict(recursive=True)
_last = spark.sql("DESCRIBE HISTORY delta.`%s` LIMIT 1" % args["path"]).collect()[0]
result = {
    "rows": rows(spark.read.format("delta").load(args["path"])),
    "properties": {k: v for k, v in (_detail["properties"] or {}).items()},
    "operation": _last.operation,
    "mode": (_last.operationParameters or {}).get("mode"),
}
"""

SETUP = """
def table(data, schema="id INT, v STRING", props=None, partition_by=()):
    w = spark.createDataFrame(data, schema).write.format("delta")
    for k, v in {**args.get("props", {}), **(props or {})}.items():
        w = w.option(k, v)
    if partition_by:
        w = w.partitionBy(*partition_by)
    w.save(args["path"])

def session(settings, body):
    keys = ["spark.databricks.delta." + k for k in settings]
    try:
        for k, v in zip(keys, settings.values()):
            spark.conf.set(k, v)
        body()
    finally:
        for k in keys:
            spark.conf.unset(k)
"""

CASES: dict[str, str] = {
    "replaceUsing": """
table([(1, "t1"), (1, "t2"), (2, "t"), (None, "tn")])
new = spark.createDataFrame([(1, "s"), (3, "s"), (None, "sn")], "id INT, v STRING")
new.write.format("delta").mode("overwrite").option("replaceUsing", "id").save(args["path"])
""",
    "replaceUsing, two columns, partitioned": """
table([(1, "a", "t"), (1, "b", "t"), (2, "a", "t")], "id INT, k STRING, v STRING", partition_by=["k"])
spark.createDataFrame([(1, "a", "s")], "id INT, k STRING, v STRING").write.format("delta") \\
    .mode("overwrite").option("replaceUsing", "id,k").save(args["path"])
""",
    "replaceOn with aliases, deletion vectors": """
table([(1, "t1"), (2, "t"), (None, "tn")], props={"delta.enableDeletionVectors": "true"})
new = spark.createDataFrame([(1, "s"), (3, "s"), (None, "sn")], "id INT, v STRING").alias("s")
new.write.format("delta").mode("overwrite").option("targetAlias", "t") \\
    .option("replaceOn", "t.id <=> s.id").save(args["path"])
""",
    "replaceOn, a condition on the target alone": """
table([(1, "a"), (2, "b"), (3, "c")])
new = spark.createDataFrame([(9, "z")], "id INT, v STRING")
new.write.format("delta").mode("overwrite").option("targetAlias", "t") \\
    .option("replaceOn", "t.id > 1").save(args["path"])
""",
    "replaceOn, an empty source": """
table([(1, "a"), (2, "b")])
new = spark.createDataFrame([], "id INT, v STRING").alias("s")
new.write.format("delta").mode("overwrite").option("targetAlias", "t") \\
    .option("replaceOn", "t.id = s.id").save(args["path"])
""",
    "replaceUsing in append mode": """
table([(1, "a")])
spark.createDataFrame([(1, "b")], "id INT, v STRING").write.format("delta").mode("append") \\
    .option("replaceUsing", "id").save(args["path"])
""",
    "session defaults for a new table": """
session(
    {"properties.defaults.enableDeletionVectors": "true", "properties.defaults.checkpointInterval": "7"},
    lambda: table([(1, "a")], props={"delta.checkpointInterval": "3"}),
)
""",
    "session defaults leave an existing table alone": """
table([(1, "a")])
session(
    {"properties.defaults.appendOnly": "true"},
    lambda: spark.createDataFrame([(2, "b")], "id INT, v STRING").write.format("delta")
    .mode("overwrite").option("overwriteSchema", "true").save(args["path"]),
)
""",
    "delta.* options on an existing table": """
table([(1, "a")], props={"delta.appendOnly": "true"})
spark.createDataFrame([(2, "b")], "id INT, v STRING").write.format("delta").mode("append") \\
    .option("delta.checkpointInterval", "4").save(args["path"])
""",
    "replaceWhere, the constraint check off": """
table([(1, "a"), (2, "b"), (3, "c")])
new = spark.createDataFrame([(1, "x"), (5, "y")], "id INT, v STRING")
session(
    {"replaceWhere.constraintCheck.enabled": "false"},
    lambda: new.write.format("delta").mode("overwrite").option("replaceWhere", "id <= 2").save(args["path"]),
)
""",
    "replaceWhere, the constraint check on": """
table([(1, "a"), (2, "b"), (3, "c")])
new = spark.createDataFrame([(1, "x"), (5, "y")], "id INT, v STRING")
new.write.format("delta").mode("overwrite").option("replaceWhere", "id <= 2").save(args["path"])
""",
    "replaceWhere on a partition column, dynamic overwrite off": """
table([(1, "a"), (2, "b"), (3, "c")], partition_by=["v"])
new = spark.createDataFrame([(7, "a"), (8, "b")], "id INT, v STRING")
session(
    {"dynamicPartitionOverwrite.enabled": "false"},
    lambda: new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic")
    .option("replaceWhere", "v = 'a' OR v = 'b'").save(args["path"]),
)
""",
    "dynamic partition overwrite": """
table([(1, "a"), (2, "b"), (3, "c")], partition_by=["v"])
spark.createDataFrame([(7, "a")], "id INT, v STRING").write.format("delta").mode("overwrite") \\
    .option("partitionOverwriteMode", "dynamic").save(args["path"])
""",
    "the table's directory removed, then written in errorifexists mode": """
import shutil
table([(1, "a")])
spark.read.format("delta").load(args["path"]).count()
shutil.rmtree(args["path"])
spark.createDataFrame([(2, "b")], "id INT, v STRING").write.format("delta").mode("errorifexists").save(args["path"])
""",
}

# delta-spark 4.4.0 fails a replaceUsing / replaceOn overwrite that must rewrite a file (a table
# without deletion vectors) with DELTA_FILE_TO_OVERWRITE_NOT_FOUND, naming the table's directory
# as the file (path and catalog tables alike). There serialake is held to what delta-spark
# gives for the same script on a table with deletion vectors (rows, operation, mode).
COPY_ON_WRITE_FAILS = {
    "replaceUsing", "replaceUsing, two columns, partitioned", "replaceOn, a condition on the target alone",
}  # fmt: skip
DVS = {"delta.enableDeletionVectors": "true"}

_ERROR_CLASS = re.compile(r"\b(DELTA_[A-Z_]+)\b")


def _outcome(run: Any) -> dict[str, Any]:
    """``run()``'s result, or the Delta error class it failed with."""
    try:
        return plain(run())  # type: ignore[no-any-return]
    except (PeerError, Exception) as e:  # noqa: BLE001 - compared by the error class the message names
        found = _ERROR_CLASS.search(str(e))
        return {"error": found.group(1) if found else f"{type(e).__name__}: {str(e)[:300]}"}


def _here(spark: SparkSession, code: str, path: str) -> dict[str, Any]:
    rows = lambda df: plain_rows(df.collect())  # noqa: E731
    scope: dict[str, Any] = {"spark": spark, "F": F, "args": {"path": path}, "rows": rows}
    exec(compile(SETUP + code + OUTCOME, "<case here>", "exec"), scope)
    return scope["result"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", list(CASES))
def test_the_same_script_leaves_the_same_table(
    spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_path: Path, name: str
) -> None:
    code = CASES[name]
    theirs = _outcome(lambda: delta_spark.run(SETUP + code + OUTCOME, path=str(tmp_path / "theirs")))
    ours = _outcome(lambda: _here(spark, code, str(tmp_path / "ours")))
    if name in COPY_ON_WRITE_FAILS:
        assert theirs == {"error": "DELTA_FILE_TO_OVERWRITE_NOT_FOUND"}, theirs  # when fixed: compare directly
        theirs = _outcome(lambda: delta_spark.run(SETUP + code + OUTCOME, path=str(tmp_path / "dvs"), props=DVS))
        theirs["properties"] = {k: v for k, v in theirs["properties"].items() if k not in DVS}
    assert ours == theirs
    assert "error" not in theirs or theirs["error"].startswith("DELTA_"), theirs  # a refusal, by class


def test_drop_of_a_managed_table_deletes_its_rows_in_both(spark: SparkSession, delta_spark: DeltaSparkPeer) -> None:
    """Re-running a script: DROP TABLE of a managed table, then CREATE of the same name, reads empty."""
    script = [
        "CREATE TABLE wo_managed (id INT) USING delta",
        "INSERT INTO wo_managed VALUES (1), (2)",
        "DROP TABLE wo_managed",
        "CREATE TABLE wo_managed (id INT) USING delta",
        "INSERT INTO wo_managed VALUES (3)",
    ]
    try:
        for statement in script:
            spark.sql(statement)
            delta_spark.sql(statement)
        assert plain_rows(spark.table("wo_managed").collect()) == delta_spark.sql("SELECT * FROM wo_managed") == [[3]]
    finally:
        spark.sql("DROP TABLE IF EXISTS wo_managed")
        delta_spark.sql("DROP TABLE IF EXISTS wo_managed")
