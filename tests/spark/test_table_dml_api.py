"""The delta-spark-style DeltaTable methods run the DML layer (ported code changes only its import)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_delta_spark_style_chain(spark, tmp_table):
    import serialake
    from serialake import DeltaTable

    df = spark.createDataFrame([(i, i % 3, f"v{i}") for i in range(12)], "id long, p int, v string")
    serialake.write(df, tmp_table, partitionBy=["p"])
    t = DeltaTable.forPath(spark, tmp_table)
    assert t.delete("id = 0").collect()[0][0] == 1
    t.update("id = 1", {"v": "'one'"})
    src = spark.createDataFrame([(2, 2, "two"), (100, 1, "new")], "id long, p int, v string")
    (t.alias("t").merge(src.alias("s"), "t.id = s.id")
      .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    t.optimize().executeCompaction()
    t.addColumns("extra STRING")
    rows = {r.id: r.v for r in DeltaTable.forPath(spark, tmp_table).toDF().collect()}
    assert 0 not in rows and rows[1] == "one" and rows[2] == "two" and rows[100] == "new"
    assert len(rows) == 12
    ops = [r.operation for r in t.history().collect()]
    assert ops[:5] == ["ADD COLUMNS", "OPTIMIZE", "MERGE", "UPDATE", "DELETE"]
    t.restoreToVersion(0)
    assert DeltaTable.forPath(spark, tmp_table).toDF().count() == 12
    assert sorted(r.id for r in DeltaTable.forPath(spark, tmp_table).toDF().collect()) == list(range(12))
