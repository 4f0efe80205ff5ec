"""Storage errors are classified: a write that certainly failed is reported at once with its errno.

Only an outcome that cannot be known (the file may or may not have landed, or it landed
but may not survive a crash) is "unknown". The real conditions (a full disk, a read-only
file system, a permission error) run in a subprocess with its own mount namespace or user.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from serialake.core import DeltaLog
from serialake.core.log.logfiles import commit_name
from serialake.core.txn.transaction import TRANSIENT_WRITE_RETRIES
from serialake.exceptions import (
    CommitOutcomeUnknownError,
    CommitWriteFailedError,
    CorruptLogError,
    InvalidTableError,
    StorageWriteError,
)
from serialake.storage.base import WriteNotDoneError, WriteNotDurableError
from serialake.storage.faulty import FaultPlan, FaultyLogStore
from serialake.storage.local import LocalLogStore
from tests.core.conftest import add_file

REPO = Path(__file__).resolve().parents[2]


class FailingPuts(LocalLogStore):
    """A local store whose commit puts fail as told: ``plan`` is a list of exceptions (None = really write)."""

    def __init__(self, plan: list[BaseException | None]) -> None:
        super().__init__(fsync=False)
        self.plan = list(plan)
        self.puts = 0

    def put_if_absent(self, path: str, data: bytes) -> None:
        if not path.endswith(".json"):
            return super().put_if_absent(path, data)
        self.puts += 1
        fault = self.plan.pop(0) if self.plan else None
        if isinstance(fault, WriteNotDurableError):
            super().put_if_absent(path, data)  # it landed; only the directory sync "failed"
        if fault is not None:
            raise fault
        super().put_if_absent(path, data)


def _commit_through(log: DeltaLog, store: FailingPuts) -> int:
    flaky = DeltaLog(log.table_path, store=store)
    return flaky.start_transaction().commit([add_file(1)], operation="WRITE")


def _not_done(err: int, phase: str = "write the temporary file") -> WriteNotDoneError:
    return WriteNotDoneError(OSError(err, os.strerror(err)), "x", phase)


def _no_commit_after(log: DeltaLog, version: int) -> None:
    names = os.listdir(log.log_path)
    assert commit_name(version + 1) not in names
    assert not [n for n in names if n.startswith(".")], names  # no temporary file left


@pytest.mark.parametrize(
    ("err", "advice"),
    [
        (errno.ENOSPC, "is full"),
        (errno.EROFS, "read-only"),
        (errno.EACCES, "may not create files"),
    ],
)
def test_definite_failure_is_reported_at_once_with_errno(make_table, err: int, advice: str) -> None:
    log = make_table()
    store = FailingPuts([_not_done(err)] * 100)
    with pytest.raises(CommitWriteFailedError) as info:
        _commit_through(log, store)
    e = info.value
    assert store.puts == 1  # no retry loop
    assert e.errno == err and e.version == 1 and e.table == log.table_path
    msg = str(e)
    assert errno.errorcode[err] in msg and os.strerror(err) in msg and "version 1" in msg and advice in msg
    assert "Nothing was committed" in msg
    _no_commit_after(log, 0)


def test_transient_failure_is_retried_briefly(make_table) -> None:
    log = make_table()
    store = FailingPuts([_not_done(errno.EIO), _not_done(errno.EINTR)])
    assert _commit_through(log, store) == 1
    assert store.puts == 3


def test_persistent_transient_failure_is_bounded(make_table) -> None:
    log = make_table()
    store = FailingPuts([_not_done(errno.EIO)] * 100)
    with pytest.raises(CommitWriteFailedError, match="EIO"):
        _commit_through(log, store)
    assert store.puts == TRANSIENT_WRITE_RETRIES + 1
    _no_commit_after(log, 0)


def test_failed_directory_sync_is_unknown_not_failed(make_table) -> None:
    log = make_table()
    store = FailingPuts([WriteNotDurableError(OSError(errno.EIO, os.strerror(errno.EIO)), "x")])
    with pytest.raises(CommitOutcomeUnknownError) as info:
        _commit_through(log, store)
    assert info.value.version == 1 and "may not survive a crash" in str(info.value)
    assert commit_name(1) in os.listdir(log.log_path)  # visible: never reported as "not committed"


def test_lost_response_is_resolved_by_txn_id(make_table) -> None:
    """An OSError whose outcome is unknown: the commit landed, the winners check finds our txnId."""

    class LostResponse(LocalLogStore):
        def put_if_absent(self, path: str, data: bytes) -> None:
            super().put_if_absent(path, data)
            if path.endswith(".json"):
                raise OSError(errno.ETIMEDOUT, "response lost")

    log = make_table()
    flaky = DeltaLog(log.table_path, store=LostResponse(fsync=False))
    txn = flaky.start_transaction()
    assert txn.commit([add_file(1)], operation="WRITE") == 1
    assert sorted(n for n in os.listdir(log.log_path) if n.endswith(".json")) == [commit_name(0), commit_name(1)]


def test_corrupt_winner_fails_fast_instead_of_spinning(make_table) -> None:
    log = make_table()
    txn = log.start_transaction()
    Path(log.log_path, commit_name(1)).write_text("{not json\n")
    with pytest.raises(CorruptLogError, match="version 1"):
        txn.commit([add_file(1)], operation="WRITE")
    assert commit_name(2) not in os.listdir(log.log_path)


def test_winner_with_invalid_partition_value_is_not_built_upon(make_table) -> None:
    log = make_table()  # partitioned by p INT
    txn = log.start_transaction()
    bad = add_file(1)
    bad_json = {"add": {"path": bad.path, "partitionValues": {"p": "abc"}, "size": 1, "modificationTime": 0,
                        "dataChange": True}}
    Path(log.log_path, commit_name(1)).write_text(json.dumps(bad_json) + "\n")
    with pytest.raises(InvalidTableError) as info:
        txn.commit([add_file(2)], operation="WRITE")
    assert info.value.version == 1 and "abc" in str(info.value)
    assert commit_name(2) not in os.listdir(log.log_path)


# -- real conditions ---------------------------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    sys.path.insert(0, {repo!r})
    from serialake.core import DeltaLog
    from serialake.core.model.actions import Metadata
    from tests.core.conftest import SCHEMA, add_file

    mode, root = sys.argv[1], sys.argv[2]
    path = os.path.join(root, "t")
    log = DeltaLog(path)
    txn = log.start_transaction()
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",)))
    txn.commit([add_file(1)], operation="CREATE TABLE")
    if mode == "enospc":
        with open(os.path.join(root, "filler"), "wb", buffering=0) as f:
            for size in (65536, 4096, 512, 1):
                try:
                    while True:
                        f.write(b"\\0" * size)
                except OSError:
                    pass
    elif mode == "erofs":
        subprocess.run(["mount", "-o", "remount,ro", root], check=True)
    elif mode == "eacces":
        os.setgid(65534)
        os.setuid(65534)
    DeltaLog.clear_cache()
    start = time.monotonic()
    try:
        DeltaLog(path).start_transaction().commit([add_file(1)], operation="WRITE")
        out = {{"type": None}}
    except Exception as e:
        out = {{"type": type(e).__name__, "message": str(e), "errno": getattr(e, "errno", None)}}
    out["elapsed"] = time.monotonic() - start
    out["files"] = sorted(os.listdir(os.path.join(path, "_delta_log")))
    print(json.dumps(out))
    """
)


def _run_real(tmp_path: Path, mode: str) -> dict:
    # World-traversable (pytest's tmp dirs are not), so another user can read but not write.
    base = Path(tempfile.mkdtemp(prefix="serialake-storage-"))
    try:
        return _run_real_in(base, mode)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run_real_in(base: Path, mode: str) -> dict:
    os.chmod(base, 0o755)
    script = base / "scenario.py"
    script.write_text(_SCRIPT.format(repo=str(REPO)))
    root = base / "mnt"
    root.mkdir()
    if mode == "eacces":
        cmd = [sys.executable, str(script), mode, str(root)]
    else:
        inner = f"mount -t tmpfs -o size=512k tmpfs {root} && exec {sys.executable} {script} {mode} {root}"
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for real mounts"
)


@needs_root
@pytest.mark.parametrize(
    ("mode", "err"), [("enospc", errno.ENOSPC), ("erofs", errno.EROFS), ("eacces", errno.EACCES)]
)
def test_real_storage_failures_fail_fast_with_errno(tmp_path: Path, mode: str, err: int) -> None:
    out = _run_real(tmp_path, mode)
    assert out["type"] == "CommitWriteFailedError", out
    assert out["errno"] == err and os.strerror(err) in out["message"] and "version 1" in out["message"]
    assert out["elapsed"] < 10, out  # not the 10-minute "outcome unknown" loop
    assert out["files"] == [commit_name(0)], out  # nothing landed, no temporary file


def test_checkpoint_write_failure_names_table_and_version(make_table) -> None:
    class FullOnCheckpoint(LocalLogStore):
        def write(self, path: str, data: bytes) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    log = make_table()
    log.start_transaction().commit([add_file(1)], operation="WRITE")
    flaky = DeltaLog(log.table_path, store=FullOnCheckpoint(fsync=False))
    with pytest.raises(StorageWriteError) as info:
        flaky.checkpoint(1)
    e = info.value
    assert e.version == 1 and e.errno == errno.ENOSPC and e.table == log.table_path
    assert "checkpoint of version 1" in str(e) and "is full" in str(e)


# -- per-step faults in the real local store (storage.faulty) ------------------------------------


def _faulty(
    log: DeltaLog, *, fsync: bool = False, tmpfile: bool = True, **plan: object
) -> tuple[DeltaLog, FaultyLogStore]:
    local = LocalLogStore(fsync=fsync)
    if not tmpfile:
        local._tmpfile_ok = False  # the named temporary file + link path
    store = FaultyLogStore(local, FaultPlan(**plan))  # type: ignore[arg-type]
    return DeltaLog(log.table_path, store=store), store


@pytest.mark.parametrize("tmpfile", [True, False], ids=["o_tmpfile", "named_temp"])
@pytest.mark.parametrize("step", ["mkdir", "create", "write", "fsync", "link"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_failure_before_or_at_the_link_is_definite(make_table, step: str, err: int, tmpfile: bool) -> None:
    log = make_table()
    flog, store = _faulty(log, fsync=True, tmpfile=tmpfile, step_errno={step: err})
    with pytest.raises(CommitWriteFailedError) as info:
        flog.start_transaction().commit([add_file(1)], operation="WRITE")
    e = info.value
    assert store.commit_puts == 1 and store.counts[f"fail_{step}"] == 1  # no retry loop
    assert e.errno == err and e.version == 1 and e.table == log.table_path
    assert errno.errorcode[err] in str(e) and os.strerror(err) in str(e) and "Nothing was committed" in str(e)
    assert isinstance(e.__cause__, WriteNotDoneError)
    _no_commit_after(log, 0)


def test_transient_failure_of_a_step_is_retried_briefly(make_table) -> None:
    log = make_table()
    flog, store = _faulty(log, step_errno={"write": errno.EIO}, step_times=2)
    assert flog.start_transaction().commit([add_file(1)], operation="WRITE") == 1
    assert store.commit_puts == 3 and store.counts["fail_write"] == 2
    _no_commit_after(log, 1)


def test_lost_link_result_is_resolved_by_txn_id(make_table) -> None:
    """The link made the name but its result was lost: the log holds our txnId, so it committed once."""
    log = make_table()
    flog, store = _faulty(log, step_errno={"linked": errno.EIO}, step_times=1)
    txn = flog.start_transaction()
    assert txn.commit([add_file(1)], operation="WRITE") == 1
    assert store.commit_puts == 1 and store.counts["fail_linked"] == 1
    assert DeltaLog(log.table_path).read_commit(1).commit_info.txn_id == txn.txn_id
    _no_commit_after(log, 1)


def test_unknown_link_error_that_did_not_land_is_retried(make_table) -> None:
    """EIO from the link itself (outcome unknown): the log shows it did not land, so writing again is safe."""
    log = make_table()
    flog, store = _faulty(log, step_errno={"link": errno.EIO}, step_times=1)
    assert flog.start_transaction().commit([add_file(1)], operation="WRITE") == 1
    assert store.commit_puts == 2
    _no_commit_after(log, 1)


def test_persistent_unknown_link_error_is_bounded_and_definite_once_checked(make_table) -> None:
    from serialake.core.txn.transaction import UNKNOWN_WRITE_RETRIES

    log = make_table()
    flog, store = _faulty(log, step_errno={"link": errno.ETIMEDOUT})
    with pytest.raises(CommitWriteFailedError) as info:
        flog.start_transaction().commit([add_file(1)], operation="WRITE")
    e = info.value
    assert store.commit_puts == UNKNOWN_WRITE_RETRIES  # not 10,000 attempts over 10 minutes
    assert e.errno == errno.ETIMEDOUT and "ETIMEDOUT" in str(e) and "version 1" in str(e)
    assert "the log showed it had not landed" in str(e)
    _no_commit_after(log, 0)


def test_lost_link_result_with_unreadable_log_is_unknown(make_table) -> None:
    """Only when the log cannot be read after a lost result does the outcome stay unknown."""
    from serialake.core import CommitOptions

    log = make_table()
    flog, store = _faulty(log, step_errno={"linked": errno.EIO})
    txn = flog.start_transaction(options=CommitOptions(max_attempts=3, backoff_base_s=0.0001))
    store.plan.fail_read = 1.0  # from now on the log cannot be read
    with pytest.raises(CommitOutcomeUnknownError) as info:
        txn.commit([add_file(1)], operation="WRITE")
    e = info.value
    assert e.txn_id == txn.txn_id and e.version == 1 and "EIO" in str(e)
    assert DeltaLog(log.table_path).read_commit(1).commit_info.txn_id == txn.txn_id  # it did land


def test_failed_directory_sync_after_the_link_is_not_durable(make_table) -> None:
    log = make_table()
    flog, store = _faulty(log, fsync=True, step_errno={"fsync-dir": errno.EIO})
    with pytest.raises(CommitOutcomeUnknownError) as info:
        flog.start_transaction().commit([add_file(1)], operation="WRITE")
    assert info.value.version == 1 and "may not survive a crash" in str(info.value) and "EIO" in str(info.value)
    assert store.commit_puts == 1
    assert commit_name(1) in os.listdir(log.log_path)


@pytest.mark.parametrize("step", ["create", "write", "replace"])
def test_checkpoint_step_failure_names_table_version_and_errno(make_table, step: str) -> None:
    log = make_table()
    log.start_transaction().commit([add_file(1)], operation="WRITE")
    flog, _ = _faulty(log, step_errno={step: errno.ENOSPC}, step_suffix=".checkpoint.parquet")
    with pytest.raises(StorageWriteError) as info:
        flog.checkpoint(1)
    e = info.value
    assert e.version == 1 and e.errno == errno.ENOSPC and e.table == log.table_path
    assert "checkpoint of version 1" in str(e) and "ENOSPC" in str(e) and "is full" in str(e)
    names = os.listdir(log.log_path)
    assert not [n for n in names if "checkpoint" in n or n.startswith(".")], names


def test_background_checkpoint_failure_keeps_the_commit(make_table, caplog: pytest.LogCaptureFixture) -> None:
    log = make_table(props={"delta.checkpointInterval": "2"})
    flog, _ = _faulty(log, step_errno={"create": errno.ENOSPC}, step_suffix=".checkpoint.parquet")
    with caplog.at_level("WARNING", logger="serialake"):
        assert flog.start_transaction().commit([add_file(1)], operation="WRITE") == 1
        assert flog.start_transaction().commit([add_file(1)], operation="WRITE") == 2
        flog.wait_for_checkpoints()
    err = flog.last_checkpoint_error
    assert isinstance(err, StorageWriteError) and err.version == 2 and err.errno == errno.ENOSPC
    warning = "\n".join(r.getMessage() for r in caplog.records)
    assert log.table_path in warning and "version 2" in warning and "ENOSPC" in warning
    assert DeltaLog(log.table_path).update().version == 2
