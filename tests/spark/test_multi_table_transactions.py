"""Transactions across tables through Spark: ``serialake.transaction``, SQL BEGIN/COMMIT (#44)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.exceptions import (
    ConcurrentAppendException,
    DeltaConcurrentModificationException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
)
from serialake.spark import DeltaTable
from serialake.spark.streaming.batch_txn import BatchResetError
from serialake.spark.transaction import TransactionAbortedError

pytestmark = pytest.mark.spark


def _make(spark: SparkSession, path: str, ids: list[int]) -> str:
    spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, v string").write.format("delta").save(path)
    return path


def _ids(spark: SparkSession, path: str) -> list[int]:
    return sorted(r.id for r in spark.read.format("delta").load(path).collect())


def _parquet(path: str) -> set[str]:
    out = set()
    for root, _, files in os.walk(path):
        out |= {os.path.join(root, f) for f in files if f.endswith(".parquet")}
    return out


def _version(path: str) -> int:
    return DeltaLog.for_table(path).update().version


@pytest.fixture
def two(spark: SparkSession, tmp_path: Path) -> tuple[str, str]:
    return _make(spark, str(tmp_path / "a"), [1, 2]), _make(spark, str(tmp_path / "b"), [10])


def test_dataframe_writes_and_dml_commit_together(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    with serialake.transaction(spark) as tx:
        spark.createDataFrame([(3, "v3")], "id long, v string").write.format("delta").mode("append").save(a)
        serialake.write(spark.createDataFrame([(11, "v11")], "id long, v string"), b, mode="append")
        DeltaTable.forPath(spark, a).delete("id = 1")
        # nothing committed yet
        assert _version(a) == 0 and _version(b) == 0
    assert tx.result is not None
    assert _ids(spark, a) == [2, 3] and _ids(spark, b) == [10, 11]
    # one commit per table, each carrying the group record
    assert tx.result.versions == {DeltaLog.for_table(a).table_path: 2, DeltaLog.for_table(b).table_path: 2}
    hist = DeltaLog.for_table(a).history(1)
    assert hist[0][0] == 2


def test_exception_in_block_commits_nothing_and_deletes_files(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    before_a, before_b = _parquet(a), _parquet(b)
    with pytest.raises(RuntimeError, match="boom"), serialake.transaction(spark):
        spark.createDataFrame([(3, "v3")], "id long, v string").write.format("delta").mode("append").save(a)
        DeltaTable.forPath(spark, b).update("id = 10", {"v": "'x'"})
        assert len(_parquet(a)) > len(before_a)
        raise RuntimeError("boom")
    assert _version(a) == 0 and _version(b) == 0
    assert _parquet(a) == before_a and _parquet(b) == before_b
    assert _ids(spark, a) == [1, 2]


def test_rollback(spark: SparkSession, two: tuple[str, str]) -> None:
    a, _ = two
    with serialake.transaction(spark) as tx:
        spark.createDataFrame([(3, "v3")], "id long, v string").write.format("delta").mode("append").save(a)
        tx.rollback()
        assert _ids(spark, a) == [1, 2]  # reads after the rollback: the table as it is
        with pytest.raises(DeltaIllegalArgumentException, match="rolled back"):
            spark.createDataFrame([(4, "v4")], "id long, v string").write.format("delta").mode("append").save(a)
    assert _version(a) == 0 and _ids(spark, a) == [1, 2]


def test_reads_see_own_writes_and_compose(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    with serialake.transaction(spark):
        spark.createDataFrame([(3, "v3"), (4, "v4")], "id long, v string").write.format("delta").mode("append").save(a)
        assert spark.read.format("delta").load(a).count() == 4
        assert DeltaTable.forPath(spark, a).toDF().count() == 4
        # a second and third write to the same table build on the pending state
        DeltaTable.forPath(spark, a).delete("id = 3")
        DeltaTable.forPath(spark, a).update("id = 4", {"v": "'four'"})
        assert sorted((r.id, r.v) for r in spark.read.format("delta").load(a).collect()) == [
            (1, "v1"), (2, "v2"), (4, "four"),
        ]  # fmt: skip
        # the other table: its snapshot when first read, not changed by a commit from outside
        assert _ids(spark, b) == [10]
        DeltaLog.for_table(b)  # (outside writer below)
    assert sorted((r.id, r.v) for r in spark.read.format("delta").load(a).collect()) == [
        (1, "v1"), (2, "v2"), (4, "four"),
    ]  # fmt: skip
    assert _version(a) == 2  # the lock, then one body for the three writes
    assert DeltaLog.for_table(a).history(1)[0][1].commit_info.get("operation") == "TRANSACTION"


def test_other_tables_read_at_one_pinned_state(spark: SparkSession, two: tuple[str, str], tmp_path: Path) -> None:
    a, b = two
    out = _make(spark, str(tmp_path / "out"), [0])
    with pytest.raises(DeltaConcurrentModificationException) as err, serialake.transaction(spark, [a, b]):
        n_a = spark.read.format("delta").load(a).count()
        # another writer (another thread) appends to b after the cut: the block keeps reading b as pinned
        _outside(lambda: serialake.write(spark.createDataFrame([(12, "v12")], "id long, v string"), b, mode="append"))
        assert _version(b) == 1
        assert _ids(spark, b) == [10]
        n_b = spark.read.format("delta").load(b).count()
        spark.createDataFrame([(n_a + n_b, "sum")], "id long, v string").write.format("delta").mode(
            "append"
        ).save(out)
    # b was read (Serializable): the append to it after the read aborts the transaction
    assert DeltaLog.for_table(b).table_path in str(err.value)
    assert _ids(spark, out) == [0]


def test_tables_one_query_touches_first_are_pinned_at_one_cut(spark: SparkSession, two: tuple[str, str]) -> None:
    """A query reading two tables the block has not touched pins them together: a consistent cut,
    recorded in the ledger, which later reads in the block keep while the tables move."""
    from serialake.core.tables import cut

    a, b = two
    with serialake.transaction(spark) as tx:
        df = serialake.sql(spark, f"SELECT id FROM delta.`{a}` UNION ALL SELECT id FROM delta.`{b}`")
        assert df is not None
        rows = df.collect()
        pinned = {p: s.version for p, s in ((p, tx.snapshot_of(p)) for p in (a, b)) if s is not None}
        assert len(pinned) == 2
        assert cut.together({DeltaLog.for_table(p).table_path: v for p, v in pinned.items()})
        _outside(lambda: serialake.write(spark.createDataFrame([(12, "v12")], "id long, v string"), b, mode="append"))
        assert _ids(spark, b) == [10]  # still the pinned state
        tx.rollback()
    assert sorted(r.id for r in rows) == sorted(_ids(spark, a) + [10])


def _outside(fn: Callable[[], object]) -> None:
    """Run ``fn`` in another thread: outside the block's transaction."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    if errors:
        raise errors[0]


def test_write_skew_across_two_tables_refused(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    # T1 reads a and b, writes a; T2 reads a and b, writes b; T2 commits in between.
    tx1 = serialake.transaction(spark)
    with tx1:
        total = spark.read.format("delta").load(a).count() + spark.read.format("delta").load(b).count()
        def t2() -> None:
            with serialake.transaction(spark):
                n = spark.read.format("delta").load(a).count() + spark.read.format("delta").load(b).count()
                spark.createDataFrame([(100 + n, "t2")], "id long, v string").write.format("delta").mode(
                    "append"
                ).save(b)

        th = threading.Thread(target=t2)
        th.start()
        th.join()
        assert _version(b) == 2  # T2 committed (its lock, its body)
        spark.createDataFrame([(200 + total, "t1")], "id long, v string").write.format("delta").mode(
            "append"
        ).save(a)
        with pytest.raises(ConcurrentAppendException) as err:
            tx1.commit()
    assert DeltaLog.for_table(b).table_path in str(err.value)
    assert _ids(spark, a) == [1, 2]  # (lock commits of both transactions are empty)


def test_single_table_writer_racing_a_transaction(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    # blind appends on both sides: ordinary rules let both commit
    with serialake.transaction(spark):
        spark.createDataFrame([(3, "v3")], "id long, v string").write.format("delta").mode("append").save(a)
        spark.createDataFrame([(11, "v11")], "id long, v string").write.format("delta").mode("append").save(b)
        th = threading.Thread(
            target=lambda: serialake.write(spark.createDataFrame([(4, "v4")], "id long, v string"), a, mode="append")
        )
        th.start()
        th.join()
    assert _ids(spark, a) == [1, 2, 3, 4] and _ids(spark, b) == [10, 11]
    # a DELETE in the transaction reading rows a concurrent writer deleted: conflict
    with pytest.raises(DeltaConcurrentModificationException), serialake.transaction(spark):
        DeltaTable.forPath(spark, a).delete("id = 2")
        spark.createDataFrame([(12, "v12")], "id long, v string").write.format("delta").mode("append").save(b)
        th = threading.Thread(target=lambda: DeltaTable.forPath(spark, a).delete("id = 2"))
        th.start()
        th.join()
    assert _ids(spark, b) == [10, 11]


def test_refused_operations(spark: SparkSession, two: tuple[str, str], tmp_path: Path) -> None:
    a, _ = two
    with serialake.transaction(spark) as tx:
        with pytest.raises(DeltaIllegalArgumentException, match="OPTIMIZE"):
            DeltaTable.forPath(spark, a).optimize().executeCompaction()
        with pytest.raises(DeltaIllegalArgumentException, match="VACUUM"):
            DeltaTable.forPath(spark, a).vacuum()
        with pytest.raises(DeltaIllegalArgumentException, match="RESTORE"):
            spark.sql(f"RESTORE TABLE delta.`{a}` TO VERSION AS OF 0")
        with pytest.raises(DeltaIllegalArgumentException, match="ALTER TABLE|ADD COLUMNS"):
            spark.sql(f"ALTER TABLE delta.`{a}` ADD COLUMNS (w INT)")
        with pytest.raises(DeltaIllegalArgumentException, match="ALTER TABLE"):
            spark.sql(f"ALTER TABLE delta.`{a}` SET TBLPROPERTIES ('x' = 'y')")
        with pytest.raises(DeltaIllegalArgumentException, match="SET TBLPROPERTIES"):
            DeltaTable.forPath(spark, a).setTableProperties({"x": "y"})
        with pytest.raises(DeltaIllegalArgumentException, match="CREATE TABLE"):
            spark.sql(f"CREATE TABLE delta.`{tmp_path / 'c'}` (id LONG) USING delta")
        with pytest.raises(DeltaTableNotFoundError, match="create it before"):
            spark.createDataFrame([(1, "x")], "id long, v string").write.format("delta").save(str(tmp_path / "new"))
        tx.rollback()


def test_delta_rs_reads_both_tables_after_commit(spark: SparkSession, two: tuple[str, str]) -> None:
    deltalake = pytest.importorskip("deltalake")
    a, b = two
    with serialake.transaction(spark):
        spark.createDataFrame([(3, "v3")], "id long, v string").write.format("delta").mode("append").save(a)
        DeltaTable.forPath(spark, b).delete("id = 10")
        spark.createDataFrame([(13, "v13")], "id long, v string").write.format("delta").mode("append").save(b)
    ta, tb = deltalake.DeltaTable(a), deltalake.DeltaTable(b)
    assert sorted(ta.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
    assert sorted(tb.to_pyarrow_table().column("id").to_pylist()) == [13]
    assert ta.version() == 2 and tb.version() == 2  # the lock commit and the body


# -- SQL ------------------------------------------------------------------------------------


def test_sql_begin_commit(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    spark.sql("BEGIN TRANSACTION")
    try:
        spark.sql(f"INSERT INTO delta.`{a}` VALUES (3, 'v3')")
        spark.sql(f"DELETE FROM delta.`{b}` WHERE id = 10")
        assert spark.sql(f"SELECT count(*) AS n FROM delta.`{a}`").collect()[0].n == 3  # own write seen
        spark.sql(f"UPDATE delta.`{a}` SET v = 'three' WHERE id = 3")  # over the pending INSERT
        assert _version(a) == 0 and _version(b) == 0
    except BaseException:
        spark.sql("ROLLBACK")
        raise
    spark.sql("COMMIT")
    assert sorted((r.id, r.v) for r in spark.read.format("delta").load(a).collect()) == [
        (1, "v1"), (2, "v2"), (3, "three"),
    ]  # fmt: skip
    assert _ids(spark, b) == []


def test_sql_rollback_and_serialake_sql(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    before = _parquet(a)
    serialake.sql(spark, "BEGIN")
    serialake.sql(spark, f"INSERT INTO delta.`{a}` VALUES (3, 'v3')")
    serialake.sql(spark, f"MERGE INTO delta.`{b}` t USING (SELECT 10 AS id) s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET v = 'm'")  # fmt: skip
    serialake.sql(spark, "ROLLBACK")
    assert _version(a) == 0 and _version(b) == 0 and _parquet(a) == before
    with pytest.raises(DeltaIllegalArgumentException, match="no transaction is open"):
        spark.sql("COMMIT")


def test_sql_error_aborts_the_transaction(spark: SparkSession, two: tuple[str, str]) -> None:
    a, _ = two
    spark.sql("BEGIN")
    spark.sql(f"INSERT INTO delta.`{a}` VALUES (3, 'v3')")
    with pytest.raises(Exception):  # noqa: B017,PT011 - whatever the statement's error
        spark.sql(f"INSERT INTO delta.`{a}` SELECT no_such_column")
    with pytest.raises(TransactionAbortedError):
        spark.sql(f"INSERT INTO delta.`{a}` VALUES (4, 'v4')")
    with pytest.raises(TransactionAbortedError):
        spark.sql("COMMIT")
    spark.sql("ROLLBACK")
    assert _version(a) == 0


def test_sql_begin_atomic(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    spark.sql(f"""BEGIN ATOMIC
        INSERT INTO delta.`{a}` VALUES (3, 'v3');
        UPDATE delta.`{b}` SET v = CASE WHEN id = 10 THEN 'ten' ELSE v END;
    END;""")
    assert _ids(spark, a) == [1, 2, 3]
    assert [r.v for r in spark.read.format("delta").load(b).collect()] == ["ten"]
    with pytest.raises(Exception):  # noqa: B017,PT011
        spark.sql(f"""BEGIN ATOMIC
            INSERT INTO delta.`{a}` VALUES (4, 'v4');
            DELETE FROM delta.`{b}` WHERE no_such_column = 1;
        END""")
    assert _ids(spark, a) == [1, 2, 3]


# -- streaming: several tables per batch, once ------------------------------------------------


def _two_table_batch(a: str, b: str) -> Callable[[DataFrame, int], None]:
    def fn(batch_df: DataFrame, batch_id: int) -> None:
        with serialake.transaction(batch_df.sparkSession):
            batch_df.write.format("delta").mode("append").save(a)
            DeltaTable.forPath(batch_df.sparkSession, b).delete(f"id = {10 + batch_id}")
            batch_df.selectExpr("id + 100 AS id", "v").write.format("delta").mode("append").save(b)

    return fn


def test_idempotent_batch_writes_several_tables_once(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    fn = serialake.streaming.idempotent(_two_table_batch(a, b), app_id="q")
    batch = spark.createDataFrame([(5, "v5")], "id long, v string")
    fn(batch, 0)
    va, vb = _version(a), _version(b)
    assert _ids(spark, a) == [1, 2, 5] and _ids(spark, b) == [105]
    snap_a, snap_b = DeltaLog.for_table(a).update(), DeltaLog.for_table(b).update()
    assert snap_a.txn_version("q") == 0 and snap_b.txn_version("q") == 0
    fn(batch, 0)  # replayed after a crash: nothing is written
    assert (_version(a), _version(b)) == (va, vb)
    assert _ids(spark, a) == [1, 2, 5] and _ids(spark, b) == [105]
    fn(spark.createDataFrame([(6, "v6")], "id long, v string"), 1)
    assert _ids(spark, a) == [1, 2, 5, 6] and _ids(spark, b) == [105, 106]


def test_idempotent_checkpoint_reset_fails_loudly_unless_skipped(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    batch = spark.createDataFrame([(5, "v5")], "id long, v string")
    serialake.streaming.idempotent(_two_table_batch(a, b), app_id="q")(batch, 3)
    before = (_version(a), _version(b))
    with pytest.raises(BatchResetError, match="batch 3"):
        serialake.streaming.idempotent(_two_table_batch(a, b), app_id="q")(batch, 0)
    assert (_version(a), _version(b)) == before
    serialake.streaming.idempotent(_two_table_batch(a, b), app_id="q", failOnReset=False)(batch, 0)
    assert (_version(a), _version(b)) == before


def test_deletion_vectors_compose_in_one_transaction(spark: SparkSession, tmp_path: Path) -> None:
    a = str(tmp_path / "dv")
    serialake.write(
        spark.createDataFrame([(i, f"v{i}") for i in range(6)], "id long, v string").coalesce(1), a,
        properties={"delta.enableDeletionVectors": "true"},
    )  # fmt: skip
    b = _make(spark, str(tmp_path / "other"), [10])
    with serialake.transaction(spark):
        DeltaTable.forPath(spark, a).delete("id = 1")
        DeltaTable.forPath(spark, a).delete("id = 2")  # the vector replaces the block's first one
        spark.sql(f"UPDATE delta.`{a}` SET v = 'x' WHERE id = 3")
        assert _ids(spark, a) == [0, 3, 4, 5]
        spark.createDataFrame([(11, "v11")], "id long, v string").write.format("delta").mode("append").save(b)
    assert sorted((r.id, r.v) for r in spark.read.format("delta").load(a).collect()) == [
        (0, "v0"), (3, "x"), (4, "v4"), (5, "v5"),
    ]  # fmt: skip
    dv_files = [f for f in os.listdir(a) if f.startswith("deletion_vector_")]
    live = {f.deletion_vector.path_or_inline_dv for f in DeltaLog.for_table(a).update().all_files if f.deletion_vector}
    assert len(dv_files) == len(live)  # the replaced vectors are gone


def test_table_names_insert_into_and_write_to(spark: SparkSession, tmp_path: Path) -> None:
    spark.createDataFrame([(1, "v1")], "id long, v string").write.format("delta").option(
        "path", str(tmp_path / "ta")
    ).saveAsTable("tx_ta")
    spark.createDataFrame([(10, "v10")], "id long, v string").write.format("delta").option(
        "path", str(tmp_path / "tb")
    ).saveAsTable("tx_tb")
    with serialake.transaction(spark):
        spark.createDataFrame([(2, "v2")], "id long, v string").write.insertInto("tx_ta")
        spark.createDataFrame([(11, "v11")], "id long, v string").writeTo("tx_tb").append()
        spark.createDataFrame([(3, "v3")], "id long, v string").write.format("delta").mode("append").saveAsTable(
            "tx_ta"
        )
        assert spark.table("tx_ta").count() == 3
        assert spark.sql("SELECT count(*) AS n FROM tx_tb").collect()[0].n == 2
        assert _version(str(tmp_path / "ta")) == 0
    assert sorted(r.id for r in spark.table("tx_ta").collect()) == [1, 2, 3]
    assert sorted(r.id for r in spark.table("tx_tb").collect()) == [10, 11]


def test_parse_transaction_statements() -> None:
    from serialake.sql import parse_statement
    from serialake.sql import statements as S

    for text, kind in [
        ("BEGIN", S.BeginTransaction), ("begin transaction;", S.BeginTransaction), ("BEGIN WORK", S.BeginTransaction),
        ("START TRANSACTION", S.BeginTransaction), ("COMMIT", S.CommitTransaction),
        ("COMMIT WORK;", S.CommitTransaction), ("ROLLBACK TRANSACTION", S.RollbackTransaction),
    ]:  # fmt: skip
        assert isinstance(parse_statement(text), kind), text
    st = parse_statement("""-- one transaction
        BEGIN ATOMIC
          UPDATE t SET v = CASE WHEN id = 1 THEN 'a' ELSE v END WHERE id > 0;
          DELETE FROM u WHERE id = 2;
        END;""")
    assert isinstance(st, S.Atomic)
    assert [type(s) for s in st.statements] == [S.Update, S.Delete]


def test_schema_evolution_in_a_transaction(spark: SparkSession, two: tuple[str, str]) -> None:
    a, b = two
    with serialake.transaction(spark):
        spark.createDataFrame([(3, "v3", 1.5)], "id long, v string, w double").write.format("delta").mode(
            "append"
        ).option("mergeSchema", "true").save(a)
        assert spark.read.format("delta").load(a).columns == ["id", "v", "w"]
        DeltaTable.forPath(spark, a).update("id = 1", {"w": "2.5"})  # over the evolved pending schema
        DeltaTable.forPath(spark, b).delete("id = 10")
    assert sorted((r.id, r.w) for r in spark.read.format("delta").load(a).collect()) == [
        (1, 2.5), (2, None), (3, 1.5),
    ]  # fmt: skip
    assert _ids(spark, b) == []


def test_merge_in_a_transaction_beside_an_update_of_another_row_both_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Row-level concurrency inside a group: a MERGE in a block (its ON condition a Python UDF the
    driver cannot evaluate) and a concurrent UPDATE of another row of the same file both commit;
    the group's check evaluates the MERGE's read on the winner's rows."""
    from pyspark.sql import types as T

    spark.udf.register("tx_same", lambda x, y: x is not None and x == y, T.BooleanType())
    a = str(tmp_path / "dv")
    serialake.write(
        spark.createDataFrame([(i, f"v{i}") for i in range(12)], "id long, v string").coalesce(1), a,
        properties={"delta.enableDeletionVectors": "true"},
    )  # fmt: skip
    b = _make(spark, str(tmp_path / "other"), [10])
    source = spark.createDataFrame([(5, "merged")], "id long, v string")
    with serialake.transaction(spark):
        (DeltaTable.forPath(spark, a).alias("t").merge(source.alias("s"), "tx_same(t.id, s.id)")
         .whenMatchedUpdate(set={"v": "s.v"}).execute())  # fmt: skip
        spark.createDataFrame([(11, "v11")], "id long, v string").write.format("delta").mode("append").save(b)
        _outside(lambda: DeltaTable.forPath(spark, a).update("id = 9", {"v": "'other'"}))
    rows = dict((r.id, r.v) for r in spark.read.format("delta").load(a).collect())
    assert rows[5] == "merged" and rows[9] == "other" and len(rows) == 12
    assert _ids(spark, b) == [10, 11]
