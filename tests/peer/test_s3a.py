"""Object storage as users run it: the S3A connector (hadoop-aws from Maven Central) on the S3
server at 127.0.0.1 (moto), serialake and delta-spark on one table.

serialake's session here has the connector, so its data files take Spark's own Parquet writer
straight to their final ``s3a://`` names (``spark.direct``); its commits stay conditional PUTs.
delta-spark (its default S3 log store: one writer at a time) reads what serialake wrote and
writes after it; serialake and delta-rs read what delta-spark wrote.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from peer.client import DeltaSparkPeer, SerialakeWorker, s3a_conf, s3a_jars, unavailable

if TYPE_CHECKING:
    from tests.s3server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.peer, pytest.mark.s3, pytest.mark.slow]


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    from tests.s3server import s3_environment

    reason = unavailable()
    if reason is not None or not s3a_jars():
        pytest.skip(reason or "the S3A connector's jars are missing: run `make peer`")
    with s3_environment() as srv:
        yield srv


@pytest.fixture(scope="module")
def engines(server: S3Server) -> Iterator[tuple[SerialakeWorker, DeltaSparkPeer]]:
    """serialake and delta-spark, each in its own process with the connector, on one server."""
    conf = s3a_conf(server.endpoint)
    serialake_side = SerialakeWorker({**conf, "spark.serialake.dml.local.maxBytes": "0"})
    with serialake_side.start(), DeltaSparkPeer(conf) as delta_side:
        yield serialake_side, delta_side


def _table(server: S3Server) -> str:
    return f"s3a://{server.new_bucket()}/tables/t"


def _objects(server: S3Server, uri: str) -> list[str]:
    import boto3

    bucket, _, prefix = uri.removeprefix("s3a://").partition("/")
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    return sorted(o["Key"][len(prefix) + 1 :] for page in pages for o in page.get("Contents", []))


def _deltars_rows(server: S3Server, uri: str) -> list[list[Any]]:
    import deltalake

    from peer.plain import plain_rows

    table = deltalake.DeltaTable(uri.replace("s3a://", "s3://"), storage_options=dict(server.environment()))
    data = table.to_pyarrow_table()
    return plain_rows(zip(*[data[c].to_pylist() for c in data.column_names]))


@pytest.mark.parametrize(
    "dv", [pytest.param(False, id="files", marks=pytest.mark.soak), pytest.param(True, id="deletion-vectors")]
)
def test_spark_writer_on_s3a_then_delta_spark_reads_and_writes(
    engines: tuple[SerialakeWorker, DeltaSparkPeer], server: S3Server, dv: bool
) -> None:
    ours, theirs = engines
    uri = _table(server)
    route = ours.run(
        "from serialake.spark import direct\n"
        "df = spark.range(40).selectExpr('id', 'id % 4 AS p', 'cast(id AS string) AS s')\n"
        "df.write.format('delta').partitionBy('p').save(args['u'])\n"
        "spark.sql(f\"ALTER TABLE delta.`{args['u']}` SET TBLPROPERTIES "
        "('delta.enableDeletionVectors' = '{args['dv']}')\")\n"
        "spark.sql(f\"DELETE FROM delta.`{args['u']}` WHERE id IN (3, 17)\")\n"
        "spark.sql(f\"UPDATE delta.`{args['u']}` SET s = 'x' WHERE id = 5\")\n"
        "spark.sql(f\"MERGE INTO delta.`{args['u']}` t USING (SELECT 6 AS id, 2 AS p, 'm' AS s UNION ALL "
        "SELECT 100, 0, 'n') u ON t.id = u.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *\")\n"
        "result = direct.data_io(spark, args['u'])",
        u=uri, dv=str(dv).lower(),
    )  # fmt: skip
    assert route == "spark"  # Spark's own writer, straight to the final names
    objects = _objects(server, uri)
    assert not [o for o in objects if "_spark_metadata" in o or "_staging" in o or "_temporary" in o], objects
    assert any(o.endswith(".bin") for o in objects) == dv  # deletion vectors where enabled

    expected = [[i, i % 4, "x" if i == 5 else str(i)] for i in range(40) if i not in (3, 17, 6)]
    expected += [[6, 2, "m"], [100, 0, "n"]]
    from peer.plain import plain_rows

    expected = plain_rows(expected)
    assert theirs.rows(uri, columns=["id", "p", "s"]) == expected
    assert ours.rows(uri, columns=["id", "p", "s"]) == expected
    assert [h["operation"] for h in theirs.history(uri)] == ["MERGE", "UPDATE", "DELETE", "SET TBLPROPERTIES", "WRITE"]

    # delta-spark writes next (one writer at a time: its S3 log store has no mutual exclusion).
    theirs.run(
        "spark.createDataFrame([(200, 1, 'd')], 'id long, p long, s string').write.format('delta')"
        ".mode('append').save(args['u'])\n"
        "spark.sql(f\"DELETE FROM delta.`{args['u']}` WHERE id = 0\")",
        u=uri,
    )
    after = plain_rows([r for r in expected if r[0] != 0] + [[200, 1, "d"]])
    assert ours.rows(uri, columns=["id", "p", "s"]) == after
    if not dv:  # delta-rs' pyarrow reader refuses deletion vectors
        assert _deltars_rows(server, uri) == after
    # And serialake commits after delta-spark, from the version it wrote.
    ours.run("spark.sql(f\"OPTIMIZE delta.`{args['u']}`\")", u=uri)
    assert theirs.rows(uri, columns=["id", "p", "s"]) == after
    assert [h["operation"] for h in theirs.history(uri)][:3] == ["OPTIMIZE", "DELETE", "WRITE"]
