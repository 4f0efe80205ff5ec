"""Data-file work besides Spark's own reads and writes, on s3:// tables (an S3 server on 127.0.0.1).

The driver's pyarrow paths (DELETE, UPDATE, MERGE, compaction), VACUUM (and DRY RUN),
RESTORE, CLONE (shallow and deep, from and to S3), GENERATE symlink manifests and CONVERT TO
DELTA, all through ``storage.datafiles``. Tables are created by delta-rs (or serialake's
Spark writer for deletion vectors), and results are read back by delta-rs and by serialake's
Spark reader from S3. While the driver paths work, Spark's data path is forbidden
(``data_read.read_files_df`` / ``data_write.write_data_files`` raise), which proves the driver did the work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from serialake.core import DeltaLog
from serialake.exceptions import DeltaAnalysisException
from serialake.storage import s3 as s3store
from serialake.storage.datafiles import Access
from tests.s3server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.s3]

_DRIVER_NAME = re.compile(r"^(?:[^/]+/)*part-[0-9a-f-]{36}\.c000\.snappy\.parquet$")


@pytest.fixture(scope="module")
def server(spark: Any) -> Iterator[S3Server]:
    srv = S3Server().start()
    try:
        yield srv
    finally:
        srv.stop()
        s3store._stores.clear()
        from serialake.spark import isolation

        # The session would keep probing these tables (gone with their server) as recent reads.
        isolation._recent.pop(spark, None)
        isolation._cache.pop(spark, None)


@pytest.fixture
def bucket(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for key, value in server.environment().items():
        monkeypatch.setenv(key, value)
    s3store._stores.clear()  # stores read the environment when made
    yield server.new_bucket()
    s3store._stores.clear()


@pytest.fixture
def options(server: S3Server) -> dict[str, str]:
    """delta-rs's storage options for the server."""
    return {**server.environment(), "conditional_put": "etag"}


@contextmanager
def _spark_data_path_forbidden() -> Iterator[None]:
    """Spark's data path fails inside: what passes was done on the driver."""
    from serialake.spark import data_read, data_write

    def spark_path(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark's data path was used")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(data_read, "read_files_df", spark_path)
        mp.setattr(data_write, "write_data_files", spark_path)
        yield


@pytest.fixture
def driver_only() -> Iterator[None]:
    with _spark_data_path_forbidden():
        yield


def _spark_rows(spark: Any, uri: str) -> list[tuple[Any, ...]]:
    """The table's rows as serialake's Spark reader reads them from S3 (on executors), sorted."""
    import serialake

    return sorted(tuple(r) for r in serialake.read(spark, uri).collect())


@pytest.fixture
def no_retention_check(spark: Any) -> Iterator[None]:
    from serialake.spark.dml import RETENTION_CHECK_CONF

    spark.conf.set(RETENTION_CHECK_CONF, "false")
    yield
    spark.conf.unset(RETENTION_CHECK_CONF)


def _write(uri: str, options: dict[str, str], rows: list[tuple[int, str]], **kw: Any) -> None:
    import deltalake
    import pyarrow as pa

    data = pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "v": pa.array([r[1] for r in rows])})
    deltalake.write_deltalake(uri, data, storage_options=options, mode=kw.pop("mode", "append"), **kw)


def _rows(uri: str, options: dict[str, str], version: int | None = None) -> list[tuple[Any, ...]]:
    """The table's rows as delta-rs reads them from S3, sorted."""
    import deltalake

    dt = deltalake.DeltaTable(uri, storage_options=options, version=version)
    table = dt.to_pyarrow_table()
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _objects(uri: str) -> set[str]:
    """Every object below ``uri`` (relative keys)."""
    return {f.path for f in Access().walk(uri)}


def _data_objects(uri: str) -> set[str]:
    return {p for p in _objects(uri) if not p.startswith("_delta_log/")}


def _live(uri: str) -> set[str]:
    from urllib.parse import unquote

    return {unquote(f.path) for f in DeltaLog.for_table(uri).update().all_files}


# -- driver DML -------------------------------------------------------------------------------


def test_driver_delete_update_merge_on_s3(spark: Any, bucket: str, options: dict[str, str]) -> None:
    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/dml"
    _write(uri, options, [(1, "a"), (2, "b"), (3, "c")])
    _write(uri, options, [(4, "d"), (5, "e")])
    table = DeltaTable.forPath(spark, uri)

    source = spark.createDataFrame([(5, "M"), (9, "N")], "id long, v string")
    with _spark_data_path_forbidden():
        table.delete("id = 2")
        assert _rows(uri, options) == [(1, "a"), (3, "c"), (4, "d"), (5, "e")]
        table.update("id = 4", {"v": "'X'"})
        assert _rows(uri, options) == [(1, "a"), (3, "c"), (4, "X"), (5, "e")]
        (
            table.alias("t").merge(source.alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        )  # fmt: skip
    expected = [(1, "a"), (3, "c"), (4, "X"), (5, "M"), (9, "N")]
    assert _rows(uri, options) == expected
    assert _spark_rows(spark, uri) == expected

    snap = DeltaLog.for_table(uri).update()
    assert snap.version == 4
    # DELETE rewrote file 1 (1, 3), UPDATE file 2 (4, 5), MERGE that one again (4, 5) and wrote its insert (9).
    assert len(snap.all_files) == 3 and all(_DRIVER_NAME.match(f.path) for f in snap.all_files)
    stats = {}
    for f in snap.all_files:
        size, mtime = Access().status(f"{uri}/{f.path}")
        assert f.size == size and f.modification_time == mtime and f.data_change
        s = json.loads(f.stats or "{}")
        assert s["nullCount"] == {"id": 0, "v": 0}
        stats[s["minValues"]["id"]] = (s["numRecords"], s["minValues"], s["maxValues"])
    assert stats == {
        1: (2, {"id": 1, "v": "a"}, {"id": 3, "v": "c"}),
        4: (2, {"id": 4, "v": "M"}, {"id": 5, "v": "X"}),
        9: (1, {"id": 9, "v": "N"}, {"id": 9, "v": "N"}),
    }
    # Nothing was staged: every data object is a file of some version.
    assert not any(p.startswith("_staging") for p in _objects(uri))


def test_driver_delete_in_partitions_on_s3(
    spark: Any, bucket: str, options: dict[str, str], driver_only: None
) -> None:
    import deltalake
    import pyarrow as pa

    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/parted"
    data = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "p": pa.array(["x", "x", "y", "y"])})
    deltalake.write_deltalake(uri, data, storage_options=options, partition_by=["p"])
    DeltaTable.forPath(spark, uri).delete("id IN (1, 3)")
    dt = deltalake.DeltaTable(uri, storage_options=options)
    assert sorted((r["id"], r["p"]) for r in dt.to_pyarrow_table().to_pylist()) == [(2, "x"), (4, "y")]
    paths = sorted(f.path for f in DeltaLog.for_table(uri).update().all_files)
    assert len(paths) == 2 and paths[0].startswith("p=x/part-") and paths[1].startswith("p=y/part-")
    assert all(_DRIVER_NAME.match(p) for p in paths)


def test_driver_compaction_on_s3(spark: Any, bucket: str, options: dict[str, str]) -> None:
    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/compact"
    for i in range(4):
        _write(uri, options, [(i, f"v{i}"), (10 + i, f"w{i}")])
    before = _rows(uri, options)
    assert len(before) == 8
    with _spark_data_path_forbidden():
        metrics = DeltaTable.forPath(spark, uri).optimize().executeCompaction().collect()[0].metrics
    assert metrics.numFilesRemoved == 4 and metrics.numFilesAdded == 1
    assert _rows(uri, options) == before
    assert _spark_rows(spark, uri) == before
    [only] = DeltaLog.for_table(uri).update().all_files
    assert _DRIVER_NAME.match(only.path) and only.num_records == 8 and not only.data_change


def test_deletion_vectors_on_driver_on_s3(spark: Any, bucket: str, no_retention_check: None) -> None:
    """A table written by serialake's Spark writer with deletion vectors: DELETE on the driver
    marks rows in DV objects, the driver's compaction purges them, VACUUM keeps the DV files
    live files use and deletes them once unused."""
    import serialake
    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/dvs"
    df = spark.createDataFrame([(i, f"v{i}") for i in range(6)], "id long, v string").coalesce(1)
    serialake.write(df, uri, properties={"delta.enableDeletionVectors": "true"})
    table = DeltaTable.forPath(spark, uri)
    with _spark_data_path_forbidden():
        table.delete("id IN (1, 4)")
    [add] = DeltaLog.for_table(uri).update().all_files
    assert add.deletion_vector is not None and add.deletion_vector.cardinality == 2
    dv_objects = {p for p in _data_objects(uri) if p.endswith(".bin")}
    assert len(dv_objects) == 1
    expected = [(0, "v0"), (2, "v2"), (3, "v3"), (5, "v5")]
    assert _spark_rows(spark, uri) == expected
    assert table.vacuum(0).collect() == []  # the file and its DV are live
    assert dv_objects <= _data_objects(uri)

    with _spark_data_path_forbidden():
        metrics = table.optimize().executeCompaction().collect()[0].metrics
    assert metrics.numFilesRemoved == 1 and metrics.numFilesAdded == 1
    [purged] = DeltaLog.for_table(uri).update().all_files
    assert purged.deletion_vector is None and purged.num_records == 4 and _DRIVER_NAME.match(purged.path)
    assert _spark_rows(spark, uri) == expected
    deleted = {r.path for r in table.vacuum(0).collect()}
    assert deleted == {f"{uri}/{add.path}", *(f"{uri}/{p}" for p in dv_objects)}
    assert _data_objects(uri) == {purged.path}
    assert _spark_rows(spark, uri) == expected


def test_driver_rewrite_failure_leaves_no_object(spark: Any, bucket: str, options: dict[str, str]) -> None:
    """A failure after some files were written deletes them (``discard`` on S3)."""
    from serialake.spark.dml.driver_files import DriverTable, rewrite_files

    uri = f"s3://{bucket}/fail"
    _write(uri, options, [(1, "a"), (2, "b")])
    before = _objects(uri)
    snap = DeltaLog.for_table(uri).update()
    table = DriverTable.open(snap)
    [add] = snap.all_files
    wrote: list[Any] = []

    def extra(write: Any) -> None:
        rows, _ = table.read(add)
        wrote.append(write(rows, "", {}))
        new = _objects(uri) - before  # the job's rewrite and this file were written
        assert len(new) == 2 and wrote[0].path in new and all(_DRIVER_NAME.match(p) for p in new)
        raise RuntimeError("failing after a write")

    with pytest.raises(RuntimeError, match="failing after a write"):
        rewrite_files(table, [(add, None)], lambda rows, positions, a, job: rows, extra=extra)
    assert len(wrote) == 1 and _objects(uri) == before


def test_failed_commit_deletes_the_driver_files_on_s3(spark: Any, bucket: str, options: dict[str, str]) -> None:
    """A DELETE whose commit loses to a conflicting DELETE of the same file leaves no object behind."""
    from serialake.exceptions import DeltaConcurrentModificationException
    from serialake.spark import dml

    uri = f"s3://{bucket}/conflict"
    _write(uri, options, [(1, "a"), (2, "b"), (3, "c")])
    seen: list[set[str]] = []

    def other() -> None:
        seen.append(_data_objects(uri))  # ours are written by now
        dml.run_delete(spark, uri, "id = 3")

    with _spark_data_path_forbidden(), pytest.raises(DeltaConcurrentModificationException):
        dml.run_delete(spark, uri, "id = 1", before_commit=other)
    [before_commit] = seen
    assert len(before_commit) == 2  # the original file and our rewrite of it
    # Left: the original and the other DELETE's rewrite; ours is gone.
    assert _data_objects(uri) == _live(uri) | (before_commit - {p for p in before_commit if _DRIVER_NAME.match(p)})
    assert len(_data_objects(uri)) == 2
    assert _rows(uri, options) == [(1, "a"), (2, "b")]


def test_row_reader_and_footers_on_s3(bucket: str) -> None:
    """Conflict checks and the driver read S3 objects; a footer larger than the first range read."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from serialake.core.model.paths import absolute_path, parquet_metadata

    uri = f"s3://{bucket}/wide/part-0.parquet"
    wide = pa.table({f"c{i:04d}": pa.array([i, i + 1], pa.int64()) for i in range(1500)})
    buf = io.BytesIO()
    pq.write_table(wide, buf)
    Access().put_new(uri, buf.getvalue())
    footer = parquet_metadata(uri)
    assert footer.num_rows == 2 and footer.num_columns == 1500 and footer.serialized_size > 64 << 10
    assert footer.row_group(0).column(1499).statistics.max == 1500
    assert parquet_metadata(uri, len(buf.getvalue())).num_columns == 1500
    assert absolute_path(f"s3://{bucket}/wide", "part-0.parquet") == uri
    with pytest.raises(FileNotFoundError):
        parquet_metadata(f"s3://{bucket}/wide/missing.parquet")


# -- VACUUM -----------------------------------------------------------------------------------


def test_vacuum_on_s3(
    spark: Any, bucket: str, options: dict[str, str], no_retention_check: None
) -> None:
    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/vac"
    _write(uri, options, [(1, "a"), (2, "b")])
    _write(uri, options, [(3, "c")])
    table = DeltaTable.forPath(spark, uri)
    with _spark_data_path_forbidden():
        table.delete("id = 1")  # rewrites the first file: its old version is a tombstone
    live = _live(uri)
    files = Access()
    for name in ("p=9/orphan.parquet", "_tmp/hidden.parquet", ".hidden", "sub/_x/deep.parquet"):
        files.put_new(f"{uri}/{name}", b"x")
    gone = _data_objects(uri) - live - {"_tmp/hidden.parquet", ".hidden", "sub/_x/deep.parquet"}
    assert len(gone) == 2  # the tombstoned file and the orphan

    # Default retention (7 days): everything is younger, nothing goes.
    assert table.vacuum().collect() == []
    # DRY RUN lists the files, deletes nothing.
    listed = sorted(r.path for r in table.vacuum(0, dryRun=True).collect())
    assert listed == sorted(f"{uri}/{p}" for p in gone)
    assert gone <= _data_objects(uri)
    deleted = sorted(r.path for r in table.vacuum(0).collect())
    assert deleted == listed
    assert _data_objects(uri) == live | {"_tmp/hidden.parquet", ".hidden", "sub/_x/deep.parquet"}
    assert _rows(uri, options) == [(2, "b"), (3, "c")] == _spark_rows(spark, uri)
    history = [r.operation for r in table.history().collect()]
    assert history[:2] == ["VACUUM END", "VACUUM START"]


def test_vacuum_keeps_a_shallow_clones_source(
    spark: Any, bucket: str, options: dict[str, str], no_retention_check: None
) -> None:
    """VACUUM of a shallow clone on S3 never deletes the source's objects it lists."""
    from serialake.spark.table import DeltaTable

    source = f"s3://{bucket}/src"
    _write(source, options, [(1, "a")])
    clone = f"s3://{bucket}/src-clone"
    DeltaTable.forPath(spark, source).clone(clone, isShallow=True)
    assert DeltaTable.forPath(spark, clone).vacuum(0).collect() == []
    assert _rows(source, options) == [(1, "a")] and len(_data_objects(source)) == 1


# -- RESTORE ----------------------------------------------------------------------------------


def test_restore_on_s3(
    spark: Any, bucket: str, options: dict[str, str], no_retention_check: None
) -> None:
    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/restore"
    _write(uri, options, [(1, "a"), (2, "b")])
    table = DeltaTable.forPath(spark, uri)
    with _spark_data_path_forbidden():
        table.delete("id = 1")  # version 1
    _write(uri, options, [(3, "c")])  # version 2
    metrics = table.restoreToVersion(0).collect()[0]
    assert (metrics.num_restored_files, metrics.num_removed_files) == (1, 2)
    assert _rows(uri, options) == [(1, "a"), (2, "b")]
    # Files of version 1 are gone after VACUUM: restoring to it is refused, naming them.
    table.vacuum(0)
    with pytest.raises(DeltaAnalysisException, match="were deleted"):
        table.restoreToVersion(1)
    assert _rows(uri, options) == [(1, "a"), (2, "b")] == _spark_rows(spark, uri)


# -- CLONE ------------------------------------------------------------------------------------


def test_deep_clone_s3_to_s3_and_to_local(
    spark: Any, bucket: str, options: dict[str, str], tmp_path: Path
) -> None:
    from serialake.spark.table import DeltaTable

    source = f"s3://{bucket}/deep-src"
    _write(source, options, [(1, "a"), (2, "b")])
    _write(source, options, [(3, "c")])
    table = DeltaTable.forPath(spark, source)

    target = f"s3://{bucket}/deep-dst"
    table.clone(target, isShallow=False)
    assert _rows(target, options) == [(1, "a"), (2, "b"), (3, "c")] == _spark_rows(spark, target)
    copied = DeltaLog.for_table(target).update().all_files
    assert len(copied) == 2 and all("://" not in f.path for f in copied)
    assert _data_objects(target) == {f.path for f in copied}

    local = str(tmp_path / "deep-local")
    table.clone(local, isShallow=False)
    import deltalake

    rows = deltalake.DeltaTable(local).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [(1, "a"), (2, "b"), (3, "c")]
    assert sorted(p.name for p in Path(local).iterdir() if p.suffix == ".parquet") == sorted(
        f.path for f in DeltaLog.for_table(local).update().all_files
    )

    # ... and back from the local clone to S3.
    back = f"s3://{bucket}/deep-back"
    DeltaTable.forPath(spark, local).clone(back, isShallow=False)
    assert _rows(back, options) == [(1, "a"), (2, "b"), (3, "c")] == _spark_rows(spark, back)
    assert len(_data_objects(back)) == 2


def test_shallow_clone_of_s3_keeps_s3_uris(
    spark: Any, bucket: str, options: dict[str, str], tmp_path: Path
) -> None:
    from serialake.spark.table import DeltaTable

    source = f"s3://{bucket}/shallow src"
    _write(source, options, [(1, "a"), (2, "b")])
    target = f"s3://{bucket}/shallow-dst"
    DeltaTable.forPath(spark, source).clone(target, isShallow=True)
    [add] = DeltaLog.for_table(target).update().all_files
    [name] = _data_objects(source)
    assert add.path == f"s3://{bucket}/shallow%20src/{name}"
    assert _data_objects(target) == set()
    # (delta-rs 1.6 reads an absolute add path of an S3 table as relative: read it here.)
    from serialake.spark.dml.driver_files import DriverTable

    snap = DeltaLog.for_table(target).update()
    assert DriverTable.open(snap).read(add)[0].to_pylist() == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]

    local = str(tmp_path / "shallow-local")
    DeltaTable.forPath(spark, source).clone(local, isShallow=True)
    [add] = DeltaLog.for_table(local).update().all_files
    assert add.path == f"s3://{bucket}/shallow%20src/{name}"


# -- GENERATE ---------------------------------------------------------------------------------


def test_generate_manifests_on_s3(spark: Any, bucket: str, options: dict[str, str], driver_only: None) -> None:
    import deltalake
    import pyarrow as pa

    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/manifests"
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": pa.array(["x", "y", "y"])})
    deltalake.write_deltalake(uri, data, storage_options=options, partition_by=["p"])
    table = DeltaTable.forPath(spark, uri)
    table.generate("symlink_format_manifest")
    files = Access()
    manifests = {p for p in _objects(uri) if p.startswith("_symlink_format_manifest/")}
    assert manifests == {"_symlink_format_manifest/p=x/manifest", "_symlink_format_manifest/p=y/manifest"}
    for part in ("x", "y"):
        listed = files.read_bytes(f"{uri}/_symlink_format_manifest/p={part}/manifest").decode().splitlines()
        expected = sorted(f"{uri}/{p}" for p in _live(uri) if p.startswith(f"p={part}/"))
        assert listed == expected and len(listed) == 1

    table.delete("p = 'x'")  # the whole partition goes: its manifest is stale
    table.generate("symlink_format_manifest")
    manifests = {p for p in _objects(uri) if p.startswith("_symlink_format_manifest/")}
    assert manifests == {"_symlink_format_manifest/p=y/manifest"}


# -- CONVERT TO DELTA -------------------------------------------------------------------------


def _put_parquet(uri: str, table: Any) -> None:
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf)
    Access().put_new(uri, buf.getvalue())


def test_convert_to_delta_on_s3(spark: Any, bucket: str, options: dict[str, str]) -> None:
    import pyarrow as pa

    from serialake.spark.table import DeltaTable

    uri = f"s3://{bucket}/parquet-dir"
    _put_parquet(f"{uri}/year=2024/a.parquet", pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["a", "b"]}))
    _put_parquet(f"{uri}/year=2025/b.parquet", pa.table({"id": pa.array([3], pa.int64()), "x": pa.array([1.5])}))
    Access().put_new(f"{uri}/_SUCCESS", b"")
    Access().put_new(f"{uri}/year=2025/.b.parquet.crc", b"crc")

    DeltaTable.convertToDelta(spark, f"parquet.`{uri}`", "year INT")
    snap = DeltaLog.for_table(uri).update()
    assert snap.version == 0 and snap.partition_columns == ("year",)
    assert [(f.name, f.data_type.to_json_value()) for f in snap.schema.fields] == [
        ("id", "long"), ("s", "string"), ("x", "double"), ("year", "integer"),
    ]  # fmt: skip
    adds = sorted(snap.all_files, key=lambda f: f.path)
    assert [f.path for f in adds] == ["year=2024/a.parquet", "year=2025/b.parquet"]
    assert [f.partition_values for f in adds] == [{"year": "2024"}, {"year": "2025"}]
    assert [f.size for f in adds] == [Access().status(f"{uri}/{f.path}")[0] for f in adds]
    assert json.loads(adds[0].stats or "{}")["maxValues"] == {"id": 2, "s": "b"}
    import deltalake

    rows = deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()
    expected = [(1, "a", None, 2024), (2, "b", None, 2024), (3, None, 1.5, 2025)]
    assert sorted((r["id"], r["s"], r["x"], r["year"]) for r in rows) == expected
    assert _spark_rows(spark, uri) == expected


def test_convert_refuses_clashing_types_on_s3(spark: Any, bucket: str) -> None:
    import pyarrow as pa

    from serialake.spark.dml.convert_command import convert_to_delta

    uri = f"s3://{bucket}/clash"
    _put_parquet(f"{uri}/a.parquet", pa.table({"id": pa.array([1], pa.int64())}))
    _put_parquet(f"{uri}/b.parquet", pa.table({"id": pa.array(["x"])}))
    with pytest.raises(DeltaAnalysisException, match="cannot be merged"):
        convert_to_delta(spark, uri)
    assert not DeltaLog.for_table(uri).table_exists()
    with pytest.raises(DeltaAnalysisException, match="no Parquet data files"):
        convert_to_delta(spark, f"s3://{bucket}/empty")


def test_convert_schema_from_footers_on_s3(spark: Any, bucket: str) -> None:
    """Spark's own schema in a footer wins over the Parquet types; INT96 is a timestamp, as Spark reads it."""
    import datetime as dt
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from serialake.spark.dml.convert_command import convert_to_delta

    uri = f"s3://{bucket}/footers"
    spark_schema = {"type": "struct", "fields": [{"name": "c", "type": "short", "nullable": False, "metadata": {}}]}
    shorts = pa.table({"c": pa.array([1, 2], pa.int32())}).replace_schema_metadata(
        {"org.apache.spark.sql.parquet.row.metadata": json.dumps(spark_schema)}
    )
    _put_parquet(f"{uri}/a.parquet", shorts)
    buf = io.BytesIO()
    stamps = pa.table({"t": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("us"))})
    pq.write_table(stamps, buf, use_deprecated_int96_timestamps=True)
    Access().put_new(f"{uri}/b.parquet", buf.getvalue())
    ntz = pa.table({"n": pa.array([dt.datetime(2024, 1, 2)], pa.timestamp("us"))})
    _put_parquet(f"{uri}/c.parquet", ntz)

    convert_to_delta(spark, uri)
    snap = DeltaLog.for_table(uri).update()
    assert [(f.name, f.data_type.to_json_value(), f.nullable) for f in snap.schema.fields] == [
        ("c", "short", True), ("t", "timestamp", True), ("n", "timestamp_ntz", True),
    ]  # fmt: skip
    assert len(snap.all_files) == 3
