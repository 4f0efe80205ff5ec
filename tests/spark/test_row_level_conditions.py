"""Row-level concurrency with conditions the driver cannot evaluate (UDFs), end to end.

On an unpartitioned table with deletion vectors, DELETE / UPDATE declare the rows their
condition matched, so a concurrent deletion of other rows of the same file commits whatever
the condition; rows a winner adds are checked against the condition on the driver where it
can (three-valued: ``id = 5 AND my_udf(x)`` is FALSE on a row with id 7) and by Spark on
just the undecided rows otherwise. Interleaving uses the ``before_commit`` hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import read_deletion_vector
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
)
from serialake.spark import dml, read, write
from serialake.spark.dml.engines.spark import SparkEngine
from tests.spark.test_dml import SCHEMA, _base_rows, _make_table

pytestmark = pytest.mark.spark

N = 12  # rows of the one data file: id i, x = i * 10 (NULL when i % 7 == 0), s = 's<i>'

# The UDFs: small(v) is v < 1000, pick(v) is v == 5. Self-contained lambdas: Python workers
# unpickle them without importing this module (they may run an interpreter without serialake).
SMALL = lambda v: v is not None and v < 1000  # noqa: E731
PICK = lambda v: v == 5  # noqa: E731
small_udf = F.udf(lambda v: v is not None and v < 1000, T.BooleanType())  # SQL: <lambda>(x)
pick_udf = F.udf(lambda v: v == 5, T.BooleanType())


@pytest.fixture(scope="module", autouse=True)
def _udfs(spark: SparkSession) -> None:
    spark.udf.register("my_udf", SMALL, T.BooleanType())
    spark.udf.register("my_pick", PICK, T.BooleanType())


@pytest.fixture
def evaluations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[int]]]:
    """The rows each Spark fallback evaluation (conflict checks) was asked about."""
    calls: list[list[int]] = []
    real = SparkEngine.evaluate

    def spy(engine: SparkEngine, snap: Any, cond: Column, alias: str, add: Any, rows: Any) -> Any:
        calls.append(sorted(int(i) for i in rows) if rows is not None else [])
        return real(engine, snap, cond, alias, add, rows)

    monkeypatch.setattr(SparkEngine, "evaluate", spy)
    yield calls


def _table(spark: SparkSession, path: str, level: str) -> None:
    _make_table(spark, path, _base_rows(N), files=1,
                properties={"delta.enableDeletionVectors": "true", "delta.isolationLevel": level})


def _rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in read(spark, path).select("id", "x", "s").collect()), key=repr)


def _expected(drop: set[int] = frozenset(), extra: list[tuple[Any, ...]] = (), s: dict[int, str] | None = None
              ) -> list[tuple[Any, ...]]:  # fmt: skip
    base = [(i, x, (s or {}).get(i, name)) for i, _, _, x, name in _base_rows(N) if i not in drop]
    return sorted(base + list(extra), key=repr)


def _version(path: str) -> int:
    return DeltaLog.for_table(path).update().version


# The same condition as a SQL string with a registered UDF and as a Column with a Python UDF.
CONDITIONS: dict[str, Callable[[], str | Column]] = {
    "sql-and": lambda: "id = 5 AND my_udf(id)",
    "column-and": lambda: (F.col("id") == 5) & small_udf(F.col("id")),
    "sql-udf-only": lambda: "my_pick(id)",
    "column-udf-only": lambda: pick_udf(F.col("id")),
}
LEVELS = ["Serializable", "WriteSerializable"]


# -- (a) our UDF condition planned, a DELETE of another row of the file commits first ----------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cond", list(CONDITIONS))
def test_udf_delete_vs_concurrent_delete_of_another_row(
    spark: SparkSession, tmp_table: str, level: str, cond: str, evaluations: list[list[int]]
) -> None:
    _table(spark, tmp_table, level)
    r = dml.run_delete(spark, tmp_table, CONDITIONS[cond](),
                       before_commit=lambda: dml.run_delete(spark, tmp_table, "id = 9"))  # fmt: skip
    assert r.version == 2 and r.num_affected_rows == 1
    assert _rows(spark, tmp_table) == _expected({5, 9})
    (f,) = DeltaLog.for_table(tmp_table).update().all_files  # one vector holding both rows
    assert f.deletion_vector is not None and sorted(read_deletion_vector(tmp_table, f.deletion_vector)) == [5, 9]
    assert evaluations == []  # the declared matched rows decide: no Spark job at commit


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cond", ["sql-and", "column-udf-only"])
def test_udf_update_vs_concurrent_delete_of_another_row(
    spark: SparkSession, tmp_table: str, level: str, cond: str
) -> None:
    _table(spark, tmp_table, level)
    r = dml.run_update(spark, tmp_table, CONDITIONS[cond](), {"s": "'u'"},
                       before_commit=lambda: dml.run_delete(spark, tmp_table, "id = 9"))  # fmt: skip
    assert r.version == 2 and r.num_affected_rows == 1
    assert _rows(spark, tmp_table) == _expected({9}, s={5: "u"})


# -- (b) the other order: the UDF DELETE is the winner ------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("ours", ["id = 9", "id = 9 AND my_udf(id)", "my_pick(id - 4)"])
def test_delete_vs_concurrent_udf_delete_of_another_row(
    spark: SparkSession, tmp_table: str, level: str, ours: str
) -> None:
    _table(spark, tmp_table, level)
    r = dml.run_delete(spark, tmp_table, ours,
                       before_commit=lambda: dml.run_delete(spark, tmp_table, "id = 5 AND my_udf(id)"))  # fmt: skip
    assert r.version == 2 and r.num_affected_rows == 1
    assert _rows(spark, tmp_table) == _expected({5, 9})


# -- (c) a winner adds rows: the Spark fallback decides the ones the driver cannot ---------------

NEW_5_MATCHING = (5, "2010-01-02", "fr", 60, "new")  # id = 5 and small(x): satisfies the condition
NEW_5_NOT_MATCHING = (5, "2010-01-02", "fr", 5000, "new")  # id = 5 but not small(x)


def _append(spark: SparkSession, path: str, row: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: write(spark.createDataFrame([row], SCHEMA), path)


def _update_9_to(spark: SparkSession, path: str, x: int) -> Callable[[], Any]:
    return lambda: dml.run_update(spark, path, "id = 9", {"id": "5", "x": str(x), "s": "'new'"})


@pytest.mark.parametrize("cond", ["sql", "column"])
@pytest.mark.parametrize("winner", ["append", "update"])
def test_added_row_not_satisfying_the_udf_commits(
    spark: SparkSession, tmp_table: str, cond: str, winner: str, evaluations: list[list[int]]
) -> None:
    _table(spark, tmp_table, "Serializable")
    condition = "id = 5 AND my_udf(x)" if cond == "sql" else (F.col("id") == 5) & small_udf(F.col("x"))
    hook = _append(spark, tmp_table, NEW_5_NOT_MATCHING) if winner == "append" else _update_9_to(
        spark, tmp_table, 5000)
    r = dml.run_delete(spark, tmp_table, condition, before_commit=hook)
    assert r.version == 2
    gone = {5} if winner == "append" else {5, 9}
    assert _rows(spark, tmp_table) == _expected(gone, [(5, 5000, "new")])
    assert evaluations == [[0]]  # the driver could not decide the new row (id = 5, UDF): Spark did


@pytest.mark.parametrize("cond", ["sql", "column"])
@pytest.mark.parametrize("winner", ["append", "update"])
def test_added_row_satisfying_the_udf_conflicts(
    spark: SparkSession, tmp_table: str, cond: str, winner: str, evaluations: list[list[int]]
) -> None:
    _table(spark, tmp_table, "Serializable")
    condition = "id = 5 AND my_udf(x)" if cond == "sql" else (F.col("id") == 5) & small_udf(F.col("x"))
    hook = _append(spark, tmp_table, NEW_5_MATCHING) if winner == "append" else _update_9_to(spark, tmp_table, 60)
    with pytest.raises(ConcurrentAppendException):
        dml.run_delete(spark, tmp_table, condition, before_commit=hook)
    assert _version(tmp_table) == 1
    gone = set() if winner == "append" else {9}
    assert _rows(spark, tmp_table) == _expected(gone, [(5, 60, "new")])
    assert evaluations == [[0]]


def test_added_row_decided_on_the_driver_needs_no_spark(
    spark: SparkSession, tmp_table: str, evaluations: list[list[int]]
) -> None:
    _table(spark, tmp_table, "Serializable")
    # small(x), but id = 5 is FALSE on both rows: the condition is FALSE. One file whose id range
    # [3, 42] holds 5, so its stats do not rule it out: the driver decides on the rows.
    new = [(3, "2010-01-02", "fr", 60, "new"), (42, "2010-01-02", "fr", 60, "new")]
    r = dml.run_delete(spark, tmp_table, "id = 5 AND my_udf(x)",
                       before_commit=lambda: write(spark.createDataFrame(new, SCHEMA).coalesce(1), tmp_table))
    assert r.version == 2
    assert _rows(spark, tmp_table) == _expected({5}, [(3, 60, "new"), (42, 60, "new")])
    assert evaluations == []


def test_a_failing_fallback_keeps_the_conflict(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _table(spark, tmp_table, "Serializable")

    def broken(*args: Any) -> Any:
        raise RuntimeError("the evaluation job failed")

    monkeypatch.setattr(SparkEngine, "evaluate", broken)
    with pytest.raises(ConcurrentAppendException):
        dml.run_delete(spark, tmp_table, "id = 5 AND my_udf(x)",
                       before_commit=_append(spark, tmp_table, NEW_5_NOT_MATCHING))  # fmt: skip
    assert _rows(spark, tmp_table) == _expected(extra=[(5, 5000, "new")])


# -- (d) the same row: still a delete-delete conflict ------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("op", ["delete", "update"])
def test_udf_condition_and_a_concurrent_delete_of_the_same_row(
    spark: SparkSession, tmp_table: str, level: str, op: str
) -> None:
    _table(spark, tmp_table, level)
    hook = lambda: dml.run_delete(spark, tmp_table, "id = 5")  # noqa: E731
    with pytest.raises(ConcurrentDeleteDeleteException, match="same row"):
        if op == "delete":
            dml.run_delete(spark, tmp_table, "id = 5 AND my_udf(id)", before_commit=hook)
        else:
            dml.run_update(spark, tmp_table, "id = 5 AND my_udf(id)", {"s": "'u'"}, before_commit=hook)
    assert _version(tmp_table) == 1
    assert _rows(spark, tmp_table) == _expected({5})
