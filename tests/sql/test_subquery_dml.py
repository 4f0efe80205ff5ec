"""DELETE and UPDATE whose WHERE has subqueries (IN, NOT IN, EXISTS, correlated, scalar, reading
the target itself), through ``spark.sql`` after the session set-up.

Spark evaluates the condition with its tables read at the statement's consistent cut; the
transaction records those reads (``serialake.readTables`` in commitInfo for other tables, a
read of its own table for a self-referencing subquery); files are skipped by the conjuncts
without subqueries; conflicts are resolved by files, not rows, as the seed's limitations of
row-level concurrency say. Interleavings use the ``before_commit`` hook: two jobs planned
from one version, committed in both orders. delta-rs reads every result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from serialake.core import DeltaLog
from serialake.core.txn.transaction import READ_TABLES_KEY
from serialake.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException
from serialake.spark import dml
from serialake.spark.write import write
from serialake.sql.execute import _bound_condition
from serialake.sql.parser import parse_statement
from serialake.sql.statements import Delete, Update

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _table(spark: SparkSession, path: Path, sql: str, props: dict[str, str] | None = None) -> str:
    write(spark.sql(sql).coalesce(1), str(path), properties=props)
    return str(path)


def _ids(spark: SparkSession, path: str) -> list[int]:
    return sorted(r[0] for r in spark.read.format("delta").load(path).select("id").collect())


def _deltars_ids(path: str) -> list[int]:
    import deltalake

    return sorted(deltalake.DeltaTable(path).to_pyarrow_table()["id"].to_pylist())


def _commit_info(path: str) -> dict[str, Any]:
    log = DeltaLog.for_table(path)
    info = log.read_commit(log.update().version).commit_info
    assert info is not None
    return dict(info.values)


def test_subquery_conditions_give_sparks_answers(spark: SparkSession, tmp_path: Path) -> None:
    t = _table(spark, tmp_path / "t", "SELECT id, id % 2 AS p, 'v' AS s FROM range(12)")
    s = _table(spark, tmp_path / "s", "SELECT id FROM range(3, 6)")
    spark.sql(f"DELETE FROM delta.`{t}` WHERE id IN (SELECT id FROM delta.`{s}`)")
    assert _ids(spark, t) == [0, 1, 2, 6, 7, 8, 9, 10, 11]
    info = _commit_info(t)
    assert json.loads(info["operationParameters"]["predicate"]) == [f"id IN (SELECT id FROM delta.`{s}`)"]
    assert info[READ_TABLES_KEY] == [{"table": s, "version": 0}]  # the read of s is the transaction's

    # Correlated EXISTS through the target's alias; the SET value is computed per row.
    spark.sql(f"UPDATE delta.`{t}` AS x SET s = 'u' WHERE EXISTS (SELECT 1 FROM delta.`{s}` AS y "
              "WHERE y.id + 5 = x.id)")  # fmt: skip
    rows = {r.id: r.s for r in spark.read.format("delta").load(t).collect()}
    assert [i for i, v in sorted(rows.items()) if v == "u"] == [8, 9, 10]
    # A scalar subquery, a partition conjunct (files are skipped by it), NOT IN.
    spark.sql(f"DELETE FROM delta.`{t}` WHERE p = 0 AND id > (SELECT max(id) FROM delta.`{s}`) "
              f"AND id NOT IN (SELECT id + 5 FROM delta.`{s}`)")  # fmt: skip
    assert _ids(spark, t) == [0, 1, 2, 7, 8, 9, 10, 11]  # 6: even, above 5, not 8..10
    # A subquery reading the target itself: its read is a read of the table at that version.
    spark.sql(f"UPDATE delta.`{t}` SET id = -id WHERE id IN (SELECT id + 6 FROM delta.`{t}` WHERE id < 2)")
    assert _ids(spark, t) == [-7, 0, 1, 2, 8, 9, 10, 11]
    assert _deltars_ids(t) == [-7, 0, 1, 2, 8, 9, 10, 11]


def _planned(spark: SparkSession, statement: str, before_commit: Callable[[], Any]) -> Any:
    """Run a SQL DELETE / UPDATE with subqueries the way ``spark.sql`` does, with a hook before its commit."""
    st = parse_statement(statement)
    assert isinstance(st, (Delete, Update)) and st.where is not None and st.where.subquery
    path = st.table.path
    assert path is not None
    with _bound_condition(spark, st.where) as (condition, _):
        alias = st.alias or st.table.short_name
        if isinstance(st, Delete):
            return dml.run_delete(spark, path, condition, alias=alias, before_commit=before_commit)
        return dml.run_update(spark, path, condition, dict(st.assignments), alias=alias, before_commit=before_commit)


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_subquery_delete_and_an_append_in_both_orders(spark: SparkSession, tmp_path: Path, level: str) -> None:
    """Planned from one version: an append of rows the subquery condition may match conflicts with
    the DELETE under Serializable only when it commits first; the DELETE committing first never
    blocks the (blind) append."""
    props = {"delta.isolationLevel": level}
    t = _table(spark, tmp_path / "t", "SELECT id FROM range(10)", props)
    s = _table(spark, tmp_path / "s", "SELECT id FROM range(3, 5)")
    delete = f"DELETE FROM delta.`{t}` WHERE id IN (SELECT id FROM delta.`{s}`)"

    def append() -> None:
        spark.sql("SELECT 100 AS id").write.format("delta").mode("append").save(t)

    if level == "Serializable":
        with pytest.raises(ConcurrentAppendException):
            _planned(spark, delete, append)
        assert _ids(spark, t) == [*range(10), 100]
    else:
        _planned(spark, delete, append)
        assert _ids(spark, t) == [0, 1, 2, *range(5, 10), 100]

    # The other order: the DELETE commits first, the append (planned before it) commits after.
    t2 = _table(spark, tmp_path / "t2", "SELECT id FROM range(10)", props)
    log = DeltaLog.for_table(t2)
    txn = log.start_transaction()  # the append, planned from v0
    _planned(spark, delete.replace(t, t2), lambda: None)
    from serialake.spark.data_write import write_data_files

    adds = write_data_files(spark.sql("SELECT 100L AS id"), t2, [])
    txn.commit(adds, operation="WRITE")
    assert _ids(spark, t2) == [0, 1, 2, *range(5, 10), 100]


def test_subquery_delete_resolves_conflicts_by_files(spark: SparkSession, tmp_path: Path) -> None:
    """With deletion vectors (row-level concurrency), a plain DELETE and one with a subquery on
    other rows of the same file: the plain one commits whichever came first (it knows its rows);
    the subquery one, committing second, fails (its rows cannot be checked against the winner)."""
    props = {"delta.enableDeletionVectors": "true", "delta.isolationLevel": "WriteSerializable"}
    s = _table(spark, tmp_path / "s", "SELECT id FROM range(3, 5)")

    t = _table(spark, tmp_path / "t", "SELECT id FROM range(10)", props)
    with pytest.raises(ConcurrentDeleteReadException):
        _planned(spark, f"DELETE FROM delta.`{t}` WHERE id IN (SELECT id FROM delta.`{s}`)",
                 lambda: dml.run_delete(spark, t, "id = 8"))  # fmt: skip
    assert _ids(spark, t) == [*range(8), 9]

    t2 = _table(spark, tmp_path / "t2", "SELECT id FROM range(10)", props)
    sub = f"DELETE FROM delta.`{t2}` WHERE id IN (SELECT id FROM delta.`{s}`)"
    dml.run_delete(spark, t2, "id = 8", before_commit=lambda: _planned(spark, sub, lambda: None))
    assert _ids(spark, t2) == [0, 1, 2, 5, 6, 7, 9]
