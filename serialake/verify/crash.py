"""Crash trials: writers SIGKILLed at chosen points, then the table is checked and vacuumed.

A trial forks one or two writer processes onto a table. Each writer loops: write a real
Parquet data file (fsynced), commit it through the core (sometimes rewriting an existing
file, sometimes with an app ``txn``), then append an acknowledgement line (fsynced) to its
own ack file. ``delta.checkpointInterval=2`` makes checkpoints frequent. The parent kills
the writers with SIGKILL either after a random delay or right when one reports reaching a
crash point (it then sleeps there, so the kill lands exactly at that point):

* ``data``: half of a data file written;   * ``before-commit``: data durable, no commit yet;
* ``commit``: the commit's temp file written, not yet linked to its name;
* ``after-commit``: committed, not yet acknowledged;
* ``checkpoint``: checkpoint temp file written, not renamed;
* ``last-checkpoint``: checkpoint in place, ``_last_checkpoint`` not yet updated.

After every kill :func:`check_table` verifies the invariants of issue #4 (and that every
commit carries a txnId a writer noted in its ``.intents`` file before trying it: no
phantom commit) and :func:`check_vacuum` that vacuum would remove only unreferenced files
past retention.

On S3 (``run_crash_trials(table_root="s3://bucket/prefix")``; ``serialake verify --s3``) the
writers commit through the S3 log store and PUT their data files to the bucket; a PUT is
atomic, so there is no half-written file and no temp file, and the points are
(``S3_CRASH_POINTS``):

* ``before-commit``: the data file is in the bucket, no commit yet;
* ``before-put``: the commit is built, its conditional PUT not sent;
* ``after-put``: the conditional PUT landed (the commit exists) but the writer dies before
  the response is used: never acknowledged, so the commit may or may not be counted, but it
  must be whole, once, and not leave a gap;
* ``after-commit``, ``checkpoint`` (before the checkpoint's PUT), ``last-checkpoint``
  (checkpoint in place, ``_last_checkpoint`` not yet PUT), and ``random``.

The hooks live in a subclass of the S3 store used only by the writer processes, so the
store's behaviour is the one shipped. Writers start from a fork server, not by ``fork``:
the S3 client's runtime does not survive ``fork`` (see :mod:`serialake.verify.workload`).
"""

from __future__ import annotations

import errno
import io
import json
import multiprocessing as mp
import os
import random
import re
import select
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from serialake.core.log.checkpoint import read_checkpoint
from serialake.core.log.deltalog import DeltaLog
from serialake.core.log.logfiles import LAST_CHECKPOINT, LOG_DIR, CheckpointRef, read_last_checkpoint, version_of
from serialake.core.log.snapshot import Snapshot, TableState, parse_commit
from serialake.core.model.actions import AddFile, CommitInfo, Metadata, RemoveFile, SetTransaction, decode_path
from serialake.exceptions import DeltaConcurrentModificationException
from serialake.storage import is_local_path, store_for
from serialake.storage.base import FileStatus, LogStore
from serialake.storage.local import LocalLogStore
from serialake.storage.s3 import S3LogStore
from serialake.verify.workload import apply_environment, fork_server, s3_environment

__all__ = [
    "CRASH_POINTS",
    "S3_CRASH_POINTS",
    "CrashReport",
    "VacuumPlan",
    "check_table",
    "check_vacuum",
    "run_crash_trials",
    "vacuum",
    "vacuum_plan",
]

CRASH_POINTS = ("random", "data", "before-commit", "commit", "after-commit", "checkpoint", "last-checkpoint")
S3_CRASH_POINTS = (
    "random", "before-commit", "before-put", "after-put", "after-commit", "checkpoint", "last-checkpoint",
)  # fmt: skip
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
            {"name": "v", "type": "long", "nullable": True, "metadata": {}},
        ],
    }
)
PARTITIONS = ("a", "b", "c")
HOUR_MS = 3_600_000
_PARK_S = 30.0  # how long a writer waits at its crash point for the SIGKILL
_REACH_S = {"local": 5.0, "s3": 15.0}  # how long the parent waits for a writer to reach its point
_COMMIT_FILE = re.compile(r"^\d{20}\.json$")
INTENTS_SUFFIX = ".intents"  # next to each ack file: the txnIds its writer tried to commit


# -- the writer (child process) ---------------------------------------------------------------
class _Point:
    """Where the child stops; reports reaching it through a pipe and parks until killed.

    ``fd`` is the pipe's write end: a file descriptor (forked writers) or a
    ``multiprocessing`` connection (writers from the fork server).
    """

    def __init__(self, point: str, fd: Any, armed_after: int) -> None:
        self.point, self.fd, self.armed_after, self.iteration = point, fd, armed_after, 0

    def hit(self, name: str) -> None:
        if name == self.point and self.iteration >= self.armed_after:
            if isinstance(self.fd, int):
                os.write(self.fd, b"!")
            else:
                self.fd.send_bytes(b"!")
            time.sleep(_PARK_S)


def _install_store_hooks(point: _Point) -> None:
    """Park inside the local store once a file's bytes are written but before it gets its name.

    Commits go through ``linkat`` of an unnamed O_TMPFILE inode (or, as a fallback, a named
    temp file and ``link``); checkpoints and ``_last_checkpoint`` through a temp file and
    ``rename``. The hooks sit right before the naming step of each path.
    """
    import serialake.storage.local as local

    original_temp = local._write_temp

    def write_temp(directory: str, name: str, data: bytes, fsync: bool) -> str:
        tmp = original_temp(directory, name, data, fsync)
        if _COMMIT_FILE.match(name):
            point.hit("commit")
        elif name.endswith(".checkpoint.parquet"):
            point.hit("checkpoint")
        elif name == LAST_CHECKPOINT:
            point.hit("last-checkpoint")
        return tmp

    local._write_temp = write_temp  # type: ignore[assignment]
    original_linkat = getattr(local, "_linkat", None)
    if original_linkat is not None:

        def linkat(olddirfd: int, old: bytes, newdirfd: int, new: bytes, flags: int) -> int:
            if _COMMIT_FILE.match(os.path.basename(new.decode())):
                point.hit("commit")
            return original_linkat(olddirfd, old, newdirfd, new, flags)

        local._linkat = linkat


class _HookedS3Store(S3LogStore):
    """The S3 log store with the crash points around its PUTs (writers only; behaviour unchanged)."""

    def __init__(self, point: _Point) -> None:
        self.point = point

    def put_if_absent(self, path: str, data: bytes) -> None:
        commit = bool(_COMMIT_FILE.match(os.path.basename(path)))
        if commit:
            self.point.hit("before-put")
        super().put_if_absent(path, data)
        if commit:  # landed: the writer dies before the commit loop sees the response
            self.point.hit("after-put")

    def write(self, path: str, data: bytes) -> None:
        name = os.path.basename(path)
        if name.endswith(".checkpoint.parquet"):
            self.point.hit("checkpoint")
        elif name == LAST_CHECKPOINT:
            self.point.hit("last-checkpoint")
        super().write(path, data)


def _parquet(values: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"v": pa.array(values, pa.int64())}), buf)
    return buf.getvalue()


def _data_add(rel: str, part: str, values: list[int], size: int) -> AddFile:
    stats = {"numRecords": len(values), "minValues": {"v": min(values)}, "maxValues": {"v": max(values)}}
    return AddFile(
        path=rel, partition_values={"p": part}, size=size, modification_time=int(time.time() * 1000),
        data_change=True, stats=json.dumps(stats),
    )  # fmt: skip


def _write_s3_data(store: LogStore, table: str, part: str, values: list[int], point: _Point) -> AddFile:
    """A real Parquet file in partition ``part``, PUT to the bucket (atomic) before it is committed."""
    rel = f"p={part}/part-{uuid.uuid4().hex}.parquet"
    data = _parquet(values)
    store.write(f"{table}/{rel}", data)
    return _data_add(rel, part, values, len(data))


def _write_data(table: str, part: str, values: list[int], point: _Point) -> AddFile:
    """A real Parquet file in partition ``part``, durable before it is committed."""
    rel = f"p={part}/part-{uuid.uuid4().hex}.parquet"
    data = _parquet(values)
    full = os.path.join(table, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as fh:
        half = len(data) // 2
        fh.write(data[:half])
        fh.flush()
        point.hit("data")
        fh.write(data[half:])
        fh.flush()
        os.fsync(fh.fileno())
    return _data_add(rel, part, values, len(data))


def _intend(ack_path: str, txn_id: str) -> None:
    """Note a commit attempt's txnId before it starts (``<ack file>.intents``): a commit in the log
    whose txnId no writer noted is a phantom. One write(2): a SIGKILL cannot lose it."""
    with open(ack_path + INTENTS_SUFFIX, "a", encoding="utf-8") as fh:
        fh.write(txn_id + "\n")


def _ack(path: str, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _writer(
    table: str, writer_id: str, ack_path: str, point_name: str, fd: int, seed: int, tmpfile: bool
) -> None:
    """Child: commit data files forever (until killed); ack each commit after it returns.

    ``tmpfile=False`` forces the store's named-temp-file commit path (the fallback where
    O_TMPFILE is unsupported), so both ways of committing are crash-tested.
    """
    DeltaLog.clear_cache()
    rng = random.Random(seed)
    point = _Point(point_name, fd, rng.randint(0, 2))
    _install_store_hooks(point)
    store = LocalLogStore()
    if not tmpfile and hasattr(store, "_tmpfile_ok"):
        store._tmpfile_ok = False
    _write_loop(DeltaLog(table, store=store), writer_id, ack_path, point, rng, _write_data)


def _s3_writer(
    table: str, writer_id: str, ack_path: str, point_name: str, conn: Any, seed: int, env: Mapping[str, str]
) -> None:
    """Child (from the fork server): :func:`_writer` on an S3 table, the crash points in its store."""
    apply_environment(env)
    DeltaLog.clear_cache()
    rng = random.Random(seed)
    point = _Point(point_name, conn, rng.randint(0, 2))
    store = _HookedS3Store(point)

    def write_data(table: str, part: str, values: list[int], point: _Point) -> AddFile:
        return _write_s3_data(store, table, part, values, point)

    _write_loop(DeltaLog(table, store=store), writer_id, ack_path, point, rng, write_data)


def _write_loop(
    log: DeltaLog, writer_id: str, ack_path: str, point: _Point, rng: random.Random,
    write_data: Callable[[str, str, list[int], _Point], AddFile],
) -> None:  # fmt: skip
    """Commit data files forever: sometimes rewriting a file, sometimes with an app ``txn``; ack each."""
    table = log.table_path
    n = 0
    while True:
        point.iteration = n
        n += 1
        txn = log.start_transaction()
        part = rng.choice(PARTITIONS)
        actions: list[Any] = []
        if rng.random() < 0.4:  # rewrite: read a partition, replace one of its files
            files = txn.filter_files([f"p = '{part}'"])
            if files:
                actions.append(rng.choice(files).remove())
        add = write_data(table, part, [rng.randrange(10**6) for _ in range(rng.randint(1, 5))], point)
        actions.append(add)
        if rng.random() < 0.3:
            actions.append(SetTransaction(app_id=writer_id, version=n, last_updated=int(time.time() * 1000)))
        point.hit("before-commit")
        _intend(ack_path, txn.txn_id)
        try:
            version = txn.commit(actions, operation="WRITE")
        except DeltaConcurrentModificationException:
            continue  # the data file stays behind as an orphan: vacuum's business
        point.hit("after-commit")
        removes = [a.path for a in actions if isinstance(a, RemoveFile)]
        txns = {a.app_id: a.version for a in actions if isinstance(a, SetTransaction)}
        _ack(ack_path, {"version": version, "txnId": txn.txn_id, "add": add.path, "remove": removes, "txn": txns})


# -- checks ---------------------------------------------------------------------------------
def _state_key(state: TableState | Snapshot) -> dict[str, Any]:
    """Comparable table state (tombstones by key only: checkpoints drop their stats)."""
    if isinstance(state, Snapshot):
        files = {a.key: a for a in state.all_files}
        tombs = {r.key for r in state.tombstones}
        return {
            "protocol": state.protocol, "metadata": state.metadata, "files": files, "tombstones": tombs,
            "txns": {k: t.version for k, t in state.set_transactions.items()},
            "domains": dict(state.domain_metadata),
        }  # fmt: skip
    return {
        "protocol": state.protocol, "metadata": state.metadata, "files": dict(_materialize(state).files),
        "tombstones": set(state.tombstones), "txns": {k: t.version for k, t in state.txns.items()},
        "domains": dict(state.domains),
    }  # fmt: skip


def replay_from_zero(log: DeltaLog, version: int) -> TableState:
    """Table state at ``version`` from the JSON commits alone, ignoring every checkpoint."""
    state = TableState()
    for v in range(version + 1):
        state.apply(log.read_commit(v).actions)
    return state


def _materialize(state: TableState) -> TableState:
    """Build file actions a checkpoint load may keep columnar (the core's lazy adds)."""
    if hasattr(state, "materialize"):
        state.materialize()
    return state


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in a if a[k] != b[k]]


# -- local or S3: what the checks need of the table's files -------------------------------
def _is_local(table: str) -> bool:
    return is_local_path(table)


def _check_store(table: str) -> LogStore:
    return LocalLogStore() if _is_local(table) else store_for(table)


def _log_names(log: DeltaLog) -> list[str]:
    """Every name in ``_delta_log`` (on the local file system temp files too: they must never be listed)."""
    if _is_local(log.table_path):
        return os.listdir(log.log_path)
    return [st.name for st in log.store.list_from(log.log_path)]


def _log_file(log: DeltaLog, name: str) -> FileStatus:
    if _is_local(log.table_path):
        st = os.stat(os.path.join(log.log_path, name))
        return FileStatus(name, st.st_size, int(st.st_mtime * 1000))
    found = [st for st in log.store.list_from(log.log_path, name) if st.name == name]
    if not found:
        raise FileNotFoundError(errno.ENOENT, "No such log file", f"{log.log_path}/{name}")
    return found[0]


def _data_exists(table: str, rel: str) -> bool:
    if _is_local(table):
        return os.path.exists(os.path.join(table, rel))
    return store_for(table).exists(f"{table}/{rel}")


def check_table(
    table: str,
    ack_files: Iterable[str | os.PathLike[str]],
    checked: set[str] | None = None,
    intent_files: Iterable[str | os.PathLike[str]] | None = None,
) -> list[str]:
    """Violations of the crash invariants (empty when the table is sound).

    ``checked`` holds checkpoint names already compared with a replay (skipped, then added).
    With ``intent_files`` (the writers' ``.intents`` files) every commit after version 0
    must carry a txnId some writer tried to commit: no phantom commit.
    """
    DeltaLog.clear_cache()
    log = DeltaLog(table, store=_check_store(table))
    try:
        snap = log.update()
    except Exception as e:  # noqa: BLE001 - the table must always load
        return [f"table does not load: {type(e).__name__}: {e}"]
    problems = _check_commit_files(log, snap.version)
    problems += _check_acks(log, snap.version, ack_files)
    problems += _check_checkpoints(log, snap, set() if checked is None else checked)
    if intent_files is not None:
        problems += _check_intents(log, snap.version, intent_files)
    for a in snap.all_files:
        if not _data_exists(log.table_path, decode_path(a.path)):
            problems.append(f"live file {a.path} is missing from {'disk' if _is_local(table) else 'the bucket'}")
    return problems


def _check_commit_files(log: DeltaLog, latest: int) -> list[str]:
    """Commits 0..latest exist, parse fully, each with a unique txnId; no temp file is listed."""
    problems: list[str] = []
    names = _log_names(log)
    versions = sorted(v for n in names if (v := version_of(n)) is not None)
    if versions != list(range(latest + 1)):
        problems.append(f"commit versions {versions[:3]}...{versions[-3:]} are not 0..{latest}")
    listed = {st.name for st in log.store.list_from(log.log_path)}
    hidden = [n for n in listed if n.startswith(".")]
    if hidden:
        problems.append(f"temp files are listed as log files: {hidden}")
    seen: dict[str, int] = {}
    for v in versions:
        try:
            actions = parse_commit(log.store.read(log.commit_path(v)), log.table_path, v)
        except Exception as e:  # noqa: BLE001 - a partial commit must never be visible
            problems.append(f"commit {v} does not parse: {e}")
            continue
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        tid = info.txn_id if info else None
        if tid is None or tid in seen:
            problems.append(f"commit {v}: txnId {tid!r} missing or also at version {seen.get(tid or '')}")
        seen[tid or ""] = v
    return problems


def _check_acks(log: DeltaLog, latest: int, ack_files: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Every acknowledged commit is in the log whole: its txnId, its add, its removes."""
    problems: list[str] = []
    for path in ack_files:
        if not os.path.exists(path):
            continue
        for line in Path(path).read_text().splitlines():
            try:
                ack = json.loads(line)  # one small write(2): a kill cannot split it, but be safe
            except ValueError:
                continue
            v = ack["version"]
            if v > latest:
                problems.append(f"acknowledged version {v} is beyond the latest {latest}")
                continue
            actions = log.read_commit(v).actions
            info = next((a for a in actions if isinstance(a, CommitInfo)), None)
            adds = {a.path for a in actions if isinstance(a, AddFile)}
            removes = {a.path for a in actions if isinstance(a, RemoveFile)}
            txns = {a.app_id: a.version for a in actions if isinstance(a, SetTransaction)}
            if info is None or info.txn_id != ack["txnId"]:
                problems.append(f"acknowledged commit {v} ({ack['txnId']}) holds txnId {info and info.txn_id}")
            elif adds != {ack["add"]} or removes != set(ack["remove"]) or txns != ack["txn"]:
                problems.append(f"acknowledged commit {v} is not whole: adds {adds}, removes {removes}")
    return problems


def _check_intents(log: DeltaLog, latest: int, intent_files: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Every commit after version 0 was attempted by a writer (its txnId is in an intents file)."""
    tried = {line for path in intent_files if os.path.exists(path) for line in Path(path).read_text().split()}
    problems: list[str] = []
    for v in range(1, latest + 1):
        info = log.read_commit(v).commit_info
        if info is None or info.txn_id not in tried:
            problems.append(f"commit {v} (txnId {info and info.txn_id}) was never attempted by a writer: a phantom")
    return problems


def _check_checkpoints(log: DeltaLog, snap: Snapshot, checked: set[str]) -> list[str]:
    """Every checkpoint reads back to the JSON replay at its version; ``_last_checkpoint`` is usable."""
    problems: list[str] = []
    for name in sorted(_log_names(log)):
        m = re.match(r"^(\d{20})\.checkpoint\.parquet$", name)
        if not m or name in checked:
            continue
        checked.add(name)
        v = int(m.group(1))
        ref = CheckpointRef(v, "classic", (_log_file(log, name),))
        try:
            state = TableState()
            state.apply(read_checkpoint(log.store, log.log_path, ref))
        except Exception as e:  # noqa: BLE001
            problems.append(f"checkpoint {name} is unreadable: {e}")
            continue
        bad = _diff(_state_key(state), _state_key(replay_from_zero(log, v)))
        if bad:
            problems.append(f"checkpoint at {v} differs from replay from version 0 in {bad}")
    last = read_last_checkpoint(log.store, log.log_path)
    if last is not None and last["version"] > snap.version:
        problems.append(f"_last_checkpoint points at version {last['version']} beyond the log")
    bad = _diff(_state_key(snap), _state_key(replay_from_zero(log, snap.version)))
    if bad:
        problems.append(f"loaded snapshot {snap.version} differs from replay from version 0 in {bad}")
    return problems


# -- vacuum ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class VacuumPlan:
    """What vacuum would delete (relative paths) and why the rest stays."""

    delete: tuple[str, ...]
    referenced: frozenset[str]  # live adds and tombstones still within retention
    too_young: tuple[str, ...]  # unreferenced, but modified within retention (a writer may commit them)


def _data_files(table: str) -> dict[str, float]:
    """Relative path -> mtime (ms) of every file outside ``_delta_log`` and hidden names."""
    if not _is_local(table):
        return _s3_data_files(table)
    out: dict[str, float] = {}
    for root, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if d != LOG_DIR and not d.startswith((".", "_"))]
        for name in files:
            if name.startswith((".", "_")):
                continue
            full = os.path.join(root, name)
            try:
                out[os.path.relpath(full, table)] = os.stat(full).st_mtime * 1000
            except FileNotFoundError:
                continue
    return out


def _s3_data_files(table: str) -> dict[str, float]:
    """:func:`_data_files` of an S3 table: every key under it, by its last-modified time."""
    import obstore

    from serialake.storage.s3 import _store, split_s3_uri

    bucket, key = split_s3_uri(table)
    prefix = key.rstrip("/") + "/" if key else ""
    out: dict[str, float] = {}
    for batch in obstore.list(_store(bucket), prefix):
        for meta in batch:
            rel = str(meta["path"])[len(prefix):]
            if any(part.startswith((".", "_")) for part in rel.split("/")):
                continue  # _delta_log and hidden names, as on the local file system
            stamp = meta.get("last_modified")
            out[rel] = stamp.timestamp() * 1000 if stamp is not None else 0.0
    return out


def vacuum_plan(snapshot: Snapshot, retention_ms: int, now_ms: int) -> VacuumPlan:
    """Delta's vacuum rule: delete files that no live add and no unexpired tombstone references,
    and that are older than the retention (so an in-flight writer's new file is spared)."""
    cutoff = now_ms - retention_ms
    referenced = {decode_path(a.path) for a in snapshot.all_files}
    referenced |= {decode_path(r.path) for r in snapshot.tombstones if (r.deletion_timestamp or 0) > cutoff}
    delete: list[str] = []
    young: list[str] = []
    for rel, mtime in sorted(_data_files(snapshot.table_path).items()):
        if rel in referenced:
            continue
        (delete if mtime < cutoff else young).append(rel)
    return VacuumPlan(tuple(delete), frozenset(referenced), tuple(young))


def vacuum(snapshot: Snapshot, retention_ms: int, now_ms: int | None = None) -> list[str]:
    """Delete what :func:`vacuum_plan` allows; returns the deleted relative paths."""
    plan = vacuum_plan(snapshot, retention_ms, int(time.time() * 1000) if now_ms is None else now_ms)
    table = snapshot.table_path
    for rel in plan.delete:
        if not _is_local(table):
            store_for(table).delete(f"{table}/{rel}")
            continue
        try:
            os.unlink(os.path.join(table, rel))
        except FileNotFoundError:
            pass
    return list(plan.delete)


def _plan_violations(snap: Snapshot, retention_ms: int, now_ms: int, files: dict[str, float]) -> list[str]:
    """What a plan must never do (delete live, recently tombstoned or young files), and must do."""
    cutoff = now_ms - retention_ms
    live = {decode_path(a.path) for a in snap.all_files}
    kept_tombs = {decode_path(r.path) for r in snap.tombstones if (r.deletion_timestamp or 0) > cutoff}
    all_tombs = {decode_path(r.path) for r in snap.tombstones}
    plan = set(vacuum_plan(snap, retention_ms, now_ms).delete)
    at = f"(retention {retention_ms} ms, now {now_ms})"
    problems = [f"vacuum {at} would delete live file {p}" for p in sorted(plan & live)]
    problems += [f"vacuum {at} would delete {p}, tombstoned within retention" for p in sorted(plan & kept_tombs)]
    problems += [f"vacuum {at} would delete {p}, modified within retention" for p in plan if files[p] >= cutoff]
    orphans = {p for p, mtime in files.items() if mtime < cutoff} - live - all_tombs
    problems += [f"vacuum {at} keeps orphan {p} past retention" for p in sorted(orphans - plan)]
    return problems


def check_vacuum(table: str, read_data: bool = True) -> tuple[list[str], int]:
    """Vacuum invariants at several clocks; then really vacuum (retention 0) and re-check.

    Returns (violations, number of files deleted). ``read_data`` also reads every live
    Parquet file back after the deletion.
    """
    DeltaLog.clear_cache()
    snap = DeltaLog(table, store=_check_store(table)).update()
    table = snap.table_path
    now = int(time.time() * 1000) + 1
    files = _data_files(table)
    problems: list[str] = []
    for retention, clock in ((HOUR_MS, now), (HOUR_MS, now + 2 * HOUR_MS), (0, now), (7 * 24 * HOUR_MS, now)):
        problems += _plan_violations(snap, retention, clock, files)
    live = {decode_path(a.path) for a in snap.all_files}
    deleted = vacuum(snap, 0, now)
    problems += [f"vacuum deleted live file {p}" for p in sorted(set(deleted) & live)]
    for rel in sorted(live):
        full = os.path.join(table, rel)
        if not _data_exists(table, rel):
            problems.append(f"live data file {rel} is gone after vacuum")
        elif read_data:
            try:
                pq.read_table(full if _is_local(table) else io.BytesIO(store_for(table).read(f"{table}/{rel}")))
            except Exception as e:  # noqa: BLE001 - a committed data file must be whole
                problems.append(f"live data file {rel} is unreadable after vacuum: {e}")
    return problems, len(deleted)


# -- trials ---------------------------------------------------------------------------------
@dataclass
class CrashReport:
    """Outcome of :func:`run_crash_trials`."""

    trials: int = 0
    tables: int = 0
    kills: dict[str, int] = field(default_factory=dict)  # by crash point
    reached: dict[str, int] = field(default_factory=dict)  # targeted kills that hit their point
    acked_commits: int = 0
    commits: int = 0
    checkpoints: int = 0
    orphans_vacuumed: int = 0
    temp_files_left: int = 0
    unacked_commits: int = 0  # commits in the logs no writer acknowledged (killed after the commit landed)
    violations: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    store: str = "local"  # "local" or "S3"

    @property
    def valid(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["valid"] = self.valid
        return d

    def summary(self) -> str:
        """A few lines for people."""
        kills = ", ".join(f"{k} {n} (reached {self.reached.get(k, 0)})" for k, n in sorted(self.kills.items()))
        lines = [
            f"crash trials{' on S3' if self.store == 'S3' else ''}: {'VALID' if self.valid else 'INVALID'} - "
            f"{self.trials} trials on {self.tables} tables in {self.duration_s:.1f}s",
            f"  SIGKILL at: {kills}",
            f"  {self.acked_commits} acknowledged commits all present; {self.commits} commits "
            f"({self.unacked_commits} never acknowledged), {self.checkpoints} checkpoints in the logs; "
            + (f"{self.temp_files_left} temp files left (never listed)" if self.store == "local" else "no temp files"),
            f"  vacuum deleted {self.orphans_vacuumed} unreferenced files; no referenced file touched",
        ]
        lines += [f"  VIOLATION: {v}" for v in self.violations[:20]]
        return "\n".join(lines)


def _create_table(path: str) -> None:
    log = DeltaLog(path, store=_check_store(path))
    txn = log.start_transaction()
    conf = {"delta.checkpointInterval": "2"}
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=("p",), configuration=conf))
    txn.commit([], operation="CREATE TABLE")


def _one_trial(table: str, acks: Path, trial: int, rng: random.Random, max_delay_s: float) -> tuple[str, bool]:
    """Fork writers, SIGKILL them at a chosen point; returns (point, whether a targeted point was reached)."""
    point = CRASH_POINTS[trial % len(CRASH_POINTS)]
    ctx = mp.get_context("fork")
    r, w = os.pipe()
    procs = []
    for c in range(rng.choice((1, 1, 2))):
        ack = str(acks / f"ack-{trial}-{c}.jsonl")
        args = (table, f"writer-{trial}-{c}", ack, point, w, rng.randrange(2**31), trial % 2 == 0)
        procs.append(ctx.Process(target=_writer, args=args, daemon=True))
    for p in procs:
        p.start()
    os.close(w)
    reached = False
    try:
        if point == "random":
            time.sleep(rng.uniform(0.0, max_delay_s))
        else:
            poller = select.poll()  # not select(): the descriptor may be above FD_SETSIZE in a busy process
            poller.register(r, select.POLLIN)
            reached = bool(poller.poll(5000)) and os.read(r, 1) == b"!"
    finally:
        _kill(procs)
        os.close(r)
    return point, reached


def _one_s3_trial(
    table: str, acks: Path, trial: int, rng: random.Random, max_delay_s: float, env: Mapping[str, str]
) -> tuple[str, bool]:
    """:func:`_one_trial` on an S3 table: writers from the fork server, the point reported over a pipe."""
    point = S3_CRASH_POINTS[trial % len(S3_CRASH_POINTS)]
    ctx = fork_server()
    r, w = ctx.Pipe(duplex=False)
    procs = []
    for c in range(rng.choice((1, 1, 2))):
        ack = str(acks / f"ack-{trial}-{c}.jsonl")
        args = (table, f"writer-{trial}-{c}", ack, point, w, rng.randrange(2**31), dict(env))
        procs.append(ctx.Process(target=_s3_writer, args=args, daemon=True))
    reached = False
    try:
        for p in procs:
            p.start()
        w.close()
        if point == "random":
            time.sleep(rng.uniform(0.0, max_delay_s))
        elif r.poll(_REACH_S["s3"]):
            try:
                reached = r.recv_bytes() == b"!"
            except EOFError:  # every writer died before its point
                reached = False
    finally:
        _kill(procs)
        r.close()
    return point, reached


def _kill(procs: list[Any]) -> None:
    """SIGKILL each started writer by its pid, then reap it."""
    for p in procs:
        if p.pid is not None:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        if p.pid is not None:
            p.join()


def run_crash_trials(
    trials: int = 100,
    *,
    workdir: str | os.PathLike[str] | None = None,
    trials_per_table: int = 10,
    max_delay_s: float | None = None,
    seed: int | None = None,
    table_root: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CrashReport:
    """Run ``trials`` kill trials (several per table, so logs grow and checkpoints matter).

    Tables are made in ``workdir`` (a temporary directory when None), or under
    ``table_root``, an ``s3://bucket/prefix`` URI, with the acknowledgement files still in
    ``workdir``; S3 writers get ``env`` (default: this process's ``AWS_*`` variables).
    ``max_delay_s`` bounds the delay of the ``random`` kills (default 0.05 s locally, 0.5 s
    on S3, where a commit takes longer).
    """
    t0 = time.monotonic()
    rng = random.Random(seed)
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="serialake-crash-"))
    on_s3 = table_root is not None
    delay = max_delay_s if max_delay_s is not None else (0.5 if on_s3 else 0.05)
    writer_env = dict(env) if env is not None else s3_environment()
    report = CrashReport(trials=trials, store="S3" if on_s3 else "local")
    kills: Counter[str] = Counter()
    reached: Counter[str] = Counter()
    try:
        for start in range(0, trials, trials_per_table):
            name = f"table-{start // trials_per_table}"
            table = f"{str(table_root).rstrip('/')}/{name}" if on_s3 else str(base / name)
            acks = base / f"acks-{start // trials_per_table}"
            acks.mkdir(parents=True, exist_ok=True)
            _create_table(table)
            report.tables += 1
            checked: set[str] = set()
            for trial in range(start, min(trials, start + trials_per_table)):
                if on_s3:
                    point, hit = _one_s3_trial(table, acks, trial, rng, delay, writer_env)
                else:
                    point, hit = _one_trial(table, acks, trial, rng, delay)
                kills[point] += 1
                reached[point] += hit
                found = check_table(table, sorted(acks.glob("*.jsonl")), checked, acks.glob(f"*{INTENTS_SUFFIX}"))
                report.violations += [f"trial {trial} (kill at {point}): {v}" for v in found]
            _tally_table(report, table, acks)
            problems, deleted = check_vacuum(table)
            report.violations += [f"table {table}: {v}" for v in problems]
            report.orphans_vacuumed += deleted
            after = check_table(table, acks.glob("*.jsonl"), intent_files=acks.glob(f"*{INTENTS_SUFFIX}"))
            report.violations += [f"table {table} after vacuum: {v}" for v in after]
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    report.kills, report.reached = dict(kills), {k: v for k, v in reached.items() if k != "random"}
    report.duration_s = time.monotonic() - t0
    return report


def _tally_table(report: CrashReport, table: str, acks: Path) -> None:
    DeltaLog.clear_cache()
    names = _log_names(DeltaLog(table, store=_check_store(table)))
    commits = sum(1 for n in names if version_of(n) is not None)
    acked = sum(len(p.read_text().splitlines()) for p in acks.glob("*.jsonl"))
    report.commits += commits
    report.checkpoints += sum(1 for n in names if n.endswith(".checkpoint.parquet"))
    report.temp_files_left += sum(1 for n in names if n.startswith(".") and n.endswith(".tmp"))
    report.acked_commits += acked
    report.unacked_commits += commits - 1 - acked  # version 0 is the CREATE TABLE
