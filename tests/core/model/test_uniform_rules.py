"""IcebergCompatV2 / UniForm rules enforced by every transaction (``core.model.uniform``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from serialake.core import DeltaLog
from serialake.core.model import features
from serialake.core.model.actions import AddFile, Metadata
from serialake.core.model.uniform import COMPAT_TAG, IcebergCompatError
from serialake.exceptions import UnsupportedFeatureError

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}},
]})  # fmt: skip
UNIFORM = {"delta.universalFormat.enabledFormats": "iceberg"}


def create(path: str, conf: dict[str, str], schema: str = SCHEMA) -> DeltaLog:
    log = DeltaLog(path)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=schema, partition_columns=("p",), configuration=conf))
    txn.commit([], operation="CREATE TABLE")
    return log


def add(name: str, *, tagged: bool) -> AddFile:
    return AddFile(path=name, partition_values={}, size=1, modification_time=0, stats='{"numRecords":1}',
                   tags={COMPAT_TAG: "2"} if tagged else None)  # fmt: skip


def test_a_new_uniform_table_gets_compat_v2_column_mapping_and_the_feature(tmp_path) -> None:
    snap = create(str(tmp_path / "t"), dict(UNIFORM)).update()
    conf = snap.configuration
    assert conf["delta.enableIcebergCompatV2"] == "true" and conf["delta.columnMapping.mode"] == "name"
    assert {"icebergCompatV2", "columnMapping"} <= features.table_features(snap.protocol)
    assert all(f.metadata.get("delta.columnMapping.id") for f in snap.schema.fields)


def test_untagged_files_and_deletion_vectors_are_refused(tmp_path) -> None:
    log = create(str(tmp_path / "t"), dict(UNIFORM))
    with pytest.raises(IcebergCompatError, match="not written for IcebergCompatV2"):
        log.start_transaction().commit([add("a.parquet", tagged=False)], operation="WRITE")
    assert log.update().version == 0
    log.start_transaction().commit([add("b.parquet", tagged=True)], operation="WRITE")
    assert log.update().version == 1


def test_settings_that_break_the_rules_are_refused(tmp_path) -> None:
    with pytest.raises(IcebergCompatError, match="deletion vectors"):
        create(str(tmp_path / "dv"), {**UNIFORM, "delta.enableDeletionVectors": "true"})
    with pytest.raises(UnsupportedFeatureError, match="hudi"):
        create(str(tmp_path / "hudi"), {"delta.universalFormat.enabledFormats": "iceberg,hudi"})
    with pytest.raises(UnsupportedFeatureError, match="IcebergCompatV1"):
        create(str(tmp_path / "v1"), {"delta.enableIcebergCompatV1": "true"})
    void = SCHEMA.replace('"long"', '"void"')
    with pytest.raises(Exception, match="void"):
        create(str(tmp_path / "void"), dict(UNIFORM), schema=void)


def test_existing_table_with_files_needs_the_upgrade(tmp_path) -> None:
    log = create(str(tmp_path / "t"), {})
    log.start_transaction().commit([add("a.parquet", tagged=False)], operation="WRITE")
    snap = log.update()
    txn = log.start_transaction()
    with pytest.raises(IcebergCompatError, match="REORG TABLE .*UPGRADE UNIFORM"):
        txn.update_metadata(replace(snap.metadata, configuration={**snap.metadata.configuration, **UNIFORM}))
    # The upgrade path (REORG) may turn it on, rewriting the files in the same commit.
    txn = log.start_transaction()
    txn.update_metadata(replace(snap.metadata, configuration={**UNIFORM}), upgrade_uniform=True)
    meta = txn.metadata
    assert meta is not None and meta.configuration["delta.columnMapping.mode"] == "name"
    with pytest.raises(IcebergCompatError):  # the untagged file must be replaced in that commit
        txn.commit([add("c.parquet", tagged=False)], operation="REORG")
    txn = log.start_transaction()
    txn.update_metadata(replace(snap.metadata, configuration={**UNIFORM}), upgrade_uniform=True)
    txn.commit([snap.all_files[0].remove(data_change=False), add("d.parquet", tagged=True)], operation="REORG")
    after = log.update()
    assert [f.name for f in after.schema.fields if f.metadata["delta.columnMapping.physicalName"] == f.name] == [
        "id", "p"
    ]  # existing files keep being read by their stored names


def test_replacing_a_partitioned_compat_table_keeps_its_partitioning(tmp_path) -> None:
    log = create(str(tmp_path / "t"), dict(UNIFORM))
    snap = log.update()
    txn = log.start_transaction()
    with pytest.raises(IcebergCompatError, match="partitioned by"):
        txn.update_metadata(replace(snap.metadata, partition_columns=()), replace_table=True)


def test_an_empty_existing_table_becomes_uniform_by_its_properties(tmp_path) -> None:
    log = create(str(tmp_path / "t"), {})
    snap = log.update()
    txn = log.start_transaction()
    txn.update_metadata(replace(snap.metadata, configuration={**UNIFORM}))
    txn.commit([], operation="SET TBLPROPERTIES")
    conf = log.update().configuration
    assert conf["delta.enableIcebergCompatV2"] == "true" and conf["delta.columnMapping.mode"] == "name"


def test_a_process_that_exits_right_after_committing_leaves_its_iceberg_metadata(tmp_path) -> None:
    import subprocess
    import sys

    path = str(tmp_path / "t")
    code = f"""
import json
from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata
log = DeltaLog({path!r})
txn = log.start_transaction()
txn.update_metadata(Metadata(schema_string={SCHEMA!r}, partition_columns=("p",), configuration={UNIFORM!r}))
txn.commit([], operation="CREATE TABLE")
p = log.update().schema.field("p").metadata["delta.columnMapping.physicalName"]
add = AddFile(path="p=a/f.parquet", partition_values={{p: "a"}}, size=1, modification_time=0,
              stats='{{"numRecords":1}}', tags={{"ICEBERG_COMPAT_VERSION": "2"}})
log.start_transaction().commit([add], operation="WRITE")
"""  # exits at once: the conversion of version 1 runs on a background thread
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    from serialake.core import iceberg

    log = DeltaLog(path)
    assert iceberg.read_version_hint(log) == 1
    meta = json.loads(open(iceberg.metadata_path(log.table_path, 1)).read())
    assert meta["properties"]["delta-version"] == "1"


def _uniform_table_with_a_file(path: str) -> DeltaLog:
    log = create(path, dict(UNIFORM))
    p = log.update().schema.field("p").metadata["delta.columnMapping.physicalName"]
    add = AddFile(path="p=a/f.parquet", partition_values={p: "a"}, size=1, modification_time=0,
                  stats='{"numRecords":1}', tags={COMPAT_TAG: "2"})  # fmt: skip
    log.start_transaction().commit([add], operation="WRITE")
    return log


def test_big_tables_are_converted_by_a_child_process(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from serialake.core import iceberg
    from serialake.core.iceberg import converter

    def not_here(*args: object) -> str:
        raise AssertionError("converted in the committing process")

    monkeypatch.setattr(converter, "convert", not_here)  # only a child process can convert now
    monkeypatch.setenv("SERIALAKE_ICEBERG_PROCESS", "always")
    log = _uniform_table_with_a_file(str(tmp_path / "t"))
    assert iceberg.IcebergConverter.wait_all(120)
    conv = iceberg.IcebergConverter.for_table(log)
    assert conv.last_error is None, conv.last_error
    assert conv.metadata_path == iceberg.metadata_path(log.table_path, 1) and os.path.exists(conv.metadata_path)
    # A child's failure is kept (and logged) like any conversion's; the commit stands.
    os.makedirs(os.path.join(log.table_path, "metadata"), exist_ok=True)
    for name in os.listdir(os.path.join(log.table_path, "metadata")):
        os.remove(os.path.join(log.table_path, "metadata", name))
    os.rmdir(os.path.join(log.table_path, "metadata"))
    with open(os.path.join(log.table_path, "metadata"), "w") as f:
        f.write("in the way")
    log.start_transaction().commit([], operation="SET TBLPROPERTIES")
    assert iceberg.IcebergConverter.wait_all(120)
    assert isinstance(conv.last_error, iceberg.IcebergConversionError) and "child process" in str(conv.last_error)
    assert log.update().version == 2
