"""``serialake.sql`` against real tables: every statement kind, small data, one SparkSession."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.core.tables import catalog
from serialake.exceptions import ConcurrentAppendException, DeltaAnalysisException, DeltaTableNotFoundError
from serialake.sql import UnsupportedStatementError

pytestmark = pytest.mark.spark


def rows(spark: SparkSession, statement: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in serialake.sql(spark, statement).collect()]


def make_events(spark: SparkSession, tmp_path: Path, name: str = "events", props: str = "") -> str:
    location = str(tmp_path / name)
    tblprops = f" TBLPROPERTIES ({props})" if props else ""
    serialake.sql(
        spark,
        f"CREATE TABLE {name} (id BIGINT, date STRING, amount DOUBLE) USING DELTA PARTITIONED BY (date)"
        f"{tblprops} LOCATION '{location}'",
    )
    serialake.sql(
        spark,
        f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ * FROM VALUES (1, '2024-01-01', 10.0), "
        "(2, '2024-01-01', 20.0), (3, '2024-01-02', 30.0)",  # one file per partition
    )
    return location


def last_commit(location: str) -> dict[str, Any]:
    log = DeltaLog.for_table(location)
    info = log.read_commit(log.update().version).commit_info
    assert info is not None
    return info.values


def test_create_registers_the_name_and_insert_select(spark: SparkSession, tmp_path: Path) -> None:
    location = make_events(spark, tmp_path)
    assert catalog.lookup("events") == location
    detail = DeltaLog.for_table(location).update()
    assert detail.partition_columns == ("date",)
    assert rows(spark, "INSERT INTO events (id, date) VALUES (4, '2024-01-03')") == [(1, 1)]
    assert rows(spark, "INSERT INTO events PARTITION (date = '2024-01-04') SELECT 5, 50") == [(1, 1)]
    assert rows(spark, "SELECT e.id, e.date, e.amount FROM events e WHERE e.id >= 3 ORDER BY e.id") == [
        (3, "2024-01-02", 30.0),
        (4, "2024-01-03", None),
        (5, "2024-01-04", 50.0),
    ]
    assert rows(spark, "SELECT events.id FROM events WHERE events.id = 1") == [(1,)]
    assert rows(spark, f"SELECT count(*) FROM delta.`{location}`") == [(5,)]
    assert rows(spark, "SELECT count(*) FROM events VERSION AS OF 1") == [(3,)]
    ts = DeltaLog.for_table(location).read_commit(1).timestamp
    assert rows(spark, f"SELECT count(*) FROM events TIMESTAMP AS OF timestamp_millis({ts})") == [(3,)]
    described = rows(spark, "DESCRIBE TABLE events")
    assert described[:3] == [("id", "bigint", None), ("date", "string", None), ("amount", "double", None)]
    assert ("# Partition Information", "", "") in described
    with pytest.raises(DeltaAnalysisException, match="produces 2 column"):
        serialake.sql(spark, "INSERT INTO events VALUES (1, 'x')")


def test_insert_overwrite_replace_where_and_by_name(spark: SparkSession, tmp_path: Path) -> None:
    make_events(spark, tmp_path)
    serialake.sql(spark, "INSERT OVERWRITE events REPLACE WHERE date = '2024-01-01' VALUES (9, '2024-01-01', 9.0)")
    assert rows(spark, "SELECT id FROM events ORDER BY id") == [(3,), (9,)]
    serialake.sql(spark, "INSERT OVERWRITE TABLE events PARTITION (date = '2024-01-02') SELECT 7, 7.5")
    assert rows(spark, "SELECT id, date FROM events ORDER BY id") == [(7, "2024-01-02"), (9, "2024-01-01")]
    serialake.sql(spark, "INSERT INTO events BY NAME SELECT 2.5 AS amount, '2024-01-09' AS date, 8 AS id")
    serialake.sql(spark, "INSERT OVERWRITE events SELECT id, date, amount * 2 FROM events WHERE id = 8")
    assert rows(spark, "SELECT id, amount FROM events") == [(8, 5.0)]


def test_insert_that_reads_its_target_is_not_blind(spark: SparkSession, tmp_path: Path) -> None:
    location = make_events(spark, tmp_path)
    serialake.sql(spark, "INSERT INTO events SELECT id + 10, date, amount FROM events WHERE date = '2024-01-01'")
    info = last_commit(location)
    assert info["isBlindAppend"] is False
    assert rows(spark, "SELECT count(*) FROM events WHERE id > 10") == [(2,)]
    serialake.sql(spark, "INSERT INTO events VALUES (20, '2024-01-02', 1.0)")
    assert last_commit(location)["isBlindAppend"] is True


def _held_insert(location: str, statement: str, spark: SparkSession, concurrent: str) -> BaseException | None:
    """Run ``statement`` up to its commit, commit ``concurrent`` meanwhile, then let it commit."""
    from serialake.demo import _Ticket, gated_commits

    outcome: list[BaseException | None] = []
    with gated_commits(location) as gate:
        ticket = _Ticket("held")

        def work() -> None:
            gate.attach(ticket)
            try:
                serialake.sql(spark, statement)
                outcome.append(None)
            except BaseException as e:  # noqa: BLE001 - handed to the test
                outcome.append(e)

        thread = threading.Thread(target=work)
        thread.start()
        assert ticket.arrived.wait(120)
        serialake.sql(spark, concurrent)  # this thread has no ticket: commits at once
        ticket.release.set()
        thread.join(120)
    return outcome[0]


def test_insert_select_from_target_conflicts_like_merge(spark: SparkSession, tmp_path: Path) -> None:
    make_events(spark, tmp_path, props="'delta.isolationLevel' = 'Serializable'")
    location = catalog.lookup("events")
    assert location is not None
    copy = "INSERT INTO events SELECT id + 100, date, amount FROM events WHERE date = '2024-01-01'"
    other_partition = "INSERT INTO events VALUES (50, '2024-01-02', 5.0)"
    assert _held_insert(location, copy, spark, other_partition) is None  # read only date=2024-01-01
    same_partition = "INSERT INTO events VALUES (51, '2024-01-01', 5.0)"
    error = _held_insert(location, copy, spark, same_partition)
    assert isinstance(error, ConcurrentAppendException)
    whole_table = "INSERT INTO events SELECT max(id) + 1, '2024-01-05', 0.0 FROM events"
    error = _held_insert(location, whole_table, spark, other_partition)
    assert isinstance(error, ConcurrentAppendException)


def test_delete_update_merge(spark: SparkSession, tmp_path: Path) -> None:
    location = make_events(spark, tmp_path)
    assert rows(spark, "DELETE FROM events e WHERE e.amount < 15") == [(1,)]
    assert rows(spark, "UPDATE events SET amount = amount + 1 WHERE date = '2024-01-02'") == [(1,)]
    serialake.sql(
        spark,
        "CREATE OR REPLACE TEMP VIEW changes AS SELECT * FROM VALUES (2, '2024-01-01', 22.0), "
        "(4, '2024-01-03', 40.0) AS s(id, date, amount)",
    )
    result = serialake.sql(
        spark,
        "MERGE INTO events t USING changes s ON t.id = s.id AND t.date = s.date "
        "WHEN MATCHED THEN UPDATE SET amount = s.amount WHEN NOT MATCHED THEN INSERT *",
    ).first()
    assert result is not None and result["num_updated_rows"] == 1 and result["num_inserted_rows"] == 1
    assert rows(spark, "SELECT id, amount FROM events ORDER BY id") == [(2, 22.0), (3, 31.0), (4, 40.0)]
    serialake.sql(
        spark,
        "MERGE INTO events t USING (SELECT 3 AS id) s ON t.id = s.id "
        "WHEN NOT MATCHED BY SOURCE AND t.id = 4 THEN DELETE",
    )
    assert rows(spark, "SELECT id FROM events ORDER BY id") == [(2,), (3,)]
    assert last_commit(location)["operation"] == "MERGE"
    serialake.sql(spark, "TRUNCATE TABLE events")
    assert rows(spark, "SELECT count(*) FROM events") == [(0,)]


def test_alter_table_properties_columns_and_drop_feature(spark: SparkSession, tmp_path: Path) -> None:
    location = make_events(spark, tmp_path)
    serialake.sql(spark, "ALTER TABLE events SET TBLPROPERTIES ('delta.isolationLevel' = 'Serializable', 'team' = 'x')")
    snap = DeltaLog.for_table(location).update()
    assert snap.isolation_level == "Serializable" and snap.configuration["team"] == "x"
    serialake.sql(spark, "ALTER TABLE events UNSET TBLPROPERTIES ('team')")
    assert "team" not in DeltaLog.for_table(location).update().configuration
    serialake.sql(spark, "ALTER TABLE events ADD COLUMNS (note STRING COMMENT 'free text', n INT)")
    assert DeltaLog.for_table(location).update().schema.field_names == ["id", "date", "amount", "note", "n"]
    serialake.sql(spark, "ALTER TABLE events SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    serialake.sql(spark, "DELETE FROM events WHERE id = 1")
    snap = DeltaLog.for_table(location).update()
    assert any(f.deletion_vector is not None for f in snap.all_files)
    serialake.sql(spark, "ALTER TABLE events DROP FEATURE deletionVectors")
    snap = DeltaLog.for_table(location).update()
    assert not any(f.deletion_vector is not None for f in snap.all_files)
    assert "deletionVectors" not in (snap.protocol.writer_features or ())
    assert "delta.enableDeletionVectors" not in snap.configuration
    assert rows(spark, "SELECT id FROM events ORDER BY id") == [(2,), (3,)]
    with pytest.raises(DeltaAnalysisException, match="does not have table feature 'deletionVectors'"):
        serialake.sql(spark, "ALTER TABLE events DROP FEATURE deletionVectors")


def test_reorg_purge_rewrites_files_with_deletion_vectors(spark: SparkSession, tmp_path: Path) -> None:
    location = make_events(spark, tmp_path, props="'delta.enableDeletionVectors' = true")
    serialake.sql(spark, "DELETE FROM events WHERE id = 2")
    purged = serialake.sql(spark, "REORG TABLE events APPLY (PURGE)").first()
    assert purged is not None and purged["numDeletionVectorsRemoved"] == 1
    info = last_commit(location)
    assert info["operation"] == "REORG" and info["isolationLevel"] == "SnapshotIsolation"
    assert not any(f.deletion_vector for f in DeltaLog.for_table(location).update().all_files)
    assert rows(spark, "SELECT id FROM events ORDER BY id") == [(1,), (3,)]
    with pytest.raises(DeltaAnalysisException, match="only use partition columns"):
        serialake.sql(spark, "REORG TABLE events WHERE amount > 1 APPLY (PURGE)")


def test_optimize_history_detail_restore_vacuum(spark: SparkSession, tmp_path: Path) -> None:
    location = make_events(spark, tmp_path)
    serialake.sql(spark, "INSERT INTO events VALUES (4, '2024-01-01', 40.0)")
    result = serialake.sql(spark, "OPTIMIZE events WHERE date = '2024-01-01'").first()
    assert result is not None
    assert last_commit(location)["operation"] == "OPTIMIZE"
    serialake.sql(spark, "OPTIMIZE events ZORDER BY (id)")
    history = serialake.sql(spark, "DESCRIBE HISTORY events LIMIT 2").collect()
    assert [r["version"] for r in history] == [4, 3] and history[1]["operation"] == "OPTIMIZE"
    detail = serialake.sql(spark, "DESCRIBE DETAIL events").first()
    assert detail is not None and detail["partitionColumns"] == ["date"] and detail["format"] == "delta"
    serialake.sql(spark, "RESTORE TABLE events TO VERSION AS OF 1")
    assert rows(spark, "SELECT count(*) FROM events") == [(3,)]
    assert last_commit(location)["operation"] == "RESTORE"
    assert serialake.sql(spark, "VACUUM events").collect() == []  # everything is younger than 7 days
    serialake.sql(spark, "SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    try:
        listed = sorted(r[0] for r in serialake.sql(spark, "VACUUM events RETAIN 0 HOURS DRY RUN").collect())
        assert listed and all(os.path.exists(p.removeprefix("file:")) for p in listed)
        deleted = sorted(r[0] for r in serialake.sql(spark, "VACUUM events RETAIN 0 HOURS").collect())
        assert deleted == listed
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert rows(spark, "SELECT count(*) FROM events") == [(3,)]


def _commit_from_another_process(location: str) -> int:
    """Commit a copy of one data file from another process; the rows it adds."""
    from serialake.demo_reads import copy_rows_from_another_process

    return copy_rows_from_another_process(location)[0]


def test_set_transaction_isolation(spark: SparkSession, tmp_path: Path) -> None:
    from serialake.spark.write import write

    location = make_events(spark, tmp_path)
    assert rows(spark, "SHOW TRANSACTION_ISOLATION") == [("STRICT SERIALIZABLE",)]
    try:
        serialake.sql(spark, "SET TRANSACTION_ISOLATION TO 'READ COMMITTED'")  # runs as SERIALIZABLE
        assert rows(spark, "SHOW TRANSACTION_ISOLATION") == [("SERIALIZABLE",)]
        assert rows(spark, "SELECT count(*) FROM events") == [(3,)]
        copied = _commit_from_another_process(location)
        assert rows(spark, "SELECT count(*) FROM events") == [(3,)]  # the cached snapshot: consistent, older
        serialake.sql(spark, "INSERT INTO events VALUES (10, '2024-01-10', 1.0)")  # own writes are seen
        assert rows(spark, "SELECT count(*) FROM events") == [(4 + copied,)]
        write(spark.createDataFrame([(11, "2024-01-09", 9.0)], "id long, date string, amount double"), location)
        assert rows(spark, "SELECT count(*) FROM events") == [(5 + copied,)]  # DataFrame writes too
        _commit_from_another_process(location)
        serialake.sql(spark, "SET TRANSACTION_ISOLATION TO 'STRICT SERIALIZABLE'")
        assert rows(spark, "SELECT count(*) FROM events") == [(5 + 2 * copied,)]  # refreshed before reading
    finally:
        serialake.sql(spark, "SET TRANSACTION_ISOLATION TO 'STRICT SERIALIZABLE'")


def test_create_variants_and_drop(spark: SparkSession, tmp_path: Path) -> None:
    location = make_events(spark, tmp_path)
    catalog.unregister("events")
    serialake.sql(spark, f"CREATE TABLE again USING DELTA LOCATION '{location}'")  # register an existing table
    assert rows(spark, "SELECT count(*) FROM again") == [(3,)]
    serialake.sql(spark, f"CREATE TABLE same (id BIGINT, date STRING, amount DOUBLE) LOCATION '{location}'")
    with pytest.raises(DeltaAnalysisException, match="differs from the one given"):
        serialake.sql(spark, f"CREATE TABLE other (id INT) USING DELTA LOCATION '{location}'")
    serialake.sql(spark, f"CREATE TABLE IF NOT EXISTS again (x INT) USING DELTA LOCATION '{location}'")
    serialake.sql(spark, "CREATE TABLE copy USING DELTA PARTITIONED BY (date) AS SELECT * FROM again WHERE id < 3")
    assert catalog.lookup("copy") == str(Path(catalog.warehouse_dir()) / "copy")
    assert rows(spark, "SELECT count(*) FROM copy") == [(2,)]
    assert DeltaLog.for_table(catalog.lookup("copy") or "").update().partition_columns == ("date",)
    serialake.sql(spark, "CREATE OR REPLACE TABLE copy (k STRING) USING DELTA")
    assert rows(spark, "SELECT count(*) FROM copy") == [(0,)]
    serialake.sql(spark, "DROP TABLE copy")
    assert catalog.lookup("copy") is None
    serialake.sql(spark, "DROP TABLE IF EXISTS copy")
    with pytest.raises(DeltaTableNotFoundError, match="not registered"):
        serialake.sql(spark, "DROP TABLE copy")


def test_unknown_tables_and_passthrough(spark: SparkSession) -> None:
    with pytest.raises(DeltaTableNotFoundError, match=r"serialake.register\('nowhere'"):
        serialake.sql(spark, "DELETE FROM nowhere WHERE x = 1")
    with pytest.raises(AnalysisException):
        serialake.sql(spark, "SELECT * FROM nowhere")  # not ours: Spark's own error
    assert rows(spark, "SELECT 1 + 1 AS two") == [(2,)]
    serialake.sql(spark, "SET spark.serialake.test.key = yes")
    assert spark.conf.get("spark.serialake.test.key") == "yes"
    with pytest.raises(UnsupportedStatementError, match="VACUUM ... USING INVENTORY"):
        serialake.sql(spark, "VACUUM t USING INVENTORY inv")
