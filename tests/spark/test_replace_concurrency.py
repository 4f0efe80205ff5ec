"""Concurrent CREATE OR REPLACE of one table: the loser gets ProtocolChangedException (seed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import SparkSession

import serialake
from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.exceptions import ProtocolChangedException
from tests.helpers import before_first_commit

pytestmark = pytest.mark.spark


def _builder(spark: SparkSession, path: str, column: str) -> Callable[[], Any]:
    return lambda: DeltaTable.createOrReplace(spark).location(path).addColumn(column, "BIGINT").execute()


def _sql(spark: SparkSession, path: str, column: str) -> Callable[[], Any]:
    return lambda: serialake.sql(spark, f"CREATE OR REPLACE TABLE delta.`{path}` ({column} BIGINT) USING delta")


def _ctas(spark: SparkSession, path: str, column: str) -> Callable[[], Any]:
    return lambda: serialake.sql(
        spark, f"CREATE OR REPLACE TABLE delta.`{path}` USING delta AS SELECT id AS {column} FROM range(3)"
    )


FORMS = {"builder": _builder, "sql": _sql, "ctas": _ctas}


@pytest.mark.parametrize("winner", list(FORMS))
@pytest.mark.parametrize("loser", list(FORMS))
def test_concurrent_create_or_replace(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch, winner: str, loser: str
) -> None:
    serialake.write(spark.range(2), tmp_table)  # the table exists: both replace it
    with before_first_commit(monkeypatch, FORMS[winner](spark, tmp_table, "w")):
        with pytest.raises(ProtocolChangedException) as e:
            FORMS[loser](spark, tmp_table, "l")()
    assert "created or replaced concurrently" in str(e.value)
    snap = DeltaLog.for_table(tmp_table).update()
    assert snap.version == 1 and list(snap.schema.field_names) == ["w"]


def test_replace_vs_plain_append_is_not_a_protocol_conflict(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append that meets a replacement keeps the metadata rule (the schema changed under it)."""
    serialake.write(spark.range(2), tmp_table)
    from serialake.exceptions import MetadataChangedException

    with before_first_commit(monkeypatch, _builder(spark, tmp_table, "w")):
        with pytest.raises(MetadataChangedException):
            serialake.write(spark.range(5, 7), tmp_table)
