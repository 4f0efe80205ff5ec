"""Invalid tables are refused when they are loaded, and nothing is written on top of them."""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serialake.core import DeltaLog
from serialake.core.log.logfiles import checkpoint_name, commit_name
from serialake.core.model.actions import AddFile, Metadata, RemoveFile
from serialake.core.model.validate import escapes_table, is_absolute_path
from serialake.exceptions import DeltaError, InvalidTableError

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "grp", "type": "long", "nullable": True, "metadata": {}},
    ],
}


def _add(path: str = "grp=1/a.parquet", grp: str | None = "1", **over: Any) -> dict[str, Any]:
    body = {"path": path, "partitionValues": {"grp": grp}, "size": 10, "modificationTime": 1, "dataChange": True}
    body.update(over)
    return {"add": {k: v for k, v in body.items() if v is not _DROP}}


_DROP = object()


def _meta(schema: Any = SCHEMA, partition_columns: list[str] | None = None, **over: Any) -> dict[str, Any]:
    body = {
        "id": "tid",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema if isinstance(schema, str) else json.dumps(schema),
        "partitionColumns": ["grp"] if partition_columns is None else partition_columns,
        "configuration": {},
        "createdTime": 1,
    }
    body.update(over)
    return {"metaData": {k: v for k, v in body.items() if v is not _DROP}}


def _table(tmp_path: Any) -> DeltaLog:
    """A valid table at version 0: long columns id and grp, partitioned by grp, one file."""
    log = DeltaLog(str(tmp_path / "t"))
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(SCHEMA), partition_columns=("grp",)))
    txn.commit([AddFile(path="grp=1/a.parquet", partition_values={"grp": "1"}, size=10, modification_time=1)])
    return log


def _write_commit(log: DeltaLog, version: int, lines: list[dict[str, Any]]) -> None:
    """A commit written by another (non-conforming) tool."""
    body = "\n".join(json.dumps(line) for line in [{"commitInfo": {"operation": "WRITE"}}, *lines]) + "\n"
    with open(log.commit_path(version), "w") as f:
        f.write(body)


def _commits(log: DeltaLog) -> list[str]:
    return sorted(n for n in os.listdir(log.log_path) if n.endswith(".json"))


def _assert_refused(log: DeltaLog, version: int, field: str, *, refresh: bool = True) -> InvalidTableError:
    """The table does not load (fresh or refreshed), and a blind append writes nothing."""
    before = _commits(log)
    with pytest.raises(InvalidTableError) as info:
        DeltaLog(log.table_path).update()
    e = info.value
    assert (e.table, e.version, e.field) == (log.table_path, version, field)
    assert log.table_path in str(e) and f"version {version}" in str(e) and field in str(e)
    assert commit_name(version) in str(e) or ".checkpoint." in str(e)
    assert "\nHelp: " in str(e)
    if refresh:
        with pytest.raises(InvalidTableError):
            log.update()  # incremental refresh of the cached snapshot
    with pytest.raises(InvalidTableError):  # a blind append never commits on top
        DeltaLog(log.table_path).start_transaction().commit(
            [AddFile(path="grp=2/b.parquet", partition_values={"grp": "2"}, size=1, modification_time=1)]
        )
    assert _commits(log) == before
    return e


# -- the cases of the issue -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (_add(path=_DROP), "add.path"),
        (_add(size="12"), "add.size"),
        (_add(grp="abc"), "add.partitionValues.grp"),
        (_meta(schema="{not json"), "metaData.schemaString"),
        (_meta(schema={"type": "struct", "fields": [{"name": "id", "type": "hugeint", "nullable": True,
                                                      "metadata": {}}]}, partition_columns=[]),
         "metaData.schemaString"),
        (_meta(partition_columns=["nope"]), "metaData.partitionColumns"),
        (_add(path="../x.parquet"), "add.path"),
    ],
    ids=["add-without-path", "size-string", "partition-value", "schema-not-json", "unknown-type",
         "partition-column-missing", "path-escapes"],
)
def test_issue_cases_are_refused(tmp_path: Any, line: dict[str, Any], field: str) -> None:
    log = _table(tmp_path)
    _write_commit(log, 1, [line])
    e = _assert_refused(log, 1, field)
    # The version before the invalid commit still reads (time travel).
    assert DeltaLog(log.table_path).snapshot(version=0).num_files == 1
    assert pickle.loads(pickle.dumps(e)).field == field


def test_message_names_table_version_file_line_and_field(tmp_path: Any) -> None:
    log = _table(tmp_path)
    _write_commit(log, 1, [_add(path="grp=1/b.parquet"), _add(size="12")])
    with pytest.raises(InvalidTableError) as info:
        DeltaLog(log.table_path).update()
    first = str(info.value).splitlines()[0]
    assert first == (
        f"Table {log.table_path} is invalid at version 1 (_delta_log/00000000000000000001.json, line 3): "
        "add.size: must be an integer, got '12' (a string)."
    )
    assert isinstance(info.value, DeltaError) and info.value.line == 3


def test_partition_value_message_names_the_commit_and_data_file(tmp_path: Any) -> None:
    log = _table(tmp_path)
    _write_commit(log, 1, [_add(path="grp=abc/b.parquet", grp="abc")])
    with pytest.raises(InvalidTableError) as info:
        DeltaLog(log.table_path).update()
    e = info.value
    assert (e.version, e.file, e.data_file) == (1, "_delta_log/00000000000000000001.json", "grp=abc/b.parquet")
    assert "partition value 'abc' of column 'grp' is not a valid long" in str(e)


# -- the general rule: every action's fields, as parsed -----------------------------------------


def _dv(**over: Any) -> dict[str, Any]:
    return {"storageType": "u", "pathOrInlineDv": "ab" + "x" * 20, "offset": 1, "sizeInBytes": 10,
            "cardinality": 2, **over}


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (_add(size=True), "add.size"),
        (_add(size=-1), "add.size"),
        (_add(modificationTime=_DROP), "add.modificationTime"),
        (_add(dataChange="true"), "add.dataChange"),
        (_add(partitionValues=_DROP), "add.partitionValues"),
        (_add(partitionValues={"grp": 1}), "add.partitionValues.grp"),
        (_add(path=""), "add.path"),
        (_add(path=7), "add.path"),
        (_add(stats={"numRecords": 1}), "add.stats"),
        (_add(tags={"a": 1}), "add.tags.a"),
        (_add(baseRowId="1"), "add.baseRowId"),
        (_add(deletionVector=_dv(storageType="z")), "add.deletionVector.storageType"),
        (_add(deletionVector=_dv(cardinality="2")), "add.deletionVector.cardinality"),
        (_add(deletionVector=_dv(pathOrInlineDv="short")), "add.deletionVector.pathOrInlineDv"),
        (_add(deletionVector=_dv(pathOrInlineDv="../" + "x" * 20)), "add.deletionVector.pathOrInlineDv"),
        (_add(path="%2E%2E/x.parquet"), "add.path"),
        (_add(path="a/../../x.parquet"), "add.path"),
        (_add(path="c:x/../../y.parquet"), "add.path"),
        ({"add": "grp=1/x.parquet"}, "add"),
        ({"remove": {"path": "grp=1/a.parquet"}}, "remove.dataChange"),
        ({"remove": {"path": "../a.parquet", "dataChange": True}}, "remove.path"),
        ({"remove": {"path": "grp=1/a.parquet", "dataChange": True, "deletionTimestamp": "1"}},
         "remove.deletionTimestamp"),
        ({"cdc": {"path": "_change_data/x.parquet", "partitionValues": {}, "dataChange": False}}, "cdc.size"),
        ({"txn": {"appId": "app", "version": "1"}}, "txn.version"),
        ({"txn": {"version": 1}}, "txn.appId"),
        ({"protocol": {"minReaderVersion": True, "minWriterVersion": 2}}, "protocol.minReaderVersion"),
        ({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2, "writerFeatures": "x"}},
         "protocol.writerFeatures"),
        ({"domainMetadata": {"domain": "d", "configuration": "{}", "removed": "no"}}, "domainMetadata.removed"),
        ({"commitInfo": {"inCommitTimestamp": "5"}}, "commitInfo.inCommitTimestamp"),
        (_meta(id=_DROP), "metaData.id"),
        (_meta(configuration={"a": 1}), "metaData.configuration.a"),
        (_meta(partitionColumns="grp"), "metaData.partitionColumns"),
        (_meta(schema={"type": "struct", "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "ID", "type": "long", "nullable": True, "metadata": {}}]}, partition_columns=[]),
         "metaData.schemaString"),
        (_meta(schema={"type": "struct", "fields": [
            {"name": "d", "type": "decimal(40,2)", "nullable": True, "metadata": {}}]}, partition_columns=[]),
         "metaData.schemaString"),
        (_meta(schema={"type": "struct", "fields": [
            {"name": "a", "type": {"type": "array", "elementType": {"type": "map", "keyType": "string",
             "valueType": {"type": "struct", "fields": [{"name": "x", "type": "hugeint", "nullable": True,
                                                         "metadata": {}}]}, "valueContainsNull": True},
             "containsNull": True}, "nullable": True, "metadata": {}}]}, partition_columns=[]),
         "metaData.schemaString"),
        (_meta(schema={"type": "struct", "fields": [
            {"name": "s", "type": {"type": "struct", "fields": []}, "nullable": True, "metadata": {}}]},
            partition_columns=["s"]), "metaData.partitionColumns"),
        (_meta(schema='["not", "a", "struct"]', partition_columns=[]), "metaData.schemaString"),
    ],
)
def test_every_action_field_is_checked(tmp_path: Any, line: dict[str, Any], field: str) -> None:
    log = _table(tmp_path)
    _write_commit(log, 1, [line])
    with pytest.raises(InvalidTableError) as info:
        DeltaLog(log.table_path).update()
    assert info.value.field == field, str(info.value)
    assert info.value.version == 1


@pytest.mark.parametrize(
    "lines",
    [
        [_add(path="grp=1/../grp=1/b.parquet")],  # '..' that stays inside the table
        [_add(path="/elsewhere/abs.parquet")],  # absolute paths are allowed
        [_add(path="file:///elsewhere/abs.parquet"), _add(path="s3://bucket/x.parquet")],  # absolute URIs too
        [_add(path="grp=%2E/b..parquet")],
        [_add(grp=None), _add(path="grp=/e.parquet", grp=""), _add(path="x", grp=" 7 ")],
        [_add(deletionVector={"storageType": "i",
                              "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                              "sizeInBytes": 40, "cardinality": 6})],
        [_add(unknownField={"future": 1}), {"futureAction": {"x": 1}}],
        [{"commitInfo": {"anything": [1, {"goes": None}]}}],
    ],
)
def test_valid_logs_load(tmp_path: Any, lines: list[dict[str, Any]]) -> None:
    log = _table(tmp_path)
    _write_commit(log, 1, lines)
    assert DeltaLog(log.table_path).update().version == 1
    assert log.update().version == 1


@pytest.mark.parametrize(
    ("type_name", "good", "bad"),
    [
        ("integer", ["1", "-2147483648", "+5"], ["2147483648", "1.5", "1_0", "x"]),
        ("byte", ["127"], ["128"]),
        ("double", ["1.5", "NaN", "-Infinity", "1E10"], ["one"]),
        ("boolean", ["true", "FALSE"], ["yes"]),
        ("date", ["2024-01-31", "2024-01-31 00:00:00"], ["2024-02-30", "31/01/2024"]),
        ("timestamp", ["2024-01-31 10:00:00", "2024-01-31 10:00:00.123456", "2024-01-31T10:00:00.123456Z",
                       "2024-01-31T10:00:00+02:00"], ["2024-01-31 25:00:00"]),
        ("timestamp_ntz", ["2024-01-31 10:00:00"], ["noon"]),
        ("decimal(5,2)", ["123.45", "-0.5", "0", "1.234"], ["1234.5", "NaN", "x"]),
        ("string", ["anything", "../x"], []),
    ],
)
def test_partition_values_parse_as_their_type(tmp_path: Any, type_name: str, good: list[str], bad: list[str]) -> None:
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "p", "type": type_name, "nullable": True, "metadata": {}}]}
    for i, value in enumerate([*good, *bad]):
        log = DeltaLog(str(tmp_path / f"t{i}"))
        os.makedirs(log.log_path)
        _write_commit(log, 0, [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                               _meta(schema=schema, partition_columns=["p"]),
                               {"add": {"path": f"f{i}", "partitionValues": {"p": value}, "size": 1,
                                        "modificationTime": 1, "dataChange": True}}])
        if value in good:
            assert DeltaLog(log.table_path).update().num_files == 1, value
        else:
            with pytest.raises(InvalidTableError, match="add.partitionValues.p"):
                DeltaLog(log.table_path).update()


def test_partition_values_of_column_mapped_tables_use_physical_names(tmp_path: Any) -> None:
    schema = {"type": "struct", "fields": [
        {"name": "p", "type": "integer", "nullable": True,
         "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-abc"}}]}
    log = DeltaLog(str(tmp_path / "t"))
    os.makedirs(log.log_path)
    meta = _meta(schema=schema, partition_columns=["p"], configuration={"delta.columnMapping.mode": "name"})
    _write_commit(log, 0, [{"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}, meta,
                           {"add": {"path": "a", "partitionValues": {"col-abc": "5"}, "size": 1,
                                    "modificationTime": 1, "dataChange": True}}])
    assert DeltaLog(log.table_path).update().num_files == 1
    _write_commit(log, 1, [{"add": {"path": "b", "partitionValues": {"col-abc": "five"}, "size": 1,
                                    "modificationTime": 1, "dataChange": True}}])
    with pytest.raises(InvalidTableError, match="add.partitionValues.col-abc"):
        DeltaLog(log.table_path).update()


def test_replaced_partitioning_checks_old_values_against_old_schema(tmp_path: Any) -> None:
    """CREATE OR REPLACE from a string to a long partition column: the old values were valid strings."""
    string_schema = {"type": "struct", "fields": [{"name": "grp", "type": "string", "nullable": True, "metadata": {}}]}
    log = DeltaLog(str(tmp_path / "t"))
    os.makedirs(log.log_path)
    _write_commit(log, 0, [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                           _meta(schema=string_schema), _add(path="grp=abc/a.parquet", grp="abc")])
    # The replacement lists the new file before its metaData: still checked against the new schema.
    _write_commit(log, 1, [_add(path="grp=5/b.parquet", grp="5"), _meta(),
                           {"remove": {"path": "grp=abc/a.parquet", "dataChange": True}}])
    assert DeltaLog(log.table_path).update().num_files == 1
    DeltaLog(log.table_path).checkpoint(0)
    assert DeltaLog(log.table_path).update().num_files == 1
    snap0 = DeltaLog(log.table_path).snapshot(version=0)
    assert log.update().version == 1 and snap0.num_files == 1


def test_transaction_pinned_before_an_invalid_commit_writes_nothing(tmp_path: Any) -> None:
    log = _table(tmp_path)
    txn = log.start_transaction()
    _write_commit(log, 1, [_add(size="12")])  # lands after the transaction started
    with pytest.raises(InvalidTableError, match="add.size"):
        txn.commit([AddFile(path="grp=2/b.parquet", partition_values={"grp": "2"}, size=1, modification_time=1)])
    assert _commits(log) == [commit_name(0), commit_name(1)]


# -- checkpoints --------------------------------------------------------------------------------


def _checkpointed(tmp_path: Any) -> tuple[DeltaLog, str]:
    log = _table(tmp_path)
    log.start_transaction().commit([AddFile(path="grp=2/b.parquet", partition_values={"grp": "2"}, size=3,
                                            modification_time=1),
                                    RemoveFile(path="grp=1/a.parquet", deletion_timestamp=2**60)])
    log.checkpoint(1)
    DeltaLog.clear_cache()
    return log, os.path.join(log.log_path, checkpoint_name(1))


def _rewrite_add_column(path: str, change: Any) -> None:
    table = pq.read_table(path)
    i = table.schema.get_field_index("add")
    rows = table.column("add").to_pylist()
    new = change(rows, table.schema.field("add").type)
    pq.write_table(table.set_column(i, "add", new), path)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda rows, t: pa.array([None if r is None else {**r, "path": "../x.parquet"} for r in rows], t),
         "add.path"),
        (lambda rows, t: pa.array([None if r is None else {**r, "partitionValues": [("grp", "abc")]} for r in rows],
                                  t), "add.partitionValues.grp"),
        (lambda rows, t: pa.array([None if r is None else {**r, "size": None} for r in rows], t), "add.size"),
        (lambda rows, t: pa.array([None if r is None else {**r, "path": None} for r in rows], t), "add.path"),
        (lambda rows, t: pa.array(
            [None if r is None else {**r, "size": str(r["size"])} for r in rows],
            pa.struct([(f.name, pa.string()) if f.name == "size" else f for f in t])), "add.size"),
    ],
    ids=["path-escapes", "partition-value", "size-null", "path-null", "size-string-column"],
)
def test_checkpoint_adds_are_checked(tmp_path: Any, change: Any, field: str) -> None:
    log, cp = _checkpointed(tmp_path)
    assert DeltaLog(log.table_path).update().num_files == 1
    _rewrite_add_column(cp, change)
    e = _assert_refused(log, 1, field, refresh=False)  # (the process's own cached snapshot stays valid)
    assert checkpoint_name(1) in str(e)


def test_checkpoint_other_actions_are_checked(tmp_path: Any) -> None:
    log, cp = _checkpointed(tmp_path)
    table = pq.read_table(cp)
    i = table.schema.get_field_index("metaData")
    rows = [None if r is None else {**r, "schemaString": "{oops"} for r in table.column("metaData").to_pylist()]
    pq.write_table(table.set_column(i, "metaData", pa.array(rows, table.schema.field("metaData").type)), cp)
    e = _assert_refused(log, 1, "metaData.schemaString", refresh=False)
    assert e.file == f"_delta_log/{checkpoint_name(1)}"


# -- paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "escapes"),
    [
        ("a.parquet", False),
        ("p=1/a.parquet", False),
        ("p=1/../a.parquet", False),
        ("./a.parquet", False),
        ("../a.parquet", True),
        ("p=1/../../a.parquet", True),
        ("%2E%2E/a.parquet", True),
        ("%2e./a.parquet", True),
        ("p%3D1%2F..%2F..%2Fa", True),
        ("..", True),
        ("..a/b", False),
        ("/abs/../x.parquet", False),
        ("file:/abs/x.parquet", False),
        ("s3a://bucket/../x.parquet", False),
    ],
)
def test_escaping_relative_paths(path: str, escapes: bool) -> None:
    assert escapes_table(path) is escapes


def test_absolute_paths() -> None:
    assert is_absolute_path("/x") and is_absolute_path("file:/x") and is_absolute_path("abfss://c@a/x")
    assert not is_absolute_path("x") and not is_absolute_path("a:b") and not is_absolute_path("p=a:/x")
