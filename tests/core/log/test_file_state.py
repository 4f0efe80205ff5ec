"""The columnar file state of a big table: checkpoint rows read in blocks, null fields left unread,
skipping caches shared by the snapshots that share the rows."""

from __future__ import annotations

import json

import pytest

from serialake.core import DeltaLog
from serialake.core.log import checkpoint
from serialake.core.model.actions import AddFile
from serialake.storage import LocalLogStore
from serialake.storage.faulty import LogStoreWrapper
from tests.core.conftest import add_file


def _files(snap) -> dict[str, dict]:
    return {f.path: f.to_dict() for f in snap.all_files}


def _replayed(log: DeltaLog):
    """The table's state read from its JSON commits only (checkpoints hidden)."""
    from serialake.core.log.logfiles import build_segment

    listing = [s for s in log.store.list_from(log.log_path) if s.name.endswith(".json")]
    seg = build_segment(log.store, log.table_path, log.log_path, None, listing=listing)
    return DeltaLog(log.table_path)._load(seg)


def _big_table(make_table, n: int = 60) -> DeltaLog:
    log = make_table(files=[], props={"delta.checkpointInterval": "1000"})
    adds = [add_file(i % 4, min={"x": i}, max={"x": i + 1}) for i in range(n)]
    adds[5] = AddFile(**{**adds[5].__dict__, "tags": {"owner": "gdpr"}})
    log.start_transaction().commit(adds)
    log.checkpoint()
    return log


def test_checkpoint_rows_read_in_blocks_equal_the_replayed_log(make_table, monkeypatch):
    log = _big_table(make_table)
    whole = DeltaLog(log.table_path)
    assert len(whole.update().file_state.blocks) == 1
    monkeypatch.setattr(checkpoint, "ADD_BLOCK_ROWS", 7)
    blocked = DeltaLog(log.table_path)
    assert len(blocked.update().file_state.blocks) == 9  # 60 add rows after the protocol and metadata rows
    assert _files(blocked.update()) == _files(whole.update()) == _files(_replayed(log))
    tagged = next(f for f in blocked.update().all_files if f.tags)
    assert tagged.tags == {"owner": "gdpr"}
    for pred in (["p = 1"], ["x > 40"], ["p = 2", "x <= 30"], ["x IS NULL"], ["p = 3 OR x < 5"]):
        got = [f.path for f in blocked.start_transaction().filter_files(pred)]
        assert got == [f.path for f in whole.start_transaction().filter_files(pred)], pred
        if pred == ["p = 1"]:
            assert len(got) == 15


def test_removes_after_the_checkpoint_hide_rows_of_any_block(make_table, monkeypatch):
    log = _big_table(make_table)
    monkeypatch.setattr(checkpoint, "ADD_BLOCK_ROWS", 7)
    fresh = DeltaLog(log.table_path)
    txn = fresh.start_transaction()
    victims = txn.filter_files(["x >= 50"])  # rows of the last blocks
    assert len(victims) == 11  # file i holds x in [i, i + 1]
    txn.commit([f.remove() for f in victims])
    snap = DeltaLog(log.table_path).update()
    assert len(snap.file_state.blocks) == 9 and snap.num_files == 49
    assert DeltaLog(log.table_path).start_transaction().filter_files(["x >= 50"]) == []
    assert {f.path for f in DeltaLog(log.table_path).start_transaction().filter_files(["x >= 45"])} == {
        f.path for f in _replayed(log).all_files if json.loads(f.stats)["minValues"]["x"] >= 44
    }
    # Once every file is built, a filter returns those objects, found past the hidden rows.
    reader = DeltaLog(log.table_path)
    built = {f.path: f for f in reader.update().all_files}
    picked = reader.start_transaction().filter_files(["x >= 45"])
    fresh_pick = DeltaLog(log.table_path).start_transaction().filter_files(["x >= 45"])
    assert [f.path for f in picked] == [f.path for f in fresh_pick]
    assert len(picked) == 5 and all(built[f.path] is f for f in picked)


def test_fields_null_in_every_row_are_not_read(make_table):
    log = _big_table(make_table)
    (block,) = DeltaLog(log.table_path).update().file_state.blocks
    names = set(block.table.column_names)
    assert {"path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags"} <= names
    assert not names & {"deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider"}


def test_skip_caches_live_with_the_rows_and_serve_later_snapshots(make_table):
    log = _big_table(make_table)
    reader = DeltaLog(log.table_path)
    first = reader.start_transaction().filter_files(["x > 50"])
    (block,) = reader.update().file_state.blocks
    assert block.skip_cache is not None and len(block.skip_cache) >= 1
    cached = len(block.skip_cache)
    reader.start_transaction().commit([add_file(1, min={"x": 100}, max={"x": 101})])
    snap = reader.update()
    assert snap.file_state.blocks[0] is block  # shared by the new snapshot, with its cache
    again = reader.start_transaction().filter_files(["x > 50"])
    assert len(block.skip_cache) == cached  # served from the cache
    assert {f.path for f in again} == {f.path for f in first} | {
        f.path for f in snap.all_files if json.loads(f.stats)["minValues"]["x"] == 100
    }


def test_stores_open_files_for_column_reads(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    local = LocalLogStore()
    with local.open_input(str(path)) as f:
        assert f.read() == b"0123456789"
    with LogStoreWrapper(local).open_input(str(path)) as f:  # the default: the file read whole
        f.seek(4)
        assert f.read() == b"456789"
    with pytest.raises(FileNotFoundError):
        local.open_input(str(tmp_path / "missing"))


def test_big_files_are_written_whole_in_flushed_slices(tmp_path):
    import os

    data = os.urandom(3 * (256 << 10) + 17)  # a checkpoint-sized file: flushed a slice at a time
    path = str(tmp_path / "_delta_log" / "00000000000000000010.checkpoint.parquet")
    LocalLogStore().write(path, data)
    assert open(path, "rb").read() == data
    assert os.listdir(tmp_path / "_delta_log") == ["00000000000000000010.checkpoint.parquet"]


def test_checkpoint_rows_are_allocated_from_the_log_pool(make_table):
    """The rows a snapshot keeps come from the log pool (jemalloc or the system allocator), not
    pyarrow's default one, which kept most of what a big decode freed (``arrow_memory``)."""
    import pyarrow as pa

    from serialake.core.model.arrow_memory import log_pool

    log = _big_table(make_table, n=2000)
    pool = log_pool()
    before = pool.bytes_allocated()
    snap = DeltaLog(log.table_path).update()
    held = sum(b.table.nbytes for b in snap.file_state.blocks)
    assert held > 0
    if pool is not pa.default_memory_pool():
        assert pool.bytes_allocated() - before >= 0.9 * held  # (nbytes counts shared parts twice)
    assert len(snap.all_files) == 2000


def test_a_process_that_chose_its_arrow_pool_keeps_it():
    import subprocess
    import sys

    code = (
        "import pyarrow as pa; from serialake.core.model.arrow_memory import log_pool; "
        "print(log_pool().backend_name, pa.default_memory_pool().backend_name)"
    )
    env = {**__import__("os").environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["system", "system"]


def test_adds_read_from_the_log_stay_json_until_asked_for_and_replay_the_same() -> None:
    """A refresh keeps the other writers' adds as their checked JSON objects (no AddFile built).
    They must key, replace and remove exactly as the objects would: with and without a deletion
    vector, with and without its offset."""
    from serialake.core.log.filestate import FileState
    from serialake.core.model.actions import RemoveFile

    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4, "sizeInBytes": 40,
          "cardinality": 2}  # fmt: skip
    inline = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
              "sizeInBytes": 40, "cardinality": 1}  # fmt: skip
    objs = [
        {"path": "a.parquet", "partitionValues": {}, "size": 10, "modificationTime": 1, "dataChange": True},
        {"path": "b.parquet", "partitionValues": {"p": "1"}, "size": 20, "modificationTime": 1, "dataChange": True,
         "deletionVector": dv},
        {"path": "c.parquet", "partitionValues": {}, "size": 30, "modificationTime": 1, "dataChange": True,
         "deletionVector": inline, "stats": '{"numRecords":3}'},
    ]  # fmt: skip
    as_json, as_objects = FileState(), FileState()
    as_json.apply(objs)
    as_objects.apply([AddFile._from_obj(o) for o in objs])
    assert list(as_json.extra) == list(as_objects.extra)
    assert all(type(a) is dict for a in as_json.extra.values())  # nothing built yet
    removes = [RemoveFile(path="b.parquet", deletion_vector=AddFile._from_obj(objs[1]).deletion_vector),
               RemoveFile(path="c.parquet")]  # fmt: skip (no such key: c's add has a vector)
    for state in (as_json, as_objects):
        state.apply(removes)
    left = [("a.parquet", None), ("c.parquet", AddFile._from_obj(objs[2]).dv_id)]
    assert list(as_json.extra) == list(as_objects.extra) == left
    assert [f.to_dict() for f in as_json.files()] == [f.to_dict() for f in as_objects.files()]
    assert all(type(a) is AddFile for a in as_json.extra.values())  # built once, in place
    assert as_json.total_size() == as_objects.total_size() == 40
