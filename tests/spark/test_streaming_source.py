"""``spark.readStream.format("delta")``: serialake's streaming source (serialake/spark/streaming/source.py).

Each test runs real streaming queries on the session (foreachBatch collecting every
micro-batch), with commits arriving between triggers, and checks what Delta's source
delivers: the initial snapshot then each commit's rows exactly once, the starting options,
the per-trigger limits, data changes failing the query unless an option allows them,
metadata changes stopping it at their version and a restart continuing from there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException, IllegalArgumentException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

import serialake
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata, Protocol, RemoveFile
from serialake.spark.streaming.source import metadata_changes
from serialake.spark.table import DeltaTable

pytestmark = pytest.mark.spark
# A loaded CI machine runs a micro-batch in seconds, not minutes; the bound only stops a hung query.
STREAM_TIMEOUT = 600


class Batches:
    """A foreachBatch function keeping each micro-batch's rows (as tuples of the given columns)."""

    def __init__(self, *columns: str) -> None:
        self.columns = columns
        self.batches: list[list[tuple[Any, ...]]] = []

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        cols = self.columns or tuple(df.columns)
        self.batches.append([tuple(r[c] for c in cols) for r in df.collect()])

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        return sorted(r for b in self.batches for r in b)

    @property
    def sizes(self) -> list[int]:
        """The sizes of the batches that had rows."""
        return [len(b) for b in self.batches if b]


def _stream(spark: SparkSession, path: str, **options: Any) -> DataFrame:
    reader = spark.readStream.format("delta")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Any]:
    """``run(df, sink, checkpoint="a", available_now=False)``: start a query into ``sink``, process
    what is there; the query is returned (stopped at the end of the test)."""
    queries: list[Any] = []

    def start(df: DataFrame, sink: Batches, checkpoint: str = "ck", available_now: bool = False) -> Any:
        writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / checkpoint))
        if available_now:
            writer = writer.trigger(availableNow=True)
        query = writer.start()
        queries.append(query)
        if available_now:
            query.awaitTermination(STREAM_TIMEOUT)
        else:
            query.processAllAvailable()
        return query

    yield start
    for q in queries:
        q.stop()


def _append(spark: SparkSession, path: str, ids: range, *, files: int = 1, **kw: Any) -> int:
    df = spark.createDataFrame([(i, f"s{i}", str(i % 2)) for i in ids], "id long, s string, p string")
    version = serialake.write(df.repartition(files) if files > 1 else df.coalesce(1), path, **kw)
    assert version is not None
    return version


def _ids(batches: Batches) -> list[int]:
    return sorted(r[0] for r in batches.rows)


def test_initial_snapshot_then_each_commit_once(spark: SparkSession, tmp_table: str, run: Any) -> None:
    _append(spark, tmp_table, range(0, 4), files=2)
    _append(spark, tmp_table, range(4, 6))
    df = _stream(spark, tmp_table)
    assert df.isStreaming
    assert df.schema == spark.read.format("delta").load(tmp_table).schema
    sink = Batches("id", "s", "p")
    query = run(df, sink)
    assert sink.rows == [(i, f"s{i}", str(i % 2)) for i in range(6)]
    _append(spark, tmp_table, range(6, 9))
    query.processAllAvailable()
    _append(spark, tmp_table, range(9, 10))
    _append(spark, tmp_table, range(10, 12), files=2)
    query.processAllAvailable()
    assert Counter(_ids(sink)) == Counter(range(12))  # every row exactly once
    assert sink.batches[-1] and max(r[0] for r in sink.batches[-1]) == 11


def test_starting_version_and_latest(spark: SparkSession, tmp_table: str, run: Any) -> None:
    _append(spark, tmp_table, range(0, 3))
    _append(spark, tmp_table, range(3, 6))
    _append(spark, tmp_table, range(6, 9))
    from_one = Batches("id")
    run(_stream(spark, tmp_table, startingVersion=1), from_one, "a")
    assert _ids(from_one) == list(range(3, 9))  # versions 1 and 2, no snapshot

    latest = Batches("id")
    query = run(_stream(spark, tmp_table, startingVersion="latest"), latest, "b")
    assert latest.rows == []
    _append(spark, tmp_table, range(9, 11))
    query.processAllAvailable()
    assert _ids(latest) == [9, 10]

    missing = r"DELTA_VERSION_NOT_FOUND.*version 7\. Available versions: \[0, 3\]"
    with pytest.raises(StreamingQueryException, match=missing):
        run(_stream(spark, tmp_table, startingVersion=7), Batches(), "c")
    with pytest.raises(IllegalArgumentException, match="startingVersion"):
        _stream(spark, tmp_table, startingVersion="-1")


def test_starting_timestamp(spark: SparkSession, tmp_table: str, run: Any) -> None:
    import time

    for start in range(0, 9, 3):
        _append(spark, tmp_table, range(start, start + 3))
        time.sleep(0.05)
    stamps = dict(DeltaLog(tmp_table).commit_timestamps())  # as a new process sees them (file times)
    assert stamps[0] < stamps[1] < stamps[2]

    def iso(ms: int) -> str:
        return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)).isoformat()

    at_one = Batches("id")
    run(_stream(spark, tmp_table, startingTimestamp=iso(stamps[1])), at_one, "a")
    assert _ids(at_one) == list(range(3, 9))
    after_one = Batches("id")  # the first commit at or after the timestamp: version 2
    run(_stream(spark, tmp_table, startingTimestamp=iso(stamps[1] + 1)), after_one, "b")
    assert _ids(after_one) == list(range(6, 9))
    with pytest.raises(StreamingQueryException, match="DELTA_TIMESTAMP_GREATER_THAN_COMMIT"):
        run(_stream(spark, tmp_table, startingTimestamp=iso(stamps[2] + 60_000)), Batches(), "c")
    with pytest.raises(IllegalArgumentException, match="either provide 'startingVersion' or 'startingTimestamp'"):
        _stream(spark, tmp_table, startingVersion=0, startingTimestamp=iso(stamps[0]))


def test_max_files_and_bytes_per_trigger(spark: SparkSession, tmp_table: str, run: Any) -> None:
    _append(spark, tmp_table, range(0, 2))
    _append(spark, tmp_table, range(2, 8), files=3)  # three files of two rows: batches end inside it
    _append(spark, tmp_table, range(8, 10))
    log = DeltaLog.for_table(tmp_table)
    assert [sum(isinstance(a, AddFile) for a in log.read_commit(v).actions) for v in range(3)] == [1, 3, 1]

    two = Batches("id")
    run(_stream(spark, tmp_table, startingVersion=0, maxFilesPerTrigger=2), two, "a")
    assert two.sizes == [4, 4, 2]
    assert {0, 1} < {r[0] for r in two.batches[0]} and _ids(two) == list(range(10))

    snapshot = Batches("id")  # the initial snapshot is split as well
    run(_stream(spark, tmp_table, maxFilesPerTrigger=2), snapshot, "b")
    assert snapshot.sizes == [4, 4, 2] and _ids(snapshot) == list(range(10))

    one_byte = Batches("id")  # at least one file per batch, however small the limit
    run(_stream(spark, tmp_table, startingVersion=0, maxBytesPerTrigger="1b"), one_byte, "c")
    assert one_byte.sizes == [2] * 5

    available_now = Batches("id")  # Trigger.AvailableNow keeps the limit and stops at the end
    run(_stream(spark, tmp_table, startingVersion=0, maxFilesPerTrigger=3), available_now, "d", available_now=True)
    assert available_now.sizes == [6, 4] and _ids(available_now) == list(range(10))


def test_partitioned_table(spark: SparkSession, tmp_table: str, run: Any) -> None:
    df = spark.createDataFrame(
        [(1, dt.date(2024, 1, 1), 7, "a"), (2, dt.date(2024, 1, 2), None, "b"), (3, None, 7, "c")],
        "id long, day date, k int, v string",
    )
    serialake.write(df, tmp_table, partitionBy=["day", "k"])
    sink = Batches()
    query = run(_stream(spark, tmp_table), sink)
    more = spark.createDataFrame([(4, dt.date(2024, 1, 2), 8, "d")], "id long, day date, k int, v string")
    serialake.write(more, tmp_table)
    query.processAllAvailable()
    expected = sorted(tuple(r) for r in spark.read.format("delta").load(tmp_table).collect())
    assert sink.rows == expected
    assert (3, None, 7, "c") in sink.rows and (2, dt.date(2024, 1, 2), None, "b") in sink.rows


def test_column_mapped_table_by_physical_names(spark: SparkSession, tmp_table: str, run: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def field(name: str, cid: int, type_: Any) -> dict[str, Any]:
        mapping = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{cid}"}
        return {"name": name, "type": type_, "nullable": True, "metadata": mapping}

    schema = {"type": "struct", "fields": [field("user id", 1, "long"), field("part", 2, "string")]}
    os.makedirs(os.path.join(tmp_table, "x"))

    def add(name: str, ids: list[int], part: str) -> AddFile:
        file = os.path.join(tmp_table, "x", name)
        pq.write_table(pa.table({"col-1": pa.array(ids, pa.int64())}), file)
        return AddFile(path=f"x/{name}", partition_values={"col-2": part}, size=os.path.getsize(file),
                       modification_time=0)  # fmt: skip

    log = DeltaLog.for_table(tmp_table)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(schema), partition_columns=("part",),
                                 configuration={"delta.columnMapping.mode": "name",
                                                "delta.columnMapping.maxColumnId": "2"}))  # fmt: skip
    txn.update_protocol(Protocol(2, 5))
    txn.commit([add("a.parquet", [1, 2], "p1")], "CREATE TABLE")
    sink = Batches("user id", "part")
    query = run(_stream(spark, tmp_table), sink)
    log.start_transaction().commit([add("b.parquet", [3], "p2")], "WRITE")
    query.processAllAvailable()
    assert sink.rows == [(1, "p1"), (2, "p1"), (3, "p2")]


def test_optimize_adds_no_rows(spark: SparkSession, tmp_table: str, run: Any) -> None:
    for start in range(0, 8, 2):
        _append(spark, tmp_table, range(start, start + 2))
    sink = Batches("id")
    query = run(_stream(spark, tmp_table), sink)
    files_before = DeltaLog.for_table(tmp_table).update().num_files
    spark.sql(f"OPTIMIZE delta.`{tmp_table}`")
    assert DeltaLog.for_table(tmp_table).update().num_files < files_before  # compacted: dataChange=false files
    _append(spark, tmp_table, range(8, 10))
    query.processAllAvailable()
    assert Counter(_ids(sink)) == Counter(range(10))

    history = Batches("id")  # the whole history from version 0, the OPTIMIZE commit included
    run(_stream(spark, tmp_table, startingVersion=0), history, "h")
    assert Counter(_ids(history)) == Counter(range(10))


def test_delete_fails_the_stream_unless_allowed(spark: SparkSession, tmp_table: str, run: Any) -> None:
    _append(spark, tmp_table, range(0, 6), partitionBy="p")
    sink = Batches("id")
    query = run(_stream(spark, tmp_table), sink)
    deleted = DeltaTable.forPath(spark, tmp_table)
    deleted.delete("p = '1'")  # whole files of a partition: removes only
    version = DeltaLog.for_table(tmp_table).update().version
    _append(spark, tmp_table, range(6, 8))
    refused = rf"DELTA_SOURCE_IGNORE_DELETE.*at version {version}\b.*'ignoreDeletes'"
    with pytest.raises(StreamingQueryException, match=refused):
        query.processAllAvailable()
    assert _ids(sink) == list(range(6))  # nothing after the DELETE

    # Restarted from its checkpoint with ignoreDeletes: the DELETE is passed over, the rest follows.
    run(_stream(spark, tmp_table, ignoreDeletes="true"), sink)
    assert _ids(sink) == list(range(8))

    # A DELETE rewriting files (removes and adds) is a data change: ignoreDeletes does not cover it.
    deleted.delete("id = 0")  # its file holds 2 and 4 too
    changed = DeltaLog.for_table(tmp_table).update().version
    refused = rf"DELTA_SOURCE_TABLE_IGNORE_CHANGES.*DELETE.*at version {changed}\b"
    with pytest.raises(StreamingQueryException, match=refused):
        run(_stream(spark, tmp_table, ignoreDeletes="true"), sink)
    _append(spark, tmp_table, range(8, 9))
    run(_stream(spark, tmp_table, skipChangeCommits="true"), sink)  # the whole commit skipped
    assert Counter(_ids(sink)) == Counter(range(9))


def test_deletion_vectors(spark: SparkSession, tmp_table: str, run: Any) -> None:
    _append(spark, tmp_table, range(10), properties={"delta.enableDeletionVectors": "true"})
    table = DeltaTable.forPath(spark, tmp_table)
    table.delete("id IN (1, 2)")
    log = DeltaLog.for_table(tmp_table)
    (only,) = log.update().all_files
    assert only.deletion_vector is not None  # rows marked, file kept

    sink = Batches("id")
    query = run(_stream(spark, tmp_table), sink)
    assert _ids(sink) == [0, 3, 4, 5, 6, 7, 8, 9]  # the snapshot's file read through its vector

    table.delete("id = 3")  # the vector grows: remove + add of the same file
    grown = log.update().version
    actions = log.read_commit(grown).actions
    assert {a.path for a in actions if isinstance(a, RemoveFile)} == {a.path for a in actions if isinstance(a, AddFile)}
    with pytest.raises(StreamingQueryException, match=rf"DELTA_SOURCE_TABLE_IGNORE_CHANGES.*version {grown}\b"):
        query.processAllAvailable()
    with pytest.raises(StreamingQueryException, match="DELTA_SOURCE_TABLE_IGNORE_CHANGES"):
        run(_stream(spark, tmp_table, ignoreDeletes="true"), sink)

    _append(spark, tmp_table, range(10, 12))
    run(_stream(spark, tmp_table, skipChangeCommits="true"), sink)
    assert Counter(_ids(sink)) == Counter([0, 3, 4, 5, 6, 7, 8, 9, 10, 11])

    # Delta's ignoreChanges: the rewritten file comes again, through its new vector.
    again = Batches("id")
    run(_stream(spark, tmp_table, startingVersion=grown, ignoreChanges="true"), again, "again")
    assert _ids(again) == [0, 4, 5, 6, 7, 8, 9, 10, 11]


def test_metadata_change_stops_the_stream_and_restart_continues(
    spark: SparkSession, tmp_table: str, run: Any
) -> None:
    _append(spark, tmp_table, range(0, 3))
    sink = Batches("id")
    query = run(_stream(spark, tmp_table), sink)
    _append(spark, tmp_table, range(3, 5))
    wider = spark.createDataFrame([(5, "s5", "1", 50)], "id long, s string, p string, extra int")
    changed = serialake.write(wider, tmp_table, mergeSchema=True)
    _append(spark, tmp_table, range(6, 7))
    with pytest.raises(StreamingQueryException) as failure:
        query.processAllAvailable()
    message = str(failure.value)
    assert f"DELTA_SCHEMA_CHANGED_WITH_VERSION] Detected schema change in version {changed}" in message
    assert "column(s) added: extra int" in message
    assert _ids(sink) == list(range(5))  # the rows before the change were delivered

    # Restarted from the checkpoint: the new schema, from the changed version on, nothing twice.
    wide = Batches("id", "extra")
    df = _stream(spark, tmp_table)
    assert "extra" in df.columns
    query = run(df, wide)
    assert wide.rows == [(5, 50), (6, None)]

    DeltaTable.forPath(spark, tmp_table).setTableProperties({"serialake.test.owner": "streams"})
    properties = DeltaLog.for_table(tmp_table).update().version
    stopped = rf"version {properties} .*properties set: serialake.test.owner=streams"
    with pytest.raises(StreamingQueryException, match=stopped):
        query.processAllAvailable()
    _append(spark, tmp_table, range(7, 8))
    run(_stream(spark, tmp_table), wide)
    assert wide.rows == [(5, 50), (6, None), (7, None)]


def test_metadata_changes_in_words() -> None:
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True,
         "metadata": {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.highWaterMark": 5}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}},
    ]}  # fmt: skip
    old = Metadata(schema_string=json.dumps(schema), partition_columns=("v",), configuration={"a": "1"})
    moved = json.loads(json.dumps(schema))
    moved["fields"][0]["metadata"]["delta.identity.highWaterMark"] = 9
    assert metadata_changes(old, Metadata(schema_string=json.dumps(moved), partition_columns=("v",),
                                          configuration={"a": "1"})) == []  # fmt: skip
    retyped = json.loads(json.dumps(schema))
    retyped["fields"][1]["type"] = "integer"
    retyped["fields"].append({"name": "w", "type": "date", "nullable": True, "metadata": {}})
    new = Metadata(schema_string=json.dumps(retyped), partition_columns=(), configuration={"b": "2"})
    assert metadata_changes(old, new) == [
        "partitioning changed from [v] to []",
        "column(s) added: w date",
        "column v changed type from string to int",
        "properties set: b=2",
        "properties unset: a",
    ]


def test_table_by_name_and_refusals(spark: SparkSession, tmp_table: str, tmp_path: Path, run: Any) -> None:
    _append(spark, tmp_table, range(0, 3))
    spark.sql(f"CREATE TABLE stream_events USING delta LOCATION '{tmp_table}'")
    sink = Batches("id")
    query = run(spark.readStream.table("stream_events"), sink)
    _append(spark, tmp_table, range(3, 4))
    query.processAllAvailable()
    assert _ids(sink) == [0, 1, 2, 3]

    with pytest.raises(AnalysisException, match="DELTA_UNSUPPORTED_SCHEMA_DURING_READ"):
        spark.readStream.format("delta").schema("id long").load(tmp_table)
    with pytest.raises(AnalysisException, match="not a Delta table"):
        spark.readStream.format("delta").load(str(tmp_path / "nothing"))
    with pytest.raises(IllegalArgumentException, match="'path' is not specified"):
        spark.readStream.format("delta").load()
    with pytest.raises(IllegalArgumentException, match="maxFilesPerTrigger"):
        _stream(spark, tmp_table, maxFilesPerTrigger=0)
    with pytest.raises(IllegalArgumentException, match="withEventTimeOrder"):
        _stream(spark, tmp_table, withEventTimeOrder="true")


CHANGES = ("id", "s", "_change_type", "_commit_version")


def test_change_data_feed_stream(spark: SparkSession, tmp_table: str, run: Any) -> None:
    from serialake.spark.cdf import changes_df

    props = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
    _append(spark, tmp_table, range(0, 4), properties=props)
    df = _stream(spark, tmp_table, readChangeFeed="true", maxFilesPerTrigger=1)
    assert df.columns == ["id", "s", "p", "_change_type", "_commit_version", "_commit_timestamp"]
    sink = Batches(*CHANGES)
    query = run(df, sink)
    assert sink.rows == [(i, f"s{i}", "insert", 0) for i in range(4)]  # the snapshot: inserts of its version

    first = _append(spark, tmp_table, range(4, 6), files=2)  # inserts, two files
    table = DeltaTable.forPath(spark, tmp_table)
    table.update("id = 1", {"s": "'u'"})  # change files: pre and post images
    table.delete("id = 2")  # a deletion vector: no change files, the re-marked row is the delete
    last = DeltaLog.for_table(tmp_table).update().version
    query.processAllAvailable()
    batch = sorted(tuple(r[c] for c in CHANGES) for r in changes_df(spark, tmp_table, first, last).collect())
    assert sorted(r for r in sink.rows if r[3] > 0) == batch  # the batch reader's rows, exactly
    assert (1, "u", "update_postimage", first + 1) in batch and (2, "s2", "delete", last) in batch
    # A commit's changes are admitted whole (two files in one batch despite maxFilesPerTrigger=1).
    assert sink.sizes[-3:] == [2, 2, 1]
    DeltaLog.clear_cache()  # commit times as another process reads them (this one remembers its own commits')
    stamps = {r["_commit_version"]: r["_commit_timestamp"] for r in changes_df(spark, tmp_table, 0, last).collect()}
    streamed = Batches("_commit_version", "_commit_timestamp")
    run(_stream(spark, tmp_table, readChangeFeed="true", startingVersion=1), streamed, "times")
    assert {v: t for v, t in streamed.rows} == {v: t for v, t in stamps.items() if v >= 1}


def test_change_data_feed_stream_needs_the_feed(spark: SparkSession, tmp_table: str, run: Any) -> None:
    _append(spark, tmp_table, range(0, 2))
    snapshot = Batches(*CHANGES)  # the initial snapshot needs no recorded changes
    run(_stream(spark, tmp_table, readChangeFeed="true"), snapshot, "a")
    assert snapshot.rows == [(0, "s0", "insert", 0), (1, "s1", "insert", 0)]
    with pytest.raises(StreamingQueryException, match=r"DELTA_MISSING_CHANGE_DATA.*recorded for version \[0\]"):
        run(_stream(spark, tmp_table, readChangeFeed="true", startingVersion=0), Batches(), "b")


@pytest.fixture
def s3_env(spark: SparkSession) -> Iterator[Any]:
    """An S3 server on 127.0.0.1 whose settings only this process has (environment variables set
    after Spark's workers started): the stream's workers get them with the source."""
    from tests.s3server import s3_environment

    with s3_environment(spark) as server:
        yield server


@pytest.mark.s3
def test_s3_table(spark: SparkSession, s3_env: Any, run: Any) -> None:
    uri = f"s3://{s3_env.new_bucket()}/tables/t"
    _append(spark, uri, range(0, 8), partitionBy="p", properties={"delta.enableDeletionVectors": "true"})
    DeltaTable.forPath(spark, uri).delete("id = 2")  # a deletion vector object in the bucket
    assert any(f.deletion_vector is not None for f in DeltaLog.for_table(uri).update().all_files)
    sink = Batches("id", "p")
    query = run(_stream(spark, uri, maxFilesPerTrigger=1), sink)
    _append(spark, uri, range(8, 10))
    query.processAllAvailable()
    assert sink.rows == [(i, str(i % 2)) for i in range(10) if i != 2]
    assert len(sink.sizes) == 4  # one file per batch: two partitions, then two new files
