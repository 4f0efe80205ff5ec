"""The streaming sink: ``df.writeStream.format("delta")`` and ``serialake.streaming.idempotent``.

In-process tests run real streaming queries on the session's Spark (a JSON file source, one
file per micro-batch, trigger ``availableNow``): rows land once, a batch Spark replays
(its end removed from the checkpoint, as after a crash) writes nothing, ``complete``
replaces the rows, ``toTable`` creates and registers, a concurrent commit of the same
application id fails the query with ``ConcurrentTransactionException``, a compaction or
another append between a batch's read and its commit does not. delta-rs reads the results
and the txn versions.

Subprocess tests (``stream_pipeline.py``): two runs of one query on one checkpoint, the
loser failing with the seed's advice, and the exactly-once trials: a pipeline killed with
SIGKILL at random moments (and right before / after a batch's commit), restarted until it
drains its source; after every kill each source file is in the target whole or not at all,
at the end each row exactly once. ``SERIALAKE_STREAM_TRIALS`` sets the number of kills
(6 by default; ``make verify`` runs 60).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import serialake
from serialake import ConcurrentTransactionException
from serialake.core import DeltaLog
from serialake.core.model.actions import SetTransaction
from serialake.core.tables import catalog
from serialake.exceptions import DeltaIllegalArgumentException, SchemaMismatchError
from serialake.spark import dml, read, write
from serialake.spark.streaming import batch_txn, sink
from serialake.spark.table import DeltaTable
from tests.helpers import before_first_commit

pytestmark = pytest.mark.spark
# A loaded CI machine runs a micro-batch in seconds, not minutes; the bound only stops a hung query.
STREAM_TIMEOUT = 600

SCHEMA = "id long, grp long, s string"
PIPELINE = Path(__file__).with_name("stream_pipeline.py")
ROOT = Path(__file__).resolve().parent.parent.parent


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _rows(first: int, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "grp": i % 3, "s": f"s{i}"} for i in range(first, first + n)]


def _source_dir(root: Path, files: int, per_file: int = 5, *, first_file: int = 0) -> Path:
    """A directory of JSON files, ``per_file`` rows each, ids numbered across files."""
    src = root / "src"
    src.mkdir(exist_ok=True)
    for f in range(first_file, first_file + files):
        path = src / f"part-{f:04d}.json"
        tmp = src / f".part-{f:04d}.json.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in _rows(f * per_file, per_file)))
        os.replace(tmp, path)
    return src


def _source_table(root: Path, files: int, per_file: int) -> Path:
    """A serialake-readable table of ``files`` commits (written by delta-rs), one file of ``per_file`` rows each."""
    from deltalake import write_deltalake

    path = root / "src_table"
    schema = pa.schema([("id", pa.int64()), ("grp", pa.int64()), ("s", pa.string())])
    for f in range(files):
        write_deltalake(str(path), pa.Table.from_pylist(_rows(f * per_file, per_file), schema=schema), mode="append")
    return path


def _stream(spark: SparkSession, src: Path) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))


def _ids(path: str) -> list[int]:
    """The target's ids, read by delta-rs."""
    from deltalake import DeltaTable as RsTable

    return sorted(RsTable(path).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def _query_id(checkpoint: Path) -> str:
    return str(json.loads((checkpoint / "metadata").read_text())["id"])


def _unfinish_last_batch(checkpoint: Path) -> int:
    """Remove the checkpoint's record that the last batch ended: Spark runs it again on restart."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int | None]]:
    """(batch id, committed version or None when skipped) of every batch the sink runs."""
    seen: list[tuple[int, int | None]] = []
    original = sink.commit_batch

    def commit_batch(s: Any, batch_df: DataFrame, batch_id: int) -> int | None:
        version = original(s, batch_df, batch_id)
        seen.append((batch_id, version))
        return version

    monkeypatch.setattr(sink, "commit_batch", commit_batch)
    return seen


@pytest.fixture(autouse=True)
def _no_query_left(spark: SparkSession) -> Iterator[None]:
    yield
    for q in spark.streams.active:
        q.stop()


def _run(spark: SparkSession, src: Path, target: str, checkpoint: Path, **options: str) -> Any:
    q = (
        _stream(spark, src)
        .writeStream.format("delta")
        .options(checkpointLocation=str(checkpoint), **options)
        .trigger(availableNow=True)
        .start(target)
    )
    q.awaitTermination(STREAM_TIMEOUT)
    return q


# ---------------------------------------------------------------------------------------------
# writeStream.format("delta")
# ---------------------------------------------------------------------------------------------


def test_append_stream_commits_each_batch_once_with_its_txn(spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable as RsTable

    src = _source_dir(tmp_path, 3)
    target, ck = str(tmp_path / "t"), tmp_path / "ck"
    q = (
        _stream(spark, src)
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy("grp")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(target)
    )
    assert isinstance(q, sink.SinkQuery)
    assert q.awaitTermination(STREAM_TIMEOUT) is True, q.lastProgress
    assert q.exception() is None and not q.isActive, q.exception()
    assert _ids(target) == list(range(15))
    snap = DeltaLog.for_table(target).update()
    assert list(snap.partition_columns) == ["grp"]
    assert snap.version == 2
    assert q.id == _query_id(ck)
    assert snap.txn_version(q.id) == 2
    rs = RsTable(target)
    assert rs.transaction_version(q.id) == 2
    assert rs.metadata().partition_columns == ["grp"]
    history = {h["version"]: h for h in rs.history()}
    assert history[1]["operation"] == "STREAMING UPDATE"
    assert history[1]["operationParameters"] == {"outputMode": "Append", "queryId": q.id, "epochId": "1"}
    assert history[1]["isBlindAppend"] is True


def test_query_id_known_without_the_threads_property(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PySpark's threads not pinned, the batch's thread lacks the query id: start's is used."""
    monkeypatch.setattr(sink, "query_id", lambda batch_df: None)
    src = _source_dir(tmp_path, 2)
    target = str(tmp_path / "t")
    q = _run(spark, src, target, tmp_path / "ck")
    assert q.exception() is None
    assert DeltaLog.for_table(target).update().txn_version(q.id) == 1


def test_restart_continues_and_a_replayed_batch_writes_nothing(
    spark: SparkSession, tmp_path: Path, calls: list[tuple[int, int | None]]
) -> None:
    src = _source_dir(tmp_path, 3)
    target, ck = str(tmp_path / "t"), tmp_path / "ck"
    _run(spark, src, target, ck)
    assert calls == [(0, 0), (1, 1), (2, 2)]
    # As after a crash between the sink's commit and Spark's record of the batch's end.
    assert _unfinish_last_batch(ck) == 2
    _source_dir(tmp_path, 1, first_file=3)
    calls.clear()
    _run(spark, src, target, ck)
    assert calls == [(2, None), (3, 3)]  # batch 2 ran again, skipped; then the new file
    assert _ids(target) == list(range(20))
    assert DeltaLog.for_table(target).update().version == 3


def test_complete_mode_replaces_the_rows_each_batch(spark: SparkSession, tmp_path: Path) -> None:
    src = _source_dir(tmp_path, 3)
    target, ck = str(tmp_path / "t"), tmp_path / "ck"
    counts = _stream(spark, src).groupBy("grp").agg(F.count("*").alias("n"))
    q = (
        counts.writeStream.format("delta")
        .outputMode("complete")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(target)
    )
    q.awaitTermination(STREAM_TIMEOUT)
    got = sorted(tuple(r) for r in read(spark, target).collect())
    assert got == [(0, 5), (1, 5), (2, 5)]
    from deltalake import DeltaTable as RsTable

    rs = RsTable(target)
    assert sorted(rs.to_pyarrow_table().to_pylist(), key=lambda r: r["grp"]) == [
        {"grp": 0, "n": 5}, {"grp": 1, "n": 5}, {"grp": 2, "n": 5}
    ]  # fmt: skip
    assert rs.history()[0]["operationParameters"]["outputMode"] == "Complete"
    assert rs.transaction_version(q.id) == 2


def test_update_mode_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    src = _source_dir(tmp_path, 1)
    with pytest.raises(AnalysisException, match="does not support Update output mode"):
        _stream(spark, src).writeStream.format("delta").outputMode("update").option(
            "checkpointLocation", str(tmp_path / "ck")
        ).start(str(tmp_path / "t"))


def test_start_needs_a_path(spark: SparkSession, tmp_path: Path) -> None:
    src = _source_dir(tmp_path, 1)
    with pytest.raises(DeltaIllegalArgumentException, match="'path' is not specified"):
        _stream(spark, src).writeStream.format("delta").option("checkpointLocation", str(tmp_path / "ck")).start()


def test_to_table_creates_registers_and_appends(spark: SparkSession, tmp_path: Path) -> None:
    src = _source_dir(tmp_path, 2)
    location = str(tmp_path / "events")
    q = (
        _stream(spark, src)
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .option("path", location)
        .trigger(availableNow=True)
        .toTable("events")
    )
    q.awaitTermination(STREAM_TIMEOUT)
    assert DeltaLog.for_table(catalog.lookup("events") or "").table_path == DeltaLog.for_table(location).table_path
    assert sorted(r.id for r in spark.table("events").collect()) == list(range(10))
    # A second query into the registered table (no format: the table's own).
    (tmp_path / "more").mkdir()
    src2 = _source_dir(tmp_path / "more", 1, first_file=2)
    q2 = (
        _stream(spark, src2)
        .writeStream.option("checkpointLocation", str(tmp_path / "ck2"))
        .trigger(availableNow=True)
        .toTable("events")
    )
    q2.awaitTermination(STREAM_TIMEOUT)
    assert _ids(location) == list(range(15))
    history = DeltaTable.forName(spark, "events").history().select("operation").collect()
    assert [h.operation for h in history][-1] == "WRITE"  # the table made at start, empty
    assert len(history) == 4


def test_to_table_managed(spark: SparkSession, tmp_path: Path) -> None:
    src = _source_dir(tmp_path, 1)
    q = (
        _stream(spark, src)
        .writeStream.format("delta")
        .partitionBy("grp")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .toTable("managed_events")
    )
    q.awaitTermination(STREAM_TIMEOUT)
    location = catalog.lookup("managed_events")
    assert location is not None and location.startswith(str(catalog.warehouse_dir()))
    assert list(DeltaLog.for_table(location).update().partition_columns) == ["grp"]
    assert sorted(r.id for r in spark.table("managed_events").collect()) == list(range(5))


def test_txn_app_id_option_wins(spark: SparkSession, tmp_path: Path) -> None:
    src = _source_dir(tmp_path, 2)
    target = str(tmp_path / "t")
    q = _run(spark, src, target, tmp_path / "ck", txnAppId="my-pipeline")
    snap = DeltaLog.for_table(target).update()
    assert snap.txn_version("my-pipeline") == 1
    assert snap.txn_version(q.id) is None
    # Another checkpoint with the same app id: its batches 0 and 1 are already committed.
    _run(spark, src, target, tmp_path / "ck2", txnAppId="my-pipeline")
    assert _ids(target) == list(range(10))


def test_merge_schema_option_passes_through(spark: SparkSession, tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    write(spark.createDataFrame([(100, 1)], "id long, grp long"), target)
    src = _source_dir(tmp_path, 1)
    with pytest.raises(SchemaMismatchError) as refused:
        _run(spark, src, target, tmp_path / "ck")
    assert isinstance(refused.value, StreamingQueryException)  # both classes
    assert "'s'" in str(refused.value)
    _run(spark, src, target, tmp_path / "ck2", mergeSchema="true")
    assert sorted(tuple(r) for r in read(spark, target).select("id", "s").collect()) == [
        (0, "s0"), (1, "s1"), (2, "s2"), (3, "s3"), (4, "s4"), (100, None)
    ]  # fmt: skip


def test_same_app_id_committed_concurrently_fails_the_query(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run of the query (same checkpoint, so the same id) commits batch 0 between this
    batch's read of the table and its commit: the loser fails with the seed's advice."""
    src = _source_dir(tmp_path, 2)
    target, ck = str(tmp_path / "t"), tmp_path / "ck"
    write(spark.createDataFrame([], SCHEMA), target)  # the target exists (else both would create it)
    other = spark.createDataFrame([(1000, 0, "other")], SCHEMA)

    def other_run() -> None:
        write(other, target, txnAppId=_query_id(ck), txnVersion=0)

    with before_first_commit(monkeypatch, other_run):
        q = (
            _stream(spark, src)
            .writeStream.format("delta")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start(target)
        )
        with pytest.raises(ConcurrentTransactionException) as failed:
            q.awaitTermination(STREAM_TIMEOUT)
    error = failed.value
    assert isinstance(error, StreamingQueryException)
    assert f"Application '{q.id}' committed version 0 concurrently" in str(error)
    assert "streaming queries with one checkpoint location" in str(error)
    assert "Never run them at the same time" in str(error)
    found = q.exception()
    assert isinstance(found, ConcurrentTransactionException) and isinstance(found, StreamingQueryException)
    assert _ids(target) == [1000]  # only the winner's batch 0; the loser's files are gone
    snap = DeltaLog.for_table(target).update()
    on_disk = {p.relative_to(target).as_posix() for p in Path(target).glob("*.parquet")}
    assert {a.path for a in snap.all_files} == on_disk


@pytest.mark.parametrize("concurrent", ["optimize", "append", "stream"])
def test_blind_append_batches_never_conflict(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrent: str
) -> None:
    """A compaction, a plain append or another query's batch commits between a batch's read and
    its commit: the batch commits anyway (rebased), nothing is lost or doubled."""
    target = str(tmp_path / "t")
    for i in range(3):
        write(spark.createDataFrame([(500 + i, 0, "old")], SCHEMA).coalesce(1), target)
    src = _source_dir(tmp_path, 2)

    def other() -> None:
        if concurrent == "optimize":
            DeltaTable.forPath(spark, target).optimize().executeCompaction()
        elif concurrent == "append":
            write(spark.createDataFrame([(900, 0, "new")], SCHEMA), target)
        else:  # another query (its own checkpoint) writes its batch 0
            write(spark.createDataFrame([(900, 0, "new")], SCHEMA), target, txnAppId="other-query", txnVersion=0)

    with before_first_commit(monkeypatch, other):
        q = _run(spark, src, target, tmp_path / "ck")
    assert q.exception() is None
    extra = [] if concurrent == "optimize" else [900]
    assert _ids(target) == sorted([*range(10), 500, 501, 502, *extra])
    history = DeltaTable.forPath(spark, target).history().collect()
    ops = [h.operation for h in sorted(history, key=lambda h: h.version)]
    assert ops[3] == ("OPTIMIZE" if concurrent == "optimize" else "WRITE")
    assert ops[4:] == ["STREAMING UPDATE", "STREAMING UPDATE"]


def test_query_handle_behaves_as_sparks(spark: SparkSession, tmp_path: Path) -> None:
    src = _source_dir(tmp_path, 2)
    target = str(tmp_path / "t")
    q = (
        _stream(spark, src)
        .writeStream.format("delta")
        .queryName("serialake_sink_handle")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="100 milliseconds")
        .start(target)
    )
    try:
        q.processAllAvailable()
        assert q.isActive and q.name == "serialake_sink_handle"
        assert _ids(target) == list(range(10))
        _source_dir(tmp_path, 1, first_file=2)
        q.processAllAvailable()
        assert _ids(target) == list(range(15))
        assert q.lastProgress is not None and q.exception() is None
        assert spark.streams.get(q.id) is not None
        assert q.awaitTermination(0.1) is False
    finally:
        q.stop()
    assert not q.isActive and q.exception() is None
    assert q.awaitTermination() is None


def test_other_formats_run_sparks_own_sink(spark: SparkSession, tmp_path: Path) -> None:
    """partitionBy is held back from Spark's writer only for serialake's sink."""
    src = _source_dir(tmp_path, 2)
    out = tmp_path / "parquet"
    q = (
        _stream(spark, src)
        .writeStream.format("parquet")
        .partitionBy("grp")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(out))
    )
    assert not isinstance(q, sink.SinkQuery)
    q.awaitTermination(STREAM_TIMEOUT)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("grp=")) == ["grp=0", "grp=1", "grp=2"]
    assert spark.read.parquet(str(out)).count() == 10
    with pytest.raises(AnalysisException, match="does not support partitioning"):
        _stream(spark, src).writeStream.partitionBy("grp").foreachBatch(lambda df, i: None).start()


# ---------------------------------------------------------------------------------------------
# serialake.streaming.idempotent
# ---------------------------------------------------------------------------------------------


def _counter_table(spark: SparkSession, path: str) -> None:
    write(spark.createDataFrame([(k, 0) for k in range(3)], "k long, n long"), path)


def _counts(path: str) -> dict[int, int]:
    from deltalake import DeltaTable as RsTable

    return {r["k"]: r["n"] for r in RsTable(path).to_pyarrow_table().to_pylist()}


def _merge_counts(spark: SparkSession, target: str) -> Callable[[DataFrame, int], None]:
    """A batch function that adds each batch's row count per key: not idempotent by itself."""

    def fn(batch_df: DataFrame, batch_id: int) -> None:
        updates = batch_df.groupBy((F.col("id") % 3).alias("k")).agg(F.count("*").alias("n"))
        (
            DeltaTable.forPath(spark, target).alias("t")
            .merge(updates.alias("u"), "t.k = u.k")
            .whenMatchedUpdate(set={"n": "t.n + u.n"})
            .whenNotMatchedInsertAll()
            .execute()
        )  # fmt: skip

    return fn


def test_idempotent_merge_in_foreach_batch_survives_a_replay(spark: SparkSession, tmp_path: Path) -> None:
    target, ck = str(tmp_path / "counts"), tmp_path / "ck"
    _counter_table(spark, target)
    src = _source_dir(tmp_path, 3, per_file=6)
    fn = serialake.streaming.idempotent(_merge_counts(spark, target))

    def run() -> Any:
        q = _stream(spark, src).writeStream.foreachBatch(fn).option("checkpointLocation", str(ck)).trigger(
            availableNow=True
        ).start()
        q.awaitTermination(STREAM_TIMEOUT)
        assert q.exception() is None
        return q

    q = run()
    assert _counts(target) == {0: 6, 1: 6, 2: 6}
    snap = DeltaLog.for_table(target).update()
    assert snap.txn_version(q.id) == 2 and snap.version == 3
    _unfinish_last_batch(ck)
    run()  # batch 2 again: its MERGE is skipped
    assert _counts(target) == {0: 6, 1: 6, 2: 6}
    assert DeltaLog.for_table(target).update().version == 3
    # Without the wrapper the same replay adds batch 2 a second time (the test can tell).
    _unfinish_last_batch(ck)
    fn = _merge_counts(spark, target)
    run()
    assert _counts(target) == {0: 8, 1: 8, 2: 8}


def test_idempotent_batch_writing_two_tables_in_a_transaction_commits_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """#44: a foreachBatch writing two tables inside serialake.transaction commits them together, once."""
    events, counts, ck = str(tmp_path / "events"), str(tmp_path / "counts"), tmp_path / "ck"
    write(spark.createDataFrame([], SCHEMA), events)
    _counter_table(spark, counts)
    merge = _merge_counts(spark, counts)

    def both(batch_df: DataFrame, batch_id: int) -> None:
        with serialake.transaction(batch_df.sparkSession):
            batch_df.write.format("delta").mode("append").save(events)
            merge(batch_df, batch_id)

    src = _source_dir(tmp_path, 2, per_file=3)
    fn = serialake.streaming.idempotent(both)

    def run() -> Any:
        q = _stream(spark, src).writeStream.foreachBatch(fn).option("checkpointLocation", str(ck)).trigger(
            availableNow=True
        ).start()
        q.awaitTermination(STREAM_TIMEOUT)
        assert q.exception() is None
        return q

    q = run()
    assert _ids(events) == list(range(6)) and _counts(counts) == {0: 2, 1: 2, 2: 2}
    versions = [DeltaLog.for_table(t).update().version for t in (events, counts)]
    assert [DeltaLog.for_table(t).update().txn_version(q.id) for t in (events, counts)] == [1, 1]
    _unfinish_last_batch(ck)
    run()  # batch 1 again: nothing is written in either table
    assert [DeltaLog.for_table(t).update().version for t in (events, counts)] == versions
    assert _ids(events) == list(range(6)) and _counts(counts) == {0: 2, 1: 2, 2: 2}


def test_idempotent_outside_a_stream_needs_an_app_id(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame([(1, 0, "a")], SCHEMA)
    with pytest.raises(DeltaIllegalArgumentException, match="app_id"):
        serialake.streaming.idempotent(lambda d, i: None)(df, 0)


def test_idempotent_writes_and_dml_commit_once_per_batch(spark: SparkSession, tmp_path: Path) -> None:
    """Appends (three ways), MERGE, UPDATE and DELETE (API and SQL) to two tables: a second call
    for the same batch changes nothing; the next batch runs; each commit sets the batch's txn."""
    counts, log_table = str(tmp_path / "counts"), str(tmp_path / "log")
    _counter_table(spark, counts)
    spark.sql(f"CREATE TABLE audit (id long, grp long, s string) USING delta LOCATION '{tmp_path / 'audit'}'")

    def fn(batch_df: DataFrame, batch_id: int) -> None:
        write(batch_df, log_table)
        batch_df.write.format("delta").mode("append").saveAsTable("audit")
        _merge_counts(spark, counts)(batch_df, batch_id)
        spark.sql(f"UPDATE delta.`{counts}` SET n = n + 100 WHERE k = 0")
        dml.delete(spark, log_table, f"id = {batch_id * 10 + 1}")

    wrapped = serialake.streaming.idempotent(fn, app_id="app")
    batch0 = spark.createDataFrame([(i, i % 3, "x") for i in range(0, 3)], SCHEMA)
    batch1 = spark.createDataFrame([(i, i % 3, "x") for i in range(10, 13)], SCHEMA)
    wrapped(batch0, 0)
    state = (_counts(counts), _ids(log_table), sorted(r.id for r in spark.table("audit").collect()))
    versions = {p: DeltaLog.for_table(p).update().version for p in (counts, log_table)}
    assert state == ({0: 101, 1: 1, 2: 1}, [0, 2], [0, 1, 2])
    wrapped(batch0, 0)  # replayed: every write skipped
    assert (_counts(counts), _ids(log_table), sorted(r.id for r in spark.table("audit").collect())) == state
    assert {p: DeltaLog.for_table(p).update().version for p in (counts, log_table)} == versions
    wrapped(batch1, 1)
    assert _counts(counts) == {0: 202, 1: 2, 2: 2}
    assert _ids(log_table) == [0, 2, 10, 12]
    # The k-th write of a batch to one table marks app, app#1 ... app#k.
    snap = DeltaLog.for_table(counts).update()
    assert {a: snap.txn_version(a) for a in ("app", "app#1", "app#2")} == {"app": 1, "app#1": 1, "app#2": None}
    snap = DeltaLog.for_table(log_table).update()
    assert {a: snap.txn_version(a) for a in ("app", "app#1")} == {"app": 1, "app#1": 1}
    last = DeltaLog.for_table(counts).update()
    txns = [a for a in _commit_actions(counts, last.version) if isinstance(a, SetTransaction)]
    assert sorted((t.app_id, t.version) for t in txns) == [("app", 1), ("app#1", 1)]


def _commit_actions(path: str, version: int) -> list[Any]:
    from serialake.core.model.actions import action_from_json

    log = Path(path) / "_delta_log" / f"{version:020d}.json"
    return [action_from_json(line) for line in log.read_text().splitlines() if line.strip()]


def test_idempotent_replay_after_a_crash_between_two_writes(spark: SparkSession, tmp_path: Path) -> None:
    """First write committed, the function died before the second: the replay skips the first
    and makes the second. A first write that committed nothing (a DELETE matching no row) is
    not run again over the second's rows on replay."""
    target = str(tmp_path / "t")
    write(spark.createDataFrame([(-1, 0, "seed")], SCHEMA), target)
    crash = [True]

    def fn(batch_df: DataFrame, batch_id: int) -> None:
        dml.delete(spark, target, "s = 'fresh'")  # matches nothing the first time
        write(batch_df, target)
        if crash[0]:
            crash[0] = False
            raise RuntimeError("crash")
        write(batch_df.withColumn("id", F.col("id") + 100), target)

    wrapped = serialake.streaming.idempotent(fn, app_id="q")
    batch = spark.createDataFrame([(1, 0, "fresh"), (2, 0, "fresh")], SCHEMA)
    with pytest.raises(RuntimeError):
        wrapped(batch, 7)
    assert _ids(target) == [-1, 1, 2]
    wrapped(batch, 7)
    assert _ids(target) == [-1, 1, 2, 101, 102]
    wrapped(batch, 7)
    assert _ids(target) == [-1, 1, 2, 101, 102]
    snap = DeltaLog.for_table(target).update()
    assert [snap.txn_version(a) for a in ("q", "q#1", "q#2")] == [7, 7, 7]


def test_idempotent_write_conflicts_with_a_concurrent_run_of_the_batch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = str(tmp_path / "t")
    _counter_table(spark, target)
    fn = serialake.streaming.idempotent(_merge_counts(spark, target), app_id="q")
    batch = spark.createDataFrame([(0, 0, "a")], SCHEMA)

    def twin() -> None:
        with batch_txn.in_batch("q", 4):
            write(spark.createDataFrame([(7, 1)], "k long, n long"), target)

    with before_first_commit(monkeypatch, twin), pytest.raises(ConcurrentTransactionException, match="'q'"):
        fn(batch, 4)
    assert _counts(target) == {0: 0, 1: 0, 2: 0, 7: 1}


def test_batch_context_is_per_thread(spark: SparkSession, tmp_path: Path) -> None:
    """A write on another thread (not inside the batch function) does not join its batch."""
    target = str(tmp_path / "t")
    seen: list[int | None] = []

    def fn(batch_df: DataFrame, batch_id: int) -> None:
        t = threading.Thread(target=lambda: seen.append(write(batch_df, target)))
        t.start()
        t.join()

    serialake.streaming.idempotent(fn, app_id="q")(spark.createDataFrame([(1, 0, "a")], SCHEMA), 0)
    assert seen == [0]
    assert DeltaLog.for_table(target).update().txn_version("q") is None


# ---------------------------------------------------------------------------------------------
# Real processes: two runs on one checkpoint, and the exactly-once kill trials
# ---------------------------------------------------------------------------------------------


class _Pipeline:
    """One run of ``stream_pipeline.py``; its output lines are collected as they come."""

    def __init__(self, src: Path, target: str, ck: Path, env: dict[str, str] | None = None,
                 source_format: str = "json") -> None:  # fmt: skip
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(PIPELINE), str(src), target, str(ck), "--source-format", source_format],
            cwd=ROOT, env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout: float = 180) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.lines):
                return True
            if self.proc.poll() is not None:
                self.reader.join(5)
                return any(line.startswith(prefix) for line in self.lines)
            time.sleep(0.02)
        return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.finish(60)

    def finish(self, timeout: float = 300) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait(30)
        self.reader.join(10)
        return code

    def output(self) -> str:
        return "\n".join(self.lines[-40:])


@pytest.mark.slow
@pytest.mark.concurrency
def test_two_runs_of_one_query_on_one_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    """Run A holds batch 0 between its read of the table and its commit; run B (same checkpoint)
    starts, finds batch 0 unfinished, runs it and the rest; A's commit then fails with
    ConcurrentTransactionException and the seed's advice. Every row lands once."""
    src = _source_dir(tmp_path, 3)
    target, ck = str(tmp_path / "t"), tmp_path / "ck"
    write(spark.createDataFrame([], SCHEMA), target)
    go = tmp_path / "go"
    a = _Pipeline(src, target, ck, {"STREAM_DELAY_COMMIT": f"0:{go}"})
    b: _Pipeline | None = None
    try:
        assert a.wait_for("DELAYING 0"), a.output()
        b = _Pipeline(src, target, ck)
        assert b.finish() == 0, b.output()
        assert "DONE" in b.lines, b.output()
        go.touch()
        assert a.finish() == 3, a.output()
    finally:
        a.kill()
        if b is not None:
            b.kill()
    failed = [line for line in a.lines if line.startswith("FAILED")]
    assert failed and failed[0].startswith("FAILED ConcurrentTransactionException"), a.output()
    assert "committed version 0 concurrently" in failed[0]
    assert "Never run them at the same time" in a.output()
    assert _ids(target) == list(range(15))


def _file_groups(per_file: int, files: int) -> list[set[int]]:
    return [set(range(f * per_file, (f + 1) * per_file)) for f in range(files)]


def _check_partial(path: str, groups: list[set[int]]) -> int:
    """Every id at most once, and each source file's rows all in the target or none; the files in."""
    if not (Path(path) / "_delta_log").exists():
        return 0
    ids = _ids(path)
    assert len(ids) == len(set(ids)), f"duplicated rows in {path}: {sorted(i for i in set(ids) if ids.count(i) > 1)}"
    present = set(ids)
    whole = 0
    for g in groups:
        inside = g & present
        assert not inside or inside == g, f"a batch landed in part: {sorted(inside)} of {sorted(g)}"
        whole += bool(inside)
    assert sum(len(g) for g in groups if g & present) == len(present)
    return whole


def _trials() -> int:
    return int(os.environ.get("SERIALAKE_STREAM_TRIALS") or 6)


@pytest.mark.slow
@pytest.mark.concurrency
def test_exactly_once_through_sigkill_and_restart(tmp_path: Path) -> None:
    """Pipelines (a source of 12 files, one per batch: a serialake table read as a stream, or
    JSON files) killed with SIGKILL and restarted until each drains its source: ``_trials()``
    kills in all. Each pipeline's first run is killed right after a batch's commit (replayed
    on restart), its second right before one; the others at random moments of the run."""
    rng = random.Random(int(os.environ.get("SERIALAKE_STREAM_SEED") or time.time_ns() % 10_000))
    files, per_file = 12, 40
    kills, pipelines = 0, 0
    report: list[str] = []
    while kills < _trials():
        root = tmp_path / f"p{pipelines}"
        root.mkdir()
        # A serialake table read as a stream (its own readStream.format("delta")), or Spark's file source.
        source_format = "json" if pipelines % 2 else "delta"
        src = _source_dir(root, files, per_file) if source_format == "json" else _source_table(root, files, per_file)
        groups = _file_groups(per_file, files)
        target, ck = str(root / "t"), root / "ck"
        runs = 0
        while True:
            env: dict[str, str] = {"STREAM_BATCH_SLEEP": str(rng.choice([0, 0, 0.05, 0.2]))}
            kill_mode = ("after", "before")[runs] if runs < 2 else "random"
            if kills >= _trials():
                kill_mode = "none"
            done_batches = _check_partial(target, groups)
            if kill_mode == "after":
                env["STREAM_KILL_AFTER_COMMIT"] = str(rng.randrange(files // 2))
            elif kill_mode == "before":
                env["STREAM_KILL_BEFORE_COMMIT"] = str(rng.randrange(done_batches, files))
            p = _Pipeline(src, target, ck, env, source_format)
            runs += 1
            try:
                if kill_mode == "random" and p.wait_for("STARTED"):
                    time.sleep(rng.uniform(0, 2.0))
                    p.kill()
                code = p.finish()
            finally:
                p.kill()
            if kill_mode != "none" or code != 0:
                kills += 1
            report.append(f"pipeline {pipelines} ({source_format}) run {runs}: {kill_mode} {env} -> {code}")
            _check_partial(target, groups)
            if code == 0:
                assert "DONE" in p.lines, p.output()
                break
            assert code == -9, p.output()  # killed, by us or by its hook; nothing else stops it
            assert runs < 50, "\n".join(report)
        assert _ids(target) == sorted(set().union(*groups)), "\n".join(report)
        from deltalake import DeltaTable as RsTable

        assert RsTable(target).transaction_version(_query_id(ck)) == files - 1
        pipelines += 1
    assert kills >= _trials()
