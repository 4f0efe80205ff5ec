"""MERGE declares the target rows it matched (issue #41), end to end with real Spark jobs.

On a table with deletion vectors (unpartitioned, or partitioned) a MERGE declares per candidate
file the rows some source row matched under its ON condition and the rows a clause changed, so
a concurrent change of other rows of the same file commits whatever the ON condition: an
equality, a Python UDF, a source computed by a subquery and an aggregate, a non-equi BETWEEN.
Rows a winner adds are checked against what the MERGE read (the target rows some source row
matches): on the driver where the ON condition allows, else by Spark on the winner's rows, so a
MERGE that inserted a source row still conflicts with a concurrent append of a row that source
row would have matched.

Each pair is planned from one version: the loser plans, its ``before_commit`` hook runs the
winner to completion, then the loser commits; both orders. Rows are checked exactly with
serialake and with delta-rs (its DataFusion scan applies deletion vectors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from serialake.core import DeltaLog
from serialake.core.dv.deletion_vectors import read_deletion_vector
from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
)
from serialake.spark import dml, read, write
from serialake.spark.dml import driver_merge
from serialake.spark.dml.engine import DML_MAX_BYTES_CONF

pytestmark = pytest.mark.spark

SCHEMA = "id long, p int, s string"
N = 12  # rows of the one shared data file (of partition p = 0 on the partitioned table)
LAYOUTS = ["unpartitioned", "partitioned"]
ORDERS = ["a_first", "b_first"]  # which of the pair commits first (runs inside the other's hook)
KINDS = ["equi", "udf", "subquery", "between"]
Row = tuple[int, int, str]
Op = Callable[[SparkSession, str, Any], Any]

# (ids the MERGE updates, id it inserts) for MERGE "a" and MERGE "b": disjoint rows of one file.
TOUCH = {
    "a": {"equi": [5], "udf": [5], "subquery": [5], "between": [4, 5]},
    "b": {"equi": [9], "udf": [9], "subquery": [9], "between": [9, 10]},
}
INSERT = {"a": 200, "b": 201}


@pytest.fixture(scope="module", autouse=True)
def _udfs(spark: SparkSession) -> None:
    # A Python UDF for the ON condition (self-contained: workers unpickle it without serialake).
    spark.udf.register("my_same", lambda a, b: a is not None and a == b, T.BooleanType())


@pytest.fixture
def on_spark(spark: SparkSession) -> Iterator[None]:
    """Every DML step on Spark (no driver path)."""
    spark.conf.set(DML_MAX_BYTES_CONF, "0")
    try:
        yield
    finally:
        spark.conf.unset(DML_MAX_BYTES_CONF)


def _make(spark: SparkSession, path: str, layout: str, level: str = "WriteSerializable") -> None:
    """One file of N rows (id i, p 0, s 's<i>') and one of ids 100..102 (p 1) the pairs never touch."""
    props = {"delta.enableDeletionVectors": "true", "delta.isolationLevel": level}
    rows = [(i, 0, f"s{i}") for i in range(N)]
    other = [(100 + i, 1, f"s{100 + i}") for i in range(3)]
    parts = ["p"] if layout == "partitioned" else None
    write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, partitionBy=parts, properties=props)
    write(spark.createDataFrame(other, SCHEMA).coalesce(1), path, mode="append")


def _expected(updated: dict[int, str] | None = None, extra: list[Row] = (), deleted: set[int] = frozenset()
              ) -> list[Row]:  # fmt: skip
    base = [(i, 0, f"s{i}") for i in range(N)] + [(100 + i, 1, f"s{100 + i}") for i in range(3)]
    rows = [(i, p, (updated or {}).get(i, s)) for i, p, s in base if i not in deleted]
    return sorted(rows + list(extra))


def _check(spark: SparkSession, path: str, want: list[Row]) -> None:
    """serialake and delta-rs read exactly ``want``."""
    from deltalake import DeltaTable as RsTable

    got = sorted(tuple(r) for r in read(spark, path).select("id", "p", "s").collect())
    assert got == want
    table = RsTable(path)
    assert "deletionVectors" in (table.protocol().reader_features or [])
    # delta-rs's pyarrow path refuses the deletionVectors reader feature; its DataFusion scan applies them.
    arrow = pa.RecordBatchReader.from_stream(table.scan()).read_all()
    theirs = sorted((r["id"], int(r["p"]), r["s"]) for r in arrow.select(["id", "p", "s"]).to_pylist())
    assert theirs == want


def _shared_file_vector(path: str) -> list[int]:
    """The deleted rows of the file holding ids 0..N-1."""
    snap = DeltaLog.for_table(path).update()
    (f,) = [f for f in snap.all_files if f.num_records == N]
    assert f.deletion_vector is not None
    return sorted(read_deletion_vector(path, f.deletion_vector))


def _version(path: str) -> int:
    return DeltaLog.for_table(path).update().version


def _source(spark: SparkSession, kind: str, ids: list[int], insert: int | None, tag: str) -> tuple[DataFrame, str]:
    """The MERGE source and ON condition of ``kind``, matching the target rows ``ids`` (and ``insert``
    matching none)."""
    keys = [*ids, *([insert] if insert is not None else [])]
    if kind == "between":
        ranges = [(min(ids), max(ids), tag)] + ([(insert, insert, tag)] if insert is not None else [])
        df = spark.createDataFrame(ranges, "lo long, hi long, v string")
        return df.alias("s"), "t.id BETWEEN s.lo AND s.hi"
    if kind == "subquery":
        values = ", ".join(f"({k}, '{tag}'), ({k}, '')" for k in keys)  # max(v) keeps the tag
        wanted = ", ".join(f"({k})" for k in keys)
        df = spark.sql(
            f"SELECT id, max(v) AS v FROM VALUES {values} AS x(id, v) "
            f"WHERE id IN (SELECT k FROM VALUES {wanted}, (-1) AS w(k)) GROUP BY id"
        )
        return df.alias("s"), "t.id = s.id"
    df = spark.createDataFrame([(k, tag) for k in keys], "id long, v string")
    return df.alias("s"), "my_same(t.id, s.id)" if kind == "udf" else "t.id = s.id"


def _lo(kind: str) -> str:
    return "s.lo" if kind == "between" else "s.id"


def _merge(kind: str, who: str, *, insert: bool = True, insert_id: int | None = None) -> Op:
    """MERGE ``who``: update its rows to s = who, insert its new row (p 0, s = who)."""
    ids = TOUCH[who][kind]
    new_id = insert_id if insert_id is not None else INSERT[who]

    def run(spark: SparkSession, path: str, hook: Any) -> Any:
        source, cond = _source(spark, kind, ids, new_id if insert else None, who)
        builder = dml.merge(spark, path, source, cond, alias="t").whenMatchedUpdate(set={"s": "s.v"})
        if insert:
            builder = builder.whenNotMatchedInsert(values={"id": _lo(kind), "p": "0", "s": "s.v"})
        return builder.run(before_commit=hook)

    return run


def _merge_rows(kind: str, ids: list[int], value: str, *, delete: bool = False) -> Op:
    def run(spark: SparkSession, path: str, hook: Any) -> Any:
        source, cond = _source(spark, kind, ids, None, value)
        builder = dml.merge(spark, path, source, cond, alias="t")
        builder = builder.whenMatchedDelete() if delete else builder.whenMatchedUpdate(set={"s": "s.v"})
        return builder.run(before_commit=hook)

    return run


def _update(cond: str, value: str) -> Op:
    return lambda spark, path, hook: dml.run_update(spark, path, cond, {"s": f"'{value}'"}, before_commit=hook)


def _pair(spark: SparkSession, path: str, a: Op, b: Op, order: str) -> None:
    """Plan the second committer, commit the first inside its hook, then commit the second."""
    first, second = (a, b) if order == "a_first" else (b, a)
    second(spark, path, lambda: first(spark, path, None))


# -- two MERGEs on different rows of one file ------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_merges_on_different_rows_of_one_file_both_commit(
    spark: SparkSession, tmp_table: str, layout: str, kind: str, order: str
) -> None:
    _make(spark, tmp_table, layout)
    v = _version(tmp_table)
    # A Python UDF cannot be an outer join's condition in Spark: that MERGE only updates.
    insert = kind != "udf"
    _pair(spark, tmp_table, _merge(kind, "a", insert=insert), _merge(kind, "b", insert=insert), order)
    assert _version(tmp_table) == v + 2
    touched = TOUCH["a"][kind] + TOUCH["b"][kind]
    assert _shared_file_vector(tmp_table) == sorted(touched)  # one vector: both MERGEs' rows
    updated = {i: who for who in "ab" for i in TOUCH[who][kind]}
    extra = [(INSERT["a"], 0, "a"), (INSERT["b"], 0, "b")] if insert else []
    _check(spark, tmp_table, _expected(updated, extra))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["equi", "between"])
def test_two_merges_on_different_rows_both_commit_on_spark(
    spark: SparkSession, tmp_table: str, kind: str, order: str, on_spark: None
) -> None:
    """The same with every step on Spark (the equality MERGE runs on the driver by default)."""
    _make(spark, tmp_table, "unpartitioned")
    v = _version(tmp_table)
    _pair(spark, tmp_table, _merge(kind, "a"), _merge(kind, "b"), order)
    assert _version(tmp_table) == v + 2
    updated = {i: who for who in "ab" for i in TOUCH[who][kind]}
    _check(spark, tmp_table, _expected(updated, [(INSERT["a"], 0, "a"), (INSERT["b"], 0, "b")]))


def test_driver_and_spark_declare_the_same_rows(spark: SparkSession, tmp_path: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """An insert-only MERGE (its matched rows change nothing) declares the rows it matched, on both paths."""
    declared: list[dict[int, list[int]]] = []
    real = OptimisticTransaction.record_matched_rows
    driver_runs: list[bool] = []
    real_execute = driver_merge.execute

    def spy(self: OptimisticTransaction, rows: Any) -> None:
        sizes = {self.read_files[p].num_records or 0: sorted(int(i) for i in r) for p, r in rows.items()}
        declared.append(sizes)
        real(self, rows)

    def execute(*args: Any, **kwargs: Any) -> Any:
        driver_runs.append(True)
        return real_execute(*args, **kwargs)

    monkeypatch.setattr(OptimisticTransaction, "record_matched_rows", spy)
    monkeypatch.setattr(driver_merge, "execute", execute)
    for engine in ("driver", "spark"):
        path = str(tmp_path / engine)
        _make(spark, path, "unpartitioned")
        source = spark.createDataFrame([(5, "x"), (7, "x"), (300, "x"), (101, "x")], "id long, v string").alias("s")
        if engine == "spark":
            spark.conf.set(DML_MAX_BYTES_CONF, "0")
        try:
            dml.merge(spark, path, source, "t.id = s.id", alias="t").whenNotMatchedInsert(
                values={"id": "s.id", "p": "1", "s": "s.v"}
            ).run()
        finally:
            spark.conf.unset(DML_MAX_BYTES_CONF)
    assert driver_runs == [True]  # the first ran on the driver, the second on Spark
    # Per candidate file (by its row count): the shared file's rows 5 and 7, the other file's row 1.
    assert declared == [{N: [5, 7], 3: [1]}, {N: [5, 7], 3: [1]}]


# -- the same row still conflicts --------------------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["equi", "udf"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_same_row_still_conflicts(spark: SparkSession, tmp_table: str, layout: str, kind: str, order: str) -> None:
    """Two MERGEs deleting row 5: the later one fails (delete-delete on the same row). Two updating it:
    the later one finds the row rewritten by the first (a new row its ON condition matches)."""
    _make(spark, tmp_table, layout)
    v = _version(tmp_table)
    with pytest.raises(ConcurrentDeleteDeleteException, match="same row"):
        _pair(spark, tmp_table, _merge_rows(kind, [5], "a", delete=True), _merge_rows(kind, [5], "b", delete=True),
              order)  # fmt: skip
    assert _version(tmp_table) == v + 1
    _check(spark, tmp_table, _expected(deleted={5}))
    with pytest.raises(ConcurrentAppendException):
        _pair(spark, tmp_table, _merge_rows(kind, [6], "a"), _merge_rows(kind, [6], "b"), order)
    assert _version(tmp_table) == v + 2
    _check(spark, tmp_table, _expected({6: "a" if order == "a_first" else "b"}, deleted={5}))


# -- NOT MATCHED INSERT depends on the absence of matches -------------------------------------------


def _append(row: Row) -> Callable[[SparkSession, str], Any]:
    return lambda spark, path: write(spark.createDataFrame([row], SCHEMA), path, mode="append")


@pytest.mark.parametrize("kind", ["equi", "subquery", "between"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_insert_conflicts_with_a_concurrent_append_it_would_have_matched(
    spark: SparkSession, tmp_table: str, layout: str, kind: str
) -> None:
    """Serializable: the MERGE inserted source row 200 because no target row matched it; a concurrent
    append of target row 200 changes that, so the MERGE fails. An append of a row no source row
    matches (checked on the winner's rows) lets it commit."""
    _make(spark, tmp_table, layout, "Serializable")
    v = _version(tmp_table)
    with pytest.raises(ConcurrentAppendException):
        _merge(kind, "a")(spark, tmp_table, lambda: _append((INSERT["a"], 0, "appended"))(spark, tmp_table))
    assert _version(tmp_table) == v + 1
    _check(spark, tmp_table, _expected(extra=[(INSERT["a"], 0, "appended")]))
    r = _merge(kind, "b")(spark, tmp_table, lambda: _append((300, 0, "appended"))(spark, tmp_table))
    assert r.version == v + 3
    updated = {i: "b" for i in TOUCH["b"][kind]}
    _check(spark, tmp_table, _expected(updated, [(INSERT["a"], 0, "appended"), (300, 0, "appended"),
                                                 (INSERT["b"], 0, "b")]))  # fmt: skip


@pytest.mark.parametrize("kind", ["equi", "between"])
def test_two_merges_inserting_the_same_new_key_conflict(spark: SparkSession, tmp_table: str, kind: str) -> None:
    """WriteSerializable too: the winner (not a blind append) inserted the row our insert relied on
    not finding; the rows each updates are different."""
    _make(spark, tmp_table, "unpartitioned")
    v = _version(tmp_table)
    with pytest.raises(ConcurrentAppendException):
        _pair(spark, tmp_table, _merge(kind, "a", insert_id=250), _merge(kind, "b", insert_id=250), "a_first")
    assert _version(tmp_table) == v + 1
    _check(spark, tmp_table, _expected({i: "a" for i in TOUCH["a"][kind]}, [(250, 0, "a")]))


def test_udf_merge_conflicts_with_a_concurrent_append_it_would_have_matched(
    spark: SparkSession, tmp_table: str
) -> None:
    """The ON condition is a Python UDF: Spark evaluates it on the winner's new rows."""
    _make(spark, tmp_table, "unpartitioned", "Serializable")
    v = _version(tmp_table)
    merge = _merge_rows("udf", [5, 150], "a")  # 150 matches no target row yet
    with pytest.raises(ConcurrentAppendException):
        merge(spark, tmp_table, lambda: _append((150, 0, "appended"))(spark, tmp_table))
    assert _version(tmp_table) == v + 1
    r = merge(spark, tmp_table, lambda: _append((300, 0, "appended"))(spark, tmp_table))
    assert r.version == v + 3
    _check(spark, tmp_table, _expected({5: "a"}, [(150, 0, "a"), (300, 0, "appended")]))


# -- matrix R6: MERGE touching rows of F, UPDATE of other rows of F ----------------------------------


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["equi", "udf", "between"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_merge_and_update_of_other_rows_of_one_file_both_commit(
    spark: SparkSession, tmp_table: str, layout: str, kind: str, order: str
) -> None:
    _make(spark, tmp_table, layout)
    v = _version(tmp_table)
    _pair(spark, tmp_table, _merge_rows(kind, TOUCH["a"][kind], "a"), _update("id = 9", "u"), order)
    assert _version(tmp_table) == v + 2
    assert _shared_file_vector(tmp_table) == sorted([*TOUCH["a"][kind], 9])
    _check(spark, tmp_table, _expected({**{i: "a" for i in TOUCH["a"][kind]}, 9: "u"}))
