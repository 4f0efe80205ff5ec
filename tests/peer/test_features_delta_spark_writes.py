"""delta-spark writes each table feature; serialake reads the same rows, history and detail, then writes too.

The same scenarios as ``test_features_serialake_writes.py`` (``tests/peer/features.py``), run by
delta-spark: what it gives here is what the scenarios hold, so serialake's tables are held to it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from peer.client import DeltaSparkPeer
from serialake.core import DeltaLog
from tests.peer.features import (
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

_PART_SIZE = "spark.databricks.delta.checkpoint.partSize"


def _multi_part(scenario: Scenario) -> Scenario:
    """``scenario`` with delta-spark writing multi-part checkpoints (one action a part); serialake
    never writes them, and delta-spark's classic single-file ones are read in the other file."""
    if scenario.checkpoint != "classic":
        return scenario
    statements = (f"SET {_PART_SIZE} = 1", *scenario.statements, f"RESET {_PART_SIZE}")
    return dataclasses.replace(scenario, statements=statements, checkpoint="multi-part")


# Also run the other way in make test (test_features_serialake_writes.py); both ways in make verify.
SOAK_HERE = {"change-data-feed", "ict-restore-vacuum"}


@pytest.mark.parametrize("scenario", one_direction([_multi_part(s) for s in SCENARIOS], SOAK_HERE))
def test_serialake_reads_and_writes_what_delta_spark_writes(
    spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_table: str, tmp_path: Path, scenario: Scenario
) -> None:
    run_there(delta_spark, scenario.statements, tmp_table)
    feed = scenario.feed is not None
    theirs = read_there(delta_spark, tmp_table, scenario.versions, feed)
    same_reading(read_here(spark, tmp_table, scenario.versions, feed), theirs, scenario.ict_from)
    assert_reading(scenario, theirs, tmp_table)

    if scenario.checkpoint is not None:  # multi-part or v2 (UUID-named, sidecars): serialake starts from it
        version, shape = checkpoint_shape(tmp_table)
        assert (version, shape) == (checkpoint_due(len(scenario.operations) - 1), scenario.checkpoint)
        stripped = str(tmp_path / "stripped")
        strip_log(tmp_table, stripped)
        assert rows_here(spark, stripped) == delta_spark.rows(stripped) == scenario.rows

    # serialake writes to delta-spark's table: appends and DML that must honour its features.
    run_here(spark, scenario.then, tmp_table)
    if scenario.then_refused is not None:
        statement, message = scenario.then_refused
        with pytest.raises(Exception, match=re.escape(message)):
            run_here(spark, (statement,), tmp_table)
    assert rows_here(spark, tmp_table) == delta_spark.rows(tmp_table) == scenario.then_rows
    history = read_here(spark, tmp_table, [])
    assert operations(history) == [*scenario.operations, *scenario.then_operations]
    if scenario.ict_from is not None:  # serialake went on with increasing in-commit timestamps
        stamps = in_commit_timestamps(tmp_table)
        assert sorted(stamps) == list(range(scenario.ict_from, len(history["history"])))
        assert [stamps[v] for v in sorted(stamps)] == sorted(set(stamps.values()))
    if scenario.checkpoint is not None:  # serialake's checkpoint of delta-spark's table: classic, any policy
        DeltaLog.for_table(tmp_table).wait_for_checkpoints()
        version, shape = checkpoint_shape(tmp_table)
        assert shape == "classic" and version >= checkpoint_due(len(history["history"]) - 1)
        stripped = str(tmp_path / "stripped-again")
        strip_log(tmp_table, stripped)
        assert delta_spark.rows(stripped) == rows_here(spark, stripped) == scenario.then_rows


def test_shallow_clone_of_a_delta_spark_table(spark: SparkSession, delta_spark: DeltaSparkPeer, tmp_path: Path) -> None:
    """serialake reads delta-spark's shallow clone (files and deletion vectors of another table,
    by absolute path) and writes to it, deletion vectors included."""
    source, clone = str(tmp_path / "source"), str(tmp_path / "clone")
    run_there(
        delta_spark,
        (
            "CREATE TABLE {t} (id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            "INSERT INTO {t} SELECT /*+ REPARTITION(1) */ * FROM VALUES (1, 'a'), (2, 'b'), (3, 'c') AS v(id, v)",
            "DELETE FROM {t} WHERE id = 2",
            "INSERT INTO {t} VALUES (4, 'd')",
            f"CREATE TABLE delta.`{clone}` SHALLOW CLONE {{t}} VERSION AS OF 2",
        ),
        source,
    )
    theirs = read_there(delta_spark, clone, [None])
    same_reading(read_here(spark, clone, [None]), theirs)
    assert theirs["rows"] == [[[1, "a"], [3, "c"]]]
    assert [h[:2] for h in theirs["history"]] == [[0, "CLONE"]]
    assert theirs["history"][0][2]["sourceVersion"] == "2"
    detail = theirs["detail"]
    assert (detail["properties"], detail["minReaderVersion"], detail["minWriterVersion"]) == (
        {"delta.enableDeletionVectors": "true"}, 3, 7,
    )  # fmt: skip
    run_here(spark, ("INSERT INTO {t} VALUES (5, 'e')", "DELETE FROM {t} WHERE id = 1"), clone)
    assert rows_here(spark, clone) == delta_spark.rows(clone) == [[3, "c"], [5, "e"]]
    assert rows_here(spark, source) == delta_spark.rows(source) == [[1, "a"], [3, "c"], [4, "d"]]
