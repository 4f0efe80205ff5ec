"""serialake writes each table feature; delta-spark reads the same rows, history and detail, then writes too.

The scenarios (``tests/peer/features.py``) hold what delta-spark gives for the same statements
on its own tables (``test_features_delta_spark_writes.py`` checks delta-spark against them), so
a serialake table must read, in both engines, as delta-spark's own would.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from peer.client import DeltaSparkPeer, PeerError
from serialake.core import DeltaLog
from tests.peer.features import (
    CLUSTERING,
    SCENARIOS,
    Scenario,
    assert_reading,
    checkpoint_due,
    checkpoint_shape,
    in_commit_timestamps,
    one_direction,
    operations,
    read_here,
    read_there,
    rows_here,
    run_here,
    run_there,
    same_reading,
    strip_log,
)

pytestmark = [pytest.mark.spark, pytest.mark.peer]


# Also run the other way in make test (test_features_delta_spark_writes.py); both ways in make verify.
SOAK_HERE = {"deletion-vectors", "checkpoints-v2", "clustering"}


@pytest.mark.parametrize("scenario", one_direction(SCENARIOS, SOAK_HERE))
def test_delta_spark_reads_and_writes_what_serialake_writes(
    spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_table: str, tmp_path: Path, scenario: Scenario
) -> None:
    run_here(spark, scenario.statements, tmp_table)
    feed = scenario.feed is not None
    ours = read_here(spark, tmp_table, scenario.versions, feed)
    same_reading(ours, read_there(delta_spark, tmp_table, scenario.versions, feed), scenario.ict_from)
    assert_reading(scenario, ours, tmp_table)

    if scenario.checkpoint is not None:
        # serialake writes classic checkpoints (also where delta.checkpointPolicy is v2: the protocol
        # allows V1-spec classic checkpoints there); delta-spark starts from one when the commits
        # before it are gone.
        DeltaLog.for_table(tmp_table).wait_for_checkpoints()
        version, shape = checkpoint_shape(tmp_table)
        assert shape == "classic" and version >= checkpoint_due(len(scenario.operations) - 1)
        stripped = str(tmp_path / "stripped")
        strip_log(tmp_table, stripped)
        assert delta_spark.rows(stripped) == rows_here(spark, stripped) == scenario.rows

    # delta-spark writes to serialake's table: appends and DML that must honour its features.
    run_there(delta_spark, scenario.then, tmp_table)
    if scenario.then_refused is not None:
        statement, message = scenario.then_refused
        with pytest.raises(PeerError, match=re.escape(message)):
            run_there(delta_spark, (statement,), tmp_table)
    assert delta_spark.rows(tmp_table) == rows_here(spark, tmp_table) == scenario.then_rows
    history = read_here(spark, tmp_table, [])
    assert operations(history) == [*scenario.operations, *scenario.then_operations]
    if scenario.ict_from is not None:  # delta-spark went on with increasing in-commit timestamps
        stamps = in_commit_timestamps(tmp_table)
        assert sorted(stamps) == list(range(scenario.ict_from, len(history["history"])))
        assert [stamps[v] for v in sorted(stamps)] == sorted(set(stamps.values()))
    if scenario.checkpoint is not None:  # delta-spark's checkpoint of serialake's table, in its policy's shape
        version, shape = checkpoint_shape(tmp_table)
        assert (version, shape) == (checkpoint_due(len(history["history"]) - 1), scenario.checkpoint)
        stripped = str(tmp_path / "stripped-again")
        strip_log(tmp_table, stripped)
        assert rows_here(spark, stripped) == delta_spark.rows(stripped) == scenario.then_rows


def test_a_clustered_table_gets_deletion_vectors_by_default_and_delta_spark_writes_through_them(
    spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_table: str
) -> None:
    """serialake turns deletion vectors on for a table created clustered (delta-spark does not, the
    ``clustering`` scenario sets them explicitly): the same statements without the property build
    the table that scenario describes, and delta-spark reads it and deletes through its vectors."""
    create, *rest = CLUSTERING.statements
    statements = (create.split(" TBLPROPERTIES")[0], *rest)
    assert "enableDeletionVectors" not in statements[0]
    run_here(spark, statements, tmp_table)
    ours = read_here(spark, tmp_table, CLUSTERING.versions)
    same_reading(ours, read_there(delta_spark, tmp_table, CLUSTERING.versions))
    assert_reading(CLUSTERING, ours, tmp_table)  # deletion vectors: property, reader 3, the feature
    run_there(delta_spark, ("INSERT INTO {t} VALUES (4, 'd', 0)", "DELETE FROM {t} WHERE id = 1"), tmp_table)
    snap = DeltaLog.for_table(tmp_table).update()
    assert any(f.deletion_vector is not None for f in snap.all_files)  # delta-spark marked the row
    run_here(spark, ("DELETE FROM {t} WHERE id = 3",), tmp_table)
    assert delta_spark.rows(tmp_table) == rows_here(spark, tmp_table) == [[2, "a", 2], [4, "d", 0]]


def test_shallow_and_deep_clones_of_a_serialake_table(
    spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_path: Path
) -> None:
    """delta-spark reads serialake's clones (shallow: the source's files and deletion vectors by
    absolute path) and writes to them; delta-spark itself makes only shallow ones
    (DELTA_UNSUPPORTED_DEEP_CLONE)."""
    source = str(tmp_path / "source")
    run_here(
        spark,
        (
            "CREATE TABLE {t} (id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            "INSERT INTO {t} SELECT /*+ REPARTITION(1) */ * FROM VALUES (1, 'a'), (2, 'b'), (3, 'c') AS v(id, v)",
            "DELETE FROM {t} WHERE id = 2",
            "INSERT INTO {t} VALUES (4, 'd')",
        ),
        source,
    )
    for kind in ("SHALLOW", "DEEP"):
        clone = str(tmp_path / kind)
        spark.sql(f"CREATE TABLE delta.`{clone}` {kind} CLONE delta.`{source}` VERSION AS OF 2")
        ours = read_here(spark, clone, [None])
        same_reading(ours, read_there(delta_spark, clone, [None]))
        assert ours["rows"] == [[[1, "a"], [3, "c"]]]
        # delta-spark records the source as delta.`file:/...`, serialake as given, and no isShallow.
        assert [h[:2] for h in ours["history"]] == [[0, "CLONE"]]
        assert ours["history"][0][2]["sourceVersion"] == "2"
        detail = ours["detail"]
        assert (detail["properties"], detail["minReaderVersion"], detail["minWriterVersion"]) == (
            {"delta.enableDeletionVectors": "true"}, 3, 7,
        )  # fmt: skip
        assert detail["tableFeatures"] == ["appendOnly", "deletionVectors", "invariants"]
        run_there(delta_spark, ("INSERT INTO {t} VALUES (5, 'e')", "DELETE FROM {t} WHERE id = 1"), clone)
        assert delta_spark.rows(clone) == rows_here(spark, clone) == [[3, "c"], [5, "e"]]
    assert delta_spark.rows(source) == rows_here(spark, source) == [[1, "a"], [3, "c"], [4, "d"]]


def test_uniform_tables_delta_side(spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_table: str) -> None:
    """A UniForm (Iceberg) table's Delta side: the protocol and properties delta-spark gives its own
    (which also carry its marker delta.universalFormat.iceberg.atomicConversion.supported)."""
    run_here(
        spark,
        (
            "CREATE TABLE {t} (id BIGINT, v STRING) USING delta "
            "TBLPROPERTIES ('delta.universalFormat.enabledFormats' = 'iceberg')",
            "INSERT INTO {t} VALUES (1, 'a'), (2, 'b')",
            "DELETE FROM {t} WHERE id = 1",
        ),
        tmp_table,
    )
    ours = read_here(spark, tmp_table, [None, 1])
    same_reading(ours, read_there(delta_spark, tmp_table, [None, 1]))
    assert ours["rows"] == [[[2, "b"]], [[1, "a"], [2, "b"]]]
    assert operations(ours) == ["CREATE TABLE", "WRITE", "DELETE"]
    detail = ours["detail"]
    assert detail["properties"] == {
        "delta.universalFormat.enabledFormats": "iceberg",
        "delta.enableIcebergCompatV2": "true",
        "delta.columnMapping.mode": "name",
        "delta.columnMapping.maxColumnId": "2",
    }
    assert (detail["minReaderVersion"], detail["minWriterVersion"]) == (2, 7)
    assert detail["tableFeatures"] == ["appendOnly", "columnMapping", "icebergCompatV2", "invariants"]
    run_there(delta_spark, ("INSERT INTO {t} VALUES (3, 'c')",), tmp_table)
    assert delta_spark.rows(tmp_table) == rows_here(spark, tmp_table) == [[2, "b"], [3, "c"]]
