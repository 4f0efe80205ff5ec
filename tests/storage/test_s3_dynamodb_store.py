"""Delta's DynamoDB commit protocol (delta-spark's ``io.delta.storage.S3DynamoDBLogStore``) in the S3
log store, against a real server on 127.0.0.1 (moto serves S3 and DynamoDB on one port, its
conditional requests serialised; ``tests.s3server``): the items delta-spark writes, commits,
racing processes, a writer dying after its item, lost responses, and the refusals where writers
do not share one protocol."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata, Protocol
from serialake.exceptions import CommitProtocolMismatchError, DeltaIllegalArgumentException
from serialake.storage import s3 as s3store
from serialake.storage import s3_dynamodb as ddb
from serialake.storage.base import WriteOutcomeUnknownError
from tests.s3server import S3Server

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


class _Crash(BaseException):
    """The writer process dies here (nothing after this step runs)."""


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    srv = S3Server().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def env(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """This process pointed at the server, commits of both schemes through DynamoDB (a table of its own)."""
    values = {
        **server.environment(), ddb.ENV_LOCKING_PROVIDER: "dynamodb", ddb.ENV_TABLE_NAME: f"log_{uuid.uuid4().hex[:8]}",
    }  # fmt: skip
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    s3store.reset()
    DeltaLog.clear_cache()
    yield values
    s3store.reset()
    DeltaLog.clear_cache()


@pytest.fixture
def bucket(server: S3Server, env: dict[str, str]) -> str:
    return server.new_bucket()


def _new_table(uri: str, store: Any = None) -> DeltaLog:
    log = DeltaLog(uri, store)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA))
    txn.update_protocol(Protocol(1, 2))
    txn.commit([], "CREATE TABLE")
    return log


def _add(name: str) -> AddFile:
    return AddFile(path=name, partition_values={}, size=10, modification_time=1, data_change=True,
                   stats='{"numRecords":1}')  # fmt: skip


def _append(log: DeltaLog, name: str) -> int:
    return log.start_transaction().commit([_add(name)], "WRITE")


def _items(server: S3Server, table: str) -> dict[str, dict[str, Any]]:
    """The DynamoDB table's raw items, by file name (as boto3's low-level API returns them)."""
    scan = server.client("dynamodb").scan(TableName=table, ConsistentRead=True)
    return {item["fileName"]["S"]: item for item in scan["Items"]}


def _keys(server: S3Server, bucket: str, prefix: str) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def _body(server: S3Server, bucket: str, key: str) -> bytes:
    return bytes(server.client().get_object(Bucket=bucket, Key=key)["Body"].read())


def _commit_bytes(txn_id: str, name: str) -> bytes:
    """A commit as another writer would put it: commitInfo with a txnId, one AddFile."""
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE", "txnId": txn_id}}
    add = {"add": {"path": name, "partitionValues": {}, "size": 10, "modificationTime": 1, "dataChange": True}}
    return (json.dumps(info) + "\n" + json.dumps(add) + "\n").encode()


def _crash_at(step: str) -> Any:
    def hook(at: str, path: str) -> None:
        if at == step:
            raise _Crash(f"died at {step} of {path}")

    return hook


# -- the items: attribute for attribute what delta-spark writes ----------------------------------


def test_items_and_table_are_delta_sparks(server: S3Server, bucket: str, env: dict[str, str]) -> None:
    """The DynamoDB table serialake creates and the items it writes have delta-spark's names and types
    (S3DynamoDBLogStore.java: createTable, createPutItemRequest; ExternalCommitEntry.asComplete)."""
    uri = f"s3a://{bucket}/shape"
    log = _new_table(uri)
    _append(log, "a.parquet")
    table = env[ddb.ENV_TABLE_NAME]
    described = server.client("dynamodb").describe_table(TableName=table)["Table"]
    assert described["KeySchema"] == [{"AttributeName": "tablePath", "KeyType": "HASH"},
                                      {"AttributeName": "fileName", "KeyType": "RANGE"}]  # fmt: skip
    assert sorted(described["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == [
        {"AttributeName": "fileName", "AttributeType": "S"}, {"AttributeName": "tablePath", "AttributeType": "S"},
    ]  # fmt: skip
    assert described["ProvisionedThroughput"]["ReadCapacityUnits"] == 5
    assert described["ProvisionedThroughput"]["WriteCapacityUnits"] == 5

    items = _items(server, table)
    assert sorted(items) == [f"{v:020d}.json" for v in (0, 1)]
    now = int(time.time())
    for name, item in items.items():
        assert set(item) == {"tablePath", "fileName", "tempPath", "complete", "expireTime"}
        assert item["tablePath"] == {"S": f"s3a://{bucket}/shape"}  # the scheme as written, no trailing slash
        assert item["fileName"] == {"S": name}
        assert re.fullmatch(rf"\.tmp/{re.escape(name)}\.{UUID}", item["tempPath"]["S"])
        assert item["complete"] == {"S": "true"}
        assert set(item["expireTime"]) == {"N"} and abs(int(item["expireTime"]["N"]) - (now + 86_400)) < 120
        # The temp file holds the commit's bytes (it is what a fix-up copies).
        temp = _body(server, bucket, f"shape/_delta_log/{item['tempPath']['S']}")
        assert temp == _body(server, bucket, f"shape/_delta_log/{name}")

    # An item whose commit is not yet at its name: four attributes, complete "false", no expireTime.
    store = s3store.S3LogStore()
    store.fault_hook = _crash_at("entry-put")
    with pytest.raises(_Crash):
        _append(DeltaLog(uri, store), "b.parquet")
    item = _items(server, table)[f"{2:020d}.json"]
    assert set(item) == {"tablePath", "fileName", "tempPath", "complete"}
    assert item["complete"] == {"S": "false"} and item["tablePath"] == {"S": f"s3a://{bucket}/shape"}

    # Items in delta-spark's shape read back; tablePath of a table at a bucket's root keeps its slash.
    entry = ddb.ExternalCommitEntry.from_item(item)
    assert entry.to_item() == item and not entry.complete and entry.version == 2
    assert ddb.table_path_key(f"s3a://{bucket}") == f"s3a://{bucket}/"
    assert ddb.table_path_key(f"s3://{bucket}/a/b") == f"s3://{bucket}/a/b"


# -- commits and reads -----------------------------------------------------------------------------


def test_commits_reads_and_checkpoints_through_dynamodb(
    server: S3Server, bucket: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"s3a://{bucket}/events"
    log = _new_table(uri)
    assert [_append(log, f"part-{i}.parquet") for i in range(5)] == [1, 2, 3, 4, 5]
    fresh = DeltaLog(uri)
    snap = fresh.update()
    assert snap.version == 5 and snap.num_files == 5
    fresh.checkpoint()
    assert DeltaLog(uri).update().segment.checkpoint is not None  # type: ignore[union-attr]
    items = _items(server, env[ddb.ENV_TABLE_NAME])
    assert sorted(items) == [f"{v:020d}.json" for v in range(6)]
    assert all(i["complete"] == {"S": "true"} for i in items.values())
    # A reader without the protocol reads the table too (only writers must share it).
    monkeypatch.delenv(ddb.ENV_LOCKING_PROVIDER)
    assert DeltaLog(uri).update().version == 5


def _race_script() -> str:
    return textwrap.dedent(
        """
        import json, sys, time
        from serialake.core import DeltaLog
        from serialake.core.model.actions import AddFile
        uri, w, n, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
        log = DeltaLog.for_table(uri)
        log.update()
        time.sleep(max(0.0, start - time.time()))
        out = []
        for i in range(n):
            txn = log.start_transaction()
            add = AddFile(path=f"w{w}-{i}.parquet", partition_values={}, size=1, modification_time=1,
                          data_change=True)
            out.append([txn.commit([add], "WRITE"), txn.txn_id])
        print(json.dumps(out))
        """
    )


@pytest.mark.slow
@pytest.mark.concurrency
def test_two_processes_race_and_each_version_is_committed_once(
    server: S3Server, bucket: str, env: dict[str, str]
) -> None:
    uri = f"s3a://{bucket}/race"
    _new_table(uri)
    per_writer = 12
    start = time.time() + 5  # both past their imports: they race from the first commit
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _race_script(), uri, str(w), str(per_writer), str(start)],
                         env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(2)
    ]  # fmt: skip
    done: list[tuple[int, str]] = []
    spans = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        mine = [(int(v), t) for v, t in json.loads(out.strip().splitlines()[-1])]
        spans.append((min(v for v, _ in mine), max(v for v, _ in mine)))
        done += mine
    assert spans[0][1] > spans[1][0] and spans[1][1] > spans[0][0]  # they did race: their versions interleave
    assert sorted(v for v, _ in done) == list(range(1, 2 * per_writer + 1))  # each version once, none lost
    store = s3store.S3LogStore()
    for v, txn_id in done:  # each transaction at the version its commit reported, exactly once
        lines = store.read(f"{uri}/_delta_log/{v:020d}.json").splitlines()
        assert json.loads(lines[0])["commitInfo"]["txnId"] == txn_id
    snap = DeltaLog(uri).update()
    assert snap.version == 2 * per_writer and snap.num_files == 2 * per_writer
    items = _items(server, env[ddb.ENV_TABLE_NAME])
    assert sorted(items) == [f"{v:020d}.json" for v in range(2 * per_writer + 1)]
    assert all(i["complete"] == {"S": "true"} for i in items.values())


# -- a writer that died after its item -------------------------------------------------------------


def test_a_commit_left_incomplete_by_a_dead_writer_is_completed_by_the_next_reader(
    server: S3Server, bucket: str, env: dict[str, str]
) -> None:
    uri = f"s3a://{bucket}/crash"
    _new_table(uri)
    store = s3store.S3LogStore()
    store.fault_hook = _crash_at("entry-put")  # the item landed; the process dies before the copy
    with pytest.raises(_Crash):
        _append(DeltaLog(uri, store), "lost-writer.parquet")
    assert _keys(server, bucket, f"crash/_delta_log/{1:020d}.json") == []
    assert _items(server, env[ddb.ENV_TABLE_NAME])[f"{1:020d}.json"]["complete"] == {"S": "false"}
    # Version 1 is committed (its item says so): a reader listing the log completes it first.
    snap = DeltaLog(uri).update()
    assert snap.version == 1 and [f.path for f in snap.all_files] == ["lost-writer.parquet"]
    item = _items(server, env[ddb.ENV_TABLE_NAME])[f"{1:020d}.json"]
    assert item["complete"] == {"S": "true"} and "expireTime" in item
    temp = _body(server, bucket, f"crash/_delta_log/{item['tempPath']['S']}")
    assert _body(server, bucket, f"crash/_delta_log/{1:020d}.json") == temp


def _delta_spark_incomplete_commit(server: S3Server, bucket: str, table: str, prefix: str, version: int,
                                   body: bytes) -> str:  # fmt: skip
    """What a delta-spark writer that died after its PutItem leaves: the temp file and an incomplete item
    (BaseExternalLogStore.write steps 2.1 and 2.2, made with plain boto3)."""
    name = f"{version:020d}.json"
    temp = f".tmp/{name}.{uuid.uuid4()}"
    server.client().put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/{temp}", Body=body)
    server.client("dynamodb").put_item(
        TableName=table,
        Item={"tablePath": {"S": f"s3a://{bucket}/{prefix}"}, "fileName": {"S": name}, "tempPath": {"S": temp},
              "complete": {"S": "false"}},
        ConditionExpression="attribute_not_exists(fileName)",
    )  # fmt: skip
    return temp


def test_a_writer_completes_another_writers_incomplete_commit_before_its_own(
    server: S3Server, bucket: str, env: dict[str, str]
) -> None:
    """delta-spark's incomplete commit (its item, its temp file) is completed by serialake writers: when
    the PutItem at that version is refused, and before writing the next version (step 1)."""
    uri = f"s3a://{bucket}/fixup"
    table = env[ddb.ENV_TABLE_NAME]
    log = _new_table(uri)
    txn = log.start_transaction()  # reads version 0
    body = _commit_bytes("delta-spark-1", "by-delta-spark.parquet")
    temp = _delta_spark_incomplete_commit(server, bucket, table, "fixup", 1, body)
    # Its attempt at version 1 is refused by DynamoDB; the winner is completed, read, and not in
    # conflict (a blind append): the transaction commits at 2.
    assert txn.commit([_add("by-serialake.parquet")], "WRITE") == 2
    assert _body(server, bucket, f"fixup/_delta_log/{1:020d}.json") == body
    assert _items(server, table)[f"{1:020d}.json"]["complete"] == {"S": "true"}
    paths = sorted(f.path for f in DeltaLog(uri).update().all_files)
    assert paths == ["by-delta-spark.parquet", "by-serialake.parquet"]
    # Step 1: a write of version 4 while version 3 is incomplete completes 3 first.
    body3 = _commit_bytes("delta-spark-3", "three.parquet")
    _delta_spark_incomplete_commit(server, bucket, table, "fixup", 3, body3)
    store = s3store.S3LogStore()
    store.put_if_absent(f"{uri}/_delta_log/{4:020d}.json", _commit_bytes("four", "four.parquet"))
    assert _body(server, bucket, f"fixup/_delta_log/{3:020d}.json") == body3
    items = _items(server, table)
    assert items[f"{3:020d}.json"]["complete"] == {"S": "true"} and items[f"{4:020d}.json"]["complete"] == {"S": "true"}
    assert items[f"{1:020d}.json"]["tempPath"] == {"S": temp}  # the item is delta-spark's still
    assert DeltaLog(uri).update().version == 4


# -- lost responses --------------------------------------------------------------------------------


def _lose_once(step: str) -> Any:
    lost = {"n": 0}

    def hook(at: str, path: str) -> None:
        if at == step and lost["n"] == 0:
            lost["n"] += 1
            raise ConnectionResetError(errno.ECONNRESET, "connection reset (injected: the request landed)")

    return hook


@pytest.mark.parametrize("step", ["entry-put", "copied"])
def test_a_lost_response_is_recognised_as_our_own_commit(
    server: S3Server, bucket: str, env: dict[str, str], step: str
) -> None:
    """The PutItem (recognised by its tempPath) or the copy (by its bytes) landed and its response was
    lost: the request is sent again, refused, and the commit is ours, once."""
    uri = f"s3a://{bucket}/lost-{step}"
    _new_table(uri)
    store = s3store.S3LogStore()
    store.fault_hook = _lose_once(step)
    log = DeltaLog(uri, store)
    txn = log.start_transaction()
    assert txn.commit([_add("once.parquet")], "WRITE") == 1
    snap = DeltaLog(uri).update()
    assert snap.version == 1 and [f.path for f in snap.all_files] == ["once.parquet"]
    temps = _keys(server, bucket, f"lost-{step}/_delta_log/.tmp/{1:020d}.json")
    assert len(temps) == 1  # one attempt, one temp file
    item = _items(server, env[ddb.ENV_TABLE_NAME])[f"{1:020d}.json"]
    assert item["complete"] == {"S": "true"} and temps[0].endswith(item["tempPath"]["S"])


def test_a_lost_put_item_response_inside_the_sdk_is_recognised(
    server: S3Server, bucket: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore's read timeout after the PutItem was applied: the retried PutItem is refused, and the item's
    tempPath shows it is this writer's."""
    from botocore.exceptions import ReadTimeoutError

    uri = f"s3a://{bucket}/sdk-lost"
    _new_table(uri)
    commits = s3store.dynamodb_commits(uri)
    assert commits is not None
    real = commits.table._once.put_item
    calls = {"n": 0}

    def put_item(**kwargs: Any) -> Any:
        calls["n"] += 1
        out = real(**kwargs)
        if calls["n"] == 1:
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1 (injected)")
        return out

    monkeypatch.setattr(commits.table._once, "put_item", put_item)
    assert _append(DeltaLog(uri), "once.parquet") == 1
    assert calls["n"] == 2
    assert [f.path for f in DeltaLog(uri).update().all_files] == ["once.parquet"]


def test_an_unknown_put_item_outcome_is_decided_by_the_log(
    server: S3Server, bucket: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every PutItem answer lost and DynamoDB unreadable afterwards: the store says the outcome is
    unknown, and the commit loop reads the log (its fix-up completes the item) to find its txnId."""
    uri = f"s3a://{bucket}/unknown"
    _new_table(uri)
    commits = s3store.dynamodb_commits(uri)
    assert commits is not None
    real_put, real_get = commits.table.put_new, commits.table.get
    state = {"lost": 0, "blind": True}

    def put_new(entry: ddb.ExternalCommitEntry, path: str) -> None:
        real_put(entry, path)
        state["lost"] += 1
        raise WriteOutcomeUnknownError(OSError(errno.ETIMEDOUT, "timed out (injected)"), path, "put the item")

    def get(table_path: str, name: str) -> ddb.ExternalCommitEntry | None:
        if state["blind"] and name == f"{1:020d}.json":
            state["blind"] = False
            raise OSError(errno.EIO, "GetItem failed (injected)")
        return real_get(table_path, name)

    monkeypatch.setattr(commits.table, "put_new", put_new)
    monkeypatch.setattr(commits.table, "get", get)
    assert _append(DeltaLog(uri), "maybe.parquet") == 1
    assert [f.path for f in DeltaLog(uri).update().all_files] == ["maybe.parquet"]
    assert _items(server, env[ddb.ENV_TABLE_NAME])[f"{1:020d}.json"]["complete"] == {"S": "true"}


# -- writers that do not share one protocol --------------------------------------------------------


def test_a_conditional_put_writer_refuses_a_table_with_dynamodb_traces(
    server: S3Server, bucket: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DynamoDB protocol on for s3a:// only (as in a Spark session): the same table written as s3://
    commits by conditional PUT, sees the protocol's temp files, and refuses before writing."""
    monkeypatch.delenv(ddb.ENV_LOCKING_PROVIDER)
    s3store.configure({
        "spark.delta.logStore.s3a.impl": ddb.DYNAMODB_LOG_STORE,
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": env[ddb.ENV_TABLE_NAME],
    })  # fmt: skip
    assert s3store.dynamodb_commits(f"s3a://{bucket}/t") is not None
    assert s3store.dynamodb_commits(f"s3://{bucket}/t") is None
    _new_table(f"s3a://{bucket}/mixed")
    with pytest.raises(CommitProtocolMismatchError) as caught:
        _append(DeltaLog(f"s3://{bucket}/mixed"), "conditional.parquet")
    e = caught.value
    assert e.table == f"s3://{bucket}/mixed" and e.version == 1 and e.combination == "s3 conditional put + dynamodb"
    assert f"Table s3://{bucket}/mixed" in str(e) and "version 1" in str(e) and "Help:" in str(e)
    assert _keys(server, bucket, f"mixed/_delta_log/{1:020d}.json") == []  # nothing written


def test_a_dynamodb_writer_refuses_a_commit_no_item_accounts_for(
    server: S3Server, bucket: str, env: dict[str, str]
) -> None:
    """A writer outside the protocol (delta-spark's S3SingleDriverLogStore: a plain PUT) put version 2:
    the DynamoDB writer finds it without an item, in a table whose items are recent, and refuses."""
    uri = f"s3a://{bucket}/outside"
    log = _new_table(uri)
    _append(log, "one.parquet")
    txn = log.start_transaction()  # reads version 1
    server.client().put_object(Bucket=bucket, Key=f"outside/_delta_log/{2:020d}.json",
                               Body=_commit_bytes("single-driver", "plain.parquet"))  # fmt: skip
    with pytest.raises(CommitProtocolMismatchError) as caught:
        txn.commit([_add("two.parquet")], "WRITE")
    e = caught.value
    assert e.version == 2 and e.table == uri and e.combination == "dynamodb + writer outside it"
    assert "has no item" in str(e) and env[ddb.ENV_TABLE_NAME] in str(e)
    assert f"{3:020d}.json" not in _items(server, env[ddb.ENV_TABLE_NAME])


def test_a_dynamodb_writer_refuses_when_its_version_was_overwritten_before_the_copy(
    server: S3Server, bucket: str, env: dict[str, str]
) -> None:
    """The item is ours, and a writer outside the protocol puts the name first: the copy is refused with
    other bytes there, and the writer says its transaction is not in the table."""
    uri = f"s3a://{bucket}/sneak"
    _new_table(uri)
    foreign = _commit_bytes("single-driver", "plain.parquet")

    def sneak(at: str, path: str) -> None:
        if at == "copy":
            server.client().put_object(Bucket=bucket, Key=f"sneak/_delta_log/{1:020d}.json", Body=foreign)

    store = s3store.S3LogStore()
    store.fault_hook = sneak
    with pytest.raises(CommitProtocolMismatchError) as caught:
        _append(DeltaLog(uri, store), "ours.parquet")
    assert caught.value.version == 1 and "Nothing of this transaction is in the table" in str(caught.value)
    assert _body(server, bucket, f"sneak/_delta_log/{1:020d}.json") == foreign
    assert [f.path for f in DeltaLog(uri).update().all_files] == ["plain.parquet"]


def test_dynamodb_writers_spelling_the_path_differently_are_refused(
    server: S3Server, bucket: str, env: dict[str, str]
) -> None:
    """tablePath is the path as written: s3:// and s3a:// writers hold different keys and do not exclude
    each other. The second spelling's commits have no item under the first's key: refused, named."""
    _new_table(f"s3a://{bucket}/spelled")
    assert _append(DeltaLog(f"s3://{bucket}/spelled"), "as-s3.parquet") == 1  # its key had no items yet
    with pytest.raises(CommitProtocolMismatchError) as caught:
        _append(DeltaLog(f"s3a://{bucket}/spelled"), "as-s3a.parquet")
    assert caught.value.combination == "s3 and s3a spellings" and f"s3://{bucket}/spelled" in str(caught.value)


def test_items_of_a_deleted_table_stop_its_re_creation(server: S3Server, bucket: str, env: dict[str, str]) -> None:
    uri = f"s3a://{bucket}/again"
    _new_table(uri)
    for key in _keys(server, bucket, "again/"):
        server.client().delete_object(Bucket=bucket, Key=key)
    DeltaLog.clear_cache()
    with pytest.raises(CommitProtocolMismatchError, match="items of a table that was at this path") as caught:
        _new_table(uri)
    assert caught.value.version == 0 and f"tablePath = s3a://{bucket}/again" in str(caught.value)


# -- configuration ---------------------------------------------------------------------------------


def test_delta_spark_settings_choose_the_protocol() -> None:
    """delta-spark's keys, with and without the ``spark.`` prefixes, and its refusals of inconsistent ones."""
    on = {"spark.delta.logStore.s3a.impl": ddb.DYNAMODB_LOG_STORE}
    assert ddb.settings_for("s3a", on, {}) == ddb.DynamoDBSettings()  # delta_log, us-east-1, 1 day, 5/5
    assert ddb.settings_for("s3", on, {}) is None  # per scheme
    assert ddb.settings_for("s3", {"delta.logStore.s3.impl": ddb.DYNAMODB_LOG_STORE}, {}) is not None
    assert ddb.settings_for("s3", {"spark.delta.logStore.class": ddb.DYNAMODB_LOG_STORE}, {}) is not None
    single = {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore"}
    assert ddb.settings_for("s3a", single, {ddb.ENV_LOCKING_PROVIDER: "dynamodb"}) is None  # the setting wins
    assert ddb.settings_for("s3a", {}, {ddb.ENV_LOCKING_PROVIDER: "dynamodb"}) is not None
    assert ddb.settings_for("s3a", {}, {}) is None
    full = {
        **on,
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": "commits",
        "io.delta.storage.S3DynamoDBLogStore.ddb.region": "eu-west-1",
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.ttl": "7200",
        "spark.io.delta.storage.S3DynamoDBLogStore.provisionedThroughput.rcu": "7",
        "spark.io.delta.storage.S3DynamoDBLogStore.provisionedThroughput.wcu": "3",
        "spark.serialake.dynamodb.endpoint": "http://127.0.0.1:1",
    }
    got = ddb.settings_for("s3a", full, {ddb.ENV_TABLE_NAME: "ignored", ddb.ENV_REGION: "ignored"})
    assert got == ddb.DynamoDBSettings("commits", "eu-west-1", "http://127.0.0.1:1", 7200, 7, 3)
    env_only = ddb.settings_for("s3a", on, {ddb.ENV_TABLE_NAME: "t", ddb.ENV_REGION: "r", "AWS_REGION": "x",
                                            "AWS_ENDPOINT_URL": "http://e"})  # fmt: skip
    assert env_only == ddb.DynamoDBSettings("t", "r", "http://e")
    for bad, match in [
        ({**on, "spark.delta.logStore.class": ddb.DYNAMODB_LOG_STORE}, "both set"),
        ({**on, "delta.logStore.s3a.impl": "other"}, "differ"),
        ({**on, "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": "a",
          "io.delta.storage.S3DynamoDBLogStore.ddb.tableName": "b"}, "different values"),
        ({**on, "spark.io.delta.storage.S3DynamoDBLogStore.ddb.ttl": "-1"}, "negative"),
        ({**on, "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tablename": "x"}, "Unknown"),
    ]:  # fmt: skip
        with pytest.raises(DeltaIllegalArgumentException, match=match):
            ddb.settings_for("s3a", bad, {})
    with pytest.raises(DeltaIllegalArgumentException, match="negative"):
        s3store.configure({"spark.io.delta.storage.S3DynamoDBLogStore.ddb.ttl": "-5", **on})
    # What a Spark session gives the store (serialake.configure(spark)).
    conf = {"spark.hadoop.fs.s3a.endpoint": "e", "spark.delta.logStore.s3a.impl": ddb.DYNAMODB_LOG_STORE,
            "spark.io.delta.storage.S3DynamoDBLogStore.ddb.region": "r", "spark.sql.shuffle.partitions": "4",
            "spark.hadoop.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": "t"}  # fmt: skip
    assert set(s3store.session_options(conf)) == set(conf) - {"spark.sql.shuffle.partitions"}


def test_spark_settings_through_configure_create_the_table_as_told(
    server: S3Server, bucket: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No environment switch: the session's settings alone (as ``serialake.configure(spark)`` passes them)
    turn the protocol on, name the DynamoDB table and its provisioned throughput."""
    monkeypatch.delenv(ddb.ENV_LOCKING_PROVIDER)
    monkeypatch.delenv(ddb.ENV_TABLE_NAME)
    name = f"conf_{uuid.uuid4().hex[:8]}"
    s3store.configure({
        "spark.delta.logStore.s3a.impl": ddb.DYNAMODB_LOG_STORE,
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": name,
        "spark.hadoop.io.delta.storage.S3DynamoDBLogStore.provisionedThroughput.rcu": "7",
        "spark.io.delta.storage.S3DynamoDBLogStore.provisionedThroughput.wcu": "3",
        "spark.serialake.dynamodb.endpoint": server.endpoint,
    })  # fmt: skip
    _new_table(f"s3a://{bucket}/configured")
    throughput = server.client("dynamodb").describe_table(TableName=name)["Table"]["ProvisionedThroughput"]
    assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (7, 3)
    assert sorted(_items(server, name)) == [f"{0:020d}.json"]


def test_without_boto3_the_protocol_names_its_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('boto3', 'botocore'):
                    raise ImportError(f'{name} is blocked in this test')
        sys.meta_path.insert(0, Block())
        import serialake
        from serialake.storage import store_for
        from serialake.extras import MissingExtraError
        assert 'boto3' not in sys.modules
        try:
            store_for('s3a://b/t').list_from('s3a://b/t/_delta_log')
        except MissingExtraError as e:
            print(e)
        """
    )
    env = {**os.environ, ddb.ENV_LOCKING_PROVIDER: "dynamodb", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "pip install 'serialake[dynamodb]'" in out.stdout and "S3DynamoDBLogStore" in out.stdout
