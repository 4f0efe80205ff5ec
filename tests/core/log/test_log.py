"""Log store, snapshot replay, time travel, checkpoints, properties, features and bad input."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from serialake.core import DeltaLog
from serialake.core.model.actions import AddFile, Metadata, Protocol
from serialake.exceptions import (
    CorruptLogError,
    DeltaIllegalArgumentException,
    DeltaTableNotFoundError,
    FileAlreadyExistsError,
    InvalidPropertyError,
    UnsupportedFeatureError,
)
from serialake.storage import LocalLogStore
from serialake.storage.faulty import FaultPlan, FaultyLogStore
from tests.core.conftest import SCHEMA, add_file


# -- log store ------------------------------------------------------------------
def test_put_if_absent_never_overwrites(tmp_path):
    store = LocalLogStore()
    path = str(tmp_path / "_delta_log" / "00000000000000000000.json")
    store.put_if_absent(path, b"first\n")
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(path, b"second\n")
    assert open(path, "rb").read() == b"first\n"
    assert [s.name for s in store.list_from(str(tmp_path / "_delta_log"))] == ["00000000000000000000.json"]


def test_put_if_absent_one_winner_among_threads(tmp_path):
    store = LocalLogStore()
    path = str(tmp_path / "c.json")
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            store.put_if_absent(path, f"{i}\n".encode() * 1000)
            wins.append(i)
        except FileAlreadyExistsError:
            pass

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert open(path, "rb").read() == f"{wins[0]}\n".encode() * 1000
    assert sorted(os.listdir(tmp_path)) == ["c.json"]  # no temp files left behind


def test_listing_is_sorted_from_start(tmp_path):
    store = LocalLogStore()
    for v in (3, 1, 2, 10):
        store.put_if_absent(str(tmp_path / f"{v:020d}.json"), b"{}\n")
    names = [s.name for s in store.list_from(str(tmp_path), f"{2:020d}")]
    assert names == [f"{v:020d}.json" for v in (2, 3, 10)]
    assert store.list_from(str(tmp_path / "missing")) == []


# -- snapshots --------------------------------------------------------------------
def test_not_a_table(tmp_path):
    with pytest.raises(DeltaTableNotFoundError, match="not a Delta table"):
        DeltaLog(str(tmp_path)).update()
    assert not DeltaLog(str(tmp_path)).table_exists()


def test_first_commit_needs_metadata(tmp_path):
    with pytest.raises(Exception, match="first commit must set its metadata"):
        DeltaLog(str(tmp_path / "t")).start_transaction().commit([add_file(1)])


def test_time_travel_by_version_and_timestamp(make_table):
    log = make_table(files=[1])
    stamps = []
    for _ in range(3):
        time.sleep(0.02)
        log.start_transaction().commit([add_file(2)])
        stamps.append(log.update().timestamp)
    assert log.snapshot(version=0).num_files == 1
    assert log.snapshot(version=2).num_files == 3
    assert log.snapshot(timestamp=stamps[1]).version == 2
    assert log.snapshot(timestamp=stamps[1] + 1).version == 2
    with pytest.raises(DeltaIllegalArgumentException, match="no version 9"):
        log.snapshot(version=9)
    with pytest.raises(DeltaIllegalArgumentException, match="before the earliest"):
        log.snapshot(timestamp=0)


def test_incremental_update_reads_only_new_commits(make_table):
    log = make_table()
    s1 = log.update()
    other = DeltaLog(log.table_path)
    other.start_transaction().commit([add_file(5)])
    s2 = log.update()
    assert s2.version == s1.version + 1 and s2.num_files == s1.num_files + 1
    assert s1.num_files == 3  # snapshots are immutable


def test_table_deleted_and_recreated_at_the_same_path(make_table, tmp_path):
    """A cached log must not replay commits it remembers from a table that no longer exists."""
    import shutil

    log = DeltaLog.for_table(make_table().table_path)
    before = str(tmp_path / "copy-at-v0")
    shutil.copytree(log.table_path, before)
    pinned = log.update()
    log.start_transaction(pinned).commit([add_file(5)])  # v1, remembered by this process
    shutil.rmtree(log.table_path)
    shutil.copytree(before, log.table_path)  # the table again, as it was at v0
    snap = DeltaLog.for_table(log.table_path).update()
    assert (snap.version, snap.num_files) == (0, 3)
    # Refreshed to a version that then vanishes, with nothing newer: loaded afresh too.
    log.start_transaction(snap).commit([add_file(6)])
    assert log.update().version == 1
    shutil.rmtree(log.table_path)
    shutil.copytree(before, log.table_path)
    snap = log.update()
    assert (snap.version, snap.num_files) == (0, 3)


def test_checkpoint_replay_equals_full_replay(make_table):
    log = make_table(files=[1, 2])
    for i in range(23):
        t = log.start_transaction()
        files = t.filter_files([f"p = {i % 3}"])
        actions = [add_file(i % 3)] + ([files[0].remove()] if files and i % 4 == 0 else [])
        t.commit(actions)
    log.wait_for_checkpoints()
    names = os.listdir(log.log_path)
    assert "00000000000000000010.checkpoint.parquet" in names
    assert "00000000000000000020.checkpoint.parquet" in names
    assert json.load(open(os.path.join(log.log_path, "_last_checkpoint")))["version"] == 20
    from_cp = DeltaLog(log.table_path).update()
    assert from_cp.segment.checkpoint.version == 20
    # Replay from version 0 by hiding the checkpoints.
    full = _replay_without_checkpoints(log)
    assert {f.path for f in from_cp.all_files} == {f.path for f in full.all_files}
    assert from_cp.metadata == full.metadata and from_cp.protocol == full.protocol
    for v in (9, 10, 15, 23):
        assert {f.path for f in DeltaLog(log.table_path).snapshot(version=v).all_files} == {
            f.path for f in log.snapshot(version=v).all_files
        }


def _replay_without_checkpoints(log: DeltaLog):
    from serialake.core.log.logfiles import build_segment

    listing = [s for s in log.store.list_from(log.log_path) if s.name.endswith(".json")]
    seg = build_segment(log.store, log.table_path, log.log_path, None, listing=listing)
    assert seg.checkpoint is None
    return DeltaLog(log.table_path)._load(seg)


def test_last_checkpoint_pointing_at_missing_checkpoint(make_table):
    log = make_table()
    for _ in range(12):
        log.start_transaction().commit([add_file(1)])
    log.wait_for_checkpoints()
    os.remove(os.path.join(log.log_path, "00000000000000000010.checkpoint.parquet"))
    snap = DeltaLog(log.table_path).update()
    assert snap.version == 12 and snap.num_files == 15


def test_checkpoint_failure_never_fails_the_commit(make_table):
    log = make_table()
    cp = os.path.join(log.log_path, "00000000000000000010.checkpoint.parquet")
    os.makedirs(cp)  # a directory where the checkpoint file must go: writing it fails
    for _ in range(10):
        log.start_transaction().commit([add_file(1)])
    log.wait_for_checkpoints()
    assert log.last_checkpoint_error is not None
    assert DeltaLog(log.table_path).update().version == 10


def test_corrupt_commit_names_version(make_table):
    log = make_table()
    log.start_transaction().commit([add_file(1)])
    with open(log.commit_path(2), "w") as f:
        f.write('{"add":{"path":"x","partitionValues":{},"si')  # truncated
    with pytest.raises(CorruptLogError, match="version 2 is corrupt or truncated"):
        DeltaLog(log.table_path).update()


def test_commit_parsers_read_every_document_alike() -> None:
    """Commit files go through orjson unless json must read them (integers past 64 bits, NaN,
    lone surrogates, text that is not UTF-8): either way, the same actions or the same error."""
    from serialake.core.log.snapshot import parse_commit_items

    def parsed(text: bytes) -> list:
        return [x if type(x) is dict else x.to_dict() for x in parse_commit_items(text, "t", 7)]

    big = 2**70 + 1  # orjson would read it as a float
    info = {"commitInfo": {"timestamp": 5, "operation": "WRITE", "operationMetrics": {"n": big}, "txnId": "x"}}
    add = {"add": {"path": "é 1.parquet", "partitionValues": {"p": "ü"}, "size": big, "modificationTime": 0,
                   "dataChange": True, "stats": '{"numRecords":1}'}}  # fmt: skip
    body = (json.dumps(info) + "\n" + json.dumps(add, ensure_ascii=False) + "\n").encode()
    out = parsed(body)
    assert out[0]["commitInfo"]["operationMetrics"]["n"] == big and out[1]["size"] == big
    assert type(out[1]["size"]) is int
    small = body.replace(str(big).encode(), b"12")
    assert parsed(small) == [json.loads(line) if i == 0 else json.loads(line)["add"]
                             for i, line in enumerate(small.decode().splitlines())]  # fmt: skip
    # What only Python's json reads is read as before (the fast parser refuses it).
    nan = small.replace(b'"timestamp": 5', b'"timestamp": 5, "x": NaN')
    assert parsed(nan)[0]["commitInfo"]["x"] != parsed(nan)[0]["commitInfo"]["x"]  # NaN
    assert parsed(small + b"\n\n") == parsed(small)  # blank lines at the end
    with pytest.raises(CorruptLogError, match="version 7 is not UTF-8"):
        parse_commit_items(small.replace("ü".encode(), b"\xff"), "t", 7)
    with pytest.raises(CorruptLogError, match="version 7 is corrupt or truncated at line 2"):
        parse_commit_items(small[:-20], "t", 7)


def test_commit_bodies_are_compact_utf8_json_that_read_back_alike() -> None:
    """Commit bodies are written by orjson, text as UTF-8 (as Delta and delta-rs write it); what
    orjson refuses (integers past 64 bits, keys that are not strings) by json: the same values."""
    import dataclasses

    from serialake.core.log.snapshot import parse_commit_items
    from serialake.core.model.actions import CommitInfo, actions_to_jsonl

    add = AddFile(path="é 1.parquet", partition_values={"p": "ü\x7f", "q": None}, size=3, modification_time=0,
                  data_change=True, stats='{"numRecords":1,"nullCount":{"a":0}}')  # fmt: skip
    info = CommitInfo({"timestamp": 5, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                       "readVersion": 4, "isBlindAppend": True, "txnId": "x"})  # fmt: skip
    body = actions_to_jsonl([info, add])
    assert body == (json.dumps(info.to_dict(), separators=(",", ":"), ensure_ascii=False) + "\n"
                    + json.dumps(add.to_dict(), separators=(",", ":"), ensure_ascii=False) + "\n").encode()  # fmt: skip
    assert "é 1.parquet".encode() in body and b"\\u" not in body
    items = parse_commit_items(body, "t", 7)
    assert items[0] == info and AddFile._from_obj(items[1]) == add
    assert add.to_json() == body.decode().splitlines()[1]
    # Beyond orjson: json writes the action, and it reads back exact.
    big = CommitInfo({"timestamp": 5, "operationMetrics": {"n": 2**70 + 1}, "keys": {1: "a"}})
    (back,) = parse_commit_items(actions_to_jsonl([big]), "t", 7)
    assert back.values == {"timestamp": 5, "operationMetrics": {"n": 2**70 + 1}, "keys": {"1": "a"}}

    # What json refuses is refused, not written as something else.
    @dataclasses.dataclass
    class Opaque:
        x: int

    with pytest.raises(TypeError):
        actions_to_jsonl([CommitInfo({"timestamp": 5, "odd": Opaque(1)})])


def test_txn_ids_are_version_4_uuids_never_shared_with_a_forked_child() -> None:
    import uuid

    from serialake.core.txn.options import _uuid4_texts, new_txn_id

    raw = os.urandom(16 * 50)
    assert _uuid4_texts(raw) == [str(uuid.UUID(bytes=raw[i : i + 16], version=4)) for i in range(0, 800, 16)]
    ids = [new_txn_id() for _ in range(300)]
    assert len(set(ids)) == 300
    assert all(uuid.UUID(i).version == 4 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
    if not hasattr(os, "fork"):
        return
    new_txn_id()  # the pool holds ids the parent has not handed out yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the ids it draws go back to the parent
        os.close(read)
        os.write(write, ",".join(new_txn_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        child = f.read().decode().split(",")
    os.waitpid(pid, 0)
    parent = [new_txn_id() for _ in range(10)]
    assert len(child) == 10 and not set(child) & set(parent)


def test_add_path_escaping_table_is_rejected(make_table):
    log = make_table()
    bad = AddFile(path="../elsewhere/x.parquet", partition_values={"p": "1"}, size=1, modification_time=0)
    with pytest.raises(DeltaIllegalArgumentException, match="escapes the table directory"):
        log.start_transaction().commit([bad])
    bad_abs = AddFile(path="/etc/passwd", partition_values={"p": "1"}, size=1, modification_time=0)
    with pytest.raises(DeltaIllegalArgumentException, match="escapes the table directory"):
        log.start_transaction().commit([bad_abs])
    assert log.update().version == 0


# -- properties and features -------------------------------------------------------
def test_isolation_level_property_validated(make_table):
    log = make_table()
    t = log.start_transaction()
    with pytest.raises(InvalidPropertyError, match="Serializable, WriteSerializable"):
        t.update_metadata(t.metadata.with_configuration(**{"delta.isolationLevel": "ReadCommitted"}))
    t.update_metadata(t.metadata.with_configuration(**{"delta.isolationLevel": "serializable"}))
    t.commit([])
    snap = log.update()
    assert snap.configuration["delta.isolationLevel"] == "Serializable"
    assert snap.isolation_level == "Serializable"


def test_unknown_delta_property_rejected(make_table):
    log = make_table()
    t = log.start_transaction()
    with pytest.raises(InvalidPropertyError, match="delta.checkpointIntervall"):
        t.update_metadata(t.metadata.with_configuration(**{"delta.checkpointIntervall": "5"}))
    with pytest.raises(InvalidPropertyError, match="a positive integer"):
        t.update_metadata(t.metadata.with_configuration(**{"delta.checkpointInterval": "-1"}))
    t.update_metadata(t.metadata.with_configuration(**{"owner": "data-eng"}))  # user properties pass


def test_unsupported_reader_feature_named(tmp_path):
    log = DeltaLog(str(tmp_path / "t"))
    t = log.start_transaction()
    t.update_metadata(Metadata(schema_string=SCHEMA))
    t.update_protocol(Protocol(3, 7, ("fancyFeature",), ("fancyFeature",)))
    with pytest.raises(UnsupportedFeatureError, match="fancyFeature"):
        t.commit([])
    # Written by someone else: reading fails naming the feature.
    os.makedirs(log.log_path, exist_ok=True)
    with open(log.commit_path(0), "w") as f:
        f.write(Protocol(3, 7, ("fancyFeature",), ("fancyFeature",)).to_json() + "\n")
        f.write(Metadata(schema_string=SCHEMA).to_json() + "\n")
    with pytest.raises(UnsupportedFeatureError, match="fancyFeature"):
        DeltaLog(log.table_path).update()


def test_enabling_deletion_vectors_upgrades_protocol(make_table):
    log = make_table()
    t = log.start_transaction()
    t.update_metadata(t.metadata.with_configuration(**{"delta.enableDeletionVectors": "true"}))
    t.commit([])
    p = log.update().protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert "deletionVectors" in p.reader_features and "deletionVectors" in p.writer_features


def test_append_only_table_refuses_removes(make_table):
    log = make_table(props={"delta.appendOnly": "true"})
    t = log.start_transaction()
    f = t.filter_files(["p = 1"])[0]
    with pytest.raises(Exception, match="append-only"):
        t.commit([f.remove()])


# -- commit loop under faults --------------------------------------------------------
def test_lost_put_response_is_not_applied_twice(make_table):
    log = make_table()
    faulty = FaultyLogStore(LocalLogStore(), FaultPlan(lose_put_response=1.0, seed=1))
    flog = DeltaLog(log.table_path, store=faulty)
    v = flog.start_transaction().commit([add_file(7)])
    assert v == 1 and faulty.counts["lost_put_response"] == 1
    assert DeltaLog(log.table_path).update().version == 1  # exactly one commit landed


def test_failed_puts_and_reads_are_retried(make_table):
    log = make_table()
    faulty = FaultyLogStore(LocalLogStore(), FaultPlan(fail_put=0.5, fail_read=0.1, lose_put_response=0.3, seed=7))
    flog = DeltaLog(log.table_path, store=faulty)
    versions = [flog.start_transaction().commit([add_file(1)]) for _ in range(30)]
    snap = DeltaLog(log.table_path).update()
    assert versions == list(range(1, 31)) and snap.version == 30 and snap.num_files == 33
    assert sum(faulty.counts.values()) > 0


def test_in_commit_timestamps_strictly_increase(make_table):
    log = make_table(props={"delta.enableInCommitTimestamps": "true"})
    assert "inCommitTimestamp" in log.update().protocol.writer_features
    t = log.start_transaction()
    for _ in range(3):
        log.start_transaction().commit([add_file(1)])
    t.commit([add_file(2)])
    stamps = [log.read_commit(v).commit_info.get("inCommitTimestamp") for v in range(0, 5)]
    assert all(s is not None for s in stamps)
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    first = open(log.commit_path(4)).readline()
    assert first.startswith('{"commitInfo":{"inCommitTimestamp"')


def test_change_data_feed_table_refuses_rewrites_without_change_data(make_table):
    log = make_table(props={"delta.enableChangeDataFeed": "true"})
    log.start_transaction().commit([add_file(1)])  # appends are fine
    t = log.start_transaction()
    f = t.filter_files(["p = 1"])[0]
    with pytest.raises(UnsupportedFeatureError, match="enableChangeDataFeed"):
        t.commit([f.remove(), add_file(1)], operation="UPDATE")


def test_unknown_outcome_is_reported_as_unknown(make_table):
    from serialake.core import CommitOptions
    from serialake.exceptions import CommitOutcomeUnknownError

    log = make_table()
    plan = FaultPlan()
    faulty = FaultyLogStore(LocalLogStore(), plan)
    flog = DeltaLog(log.table_path, store=faulty)
    txn = flog.start_transaction(options=CommitOptions(max_attempts=3, backoff_base_s=0.0001))
    plan.lose_put_response = 1.0
    plan.fail_read = 1.0
    with pytest.raises(CommitOutcomeUnknownError) as e:
        txn.commit([add_file(1)])
    assert e.value.txn_id == txn.txn_id
    landed = DeltaLog(log.table_path).read_commit(1).commit_info.txn_id
    assert landed == txn.txn_id  # it did land: the error must not claim otherwise


def test_big_table_checkpoints_run_in_the_checkpoint_worker(make_table, monkeypatch):
    """The checkpoint worker (a child process) writes the same checkpoint the committing process would."""
    log = make_table(props={"delta.checkpointInterval": "5"})
    for i in range(4):
        log.start_transaction().commit([add_file(i % 3)])
    monkeypatch.setenv("SERIALAKE_CHECKPOINT_PROCESS", "always")
    assert log._checkpoint_in_worker(log.update())
    log.start_transaction().commit([add_file(1)])  # version 5: a checkpoint is due
    log.wait_for_checkpoints()
    assert log.last_checkpoint_error is None
    names = os.listdir(log.log_path)
    assert "00000000000000000005.checkpoint.parquet" in names
    from_cp = DeltaLog(log.table_path).update()
    assert from_cp.segment.checkpoint.version == 5
    assert {f.path for f in from_cp.all_files} == {f.path for f in _replay_without_checkpoints(log).all_files}
    monkeypatch.setenv("SERIALAKE_CHECKPOINT_PROCESS", "never")
    assert not log._checkpoint_in_worker(log.update())
    monkeypatch.setenv("SERIALAKE_CHECKPOINT_PROCESS", "auto")
    assert not log._checkpoint_in_worker(log.update())  # small tables: in this process


def test_worker_checkpoints_are_put_off_to_a_bounded_share_of_a_cpu(make_table, monkeypatch):
    """A checkpoint due while the table's newest one is younger than the last one's CPU divided by
    ``CHECKPOINT_CPU_SHARE`` is put off, then written at the newest version when that time has passed;
    ``wait_for_checkpoints`` writes a put-off one at once."""
    import time

    log = make_table(props={"delta.checkpointInterval": "5"})
    monkeypatch.setenv("SERIALAKE_CHECKPOINT_PROCESS", "always")
    for i in range(5):
        log.start_transaction().commit([add_file(i % 3)])  # version 5: due, the first one: written
    log.wait_for_checkpoints()
    names = os.listdir(log.log_path)
    assert "00000000000000000005.checkpoint.parquet" in names and log._checkpoint_cpu
    monkeypatch.setattr(DeltaLog, "CHECKPOINT_CPU_SHARE", log._checkpoint_cpu / 2.0)  # a 2 s gap

    for i in range(5):
        log.start_transaction().commit([add_file(i % 3)])  # version 10: due, put off
    log._pending_checkpoint.result()
    assert "00000000000000000010.checkpoint.parquet" not in os.listdir(log.log_path)
    assert log._checkpoint_later is not None and log._checkpoint_later.is_alive()
    deadline = time.monotonic() + 30
    while "00000000000000000010.checkpoint.parquet" not in os.listdir(log.log_path):
        assert time.monotonic() < deadline, "the put-off checkpoint was never written"
        time.sleep(0.05)
    assert log.last_checkpoint_error is None

    for i in range(5):
        log.start_transaction().commit([add_file(i % 3)])  # version 15: due, put off again
    log._pending_checkpoint.result()
    assert "00000000000000000015.checkpoint.parquet" not in os.listdir(log.log_path)
    log.wait_for_checkpoints()  # writes it now
    assert "00000000000000000015.checkpoint.parquet" in os.listdir(log.log_path)
    from_cp = DeltaLog(log.table_path).update()
    assert from_cp.segment.checkpoint.version == 15
    assert {f.path for f in from_cp.all_files} == {f.path for f in _replay_without_checkpoints(log).all_files}


def test_a_background_checkpoint_is_skipped_while_another_process_writes_one(make_table):
    """Background checkpoints (this process's thread, its worker) skip the interval while another
    process holds the table's checkpoint lock (an flock on ``_delta_log``), then run again; an
    explicit checkpoint never skips."""
    import subprocess
    import sys

    log = make_table(props={"delta.checkpointInterval": "2"})
    log.start_transaction().commit([add_file(1)])  # version 1
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", log.log_path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        log.start_transaction().commit([add_file(2)])  # version 2: due, but another process is writing one
        log.wait_for_checkpoints()
        assert log.last_checkpoint_error is None
        assert not [n for n in os.listdir(log.log_path) if "checkpoint" in n]
        assert log.checkpoint_if_due(2, unless_busy=True) is None
        assert log.checkpoint_in_worker(2) is None  # the worker process skips it too
        assert not [n for n in os.listdir(log.log_path) if "checkpoint" in n]
        assert log.checkpoint_if_due(2)["version"] == 2  # not a background one: written
    finally:
        holder.communicate("")  # (it exits when its stdin closes, releasing the lock)
        if holder.poll() is None:
            os.kill(holder.pid, 9)
    assert holder.returncode == 0
    for i in range(2):
        log.start_transaction().commit([add_file(i)])  # version 4: due, and nobody else writes one
    log.wait_for_checkpoints()
    assert "00000000000000000004.checkpoint.parquet" in os.listdir(log.log_path)
    assert DeltaLog(log.table_path).update().segment.checkpoint.version == 4


def test_a_failed_worker_checkpoint_names_the_table_and_version(make_table):
    from serialake.exceptions import CheckpointError

    log = make_table()
    with pytest.raises(CheckpointError) as e:
        log.checkpoint_in_worker(99)  # no such version
    assert log.table_path in str(e.value) and "version 99" in str(e.value)
    assert "checkpoint.parquet" not in " ".join(os.listdir(log.log_path))


def test_the_checkpoint_worker_serves_many_checkpoints_and_comes_back_after_dying(make_table):
    """One worker process writes checkpoint after checkpoint (no interpreter start per checkpoint);
    killed, it is started again and the checkpoint still written; one already there is skipped."""
    import signal

    from serialake.core.log.children import quiet_worker

    log = make_table()
    worker = quiet_worker("serialake.core.log.checkpoint_worker")
    starts = worker.starts
    for i in range(3):
        log.start_transaction().commit([add_file(i)])
        assert log.checkpoint_in_worker(log.update().version)["version"] == log.update().version
    assert worker.starts <= starts + 1  # (none if an earlier test started it)
    assert worker._child is not None
    started = worker.starts
    os.kill(worker._child.pid, signal.SIGKILL)
    worker._child.wait()
    log.start_transaction().commit([add_file(9)])
    version = log.update().version
    assert log.checkpoint_in_worker(version)["version"] == version
    assert worker.starts == started + 1
    assert log.checkpoint_in_worker(version) is None  # there already
    from_cp = DeltaLog(log.table_path).update()
    assert from_cp.segment.checkpoint.version == version
    assert {f.path for f in from_cp.all_files} == {f.path for f in _replay_without_checkpoints(log).all_files}


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling classes")
def test_a_checkpoint_child_runs_at_idle_priority_on_any_cpu():
    """The child is made idle-class by the parent, before its interpreter runs any of its own
    code, and left free to run on every CPU this process may use (pinning it skewed the
    scheduler against the committers: ``children.quiet_child``)."""
    import subprocess
    import sys

    from serialake.core.log.children import quiet_child

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        quiet_child(child.pid)
        assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE
        assert os.sched_getaffinity(child.pid) == os.sched_getaffinity(0)
    finally:
        child.communicate(b"")


def test_a_checkpoint_is_written_here_when_the_worker_cannot_start(make_table, monkeypatch):
    """No worker process (here: no Python to start it with): the checkpoint is written by this process."""
    from serialake.core.log import children

    log = make_table(props={"delta.checkpointInterval": "3"})
    monkeypatch.setenv("SERIALAKE_CHECKPOINT_PROCESS", "always")
    worker = "serialake.core.log.checkpoint_worker"
    monkeypatch.setitem(children._WORKERS, worker, children.QuietWorker("no.such.module"))
    monkeypatch.setattr(children.sys, "executable", "/nonexistent/python")
    for i in range(3):
        log.start_transaction().commit([add_file(i)])
    log.wait_for_checkpoints()
    assert log.last_checkpoint_error is None
    assert "00000000000000000003.checkpoint.parquet" in os.listdir(log.log_path)


def test_logs_nothing_holds_are_dropped_past_the_recent_ones(tmp_path):
    """A process visiting many tables keeps at most ``RECENT_LOGS`` logs nothing else holds: the rest
    go with their snapshots. A log something holds stays its table's one instance however many
    tables are opened after it, and a dropped table reopens from its log."""
    import gc

    def create(name: str) -> DeltaLog:
        log = DeltaLog.for_table(str(tmp_path / name))
        txn = log.start_transaction()
        txn.update_metadata(Metadata(schema_string=SCHEMA))
        txn.commit([add_file(name=f"{name}.parquet")], operation="CREATE TABLE")
        assert log.snapshot().version == 0
        return log

    DeltaLog.clear_cache()
    held = create("held")
    n = 3 * DeltaLog.RECENT_LOGS
    for i in range(n):
        create(f"t{i}")
    gc.collect()
    alive = len(DeltaLog._instances)
    assert alive <= DeltaLog.RECENT_LOGS + 1, alive  # the recent ones and the held one
    assert DeltaLog.for_table(str(tmp_path / "held")) is held
    last = str(tmp_path / f"t{n - 1}")
    assert DeltaLog.for_table(last) is DeltaLog.for_table(last)
    first = DeltaLog.for_table(str(tmp_path / "t0"))  # dropped long ago: read again from its log
    assert [a.path for a in first.snapshot().all_files] == ["t0.parquet"]
