"""The delta-spark peer itself: the real delta-spark, its errors by class, its gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from peer.client import DeltaSparkPeer, PeerError

pytestmark = [pytest.mark.spark, pytest.mark.peer]


def test_the_peer_is_delta_spark_with_its_own_spark(delta_spark: DeltaSparkPeer, tmp_table: str) -> None:
    assert delta_spark.versions["delta"].startswith("4.")
    assert delta_spark.run("result = type(spark._jvm.io.delta.tables.DeltaTable).__name__") == "JavaClass"
    delta_spark.run("spark.range(3).write.format('delta').save(args['path'])", path=tmp_table)
    assert delta_spark.rows(tmp_table) == [[0], [1], [2]]
    assert delta_spark.history(tmp_table)[0]["operation"] == "WRITE"
    with pytest.raises(PeerError, match="PATH_NOT_FOUND"):
        delta_spark.rows(tmp_table + "-missing")


def test_a_gated_delta_spark_delete_commits_second(
    spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_table: str, tmp_path: Path
) -> None:
    """delta-spark pins its snapshot, waits at the gate while serialake commits, then fails
    its conflict check as the seeds' matrix says (DELETE after a concurrent DELETE of the same file)."""
    spark.range(10).coalesce(1).write.format("delta").save(tmp_table)
    gate = tmp_path / "gate"
    pending = delta_spark.submit_gated(
        "spark.sql(f\"DELETE FROM delta.`{args['path']}` WHERE id = 1 AND peer_gate(id)\")", gate, path=tmp_table
    )
    spark.sql(f"DELETE FROM delta.`{tmp_table}` WHERE id = 2")
    delta_spark.release(gate)
    with pytest.raises(PeerError) as failed:
        pending.result(timeout=120)
    assert failed.value.type == "ConcurrentAppendException", failed.value
    assert delta_spark.rows(tmp_table) == [[i] for i in range(10) if i != 2]
    assert [h["operation"] for h in delta_spark.history(tmp_table)] == ["DELETE", "WRITE"]


def test_a_commit_gated_delta_spark_optimize_commits_second(
    spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_table: str, tmp_path: Path
) -> None:
    """Any operation, here OPTIMIZE (no read to block): delta-spark has done all but put its
    commit file when serialake deletes from a file it compacts (the matrix's scenario 14).

    delta-spark records OPTIMIZE's inputs as files it read, so its check finds the removed file
    as a read one first: ConcurrentDeleteReadException, where the seeds' matrix (and serialake)
    say ConcurrentDeleteDeleteException (docs/parity.md)."""
    spark.range(20).repartition(4).write.format("delta").save(tmp_table)
    gate = tmp_path / "gate"
    pending = delta_spark.submit_commit_gated(
        "spark.sql(f\"OPTIMIZE delta.`{args['path']}`\")", tmp_table, gate, path=tmp_table
    )
    spark.sql(f"DELETE FROM delta.`{tmp_table}` WHERE id = 3")
    delta_spark.release(gate)
    with pytest.raises(PeerError) as failed:
        pending.result(timeout=120)
    assert failed.value.type == "ConcurrentDeleteReadException", failed.value
    assert delta_spark.rows(tmp_table) == [[i] for i in range(20) if i != 3]
    assert [h["operation"] for h in delta_spark.history(tmp_table)] == ["DELETE", "WRITE"]
    # The gate is spent: the next delta-spark commit goes straight through.
    delta_spark.sql(f"OPTIMIZE delta.`{tmp_table}`")
    assert [h["operation"] for h in delta_spark.history(tmp_table)][0] == "OPTIMIZE"
