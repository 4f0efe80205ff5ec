"""The change data feed (#18): DELETE / UPDATE / MERGE write their changed rows as Delta does, and
``changes_df`` / ``readChangeFeed`` / ``table_changes`` read them back, as delta-rs does.

Every DML runs with and without deletion vectors, partitioned or not, on the driver path and on
Spark; the change rows of each version are compared with a model of the table computed here.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import serialake
from serialake.core import DeltaLog
from serialake.core.log import cdf as core_cdf
from serialake.core.model.actions import AddCDCFile, AddFile, RemoveFile
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaConcurrentModificationException,
    DeltaIllegalArgumentException,
    UnsupportedFeatureError,
)
from serialake.spark import dml
from serialake.spark.cdf import changes_df
from serialake.spark.dml.engine import DML_MAX_BYTES_CONF

if TYPE_CHECKING:
    from tests.s3server import S3Server

pytestmark = pytest.mark.spark

CDF = {"delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}
SCHEMA = "id long, p string, v long, s string"
Row = tuple[Any, ...]  # (id, p, v, s)


# -- helpers ---------------------------------------------------------------------------------


def _rows(n: int) -> list[Row]:
    return [(i, "a" if i % 2 == 0 else "b", i * 10, f"s{i}") for i in range(n)]


def _create(spark: SparkSession, path: str, rows: list[Row], *, partitioned: bool, props: dict[str, str]) -> None:
    df = spark.createDataFrame(rows, SCHEMA).repartition(2)
    serialake.write(df, path, partitionBy=["p"] if partitioned else None, properties=props)


def _changes(spark: SparkSession, path: str, start: int, end: int | None = None) -> list[tuple[Any, ...]]:
    """``(id, p, v, s, _change_type, _commit_version)`` rows of the feed, sorted."""
    df = changes_df(spark, path, start, end)
    return sorted(tuple(r) for r in df.drop("_commit_timestamp").collect())


def _table(spark: SparkSession, path: str) -> list[Row]:
    return sorted(tuple(r) for r in serialake.read(spark, path).select("id", "p", "v", "s").collect())


def _actions(path: str, version: int | None) -> list[Any]:
    assert version is not None
    return list(DeltaLog.for_table(path).read_commit(version).actions)


def _cdc(path: str, version: int | None) -> list[AddCDCFile]:
    return [a for a in _actions(path, version) if isinstance(a, AddCDCFile)]


def _writer_of(path: str, f: AddCDCFile) -> str:
    return "driver" if "parquet-cpp" in (pq.read_metadata(os.path.join(path, f.path)).created_by or "") else "spark"


def _on_disk_change_files(path: str) -> set[str]:
    root = os.path.join(path, core_cdf.CHANGE_DATA_DIR)
    out = set()
    for d, _, files in os.walk(root):
        for name in files:
            if name.endswith(".parquet"):
                out.add(os.path.relpath(os.path.join(d, name), path))
    return out


def _logged_change_files(path: str) -> set[str]:
    log = DeltaLog.for_table(path)
    out = set()
    for v in range(log.update().version + 1):
        out |= {a.path for a in log.read_commit(v).actions if isinstance(a, AddCDCFile)}
    return out


@pytest.fixture
def engine(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[str]:
    """Run the DML on the driver path (pyarrow) or on Spark."""
    name = request.param
    spark.conf.set(DML_MAX_BYTES_CONF, "1g" if name == "driver" else "0")
    try:
        yield name
    finally:
        spark.conf.unset(DML_MAX_BYTES_CONF)


# -- each DML kind -----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["driver", "spark"], indirect=True)
@pytest.mark.parametrize("dvs", [False, True], ids=["cow", "dv"])
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_dml_writes_exact_change_rows(
    spark: SparkSession, tmp_table: str, engine: str, dvs: bool, partitioned: bool
) -> None:
    path = tmp_table
    model = {r[0]: r for r in _rows(20)}
    _create(spark, path, list(model.values()), partitioned=partitioned, props={**CDF, **(DV if dvs else {})})

    # DELETE of some rows: copy-on-write records them; with deletion vectors the vectors say it.
    r_delete = dml.run_delete(spark, path, "id IN (1, 2, 7)")
    deleted = [model.pop(i) for i in (1, 2, 7)]
    assert _changes(spark, path, r_delete.version, r_delete.version) == sorted(
        (*row, "delete", r_delete.version) for row in deleted
    )
    cdc = _cdc(path, r_delete.version)
    if dvs:
        assert not cdc and r_delete.metrics["numAddedChangeFiles"] == 0
        assert any(isinstance(a, AddFile) and a.deletion_vector for a in _actions(path, r_delete.version))
    else:
        assert cdc and r_delete.metrics["numAddedChangeFiles"] == len(cdc)
        assert {_writer_of(path, f) for f in cdc} == {engine}

    # UPDATE: old and new values of the updated rows.
    r_update = dml.run_update(spark, path, "id IN (3, 4)", {"v": "v + 1"})
    before = [model[3], model[4]]
    for i in (3, 4):
        model[i] = (*model[i][:2], model[i][2] + 1, model[i][3])
    assert _changes(spark, path, r_update.version, r_update.version) == sorted(
        [(*row, "update_preimage", r_update.version) for row in before]
        + [(*model[i], "update_postimage", r_update.version) for i in (3, 4)]
    )
    cdc = _cdc(path, r_update.version)
    assert cdc and {_writer_of(path, f) for f in cdc} == {engine}
    assert r_update.metrics["numAddedChangeFiles"] == len(cdc)

    # MERGE: update a matched row, insert a new one (every MERGE that changes rows runs on Spark).
    source = spark.createDataFrame([(5, "b", 555, "m5"), (100, "a", 1000, "m100")], SCHEMA)
    r_merge = (
        dml.merge(spark, path, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdate(set={"v": "s.v", "s": "s.s"})
        .whenNotMatchedInsertAll()
        .run()
    )
    old5 = model[5]
    model[5] = (5, "b", 555, "m5")
    model[100] = (100, "a", 1000, "m100")
    assert _changes(spark, path, r_merge.version, r_merge.version) == sorted(
        [
            (*old5, "update_preimage", r_merge.version),
            (*model[5], "update_postimage", r_merge.version),
            (*model[100], "insert", r_merge.version),
        ]
    )
    assert r_merge.metrics["numTargetChangeFilesAdded"] == len(_cdc(path, r_merge.version)) > 0

    # MERGE that only deletes: with deletion vectors no change file, the vectors say it.
    r_merge_delete = (
        dml.merge(spark, path, spark.createDataFrame([(6,)], "id long").alias("s"), "t.id = s.id", alias="t")
        .whenMatchedDelete()
        .run()
    )
    gone = model.pop(6)
    assert _changes(spark, path, r_merge_delete.version, r_merge_delete.version) == [
        (*gone, "delete", r_merge_delete.version)
    ]
    assert bool(_cdc(path, r_merge_delete.version)) is not dvs

    # Change files: partition directories and values as data files; dataChange=false.
    for v in (r_delete.version, r_update.version, r_merge.version):
        for f in _cdc(path, v):
            assert f.path.startswith("_change_data/") and not f.data_change
            assert os.path.exists(os.path.join(path, f.path))
            if partitioned:
                assert f.path.startswith(f"_change_data/p={f.partition_values['p']}/")
                assert "p" not in pq.read_schema(os.path.join(path, f.path)).names
            else:
                assert f.partition_values == {}
            names = pq.read_schema(os.path.join(path, f.path)).names
            assert "_change_type" in names and "_commit_version" not in names

    # The whole range, in version order; the table holds the model.
    feed = changes_df(spark, path, r_delete.version).collect()
    versions = [r["_commit_version"] for r in feed]
    assert versions == sorted(versions) and set(versions) == {
        r_delete.version,
        r_update.version,
        r_merge.version,
        r_merge_delete.version,
    }
    assert len(feed) == 3 + 4 + 3 + 1
    assert _table(spark, path) == sorted(model.values())
    assert _on_disk_change_files(path) == _logged_change_files(path)


@pytest.mark.parametrize("dvs", [False, True], ids=["cow", "dv"])
def test_merge_with_every_clause_kind(spark: SparkSession, tmp_table: str, dvs: bool) -> None:
    """Conditional MATCHED update/delete, NOT MATCHED insert and NOT MATCHED BY SOURCE update/delete."""
    path = tmp_table
    model = {r[0]: r for r in _rows(12)}
    _create(spark, path, list(model.values()), partitioned=True, props={**CDF, **(DV if dvs else {})})
    source = spark.createDataFrame(
        [(2, "u", 222), (3, "d", 0), (4, "x", 0), (50, "i", 500), (51, "x", 510)], "id long, op string, v long"
    )
    r = (
        dml.merge(spark, path, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdate("s.op = 'u'", {"v": "s.v"})
        .whenMatchedDelete("s.op = 'd'")
        .whenNotMatchedInsert("s.op = 'i'", {"id": "s.id", "p": "'c'", "v": "s.v", "s": "'new'"})
        .whenNotMatchedBySourceUpdate("t.id < 2", {"v": "-1"})
        .whenNotMatchedBySourceDelete("t.id >= 10")
        .run()
    )
    v = r.version
    expected = [
        (*model[2], "update_preimage", v),
        (2, "a", 222, "s2", "update_postimage", v),
        (*model[3], "delete", v),
        (50, "c", 500, "new", "insert", v),
        (*model[0], "update_preimage", v),
        (0, "a", -1, "s0", "update_postimage", v),
        (*model[1], "update_preimage", v),
        (1, "b", -1, "s1", "update_postimage", v),
        (*model[10], "delete", v),
        (*model[11], "delete", v),
    ]
    assert _changes(spark, path, v, v) == sorted(expected)
    assert r.metrics["num_affected_rows"] == 7
    assert _cdc(path, v)


def test_append_and_whole_file_delete_are_read_from_their_files(spark: SparkSession, tmp_table: str) -> None:
    """Appends and whole-file deletes write no change files: their adds read as inserts, their removes
    as deletes; a file added and removed within the range is read in both roles."""
    path = tmp_table
    _create(spark, path, _rows(4), partitioned=True, props=CDF)
    v1 = serialake.write(spark.createDataFrame([(9, "c", 90, "s9")], SCHEMA), path)
    r = dml.run_delete(spark, path, "p = 'c'")  # partition column only: whole files removed
    assert r.version == 2 and not _cdc(path, 1) and not _cdc(path, 2)
    assert [type(a) for a in _actions(path, 2) if isinstance(a, (AddFile, RemoveFile))] == [RemoveFile]
    assert _changes(spark, path, 0) == sorted(
        [(*row, "insert", 0) for row in _rows(4)] + [(9, "c", 90, "s9", "insert", v1), (9, "c", 90, "s9", "delete", 2)]
    )
    assert _changes(spark, path, 2, 2) == [(9, "c", 90, "s9", "delete", 2)]


def test_overwrite_and_restore_are_read_from_their_files(spark: SparkSession, tmp_table: str) -> None:
    """An overwrite and a RESTORE replace what they remove: no change files, their removed rows read
    as deletes and their added rows as inserts. An overwrite with a predicate that keeps rows of
    the files it rewrites (replaceWhere) cannot be read so, and is refused."""
    path = tmp_table
    rows = _rows(4)
    _create(spark, path, rows, partitioned=False, props=CDF)
    dml.run_update(spark, path, "id = 1", {"v": "-1"})
    current = [(0, "a", 0, "s0"), (1, "b", -1, "s1"), (2, "a", 20, "s2"), (3, "b", 30, "s3")]
    assert _table(spark, path) == current
    v2 = serialake.write(spark.createDataFrame([(9, "c", 90, "s9")], SCHEMA), path, mode="overwrite")
    assert v2 == 2 and not _cdc(path, 2)
    assert _changes(spark, path, 2, 2) == sorted(
        [(*r, "delete", 2) for r in current] + [(9, "c", 90, "s9", "insert", 2)]
    )
    serialake.DeltaTable.forPath(spark, path).restoreToVersion(1)
    assert not _cdc(path, 3)
    assert _changes(spark, path, 3, 3) == sorted(
        [(*r, "insert", 3) for r in current] + [(9, "c", 90, "s9", "delete", 3)]
    )
    with pytest.raises(UnsupportedFeatureError, match="enableChangeDataFeed"):
        serialake.write(
            spark.createDataFrame([(0, "a", 1, "new")], SCHEMA), path, mode="overwrite", replaceWhere="id = 0"
        )
    assert _table(spark, path) == current


def test_deletion_vector_changes_are_read_from_the_vectors(spark: SparkSession, tmp_table: str) -> None:
    """A file re-added under a new deletion vector: its newly marked rows are deletes, and rows a
    RESTORE unmarks again are inserts (Delta's reading of such commits)."""
    path = tmp_table
    rows = _rows(10)
    _create(spark, path, rows, partitioned=False, props={**CDF, **DV})
    dml.run_delete(spark, path, "id = 3")
    dml.run_delete(spark, path, "id IN (4, 8)")
    assert not _cdc(path, 1) and not _cdc(path, 2)
    by_id = {r[0]: r for r in rows}
    assert _changes(spark, path, 1, 2) == sorted(
        [(*by_id[3], "delete", 1), (*by_id[4], "delete", 2), (*by_id[8], "delete", 2)]
    )
    serialake.DeltaTable.forPath(spark, path).restoreToVersion(1)
    assert _changes(spark, path, 3, 3) == sorted([(*by_id[4], "insert", 3), (*by_id[8], "insert", 3)])


def test_long_ranges_read_through_shared_scans(
    spark: SparkSession, tmp_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``_MAX_VERSION_SCANS`` versions the files of all versions share a few scans (version,
    time and change type joined per file, a file added and removed in the range read twice) and
    the rows are sorted: the same rows as version by version, in version order."""
    import serialake.spark.cdf as spark_cdf

    path = tmp_table
    _create(spark, path, _rows(8), partitioned=True, props={**CDF, **DV})
    dml.run_delete(spark, path, "id = 3")  # re-marked file
    dml.run_update(spark, path, "id = 4", {"v": "0"})  # change files
    serialake.write(spark.createDataFrame([(9, "c", 90, "s9")], SCHEMA), path)  # added ...
    dml.run_delete(spark, path, "p = 'c'")  # ... and removed whole in the range
    serialake.DeltaTable.forPath(spark, path).restoreToVersion(1)  # rows unmarked, files re-added
    by_version = changes_df(spark, path, 0).collect()
    monkeypatch.setattr(spark_cdf, "_MAX_VERSION_SCANS", 1)
    shared = changes_df(spark, path, 0).collect()
    assert sorted(map(tuple, shared)) == sorted(map(tuple, by_version))
    for rows in (by_version, shared):
        versions = [r["_commit_version"] for r in rows]
        assert versions == sorted(versions) and set(versions) == set(range(6))
    got = sorted(tuple(r)[:6] for r in shared if r._commit_version >= 1)
    assert got == sorted([
        (3, "b", 30, "s3", "delete", 1),
        (4, "a", 40, "s4", "update_preimage", 2), (4, "a", 0, "s4", "update_postimage", 2),
        (9, "c", 90, "s9", "insert", 3), (9, "c", 90, "s9", "delete", 4),
        (4, "a", 40, "s4", "insert", 5), (4, "a", 0, "s4", "delete", 5),
    ])  # fmt: skip


# -- commits -------------------------------------------------------------------------------------


def test_commit_check_refuses_rewrites_without_change_files() -> None:
    add = AddFile(path="new.parquet", size=1, modification_time=0, data_change=True)
    old = AddFile(path="old.parquet", size=1, modification_time=0, data_change=True)
    assert core_cdf.commit_needs_change_data([old.remove(), add]) is not None
    assert core_cdf.commit_needs_change_data([old.remove(), add, AddCDCFile(path="_change_data/x.parquet")]) is None
    assert core_cdf.commit_needs_change_data([add]) is None  # an append
    assert core_cdf.commit_needs_change_data([old.remove()]) is None  # a whole-file delete
    assert core_cdf.commit_needs_change_data([old.remove(), old]) is None  # re-added (a new deletion vector)
    assert core_cdf.commit_needs_change_data([old.remove(data_change=False), add]) is None  # not a data change
    # Operations that replace what they remove: an overwrite without a predicate, RESTORE, REPLACE.
    rewrite = [old.remove(), add]
    assert core_cdf.commit_needs_change_data(rewrite, "WRITE", {"mode": "Overwrite"}) is None
    assert core_cdf.commit_needs_change_data(rewrite, "WRITE", {"mode": "Overwrite", "predicate": '["x"]'})
    assert core_cdf.commit_needs_change_data(rewrite, "WRITE", {"mode": "Append"})
    assert core_cdf.commit_needs_change_data(rewrite, "RESTORE", {}) is None
    assert core_cdf.commit_needs_change_data(rewrite, "STREAMING UPDATE", {"outputMode": "Complete"}) is None
    assert core_cdf.commit_needs_change_data(rewrite, "UPDATE", {})


def test_rewrite_without_change_files_is_refused(spark: SparkSession, tmp_table: str) -> None:
    path = tmp_table
    _create(spark, path, _rows(4), partitioned=False, props=CDF)
    txn = DeltaLog.for_table(path).start_transaction()
    f = txn.snapshot.all_files[0]  # type: ignore[union-attr]
    new = AddFile(path="x.parquet", size=1, modification_time=0, data_change=True)
    with pytest.raises(UnsupportedFeatureError, match="enableChangeDataFeed"):
        txn.commit([f.remove(), new], "UPDATE")


def test_failed_commit_deletes_its_change_files(spark: SparkSession, tmp_table: str) -> None:
    path = tmp_table
    _create(spark, path, _rows(8), partitioned=False, props=CDF)
    spark.conf.set(DML_MAX_BYTES_CONF, "0")
    try:
        with pytest.raises(DeltaConcurrentModificationException):
            dml.run_update(
                spark, path, "id = 1", {"v": "0"}, before_commit=lambda: dml.run_delete(spark, path, "id >= 0")
            )
    finally:
        spark.conf.unset(DML_MAX_BYTES_CONF)
    assert _on_disk_change_files(path) == _logged_change_files(path)  # the loser's change files are gone
    assert DeltaLog.for_table(path).update().version == 1


# -- reading: options, errors, SQL -----------------------------------------------------------------


@pytest.fixture
def history(spark: SparkSession, tmp_table: str) -> tuple[str, list[int]]:
    """A CDF table with versions 0 (create) to 3, and each commit's timestamp (ms)."""
    path = tmp_table
    _create(spark, path, _rows(6), partitioned=False, props=CDF)
    dml.run_update(spark, path, "id = 1", {"v": "11"})
    dml.run_delete(spark, path, "id = 2")
    serialake.write(spark.createDataFrame([(7, "b", 70, "s7")], SCHEMA), path)
    stamps = dict(DeltaLog.for_table(path).commit_timestamps())
    return path, [stamps[v] for v in range(4)]


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def test_read_change_feed_options(spark: SparkSession, history: tuple[str, list[int]]) -> None:
    path, stamps = history
    serialake.configure(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        reader = spark.read.format("delta").option("readChangeFeed", "true")
        df = reader.option("startingVersion", 1).option("endingVersion", 2).load(path)
        assert df.columns == ["id", "p", "v", "s", "_change_type", "_commit_version", "_commit_timestamp"]
        got = sorted((r.id, r._change_type, r._commit_version) for r in df.collect())
        assert got == [(1, "update_postimage", 1), (1, "update_preimage", 1), (2, "delete", 2)]
        # Commit timestamps as the log gives them.
        ts = {r[0]: r[1] for r in df.select("_commit_version", F.unix_millis("_commit_timestamp")).collect()}
        assert ts == {1: stamps[1], 2: stamps[2]}
        # By timestamp: from the commit at or after, to the commit at or before.
        between = _iso((stamps[1] + stamps[2]) // 2) if stamps[2] - stamps[1] > 1 else _iso(stamps[2])
        df = (
            spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingTimestamp", between).option("endingTimestamp", _iso(stamps[3])).load(path)
        )  # fmt: skip
        assert {r._commit_version for r in df.collect()} == {2, 3}
        # An ending version past the latest reads to the latest; legacy option name.
        df = spark.read.format("delta").option("readChangeData", "true").option("startingVersion", 3).load(path)
        df2 = changes_df(spark, path, 3, 99)
        assert [tuple(r) for r in df.collect()] == [tuple(r) for r in df2.collect()] != []
        # By name.
        serialake.register("cdf_hist", path, persist=False)
        by_name = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 3)
        assert by_name.table("cdf_hist").count() == 1
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_read_errors_as_delta(spark: SparkSession, history: tuple[str, list[int]], tmp_path: Any) -> None:
    path, stamps = history
    with pytest.raises(DeltaIllegalArgumentException, match="No startingVersion or startingTimestamp"):
        changes_df(spark, path)
    with pytest.raises(DeltaIllegalArgumentException, match="Start version 4 .* exceeds the latest table version 3"):
        changes_df(spark, path, 4)
    with pytest.raises(DeltaIllegalArgumentException, match="CDC range from start 2 to end 1 was invalid"):
        changes_df(spark, path, 2, 1)
    with pytest.raises(DeltaIllegalArgumentException, match="Multiple starting arguments"):
        changes_df(spark, path, 1, start_timestamp=stamps[1])
    with pytest.raises(DeltaIllegalArgumentException, match="is after the latest version"):
        changes_df(spark, path, start_timestamp=stamps[3] + 60_000)
    with pytest.raises(DeltaIllegalArgumentException, match="before the earliest version"):
        changes_df(spark, path, 0, end_timestamp=stamps[0] - 60_000)
    with pytest.raises(DeltaIllegalArgumentException, match="must be a version number"):
        changes_df(spark, path, "latest")
    with pytest.raises(DeltaIllegalArgumentException, match="cannot be converted to a valid timestamp"):
        changes_df(spark, path, start_timestamp="not a time")
    # Change data not recorded: before it was enabled, and after it was turned off.
    other = str(tmp_path / "late")
    _create(spark, other, _rows(4), partitioned=False, props={})
    serialake.sql(spark, f"ALTER TABLE delta.`{other}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    dml.run_update(spark, other, "id = 1", {"v": "0"})
    with pytest.raises(DeltaAnalysisException, match=r"change data was not recorded for version \[0\]"):
        changes_df(spark, other, 0)
    assert len(changes_df(spark, other, 1).collect()) == 2
    serialake.sql(spark, f"ALTER TABLE delta.`{other}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    with pytest.raises(DeltaAnalysisException, match=r"range \[1 , 3\] .* not recorded for version \[3\]"):
        changes_df(spark, other, 1)


def test_table_changes_sql(spark: SparkSession, history: tuple[str, list[int]]) -> None:
    path, _ = history
    serialake.register("cdf_sql", path, persist=False)
    q = "SELECT id, _change_type, _commit_version FROM {} ORDER BY _commit_version, id, _change_type"
    want = [(1, "update_postimage", 1), (1, "update_preimage", 1), (2, "delete", 2)]
    for fn in ("table_changes('cdf_sql', 1, 2)", f"table_changes('delta.`{path}`', 1, 2)",
               f"table_changes_by_path('{path}', 1, 2)"):  # fmt: skip
        assert [tuple(r) for r in serialake.sql(spark, q.format(fn)).collect()] == want, fn
    # Open end, a filter and an alias, through spark.sql in a configured session.
    serialake.configure(spark)
    got = spark.sql("SELECT c.id FROM table_changes('cdf_sql', 2) AS c WHERE c._change_type = 'insert'").collect()
    assert [r.id for r in got] == [7]
    # A timestamp start (any non-number is a timestamp Spark casts).
    assert (
        serialake.sql(spark, "SELECT count(*) AS n FROM table_changes('cdf_sql', '2000-01-01')").first()["n"]
        == 6 + 2 + 1 + 1
    )


# -- interop with delta-rs ---------------------------------------------------------------------------


def _deltars_changes(path: str, start: int, **storage: Any) -> list[tuple[Any, ...]]:
    import deltalake
    import pyarrow as pa

    table = deltalake.DeltaTable(path, storage_options=storage or None)
    batches = pa.table(table.load_cdf(starting_version=start).read_all())
    return sorted(
        (r["id"], r["p"], r["v"], r["s"], r["_change_type"], r["_commit_version"]) for r in batches.to_pylist()
    )


@pytest.mark.interop
@pytest.mark.parametrize("dvs", [False, True], ids=["cow", "dv"])
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_delta_rs_reads_the_same_changes(spark: SparkSession, tmp_table: str, partitioned: bool, dvs: bool) -> None:
    """delta-rs 1.6.6 ``load_cdf`` gives the same rows, deletion-vector tables included (it reads a
    DELETE's re-marked files as the rows whose mark changed, as serialake does)."""
    path = tmp_table
    _create(spark, path, _rows(10), partitioned=partitioned, props={**CDF, **(DV if dvs else {})})
    dml.run_delete(spark, path, "id = 1")
    dml.run_update(spark, path, "id IN (2, 3)", {"s": "'x'"})
    source = spark.createDataFrame([(4, "a", 44, "m"), (30, "b", 300, "n")], SCHEMA)
    (
        dml.merge(spark, path, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .whenNotMatchedBySourceDelete("t.id = 9")
        .run()
    )
    serialake.write(spark.createDataFrame([(40, "a", 400, "w")], SCHEMA), path)
    ours = _changes(spark, path, 0)
    assert ours == _deltars_changes(path, 0)
    assert len(ours) == 10 + 1 + 4 + 4 + 1
    # Commit timestamps: the log's (the commit file's time, as time travel uses); delta-rs gives
    # commitInfo.timestamp, taken just before the file was written.
    ms = F.unix_millis("_commit_timestamp").alias("ms")
    ts = {r[0]: r[1] for r in changes_df(spark, path, 0).select("_commit_version", ms).distinct().collect()}
    log = DeltaLog.for_table(path)
    assert ts == {v: t for v, t in log.commit_timestamps() if v in ts} and len(ts) == 5
    for v, t in ts.items():
        info = log.read_commit(v).commit_info
        assert info is not None and 0 <= t - info.values["timestamp"] < 2000


@pytest.mark.interop
def test_changes_written_by_delta_rs_read_as_delta_rs_reads_them(spark: SparkSession, tmp_table: str) -> None:
    import deltalake
    import pyarrow as pa

    path = tmp_table
    data = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "p": ["a", "b"] * 3,
            "v": pa.array([i * 10 for i in range(6)], pa.int64()),
            "s": [f"s{i}" for i in range(6)],
        }
    )
    deltalake.write_deltalake(path, data, partition_by=["p"], configuration=dict(CDF))
    t = deltalake.DeltaTable(path)
    t.update(predicate="id = 2", updates={"v": "99"})
    t.delete("id = 3")
    t.delete("p = 'b'")
    assert _changes(spark, path, 0) == _deltars_changes(path, 0)


# -- S3 ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    from tests.s3server import s3_environment

    with s3_environment() as srv:
        yield srv


@pytest.mark.s3
@pytest.mark.interop
@pytest.mark.parametrize("engine", ["driver", "spark"], indirect=True)
def test_change_feed_on_s3(spark: SparkSession, server: S3Server, engine: str) -> None:
    uri = f"s3://{server.new_bucket()}/tables/t"
    try:
        _create(spark, uri, _rows(8), partitioned=True, props=CDF)
        dml.run_delete(spark, uri, "id = 1")
        dml.run_update(spark, uri, "id = 2", {"v": "7"})
        source = spark.createDataFrame([(4, "a", 44, "m"), (30, "b", 300, "n")], SCHEMA)
        dml.merge(
            spark, uri, source.alias("s"), "t.id = s.id", alias="t"
        ).whenMatchedUpdateAll().whenNotMatchedInsertAll().run()
        assert all(f.path.startswith("_change_data/p=") for v in (1, 2, 3) for f in _cdc(uri, v))
        ours = _changes(spark, uri, 1)
        assert ours == sorted([
            (1, "b", 10, "s1", "delete", 1), (2, "a", 20, "s2", "update_preimage", 2),
            (2, "a", 7, "s2", "update_postimage", 2), (4, "a", 40, "s4", "update_preimage", 3),
            (4, "a", 44, "m", "update_postimage", 3), (30, "b", 300, "n", "insert", 3),
        ])  # fmt: skip
        assert ours == _deltars_changes(uri, 1, **server.environment())
    finally:
        from serialake.spark import isolation

        isolation._recent.pop(spark, None)
        isolation._cache.pop(spark, None)


@pytest.mark.parametrize("partitioned", [False, True])
def test_vacuum_removes_change_data_files_past_the_retention(
    spark: SparkSession, tmp_table: str, partitioned: bool
) -> None:
    """Change data files are never referenced by a snapshot: VACUUM keeps them within the
    retention (the feed of recent versions needs them) and removes them after it, as Delta does."""
    from serialake.spark.table import DeltaTable

    _create(spark, tmp_table, _rows(6), partitioned=partitioned, props=CDF)
    dml.run_update(spark, tmp_table, "id < 3", {"v": "v + 1"})
    written = _on_disk_change_files(tmp_table)
    assert written and written == _logged_change_files(tmp_table)
    table = DeltaTable.forPath(spark, tmp_table)
    table.vacuum()  # default retention: everything is recent
    assert _on_disk_change_files(tmp_table) == written
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        dry = {r.path for r in table.vacuum(0, dryRun=True).collect()}
        assert {p for p in dry if f"/{core_cdf.CHANGE_DATA_DIR}/" in p} == {
            "file:" + os.path.join(tmp_table, p) for p in written
        }
        table.vacuum(0)
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert _on_disk_change_files(tmp_table) == set()
    assert not os.path.exists(os.path.join(tmp_table, core_cdf.CHANGE_DATA_DIR))  # empty directories go too
    assert _table(spark, tmp_table) == sorted((i, p, v + 1 if i < 3 else v, s) for i, p, v, s in _rows(6))
