"""Every idiom over a Spark Connect client session, as over a classic one (issue #43).

One test body runs on the classic session and on a Connect client session of a local Spark
Connect server (``conftest.py``): the same rows and the same exception classes on both.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import serialake
from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException
from tests.helpers import before_first_commit

pytestmark = [pytest.mark.spark, pytest.mark.connect]

D1, D2, D3 = "2024-01-01", "2024-01-02", "2024-01-03"
SCHEMA = "id long, date string"


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_session_kind(session: SparkSession, request: pytest.FixtureRequest) -> None:
    from serialake.spark.backend.connect import is_connect

    assert is_connect(session) == (request.node.callspec.params["session"] == "connect")


def test_delta_spark_pipeline(session: SparkSession, tmp_path: Path) -> None:
    """write, versionAsOf, CREATE TABLE / INSERT / DELETE / UPDATE / MERGE in SQL, DeltaTable merge
    and a Column-condition delete, OPTIMIZE (one commit each, nothing raised after)."""
    spark = session
    path, other = str(tmp_path / "events"), str(tmp_path / "t1")
    name = f"events_{abs(hash(str(tmp_path))) % 10**8}"
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").save(path)
    spark.createDataFrame([(3, "c")], "id long, v string").write.format("delta").mode("append").save(path)
    assert _rows(spark.read.format("delta").option("versionAsOf", 0).load(path)) == [(1, "a"), (2, "b")]
    assert _rows(spark.read.format("delta").load(path)) == [(1, "a"), (2, "b"), (3, "c")]

    spark.sql(f"CREATE TABLE {name} (id long, v string) USING delta LOCATION '{other}'")
    spark.sql(f"INSERT INTO {name} VALUES (1, 'x'), (2, 'y'), (5, 'z')")
    spark.sql(f"DELETE FROM {name} WHERE id = 5")
    spark.sql(f"UPDATE {name} SET v = 'yy' WHERE id = 2")
    spark.sql(
        f"MERGE INTO {name} t USING delta.`{path}` s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )
    assert _rows(spark.table(name)) == [(1, "a"), (2, "b"), (3, "c")]
    assert _rows(spark.sql(f"SELECT id, v FROM {name} WHERE id > 1")) == [(2, "b"), (3, "c")]

    source = spark.createDataFrame([(1, "m"), (9, "n")], "id long, v string")
    (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), "t.id = s.id")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())  # fmt: skip
    DeltaTable.forPath(spark, path).delete(F.col("id") == 9)
    DeltaTable.forPath(spark, path).delete((F.col("v") == "c") & F.col("id").isin(3, 4))
    assert _rows(spark.read.format("delta").load(path)) == [(1, "m"), (2, "b")]

    log = DeltaLog.for_table(path)
    before = log.update().version
    metrics = DeltaTable.forPath(spark, path).optimize().executeCompaction().collect()
    assert log.update().version == before + 1 and metrics
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()  # nothing left to compact: no commit
    assert log.update().version == before + 1
    assert _rows(spark.read.format("delta").load(path)) == [(1, "m"), (2, "b")]
    assert [r["operation"] for r in DeltaTable.forPath(spark, path).history().collect()][:2] == ["OPTIMIZE", "DELETE"]
    spark.sql(f"DROP TABLE {name}")


def test_serialake_sql_select_over_two_tables(session: SparkSession, tmp_path: Path) -> None:
    """serialake.sql's views of the tables live as long as the query (Connect analyses it lazily)."""
    spark = session
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    serialake.write(spark.createDataFrame([(1, D1), (2, D2)], SCHEMA), a)
    serialake.write(spark.createDataFrame([(1, "x"), (2, "y"), (3, "{z}")], "id long, v string"), b)
    df = serialake.sql(
        spark, f"SELECT a.id, a.date, b.v FROM delta.`{a}` a JOIN delta.`{b}` b ON a.id = b.id WHERE b.v <> '{{q}}'"
    )
    assert _rows(df) == [(1, D1, "x"), (2, D2, "y")]
    assert _rows(df.where("id = 2")) == [(2, D2, "y")]  # the DataFrame is still usable afterwards
    assert _rows(serialake.sql(spark, f"SELECT * FROM delta.`{b}` VERSION AS OF 0 WHERE v = '{{z}}'")) == [(3, "{z}")]
    views = [t.name for t in spark.catalog.listTables() if t.isTemporary and t.name.startswith("__serialake_")]
    assert views == []


# ---------------------------------------------------------------------------------------------
# Reads that feed a write (tests/spark/test_read_tracking.py, over both kinds of session)
# ---------------------------------------------------------------------------------------------


def _table(spark: SparkSession, path: str, level: str = "Serializable") -> None:
    rows = [(1, D1), (2, D1), (3, D2), (4, D2)]
    serialake.write(
        spark.createDataFrame(rows, SCHEMA), path, partitionBy=["date"], properties={"delta.isolationLevel": level}
    )


def _table_rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    return _rows(serialake.read(spark, path))


def _append_copy_of_d1(spark: SparkSession, path: str) -> int:
    copy = serialake.read(spark, path).where(f"date = '{D1}'").select((F.col("id") + 1000).alias("id"), "date")
    return serialake.write(copy, path)


@pytest.mark.parametrize("form", ["sql", "python"])
def test_merge_whose_source_reads_the_target_conflicts(
    session: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    spark = session
    _table(spark, tmp_table)

    def copy(src: str, dst: str, nested: bool = False) -> Any:
        if form == "sql":  # nested: inside another operation, where spark.sql is Spark's own
            return (partial(serialake.sql, spark) if nested else spark.sql)(
                f"MERGE INTO delta.`{tmp_table}` t USING (SELECT id + 100 AS id, '{dst}' AS date FROM "
                f"delta.`{tmp_table}` WHERE date = '{src}') s ON t.id = s.id AND t.date = '{dst}' "
                "WHEN NOT MATCHED THEN INSERT *"
            )
        source = serialake.read(spark, tmp_table).where(f"date = '{src}'").select(
            (F.col("id") + 100).alias("id"), F.lit(dst).alias("date")
        )
        return (
            DeltaTable.forPath(spark, tmp_table).alias("t")
            .merge(source.alias("s"), f"t.id = s.id AND t.date = '{dst}'").whenNotMatchedInsertAll().execute()
        )  # fmt: skip

    with before_first_commit(monkeypatch, lambda: copy(D1, D2, nested=True)):
        with pytest.raises(ConcurrentAppendException) as e:
            copy(D2, D1)
    assert e.value.winning_version == 1
    assert _table_rows(spark, tmp_table) == [(1, D1), (2, D1), (3, D2), (4, D2), (101, D2), (102, D2)]


def test_read_feeding_a_write_vs_concurrent_delete(
    session: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serializable: an append computed from the target, a row it read deleted meanwhile."""
    spark = session
    _table(spark, tmp_table)
    delete = lambda: DeltaTable.forPath(spark, tmp_table).delete(f"date = '{D1}' AND id = 1")  # noqa: E731
    with before_first_commit(monkeypatch, delete):
        with pytest.raises(ConcurrentDeleteReadException):
            _append_copy_of_d1(spark, tmp_table)
    assert _table_rows(spark, tmp_table) == [(2, D1), (3, D2), (4, D2)]


def test_read_elsewhere_vs_concurrent_insert_commits(
    session: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read is of partition D1 (the plan's filter): an insert into D2 does not conflict."""
    spark = session
    _table(spark, tmp_table)
    insert = spark.createDataFrame([(8, D2)], SCHEMA)
    with before_first_commit(monkeypatch, lambda: serialake.write(insert, tmp_table)):
        assert _append_copy_of_d1(spark, tmp_table) == 2
    assert [r for r in _table_rows(spark, tmp_table) if r[0] > 1000] == [(1001, D1), (1002, D1)]


def test_filter_above_a_projection_is_coarser_on_connect(
    session: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter over a projection of the target (not the read's own ``where``) is parsed from the plan
    on a classic session (an insert into another partition commits); on Connect the read counts
    whole (a conflict, never a missed one)."""
    from serialake.spark.backend.connect import is_connect

    spark = session
    _table(spark, tmp_table)
    insert = spark.createDataFrame([(8, D2)], SCHEMA)
    copy = serialake.read(spark, tmp_table).select((F.col("id") + 1000).alias("id"), "date").where(f"date = '{D1}'")
    with before_first_commit(monkeypatch, lambda: serialake.write(insert, tmp_table)):
        if is_connect(spark):
            with pytest.raises(ConcurrentAppendException):
                serialake.write(copy, tmp_table)
        else:
            serialake.write(copy, tmp_table)
    expected = [(1, D1), (2, D1), (3, D2), (4, D2), (8, D2)]
    if not is_connect(spark):
        expected += [(1001, D1), (1002, D1)]
    assert _table_rows(spark, tmp_table) == sorted(expected)


def test_reads_of_other_tables_and_time_travel_are_versions(
    session: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another table, and the target as of an older version: exact tables and versions from the plan."""
    from serialake.core.txn.transaction import READ_TABLES_KEY

    spark = session
    target, other = str(tmp_path / "target"), str(tmp_path / "other")
    _table(spark, target)
    _table(spark, other)
    serialake.write(spark.createDataFrame([(5, D1)], SCHEMA), target)  # target v1
    old = serialake.read(spark, target, version=0).where(f"date = '{D1}'").withColumn("id", F.col("id") + 500)
    src = serialake.read(spark, other).where(f"date = '{D2}'")
    insert = spark.createDataFrame([(6, D1)], SCHEMA)
    with before_first_commit(monkeypatch, lambda: serialake.write(insert, target)):
        version = serialake.write(old.unionByName(src), target)  # Serializable, yet no read of D1 now
    info = DeltaLog.for_table(target).read_commit(version).commit_info
    assert info is not None
    values = dict(info.values)
    assert values["isBlindAppend"] is True
    tables = {(r["table"], r["version"]) for r in values[READ_TABLES_KEY]}
    assert tables == {(DeltaLog.for_table(target).table_path, 0), (DeltaLog.for_table(other).table_path, 0)}


# ---------------------------------------------------------------------------------------------
# Two sessions
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def second_session(session: SparkSession, request: pytest.FixtureRequest) -> Any:
    """Another session of the same kind: classic ``newSession()``, or a second Connect client."""
    from serialake.spark.backend.connect import is_connect

    if is_connect(session):
        from tests.spark.connect.conftest import new_connect_session

        other = new_connect_session(request.getfixturevalue("connect_server"))
        yield other
        other.stop()
    else:
        yield serialake.configure(session.newSession())


def test_two_sessions_racing(session: SparkSession, second_session: SparkSession, tmp_table: str,
                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Session A copies D1 into D3; session B deletes a D1 row first: A gets the typed conflict, B's commit stands."""
    _table(session, tmp_table)
    # (inside A's operation, spark.sql is Spark's own: serialake.sql is the drop-in's entry)
    delete = lambda: serialake.sql(second_session, f"DELETE FROM delta.`{tmp_table}` WHERE id = 2")  # noqa: E731
    with before_first_commit(monkeypatch, delete):
        with pytest.raises(ConcurrentDeleteReadException):
            session.sql(f"INSERT INTO delta.`{tmp_table}` SELECT id + 10, '{D3}' FROM delta.`{tmp_table}` "
                        f"WHERE date = '{D1}'")  # fmt: skip
    assert _table_rows(session, tmp_table) == [(1, D1), (3, D2), (4, D2)]
    assert _table_rows(second_session, tmp_table) == [(1, D1), (3, D2), (4, D2)]


# ---------------------------------------------------------------------------------------------
# Generated columns and CHECK constraints (determinism asked of the server's analyser on Connect)
# ---------------------------------------------------------------------------------------------


def test_generated_columns_and_constraints(session: SparkSession, tmp_path: Path) -> None:
    from serialake.exceptions import DeltaAnalysisException

    spark = session
    path = str(tmp_path / "g")
    spark.sql(f"CREATE TABLE delta.`{path}` (id long, g long GENERATED ALWAYS AS (id * 2)) USING delta")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT positive CHECK (id > 0)")
    spark.sql(f"INSERT INTO delta.`{path}` (id) VALUES (1), (2)")
    assert _rows(spark.read.format("delta").load(path)) == [(1, 2), (2, 4)]
    with pytest.raises(DeltaAnalysisException, match="positive"):
        spark.sql(f"INSERT INTO delta.`{path}` (id) VALUES (-1)")
    with pytest.raises(DeltaAnalysisException, match="not deterministic"):
        spark.sql(f"CREATE TABLE delta.`{tmp_path / 'r'}` (id long, g double GENERATED ALWAYS AS (rand())) USING delta")
    with pytest.raises(DeltaAnalysisException, match="not deterministic"):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT chance CHECK (rand() > 0.5)")
    assert _rows(spark.read.format("delta").load(path)) == [(1, 2), (2, 4)]


def test_identity_column(session: SparkSession, tmp_path: Path) -> None:
    spark = session
    path = str(tmp_path / "ident")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT GENERATED ALWAYS AS IDENTITY, v string) USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` (v) VALUES ('a'), ('b'), ('c')")
    serialake.write(spark.createDataFrame([("d",)], "v string"), path)
    rows = spark.read.format("delta").load(path).collect()
    assert sorted(r["v"] for r in rows) == ["a", "b", "c", "d"]
    assert len({r["id"] for r in rows}) == 4 and all(r["id"] is not None for r in rows)


# ---------------------------------------------------------------------------------------------
# Executors that lack serialake
# ---------------------------------------------------------------------------------------------


def _tasks_lacking_serialake(batches: Any) -> Any:
    raise ModuleNotFoundError("No module named 'serialake'")
    yield  # a generator, as mapInArrow wants


def test_executors_lacking_serialake_fail_clearly(session: SparkSession) -> None:
    """A job of serialake's tasks failing for a module the executors lack names it and the remedy."""
    from serialake.exceptions import ExecutorEnvironmentError
    from serialake.spark.errors import raising_executor_errors

    df = session.range(2).mapInArrow(_tasks_lacking_serialake, "id long")
    with pytest.raises(ExecutorEnvironmentError, match="cannot import 'serialake'.*ship_serialake") as e:
        raising_executor_errors(df.collect)()
    assert e.value.module == "serialake"
    failing = session.range(1).selectExpr("raise_error('No module named \\'foo\\'') AS x")
    with pytest.raises(Exception) as other:  # a module serialake's tasks do not import: Spark's own error
        raising_executor_errors(failing.collect)()
    assert not isinstance(other.value, ExecutorEnvironmentError)


def test_ship_serialake(connect: SparkSession, tmp_path: Path) -> None:
    """ship_serialake adds serialake to the Connect session's artifacts; its tasks import it."""
    import zipfile

    from serialake.spark.session import ship_serialake

    shipped = ship_serialake(connect, str(tmp_path))
    assert "serialake/__init__.py" in zipfile.ZipFile(shipped).namelist()
    assert "serialake/spark/backend/connect.py" in zipfile.ZipFile(shipped).namelist()


def test_spark_session_honours_spark_remote(connect_server: Any, tmp_path: Path) -> None:
    """A new process with SPARK_REMOTE set: serialake.spark_session() is a configured Connect session."""
    import os
    import subprocess
    import sys

    script = tmp_path / "remote.py"
    script.write_text(
        "import serialake\n"
        "from serialake.dropin import is_configured\n"
        "from serialake.spark.backend.connect import is_connect\n"
        "spark = serialake.spark_session('serialake-remote')\n"
        f"path = {str(tmp_path / 't')!r}\n"
        "spark.range(3).write.format('delta').save(path)\n"
        "print(is_connect(spark), is_configured(spark), spark.conf.get('spark.sql.session.timeZone'),\n"
        "      spark.read.format('delta').load(path).count())\n"
    )
    env = {**os.environ, "SPARK_REMOTE": connect_server.url, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "UTC", "3"]
