"""MERGE (copy-on-write) against the same merge written with plain DataFrame joins, and delta-rs."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, RemoveFile
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.spark import dml, read
from serialake.spark.dml import DeltaMergeBuilder
from tests.spark.test_dml import (
    COLUMNS,
    SCHEMA,
    _base_rows,
    _check,
    _commit,
    _commit_info,
    _live_paths,
    _make_table,
    _rows,
    _writers,
)

pytestmark = pytest.mark.spark

D1, D2 = "2010-01-02", "2010-01-03"
SOURCE_SCHEMA = "id long, date string, country string, x int, s string, op string"
LAYOUTS = {"unpartitioned": (), "partitioned": ("date", "country")}


def _source(spark: SparkSession) -> DataFrame:
    rows = [
        (1, "2009-12-31", "fr", 1, "a", "delete"),
        (2, "2010-01-02", "fr", 2, "b", "update"),
        (3, "2010-01-03", "de", 3, "c", "other"),  # updateAll: moves the row to another partition
        (5, "2009-12-31", "fr", 5, "e", "update"),
        (100, "2010-01-02", "fr", 100, "new", "insert"),
        (101, "2010-01-03", "de", 101, "skip", "skip"),
    ]
    return spark.createDataFrame(rows, SOURCE_SCHEMA)


def _reference(target: DataFrame, source: DataFrame) -> DataFrame:
    """The MERGE of ``test_merge_matches_reference`` written with ordinary joins."""
    t, s = target.alias("t"), source.alias("s")
    on = F.col("t.id") == F.col("s.id")
    matched = t.join(s, on).where("s.op != 'delete'")
    upd = F.col("s.op") == "update"
    updated = matched.select(
        "t.id",
        F.when(upd, F.col("t.date")).otherwise(F.col("s.date")).alias("date"),
        F.when(upd, F.col("t.country")).otherwise(F.col("s.country")).alias("country"),
        F.col("s.x").alias("x"),
        F.when(upd, F.concat("t.s", F.lit("+"), "s.s")).otherwise(F.col("s.s")).alias("s"),
    )
    orphans = t.join(s, on, "left_anti").where("x IS NOT NULL")
    orphans = orphans.withColumn("s", F.when(F.col("date") == "2009-12-31", F.lit("orphan")).otherwise(F.col("s")))
    inserted = s.join(t, on, "left_anti").where("op != 'skip'").select(*COLUMNS)
    return updated.unionByName(orphans.select(*COLUMNS)).unionByName(inserted)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_merge_matches_reference(spark: SparkSession, tmp_table: str, layout: str) -> None:
    target = _make_table(spark, tmp_table, _base_rows(16), partition_by=LAYOUTS[layout])
    source = _source(spark)
    result = (
        dml.merge(spark, tmp_table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedDelete("s.op = 'delete'")
        .whenMatchedUpdate("s.op = 'update'", {"x": "s.x", "s": "concat(t.s, '+', s.s)"})
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll(F.col("s.op") != "skip")
        .whenNotMatchedBySourceDelete("t.x IS NULL")
        .whenNotMatchedBySourceUpdate(F.col("t.date") == "2009-12-31", {"s": F.lit("orphan")})
        .execute()
    )
    expected = _reference(target, source)
    _check(spark, tmp_table, expected)
    # Matched: ids 2 and 5 updated, 3 updated by updateAll, 1 deleted; unmatched target rows per clause.
    orphans_deleted = target.join(source, "id", "left_anti").where("x IS NULL").count()
    orphans_updated = target.join(source, "id", "left_anti").where("x IS NOT NULL AND date = '2009-12-31'").count()
    (row,) = result.collect()
    assert result.columns == ["num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows"]
    assert row.num_updated_rows == 3 + orphans_updated
    assert row.num_deleted_rows == 1 + orphans_deleted
    assert row.num_inserted_rows == 1
    assert row.num_affected_rows == row.num_updated_rows + row.num_deleted_rows + 1
    version = DeltaLog.for_table(tmp_table).update().version
    info = _commit_info(tmp_table, version)
    m = info["operationMetrics"]
    assert info["operation"] == "MERGE" and info["isBlindAppend"] is False
    assert (m["numTargetRowsMatchedUpdated"], m["numTargetRowsMatchedDeleted"]) == ("3", "1")
    assert m["numTargetRowsNotMatchedBySourceUpdated"] == str(orphans_updated)
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == str(orphans_deleted)
    assert m["numTargetRowsInserted"] == "1"
    assert int(m["numOutputRows"]) == int(m["numTargetRowsCopied"]) + row.num_updated_rows + 1
    params = info["operationParameters"]
    assert params["predicate"] == '["t.id = s.id"]'
    assert '"actionType":"delete","predicate":"s.op = \'delete\'"' in params["matchedPredicates"]


def test_merge_with_columns_touches_only_matching_files(spark: SparkSession, tmp_table: str) -> None:
    target = _make_table(spark, tmp_table, _base_rows(24), files=3)  # ids 0-7, 8-15, 16-23
    before = _live_paths(tmp_table)
    source = spark.createDataFrame([(9, "z"), (10, "y"), (50, "new")], "id long, s string").alias("src")
    r = (
        dml.merge(spark, tmp_table, source, F.col("t.id") == F.col("src.id"), alias="t")
        .whenMatchedUpdate(set={"s": F.col("src.s"), "x": F.lit(-1)})
        .whenNotMatchedInsert(values={"id": "src.id", "s": F.upper(F.col("src.s")), "date": F.lit("2020-01-01")})
        .run()
    )
    actions = _commit(tmp_table, r.version)
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    assert len(removed) == 1 and removed < before  # only the file holding ids 8-15 is rewritten
    assert all(a.data_change for a in actions if isinstance(a, (AddFile, RemoveFile)))
    hit = F.col("id").isin(9, 10)
    expected = target.select(
        "id", "date", "country",
        F.when(hit, F.lit(-1)).otherwise(F.col("x")).alias("x"),
        F.when(F.col("id") == 9, "z").when(F.col("id") == 10, "y").otherwise(F.col("s")).alias("s"),
    ).unionByName(spark.createDataFrame([(50, "2020-01-01", None, None, "NEW")], SCHEMA))  # fmt: skip
    _check(spark, tmp_table, expected)
    assert (r.metrics["numTargetRowsUpdated"], r.metrics["numTargetRowsInserted"]) == (2, 1)
    assert r.metrics["numTargetRowsCopied"] == 6 and r.metrics["numTargetFilesRemoved"] == 1


def test_merge_multiple_source_matches(spark: SparkSession, tmp_table: str) -> None:
    target = _make_table(spark, tmp_table, _base_rows(8), files=1)
    dupes = spark.createDataFrame([(3, "a"), (3, "b"), (4, "c")], "id long, s string").alias("s")
    with pytest.raises(DeltaAnalysisException) as e:
        dml.merge(spark, tmp_table, dupes, "t.id = s.id", alias="t").whenMatchedUpdate(set={"s": "s.s"}).run()
    assert "multiple source rows matched" in str(e.value) and tmp_table in str(e.value)
    assert "Help:" in str(e.value)
    assert DeltaLog.for_table(tmp_table).update().version == 0
    # A clause that does not fire for the duplicates is not ambiguous.
    r = (
        dml.merge(spark, tmp_table, dupes, "t.id = s.id", alias="t")
        .whenMatchedUpdate("s.s = 'c'", {"s": "s.s"})
        .run()
    )
    assert r.metrics["numTargetRowsUpdated"] == 1
    # A single unconditional delete is allowed with duplicates: each target row is deleted once.
    r = dml.merge(spark, tmp_table, dupes, "t.id = s.id", alias="t").whenMatchedDelete().run()
    assert r.num_affected_rows == 2 and r.metrics["numTargetRowsDeleted"] == 2
    expected = target.where("id NOT IN (3, 4)")
    assert _rows(read(spark, tmp_table)) == _rows(expected)


def test_merge_insert_only_and_no_op(spark: SparkSession, tmp_table: str) -> None:
    target = _make_table(spark, tmp_table, _base_rows(6), files=1)
    source = spark.createDataFrame(
        [(1, D1, "fr", 1, "dup"), (7, D1, "fr", 7, "seven"), (8, D2, "de", None, "eight")], SCHEMA
    ).alias("s")
    r = (
        dml.merge(spark, tmp_table, source, "t.id = s.id", alias="t")
        .whenNotMatchedInsert("s.x IS NOT NULL", {"id": "s.id", "date": "s.date", "s": "s.s"})
        .whenNotMatchedInsertAll()
        .run()
    )
    expected = target.unionByName(
        spark.createDataFrame(
            [(7, D1, None, None, "seven"), (8, D2, "de", None, "eight")], SCHEMA
        )
    )
    _check(spark, tmp_table, expected)
    info = _commit_info(tmp_table, r.version)
    assert info["isBlindAppend"] is False  # it read the target to find what is not matched
    assert not [a for a in _commit(tmp_table, r.version) if isinstance(a, RemoveFile)]
    # Nothing to change: no commit.
    version = DeltaLog.for_table(tmp_table).update().version
    again = dml.merge(spark, tmp_table, source, "t.id = s.id", alias="t").whenNotMatchedInsertAll().run()
    empty = spark.createDataFrame([], "id long, s string").alias("s")
    none = dml.merge(spark, tmp_table, empty, "t.id = s.id", alias="t").whenMatchedDelete().run()
    assert again.version is None and none.version is None and again.num_affected_rows == 0
    assert DeltaLog.for_table(tmp_table).update().version == version


def test_merge_clause_validation(spark: SparkSession, tmp_table: str) -> None:
    _make_table(spark, tmp_table, _base_rows(4), files=1)
    src = spark.createDataFrame([(1, "x")], "id long, s string").alias("s")

    def builder() -> DeltaMergeBuilder:
        return dml.merge(spark, tmp_table, src, "t.id = s.id", alias="t")

    with pytest.raises(DeltaAnalysisException, match="only the last one can omit its condition"):
        builder().whenMatchedDelete().whenMatchedUpdate("s.s = 'x'", {"s": "s.s"}).run()
    with pytest.raises(DeltaAnalysisException, match="needs at least one WHEN clause"):
        builder().run()
    with pytest.raises(DeltaAnalysisException, match=r"source has no column\(s\) date, country, x"):
        builder().whenMatchedUpdateAll().run()
    with pytest.raises(DeltaAnalysisException, match="column 'nope' does not exist"):
        builder().whenMatchedUpdate(set={"nope": "s.s"}).run()
    with pytest.raises(DeltaAnalysisException, match="MERGE condition on table"):
        dml.merge(spark, tmp_table, src, "t.id = s.missing", alias="t").whenMatchedDelete().run()
    with pytest.raises(ValueError, match="'set' in whenMatchedUpdate cannot be None"):
        builder().whenMatchedUpdate()
    with pytest.raises(TypeError, match="must be a Spark SQL Column or a string"):
        builder().whenMatchedDelete(1)  # type: ignore[arg-type]
    with pytest.raises(DeltaIllegalArgumentException, match="non-empty 'set'"):
        builder().whenMatchedUpdate(set={}).run()
    assert DeltaLog.for_table(tmp_table).update().version == 0


# -- the driver path (driver_merge) gives exactly the Spark path's result ------------------------

_DRIVER_SHAPES = {
    "upsert": ("t.id = s.id", lambda b: b.whenMatchedUpdateAll().whenNotMatchedInsertAll()),
    "values": ("t.id = s.id", lambda b: b.whenMatchedUpdate(set={"x": "s.x + t.x * 2", "s": "s.s"})
               .whenNotMatchedInsert(values={"id": "s.id", "x": "s.x - 1", "date": "s.date", "s": "'new'"})),
    "delete-and-orphans": ("s.id = t.id", lambda b: b.whenMatchedDelete().whenNotMatchedBySourceUpdate(
        set={"x": "t.x + 1"})),
    "one-sided-conjuncts": ("t.id = s.id AND t.country = 'fr' AND s.x > 2",
                            lambda b: b.whenMatchedUpdate(set={"s": "s.s"}).whenNotMatchedBySourceDelete()),
    "insert-only": ("t.id = s.id AND t.date = s.date", lambda b: b.whenNotMatchedInsertAll()),
}


@pytest.mark.parametrize("dvs", [False, True], ids=["cow", "dv"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", list(_DRIVER_SHAPES))
def test_merge_on_driver_matches_spark(
    spark: SparkSession, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, shape: str, layout: str, dvs: bool
) -> None:
    """Each MERGE runs twice on the same table: on the driver (pyarrow) and on Spark. Both give
    the same rows (also read by delta-rs) and the same metrics; the files say which engine wrote
    them. Inserts into partitioned tables stay on Spark."""
    on, clauses = _DRIVER_SHAPES[shape]
    props = {"delta.enableDeletionVectors": "true"} if dvs else None
    source = _source(spark).withColumn("x", F.col("x").cast("int"))
    results = {}
    for engine in ("driver", "spark"):
        path = str(tmp_path / engine)
        target = _make_table(spark, path, _base_rows(16), partition_by=LAYOUTS[layout], properties=props)
        spark.conf.set(dml.DML_MAX_BYTES_CONF, str(1 << 30) if engine == "driver" else "0")
        try:
            results[engine] = clauses(dml.merge(spark, path, source.alias("s"), on, alias="t")).run()
        finally:
            spark.conf.unset(dml.DML_MAX_BYTES_CONF)
        writers = _writers(path, results[engine].version)
        inserts_partitioned = layout == "partitioned" and shape in ("upsert", "values", "insert-only")
        on_driver = engine == "driver" and not inserts_partitioned
        assert writers and all(("parquet-cpp" in w) == on_driver for w in writers), (engine, writers)
    keys = ("num_affected_rows", "numTargetRowsInserted", "numTargetRowsMatchedUpdated", "numTargetRowsMatchedDeleted",
            "numTargetRowsNotMatchedBySourceUpdated", "numTargetRowsNotMatchedBySourceDeleted", "numTargetRowsCopied",
            "numOutputRows", "numTargetFilesRemoved")
    assert {k: results["driver"].metrics[k] for k in keys} == {k: results["spark"].metrics[k] for k in keys}
    assert results["driver"].metrics["num_affected_rows"] > 0
    expected = read(spark, str(tmp_path / "spark"))
    _check(spark, str(tmp_path / "driver"), expected, dvs=dvs)
    del target


def test_merge_on_driver_multiple_matches_and_fallbacks(spark: SparkSession, tmp_path: Any) -> None:
    """Several source rows for one target row fail on the driver as on Spark; a NULL for a NOT NULL
    column, an overflow or a Column value fall back to Spark, which reports or computes them."""
    path = str(tmp_path / "t")
    _make_table(spark, path, _base_rows(16))
    dup = spark.createDataFrame([(2, "a"), (2, "b")], "id long, s string")
    with pytest.raises(DeltaAnalysisException, match="multiple source rows matched"):
        dml.merge(spark, path, dup.alias("s"), "t.id = s.id", alias="t").whenMatchedUpdate(set={"s": "s.s"}).run()
    # An unconditional delete may match several times (Delta's rule): each target row deleted once.
    deleted = dml.merge(spark, path, dup.alias("s"), "t.id = s.id", alias="t").whenMatchedDelete().run()
    assert deleted.metrics["numTargetRowsMatchedDeleted"] == 1
    big = spark.createDataFrame([(3, 2**31 - 1)], "id long, x int")
    with pytest.raises(Exception, match="(?i)overflow"):
        dml.merge(spark, path, big.alias("s"), "t.id = s.id", alias="t").whenMatchedUpdate(
            set={"x": "s.x + 1"}).run()
    col = dml.merge(spark, path, big.alias("s"), "t.id = s.id", alias="t").whenMatchedUpdate(
        set={"x": F.col("s.x") - F.lit(1)}).run()
    assert col.metrics["numTargetRowsMatchedUpdated"] == 1
    assert read(spark, path).where("id = 3").select("x").collect()[0][0] == 2**31 - 2
