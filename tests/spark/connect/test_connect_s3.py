"""A table on object storage through a Spark Connect session (issue #43).

This is the route a remote server takes: the client shares no file system with the
server, so the server's executors write and read the data objects (``spark/remote.py``),
the S3 settings travelling with each job, and the client commits. Here the server is local
and the bucket a moto server on 127.0.0.1 (stopped by its pid); the same body runs over a
classic session, and delta-rs reads the result from the bucket.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from serialake import DeltaTable
from serialake.spark.dml.engine import DML_MAX_BYTES_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.s3server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.connect]


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    from tests.s3server import s3_environment

    with s3_environment() as srv:
        yield srv


@pytest.mark.parametrize("engine", ["spark", "driver"])
def test_write_dml_and_time_travel_on_s3(session: SparkSession, server: S3Server, engine: str) -> None:
    """Write, append, DELETE, MERGE and a time-travel read of an S3 table: the same rows over
    Connect as over classic, with the DML on Spark's executors or on the client's driver path."""
    import deltalake

    uri = f"s3://{server.new_bucket()}/tables/t"
    if engine == "spark":
        session.conf.set(DML_MAX_BYTES_CONF, "0")
    try:
        session.createDataFrame([(i, f"p{i % 2}") for i in range(10)], "id long, part string") \
            .write.format("delta").partitionBy("part").save(uri)  # fmt: skip
        session.createDataFrame([(10, "p0")], "id long, part string").write.format("delta").mode("append").save(uri)
        table = DeltaTable.forPath(session, uri)
        table.delete("id < 3")
        source = session.createDataFrame([(4, "p0"), (20, "p0")], "id long, part string")
        (table.alias("t").merge(source.alias("s"), "t.id = s.id")
         .whenMatchedUpdate(set={"part": "'moved'"}).whenNotMatchedInsertAll().execute())  # fmt: skip
    finally:
        session.conf.unset(DML_MAX_BYTES_CONF)
    rows = sorted((r.id, r.part) for r in session.read.format("delta").load(uri).collect())
    expected = sorted([(i, f"p{i % 2}") for i in range(3, 11) if i != 4] + [(4, "moved"), (20, "p0")])
    assert rows == expected
    first = session.read.format("delta").option("versionAsOf", 0).load(uri).count()
    assert first == 10
    arrow = deltalake.DeltaTable(uri, storage_options=dict(server.environment())).to_pyarrow_table()
    assert sorted(zip(arrow["id"].to_pylist(), arrow["part"].to_pylist(), strict=True)) == expected


def test_a_conflict_on_s3_keeps_its_class(
    session: SparkSession, server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read feeding a write at Serializable loses to a concurrent DELETE of a row it read, on
    an S3 table, over Connect as over classic. The DELETE rewrites the table's one file: the
    file it adds may hold rows the read wanted, so Delta's first check fails the write
    (``ConcurrentAppendException``), and nothing of it is committed."""
    from serialake.exceptions import ConcurrentAppendException
    from tests.helpers import before_first_commit

    uri = f"s3://{server.new_bucket()}/tables/t"
    session.createDataFrame([(i,) for i in range(6)], "id long").write.format("delta") \
        .option("delta.isolationLevel", "Serializable").save(uri)  # fmt: skip
    feeding = session.read.format("delta").load(uri).where("id = 1").selectExpr("id + 100 AS id")
    delete = lambda: DeltaTable.forPath(session, uri).delete("id = 1")  # noqa: E731
    with before_first_commit(monkeypatch, delete), pytest.raises(ConcurrentAppendException):
        feeding.write.format("delta").mode("append").save(uri)
    assert sorted(r.id for r in session.read.format("delta").load(uri).collect()) == [0, 2, 3, 4, 5]
