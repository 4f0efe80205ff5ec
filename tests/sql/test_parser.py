"""Parsing SQL into typed statements, without Spark: every statement kind, errors and positions."""

from __future__ import annotations

import pytest

from serialake.exceptions import DeltaError
from serialake.sql import SqlError, UnsupportedStatementError, parse_statement, split_statements
from serialake.sql import statements as S


def parse(text: str) -> S.Statement:
    return parse_statement(text)


def test_create_table_with_everything() -> None:
    st = parse(
        "CREATE TABLE IF NOT EXISTS events (id BIGINT NOT NULL COMMENT 'key', date STRING, v DECIMAL(10,2)) "
        "USING DELTA PARTITIONED BY (date) TBLPROPERTIES ('delta.isolationLevel' = 'Serializable', "
        "delta.appendOnly = false) LOCATION '/tmp/events' COMMENT 'events table'"
    )
    assert isinstance(st, S.CreateTable)
    assert st.table == S.TableRef(text="events", name="events")
    assert st.columns == (
        S.ColumnSpec("id", "BIGINT", nullable=False, comment="key"),
        S.ColumnSpec("date", "STRING"),
        S.ColumnSpec("v", "DECIMAL(10, 2)"),
    )
    assert st.partition_by == ("date",)
    assert st.properties == {"delta.isolationLevel": "Serializable", "delta.appendOnly": "false"}
    assert (st.location, st.comment, st.if_not_exists, st.mode) == ("/tmp/events", "events table", True, "create")


def test_create_variants() -> None:
    path = parse("CREATE TABLE delta.`/data/t` (a INT) USING delta")
    assert isinstance(path, S.CreateTable) and path.table.path == "/data/t" and path.table.name is None
    replace = parse("CREATE OR REPLACE TABLE t (a INT) USING DELTA LOCATION '/x'")
    assert isinstance(replace, S.CreateTable) and replace.mode == "createOrReplace"
    bare_replace = parse("REPLACE TABLE t (a INT) USING DELTA")
    assert isinstance(bare_replace, S.CreateTable) and bare_replace.mode == "replace"
    ctas = parse("CREATE TABLE t USING DELTA PARTITIONED BY (p) AS SELECT 1 AS a, 2 AS p")
    assert isinstance(ctas, S.CreateTable) and ctas.query is not None and ctas.partition_by == ("p",)
    existing = parse("CREATE TABLE t USING DELTA LOCATION '/x'")
    assert isinstance(existing, S.CreateTable) and existing.columns == () and existing.location == "/x"
    parquet = parse("CREATE TABLE p (a INT) USING parquet")
    assert isinstance(parquet, S.Passthrough)
    view = parse("CREATE OR REPLACE TEMP VIEW v AS SELECT * FROM delta.`/x`")
    assert isinstance(view, S.CreateTempView) and view.name == "v" and view.replace


def test_insert_forms() -> None:
    values = parse("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    assert isinstance(values, S.Insert) and not values.overwrite and values.columns is None
    cols = parse("INSERT INTO t (id, date) SELECT id, date FROM s")
    assert isinstance(cols, S.Insert) and cols.columns == ("id", "date")
    over = parse("INSERT OVERWRITE t SELECT * FROM s")
    assert isinstance(over, S.Insert) and over.overwrite
    rw = parse("INSERT INTO t REPLACE WHERE date = '2024-01-01' SELECT * FROM s")
    assert isinstance(rw, S.Insert) and rw.replace_where == "date = '2024-01-01'"
    part = parse("INSERT OVERWRITE TABLE t PARTITION (date = '2024-01-01') SELECT 1, 'x'")
    assert isinstance(part, S.Insert) and list(part.static_partition) == ["date"]
    by_name = parse("INSERT INTO t BY NAME SELECT 1 AS id")
    assert isinstance(by_name, S.Insert) and by_name.by_name
    table = parse("INSERT INTO t TABLE src")
    assert isinstance(table, S.Insert) and table.query.sql() == "SELECT * FROM src"


def test_delete_update_conditions_lose_the_target_qualifier() -> None:
    delete = parse("DELETE FROM events AS e WHERE e.date < '2010-01-01' AND events.id = 3")
    assert isinstance(delete, S.Delete)
    assert delete.condition == "date < '2010-01-01' AND id = 3"
    bare = parse("DELETE FROM t")
    assert isinstance(bare, S.Delete) and bare.condition is None
    seed_prose = parse("DELETE table WHERE date < '2010-01-01'")  # the seeds' prose form, no FROM
    assert isinstance(seed_prose, S.Delete) and seed_prose.table.name == "table"
    update = parse("UPDATE delta.`/x` t SET t.v = v + 1, w = 'x' WHERE t.date > '2010-01-01'")
    assert isinstance(update, S.Update)
    assert update.table.path == "/x"
    assert update.assignments == (("v", "v + 1"), ("w", "'x'"))
    assert update.condition == "date > '2010-01-01'"
    truncate = parse("TRUNCATE TABLE t")
    assert isinstance(truncate, S.Delete) and truncate.operation == "TRUNCATE"


def test_merge_clauses() -> None:
    st = parse(
        "MERGE INTO delta_table d USING source_table s\n"
        "ON s.user_id = d.user_id AND d.date = '2024-01-01'\n"
        "WHEN MATCHED AND s.op = 'del' THEN DELETE\n"
        "WHEN MATCHED THEN UPDATE SET d.v = s.v\n"
        "WHEN NOT MATCHED THEN INSERT (user_id, d.v) VALUES (s.user_id, s.v)\n"
        "WHEN NOT MATCHED BY SOURCE AND d.v < 0 THEN DELETE\n"
        "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = 0"
    )
    assert isinstance(st, S.Merge)
    assert (st.target.name, st.target_alias, st.source_alias) == ("delta_table", "d", "s")
    assert st.condition == "s.user_id = d.user_id AND d.date = '2024-01-01'"
    assert st.clauses == (
        S.MergeClause("matched", "delete", "s.op = 'del'"),
        S.MergeClause("matched", "update", None, (("v", "s.v"),)),
        S.MergeClause("not_matched", "insert", None, (("user_id", "s.user_id"), ("v", "s.v"))),
        S.MergeClause("not_matched_by_source", "delete", "d.v < 0"),
        S.MergeClause("not_matched_by_source", "update", None, (("v", "0"),)),
    )
    star = parse("MERGE INTO t USING (SELECT 1 AS id) AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
                 "WHEN NOT MATCHED THEN INSERT *")
    assert isinstance(star, S.Merge) and star.target_alias == "t"
    assert [c.action for c in star.clauses] == ["update_all", "insert_all"]


def test_alter_table() -> None:
    st = parse("ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = true, 'a.b' = 1)")
    assert isinstance(st, S.SetProperties) and st.properties == {"delta.enableDeletionVectors": "true", "a.b": "1"}
    unset = parse("ALTER TABLE t UNSET TBLPROPERTIES IF EXISTS ('a.b', delta.appendOnly)")
    assert isinstance(unset, S.UnsetProperties) and unset.keys == ("a.b", "delta.appendOnly") and unset.if_exists
    add = parse("ALTER TABLE t ADD COLUMNS (col_name STRING COMMENT 'c', n ARRAY<INT>)")
    assert isinstance(add, S.AddColumns)
    assert add.columns == (S.ColumnSpec("col_name", "STRING", comment="c"), S.ColumnSpec("n", "ARRAY<INT>"))
    one = parse("ALTER TABLE t ADD COLUMN x BIGINT")
    assert isinstance(one, S.AddColumns) and one.columns == (S.ColumnSpec("x", "BIGINT"),)
    drop = parse("ALTER TABLE t DROP FEATURE deletionVectors TRUNCATE HISTORY")
    assert isinstance(drop, S.DropFeature) and drop.feature == "deletionVectors" and drop.truncate_history


def test_alter_columns_clustering_and_names() -> None:
    hive = parse("ALTER TABLE t CHANGE COLUMN a a BIGINT COMMENT 'x' AFTER b")
    assert isinstance(hive, S.ChangeColumn)
    assert (hive.column, hive.new_name, hive.data_type, hive.comment, hive.after) == (("a",), "a", "BIGINT", "x", "b")
    nested = parse("ALTER TABLE t ALTER COLUMN s.`b c` DROP NOT NULL")
    assert isinstance(nested, S.ChangeColumn) and nested.column == ("s", "b c") and nested.nullable is True
    first = parse("ALTER TABLE t ALTER a FIRST")
    assert isinstance(first, S.ChangeColumn) and first.first and first.nullable is None
    typed = parse("ALTER TABLE t ALTER COLUMN a TYPE DECIMAL(10, 2) SET NOT NULL")
    assert isinstance(typed, S.ChangeColumn) and typed.data_type == "DECIMAL(10, 2)" and typed.nullable is False
    cluster = parse("ALTER TABLE t CLUSTER BY (a, b)")
    assert isinstance(cluster, S.ClusterBy) and cluster.columns == ("a", "b")
    none = parse("ALTER TABLE t CLUSTER BY NONE")
    assert isinstance(none, S.ClusterBy) and none.columns == ()
    rename = parse("ALTER TABLE db.t RENAME TO db.u")
    assert isinstance(rename, S.RenameTable) and rename.new_name == "db.u"
    column = parse("ALTER TABLE t RENAME COLUMN s.`a b` TO c")
    assert isinstance(column, S.RenameColumn) and column.column == ("s", "a b") and column.new_name == "c"
    dropped = parse("ALTER TABLE t DROP COLUMNS IF EXISTS (a, s.`b c`)")
    assert isinstance(dropped, S.DropColumns) and dropped.if_exists
    assert dropped.columns == (("a",), ("s", "b c"))
    single = parse("ALTER TABLE t DROP COLUMN a")
    assert isinstance(single, S.DropColumns) and single.columns == (("a",),) and not single.if_exists
    moved = parse("ALTER TABLE t SET LOCATION '/new/place'")
    assert isinstance(moved, S.SetLocation) and moved.location == "/new/place"
    created = parse(
        "CREATE TABLE t (id BIGINT GENERATED BY DEFAULT AS IDENTITY (START WITH -3 INCREMENT BY 2), v INT) "
        "USING delta CLUSTER BY (v)"
    )
    assert isinstance(created, S.CreateTable) and created.cluster_by == ("v",)
    assert created.columns[0].identity == (-3, 2, False)
    always = parse("CREATE TABLE t (id BIGINT GENERATED ALWAYS AS IDENTITY) USING delta")
    assert isinstance(always, S.CreateTable) and always.columns[0].identity == (1, 1, True)
    full = parse("OPTIMIZE t FULL")
    assert isinstance(full, S.Optimize) and full.full
    evolving = parse("MERGE WITH SCHEMA EVOLUTION INTO t USING s ON t.k = s.k WHEN MATCHED THEN UPDATE SET *")
    assert isinstance(evolving, S.Merge) and evolving.schema_evolution and evolving.target_alias == "t"
    cloned = parse(
        "CREATE OR REPLACE TABLE c SHALLOW CLONE delta.`/src` VERSION AS OF 3 TBLPROPERTIES ('a' = 'b', x = 1) "
        "LOCATION '/dst'"
    )
    assert isinstance(cloned, S.Clone) and cloned.shallow and cloned.mode == "createOrReplace"
    assert (cloned.source.path, cloned.version, cloned.properties, cloned.location) == (
        "/src", 3, {"a": "b", "x": "1"}, "/dst"
    )
    deep = parse("CREATE TABLE IF NOT EXISTS c DEEP CLONE s TIMESTAMP AS OF '2024-01-01 00:00:00'")
    assert isinstance(deep, S.Clone) and not deep.shallow and deep.if_not_exists
    assert deep.timestamp == "'2024-01-01 00:00:00'"
    assert isinstance(parse("CREATE TABLE t (a INT) USING delta"), S.CreateTable)
    plain = parse("MERGE INTO t USING s ON t.k = s.k WHEN MATCHED THEN DELETE")
    assert isinstance(plain, S.Merge) and not plain.schema_evolution


def test_delta_commands() -> None:
    opt = parse("OPTIMIZE events WHERE date >= '2024-01-01' AND (country = 'us') ZORDER BY (user_id, amount)")
    assert isinstance(opt, S.Optimize)
    assert opt.where == "date >= '2024-01-01' AND (country = 'us')" and opt.zorder_by == ("user_id", "amount")
    assert parse("OPTIMIZE '/data/t' ZORDER BY a").zorder_by == ("a",)  # type: ignore[attr-defined]
    reorg = parse("REORG TABLE delta.`/data/t` WHERE p = 1 APPLY (PURGE)")
    assert isinstance(reorg, S.Reorg) and reorg.table.path == "/data/t" and reorg.where == "p = 1"
    hist = parse("DESCRIBE HISTORY events LIMIT 5")
    assert isinstance(hist, S.DescribeHistory) and hist.limit == 5
    assert isinstance(parse("DESC DETAIL events"), S.DescribeDetail)
    desc = parse("DESCRIBE TABLE EXTENDED events")
    assert isinstance(desc, S.DescribeTable) and desc.extended
    assert isinstance(parse("DESCRIBE FUNCTION abs"), S.Passthrough)
    vac = parse("VACUUM events RETAIN 0.5 HOURS DRY RUN")
    assert isinstance(vac, S.Vacuum) and vac.retain_hours == 0.5 and vac.dry_run
    assert parse("VACUUM events") == S.Vacuum(table=S.TableRef("events", name="events"), text="VACUUM events")
    restore = parse("RESTORE TABLE events TO VERSION AS OF 3")
    assert isinstance(restore, S.Restore) and restore.version == 3
    restore_ts = parse("RESTORE events TIMESTAMP AS OF '2024-01-01 00:00:00'")
    assert isinstance(restore_ts, S.Restore) and restore_ts.timestamp == "'2024-01-01 00:00:00'"


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("SET TRANSACTION_ISOLATION TO 'SERIALIZABLE'", "SERIALIZABLE"),
        ("SET TRANSACTION_ISOLATION TO 'STRICT SERIALIZABLE';", "STRICT SERIALIZABLE"),
        ("SET TRANSACTION_ISOLATION = 'read committed'", "SERIALIZABLE"),
        ("SET TRANSACTION_ISOLATION TO 'REPEATABLE READ'", "SERIALIZABLE"),
        ("SET TRANSACTION_ISOLATION TO 'READ UNCOMMITTED'", "SERIALIZABLE"),
        ("SET TRANSACTION ISOLATION LEVEL STRICT SERIALIZABLE", "STRICT SERIALIZABLE"),
    ],
)
def test_set_transaction_isolation(text: str, level: str) -> None:
    st = parse(text)
    assert isinstance(st, S.SetIsolation) and st.level == level
    assert isinstance(parse("SHOW TRANSACTION_ISOLATION"), S.ShowIsolation)


def test_queries_and_passthrough() -> None:
    q = parse("-- a comment\nSELECT * FROM events VERSION AS OF 1 WHERE id > 1;")
    assert isinstance(q, S.Query)
    assert isinstance(parse("WITH c AS (SELECT 1 AS a) SELECT * FROM c"), S.Query)
    assert isinstance(parse("SET spark.sql.shuffle.partitions = 2"), S.Passthrough)
    assert isinstance(parse("SHOW TABLES"), S.Passthrough)


def test_split_statements_respects_quotes_and_comments() -> None:
    script = "SELECT ';' AS a; -- one; two\nSELECT 2;\n/* x; */\n;  \nSELECT `a;b` FROM t"
    assert [body.strip() for _, body in split_statements(script)] == [
        "SELECT ';' AS a",
        "-- one; two\nSELECT 2",
        "SELECT `a;b` FROM t",
    ]


# -- errors ------------------------------------------------------------------------------------


def test_syntax_error_names_line_column_and_text() -> None:
    text = "SELECT a,\n  b FROM t WHERE x = = 1"
    with pytest.raises(SqlError) as info:
        parse(text)
    e = info.value
    assert (e.line, e.column, e.text) == (2, 22, "=")
    assert isinstance(e, DeltaError) and isinstance(e, ValueError)
    assert "line 2, column 22 near '='" in str(e)
    assert "  b FROM t WHERE x = = 1\n" + " " * 23 + "^" in str(e)


def test_error_inside_a_delta_command_points_into_it() -> None:
    with pytest.raises(SqlError) as info:
        parse("OPTIMIZE t WHERE date = = 1")
    assert (info.value.line, info.value.column, info.value.text) == (1, 25, "=")
    with pytest.raises(SqlError) as info:
        parse("VACUUM t RETAIN x HOURS")
    assert (info.value.column, info.value.text) == (17, "x")
    assert "retention in hours" in str(info.value)
    with pytest.raises(SqlError, match="The statement ended"):
        parse("DESCRIBE HISTORY")


def test_unterminated_string_and_bad_level() -> None:
    with pytest.raises(SqlError) as info:
        parse("SELECT 'abc")
    assert (info.value.line, info.value.column) == (1, 8) and "Unterminated string" in str(info.value)
    with pytest.raises(SqlError) as info:
        parse("SET TRANSACTION_ISOLATION TO 'SNAPSHOT'")
    assert info.value.text == "SNAPSHOT" and "STRICT SERIALIZABLE" in str(info.value)


def test_one_statement_at_a_time_and_empty() -> None:
    with pytest.raises(SqlError) as info:
        parse("SELECT 1;\nSELECT 2")
    assert (info.value.line, info.value.column, info.value.text) == (2, 1, "SELECT")
    with pytest.raises(SqlError, match="Empty statement"):
        parse("  -- nothing\n ; ")


def test_seed_merge_as_extracted_is_a_positioned_syntax_error() -> None:
    """The seed's MERGE lost its ``s.date = d.date`` terms when the page was scraped."""
    garbled = "    MERGE INTO delta_table d\n    USING source_table s\n    ON s.user_id = d.user_id AND = AND ="
    with pytest.raises(SqlError) as info:
        parse(garbled)
    assert info.value.line == 3 and info.value.text == "AND"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("CREATE TABLE t (a INT) USING delta CLUSTERED BY (a) INTO 4 BUCKETS", "bucketing"),
        ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 1", "SET/DROP DEFAULT"),
        ("FSCK REPAIR TABLE t", "FSCK REPAIR TABLE"),
        ("VACUUM t LITE", "VACUUM ... LITE"),
        ("DELETE FROM t USING s WHERE t.a = s.a", "DELETE ... USING"),
        ("UPDATE t SET a = (SELECT max(a) FROM s)", "a subquery in an UPDATE SET value"),
        ("INSERT OVERWRITE t PARTITION (p) SELECT 1, 2", "dynamic partition spec"),
    ],
)
def test_unsupported_statements_are_named(text: str, named: str) -> None:
    with pytest.raises(UnsupportedStatementError) as info:
        parse(text)
    assert named in str(info.value)
    assert str(info.value).startswith("Unsupported statement:")
    assert isinstance(info.value, NotImplementedError) and isinstance(info.value, SqlError)


def test_upgrade_uniform_parses() -> None:
    st = parse("REORG TABLE table_name APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2));")
    assert isinstance(st, S.UpgradeUniform) and st.compat_version == 2 and st.table.text == "table_name"
    with pytest.raises(SqlError, match="ICEBERG_COMPAT_VERSION"):
        parse("REORG TABLE t APPLY (UPGRADE UNIFORM(VERSION=2))")
    with pytest.raises(SqlError, match="WHERE cannot UPGRADE"):
        parse("REORG TABLE t WHERE p = 1 APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))")


@pytest.mark.parametrize(
    "statement",
    ["OPTIMIZE t WHERE a = 'x", "VACUUM t RETAIN 'x", "REORG TABLE t APPLY (PURGE) WHERE a = 'x"],
)
def test_untokenizable_commands_are_syntax_errors(statement: str) -> None:
    from serialake.sql.commands import Cursor

    with pytest.raises(SqlError, match="Unterminated string"):
        parse_statement(statement)
    with pytest.raises(SqlError, match="Unterminated string"):  # the command cursor on its own, too
        Cursor(statement, statement, 0)
