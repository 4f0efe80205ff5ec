"""Reads that feed a write are part of its transaction (issue: Serializable at the edges).

Every scan of a serialake table inside a DataFrame that feeds a write (a MERGE source, an
appended DataFrame, SQL subqueries) is found in the DataFrame's plan and recorded: as a
read of the target (predicate from the plan's filters, at the version the scan saw) or as
a version read of another table. Interleaving is deterministic: the operation plans, the
hook runs the other operation to completion right before the first commit, then it commits.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import serialake
from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.core.txn.transaction import READ_TABLES_KEY
from serialake.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException
from serialake.spark import scans
from tests.helpers import before_first_commit

pytestmark = pytest.mark.spark

D1, D2, D3 = "2024-01-01", "2024-01-02", "2024-01-03"
SCHEMA = "id long, date string"


def _table(spark: SparkSession, path: str, level: str = "Serializable") -> None:
    rows = [(1, D1), (2, D1), (3, D2), (4, D2)]
    serialake.write(
        spark.createDataFrame(rows, SCHEMA), path, partitionBy=["date"], properties={"delta.isolationLevel": level}
    )


def _rows(spark: SparkSession, path: str) -> list[tuple[int, str]]:
    return sorted((r["id"], r["date"]) for r in serialake.read(spark, path).collect())


def _commit_info(path: str, version: int) -> dict[str, Any]:
    info = DeltaLog.for_table(path).read_commit(version).commit_info
    assert info is not None
    return dict(info.values)


def _copy_sql(path: str, src: str, dst: str) -> str:
    """The seed's MERGE: copy partition ``src`` into ``dst`` (ids + 100), reading the target in its source."""
    return (
        f"MERGE INTO delta.`{path}` t USING (SELECT id + 100 AS id, '{dst}' AS date FROM delta.`{path}` "
        f"WHERE date = '{src}') s ON t.id = s.id AND t.date = '{dst}' WHEN NOT MATCHED THEN INSERT *"
    )


def _copy_python(spark: SparkSession, path: str, src: str, dst: str) -> Any:
    source = serialake.read(spark, path).where(f"date = '{src}'").select(
        (F.col("id") + 100).alias("id"), F.lit(dst).alias("date")
    )
    return (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(source.alias("s"), f"t.id = s.id AND t.date = '{dst}'")
        .whenNotMatchedInsertAll()
        .execute()
    )


# ---------------------------------------------------------------------------------------------
# 1. A MERGE whose source reads the target
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["sql", "python"])
def test_merge_whose_source_reads_the_target_conflicts(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """T1 copies D2 into D1, T2 copies D1 into D2, both planned at one version: only one commits."""
    _table(spark, tmp_table)

    def copy(src: str, dst: str) -> Any:
        if form == "sql":
            return serialake.sql(spark, _copy_sql(tmp_table, src, dst))
        return _copy_python(spark, tmp_table, src, dst)

    with before_first_commit(monkeypatch, lambda: copy(D1, D2)):
        with pytest.raises(ConcurrentAppendException) as e:
            copy(D2, D1)
    assert e.value.winning_version == 1 and e.value.partition == {"date": D2}
    # Exactly the serial state "T2 alone": D1 unchanged, D2 holds copies of D1.
    assert _rows(spark, tmp_table) == [(1, D1), (2, D1), (3, D2), (4, D2), (101, D2), (102, D2)]
    # The retry sees T2's rows: the serial order T2; T1.
    copy(D2, D1)
    assert _rows(spark, tmp_table) == sorted(
        [(1, D1), (2, D1), (3, D2), (4, D2), (101, D2), (102, D2), (103, D1), (104, D1), (201, D1), (202, D1)]
    )


def test_merge_source_read_of_another_partition_commits(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source's filter is the read: a concurrent insert into D3 touches neither side."""
    _table(spark, tmp_table)
    other = spark.createDataFrame([(9, D3)], SCHEMA)
    with before_first_commit(monkeypatch, lambda: serialake.write(other, tmp_table)):
        _copy_python(spark, tmp_table, D2, D1)
    assert (103, D1) in _rows(spark, tmp_table) and (9, D3) in _rows(spark, tmp_table)
    info = _commit_info(tmp_table, 2)
    assert info["operation"] == "MERGE" and info["isBlindAppend"] is False


# ---------------------------------------------------------------------------------------------
# 2. An append computed from its own target
# ---------------------------------------------------------------------------------------------


def _append_copy_of_d1(spark: SparkSession, path: str, df: Any = None) -> int | None:
    if df is None:
        df = serialake.read(spark, path).where(f"date = '{D1}'").withColumn("id", F.col("id") + 1000)
    return serialake.write(df, path, mode="append")


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
@pytest.mark.parametrize("when", ["during", "before"], ids=["insert-during-txn", "insert-after-read"])
def test_append_computed_from_target_is_not_blind(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch, level: str, when: str
) -> None:
    """A concurrent blind insert into the partition read fails it at Serializable only."""
    _table(spark, tmp_table, level)
    insert = spark.createDataFrame([(7, D1)], SCHEMA)
    copy = serialake.read(spark, tmp_table).where(f"date = '{D1}'").withColumn("id", F.col("id") + 1000)

    def run() -> int | None:
        if when == "before":  # the DataFrame was read at version 0; the insert lands before the write starts
            serialake.write(insert, tmp_table)
            return _append_copy_of_d1(spark, tmp_table, copy)
        with before_first_commit(monkeypatch, lambda: serialake.write(insert, tmp_table)):
            return _append_copy_of_d1(spark, tmp_table, copy)

    if level == "Serializable":
        with pytest.raises(ConcurrentAppendException) as e:
            run()
        assert e.value.partition == {"date": D1} and e.value.read_version == 0
        assert _rows(spark, tmp_table) == [(1, D1), (2, D1), (3, D2), (4, D2), (7, D1)]
    else:
        version = run()
        assert version == 2 and _commit_info(tmp_table, 2)["isBlindAppend"] is False
        assert (1001, D1) in _rows(spark, tmp_table) and (7, D1) in _rows(spark, tmp_table)


def test_append_from_target_vs_insert_elsewhere_commits(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _table(spark, tmp_table)
    insert = spark.createDataFrame([(8, D2)], SCHEMA)
    with before_first_commit(monkeypatch, lambda: serialake.write(insert, tmp_table)):
        assert _append_copy_of_d1(spark, tmp_table) == 2
    info = _commit_info(tmp_table, 2)
    assert info["isBlindAppend"] is False
    assert [r for r in _rows(spark, tmp_table) if r[0] > 1000] == [(1001, D1), (1002, D1)]


def test_append_from_target_vs_delete_of_a_file_read(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WriteSerializable too: a row the copy read was deleted meanwhile."""
    _table(spark, tmp_table, "WriteSerializable")
    delete = lambda: DeltaTable.forPath(spark, tmp_table).delete(f"date = '{D1}' AND id = 1")  # noqa: E731
    with before_first_commit(monkeypatch, delete):
        with pytest.raises((ConcurrentDeleteReadException, ConcurrentAppendException)):
            _append_copy_of_d1(spark, tmp_table)
    assert (1001, D1) not in _rows(spark, tmp_table)


def test_sql_and_python_appends_agree(spark: SparkSession, tmp_path: Any) -> None:
    """``INSERT INTO t SELECT ... FROM t WHERE`` and the DataFrame append record the same read."""
    sql_path, py_path = str(tmp_path / "sql"), str(tmp_path / "py")
    for p in (sql_path, py_path):
        _table(spark, p)
    serialake.sql(spark, f"INSERT INTO delta.`{sql_path}` SELECT id + 1000, date FROM delta.`{sql_path}` "
                         f"WHERE date = '{D1}'")  # fmt: skip
    _append_copy_of_d1(spark, py_path)
    infos = [_commit_info(p, 1) for p in (sql_path, py_path)]
    assert [i["isBlindAppend"] for i in infos] == [False, False]
    assert _rows(spark, sql_path) == _rows(spark, py_path)


def test_plain_append_stays_blind(spark: SparkSession, tmp_table: str) -> None:
    _table(spark, tmp_table)
    serialake.write(spark.createDataFrame([(5, D3)], SCHEMA), tmp_table)
    assert _commit_info(tmp_table, 1)["isBlindAppend"] is True


# ---------------------------------------------------------------------------------------------
# What the plan tells: predicates, versions, other tables, time travel
# ---------------------------------------------------------------------------------------------


def test_scan_predicates_from_the_plan(spark: SparkSession, tmp_table: str) -> None:
    _table(spark, tmp_table)
    t = serialake.read(spark, tmp_table)
    cases = {
        "filter then project": t.where(f"date = '{D1}'").select((F.col("id") * 2).alias("x")),
        "filter after rename": t.withColumnRenamed("date", "d").where(f"d = '{D1}'"),
        "inner join condition": t.alias("a").join(
            spark.range(3).alias("b"), (F.col("a.id") == F.col("b.id")) & (F.col("a.date") == D1)
        ),
        "aggregate then filter": t.groupBy("id").agg(F.max("date").alias("m")).where(f"m = '{D1}'"),
        "limit then filter": t.limit(1).where(f"date = '{D1}'"),
        "sql subquery": serialake.sql(
            spark, f"SELECT * FROM range(3) WHERE id IN (SELECT id FROM delta.`{tmp_table}` WHERE date = '{D2}')"
        ),
    }
    got = {name: [s.predicate_sql for s in scans.scans_of(df)] for name, df in cases.items()}
    assert got == {
        "filter then project": [f"date = '{D1}'"],
        "filter after rename": ["TRUE"],  # a renamed column is a new column: the read widens
        "inner join condition": [f"date = '{D1}'"],
        "aggregate then filter": ["TRUE"],
        "limit then filter": ["TRUE"],
        "sql subquery": [f"date = '{D2}'"],
    }


def test_reads_of_other_tables_and_time_travel_are_versions(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another table, and the target as of an older version: history, recorded in commitInfo only."""
    target, other = str(tmp_path / "target"), str(tmp_path / "other")
    _table(spark, target)
    _table(spark, other)
    serialake.write(spark.createDataFrame([(5, D1)], SCHEMA), target)  # target v1
    old = serialake.read(spark, target, version=0).where(f"date = '{D1}'").withColumn("id", F.col("id") + 500)
    src = serialake.read(spark, other).where(f"date = '{D2}'")
    insert = spark.createDataFrame([(6, D1)], SCHEMA)
    with before_first_commit(monkeypatch, lambda: serialake.write(insert, target)):
        version = serialake.write(old.unionByName(src), target)  # Serializable, yet no read of D1 now
    info = _commit_info(target, version)  # type: ignore[arg-type]
    assert info["isBlindAppend"] is True
    tables = {(r["table"], r["version"]) for r in info[READ_TABLES_KEY]}
    assert tables == {(DeltaLog.for_table(target).table_path, 0), (DeltaLog.for_table(other).table_path, 0)}
