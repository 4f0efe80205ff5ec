"""Spark jobs on S3 tables: the executors write and read the data files (this pyspark has no S3A
connector), against an S3 server started on 127.0.0.1 (moto, see tests/s3server.py) and
stopped by its pid. delta-rs reads every result from the same bucket.

DML here runs on Spark (the driver's pyarrow paths are turned off), so these tests cover
the executor-side writer and reader: partition values and directories, every column type,
deletion vectors, column mapping, files that lack later columns, OPTIMIZE, and files of a
failed job never being committed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

import serialake
from serialake.spark.dml.engine import COMPACTION_MAX_BYTES_CONF, DML_MAX_BYTES_CONF
from serialake.spark.table import DeltaTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.s3server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.s3]


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    from tests.s3server import s3_environment

    with s3_environment() as srv:
        yield srv


@pytest.fixture
def on_spark(spark: SparkSession, server: S3Server) -> Iterator[SparkSession]:
    """The session with DML and OPTIMIZE on Spark (no driver pyarrow path)."""
    spark.conf.set(DML_MAX_BYTES_CONF, "0")
    spark.conf.set(COMPACTION_MAX_BYTES_CONF, "0")
    try:
        yield spark
    finally:
        spark.conf.unset(DML_MAX_BYTES_CONF)
        spark.conf.unset(COMPACTION_MAX_BYTES_CONF)
        from serialake.spark import isolation

        isolation._recent.pop(spark, None)  # the session must not keep probing tables of this server
        isolation._cache.pop(spark, None)


def _uri(server: S3Server) -> str:
    return f"s3://{server.new_bucket()}/tables/t"


def _deltars(server: S3Server, uri: str) -> Any:
    import deltalake

    return deltalake.DeltaTable(uri, storage_options=dict(server.environment()))


def _rows(df: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in df.select(*columns).collect())


def _deltars_rows(server: S3Server, uri: str, *columns: str) -> list[tuple[Any, ...]]:
    table = _deltars(server, uri).to_pyarrow_table(columns=list(columns))
    return sorted(zip(*[table[c].to_pylist() for c in columns]))


def test_types_partitions_and_delta_rs(on_spark: SparkSession, server: S3Server) -> None:
    """Every common type round-trips through executor-written Parquet; partition values are
    the log's strings (a timestamp partition in UTC); delta-rs reads the same rows."""
    spark = on_spark
    uri = _uri(server)
    df = spark.sql(
        """SELECT id, CAST(id % 3 AS INT) AS p, DATE'2024-02-28' + CAST(id % 2 AS INT) AS day,
                  IF(id = 5, NULL, CONCAT('s', id)) AS s, id * 1.5D AS dbl, CAST(id AS DECIMAL(12, 3)) / 8 AS dec,
                  TIMESTAMP'2024-01-01 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
                  named_struct('a', id, 'b', named_struct('c', CAST(id AS STRING))) AS st,
                  array(id, id + 1) AS arr, map(CONCAT('k', id), id) AS m, CAST(id AS TINYINT) AS tiny,
                  X'CAFE' AS bin, id % 2 = 0 AS flag
           FROM range(40)"""
    )
    serialake.write(df, uri, partitionBy=["p", "day"])
    read = serialake.read(spark, uri)
    assert read.schema.simpleString() == df.schema.simpleString()
    assert sorted(map(tuple, read.collect())) == sorted(map(tuple, df.collect()))
    from serialake.core import DeltaLog

    snap = DeltaLog.for_table(uri).update()
    values = {(f.partition_values["p"], f.partition_values["day"]) for f in snap.all_files}
    assert values == {(str(p), d) for p in range(3) for d in ("2024-02-28", "2024-02-29")}
    assert all(f.path.startswith(f"p={f.partition_values['p']}/day={f.partition_values['day']}/part-")
               for f in snap.all_files)  # fmt: skip
    assert all(f.stats and '"numRecords"' in f.stats for f in snap.all_files)
    assert _deltars_rows(server, uri, "id", "p", "s", "dec") == sorted(
        (i, i % 3, None if i == 5 else f"s{i}", Decimal(i) / 8) for i in range(40)
    )
    ts = _deltars(server, uri).to_pyarrow_table(columns=["id", "ts"])
    got = dict(zip(ts["id"].to_pylist(), ts["ts"].to_pylist()))
    assert got[7].replace(tzinfo=None) == dt.datetime(2024, 1, 1, 10, 0, 7)


def test_timestamp_partition_and_max_records(on_spark: SparkSession, server: S3Server) -> None:
    """A timestamp partition is written in UTC as the log wants; ``maxRecordsPerFile`` splits files."""
    spark = on_spark
    uri = _uri(server)
    df = spark.sql("SELECT id, TIMESTAMP'2024-05-01 12:30:00' AS at FROM range(25)").coalesce(1)
    serialake.write(df, uri, partitionBy=["at"], maxRecordsPerFile=10)
    from serialake.core import DeltaLog

    snap = DeltaLog.for_table(uri).update()
    assert sorted(f.num_records for f in snap.all_files) == [5, 10, 10]
    assert {f.partition_values["at"] for f in snap.all_files} == {"2024-05-01 12:30:00.000000"}
    assert _rows(serialake.read(spark, uri), "id", "at") == [(i, dt.datetime(2024, 5, 1, 12, 30)) for i in range(25)]


def test_dml_on_spark_with_and_without_deletion_vectors(on_spark: SparkSession, server: S3Server) -> None:
    """DELETE, UPDATE and MERGE run as Spark jobs on S3; with deletion vectors the DV files are
    objects in the bucket; delta-rs (which cannot read deletion vectors) reads the same rows
    without them."""
    spark = on_spark
    for dvs in (False, True):
        uri = _uri(server)
        props = {"delta.enableDeletionVectors": "true"} if dvs else {}
        serialake.write(spark.sql("SELECT id, id % 4 AS g, 'v' AS s FROM range(100)").repartition(2), uri,
                        properties=props)  # fmt: skip
        table = DeltaTable.forPath(spark, uri)
        table.delete("id % 10 = 0")
        table.update("g = 1", {"s": "'u'"})
        source = spark.sql("SELECT id, 'm' AS s FROM range(95, 105)")
        (
            table.alias("t")
            .merge(source.alias("x"), "t.id = x.id")
            .whenMatchedUpdate(set={"s": "x.s"})
            .whenNotMatchedInsert(values={"id": "x.id", "g": "x.id % 4", "s": "x.s"})
            .execute()
        )
        expected = sorted(
            (i, "m" if i >= 95 else ("u" if i % 4 == 1 else "v")) for i in range(105) if i % 10 != 0 or i >= 100
        )
        assert _rows(serialake.read(spark, uri), "id", "s") == expected
        if not dvs:  # delta-rs 1.6.6 does not read deletion vectors
            assert _deltars_rows(server, uri, "id", "s") == expected
        from serialake.core import DeltaLog

        snap = DeltaLog.for_table(uri).update()
        has_dv = any(f.deletion_vector is not None for f in snap.all_files)
        assert has_dv == dvs


def test_files_lacking_later_columns_read_null(on_spark: SparkSession, server: S3Server) -> None:
    """Files written before a column was added read it as NULL."""
    spark = on_spark
    uri = _uri(server)
    serialake.write(spark.sql("SELECT id, named_struct('x', id, 'y', 'a') AS st FROM range(3)"), uri)
    serialake.write(
        spark.sql("SELECT id, named_struct('x', id, 'y', 'b') AS st, 'new' AS extra FROM range(3, 5)"),
        uri,
        mergeSchema=True,
    )
    rows = _rows(serialake.read(spark, uri), "id", "st", "extra")
    assert [(r[0], r[1]["x"], r[1]["y"], r[2]) for r in rows] == [
        *[(i, i, "a", None) for i in range(3)],
        *[(i, i, "b", "new") for i in range(3, 5)],
    ]


def test_optimize_compacts_on_s3(on_spark: SparkSession, server: S3Server) -> None:
    spark = on_spark
    uri = _uri(server)
    for i in range(4):
        serialake.write(spark.sql(f"SELECT id + {i * 10} AS id FROM range(10)").coalesce(1), uri)
    metrics = DeltaTable.forPath(spark, uri).optimize().executeCompaction().collect()[0].metrics
    assert metrics.numFilesRemoved == 4 and metrics.numFilesAdded == 1
    assert _rows(serialake.read(spark, uri), "id") == [(i,) for i in range(40)]
    assert _deltars_rows(server, uri, "id") == [(i,) for i in range(40)]


def test_format_delta_and_sql_on_s3(on_spark: SparkSession, server: S3Server) -> None:
    """delta-spark idioms on an ``s3a://`` URI: ``format("delta")`` save/load and ``spark.sql``."""
    spark = on_spark
    uri = _uri(server).replace("s3://", "s3a://")
    spark.range(6).write.format("delta").mode("overwrite").save(uri)
    assert _rows(spark.read.format("delta").load(uri), "id") == [(i,) for i in range(6)]
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id < 2")
    assert [r[0] for r in spark.sql(f"SELECT count(*) FROM delta.`{uri}`").collect()] == [4]


def test_failed_job_commits_nothing(on_spark: SparkSession, server: S3Server) -> None:
    """A write whose job fails half-way commits nothing: the table is unchanged, and objects
    of failed tasks are not in the log (never reported by the job)."""
    from pyspark.errors import PythonException
    from pyspark.sql import functions as F

    spark = on_spark
    uri = _uri(server)
    serialake.write(spark.range(3), uri)
    bad = spark.range(0, 1000, 1, 4).withColumn(
        "id", F.when(F.col("id") == 999, F.raise_error(F.lit("boom"))).otherwise(F.col("id"))
    )
    with pytest.raises(Exception) as info:
        serialake.write(bad, uri)
    assert "boom" in str(info.value) or isinstance(info.value, PythonException)
    assert _rows(serialake.read(spark, uri), "id") == [(0,), (1,), (2,)]
    assert _deltars(server, uri).version() == 0


def test_column_mapped_table_on_s3_is_read_by_logical_names(on_spark: SparkSession, server: S3Server) -> None:
    """A column-mapped table (written here object by object: serialake does not write column
    mapping yet) is read by physical names, nested fields too, and shown by logical names;
    the partition value is found under the column's physical name."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from serialake.core import DeltaLog
    from serialake.core.model.actions import AddFile, Metadata, Protocol
    from serialake.storage.datafiles import Access

    def mapped(name: str, type_: Any, cid: int) -> dict[str, Any]:
        metadata = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{cid}"}
        return {"name": name, "type": type_, "nullable": True, "metadata": metadata}

    schema = {"type": "struct", "fields": [
        mapped("user id", "long", 1),
        mapped("info", {"type": "struct", "fields": [mapped("city", "string", 3)]}, 2),
        mapped("part", "string", 4),
    ]}  # fmt: skip
    uri = _uri(server)
    buffer = io.BytesIO()
    pq.write_table(
        pa.table({"col-1": pa.array([1, 2], pa.int64()),
                  "col-2": pa.array([{"col-3": "Oslo"}, None], pa.struct([("col-3", pa.string())]))}),
        buffer,
    )  # fmt: skip
    Access.here(uri).put_new(f"{uri}/x/f.parquet", buffer.getvalue())
    txn = DeltaLog.for_table(uri).start_transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(schema), partition_columns=("part",),
                                 configuration={"delta.columnMapping.mode": "name",
                                                "delta.columnMapping.maxColumnId": "4"}))  # fmt: skip
    txn.update_protocol(Protocol(2, 5))
    txn.commit([AddFile(path="x/f.parquet", partition_values={"col-4": "p1"}, size=len(buffer.getvalue()),
                        modification_time=0)], "CREATE TABLE")  # fmt: skip
    df = serialake.read(on_spark, uri)
    assert df.columns == ["user id", "info", "part"]
    assert [(r["user id"], r.info.city if r.info else None, r.part) for r in df.orderBy("user id").collect()] == [
        (1, "Oslo", "p1"), (2, None, "p1")
    ]  # fmt: skip


def test_column_mapped_table_written_on_s3(on_spark: SparkSession, server: S3Server) -> None:
    """The executors write physical names and field ids; DML and renames work; delta-rs reads it."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import QueryBuilder

    from serialake.core import DeltaLog
    from serialake.storage.datafiles import Access

    uri = _uri(server)
    on_spark.sql(
        f"CREATE TABLE delta.`{uri}` (id LONG, info STRUCT<city: STRING>, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    )
    df = on_spark.createDataFrame(
        [(1, ("Oslo",), "x"), (2, ("Rome",), "y")], "id long, info struct<city:string>, p string"
    )
    df.write.format("delta").mode("append").save(uri)
    snap = DeltaLog.for_table(uri).update()
    physical = {f.name: f.metadata["delta.columnMapping.physicalName"] for f in snap.schema.fields}
    ids = {f.name: f.metadata["delta.columnMapping.id"] for f in snap.schema.fields}
    for add in snap.all_files:
        assert set(add.partition_values) == {physical["p"]}
        footer = pq.ParquetFile(pa.py_buffer(Access.here(uri).read_bytes(f"{uri}/{add.path}")))
        assert {(f.name, int(f.metadata[b"PARQUET:field_id"])) for f in footer.schema_arrow} == {
            (physical["id"], ids["id"]), (physical["info"], ids["info"])
        }
    DeltaTable.forPath(on_spark, uri).delete("id = 2")
    on_spark.sql(f"ALTER TABLE delta.`{uri}` RENAME COLUMN info TO place")
    assert _rows(serialake.read(on_spark, uri).select("id", "place.city", "p"), "id", "city", "p") == [
        (1, "Oslo", "x")
    ]
    rs = pa.table(QueryBuilder().register("t", _deltars(server, uri)).execute("SELECT id, place, p FROM t").read_all())
    assert rs.to_pylist() == [{"id": 1, "place": {"city": "Oslo"}, "p": "x"}]


def test_uniform_table_on_s3_is_read_by_pyiceberg(on_spark: SparkSession, server: S3Server) -> None:
    """A UniForm table on S3: executors write compliant files, the Iceberg metadata lands on S3 too."""
    from pyiceberg.table import StaticTable

    from serialake.core import DeltaLog
    from serialake.core import iceberg as core_iceberg

    uri = _uri(server)
    on_spark.sql(
        f"CREATE TABLE delta.`{uri}` (id LONG, v STRING, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.universalFormat.enabledFormats' = 'iceberg')"
    )
    on_spark.createDataFrame([(1, "a", "x"), (2, "b", "y"), (3, "c", "x")], "id long, v string, p string") \
        .write.format("delta").mode("append").save(uri)  # fmt: skip
    DeltaTable.forPath(on_spark, uri).update("id = 3", {"v": "'updated'"})
    assert core_iceberg.IcebergConverter.wait_all(60)
    log = DeltaLog.for_table(uri)
    version = log.update().version
    assert core_iceberg.read_version_hint(log) == version
    env = server.environment()
    properties = {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key-id": env["AWS_ACCESS_KEY_ID"],
                  "s3.secret-access-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"]}  # fmt: skip
    table = StaticTable.from_metadata(core_iceberg.metadata_path(log.table_path, version), properties=properties)
    got = sorted(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())
    assert got == [(1, "a", "x"), (2, "b", "y"), (3, "updated", "x")]
    assert _rows(serialake.read(on_spark, uri), "id", "v", "p") == got


def test_direct_write_job_on_s3_becomes_add_files(server: S3Server) -> None:
    """The S3 half of Spark's direct writer (``spark.direct``; Spark writes ``s3a://`` where the
    S3A connector is installed, not here): the job's record, in the sink's format with
    percent-encoded ``s3a://`` URIs, becomes AddFiles whose stats come from the footers read
    from S3; a file without rows and the record are deleted; nothing else is touched."""
    import io as bytes_io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from serialake.core.model.schema import PrimitiveType
    from serialake.spark import direct
    from serialake.spark.footer_stats import file_stats
    from serialake.storage.datafiles import Access

    table = _uri(server)
    files = Access.here(table)
    prefix = "0123456789abcdef"
    written = {"p=a b/part-00000-x.c000.snappy.parquet": [1, 2, 3], "p=x%3Ay/part-00001-y.c000.snappy.parquet": []}
    lines = ["v1"]
    for rel, ids in written.items():
        buffer = bytes_io.BytesIO()
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buffer)
        with files.create(f"{table}/{prefix}/{rel}") as f:
            f.write(buffer.getvalue())
        uri = direct.hadoop_uri(f"{table}/{prefix}/{rel}").replace("%", "%25").replace(" ", "%20")
        entry = {"path": uri, "size": len(buffer.getvalue()), "isDir": False, "modificationTime": 1700000000000,
                 "blockReplication": 1, "blockSize": 33554432, "action": "add"}  # fmt: skip
        lines.append(json.dumps(entry))
    files.put(f"{table}/{prefix}/_spark_metadata/0", "\n".join(lines).encode())
    files.put(f"{table}/other/keep.parquet", b"not ours")

    adds = direct.finish_job(
        table,
        prefix,
        [(("id",), PrimitiveType("long"))],
        data_change=True,
        describe=lambda rel_dir, name: {"p": rel_dir.split("=", 1)[1]},
        stats_of=file_stats,
    )
    assert [(a.path, a.partition_values, json.loads(a.stats or "{}")) for a in adds] == [
        (f"{prefix}/p=a%20b/part-00000-x.c000.snappy.parquet", {"p": "a b"},
         {"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3}, "nullCount": {"id": 0}}),
    ]  # fmt: skip
    left = sorted(s.path for s in files.walk(table))
    assert left == [f"{prefix}/p=a b/part-00000-x.c000.snappy.parquet", "other/keep.parquet"]

    # A job that died before its commit leaves its record: VACUUM's candidates include it (once old
    # enough), never the log or another hidden object.
    import time

    from serialake.spark.dml.vacuum_command import _remote_vacuum_candidates

    files.put(f"{table}/fedcba9876543210/_spark_metadata/0", b"v1\n")
    files.put(f"{table}/_delta_log/_hidden", b"x")
    kept = {f"{table}/{prefix}/p=a b/part-00000-x.c000.snappy.parquet"}
    found = sorted(p for p, _ in _remote_vacuum_candidates(table, ["p"], kept, int(time.time() * 1000) + 3_600_000))
    assert found == [f"{table}/fedcba9876543210/_spark_metadata/0", f"{table}/other/keep.parquet"]
