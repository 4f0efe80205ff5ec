"""The list-append workload through Spark DataFrames: appends computed from a read of the target.

Mapping: a real Delta table written by serialake, partitioned by ``k`` (columns ``k``
string, ``v`` long, ``pos`` long); key ``x``'s list is the rows of partition ``k = 'x'``
ordered by ``pos``. Worker threads of one process share one SparkSession, each with its
own :class:`~serialake.verify.history.Recorder` (process id = thread number). Two kinds of
transaction:

- read-only: one ``serialake.read`` DataFrame (one snapshot) over a few keys, collected;
- append computed from a read of the target: one ``serialake.read`` DataFrame ``base``
  (one pinned snapshot) gives ``ys = base.where(k = y)`` and ``xs = base.where(k = x)``
  (``y`` may be ``x``); both lists are observed by collecting them; the new row of ``x``
  comes out of a one-row aggregate over ``ys`` (its ``pos`` is the length of ``x``'s list
  as read), is unioned with ``xs`` and written with ``serialake.write(..., mode="overwrite",
  replaceWhere="k = 'x'")`` (copy-on-write of partition ``x``). Mops: ``r y``, ``r x``
  (when ``y != x``), ``append x v``.

Only read tracking (:mod:`serialake.spark.scans`) makes the write depend on the read of
``y``: without it the write's transaction only reads partition ``x`` at the version the
write started, so two such transactions with crossed keys both commit (write skew), and a
commit to ``x`` between the read and the write is overwritten (lost update). The negative
control (:func:`read_tracking_off`) runs exactly that.
"""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

import serialake
from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.actions import AddFile
from serialake.core.model.paths import absolute_path
from serialake.exceptions import CommitFailedError, DeltaConcurrentModificationException
from serialake.spark import scans
from serialake.verify.history import History, Mop, Recorder
from serialake.verify.txn import TxnResult, error_text, key_name
from serialake.verify.workload import (
    VALUE_BASE,
    WorkerStats,
    WorkloadConfig,
    WorkloadResult,
    _tally,
    audit_log,
)

__all__ = [
    "APPEND_KIND",
    "DataFrameConfig",
    "PlannedAppend",
    "append_mops",
    "audit_table",
    "commit_append",
    "commit_lists",
    "create_table",
    "execute_append",
    "execute_read",
    "lists_of",
    "new_kind_counts",
    "plan_append",
    "read_tracking_off",
    "run_dataframe_workload",
]

SCHEMA = "k string, v long, pos long"
APPEND_KIND = "append computed from a read of the target"


@dataclass(frozen=True)
class DataFrameConfig:
    """One run: ``threads`` workers of one process each running ``txns`` transactions."""

    threads: int = 4
    txns: int = 20
    isolation_level: str = "Serializable"
    key_count: int = 3  # few keys: crossed reads and writes are frequent
    read_only_fraction: float = 0.2
    max_read_keys: int = 3
    seed: int = 0
    timeout_s: float = 600.0  # no new transaction starts after this

    def workload_config(self) -> WorkloadConfig:
        """The same run described as a :class:`WorkloadConfig` (what the runner's report reads)."""
        return WorkloadConfig(
            processes=self.threads, txns=self.txns, isolation_level=self.isolation_level,
            key_count=self.key_count, read_only_fraction=self.read_only_fraction, faulty_processes=0,
            seed=self.seed, timeout_s=self.timeout_s,
        )  # fmt: skip


# -- table ----------------------------------------------------------------------------------
def create_table(spark: SparkSession, path: str, isolation_level: str) -> None:
    """An empty table partitioned by ``k`` at ``isolation_level`` (version 0)."""
    empty = spark.createDataFrame([], SCHEMA)
    serialake.write(empty, path, mode="error", partitionBy="k", properties={"delta.isolationLevel": isolation_level})


def lists_of(rows: Sequence[Row]) -> dict[str, list[int]]:
    """Each key's list: its rows' ``v`` ordered by ``pos`` (then ``v``, so duplicates show)."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for r in rows:
        by_key.setdefault(r["k"], []).append((r["pos"], r["v"]))
    return {k: [v for _, v in sorted(pairs)] for k, pairs in by_key.items()}


def _in(keys: Sequence[str]) -> str:
    return "k IN (" + ", ".join(f"'{k}'" for k in keys) + ")"


# -- transactions ---------------------------------------------------------------------------
def execute_read(spark: SparkSession, table: str, keys: Sequence[str]) -> TxnResult:
    """Read ``keys`` through one DataFrame (one snapshot); ``commit_version`` is the version read."""
    mops = tuple(("r", k, None) for k in keys)
    try:
        df = serialake.read(spark, table, filter=_in(keys))
        lists = lists_of(df.select("k", "v", "pos").collect())
        version = scans.scans_of(df)[0].version
    except Exception as e:  # noqa: BLE001 - a read writes nothing: a definite failure
        return TxnResult("fail", mops, error_text(e))
    return TxnResult("ok", tuple(("r", k, tuple(lists.get(k, []))) for k in keys), commit_version=version)


def append_mops(y: str, x: str, value: int) -> list[Mop]:
    """The mops of one append computed from a read: ``r y``, ``r x`` (if another key), ``append x``."""
    reads = [y] if y == x else [y, x]
    return [("r", k, None) for k in reads] + [("append", x, value)]


@dataclass(frozen=True)
class PlannedAppend:
    """An append computed from a read, read and planned but not written yet."""

    table: str
    key: str
    mops: tuple[Mop, ...]  # as invoked
    done: tuple[Mop, ...]  # with the lists read
    data: DataFrame  # the partition's new rows


def plan_append(spark: SparkSession, table: str, y: str, x: str, value: int) -> PlannedAppend | TxnResult:
    """Read ``y`` and ``x`` through one DataFrame and compute ``x``'s new rows (a ``fail`` result on error)."""
    mops = tuple(append_mops(y, x, value))
    try:
        base = serialake.read(spark, table, filter=_in(sorted({x, y})))
        ys = base.where(F.col("k") == y)
        xs = base.where(F.col("k") == x)
        # The lists the write is computed from: same pinned files, so the same rows.
        lists = lists_of(base.select("k", "v", "pos").collect())
        pos = len(lists.get(x, []))
        new = ys.agg(F.count(F.lit(1)).alias("n")).select(
            F.lit(x).alias("k"), F.lit(value).cast("long").alias("v"), F.lit(pos).cast("long").alias("pos")
        )
        # One file per commit: the partition's file count stays at one.
        data = xs.select("k", "v", "pos").unionByName(new).coalesce(1)
    except Exception as e:  # noqa: BLE001 - nothing was written: a definite failure
        return TxnResult("fail", mops, error_text(e))
    done = tuple((f, k, tuple(lists.get(k, [])) if f == "r" else v) for f, k, v in mops)
    return PlannedAppend(table, x, mops, done, data)


def commit_append(plan: PlannedAppend) -> TxnResult:
    """Write the planned rows over partition ``x`` (``replaceWhere``); ok / fail (conflict) / info (unknown)."""
    t0 = time.monotonic()
    try:
        version = serialake.write(plan.data, plan.table, mode="overwrite", replaceWhere=f"k = '{plan.key}'")
    except DeltaConcurrentModificationException as e:
        return TxnResult("fail", plan.mops, error_text(e))
    except CommitFailedError as e:  # gave up retrying: a lost response may still have landed
        return TxnResult("info", plan.mops, error_text(e))
    except Exception as e:  # noqa: BLE001 - e.g. a Spark or I/O error: the commit may or may not exist
        return TxnResult("info", plan.mops, error_text(e))
    duration = time.monotonic() - t0
    assert version is not None
    return TxnResult("ok", plan.done, None, version, _attempts(plan.table, version), duration)


def execute_append(spark: SparkSession, table: str, y: str, x: str, value: int) -> TxnResult:
    """Append ``value`` to ``x`` with a row computed from ``y``'s rows: plan, then write."""
    plan = plan_append(spark, table, y, x, value)
    return plan if isinstance(plan, TxnResult) else commit_append(plan)


def _attempts(table: str, version: int) -> int:
    """1 + the commits the write rebased over (its commitInfo's readVersion to ``version``).

    ``serialake.write`` does not return its attempt count; this is what the log tells.
    """
    info = DeltaLog.for_table(table).read_commit(version).commit_info
    read_version = info.get("readVersion") if info is not None else None
    return 1 + max(0, version - 1 - int(read_version)) if read_version is not None else 1


# -- negative control -----------------------------------------------------------------------
@contextmanager
def read_tracking_off() -> Iterator[None]:
    """Writes record no scan of their DataFrame (the state before read tracking); restored on exit."""
    saved = scans.record_scans

    def record_nothing(txn: Any, df: DataFrame) -> list[scans.TableScan]:
        return []

    scans.record_scans = record_nothing
    try:
        yield
    finally:
        scans.record_scans = saved


# -- run ------------------------------------------------------------------------------------
def _worker(
    spark: SparkSession, table: str, cfg: DataFrameConfig, process: int, workdir: Path,
    start: threading.Event, deadline: float, stats: WorkerStats,
) -> None:  # fmt: skip
    """One thread: ``cfg.txns`` transactions, recorded in its own history file."""
    rng = random.Random(cfg.seed * 7919 + process)
    counter = iter(range(1, VALUE_BASE))
    keys = [key_name(i) for i in range(cfg.key_count)]
    errors: Counter[str] = Counter()
    start.wait()
    try:
        with Recorder(workdir / f"history-{process}.jsonl", process=process) as rec:
            for _ in range(cfg.txns):
                if time.monotonic() > deadline:
                    break
                if rng.random() < cfg.read_only_fraction:
                    picked = rng.sample(keys, rng.randint(1, min(cfg.max_read_keys, len(keys))))
                    handle = rec.invoke([("r", k, None) for k in picked])
                    res = execute_read(spark, table, picked)
                else:
                    y, x = rng.choice(keys), rng.choice(keys)
                    value = process * VALUE_BASE + next(counter)
                    handle = rec.invoke(append_mops(y, x, value))
                    res = execute_append(spark, table, y, x, value)
                outcome: Any = res.outcome
                rec.complete(handle, outcome, res.mops, res.error, res.commit_version, res.attempts)
                _tally(stats, errors, res)
    except BaseException:  # noqa: BLE001 - reported as a worker problem; the history stays usable
        stats.crashed = traceback.format_exc()
    stats.errors = dict(errors)


def run_dataframe_workload(
    spark: SparkSession, table: str, cfg: DataFrameConfig, workdir: str | Path
) -> WorkloadResult:
    """Create the table, run ``cfg.threads`` worker threads on it at once, merge their histories."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    create_table(spark, table, cfg.isolation_level)
    start = threading.Event()
    deadline = time.monotonic() + cfg.timeout_s
    stats = [WorkerStats(process=p) for p in range(cfg.threads)]
    threads = [
        threading.Thread(
            target=_worker, args=(spark, table, cfg, p, work, start, deadline, stats[p]),
            name=f"df-list-append-{p}", daemon=True,
        )
        for p in range(cfg.threads)
    ]  # fmt: skip
    for t in threads:
        t.start()
    t0 = time.monotonic()
    start.set()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    history = History.merge(sorted(work.glob("history-*.jsonl")))
    for s in stats:
        (work / f"stats-{s.process}.json").write_text(json.dumps(asdict(s)))
    return WorkloadResult(cfg.workload_config(), table, history, stats, wall, [0] * cfg.threads)


# -- log audit ------------------------------------------------------------------------------
def commit_lists(table: str, actions: Sequence[Any]) -> list[list[int]]:
    """The lists a commit wrote: per partition, its new files' ``v`` ordered by ``pos``."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for a in actions:
        if not isinstance(a, AddFile):
            continue
        data = pq.read_table(absolute_path(table, a.path), columns=["v", "pos"]).to_pydict()
        key = (a.partition_values or {}).get("k") or ""
        by_key.setdefault(key, []).extend(zip(data["pos"], data["v"]))
    return [[v for _, v in sorted(pairs)] for pairs in by_key.values()]


def audit_table(table: str, history: History) -> list[str]:
    """:func:`serialake.verify.workload.audit_log` over this table's data files."""
    return audit_log(table, history, commit_lists=commit_lists)


def new_kind_counts(history: History) -> dict[str, int]:
    """Transactions of the new kind (those that append) by outcome."""
    out = {"ok": 0, "fail": 0, "info": 0}
    for t in history:
        if any(f == "append" for f, _, _ in t.mops):
            out[t.outcome] += 1
    return out
