"""Delta's write options and session settings in a configured session, as delta-spark 4.4 runs them.

``replaceUsing`` / ``replaceOn`` (rows, history, errors), the session's table-property
defaults for new tables, replaceWhere's session settings, and the refusal of the options and
settings serialake does not implement. Plain PySpark calls only, as delta-spark code makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from serialake import DeltaTable
from serialake.core import DeltaLog
from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    InvalidPropertyError,
)

pytestmark = pytest.mark.spark

SCHEMA = "id int, v string"


@contextmanager
def settings(spark: SparkSession, **values: str) -> Iterator[None]:
    """Session settings ``spark.databricks.delta.<key>`` (dots as ``__``) for the block."""
    keys = {"spark.databricks.delta." + k.replace("__", "."): v for k, v in values.items()}
    for k, v in keys.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k in keys:
            spark.conf.unset(k)


def rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in spark.read.format("delta").load(path).collect()), key=repr)


def last_commit(spark: SparkSession, path: str) -> Any:
    return DeltaTable.forPath(spark, path).history(1).collect()[0]


def rows_of_table(spark: SparkSession, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.table(name).collect())


def table(spark: SparkSession, path: str, data: list[tuple[Any, ...]], **options: str) -> None:
    spark.createDataFrame(data, SCHEMA).coalesce(1).write.format("delta").options(**options).save(path)


# ---------------------------------------------------------------------------------------------
# replaceUsing / replaceOn
# ---------------------------------------------------------------------------------------------


def test_replace_using_replaces_the_rows_with_equal_keys(spark: SparkSession, tmp_table: str) -> None:
    """Rows whose key equals a written row's go, the others stay; NULL matches nothing (delta-spark's
    equality), the history records ``replaceUsingCols`` as delta-spark does."""
    table(spark, tmp_table, [(1, "t1"), (1, "t2"), (2, "t"), (None, "tn")])
    new = spark.createDataFrame([(1, "s"), (3, "s"), (None, "sn")], SCHEMA)
    new.write.format("delta").mode("overwrite").option("replaceUsing", " id ").save(tmp_table)
    assert rows(spark, tmp_table) == sorted([(1, "s"), (2, "t"), (3, "s"), (None, "sn"), (None, "tn")], key=repr)
    last = last_commit(spark, tmp_table)
    assert last["operation"] == "WRITE"
    assert dict(last["operationParameters"]) == {"mode": "Overwrite", "partitionBy": "[]", "replaceUsingCols": "( id )"}
    metrics = last["operationMetrics"]
    assert (metrics["numDeletedRows"], metrics["numRemovedFiles"], metrics["numCopiedRows"]) == ("2", "1", "2")
    assert metrics["numOutputRows"] == "5"  # the three new rows and the two kept ones of the rewritten file


def test_replace_using_several_columns_and_case(spark: SparkSession, tmp_table: str) -> None:
    spark.createDataFrame([(1, "a", "t"), (1, "b", "t"), (2, "a", "t")], "id int, k string, v string") \
        .write.format("delta").partitionBy("k").save(tmp_table)  # fmt: skip
    spark.createDataFrame([(1, "a", "s")], "id int, k string, v string").write.format("delta") \
        .mode("overwrite").option("REPLACEUSING", "ID,k").save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == [(1, "a", "s"), (1, "b", "t"), (2, "a", "t")]


def test_replace_on_with_aliases_and_deletion_vectors(spark: SparkSession, tmp_table: str) -> None:
    """replaceOn with ``targetAlias`` and the DataFrame's alias; ``<=>`` matches NULL. On a table with
    deletion vectors the matched rows are marked: delta-spark's metrics, one for one."""
    table(spark, tmp_table, [(1, "t1"), (2, "t"), (None, "tn")], **{"delta.enableDeletionVectors": "true"})
    new = spark.createDataFrame([(1, "s"), (3, "s"), (None, "sn")], SCHEMA).alias("s")
    new.write.format("delta").mode("overwrite").option("targetAlias", "t").option("replaceOn", "t.id <=> s.id") \
        .save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == sorted([(1, "s"), (2, "t"), (3, "s"), (None, "sn")], key=repr)
    last = last_commit(spark, tmp_table)
    assert dict(last["operationParameters"]) == {"mode": "Overwrite", "partitionBy": "[]",
                                                 "replaceOnCond": "t.id <=> s.id"}  # fmt: skip
    metrics = dict(last["operationMetrics"])
    # As delta-spark 4.4 reports the same write: the file re-added with its vector counts as copied.
    assert {k: metrics[k] for k in ("numDeletedRows", "numCopiedRows", "numRemovedFiles", "numFiles",
                                    "numOutputRows", "numAddedChangeFiles")} == {
        "numDeletedRows": "2", "numCopiedRows": "1", "numRemovedFiles": "0", "numFiles": "4",
        "numOutputRows": "4", "numAddedChangeFiles": "0"}  # fmt: skip
    assert any(f.deletion_vector is not None for f in DeltaLog.for_table(tmp_table).update().all_files)


def test_replace_on_condition_on_one_side_and_empty_source(spark: SparkSession, tmp_table: str) -> None:
    table(spark, tmp_table, [(-1, "t"), (1, "t"), (2, "t")])
    new = spark.createDataFrame([(5, "s")], SCHEMA).alias("s")
    new.write.format("delta").mode("overwrite").option("targetAlias", "t").option("replaceOn", "t.id >= 1") \
        .save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == [(-1, "t"), (5, "s")]
    empty = spark.createDataFrame([], SCHEMA).alias("s")
    empty.write.format("delta").mode("overwrite").option("replaceOn", "true").save(tmp_table)
    assert rows(spark, tmp_table) == [(-1, "t"), (5, "s")]  # nothing written: nothing replaced


def test_replace_in_append_mode_appends(spark: SparkSession, tmp_table: str) -> None:
    """In ``append`` the options are checked and recorded, the rows appended (as delta-spark does)."""
    table(spark, tmp_table, [(1, "t")])
    spark.createDataFrame([(1, "s")], SCHEMA).write.format("delta").mode("append").option("replaceUsing", "id") \
        .save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == [(1, "s"), (1, "t")]
    params = dict(last_commit(spark, tmp_table)["operationParameters"])
    assert params == {"mode": "Append", "partitionBy": "[]", "replaceUsingCols": "(id)"}


def test_replace_through_save_as_table_insert_into_and_write_to(spark: SparkSession, tmp_path: Path) -> None:
    spark.createDataFrame([(1, "t"), (2, "t")], SCHEMA).write.format("delta").saveAsTable("r1")
    spark.createDataFrame([(2, "s"), (3, "s")], SCHEMA).write.format("delta").mode("overwrite") \
        .option("replaceUsing", "id").saveAsTable("r1")  # fmt: skip
    assert sorted(map(tuple, spark.table("r1").collect())) == [(1, "t"), (2, "s"), (3, "s")]
    # insertInto: by position; the key keeps its place, the other column may be named otherwise.
    spark.createDataFrame([(1, "i")], "id int, w string").write.mode("overwrite").option("replaceUsing", "id") \
        .insertInto("r1")  # fmt: skip
    assert sorted(map(tuple, spark.table("r1").collect())) == [(1, "i"), (2, "s"), (3, "s")]
    spark.createDataFrame([(1, 2)], "a int, b int").write.format("delta").saveAsTable("r3")
    with pytest.raises(DeltaAnalysisException, match=r"INSERT_REPLACE_USING_DISALLOW_MISALIGNED_COLUMNS\] INSERT "
                       r"REPLACE USING has misaligned columns: `a`"):  # fmt: skip
        spark.createDataFrame([(2, 1)], "b int, a int").write.mode("overwrite") \
            .option("replaceUsing", "a").insertInto("r3")  # fmt: skip
    assert rows_of_table(spark, "r3") == [(1, 2)]
    with pytest.raises(DeltaAnalysisException, match=r"Column `id` cannot be resolved in query"):
        spark.createDataFrame([(1, "x")], "key int, v string").write.mode("overwrite") \
            .option("replaceUsing", "id").insertInto("r1")  # fmt: skip
    # writeTo(...).append() appends; overwrite(cond), overwritePartitions() and create() refuse the options.
    spark.createDataFrame([(2, "w")], SCHEMA).writeTo("r1").option("replaceUsing", "id").append()
    assert sorted(map(tuple, spark.table("r1").collect())) == [(1, "i"), (2, "s"), (2, "w"), (3, "s")]
    writer = spark.createDataFrame([(2, "w")], SCHEMA).writeTo("r1").option("replaceUsing", "id")
    with pytest.raises(DeltaIllegalArgumentException, match="OVERWRITE_BY_FILTER_INCOMPATIBLE_REPLACE_ON_OR_USING"):
        writer.overwrite(F.col("id") == 2)
    with pytest.raises(DeltaIllegalArgumentException, match="DYNAMIC_PARTITION_OVERWRITE_INCOMPATIBLE_REPLACE_ON"):
        writer.overwritePartitions()
    with pytest.raises(DeltaAnalysisException, match="DELTA_DFV2_CREATE_REPLACE_INCOMPATIBLE_REPLACE_ON_OR_USING"):
        spark.createDataFrame([(2, "w")], SCHEMA).writeTo("r2").using("delta").option("replaceOn", "true").create()
    assert not spark.catalog.tableExists("r2")


def test_replace_option_errors(spark: SparkSession, tmp_table: str) -> None:
    """delta-spark's errors, class and message, for every misuse; the table is left as it was."""
    table(spark, tmp_table, [(1, "t"), (2, "t")])
    new = spark.createDataFrame([(1, "s")], SCHEMA)

    def over(**options: str) -> None:
        new.write.format("delta").mode("overwrite").options(**options).save(tmp_table)

    with pytest.raises(DeltaIllegalArgumentException, match=r"DELTA_INCOMPATIBLE_DATAFRAME_OPTIONS\] The `replaceOn` "
                       r"option cannot be used with the `replaceUsing` option"):  # fmt: skip
        over(replaceUsing="id", replaceOn="true")
    with pytest.raises(DeltaIllegalArgumentException, match="DELTA_OVERWRITE_BY_FILTER_INCOMPATIBLE_REPLACE_ON"):
        over(replaceUsing="id", replaceWhere="id > 0")
    with pytest.raises(DeltaIllegalArgumentException, match="DELTA_DYNAMIC_PARTITION_OVERWRITE_INCOMPATIBLE_REPL"):
        over(replaceUsing="id", partitionOverwriteMode="static")
    with pytest.raises(DeltaIllegalArgumentException, match=r"The `overwriteSchema` option cannot be used with the "
                       r"`replaceOn` option"):  # fmt: skip
        over(replaceOn="true", overwriteSchema="true")
    with pytest.raises(DeltaIllegalArgumentException, match=r"DELTA_ILLEGAL_OPTION\] Invalid value 'id,' for option "
                       r"'replaceUsing', must not contain empty column names"):  # fmt: skip
        over(replaceUsing="id,")
    with pytest.raises(DeltaAnalysisException, match=r"UNRESOLVED_INSERT_REPLACE_USING_COLUMN\] Column `nope` cannot "
                       r"be resolved in table\. Did you mean one of the following\? \[`id`, `v`\]"):  # fmt: skip
        over(replaceUsing="id, nope")
    with pytest.raises(DeltaAnalysisException, match=r"DELTA_INSERT_REPLACE_ON_AMBIGUOUS_COLUMNS_IN_CONDITION\] "
                       r"Column\(s\) `id` are ambiguous"):  # fmt: skip
        over(replaceOn="id = id")
    with pytest.raises(DeltaAnalysisException, match=r"DELTA_INSERT_REPLACE_ON_UNRESOLVED_COLUMNS_IN_CONDITION\] "
                       r"Column\(s\) `t`\.`id`, `s`\.`id` cannot be resolved"):  # fmt: skip
        over(replaceOn="t.id = s.id")
    with pytest.raises(DeltaTableNotFoundError, match=r"DELTA_PATH_DOES_NOT_EXIST\] .*new doesn't exist"):
        new.write.format("delta").mode("overwrite").option("replaceUsing", "id").save(tmp_table + "new")
    with settings(spark, replaceUsing__dataframe__writer__enabled="false"), pytest.raises(
        DeltaAnalysisException, match=r"DELTA_OPERATION_NOT_ALLOWED\] Operation not allowed: `replaceUsing`"
    ):
        over(replaceUsing="id")
    assert rows(spark, tmp_table) == [(1, "t"), (2, "t")]
    assert DeltaLog.for_table(tmp_table).update().version == 0


def test_replace_keeps_check_constraints(spark: SparkSession, tmp_table: str) -> None:
    table(spark, tmp_table, [(1, "a"), (2, "b")])
    spark.sql(f"ALTER TABLE delta.`{tmp_table}` ADD CONSTRAINT short CHECK (length(v) = 1)")
    with pytest.raises(DeltaAnalysisException, match=r"DELTA_REPLACE_ON_OR_USING_TABLE_CONSTRAINT_VIOLATION\] Written "
                       r"data violates a table constraint during REPLACE ON/USING 'id'"):  # fmt: skip
        spark.createDataFrame([(1, "too long")], SCHEMA).write.format("delta").mode("overwrite") \
            .option("replaceUsing", "id").save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_replace_change_data_feed(spark: SparkSession, tmp_table: str, dvs: bool) -> None:
    """The change feed of a replace: the replaced rows deleted, the written ones inserted; rows kept
    in a rewritten file are no change."""
    props = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": str(dvs).lower()}
    table(spark, tmp_table, [(i, "t") for i in range(6)], **props)
    spark.createDataFrame([(1, "s"), (9, "s")], SCHEMA).write.format("delta").mode("overwrite") \
        .option("replaceUsing", "id").save(tmp_table)  # fmt: skip
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1) \
        .load(tmp_table).select("id", "v", "_change_type").collect()  # fmt: skip
    assert sorted(map(tuple, changes)) == [(1, "s", "insert"), (1, "t", "delete"), (9, "s", "insert")]
    assert rows(spark, tmp_table) == sorted([(i, "t") for i in (0, 2, 3, 4, 5)] + [(1, "s"), (9, "s")])


def test_replace_ignores_the_sessions_partition_overwrite_mode(spark: SparkSession, tmp_table: str) -> None:
    spark.createDataFrame([(0, "a"), (1, "b")], SCHEMA).write.format("delta").partitionBy("v").save(tmp_table)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        spark.createDataFrame([(1, "s")], SCHEMA).write.format("delta").mode("overwrite") \
            .option("replaceUsing", "id").save(tmp_table)  # fmt: skip
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert rows(spark, tmp_table) == [(0, "a"), (1, "s")]


def test_sql_insert_replace_on_or_using_is_refused(spark: SparkSession) -> None:
    """Spark 4 parses ``INSERT INTO t REPLACE USING/ON``; delta-spark 4.4 does not run it: neither does
    serialake (it once appended, the clause ignored)."""
    spark.sql("CREATE TABLE ru (id int, v string) USING delta")
    for text in ("INSERT INTO ru REPLACE USING (id) SELECT 1 AS id, 'x' AS v",
                 "INSERT INTO ru AS t REPLACE ON t.id = s.id (SELECT 1 AS id, 'x' AS v) AS s"):  # fmt: skip
        with pytest.raises(DeltaAnalysisException, match=r"UNSUPPORTED_FEATURE\.TABLE_OPERATION.*REPLACE ON/USING"):
            spark.sql(text)
    assert spark.table("ru").count() == 0


# ---------------------------------------------------------------------------------------------
# Session defaults for new tables
# ---------------------------------------------------------------------------------------------


def _conf(path: str) -> dict[str, str]:
    return dict(DeltaLog.for_table(path).update().configuration)


def test_session_defaults_apply_to_every_new_table(spark: SparkSession, tmp_path: Path) -> None:
    """``spark.databricks.delta.properties.defaults.<p>`` gives every table created after it ``delta.<p>``,
    by any path; the table's own properties win; existing tables are left alone."""
    from serialake.core.tables import catalog

    old = str(tmp_path / "old")
    table(spark, old, [(1, "a")])
    defaults = {"properties__defaults__enableDeletionVectors": "true",
                "properties__defaults__checkpointInterval": "7",
                "properties__defaults__isolationLevel": "Serializable"}  # fmt: skip
    want = {"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "7",
            "delta.isolationLevel": "Serializable"}  # fmt: skip
    with settings(spark, **defaults):
        saved = str(tmp_path / "saved")
        table(spark, saved, [(1, "a")], **{"delta.checkpointInterval": "3"})
        spark.createDataFrame([(1, "a")], SCHEMA).write.format("delta").saveAsTable("d_sat")
        spark.createDataFrame([(1, "a")], SCHEMA).writeTo("d_wt").using("delta").create()
        spark.sql("CREATE TABLE d_ct (id int) USING delta TBLPROPERTIES ('delta.isolationLevel' = 'WriteSerializable')")
        spark.sql("CREATE TABLE d_ctas USING delta AS SELECT 1 AS id")
        DeltaTable.create(spark).tableName("d_b").addColumn("id", "int").execute()
        spark.createDataFrame([(2, "b")], SCHEMA).write.format("delta").mode("overwrite") \
            .option("overwriteSchema", "true").save(old)  # fmt: skip
        clone = str(tmp_path / "clone")
        DeltaTable.forPath(spark, old).clone(clone, isShallow=True)  # an exact copy: no defaults (delta-spark)
    assert _conf(clone) == {}
    assert _conf(saved) == {**want, "delta.checkpointInterval": "3"}
    for name in ("d_sat", "d_wt", "d_ctas", "d_b"):
        assert _conf(catalog.lookup(name) or "") == want, name
    assert _conf(catalog.lookup("d_ct") or "") == {**want, "delta.isolationLevel": "WriteSerializable"}
    assert _conf(old) == {}  # an existing table, overwritten: delta-spark does not apply the defaults
    snap = DeltaLog.for_table(saved).update()
    assert "deletionVectors" in (snap.protocol.writer_features or ())


def test_session_default_column_mapping_and_bad_defaults(spark: SparkSession, tmp_path: Path) -> None:
    named = str(tmp_path / "named")
    with settings(spark, properties__defaults__columnMapping__mode="name"):
        table(spark, named, [(1, "a")])
    snap = DeltaLog.for_table(named).update()
    assert snap.configuration["delta.columnMapping.mode"] == "name"
    assert rows(spark, named) == [(1, "a")]
    bad = str(tmp_path / "bad")
    with settings(spark, properties__defaults__appendOnly="maybe"), pytest.raises(
        InvalidPropertyError, match=r"spark\.databricks\.delta\.properties\.defaults\.appendOnly=maybe"
    ):
        table(spark, bad, [(1, "a")])
    assert not DeltaLog.for_table(bad).table_exists()


def test_delta_options_are_properties_of_new_tables_only(spark: SparkSession, tmp_table: str) -> None:
    table(spark, tmp_table, [(1, "a")], **{"delta.appendOnly": "true"})
    assert _conf(tmp_table) == {"delta.appendOnly": "true"}
    spark.createDataFrame([(2, "b")], SCHEMA).write.format("delta").mode("append") \
        .option("delta.checkpointInterval", "4").save(tmp_table)  # fmt: skip
    assert _conf(tmp_table) == {"delta.appendOnly": "true"}  # ignored for an existing table, as delta-spark does
    with pytest.raises(InvalidPropertyError, match="delta.nosuch"):
        table(spark, tmp_table + "x", [(1, "a")], **{"delta.noSuch": "1"})


# ---------------------------------------------------------------------------------------------
# replaceWhere's session settings
# ---------------------------------------------------------------------------------------------


def test_replace_where_constraint_check_can_be_turned_off(spark: SparkSession, tmp_table: str) -> None:
    table(spark, tmp_table, [(1, "a"), (2, "b"), (3, "c")])
    new = spark.createDataFrame([(1, "x"), (5, "y")], SCHEMA)
    with pytest.raises(DeltaAnalysisException, match=r"DELTA_REPLACE_WHERE_MISMATCH.*replaceWhere 'id <= 2'"):
        new.write.format("delta").mode("overwrite").option("replaceWhere", "id <= 2").save(tmp_table)
    with settings(spark, replaceWhere__constraintCheck__enabled="false"):
        new.write.format("delta").mode("overwrite").option("replaceWhere", "id <= 2").save(tmp_table)
    # As delta-spark: rows matching the condition go, every written row is added.
    assert rows(spark, tmp_table) == [(1, "x"), (3, "c"), (5, "y")]
    assert dict(last_commit(spark, tmp_table)["operationParameters"])["mode"] == "Overwrite"


def test_replace_where_on_partition_columns_only(spark: SparkSession, tmp_table: str) -> None:
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], SCHEMA).write.format("delta").partitionBy("v") \
        .save(tmp_table)  # fmt: skip
    with settings(spark, replaceWhere__dataColumns__enabled="false"):
        with pytest.raises(DeltaAnalysisException, match=r"DELTA_NON_PARTITION_COLUMN_REFERENCE\] Predicate "
                           r"references non-partition column 'id'. Only the partition columns may be referenced: "
                           r"\[v\]"):  # fmt: skip
            spark.createDataFrame([(1, "a")], SCHEMA).write.format("delta").mode("overwrite") \
                .option("replaceWhere", "id <= 2").save(tmp_table)  # fmt: skip
        spark.createDataFrame([(7, "a"), (8, "a")], SCHEMA).write.format("delta").mode("overwrite") \
            .option("replaceWhere", "v = 'a'").save(tmp_table)  # fmt: skip
        with pytest.raises(DeltaAnalysisException, match="DELTA_REPLACE_WHERE_MISMATCH"), settings(
            spark, replaceWhere__constraintCheck__enabled="false"
        ):  # without data columns, delta-spark checks the written partitions whatever that setting
            spark.createDataFrame([(9, "b")], SCHEMA).write.format("delta").mode("overwrite") \
                .option("replaceWhere", "v = 'a'").save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == [(2, "b"), (3, "c"), (7, "a"), (8, "a")]


def test_replace_where_with_target_alias(spark: SparkSession, tmp_table: str) -> None:
    table(spark, tmp_table, [(1, "a"), (2, "b"), (3, "c")])
    spark.createDataFrame([(2, "x")], SCHEMA).write.format("delta").mode("overwrite").option("targetAlias", "t") \
        .option("replaceWhere", "t.id >= 2").save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == [(1, "a"), (2, "x")]


# ---------------------------------------------------------------------------------------------
# Options and settings serialake does not implement: refused, named
# ---------------------------------------------------------------------------------------------


def test_unimplemented_delta_options_are_refused(spark: SparkSession, tmp_table: str) -> None:
    df = spark.createDataFrame([(1, "a")], SCHEMA)
    for key, value in (("optimizeWrite", "true"), ("dataChange", "false"), ("compression", "zstd"),
                       ("writePartitionColumns", "true")):  # fmt: skip
        with pytest.raises(DeltaIllegalArgumentException, match=rf"Delta write option {key}='{value}' is not "
                           "implemented by serialake"):  # fmt: skip
            df.write.format("delta").option(key, value).save(tmp_table)
    with pytest.raises(DeltaIllegalArgumentException, match="'fs.s3a.access.key' is a Hadoop file-system setting"):
        df.write.format("delta").option("fs.s3a.access.key", "k").save(tmp_table)
    with pytest.raises(DeltaIllegalArgumentException, match="Delta write option optimizeWrite='true'"):
        df.writeTo("opt_t").using("delta").option("optimizeWrite", "true").create()
    assert not DeltaLog.for_table(tmp_table).table_exists() and not spark.catalog.tableExists("opt_t")
    # At a value that changes nothing, or not Delta's (delta-spark's writer ignores those too): accepted.
    df.write.format("delta").option("dataChange", "true").option("optimizeWrite", "false") \
        .option("compression", "snappy").option("header", "true").option("checkpointLocation", "/x") \
        .save(tmp_table)  # fmt: skip
    assert rows(spark, tmp_table) == [(1, "a")]


def test_unimplemented_session_settings_are_refused(spark: SparkSession, tmp_table: str) -> None:
    df = spark.createDataFrame([(1, "a")], SCHEMA)
    with settings(spark, optimizeWrite__enabled="true"), pytest.raises(
        DeltaIllegalArgumentException,
        match=r"session setting spark\.databricks\.delta\.optimizeWrite\.enabled=true is not implemented",
    ):
        df.write.format("delta").save(tmp_table)
    with settings(spark, stats__collect="false"), pytest.raises(DeltaIllegalArgumentException, match="stats.collect"):
        spark.sql(f"CREATE TABLE delta.`{tmp_table}` USING delta AS SELECT 1 AS id")
    assert not DeltaLog.for_table(tmp_table).table_exists()
    # Their defaults, and settings of other operations (VACUUM's), do not stop a write.
    with settings(spark, optimizeWrite__enabled="false", retentionDurationCheck__enabled="false"):
        df.write.format("delta").save(tmp_table)
    assert rows(spark, tmp_table) == [(1, "a")]


def test_dynamic_partition_overwrite_can_be_turned_off(spark: SparkSession, tmp_table: str) -> None:
    spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA).write.format("delta").partitionBy("v").save(tmp_table)
    new = spark.createDataFrame([(3, "a")], SCHEMA)
    with settings(spark, dynamicPartitionOverwrite__enabled="false"):
        with pytest.raises(DeltaIllegalArgumentException, match="DELTA_DYNAMIC_PARTITION_OVERWRITE_DISABLED"):
            new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic").save(tmp_table)
        new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "static").save(tmp_table)
    assert rows(spark, tmp_table) == [(3, "a")]


def test_idempotent_writes_by_session_settings(spark: SparkSession, tmp_table: str) -> None:
    """``spark.databricks.delta.write.txnAppId`` / ``txnVersion``: a write of a version the app already
    committed is skipped; ``autoReset`` unsets the version after each write."""
    with settings(spark, write__txnAppId="app", write__txnVersion="3"):
        table(spark, tmp_table, [(1, "a")])
        spark.createDataFrame([(2, "b")], SCHEMA).write.format("delta").mode("append").save(tmp_table)
    assert rows(spark, tmp_table) == [(1, "a")]
    assert DeltaLog.for_table(tmp_table).update().version == 0
    with settings(spark, write__txnAppId="app", write__txnVersion="4", write__txnVersion__autoReset__enabled="true"):
        spark.createDataFrame([(2, "b")], SCHEMA).write.format("delta").mode("append").save(tmp_table)
        assert spark.conf.get("spark.databricks.delta.write.txnVersion", None) is None
        # The app id alone: refused, as delta-spark does (the next version must be set).
        with pytest.raises(DeltaIllegalArgumentException, match="MISSING_SESSION_CONFS"):
            spark.createDataFrame([(3, "c")], SCHEMA).write.format("delta").mode("append").save(tmp_table)
        spark.conf.set("spark.databricks.delta.write.txnVersion", "5")
        spark.createDataFrame([(3, "c")], SCHEMA).write.format("delta").mode("append").save(tmp_table)
    assert rows(spark, tmp_table) == [(1, "a"), (2, "b"), (3, "c")]
    txns = DeltaLog.for_table(tmp_table).update()
    assert txns.version == 2
