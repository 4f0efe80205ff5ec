"""Table paths with a URI scheme serialake does not serve are refused before they become local
directories; an ``s3a://`` table is written and read on S3, never as a local ``s3a:`` directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import serialake
from serialake.cli import main as cli_main
from serialake.core import DeltaLog
from serialake.exceptions import DeltaError, DeltaIllegalArgumentException

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REMOTE = ["abfss://c@acct.dfs.core.windows.net/t", "gs://b/t", "hdfs:/t", "gs://bucket/dir/t"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory (a relative 's3a:' directory would show up here) with a private catalog."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERIALAKE_CATALOG", str(tmp_path / "catalog.json"))
    return tmp_path


def _refused(call: Callable[[], Any], path: str, tmp_path: Path) -> None:
    with pytest.raises(DeltaIllegalArgumentException) as info:
        call()
    assert isinstance(info.value, DeltaError)
    message = str(info.value)
    assert path in message and "not supported yet" in message, message
    assert list(tmp_path.iterdir()) == [], "a local directory was created for a URI"


@pytest.mark.parametrize("path", REMOTE)
def test_core_log_refuses_other_schemes(path: str, in_tmp: Path) -> None:
    _refused(lambda: DeltaLog.for_table(path), path, in_tmp)


def test_cli_refuses_other_schemes(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["history", "gs://bucket/t"]) == 1
    err = capsys.readouterr().err
    assert "gs://bucket/t" in err and "not supported yet" in err
    assert not (in_tmp / "gs:").exists()


@pytest.mark.spark
@pytest.mark.parametrize("path", REMOTE[1:])
def test_write_refuses_other_schemes(spark: SparkSession, path: str, in_tmp: Path) -> None:
    df = spark.range(3)
    _refused(lambda: serialake.write(df, path), path, in_tmp)
    _refused(lambda: serialake.write(df, path, mode="overwrite"), path, in_tmp)


@pytest.mark.spark
def test_read_table_api_and_sql_refuse_other_schemes(spark: SparkSession, in_tmp: Path) -> None:
    from serialake.spark.table import DeltaTable

    path = "gs://bucket/t"
    _refused(lambda: serialake.read(spark, path), path, in_tmp)
    _refused(lambda: DeltaTable.forPath(spark, path), path, in_tmp)
    _refused(lambda: DeltaTable.isDeltaTable(spark, path), path, in_tmp)
    _refused(lambda: serialake.sql(spark, f"SELECT * FROM delta.`{path}`"), path, in_tmp)
    _refused(lambda: serialake.sql(spark, f"INSERT INTO delta.`{path}` VALUES (1)"), path, in_tmp)


@pytest.mark.spark
def test_file_uris_and_plain_paths_still_work(spark: SparkSession, in_tmp: Path) -> None:
    table = in_tmp / "t"
    assert serialake.write(spark.range(3), f"file://{table}") == 0
    assert serialake.write(spark.range(3, 5), f"file:{table}", mode="append") == 1
    assert serialake.write(spark.range(5, 6), "t", mode="append") == 2  # relative plain path
    assert sorted(r.id for r in serialake.read(spark, str(table)).collect()) == list(range(6))
    assert DeltaLog.for_table(f"FILE://{table}").table_path == str(table)


@pytest.mark.spark
@pytest.mark.s3
def test_s3a_table_never_becomes_a_local_directory(
    spark: SparkSession, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``s3a://`` table's log and data go to S3 (delta-rs reads them there), and no local
    directory appears (the bug this file guards against: an 's3a:' directory)."""
    import deltalake

    from serialake.storage import s3 as s3store
    from tests.s3server import S3Server

    server = S3Server().start()
    try:
        for key, value in server.environment().items():
            monkeypatch.setenv(key, value)
        s3store._stores.clear()
        uri = f"s3a://{server.new_bucket()}/t"
        serialake.write(spark.range(3), uri)
        assert DeltaLog.for_table(uri).update().num_files >= 1  # the log is read from S3
        assert sorted(r.id for r in serialake.read(spark, uri).collect()) == [0, 1, 2]
        options = dict(server.environment())
        assert sorted(deltalake.DeltaTable(uri.replace("s3a://", "s3://"), storage_options=options)
                      .to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2]  # fmt: skip
        assert list(in_tmp.iterdir()) == []
    finally:
        server.stop()
        s3store._stores.clear()
        from serialake.spark import isolation

        # The session would keep probing this table (gone with its server) as a recent read.
        isolation._recent.pop(spark, None)
        isolation._cache.pop(spark, None)
