"""The list-append workload run against a real table through the core transaction API.

Mapping (see issue #4): key ``x`` is the partition ``k = 'x'`` of a table partitioned by the
string column ``k``. The list of a key lives in the tags of the single live file of its
partition (``tags["list"] = "3 17 42"``); no data file is written, the core never reads
them. An append is a copy-on-write rewrite like a real DML: read the partition's files with
``filter_files``, remove them, add one new file holding the whole new list. A read returns
the list of every live file of the partition concatenated, so a lost update (two live files)
shows up as duplicates or an incompatible order instead of being hidden.

Each worker is a separate OS process with its own :class:`~serialake.verify.history.Recorder`
file; :func:`run_workload` starts them together, waits, and merges their histories.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from serialake.core.actions import AddFile, Metadata, RemoveFile
from serialake.core.log import DeltaLog
from serialake.exceptions import CommitFailedError, DeltaConcurrentModificationException
from serialake.storage.base import LogStore
from serialake.storage.faulty import FaultPlan, FaultyLogStore
from serialake.storage.local import LocalLogStore
from serialake.verify import rows
from serialake.verify.history import History, Mop, Recorder

__all__ = [
    "FaultSpec",
    "TxnResult",
    "WorkerStats",
    "WorkloadConfig",
    "WorkloadResult",
    "create_table",
    "error_class",
    "execute_txn",
    "generate_txn",
    "audit_log",
    "read_key",
    "run_workload",
]

PARTITION_COLUMN = "k"
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "k", "type": "string", "nullable": True, "metadata": {}},
            {"name": "v", "type": "long", "nullable": True, "metadata": {}},
        ],
    }
)
VALUE_BASE = 10**6  # values are process * VALUE_BASE + counter: unique across processes and retries


@dataclass(frozen=True)
class FaultSpec:
    """Fault probabilities for the processes that run on a :class:`FaultyLogStore`."""

    lose_put_response: float = 0.05
    fail_put: float = 0.05
    fail_list: float = 0.05
    fail_read: float = 0.02
    slow_put_s: float = 0.002
    slow_list_s: float = 0.001

    def plan(self, seed: int) -> FaultPlan:
        """The store's plan, seeded per process."""
        return FaultPlan(seed=seed, **asdict(self))


@dataclass(frozen=True)
class WorkloadConfig:
    """One run: ``processes`` workers each running ``txns`` transactions at ``isolation_level``."""

    processes: int = 8
    txns: int = 500
    isolation_level: str = "Serializable"
    key_count: int = 8  # keys active at once: few, so transactions contend
    rotate_every: int = 40  # table versions after which the active key window moves by one key
    min_mops: int = 2
    max_mops: int = 4
    read_only_fraction: float = 0.1
    faulty_processes: int = 0  # the first N processes use a FaultyLogStore
    faults: FaultSpec = field(default_factory=FaultSpec)
    disable_conflict_checks: bool = False  # negative control: every winner passes
    checkpoint_interval: int = 10
    fsync: bool = True
    seed: int = 0
    timeout_s: float = 900.0
    row_level: bool = False  # keys as rows of shared Parquet files, updated through deletion vectors


@dataclass(frozen=True)
class TxnResult:
    """What one executed transaction returned (before it is recorded)."""

    outcome: str  # ok | fail | info
    mops: tuple[Mop, ...]
    error: str | None = None
    commit_version: int | None = None
    attempts: int | None = None
    duration_s: float | None = None


@dataclass
class WorkerStats:
    """Per-process counters a worker writes next to its history."""

    process: int
    faulty: bool = False
    commits: int = 0
    read_only: int = 0
    retries: int = 0
    winners_checked: int = 0
    commit_time_s: float = 0.0
    slowest_commit_s: float = 0.0
    slowest_commit_version: int | None = None
    slowest_commit_attempts: int | None = None
    errors: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    crashed: str | None = None


@dataclass
class WorkloadResult:
    """Merged history and stats of one run."""

    config: WorkloadConfig
    table_path: str
    history: History
    stats: list[WorkerStats]
    wall_s: float
    exit_codes: list[int | None]


# -- table ----------------------------------------------------------------------------------
def create_table(path: str, isolation_level: str, checkpoint_interval: int = 10, fsync: bool = True) -> DeltaLog:
    """An empty table partitioned by ``k`` at ``isolation_level``."""
    log = DeltaLog(path, store=LocalLogStore(fsync=fsync))
    txn = log.start_transaction()
    conf = {"delta.isolationLevel": isolation_level, "delta.checkpointInterval": str(checkpoint_interval)}
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=(PARTITION_COLUMN,), configuration=conf))
    txn.commit([], operation="CREATE TABLE")
    return log


def key_name(i: int) -> str:
    """Key ``i`` as a partition value."""
    return f"k{i}"


def _list_of(f: AddFile) -> list[int]:
    text = (f.tags or {}).get("list", "")
    return [int(x) for x in text.split()]


def read_key(files: Sequence[AddFile]) -> list[int]:
    """The key's list: every live file's list, concatenated by (read version of its writer, path).

    Normally there is one file; more means a lost update, and concatenating (rather than
    picking one) makes the checker see it.
    """
    ordered = sorted(files, key=lambda f: (int((f.tags or {}).get("rv", "-1")), f.path))
    return [v for f in ordered for v in _list_of(f)]


def _new_file(key: str, values: list[int], read_version: int, txn_id: str) -> AddFile:
    name = f"part-{txn_id}-{key}.parquet"
    return AddFile(
        path=f"{PARTITION_COLUMN}={key}/{name}",
        partition_values={PARTITION_COLUMN: key},
        size=8 * len(values) + 1,
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=json.dumps({"numRecords": len(values)}),
        tags={"list": " ".join(map(str, values)), "rv": str(read_version), "txn": txn_id},
    )


def _tombstone(f: AddFile) -> RemoveFile:
    # The list already lives in the new file; keeping it out of the remove halves commit size.
    return replace(f.remove(), tags=None, stats=None)


# -- transactions ---------------------------------------------------------------------------
def generate_txn(rng: random.Random, cfg: WorkloadConfig, position: int, next_value: Any) -> list[Mop]:
    """Random micro-ops over the key window at ``position``; ``next_value()`` gives fresh values.

    The window follows the table version (not a per-process counter) so that processes
    running at different speeds still contend on the same keys while lists stay short.
    """
    base = 0 if cfg.row_level else position // max(1, cfg.rotate_every)  # row keys are created up front
    n = rng.randint(cfg.min_mops, cfg.max_mops)
    read_only = rng.random() < cfg.read_only_fraction
    mops: list[Mop] = []
    for _ in range(n):
        key = key_name(base + rng.randrange(cfg.key_count))
        if read_only or rng.random() < 0.5:
            mops.append(("r", key, None))
        else:
            mops.append(("append", key, next_value()))
    return mops


def execute_txn(log: DeltaLog, mops: Sequence[Mop]) -> TxnResult:
    """Run ``mops`` as one transaction; the outcome is ``info`` when a commit error leaves it unknown."""
    try:
        txn = log.start_transaction()
        lists: dict[str, list[int]] = {}
        files: dict[str, list[AddFile]] = {}
        done: list[Mop] = []
        appended: dict[str, list[int]] = {}
        for f, key, value in mops:
            if key not in lists:
                files[key] = txn.filter_files([f"{PARTITION_COLUMN} = '{key}'"])
                lists[key] = read_key(files[key])
            if f == "r":
                done.append(("r", key, tuple(lists[key])))
            else:
                lists[key].append(value)
                appended.setdefault(key, []).append(value)
                done.append((f, key, value))
    except Exception as e:  # noqa: BLE001 - nothing was written: a definite failure
        return TxnResult("fail", tuple(mops), _err(e))
    if not appended:
        return TxnResult("ok", tuple(done), commit_version=txn.read_version)
    actions: list[Any] = []
    for key in appended:
        actions += [_tombstone(f) for f in files[key]]
        # dict.fromkeys: after a lost update (2+ live files) the read shows the duplicates to
        # the checker, but the rewrite stores each value once so lists cannot snowball.
        actions.append(_new_file(key, list(dict.fromkeys(lists[key])), txn.read_version, txn.txn_id))
    return commit_txn(txn, actions, mops, done, "list-append")


def commit_txn(txn: Any, actions: list[Any], mops: Sequence[Mop], done: list[Mop], workload: str) -> TxnResult:
    """Commit a workload transaction and classify the outcome: ok, fail (conflict) or info (unknown)."""
    try:
        txn.commit(actions, operation="UPDATE", operation_parameters={"workload": workload})
    except DeltaConcurrentModificationException as e:
        return TxnResult("fail", tuple(mops), _err(e))
    except CommitFailedError as e:  # gave up retrying: a lost response may still have landed
        return TxnResult("info", tuple(mops), _err(e))
    except Exception as e:  # noqa: BLE001 - e.g. an I/O error: the commit may or may not exist
        return TxnResult("info", tuple(mops), _err(e))
    res = txn.committed
    assert res is not None
    return TxnResult("ok", tuple(done), None, res.version, res.attempts, res.duration_s)


def _err(e: BaseException) -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first[:160]}"


def error_class(error: str | None) -> str:
    """The exception class name of a recorded error string."""
    return (error or "unknown").split(":", 1)[0]


# -- worker process ---------------------------------------------------------------------------
def _disable_conflict_checks() -> None:
    """Negative control: every winner passes (patched where the commit loop looks it up)."""
    import serialake.core.conflicts as conflicts
    import serialake.core.transaction as transaction

    def no_check(info: Any, winner: Any) -> Any:
        return info

    conflicts.check_winner = no_check  # type: ignore[assignment]
    transaction.check_winner = no_check  # type: ignore[assignment]


def _store_for(cfg: WorkloadConfig, process: int) -> tuple[LogStore, bool]:
    local = LocalLogStore(fsync=cfg.fsync)
    if process < cfg.faulty_processes:
        return FaultyLogStore(local, cfg.faults.plan(cfg.seed * 1000 + process)), True
    return local, False


def _worker(table: str, cfg: WorkloadConfig, process: int, workdir: str, start: Any) -> None:
    """Child process: run ``cfg.txns`` transactions, record them, write stats."""
    DeltaLog.clear_cache()
    if cfg.disable_conflict_checks:
        _disable_conflict_checks()
    store, faulty = _store_for(cfg, process)
    stats = WorkerStats(process=process, faulty=faulty)
    stats_path = Path(workdir) / f"stats-{process}.json"
    rng = random.Random(cfg.seed * 7919 + process)
    counter = iter(range(1, VALUE_BASE))

    def next_value() -> int:
        return process * VALUE_BASE + next(counter)

    errors: Counter[str] = Counter()
    start.wait()
    try:
        log = DeltaLog(table, store=store)
        with Recorder(Path(workdir) / f"history-{process}.jsonl", process=process) as rec:
            for _ in range(cfg.txns):
                mops = generate_txn(rng, cfg, _position(log), next_value)
                handle = rec.invoke(mops)
                res = rows.execute_txn(log, mops) if cfg.row_level else execute_txn(log, mops)
                rec.complete(handle, res.outcome, res.mops, res.error, res.commit_version, res.attempts)  # type: ignore[arg-type]
                _tally(stats, errors, res)
        log.wait_for_checkpoints()
    except BaseException:  # noqa: BLE001 - report it to the parent; the history stays usable
        stats.crashed = traceback.format_exc()
    stats.errors = dict(errors)
    if isinstance(store, FaultyLogStore):
        stats.faults = dict(store.counts)
    stats_path.write_text(json.dumps(asdict(stats)))


def _position(log: DeltaLog) -> int:
    try:
        return log.update().version
    except Exception:  # noqa: BLE001 - an injected read fault: the last known version will do
        snap = log._snapshot
        return snap.version if snap is not None else 0


def _tally(stats: WorkerStats, errors: Counter[str], res: TxnResult) -> None:
    if res.outcome != "ok":
        errors[f"{res.outcome}:{error_class(res.error)}"] += 1
        return
    if res.attempts is None:
        stats.read_only += 1
        return
    stats.commits += 1
    stats.retries += res.attempts - 1
    d = res.duration_s or 0.0
    stats.commit_time_s += d
    if d > stats.slowest_commit_s:
        stats.slowest_commit_s, stats.slowest_commit_version = d, res.commit_version
        stats.slowest_commit_attempts = res.attempts


def run_workload(table: str, cfg: WorkloadConfig, workdir: str | os.PathLike[str]) -> WorkloadResult:
    """Create the table, run ``cfg.processes`` workers on it at once, merge their histories."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    DeltaLog.clear_cache()
    if cfg.row_level:
        rows.create_table(table, cfg.isolation_level, [key_name(i) for i in range(cfg.key_count)],
                          cfg.checkpoint_interval, cfg.fsync)
    else:
        create_table(table, cfg.isolation_level, cfg.checkpoint_interval, cfg.fsync)
    ctx = mp.get_context("fork")
    start = ctx.Event()
    procs = [
        ctx.Process(target=_worker, args=(table, cfg, p, str(work), start), name=f"list-append-{p}")
        for p in range(cfg.processes)
    ]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    start.set()
    deadline = t0 + cfg.timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():  # hung: kill it; its in-flight txn is recorded as info
            p.kill()
            p.join()
    wall = time.monotonic() - t0
    history = History.merge(sorted(work.glob("history-*.jsonl")))
    return WorkloadResult(cfg, table, history, _load_stats(work, cfg.processes), wall, [p.exitcode for p in procs])


def _load_stats(work: Path, processes: int) -> list[WorkerStats]:
    out: list[WorkerStats] = []
    for p in range(processes):
        path = work / f"stats-{p}.json"
        if path.exists():
            out.append(WorkerStats(**json.loads(path.read_text())))
        else:
            out.append(WorkerStats(process=p, crashed="no stats written (process died)"))
    return out


# -- log audit ------------------------------------------------------------------------------
def _commit_lists(table: str, actions: Sequence[Any]) -> list[list[int]]:
    """The lists a commit wrote: in file tags (file-level mode) or in its new rows (row-level mode)."""
    out: list[list[int]] = []
    for a in actions:
        if not isinstance(a, AddFile):
            continue
        if a.tags and "list" in a.tags:
            out.append(_list_of(a))
        elif a.deletion_vector is None and os.path.exists(os.path.join(table, a.path)):
            out += [[int(x) for x in lst.split()] for lst in rows.file_lists(table, a)]
    return out


def audit_log(
    table: str,
    history: History,
    *,
    commit_lists: Callable[[str, Sequence[Any]], list[list[int]]] | None = None,
) -> list[str]:
    """Check the log against the history: every commit after version 0 is exactly one txn's.

    Each commit is attributed to the txn that appended the last value of one of its new
    lists. An ``ok`` txn must own exactly the commit at its reported version (not lost,
    not duplicated); ``fail`` txns own none; ``info`` txns at most one. ``commit_lists``
    (table, actions) gives the lists a commit wrote (default: this workload's file tags
    or row-level files).
    """
    lists_of = _commit_lists if commit_lists is None else commit_lists
    DeltaLog.clear_cache()
    log = DeltaLog(table)
    latest = log.update().version
    writer: dict[int, int] = {}
    for i, t in enumerate(history):
        for f, _, v in t.mops:
            if f == "append":
                writer[v] = i
    owned: dict[int, list[int]] = {}
    problems: list[str] = []
    txn_ids: set[str] = set()
    for version in range(1, latest + 1):
        entry = log.read_commit(version)
        ci = entry.commit_info
        tid = ci.txn_id if ci else None
        if tid is None or tid in txn_ids:
            problems.append(f"version {version}: missing or duplicate commitInfo.txnId {tid!r}")
        txn_ids.add(tid or "")
        owners = {writer.get(lst[-1], -1) for lst in lists_of(table, entry.actions) if lst}
        if len(owners) != 1 or -1 in owners:
            problems.append(f"version {version}: cannot attribute the commit to one txn (owners {sorted(owners)})")
            continue
        owned.setdefault(owners.pop(), []).append(version)
    for i, t in enumerate(history):
        versions = owned.get(i, [])
        writes = any(f == "append" for f, _, _ in t.mops)
        if t.outcome == "ok" and writes and versions != [t.commit_version]:
            problems.append(f"T{i} ({t.describe()}) reported version {t.commit_version}, log has it at {versions}")
        elif t.outcome == "fail" and versions:
            problems.append(f"T{i} failed ({t.error}) but committed at {versions}")
        elif t.outcome == "info" and len(versions) > 1:
            problems.append(f"T{i} (unknown outcome) committed more than once: {versions}")
    return problems
