"""Write transactions across tables under concurrency: write skew across two tables, checked.

Two tables ``a`` and ``b`` hold list-append keys as in ``workload`` (key ``x`` of table ``a``
is history key ``a/x``). Each process runs transactions of one shape, the classic write skew:
read key ``x`` of **both** tables, then append a fresh value to ``x`` of one of them (or, in
``both_fraction`` of them, of both). Two such transactions running at once, one appending
to ``a/x`` and the other to ``b/x``, each read what the other writes: whichever order the
checker tries, one of them missed the other's append. If both commit, the history has the
cycle ``T1 -rw[b/x]-> T2 -rw[a/x]-> T1`` (G2-item), which no serial order gives.

- **Groups** (the default): each transaction is one ``GroupTransaction``
  (``core.txn.group``): a table written is a ``write`` (its key read through that
  transaction), a table only read is a ``read``; ``commit`` validates the reads of both
  tables and commits the appends all or nothing. The checker must find no cycle.
- **Control** (``control=True``): the same transactions as per-table commits, what OSS
  Delta and the #7437 RFC give: each table written commits on its own
  (``OptimisticTransaction``), validating only its own read; the other table's read is a
  snapshot read no one checks. The checker must find the write skew, which proves it can
  fail. A transaction whose second commit fails after its first landed is recorded as
  ``info`` (partly visible: not a definite failure).

Every transaction's dependency edges (``ww``, ``wr``, ``rw`` per key, keys named by table)
connect transactions across the two tables: the checker's graph is one graph over both.
A committed group reports as its commit version the one of its first table written, made
unique across the tables as ``multitable`` does.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.actions import AddFile, Metadata
from serialake.core.txn.group import GroupTransaction
from serialake.exceptions import CommitFailedError, DeltaConcurrentModificationException
from serialake.storage.local import LocalLogStore
from serialake.verify import processes
from serialake.verify.history import History, Mop, Recorder
from serialake.verify.txn import TxnResult, error_class, error_text, key_name
from serialake.verify.workload import (
    PARTITION_COLUMN,
    SCHEMA,
    VALUE_BASE,
    _key_predicate,
    _new_file,
    _tombstone,
    read_key,
    table_properties,
)

__all__ = ["GroupWritesConfig", "GroupWritesResult", "TABLES", "create_tables", "run_group_writes"]

TABLES = ("a", "b")
WORKLOAD = "group-write-skew"  # operationParameters.workload of its commits


@dataclass(frozen=True)
class GroupWritesConfig:
    """One run: ``processes`` processes, each running ``txns`` transactions over ``key_count`` keys."""

    processes: int = 4
    txns: int = 40
    key_count: int = 2
    both_fraction: float = 0.25  # share of transactions appending to both tables
    control: bool = False  # negative control: per-table commits, reads of the other table unchecked
    pause_s: float = 0.002  # pause up to this long between transactions
    seed: int = 0
    timeout_s: float = 600.0
    fsync: bool = True


@dataclass
class GroupWritesResult:
    """Merged history and counters of one run."""

    config: GroupWritesConfig
    history: History
    wall_s: float
    counts: dict[str, int] = field(default_factory=dict)  # ok / fail / info, with error classes
    crashed: list[str] = field(default_factory=list)


def create_tables(root: str | Path, fsync: bool = True) -> dict[str, str]:
    """Empty list-append tables ``a`` and ``b`` (Serializable)."""
    paths = {name: str(Path(root) / name) for name in TABLES}
    for path in paths.values():
        log = DeltaLog(path, store=LocalLogStore(fsync=fsync))
        txn = log.start_transaction()
        txn.update_metadata(
            Metadata(
                schema_string=SCHEMA, partition_columns=(PARTITION_COLUMN,),
                configuration=table_properties("Serializable", 10),
            )
        )  # fmt: skip
        txn.commit([], operation="CREATE TABLE")
    return paths


def _history_version(table: str, version: int | None) -> int | None:
    """A commit version unique across the tables (the checker expects one commit per version)."""
    return None if version is None else version * len(TABLES) + TABLES.index(table)


def _files(files: list[AddFile], key: str) -> list[AddFile]:
    return [f for f in files if (f.partition_values or {}).get(PARTITION_COLUMN) == key]


def _rewrite(files: list[AddFile], key: str, values: list[int], read_version: int, txn_id: str) -> list[Any]:
    """The copy-on-write append of ``workload``: remove the key's files, add one with the whole list."""
    return [*(_tombstone(f) for f in files), _new_file(key, list(dict.fromkeys(values)), read_version, txn_id)]


def run_group(logs: dict[str, DeltaLog], key: str, appends: dict[str, int]) -> TxnResult:
    """Read ``key`` of every table, append ``appends[table]`` to the tables named: one group."""
    g = GroupTransaction()
    try:
        done: list[Mop] = []
        writes: dict[str, tuple[Any, list[AddFile], list[int]]] = {}
        for table in TABLES:
            if table in appends:
                txn = g.write(logs[table])
                files = txn.filter_files([_key_predicate(key)])
                writes[table] = (txn, files, read_key(files))
            else:
                files = g.read(logs[table], [_key_predicate(key)])
            done.append(("r", f"{table}/{key}", tuple(read_key(files))))
        for table, (txn, files, values) in writes.items():
            actions = _rewrite(files, key, [*values, appends[table]], txn.read_version, txn.txn_id)
            g.add(txn, actions, "UPDATE", {"workload": WORKLOAD})
            done.append(("append", f"{table}/{key}", appends[table]))
    except Exception as e:  # noqa: BLE001 - nothing was written: a definite failure
        return TxnResult("fail", (), error_text(e))
    try:
        res = g.commit()
    except DeltaConcurrentModificationException as e:
        return TxnResult("fail", tuple(done), error_text(e))
    except CommitFailedError as e:  # (GroupPublicationError among them: committed in some tables)
        return TxnResult("info", tuple(done), error_text(e))
    except Exception as e:  # noqa: BLE001 - e.g. an I/O error: the outcome is unknown
        return TxnResult("info", tuple(done), error_text(e))
    table = next(t for t in TABLES if logs[t].table_path in res.versions)  # (the first table written)
    version = _history_version(table, res.versions[logs[table].table_path])
    return TxnResult("ok", tuple(done), None, version, 1, res.duration_s)


def run_separately(logs: dict[str, DeltaLog], key: str, appends: dict[str, int]) -> TxnResult:
    """The control: the same reads, each table written committed on its own (the other's read unchecked)."""
    done: list[Mop] = []
    txns: dict[str, tuple[Any, list[AddFile], list[int]]] = {}
    try:
        for table in TABLES:
            if table in appends:
                txn = logs[table].start_transaction()
                files = txn.filter_files([_key_predicate(key)])
                txns[table] = (txn, files, read_key(files))
            else:  # a snapshot read no commit checks
                files = _files(list(logs[table].update().all_files), key)
            done.append(("r", f"{table}/{key}", tuple(read_key(files))))
    except Exception as e:  # noqa: BLE001 - nothing was written
        return TxnResult("fail", (), error_text(e))
    done += [("append", f"{table}/{key}", appends[table]) for table in txns]
    version: int | None = None
    committed = 0
    for table, (txn, files, values) in txns.items():
        actions = _rewrite(files, key, [*values, appends[table]], txn.read_version, txn.txn_id)
        try:
            txn.commit(actions, operation="UPDATE", operation_parameters={"workload": WORKLOAD})
        except DeltaConcurrentModificationException as e:
            return TxnResult("info" if committed else "fail", tuple(done), error_text(e), version)
        except Exception as e:  # noqa: BLE001 - the outcome of this commit is unknown
            return TxnResult("info", tuple(done), error_text(e), version)
        assert txn.committed is not None
        if version is None:
            version = _history_version(table, txn.committed.version)
        committed += 1
    return TxnResult("ok", tuple(done), None, version, 1)


def _worker(paths: dict[str, str], cfg: GroupWritesConfig, rec: Recorder, process: int, tally: Counter[str]) -> None:
    rng = random.Random(cfg.seed * 7919 + process)
    logs = {t: DeltaLog(paths[t], store=LocalLogStore(fsync=cfg.fsync)) for t in TABLES}
    run = run_separately if cfg.control else run_group
    for i in range(1, cfg.txns + 1):
        key = key_name(rng.randrange(cfg.key_count))
        value = process * VALUE_BASE + i
        written = list(TABLES) if rng.random() < cfg.both_fraction else [rng.choice(TABLES)]
        appends = {t: value for t in written}
        invoked: list[Mop] = [("r", f"{t}/{key}", None) for t in TABLES]
        invoked += [("append", f"{t}/{key}", value) for t in written]
        handle = rec.invoke(invoked)
        res = run(logs, key, appends)
        rec.complete(handle, res.outcome, res.mops or None, res.error, res.commit_version, res.attempts)  # type: ignore[arg-type]
        tally[res.outcome + ("" if res.outcome == "ok" else f":{error_class(res.error)}")] += 1
        time.sleep(rng.uniform(0, cfg.pause_s))


def _final_read(paths: dict[str, str], cfg: GroupWritesConfig, rec: Recorder) -> None:
    """Every key of both tables read at the end (all writers done): the lists' final order."""
    DeltaLog.clear_cache()
    logs = {t: DeltaLog(paths[t], store=LocalLogStore(fsync=cfg.fsync)) for t in TABLES}
    keys = [key_name(i) for i in range(cfg.key_count)]
    handle = rec.invoke([("r", f"{t}/{k}", None) for t in TABLES for k in keys])
    snaps = {t: logs[t].update() for t in TABLES}
    done = [("r", f"{t}/{k}", tuple(read_key(_files(list(snaps[t].all_files), k)))) for t in TABLES for k in keys]
    rec.complete(handle, "ok", done)


def _child(paths: dict[str, str], cfg: GroupWritesConfig, process: int, work: str, start: Any) -> None:
    processes.child(work, process, start, lambda rec, tally: _worker(paths, cfg, rec, process, tally))


def run_group_writes(root: str | Path, cfg: GroupWritesConfig) -> GroupWritesResult:
    """Create the tables under ``root``, run every process at once, read every key, merge the histories."""
    work = Path(root) / "history"
    work.mkdir(parents=True, exist_ok=True)
    paths = create_tables(Path(root) / "tables", cfg.fsync)
    ctx = mp.get_context("fork")
    start = ctx.Event()
    procs = [
        ctx.Process(target=_child, args=(paths, cfg, i, str(work), start), name=f"group-writes-{i}")
        for i in range(cfg.processes)
    ]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    start.set()
    deadline = t0 + cfg.timeout_s
    counts, crashed = processes.finish(procs, deadline, work, [str(i) for i in range(len(procs))])
    wall = time.monotonic() - t0
    with Recorder(work / f"history-{cfg.processes}.jsonl", process=cfg.processes) as rec:
        _final_read(paths, cfg, rec)
    history = History.merge(sorted(work.glob("history-*.jsonl")))
    return GroupWritesResult(cfg, history, wall, counts, crashed)


def result_summary(result: GroupWritesResult) -> dict[str, Any]:
    """What a report shows of a run (JSON-ready)."""
    return processes.summary(result.config, result.wall_s, result.counts)
