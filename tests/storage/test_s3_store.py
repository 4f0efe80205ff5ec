"""The S3 log store against a real S3 server on 127.0.0.1 (moto, conditional PUTs serialised as
on S3; ``tests.s3server``): the store's contract, racing creators, the commit loop on S3, a lost
response, and delta-rs reading and writing the same S3 table."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata, Protocol
from serialake.exceptions import DeltaIllegalArgumentException, FileAlreadyExistsError
from serialake.storage import normalize_table_path, store_for
from serialake.storage import s3 as s3store
from serialake.storage.base import WriteOutcomeUnknownError
from tests.s3server import S3Server

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    srv = S3Server().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def bucket(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for key, value in server.environment().items():
        monkeypatch.setenv(key, value)
    s3store._stores.clear()  # stores read the environment when made
    yield server.new_bucket()
    s3store._stores.clear()


def _new_table(uri: str) -> DeltaLog:
    log = DeltaLog.for_table(uri)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string='{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'))
    txn.update_protocol(Protocol(1, 2))
    txn.commit([], "CREATE TABLE")
    return log


def _add(name: str) -> AddFile:
    return AddFile(path=name, partition_values={}, size=10, modification_time=1, data_change=True,
                   stats='{"numRecords":1}')  # fmt: skip


def test_uris_and_store_choice(bucket: str) -> None:
    assert normalize_table_path(f"s3://{bucket}//a/b/") == f"s3://{bucket}/a/b"
    assert normalize_table_path(f"s3a://{bucket}/a") == f"s3a://{bucket}/a"
    assert isinstance(store_for(f"s3://{bucket}/t"), s3store.S3LogStore)
    with pytest.raises(DeltaIllegalArgumentException, match="'gs'"):
        normalize_table_path("gs://b/t")
    with pytest.raises(DeltaIllegalArgumentException, match=r"\.\."):
        normalize_table_path(f"s3://{bucket}/a/../b")


def test_store_contract(bucket: str) -> None:
    store = s3store.S3LogStore()
    root = f"s3://{bucket}/t/_delta_log"
    store.put_if_absent(f"{root}/00000000000000000000.json", b"zero")
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(f"{root}/00000000000000000000.json", b"other")
    assert store.read(f"{root}/00000000000000000000.json") == b"zero"  # never overwritten
    with pytest.raises(FileNotFoundError):
        store.read(f"{root}/00000000000000000009.json")
    for v in (1, 2, 10):
        store.put_if_absent(f"{root}/{v:020d}.json", b"x" * v)
    store.write(f"{root}/_last_checkpoint", b"{}")
    store.write(f"{root}/_last_checkpoint", b'{"version":1}')  # plain PUT replaces
    store.put_if_absent(f"{root}/_commits/deeper.json", b"not listed")
    names = [s.name for s in store.list_from(root)]
    assert names == [f"{v:020d}.json" for v in (0, 1, 2, 10)] + ["_last_checkpoint"]
    assert [s.name for s in store.list_from(root, f"{2:020d}.json")][:2] == [f"{2:020d}.json", f"{10:020d}.json"]
    assert [s.size for s in store.list_from(root, f"{10:020d}.json")][:1] == [10]
    assert store.list_from(f"s3://{bucket}/missing/_delta_log") == []
    listed = {st.name: st for st in store.list_from(root)}
    assert store.status(f"{root}/{10:020d}.json") == listed[f"{10:020d}.json"]  # found by name as listed
    assert store.status(f"{root}/{9:020d}.json") is None
    assert store.exists(f"{root}/_last_checkpoint") and not store.exists(f"{root}/nope")
    store.delete(f"{root}/_last_checkpoint")
    store.delete(f"{root}/_last_checkpoint")  # absent: not an error
    assert not store.exists(f"{root}/_last_checkpoint")


def test_racing_creators_have_one_winner(bucket: str) -> None:
    store = s3store.S3LogStore()
    for round_ in range(5):
        key = f"s3://{bucket}/race/{round_:020d}.json"
        winners: list[int] = []
        barrier = threading.Barrier(8)

        def put(i: int, key: str = key, winners: list[int] = winners, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                store.put_if_absent(key, str(i).encode())
                winners.append(i)
            except FileAlreadyExistsError:
                pass

        threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(winners) == 1 and store.read(key) == str(winners[0]).encode()


def test_concurrent_commits_on_s3_are_contiguous_and_once(bucket: str) -> None:
    uri = f"s3://{bucket}/events"
    _new_table(uri)
    per_thread, threads_n = 10, 4
    versions: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        log = DeltaLog.for_table(uri)
        for i in range(per_thread):
            txn = log.start_transaction()
            v = txn.commit([_add(f"part-{w}-{i}.parquet")], "WRITE")
            with lock:
                versions.append(v)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(versions) == list(range(1, 1 + per_thread * threads_n))
    fresh = DeltaLog(uri)  # a new reader: everything from the store
    snap = fresh.update()
    assert snap.version == per_thread * threads_n and snap.num_files == per_thread * threads_n
    # A checkpoint on S3, then a load that starts from it.
    fresh.checkpoint()
    again = DeltaLog(uri).update()
    assert again.segment is not None and again.segment.checkpoint is not None
    assert again.num_files == per_thread * threads_n


def test_a_lost_response_is_recognised_as_our_own_commit(bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PUT lands but its response is lost: the commit loop reads the log, finds its txnId,
    and reports that version (one commit, not two)."""
    uri = f"s3://{bucket}/lost"
    log = _new_table(uri)
    store = log.store
    real = type(store).put_if_absent
    calls = {"n": 0}

    def lose_first(self: s3store.S3LogStore, path: str, data: bytes) -> None:
        real(self, path, data)
        calls["n"] += 1
        if calls["n"] == 1:
            raise WriteOutcomeUnknownError(OSError(104, "connection reset"), path, "PUT the commit")

    monkeypatch.setattr(s3store.S3LogStore, "put_if_absent", lose_first)
    txn = log.start_transaction()
    version = txn.commit([_add("part-lost.parquet")], "WRITE")
    monkeypatch.undo()
    assert version == 1
    snap = DeltaLog(uri).update()
    assert snap.version == 1 and [f.path for f in snap.all_files] == ["part-lost.parquet"]
    infos = [json.loads(line) for line in store.read(f"{uri}/_delta_log/{1:020d}.json").splitlines()]
    assert sum(1 for a in infos if "add" in a) == 1


def test_delta_rs_and_serialake_share_an_s3_table(bucket: str, server: S3Server) -> None:
    import deltalake
    import pyarrow as pa

    uri = f"s3://{bucket}/shared"
    options = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "conditional_put": "etag",
    }  # fmt: skip
    deltalake.write_deltalake(uri, pa.table({"id": [1, 2, 3]}), storage_options=options)
    deltalake.write_deltalake(uri, pa.table({"id": [4]}), mode="append", storage_options=options)
    log = DeltaLog.for_table(uri)
    snap = log.update()
    assert snap.version == 1 and snap.num_files == 2
    # serialake commits on top (a property change), delta-rs reads it and appends after it.
    txn = log.start_transaction()
    txn.update_metadata(Metadata(**{**snap.metadata.__dict__, "configuration": {"owner": "serialake"}}))
    assert txn.commit([], "SET TBLPROPERTIES") == 2
    dt = deltalake.DeltaTable(uri, storage_options=options)
    assert dt.version() == 2 and dt.metadata().configuration.get("owner") == "serialake"
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4]
    deltalake.write_deltalake(uri, pa.table({"id": [5]}), mode="append", storage_options=options)
    assert log.update().version == 3 and log.update().num_files == 3
    # Commits without an in-commit timestamp are as old as their objects (not 0): history and
    # time travel by timestamp work on S3.
    DeltaLog.clear_cache()
    fresh = DeltaLog.for_table(uri)
    stamps = [fresh.read_commit(v).timestamp for v in range(4)]
    assert all(abs(t - time.time() * 1000) < 600_000 for t in stamps), stamps
    assert fresh.version_at_timestamp(int(time.time() * 1000) + 5_000) == 3


@pytest.mark.parametrize("fault", ["lose", "500", "503", "409", "delay"])
def test_commit_faults_never_lose_duplicate_or_invent_a_commit(
    bucket: str, server: S3Server, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """Through a proxy that breaks the first PUT of every commit file: each transaction commits
    exactly once, at contiguous versions, whatever the fault (a lost response included)."""
    from tests.s3proxy import FaultProxy

    proxy = FaultProxy(server.endpoint, lambda key, n: fault if n == 1 else None, delay_s=0.3).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        s3store._stores.clear()
        uri = f"s3://{bucket}/faults"
        _new_table(uri)
        done: list[tuple[int, str]] = []
        lock = threading.Lock()

        def writer(w: int) -> None:
            log = DeltaLog.for_table(uri)
            for i in range(4):
                txn = log.start_transaction()
                v = txn.commit([_add(f"part-{w}-{i}.parquet")], "WRITE")
                with lock:
                    done.append((v, txn.txn_id))

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        proxy.stop()
    assert any(f == fault for _, f in proxy.faults)
    assert sorted(v for v, _ in done) == list(range(1, 9))
    s3store._stores.clear()
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    snap = DeltaLog(uri).update()
    assert snap.version == 8 and snap.num_files == 8
    # Each transaction's commitInfo is in the log once, at the version its commit reported.
    store = store_for(uri)
    for v, txn_id in done:
        lines = store.read(f"{uri}/_delta_log/{v:020d}.json").splitlines()
        assert json.loads(lines[0])["commitInfo"]["txnId"] == txn_id


def test_an_unreachable_table_counts_as_moved_in_cut_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's recent read of a table whose store is gone must not break reads of other tables."""
    from serialake.core.tables import cut

    own = S3Server().start()
    try:
        for key, value in own.environment().items():
            monkeypatch.setenv(key, value)
        s3store._stores.clear()
        uri = f"s3://{own.new_bucket()}/gone"
        _new_table(uri)
        assert cut._moved(uri, 0) is False
    finally:
        own.stop()
    s3store._stores.clear()
    assert cut._moved(uri, 0) is True  # the probe fails: nothing is claimed about the table
    s3store._stores.clear()


def test_s3a_option_names_configure_the_store(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark users' settings (``spark.hadoop.fs.s3a.*``) reach the store, with no AWS variables set."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(key, raising=False)
    bucket = server.new_bucket()
    try:
        s3store.configure({
            "spark.hadoop.fs.s3a.endpoint": server.endpoint,
            "spark.hadoop.fs.s3a.access.key": "testing",
            "spark.hadoop.fs.s3a.secret.key": "testing",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.connection.maximum": "100",  # S3A tuning: ignored
        })
        _new_table(f"s3a://{bucket}/configured")
        assert DeltaLog(f"s3a://{bucket}/configured").update().version == 0
        with pytest.raises(DeltaIllegalArgumentException, match="Unknown S3 option"):
            s3store.configure({"bogus.option": "1"})
    finally:
        with s3store._lock:
            s3store._options.clear()
            s3store._stores.clear()
