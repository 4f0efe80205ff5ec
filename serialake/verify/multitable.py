"""Multi-table transactions under concurrency: pairs committed in order, a derived table, readers of all.

Three tables hold list-append keys as in ``workload`` (key ``x`` of table ``a`` is history
key ``a/x``): ``a``, ``b`` and ``d``, where ``d`` is declared maintained from ``a``
(``serialake.maintainedFrom``). Processes of three kinds run at once:

- writers append a fresh value ``v`` to ``a/x``, and once that commit is acknowledged, the
  same ``v`` to ``b/x`` (two transactions, in real-time order). A read that shows ``v`` in
  ``b/x`` but not in ``a/x`` saw a state that never existed: with real-time edges the
  checker finds the cycle ``A -rt-> B -wr-> R -rw-> A``;
- a maintainer keeps ``d`` up to date: one transaction reads every key of ``a`` at its
  latest version, appends to ``d/x`` the values of ``a/x`` that ``d/x`` lacks, records the
  read of ``a`` (``commitInfo["serialake.readTables"]``) and commits (also when nothing
  was missing, so ``d`` always says which version of ``a`` it reflects). A read that shows
  ``v`` in ``d/x`` but not in ``a/x`` is a cycle ``A -wr-> M -wr-> R -rw-> A`` even without
  real-time edges;
- readers read every key of the three tables in one read-only transaction, through
  ``core.derived.read_cut``: STRICT (``strict=True``: a fresh cut after the read started,
  waiting for ``d`` to reflect ``a``'s version in it) or SERIALIZABLE (a cut, with ``a``
  read at the version ``d`` reflects, no wait).

``control=True`` is the negative control: readers refresh each table on its own, one after
the other (what a per-table snapshot does), and the checker must find the torn reads.
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
from serialake.core.log.snapshot import Snapshot
from serialake.core.model.actions import AddFile, Metadata
from serialake.core.tables import derived
from serialake.storage.local import LocalLogStore
from serialake.verify import processes
from serialake.verify.history import History, Mop, Recorder
from serialake.verify.txn import TxnResult, commit_txn, error_class, error_text, key_name
from serialake.verify.workload import (
    PARTITION_COLUMN,
    SCHEMA,
    VALUE_BASE,
    _key_predicate,
    _new_file,
    _tombstone,
    execute_txn,
    read_key,
    table_properties,
)

__all__ = ["MultiTableConfig", "MultiTableResult", "TABLES", "create_tables", "run_multitable"]

TABLES = ("a", "b", "d")


@dataclass(frozen=True)
class MultiTableConfig:
    """One run: writers and readers each run ``txns`` transactions; maintainers run until both finish."""

    writers: int = 3
    readers: int = 2
    maintainers: int = 1
    txns: int = 100
    key_count: int = 3
    strict: bool = True
    control: bool = False  # negative control: readers refresh each table on its own
    control_gap_s: float = 0.003  # pause between the control's per-table refreshes
    writer_pause_s: float = 0.01  # writers pause up to this long between pairs (sources are not always busy)
    wait_s: float = 30.0  # how long a STRICT read waits for the derived table
    seed: int = 0
    timeout_s: float = 600.0
    fsync: bool = True


@dataclass
class MultiTableResult:
    """Merged history and counters of one run."""

    config: MultiTableConfig
    history: History
    wall_s: float
    counts: dict[str, int] = field(default_factory=dict)  # per kind: ok / fail / info and errors
    crashed: list[str] = field(default_factory=list)


def create_tables(root: str | Path, fsync: bool = True) -> dict[str, str]:
    """Empty tables ``a``, ``b`` and ``d`` (``d`` maintained from ``a``, computed from its first version)."""
    paths = {name: str(Path(root) / name) for name in TABLES}
    for name, path in paths.items():
        conf = table_properties("Serializable", 10)
        if name == "d":
            conf[derived.MAINTAINED_FROM] = paths["a"]
        log = DeltaLog(path, store=LocalLogStore(fsync=fsync))
        txn = log.start_transaction()
        txn.update_metadata(Metadata(schema_string=SCHEMA, partition_columns=(PARTITION_COLUMN,), configuration=conf))
        txn.commit([], operation="CREATE TABLE")
    # d is created from a, as a CREATE TABLE ... AS SELECT would: it reflects a's first version.
    a = DeltaLog(paths["a"], store=LocalLogStore(fsync=fsync))
    txn = DeltaLog(paths["d"], store=LocalLogStore(fsync=fsync)).start_transaction()
    txn.record_table_read(a.table_path, a.update().version)
    txn.commit([], operation="WRITE")
    return paths


def _prefixed(table: str, mops: tuple[Mop, ...]) -> list[Mop]:
    return [(f, f"{table}/{k}", v) for f, k, v in mops]


def _history_version(table: str, version: int | None) -> int | None:
    """A commit version unique across the tables (the checker expects one commit per version)."""
    return None if version is None else version * len(TABLES) + TABLES.index(table)


def _key_files(snap: Snapshot, key: str) -> list[AddFile]:
    return [f for f in snap.all_files if (f.partition_values or {}).get(PARTITION_COLUMN) == key]


# -- the three kinds of process --------------------------------------------------------------


def _writer(paths: dict[str, str], cfg: MultiTableConfig, rec: Recorder, process: int, tally: Counter[str]) -> None:
    rng = random.Random(cfg.seed * 7919 + process)
    logs = {t: DeltaLog(paths[t], store=LocalLogStore(fsync=cfg.fsync)) for t in ("a", "b")}
    for i in range(1, cfg.txns + 1):
        value = process * VALUE_BASE + i
        key = key_name(rng.randrange(cfg.key_count))
        for table in ("a", "b"):
            handle = rec.invoke([("append", f"{table}/{key}", value)])
            res = execute_txn(logs[table], [("append", key, value)])
            version = _history_version(table, res.commit_version)
            rec.complete(handle, res.outcome, _prefixed(table, res.mops), res.error, version, res.attempts)  # type: ignore[arg-type]
            tally[f"writer:{res.outcome}" + ("" if res.outcome == "ok" else f":{error_class(res.error)}")] += 1
            if res.outcome != "ok":
                break  # b only after a is acknowledged
        time.sleep(rng.uniform(0, cfg.writer_pause_s))


def _maintain_once(a: DeltaLog, d: DeltaLog, keys: list[str], rec: Recorder) -> TxnResult:
    started = rec.now()
    try:
        txn = d.start_transaction()
        snap_a = a.update()
        source = {k: read_key(_key_files(snap_a, k)) for k in keys}
        files = {k: txn.filter_files([_key_predicate(k)]) for k in keys}
        mine = {k: read_key(files[k]) for k in keys}
    except Exception as e:  # noqa: BLE001 - nothing written
        handle = rec.invoke([("r", f"a/{k}", None) for k in keys], at=started)
        rec.complete(handle, "fail", None, error_text(e))
        return TxnResult("fail", (), error_text(e))
    mops: list[Mop] = [("r", f"a/{k}", tuple(source[k])) for k in keys]
    mops += [("r", f"d/{k}", tuple(mine[k])) for k in keys]
    missing = {k: [v for v in source[k] if v not in set(mine[k])] for k in keys}
    mops += [("append", f"d/{k}", v) for k in keys for v in missing[k]]
    handle = rec.invoke([(f, k, None if f == "r" else v) for f, k, v in mops], at=started)
    actions: list[Any] = []
    for k in keys:
        if missing[k]:
            actions += [_tombstone(f) for f in files[k]]
            actions.append(_new_file(k, mine[k] + missing[k], txn.read_version, txn.txn_id))
    txn.record_table_read(a.table_path, snap_a.version)
    res = commit_txn(txn, actions, mops, list(mops), "maintain")
    version = _history_version("d", res.commit_version)
    rec.complete(handle, res.outcome, res.mops, res.error, version, res.attempts)  # type: ignore[arg-type]
    return res


def _maintainer(paths: dict[str, str], cfg: MultiTableConfig, rec: Recorder, stop: Any, tally: Counter[str]) -> None:
    a = DeltaLog(paths["a"], store=LocalLogStore(fsync=cfg.fsync))
    d = DeltaLog(paths["d"], store=LocalLogStore(fsync=cfg.fsync))
    keys = [key_name(i) for i in range(cfg.key_count)]
    while not stop.is_set():
        res = _maintain_once(a, d, keys, rec)
        tally[f"maintainer:{res.outcome}" + ("" if res.outcome == "ok" else f":{error_class(res.error)}")] += 1
        time.sleep(0.001)


def _reader(paths: dict[str, str], cfg: MultiTableConfig, rec: Recorder, process: int, tally: Counter[str]) -> None:
    keys = [key_name(i) for i in range(cfg.key_count)]
    invoked: list[Mop] = [("r", f"{t}/{k}", None) for t in TABLES for k in keys]
    logs = {t: DeltaLog(paths[t], store=LocalLogStore(fsync=cfg.fsync)) for t in TABLES}
    for _ in range(cfg.txns):
        handle = rec.invoke(invoked)
        try:
            if cfg.control:
                snaps = {}
                for t in TABLES:  # one table after the other: no cut
                    snaps[t] = logs[t].update()
                    time.sleep(cfg.control_gap_s)
            else:
                by_path = derived.read_cut(
                    {logs[t].table_path: t for t in TABLES}, strict=cfg.strict, timeout_s=30, wait_s=cfg.wait_s
                )
                snaps = {t: by_path[logs[t].table_path] for t in TABLES}
        except Exception as e:  # noqa: BLE001 - a read that fails read nothing
            rec.complete(handle, "fail", None, error_text(e))
            tally[f"reader:fail:{type(e).__name__}"] += 1
            continue
        done = [("r", f"{t}/{k}", tuple(read_key(_key_files(snaps[t], k)))) for t in TABLES for k in keys]
        rec.complete(handle, "ok", done)
        tally["reader:ok"] += 1


def _child(
    kind: str, paths: dict[str, str], cfg: MultiTableConfig, process: int, work: str, start: Any, stop: Any
) -> None:
    def body(rec: Recorder, tally: Counter[str]) -> None:
        if kind == "writer":
            _writer(paths, cfg, rec, process, tally)
        elif kind == "reader":
            _reader(paths, cfg, rec, process, tally)
        else:
            _maintainer(paths, cfg, rec, stop, tally)

    processes.child(work, process, start, body)


def run_multitable(root: str | Path, cfg: MultiTableConfig) -> MultiTableResult:
    """Create the tables under ``root``, run every process at once, merge the histories."""
    work = Path(root) / "history"
    work.mkdir(parents=True, exist_ok=True)
    paths = create_tables(Path(root) / "tables", cfg.fsync)
    ctx = mp.get_context("fork")
    start, stop = ctx.Event(), ctx.Event()
    kinds = ["writer"] * cfg.writers + ["reader"] * cfg.readers + ["maintainer"] * cfg.maintainers
    procs = [
        ctx.Process(target=_child, args=(kind, paths, cfg, i, str(work), start, stop), name=f"multitable-{kind}-{i}")
        for i, kind in enumerate(kinds)
    ]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    start.set()
    deadline = t0 + cfg.timeout_s
    for p, kind in zip(procs, kinds, strict=True):
        if kind != "maintainer":
            p.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    counts, crashed = processes.finish(procs, deadline, work, [f"{i} ({kind})" for i, kind in enumerate(kinds)])
    wall = time.monotonic() - t0
    history = History.merge(sorted(work.glob("history-*.jsonl")))
    return MultiTableResult(cfg, history, wall, counts, crashed)


def result_summary(result: MultiTableResult) -> dict[str, Any]:
    """What a report shows of a run (JSON-ready)."""
    return processes.summary(result.config, result.wall_s, result.counts)
