"""The list-append workload run against a real table through the core transaction API.

Mapping (see issue #4): key ``x`` is the partition ``k = 'x'`` of a table partitioned by the
string column ``k``. The list of a key lives in the tags of the single live file of its
partition (``tags["list"] = "3 17 42"``); no data file is written, the core never reads
them. An append is a copy-on-write rewrite like a real DML: read the partition's files with
``filter_files``, remove them, add one new file holding the whole new list. A read returns
the list of every live file of the partition concatenated, so a lost update (two live files)
shows up as duplicates or an incompatible order instead of being hidden.

The active keys are a window of ``key_count`` keys that moves on by one key every
``rotate_every`` table versions, so lists stay short however long the run. A key a whole
window behind is *retired*: one process in turn commits a DELETE of its files (not a history
txn; see :func:`retired_below` for why no txn can observe it), so the live files, and with
them the cost of planning a read, stay bounded too.

Each worker is a separate OS process with its own :class:`~serialake.verify.history.Recorder`
file; :func:`run_workload` starts them together, waits, and merges their histories.

The table may be on S3 (an ``s3://`` URI; ``serialake verify --s3``): the workers then use
the S3 log store (faulty ones wrapped in the same :class:`FaultyLogStore`, and reaching the
server through ``WorkloadConfig.faulty_env``'s endpoint, a fault proxy, when set), get the
endpoint and credentials from ``WorkloadConfig.env``, and are started from a fork server
instead of forked from the caller: the S3 client's runtime (``obstore``, Rust ``tokio``)
does not survive ``fork``, so a child forked after the caller used it hangs at its first
request.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import resource
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Protocol

from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.actions import AddFile, CommitInfo, Metadata, RemoveFile
from serialake.core.predicates.expressions import Expr, parse_predicate
from serialake.storage import is_local_path, normalize_table_path, store_for
from serialake.storage.base import LogStore
from serialake.storage.faulty import FaultPlan, FaultyLogStore
from serialake.storage.local import LocalLogStore
from serialake.verify import rows
from serialake.verify.history import History, Mop, Recorder
from serialake.verify.txn import (
    RETIRE_WORKLOAD,
    StaleKeyWindow,
    TxnResult,
    check_window,
    commit_txn,
    error_class,
    error_text,
    key_index,
    key_name,
)

__all__ = [
    "Alongside",
    "FaultSpec",
    "StaleKeyWindow",
    "TxnResult",
    "WorkerStats",
    "WorkloadConfig",
    "WorkloadResult",
    "apply_environment",
    "audit_log",
    "check_window",
    "create_table",
    "default_faults",
    "error_class",
    "execute_txn",
    "fork_server",
    "generate_txn",
    "is_quiet",
    "key_index",
    "key_name",
    "read_key",
    "retire_keys",
    "retired_below",
    "run_workload",
    "s3_environment",
    "table_properties",
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
TOMBSTONE_RETENTION = "interval 1 second"
VALUE_BASE = 10**6  # values are process * VALUE_BASE + counter: unique across processes and retries
ALONGSIDE_STOP_S = 180.0  # other writers finish their transaction in flight and stop within this


#: The former name of the fault plan (one type now: the store's ``FaultPlan``).
FaultSpec = FaultPlan


def default_faults() -> FaultPlan:
    """The faults of a run's faulty processes unless told otherwise; the seed is set per process."""
    return FaultPlan(
        lose_put_response=0.05, fail_put=0.05, fail_list=0.05, fail_read=0.02, slow_put_s=0.002, slow_list_s=0.001
    )


@dataclass(frozen=True)
class WorkloadConfig:
    """One run: ``processes`` workers each running ``txns`` transactions at ``isolation_level``."""

    processes: int = 8
    txns: int = 500
    isolation_level: str = "Serializable"
    key_count: int = 8  # keys active at once: few, so transactions contend
    rotate_every: int = 40  # table versions after which the active key window moves by one key
    retire_keys: bool = True  # delete keys a whole window behind, so live files stay few
    min_mops: int = 2
    max_mops: int = 4
    read_only_fraction: float = 0.1
    faulty_processes: int = 0  # the first N processes use a FaultyLogStore
    faults: FaultPlan = field(default_factory=default_faults)  # its seed is replaced per process
    disable_conflict_checks: bool = False  # negative control: every winner passes
    checkpoint_interval: int = 10
    fsync: bool = True
    seed: int = 0
    timeout_s: float = 900.0
    row_level: bool = False  # keys as rows of shared Parquet files, updated through deletion vectors
    # Pacing, for slow writers beside the workers (serialake.verify.mixed): each process pauses
    # uniform(0, 2 * pause_s) after a txn, and in the last quiet_s seconds of every quiet_every_s
    # seconds of the run it commits nothing, so that a writer that conflicts with any concurrent
    # commit gets windows in which it can commit. There, every other process (alternating per
    # cycle) runs one long txn that reads as the quiet part starts and commits as it ends
    # (row-level only), across the slow writer's commits; the others only read.
    pause_s: float = 0.0
    quiet_every_s: float = 0.0
    quiet_s: float = 0.0
    env: Mapping[str, str] = field(default_factory=dict)  # set in every worker first (S3 endpoint, credentials)
    faulty_env: Mapping[str, str] = field(default_factory=dict)  # then in faulty ones (e.g. a fault proxy's endpoint)


@dataclass
class WorkerStats:
    """Per-process counters a worker writes next to its history."""

    process: int
    faulty: bool = False
    commits: int = 0
    read_only: int = 0
    retries: int = 0
    winners_checked: int = 0
    retirements: int = 0  # commits that retired old keys
    retirements_failed: int = 0  # retirements that conflicted or hit a fault (retried at the next step)
    commit_time_s: float = 0.0
    slowest_commit_s: float = 0.0
    slowest_commit_version: int | None = None
    slowest_commit_attempts: int | None = None
    errors: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    crashed: str | None = None
    cpu_s: float | None = None  # the worker's own user + system time


@dataclass
class WorkloadResult:
    """Merged history and stats of one run."""

    config: WorkloadConfig
    table_path: str
    history: History
    stats: list[WorkerStats]
    wall_s: float
    exit_codes: list[int | None]
    cpu_s: float | None = None  # user + system time of the worker processes (None: not measured)


# -- table ----------------------------------------------------------------------------------
def table_properties(isolation_level: str, checkpoint_interval: int) -> dict[str, str]:
    """Properties of a workload table.

    Tombstones matter only to VACUUM, which never runs on these tables; a short retention
    keeps checkpoints (every ``checkpoint_interval`` commits) from growing with the run.
    """
    return {
        "delta.isolationLevel": isolation_level,
        "delta.checkpointInterval": str(checkpoint_interval),
        "delta.deletedFileRetentionDuration": TOMBSTONE_RETENTION,
    }


def create_table(path: str, isolation_level: str, checkpoint_interval: int = 10, fsync: bool = True) -> DeltaLog:
    """An empty table partitioned by ``k`` at ``isolation_level``."""
    log = DeltaLog(path, store=LocalLogStore(fsync=fsync) if _is_local(path) else None)
    txn = log.start_transaction()
    conf = table_properties(isolation_level, checkpoint_interval)
    txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=(PARTITION_COLUMN,), configuration=conf))
    txn.commit([], operation="CREATE TABLE")
    return log


def retired_below(cfg: WorkloadConfig, version: int) -> int:
    """Keys below this index may have been retired at ``version`` (0: none).

    A key is retired once it is a whole window (``key_count`` keys) behind the window at
    ``version``. The bound only grows with the version, and a retiring commit deletes only
    keys below the bound at its own read version, so a txn that reads at ``version`` and
    refuses keys below it never observes a retired key: the checker sees every key's list
    grow and stop, never vanish.
    """
    if not cfg.retire_keys:
        return 0
    return max(0, version // max(1, cfg.rotate_every) - cfg.key_count)


@lru_cache(maxsize=1024)
def _below_predicate(first_live: int) -> Expr:
    return parse_predicate(f"{PARTITION_COLUMN} < '{key_name(first_live)}'")


@lru_cache(maxsize=1024)
def _key_predicate(key: str) -> Expr:
    """``k = 'key'`` parsed once per process (parsing is most of a read's cost otherwise)."""
    return parse_predicate(f"{PARTITION_COLUMN} = '{key}'")


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
    base = position // max(1, cfg.rotate_every)
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


def execute_txn(log: DeltaLog, mops: Sequence[Mop], retired: Callable[[int], int] | None = None) -> TxnResult:
    """Run ``mops`` as one transaction; the outcome is ``info`` when a commit error leaves it unknown.

    ``retired(read_version)`` (see :func:`retired_below`) refuses keys that may be retired.
    """
    try:
        txn = log.start_transaction()
        if retired is not None:
            check_window(txn.read_version, mops, retired(txn.read_version))
        lists: dict[str, list[int]] = {}
        files: dict[str, list[AddFile]] = {}
        done: list[Mop] = []
        appended: dict[str, list[int]] = {}
        for f, key, value in mops:
            if key not in lists:
                files[key] = txn.filter_files([_key_predicate(key)])
                lists[key] = read_key(files[key])
            if f == "r":
                done.append(("r", key, tuple(lists[key])))
            else:
                lists[key].append(value)
                appended.setdefault(key, []).append(value)
                done.append((f, key, value))
    except Exception as e:  # noqa: BLE001 - nothing was written: a definite failure
        return TxnResult("fail", tuple(mops), error_text(e))
    if not appended:
        return TxnResult("ok", tuple(done), commit_version=txn.read_version)
    actions: list[Any] = []
    for key in appended:
        actions += [_tombstone(f) for f in files[key]]
        # dict.fromkeys: after a lost update (2+ live files) the read shows the duplicates to
        # the checker, but the rewrite stores each value once so lists cannot snowball.
        actions.append(_new_file(key, list(dict.fromkeys(lists[key])), txn.read_version, txn.txn_id))
    return commit_txn(txn, actions, mops, done, "list-append")


def retire_keys(log: DeltaLog, first_live: Callable[[int], int]) -> int | None:
    """Remove the files of keys below ``first_live(read version)``; the commit version, or None if none.

    Not a history txn: the audit recognises these commits by their ``workload`` parameter.
    """
    txn = log.start_transaction()
    files = txn.filter_files([_below_predicate(first_live(txn.read_version))])
    if not files:
        return None
    txn.commit([_tombstone(f) for f in files], operation="DELETE", operation_parameters={"workload": RETIRE_WORKLOAD})
    return txn.committed.version if txn.committed is not None else None


# -- worker process ---------------------------------------------------------------------------
def _disable_conflict_checks() -> None:
    """Negative control: every winner passes (patched where the commit loop looks it up)."""
    import serialake.core.txn.commit_loop as commit_loop
    import serialake.core.txn.reads as reads

    def no_check(info: Any, winner: Any) -> Any:
        return info

    commit_loop.check_winner = no_check
    reads.check_winner = no_check


def _is_local(table: str) -> bool:
    return is_local_path(normalize_table_path(table))


def _store_for(cfg: WorkloadConfig, process: int, table: str = "") -> tuple[LogStore, bool]:
    """The worker's log store: local (fsync as configured) or S3, fault-injecting for the first ones."""
    inner = LocalLogStore(fsync=cfg.fsync) if _is_local(table) else store_for(normalize_table_path(table))
    if process < cfg.faulty_processes:
        return FaultyLogStore(inner, replace(cfg.faults, seed=cfg.seed * 1000 + process)), True
    return inner, False


def s3_environment() -> dict[str, str]:
    """This process's ``AWS_*`` variables: what a worker on an S3 table needs (endpoint, credentials)."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def apply_environment(env: Mapping[str, str]) -> None:
    """Make this process's ``AWS_*`` variables exactly ``env``'s (other variables of ``env`` are set too)
    and drop S3 stores made before (they read the environment when made). Nothing when ``env`` is empty.

    Exactly: a worker started from a fork server inherits the server's environment, taken when
    it started, maybe for another S3 endpoint (say ``AWS_ENDPOINT_URL_S3``, which wins over
    ``AWS_ENDPOINT_URL``).
    """
    if not env:
        return
    for key in [k for k in os.environ if k.startswith("AWS_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    from serialake.storage import s3

    with s3._lock:
        s3._stores.clear()


def _apply_env(cfg: WorkloadConfig, process: int) -> None:
    """The run's environment, set before any store is made."""
    apply_environment({**cfg.env, **(cfg.faulty_env if process < cfg.faulty_processes else {})})


def _worker(table: str, cfg: WorkloadConfig, process: int, workdir: str, start: Any) -> None:
    """Child process: run ``cfg.txns`` transactions, record them, write stats."""
    DeltaLog.clear_cache()
    _apply_env(cfg, process)
    if cfg.disable_conflict_checks:
        _disable_conflict_checks()
    store, faulty = _store_for(cfg, process, table)
    stats = WorkerStats(process=process, faulty=faulty)
    stats_path = Path(workdir) / f"stats-{process}.json"
    rng = random.Random(cfg.seed * 7919 + process)
    counter = iter(range(1, VALUE_BASE))

    def next_value() -> int:
        return process * VALUE_BASE + next(counter)

    errors: Counter[str] = Counter()

    def window(version: int) -> int:
        return retired_below(cfg, version)

    start.wait()
    started = time.monotonic()
    quiet_cfg = replace(cfg, read_only_fraction=1.0)
    try:
        log = DeltaLog(table, store=store)
        with Recorder(Path(workdir) / f"history-{process}.jsonl", process=process) as rec:
            retired_up_to = 0
            held_cycle = -1
            for _ in range(cfg.txns):
                elapsed = time.monotonic() - started
                quiet, cycle = is_quiet(cfg, elapsed), int(elapsed // cfg.quiet_every_s) if cfg.quiet_every_s else 0
                hold = quiet and cfg.row_level and held_cycle != cycle and (cycle + process) % 2 == 0
                position = _position(log)
                mops = generate_txn(rng, quiet_cfg if quiet and not hold else cfg, position, next_value)
                handle = rec.invoke(mops)
                if hold:
                    held_cycle = cycle
                    quiet_end = started + (cycle + 1) * cfg.quiet_every_s
                    res = rows.execute_txn(log, mops, window, partial(_sleep_until, quiet_end))
                else:
                    res = (rows.execute_txn if cfg.row_level else execute_txn)(log, mops, window)
                rec.complete(handle, res.outcome, res.mops, res.error, res.commit_version, res.attempts)  # type: ignore[arg-type]
                _tally(stats, errors, res)
                # Each step of the retirement bound is one process's job, taken in turn.
                bound = window(position)
                if bound > retired_up_to and bound % cfg.processes == process and not quiet:
                    retired_up_to = bound
                    _retire(log, cfg, stats, errors)
                if cfg.pause_s > 0:
                    time.sleep(rng.uniform(0, 2 * cfg.pause_s))
        log.wait_for_checkpoints()
    except BaseException:  # noqa: BLE001 - report it to the parent; the history stays usable
        stats.crashed = traceback.format_exc()
    stats.errors = dict(errors)
    if isinstance(store, FaultyLogStore):
        stats.faults = dict(store.counts)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    stats.cpu_s = ru.ru_utime + ru.ru_stime
    stats_path.write_text(json.dumps(asdict(stats)))


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def is_quiet(cfg: WorkloadConfig, elapsed_s: float) -> bool:
    """Whether ``elapsed_s`` into the run falls in a quiet part of the pacing cycle (the workers commit nothing)."""
    if cfg.quiet_every_s <= 0 or cfg.quiet_s <= 0:
        return False
    return elapsed_s % cfg.quiet_every_s >= cfg.quiet_every_s - cfg.quiet_s


def _retire(log: DeltaLog, cfg: WorkloadConfig, stats: WorkerStats, errors: Counter[str]) -> None:
    """Retire old keys; a conflict or fault just leaves them to the next retirement."""
    try:
        retire = rows.retire_keys if cfg.row_level else retire_keys
        if retire(log, lambda v: retired_below(cfg, v)) is not None:
            stats.retirements += 1
    except Exception as e:  # noqa: BLE001
        stats.retirements_failed += 1
        errors[f"retire:{type(e).__name__}"] += 1


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


class Alongside(Protocol):
    """Other writer processes run beside the workers on the same table (:mod:`serialake.verify.mixed`).

    They take process ids from ``cfg.processes`` on, write ``history-<id>.jsonl`` and
    ``stats-<id>.json`` into the run's work directory, and are stopped by process id.
    """

    processes: int

    def start(self, table: str, cfg: WorkloadConfig, workdir: Path) -> None:
        """Start them on the created table; return when they are ready to run (not yet running)."""

    def go(self) -> None:
        """Let them run (called as the workers are released)."""

    def finish(self, deadline: float) -> list[int | None]:
        """After the workers ended (or on error): stop them, by ``deadline`` at the latest; their exit codes."""


def run_workload(
    table: str, cfg: WorkloadConfig, workdir: str | os.PathLike[str], alongside: Alongside | None = None
) -> WorkloadResult:
    """Create the table, run ``cfg.processes`` workers on it at once, merge their histories.

    ``alongside``: other writers started before the workers and released with them.
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    DeltaLog.clear_cache()
    if cfg.row_level and not _is_local(table):
        raise ValueError("the row-level workload writes its data files locally: it does not run on S3")
    if cfg.row_level:
        rows.create_table(table, [key_name(i) for i in range(cfg.key_count)],
                          table_properties(cfg.isolation_level, cfg.checkpoint_interval), cfg.fsync)
    else:
        create_table(table, cfg.isolation_level, cfg.checkpoint_interval, cfg.fsync)
    local = _is_local(table)
    if not local and not cfg.env:  # the workers reach S3 as this process does
        cfg = replace(cfg, env=s3_environment())
    ctx = mp.get_context("fork") if local else fork_server()
    start = ctx.Event()
    procs = [
        ctx.Process(target=_worker, args=(table, cfg, p, str(work), start), name=f"list-append-{p}")
        for p in range(cfg.processes)
    ]
    others: list[int | None] = []
    try:
        if alongside is not None:
            alongside.start(table, cfg, work)
        cpu0 = _children_cpu()
        for p in procs:
            p.start()
        t0 = time.monotonic()
        start.set()
        if alongside is not None:
            alongside.go()
        deadline = t0 + cfg.timeout_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():  # hung: kill it; its in-flight txn is recorded as info
                p.kill()
                p.join()
        if alongside is not None:
            others = alongside.finish(time.monotonic() + ALONGSIDE_STOP_S)
    wall = time.monotonic() - t0
    cpu: float | None = _children_cpu() - cpu0
    history = History.merge(sorted(work.glob("history-*.jsonl")))
    stats = _load_stats(work, cfg.processes + (alongside.processes if alongside is not None else 0))
    if not local:  # the fork server's children are not ours: each worker measured its own
        cpu = sum(s.cpu_s for s in stats if s.cpu_s is not None) or None
    return WorkloadResult(cfg, table, history, stats, wall, [p.exitcode for p in procs] + others, cpu)


def fork_server() -> Any:
    """A ``forkserver`` context whose server has the workload and crash trials imported (forks start warm).

    For S3 tables: the fork server is a fresh interpreter that never made an S3 request,
    so its children can (see the module docstring). As with ``spawn``, a script that starts
    workers this way must guard its main code with ``if __name__ == "__main__":``.
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["serialake.verify.workload", "serialake.verify.crash"])
    return ctx


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished, waited-for children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


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


def _is_retirement(actions: Sequence[Any]) -> bool:
    """A commit of :func:`retire_keys`: its commitInfo says so and it adds no new data file."""
    ci = next((a for a in actions if isinstance(a, CommitInfo)), None)
    params = (ci.values.get("operationParameters") or {}) if ci is not None else {}
    new_files = [a for a in actions if isinstance(a, AddFile) and a.deletion_vector is None]
    return params.get("workload") == RETIRE_WORKLOAD and not new_files


def audit_log(
    table: str,
    history: History,
    *,
    commit_lists: Callable[[str, Sequence[Any]], list[list[int]]] | None = None,
    check_commit: Callable[[int, Sequence[Any], int | None], list[str]] | None = None,
) -> list[str]:
    """Check the log against the history: every commit after version 0 is exactly one txn's.

    Each commit is attributed to the txn that appended the last value of one of its new
    lists. An ``ok`` txn must own exactly the commit at its reported version (not lost,
    not duplicated); ``fail`` txns own none; ``info`` txns at most one. ``commit_lists``
    (table, actions) gives the lists a commit wrote (default: this workload's file tags
    or row-level files). ``check_commit(version, actions, owner)`` adds checks of each
    commit, given the index in ``history`` of the txn it was attributed to (None for a
    retirement).
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
        if not owners and _is_retirement(entry.actions):
            if check_commit is not None:
                problems += check_commit(version, entry.actions, None)
            continue  # retired old keys: wrote no list, belongs to no txn
        if len(owners) != 1 or -1 in owners:
            problems.append(f"version {version}: cannot attribute the commit to one txn (owners {sorted(owners)})")
            continue
        owner = owners.pop()
        owned.setdefault(owner, []).append(version)
        if check_commit is not None:
            problems += check_commit(version, entry.actions, owner)
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
