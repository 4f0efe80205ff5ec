"""``serialake verify``: the list-append workload per isolation level, checked, plus crash trials.

For each level a fresh table is hammered by ``processes`` worker processes (half of them on
a fault-injecting log store by default), their histories are merged and checked by the
Elle-style checker with the level's forbidden anomalies, and the log is audited so that
every commit belongs to exactly one transaction. With ``dataframes`` the Spark workload
(:mod:`serialake.verify.dataframes`: appends computed from a DataFrame read of the target)
runs per level too, in threads sharing one SparkSession. Optional SIGKILL crash trials
follow. With ``s3`` the tables (and the crash trials' tables) are on S3 instead: at
``s3_uri``, or on a moto server this run starts on 127.0.0.1 and stops by its pid.
With ``delta_spark`` (``--delta-spark-python``) the list-append sections are mixed ones
instead (:mod:`serialake.verify.mixed`): serialake's row-level workers and delta-spark
writer processes on one table, checked as one history.
The report is text for people or JSON (``--json``); the exit code is 1 when anything is
invalid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from serialake.extras import MissingExtraError, require
from serialake.storage.faulty import FaultPlan
from serialake.verify.checker import (
    SERIALIZABLE_FORBIDDEN,
    STRICT_SERIALIZABLE_FORBIDDEN,
    WRITE_SERIALIZABLE_FORBIDDEN,
    Report,
    check,
)
from serialake.verify.crash import CrashReport, run_crash_trials
from serialake.verify.history import History
from serialake.verify.txn import error_class
from serialake.verify.workload import (
    WorkloadConfig,
    WorkloadResult,
    apply_environment,
    audit_log,
    default_faults,
    run_workload,
    s3_environment,
)

if TYPE_CHECKING:
    from serialake.verify.dataframes import DataFrameConfig
    from serialake.verify.mixed import DeltaSparkConfig
    from serialake.verify.multitable import MultiTableResult

__all__ = ["LevelReport", "VerifyReport", "main", "run_verify"]

CONTROL_TXNS = 100
DATAFRAME_CONTROL_TXNS = 25  # per thread and round
DATAFRAME_CONTROL_ROUNDS = 3  # the control's anomalies are likely, not certain: retry with new seeds
#: At least this many txns per process in the multi-table reads' controls: with 20, three rounds of
#: per-table refreshes were all found valid (readers done before the writers overlap them much).
MULTITABLE_CONTROL_TXNS = 80
LEVELS: dict[str, frozenset[str]] = {
    "Serializable": SERIALIZABLE_FORBIDDEN,
    "WriteSerializable": WRITE_SERIALIZABLE_FORBIDDEN,
}
S3_PROXY_FAULT_RATE = 0.05  # share of the faulty processes' commit PUTs the fault proxy breaks (local server)
S3_PROXY_DELAY_S = 0.05  # its "delay" fault


@dataclass
class LevelReport:
    """Everything measured and checked for one isolation level."""

    level: str
    processes: int
    txns_per_process: int
    faulty_processes: int
    txns: int = 0
    committed: int = 0  # transactions that wrote and committed
    read_only: int = 0  # read-only transactions (nothing to commit)
    aborted: dict[str, int] = field(default_factory=dict)  # by exception class
    unknown: dict[str, int] = field(default_factory=dict)  # info outcomes, by exception class
    unknown_committed: int = 0  # info txns the checker proved committed (a read saw them)
    retries: int = 0  # commit attempts beyond the first, summed
    retirements: int = 0  # commits that retired keys a window behind (not history txns)
    retirements_failed: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    slowest_commit_s: float = 0.0
    slowest_commit_version: int | None = None
    slowest_commit_process: int | None = None
    slowest_commit_attempts: int | None = None
    mean_commit_s: float = 0.0
    wall_s: float = 0.0
    cpu_s: float | None = None  # worker processes' user + system time (None for threads)
    check_s: float = 0.0
    audit_s: float = 0.0
    anomalies: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    strict_serializable: bool = False  # no real-time / process-order variants either
    log_problems: list[str] = field(default_factory=list)
    worker_problems: list[str] = field(default_factory=list)
    checker_summary: str = ""
    expect_invalid: bool = False  # the negative control
    title: str = ""  # the section heading, when not the level (or the conflict-check control)
    workers: str = "processes"  # what ran concurrently: "processes", or "threads" of one process
    store: str = "local"  # where the log is: "local", or the S3 location and server
    rounds: int = 1  # negative control runs until one was caught (at most DATAFRAME_CONTROL_ROUNDS)
    delta_spark_processes: int = 0  # a mixed run's delta-spark writers (workers == "mixed")
    delta_spark: dict[str, Any] = field(default_factory=dict)  # what they did (mixed.delta_spark_summary)

    @property
    def checker_valid(self) -> bool:
        return not self.violations

    @property
    def valid(self) -> bool:
        """Checker, log audit and workers all fine (inverted for the negative control)."""
        if self.expect_invalid:
            return not self.checker_valid and not self.worker_problems
        return self.checker_valid and not self.log_problems and not self.worker_problems

    @property
    def aborted_total(self) -> int:
        return sum(self.aborted.values())

    @property
    def unknown_total(self) -> int:
        return sum(self.unknown.values())

    @property
    def throughput(self) -> float:
        """Committed writes per second of wall time."""
        return self.committed / self.wall_s if self.wall_s > 0 else 0.0

    def cost_ms(self) -> dict[str, float | None]:
        """Milliseconds per transaction: workers' CPU and wall time, history check, log audit."""
        n = max(1, self.txns)
        return {
            "workers_cpu": None if self.cpu_s is None else 1000 * self.cpu_s / n,
            "wall": 1000 * self.wall_s / n,
            "check": 1000 * self.check_s / n,
            "audit": 1000 * self.audit_s / n,
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(valid=self.valid, checker_valid=self.checker_valid, throughput=round(self.throughput, 1))
        d["cost_ms_per_txn"] = {k: None if v is None else round(v, 3) for k, v in self.cost_ms().items()}
        return d

    def render(self) -> str:
        """Text lines for people."""
        title = self.title or ("negative control (conflict checks disabled)" if self.expect_invalid else self.level)
        if self.expect_invalid:
            status = f"checker found {', '.join(self.violations) or 'nothing'} - " + (
                "as expected" if self.valid else "THE CHECKER MISSED THE BROKEN CONCURRENCY CONTROL"
            )
        else:
            status = "VALID" if self.valid else "INVALID"
            status += f" (strict serializable: {'holds' if self.strict_serializable else 'no'})"
        aborted = ", ".join(f"{k} {v}" for k, v in sorted(self.aborted.items(), key=lambda kv: -kv[1])) or "-"
        unknown = ", ".join(f"{k} {v}" for k, v in sorted(self.unknown.items())) or "-"
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        if self.workers == "multitable":
            who = f"{self.processes} processes (writers, readers, a maintainer) x {self.txns_per_process} txns"
            who += f" (round {self.rounds})" if self.rounds > 1 else ""
        elif self.workers == "groups":
            who = (
                f"{self.processes} processes x {self.txns_per_process} txns (each reads key x of a and b, appends to "
                "one or both)"
            )
            who += f" (round {self.rounds})" if self.rounds > 1 else ""
        elif self.workers == "mixed":
            who = (
                f"{self.processes} serialake processes x {self.txns_per_process} txns ({self.faulty_processes} on a "
                f"fault-injecting store; paced) + {self.delta_spark_processes} delta-spark processes"
            )
            who += f" (round {self.rounds})" if self.rounds > 1 else ""
        elif self.workers == "threads":
            who = f"{self.processes} threads sharing one SparkSession x {self.txns_per_process} txns"
            who += f" (round {self.rounds})" if self.rounds > 1 else ""
        else:
            who = (
                f"{self.processes} processes x {self.txns_per_process} txns ({self.faulty_processes} on a "
                "fault-injecting store)"
            )
            if self.store != "local":
                who += f"; log on {self.store}"
        lines = [
            f"== {title}: {status}",
            f"  {who}; {self.wall_s:.1f}s, {self.throughput:.1f} commits/s",
            f"  txns {self.txns}: committed {self.committed} writes + {self.read_only} read-only; "
            f"aborted {self.aborted_total} ({aborted}); unknown {self.unknown_total} ({unknown}, "
            f"{self.unknown_committed} proven committed)",
            f"  retries {self.retries}; faults injected: {faults}"
            + (f"; old keys retired in {self.retirements} commits ({self.retirements_failed} retirements "
               "conflicted or failed, redone later)" if self.workers == "processes" else ""),
            f"  slowest {'write (Spark job + commit)' if self.workers == 'threads' else 'commit'} "
            f"{self.slowest_commit_s * 1000:.1f} ms (version {self.slowest_commit_version}, "
            f"process {self.slowest_commit_process}, {self.slowest_commit_attempts} attempts); "
            f"mean {self.mean_commit_s * 1000:.1f} ms",
            "  log audit: " + ("every commit is exactly one txn's" if not self.log_problems else "PROBLEMS"),
            "  cost per txn: " + _render_cost(self.cost_ms()),
        ]
        if self.workers == "multitable":  # no per-commit stats or log audit: say only what was measured
            lines = [lines[0], lines[1], lines[2], f"  commit retries {self.retries}", lines[-1]]
        if self.workers == "groups":
            lines = [lines[0], lines[1], lines[2], lines[-1]]
        if self.workers == "mixed":
            lines.insert(3, "  " + _render_delta_spark(self.delta_spark))
        lines += [f"    {p}" for p in self.log_problems[:10]]
        lines += [f"  worker: {p}" for p in self.worker_problems[:5]]
        lines += ["  " + line for line in self.checker_summary.splitlines()]
        return "\n".join(lines)


def _render_delta_spark(d: dict[str, Any]) -> str:
    aborted = ", ".join(f"{k} {v}" for k, v in sorted(d.get("aborted", {}).items(), key=lambda kv: -kv[1])) or "-"
    unknown = ", ".join(f"{k} {v}" for k, v in sorted(d.get("unknown", {}).items())) or "-"
    mean = d.get("mean_commit_s")
    commits = d.get("log_commits")
    in_log = f"; log: {', '.join(f'{k} {v}' for k, v in sorted(commits.items()))} commits" if commits else ""
    return (
        f"of which delta-spark {d.get('txns', 0)} txns: committed {d.get('committed', 0)} appends "
        f"(mean {'-' if mean is None else f'{mean:.1f} s'}) + {d.get('read_only', 0)} read-only; aborted "
        f"{sum(d.get('aborted', {}).values())} ({aborted}); unknown {sum(d.get('unknown', {}).values())} ({unknown}); "
        f"serialake txns aborted by a delta-spark commit: {d.get('serialake_aborted_by_delta_spark', 0)}{in_log}"
    )


def _render_cost(c: dict[str, float | None]) -> str:
    cpu = c["workers_cpu"]
    workers = f"workers {cpu:.2f} ms CPU, " if cpu is not None else ""
    return (
        f"{workers}{c['wall']:.2f} ms wall; history check {c['check']:.3f} ms, log audit {c['audit']:.3f} ms"
    )


@dataclass
class VerifyReport:
    """All levels, the optional negative control and crash trials."""

    levels: list[LevelReport]
    crash: CrashReport | None = None
    control: LevelReport | None = None
    dataframe_control: LevelReport | None = None  # the Spark workload with read tracking off
    multitable_controls: list[LevelReport] = field(default_factory=list)  # readers without a cut
    workdir: str | None = None  # kept only when something is invalid
    duration_s: float = 0.0
    s3_tables: str | None = None  # where the S3 tables were kept (on a bucket given by --s3-uri)
    s3: dict[str, Any] | None = None  # an S3 run: "root" of its tables, "server" and its "pid" (own moto server)

    @property
    def valid(self) -> bool:
        parts = [lv.valid for lv in self.levels]
        parts += [self.crash.valid] if self.crash is not None else []
        parts += [self.control.valid] if self.control is not None else []
        parts += [self.dataframe_control.valid] if self.dataframe_control is not None else []
        parts += [c.valid for c in self.multitable_controls]
        return all(parts)

    @property
    def txns(self) -> int:
        """Transactions run and checked, in every section."""
        parts = [*self.levels, self.control, self.dataframe_control, *self.multitable_controls]
        return sum(lv.txns for lv in parts if lv is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "duration_s": round(self.duration_s, 2),
            "txns": self.txns,
            "levels": [lv.to_dict() for lv in self.levels],
            "control": self.control.to_dict() if self.control else None,
            "dataframe_control": self.dataframe_control.to_dict() if self.dataframe_control else None,
            "multitable_controls": [c.to_dict() for c in self.multitable_controls],
            "crash": self.crash.to_dict() if self.crash else None,
            "workdir": self.workdir,
            "s3_tables": self.s3_tables,
            "s3": self.s3,
        }

    def render(self) -> str:
        """The whole report as text."""
        parts = [lv.render() for lv in self.levels]
        if self.control is not None:
            parts.append(self.control.render())
        if self.dataframe_control is not None:
            parts.append(self.dataframe_control.render())
        parts += [c.render() for c in self.multitable_controls]
        if self.crash is not None:
            parts.append(self.crash.summary())
        verdict = "VALID" if self.valid else "INVALID"
        tail = f"serialake verify: {verdict} in {self.duration_s:.1f}s ({self.txns} txns checked)"
        if self.workdir:
            tail += f" (histories and tables kept in {self.workdir})"
        if self.s3_tables:
            tail += f" (S3 tables kept under {self.s3_tables})"
        return "\n\n".join(parts + [tail])


def _level_report(
    result: WorkloadResult,
    forbidden: frozenset[str],
    expect_invalid: bool,
    audit: Callable[[str, History], list[str]] = audit_log,
) -> LevelReport:
    """Count, check and audit one run (``audit`` checks the log against the history)."""
    cfg = result.config
    rep = LevelReport(cfg.isolation_level, cfg.processes, cfg.txns, cfg.faulty_processes, expect_invalid=expect_invalid)
    _count_outcomes(rep, result.history)
    _merge_stats(rep, result)
    report = _check_into(rep, result.history, forbidden, realtime=True, process=True)
    rep.strict_serializable = not (report.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN)
    if not expect_invalid:
        t0 = time.monotonic()
        rep.log_problems = audit(result.table_path, result.history)
        rep.audit_s = time.monotonic() - t0
    return rep


def _check_into(
    rep: LevelReport, history: History, forbidden: frozenset[str], *, realtime: bool, process: bool = False
) -> Report:
    """Check ``history`` and put what the report shows of it into ``rep``; the checker's report."""
    t0 = time.monotonic()
    report = check(history, realtime=realtime, process=process, forbidden=forbidden)
    rep.check_s = time.monotonic() - t0
    rep.anomalies = {k: len(v) for k, v in report.anomalies.items()}
    rep.violations = report.violations
    rep.unknown_committed = report.stats.get("info_committed", 0)
    rep.checker_summary = report.summary(limit=1 if rep.expect_invalid else 3)
    return report


def _count_outcomes(rep: LevelReport, history: History) -> None:
    aborted: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    for t in history:
        rep.txns += 1
        if t.outcome == "fail":
            aborted[error_class(t.error)] += 1
        elif t.outcome == "info":
            unknown[error_class(t.error)] += 1
        elif t.attempts is not None:
            rep.committed += 1
        else:
            rep.read_only += 1
    rep.aborted, rep.unknown = dict(aborted), dict(unknown)


def _merge_stats(rep: LevelReport, result: WorkloadResult) -> None:
    faults: Counter[str] = Counter()
    total_time = 0.0
    commits = 0
    for s in result.stats:
        rep.retries += s.retries
        rep.retirements += s.retirements
        rep.retirements_failed += s.retirements_failed
        faults.update(s.faults)
        total_time += s.commit_time_s
        commits += s.commits
        if s.slowest_commit_s > rep.slowest_commit_s:
            rep.slowest_commit_s, rep.slowest_commit_version = s.slowest_commit_s, s.slowest_commit_version
            rep.slowest_commit_process, rep.slowest_commit_attempts = s.process, s.slowest_commit_attempts
        if s.crashed:
            rep.worker_problems.append(f"process {s.process}: {s.crashed.strip().splitlines()[-1]}")
    for p, code in enumerate(result.exit_codes):
        if code != 0:
            rep.worker_problems.append(f"process {p} exited with code {code}")
    rep.faults = dict(faults)
    rep.mean_commit_s = total_time / commits if commits else 0.0
    rep.wall_s, rep.cpu_s = result.wall_s, result.cpu_s


def _normalize_levels(levels: Sequence[str]) -> list[str]:
    out = []
    for name in levels:
        match = next((lv for lv in LEVELS if lv.lower() == name.strip().lower()), None)
        if match is None:
            raise ValueError(f"unknown isolation level {name!r}; choose from {', '.join(LEVELS)}")
        out.append(match)
    return out


def run_verify(
    processes: int = 8,
    txns: int = 500,
    isolation_levels: Sequence[str] = ("Serializable", "WriteSerializable"),
    *,
    crash_trials: int = 0,
    faulty_processes: int | None = None,
    faults: FaultPlan | None = None,
    control: bool = False,
    key_count: int = 8,
    seed: int = 0,
    workdir: str | None = None,
    out: TextIO | None = None,
    row_level: bool = False,
    dataframes: bool = False,
    dataframe_threads: int = 4,
    dataframe_txns: int = 40,
    dataframe_keys: int = 3,
    multi_table: bool = False,
    s3: bool = False,
    s3_uri: str | None = None,
    delta_spark: DeltaSparkConfig | None = None,
) -> VerifyReport:
    """Run the whole verification; progress lines go to ``out`` (None: silent).

    ``faulty_processes`` defaults to half of them; ``control`` adds the negative control
    (conflict checks disabled, the checker must find anomalies; at most ``CONTROL_TXNS``
    txns per process, since lost updates make lists grow fast). Tables and histories
    live in ``workdir`` (a temporary directory when None, deleted unless a check failed).
    ``dataframes`` adds, per level, the Spark workload (``dataframe_threads`` threads x
    ``dataframe_txns`` txns over ``dataframe_keys`` keys) and with ``control`` its
    negative control (read tracking off). ``multi_table`` adds the multi-table workload
    (``serialake.verify.multitable``: pairs committed in order to two tables, a derived
    table and its maintainer, readers of all three) with readers at STRICT SERIALIZABLE
    (checked with real-time edges) and at SERIALIZABLE, and write transactions across tables
    (``serialake.verify.groupwrites``: write skew over two tables, one ``GroupTransaction``
    each); with ``control`` also their negative controls (readers refresh each table on its
    own; the write transactions committed table by table, where the checker must find the
    write skew).

    ``s3`` (implied by ``s3_uri``) puts the list-append tables and the crash trials' tables
    on S3 (:func:`s3_target`): under ``s3_uri`` (``s3://bucket/prefix``; endpoint and
    credentials from the standard AWS variables), or in a bucket of a moto server started
    on 127.0.0.1 for the run and stopped by its pid. Histories stay in ``workdir``. The
    faulty processes wrap the S3 store in the same fault-injecting store, and on the local
    server also reach it through a fault proxy that breaks ``S3_PROXY_FAULT_RATE`` of their
    commit PUTs (lost responses, 500, 503, 409, delays). The row-level sections, the Spark
    workload and the multi-table workload write data files locally: they do not run on S3
    (``row_level`` is ignored there; ``dataframes`` or ``multi_table`` raise ``ValueError``).

    ``delta_spark`` makes the list-append sections mixed ones (:mod:`serialake.verify.mixed`):
    per level, the row-level workload of ``processes`` serialake workers (paced) with
    ``delta_spark.processes`` delta-spark writer processes beside them on the same table,
    their histories checked as one and the log audited for both engines' commits; with
    ``control``, the mixed negative control instead of the serialake one (delta-spark's
    appends as a read followed by a blind overwrite). Not on S3.
    """
    s3 = s3 or s3_uri is not None
    if s3 and (dataframes or multi_table):
        raise ValueError(
            "the Spark DataFrame and multi-table workloads do not run on S3 (their data files are local): "
            "run them without --s3"
        )
    if s3 and delta_spark is not None:
        raise ValueError("the runs with delta-spark writers write their data files locally: run them without --s3")
    t0 = time.monotonic()
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="serialake-verify-"))
    faulty = processes // 2 if faulty_processes is None else faulty_processes
    spec = faults or default_faults()
    levels = _normalize_levels(isolation_levels)
    runs = [(lv, False, False) for lv in levels] if delta_spark is None else []
    if row_level and not s3 and delta_spark is None:  # the same workload on rows of shared files (DVs)
        runs += [(lv, False, True) for lv in levels]
    if control and delta_spark is None:
        runs.append(("Serializable", True, False))
    reports: list[LevelReport] = []
    control_report: LevelReport | None = None
    crash = None
    multitable_controls: list[LevelReport] = []
    s3_tables: str | None = None
    s3_info: dict[str, Any] | None = None
    with s3_target(s3_uri, out) if s3 else nullcontext() as target:
        if s3 and row_level:
            _say(out, "S3: no deletion-vector (row-level) sections: that workload writes its data files locally")
        for i, (level, negative, rows_mode) in enumerate(runs):
            cfg = WorkloadConfig(
                processes=processes, txns=min(txns, CONTROL_TXNS) if negative else txns, isolation_level=level,
                key_count=key_count, faulty_processes=0 if negative else faulty, faults=spec,
                disable_conflict_checks=negative, seed=seed + i, row_level=rows_mode,
            )  # fmt: skip
            name = "control" if negative else (f"{level}-row-level" if rows_mode else level)
            where = f" on S3 ({target.describe})" if target is not None else ""
            _say(out, f"running {name}{where}: {processes} processes x {cfg.txns} txns ...")
            if target is None:
                result = run_workload(str(base / f"{name}-table"), cfg, base / f"{name}-history")
                rep = _level_report(result, LEVELS[level], negative)
            else:
                rep = _run_s3_level(target, name, cfg, base / f"{name}-history", negative)
            if rows_mode:
                rep.level = f"{level} (row-level, deletion vectors)"
            _say(out, "\n".join(line for line in rep.render().splitlines() if line.startswith(("==", "  cost"))))
            if negative:
                control_report = rep
            else:
                reports.append(rep)
        if delta_spark is not None:
            mixed = [(lv, False) for lv in levels] + ([("Serializable", True)] if control else [])
            for i, (level, negative) in enumerate(mixed):
                cfg = WorkloadConfig(  # the control's txns are not capped: serialake's conflict checks stay on
                    processes=processes, txns=txns, isolation_level=level, key_count=key_count,
                    faulty_processes=0 if negative else faulty, faults=spec, seed=seed + 400 + i,
                )  # fmt: skip
                rep = _run_mixed(base, cfg, replace(delta_spark, control=negative), out)
                if negative:
                    control_report = rep
                else:
                    reports.append(rep)
        if multi_table:
            mt_txns = max(20, txns // 5)
            sections = [(True, False), (False, False)] + ([(True, True), (False, True)] if control else [])
            for i, (strict, negative) in enumerate(sections):
                n = max(mt_txns, MULTITABLE_CONTROL_TXNS) if negative else mt_txns
                rep = _run_multitable(base / f"multitable-{i}", strict, negative, n, seed + 300 + i, out)
                (multitable_controls if negative else reports).append(rep)
            for i, negative in enumerate([False, True] if control else [False]):  # write transactions across tables
                rep = _run_group_writes(base / f"group-writes-{i}", negative, mt_txns, seed + 500 + i, out)
                (multitable_controls if negative else reports).append(rep)
        if crash_trials > 0:
            _say(out, f"running {crash_trials} crash trials{' on S3' if target is not None else ''} ...")
            if target is None:
                crash = run_crash_trials(crash_trials, workdir=base / "crash", seed=seed)
            else:
                crash = run_crash_trials(
                    crash_trials, workdir=base / "crash", seed=seed, table_root=f"{target.root}/crash", env=target.env
                )
            _say(out, crash.summary().splitlines()[0])
        s3_tables = target.root if target is not None and target.server is None else None
        s3_info = None if target is None else {
            "root": target.root, "server": target.describe, "pid": target.server.pid if target.server else None,
        }  # fmt: skip
        valid_so_far = all(r.valid for r in reports) and (control_report is None or control_report.valid)
        if s3_tables is not None and target is not None and workdir is None and valid_so_far:
            if crash is None or crash.valid:
                target.delete_tables()  # on a bucket of the caller's: leave nothing behind
                s3_tables = None
    # Last: the crash trials and the workloads fork, which a process running Spark should not.
    dataframe_control: LevelReport | None = None
    if dataframes:
        for i, level in enumerate(levels):
            cfg_df = _dataframe_config(dataframe_threads, dataframe_txns, level, dataframe_keys, seed + 100 + i)
            reports.append(_run_dataframes(base, cfg_df, out, negative=False))
        if control:
            cfg_df = _dataframe_config(
                dataframe_threads, min(dataframe_txns, DATAFRAME_CONTROL_TXNS), "Serializable", dataframe_keys,
                seed + 200,
            )
            dataframe_control = _run_dataframes(base, cfg_df, out, negative=True)
    report = VerifyReport(
        reports, crash, control_report, dataframe_control, multitable_controls, duration_s=time.monotonic() - t0,
        s3_tables=s3_tables, s3=s3_info,
    )  # fmt: skip
    if report.valid and workdir is None:
        shutil.rmtree(base, ignore_errors=True)
    else:
        report.workdir = str(base)
    return report


@dataclass
class S3Target:
    """Where an S3 run puts its tables: ``root`` (``s3://bucket/prefix``) and what workers need to reach it."""

    root: str
    env: dict[str, str]  # AWS variables every worker sets (endpoint, credentials)
    describe: str  # for people: the location and the server
    server: Any = None  # the moto server started for the run (None: the caller's S3, from --s3-uri)

    def delete_tables(self) -> None:
        """Delete every object under ``root`` (best effort)."""
        import obstore

        from serialake.storage.s3 import _store, split_s3_uri

        bucket, key = split_s3_uri(self.root)
        store = _store(bucket)
        try:
            for batch in obstore.list(store, key.rstrip("/") + "/"):
                obstore.delete(store, [str(meta["path"]) for meta in batch])
        except Exception:  # noqa: BLE001 - leftovers are harmless; the run's verdict stands
            pass


_ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@contextmanager
def s3_target(s3_uri: str | None, out: TextIO | None = None) -> Iterator[S3Target]:
    """The S3 location of a run, set in this process's environment while the run lasts.

    With ``s3_uri`` (``s3://bucket/prefix``): a fresh prefix under it, reached with this
    process's AWS variables. Without: a moto server started on 127.0.0.1 (conditional PUTs
    serialised, as on S3: :mod:`serialake.verify.s3server`) and a new bucket on it; the
    server is stopped by its pid when the run ends, whatever happened.
    """
    from serialake.storage import s3 as s3store
    from serialake.storage.s3 import normalize_s3_uri

    run = f"verify-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    if s3_uri is not None:
        root = f"{normalize_s3_uri(s3_uri)}/{run}"
        endpoint = next((os.environ[k] for k in reversed(_ENDPOINT_VARS) if os.environ.get(k)), "AWS's")
        yield S3Target(root, s3_environment(), f"{root}, endpoint {endpoint}")
        return
    from serialake.verify.s3server import S3Server

    server = S3Server().start()
    env = {**server.environment(), "AWS_ENDPOINT_URL_S3": server.endpoint}
    saved = s3_environment()
    try:
        apply_environment(env)  # this process creates and audits the tables
        bucket = server.new_bucket()
        _say(out, f"S3: moto server on {server.endpoint} (pid {server.pid}), bucket {bucket}")
        yield S3Target(f"s3://{bucket}/{run}", env, f"moto on 127.0.0.1:{server.port}", server)
    finally:
        server.stop()
        for key in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[key]
        os.environ.update(saved)
        with s3store._lock:
            s3store._stores.clear()


def _run_s3_level(target: S3Target, name: str, cfg: WorkloadConfig, history: Path, negative: bool) -> LevelReport:
    """One section on S3: the workload at ``target``, its faulty processes behind a fault proxy
    when the server is the run's own (``FaultProxy`` rewrites ``Host``, which a real S3's
    signature check refuses); checked and audited like a local section."""
    from serialake.verify.s3proxy import FaultProxy, random_plan

    proxy = None
    cfg = replace(cfg, env=target.env)
    if target.server is not None and cfg.faulty_processes > 0:
        plan = random_plan(S3_PROXY_FAULT_RATE, seed=cfg.seed)
        proxy = FaultProxy(target.server.endpoint, plan, delay_s=S3_PROXY_DELAY_S).start()
        cfg = replace(cfg, faulty_env={k: proxy.endpoint for k in _ENDPOINT_VARS})
    try:
        result = run_workload(f"{target.root}/{name}-table", cfg, history)
    finally:
        if proxy is not None:
            proxy.stop()
    rep = _level_report(result, LEVELS[cfg.isolation_level], negative)
    if proxy is not None:
        rep.faults.update({f"s3_{kind}": n for kind, n in proxy.fault_counts().items()})
    rep.store = target.describe
    if not negative:
        rep.level = f"{cfg.isolation_level} (S3)"
    else:
        rep.title = "negative control on S3 (conflict checks disabled)"
    return rep


def _run_mixed(base: Path, cfg: WorkloadConfig, ds: DeltaSparkConfig, out: TextIO | None) -> LevelReport:
    """The row-level workload with delta-spark writers at ``cfg``'s level, checked and audited.

    The negative control (``ds.control``) runs up to ``DATAFRAME_CONTROL_ROUNDS`` rounds (new
    seeds) until the checker finds an anomaly; the report is of the last round.
    """
    from serialake.verify.mixed import MixedAudit, delta_spark_summary, run_mixed

    level, negative = cfg.isolation_level, ds.control
    name = "mixed-control" if negative else f"{level}-mixed"
    _say(out, f"running {name}: {cfg.processes} serialake processes x {cfg.txns} txns + {ds.processes} delta-spark "
              "processes ...")  # fmt: skip
    rep: LevelReport | None = None
    for r in range(DATAFRAME_CONTROL_ROUNDS if negative else 1):
        where = base / (name if r == 0 else f"{name}-{r}")
        result = run_mixed(str(where / "table"), replace(cfg, seed=cfg.seed + r), ds, where / "history")
        audit = MixedAudit(cfg.processes)
        rep = _level_report(result, LEVELS[level], negative, audit=audit)
        rep.workers, rep.rounds, rep.delta_spark_processes = "mixed", r + 1, ds.processes
        rep.delta_spark = delta_spark_summary(result.history, cfg.processes, audit.commits if not negative else None)
        if not negative or rep.violations:
            break
    assert rep is not None
    if negative:
        rep.title = "negative control (delta-spark writers read, then overwrite blindly)"
    else:
        rep.level = f"{level} (row-level, serialake + delta-spark writers)"
    _say(out, "\n".join(line for line in rep.render().splitlines() if line.startswith(("==", "  of which"))))
    return rep


def _dataframe_config(threads: int, txns: int, level: str, keys: int, seed: int) -> DataFrameConfig:
    from serialake.verify.dataframes import DataFrameConfig

    return DataFrameConfig(threads=threads, txns=txns, isolation_level=level, key_count=keys, seed=seed)


def _run_dataframes(base: Path, cfg: DataFrameConfig, out: TextIO | None, *, negative: bool) -> LevelReport:
    """The Spark DataFrame workload at ``cfg``'s level, checked; ``negative``: read tracking off.

    The negative control runs up to ``DATAFRAME_CONTROL_ROUNDS`` rounds (new seeds) until the
    checker finds an anomaly; the report is of the last round.
    """
    from serialake.spark.session import spark_session
    from serialake.verify import dataframes as dfw

    spark = spark_session("serialake-verify")
    level = cfg.isolation_level
    name = "dataframes-control" if negative else f"{level}-dataframes"
    rounds = DATAFRAME_CONTROL_ROUNDS if negative else 1
    _say(out, f"running {name}: {cfg.threads} threads x {cfg.txns} txns (Spark) ...")
    rep: LevelReport | None = None
    for r in range(rounds):
        where = base / (name if r == 0 else f"{name}-{r}")
        run_cfg = replace(cfg, seed=cfg.seed + r)
        with dfw.read_tracking_off() if negative else nullcontext():
            result = dfw.run_dataframe_workload(spark, str(where / "table"), run_cfg, where / "history")
        rep = _level_report(result, LEVELS[level], negative, audit=dfw.audit_table)
        rep.workers, rep.rounds = "threads", r + 1
        if not negative or rep.violations:
            break
    assert rep is not None
    if negative:
        rep.title = "negative control (Spark DataFrames, read tracking off)"
    else:
        rep.level = f"{level} (Spark DataFrames: {dfw.APPEND_KIND})"
    _say(out, rep.render().splitlines()[0])
    return rep


def _run_multitable(base: Path, strict: bool, negative: bool, txns: int, seed: int, out: TextIO | None) -> LevelReport:
    """The multi-table workload, its readers at STRICT SERIALIZABLE or SERIALIZABLE, checked.

    ``negative``: readers refresh each table on its own instead of reading a cut; the
    checker must find the torn reads.
    """
    from serialake.verify.multitable import MultiTableConfig, run_multitable

    level = "STRICT SERIALIZABLE" if strict else "SERIALIZABLE"
    cfg = MultiTableConfig(txns=txns, strict=strict, control=negative, seed=seed)
    who = f"{cfg.writers} writers, {cfg.readers} readers, {cfg.maintainers} maintainer"
    _say(out, f"running multi-table ({level} reads{', control' if negative else ''}): {who} x {txns} txns ...")
    rounds = DATAFRAME_CONTROL_ROUNDS if negative else 1  # the control's anomalies are likely, not certain
    for r in range(rounds):
        rep = _multitable_report(run_multitable(base / f"round-{r}", replace(cfg, seed=seed + r)), level, negative)
        rep.rounds = r + 1
        if not negative or rep.violations:
            break
    _say(out, rep.render().splitlines()[0])
    return rep


def _multitable_report(result: MultiTableResult, level: str, negative: bool) -> LevelReport:
    cfg, strict, txns = result.config, result.config.strict, result.config.txns
    rep = LevelReport(level, cfg.writers + cfg.readers + cfg.maintainers, txns, 0, expect_invalid=negative)
    _count_outcomes(rep, result.history)
    rep.retries = sum(t.attempts - 1 for t in result.history if t.outcome == "ok" and t.attempts is not None)
    rep.wall_s = result.wall_s
    rep.worker_problems = [c.strip().splitlines()[-1] for c in result.crashed]
    forbidden = STRICT_SERIALIZABLE_FORBIDDEN if strict else SERIALIZABLE_FORBIDDEN
    report = _check_into(rep, result.history, forbidden, realtime=strict)
    if strict:
        rep.strict_serializable = not (report.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN)
    else:  # not required at SERIALIZABLE: said for information
        with_rt = check(result.history, realtime=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
        rep.strict_serializable = not (with_rt.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN)
    rep.workers = "multitable"
    rep.title = (
        f"multi-table negative control ({level}, each table refreshed on its own)"
        if negative
        else f"multi-table, {level} reads (pairs in order to a and b, d maintained from a)"
    )
    return rep


def _run_group_writes(base: Path, negative: bool, txns: int, seed: int, out: TextIO | None) -> LevelReport:
    """The write-skew workload across two tables (``serialake.verify.groupwrites``), checked at
    Serializable (strict serializability said for information).

    ``negative``: the same transactions as per-table commits; the checker must find the write skew.
    """
    from serialake.verify.groupwrites import GroupWritesConfig, run_group_writes

    cfg = GroupWritesConfig(txns=txns, control=negative, seed=seed)
    what = "per-table commits, control" if negative else "one GroupTransaction each"
    _say(out, f"running multi-table write transactions ({what}): {cfg.processes} processes x {txns} txns ...")
    rounds = DATAFRAME_CONTROL_ROUNDS if negative else 1  # the control's anomalies are likely, not certain
    for r in range(rounds):
        result = run_group_writes(base / f"round-{r}", replace(cfg, seed=seed + r))
        rep = LevelReport("SERIALIZABLE", cfg.processes, txns, 0, expect_invalid=negative)
        _count_outcomes(rep, result.history)
        rep.wall_s = result.wall_s
        rep.worker_problems = [c.strip().splitlines()[-1] for c in result.crashed]
        _check_into(rep, result.history, SERIALIZABLE_FORBIDDEN, realtime=False)
        with_rt = check(result.history, realtime=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
        rep.strict_serializable = not (with_rt.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN)
        rep.workers = "groups"
        rep.rounds = r + 1
        rep.title = (
            "multi-table write negative control (per-table commits, the other table's read unchecked)"
            if negative
            else "multi-table write transactions (write skew across tables a and b, one group each)"
        )
        if not negative or rep.violations:
            break
    _say(out, rep.render().splitlines()[0])
    return rep


def _say(out: TextIO | None, line: str) -> None:
    if out is not None:
        print(line, file=out, flush=True)


def build_parser(prog: str = "serialake verify") -> argparse.ArgumentParser:
    """The ``verify`` command line."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=8, help="worker processes per level (default 8)")
    ap.add_argument("--txns", type=int, default=500, help="transactions per process (default 500)")
    ap.add_argument(
        "--levels", default="Serializable,WriteSerializable", help="comma-separated isolation levels"
    )
    ap.add_argument(
        "--crash-trials", type=int, default=100, help="SIGKILL crash trials to run (default 100; 0 skips them)"
    )
    ap.add_argument("--faulty", type=int, default=None, help="processes on a fault-injecting store (default half)")
    ap.add_argument("--no-faults", action="store_true", help="no fault injection")
    ap.add_argument(
        "--control", action="store_true", help="also run the negative control: conflict checks off, must be INVALID"
    )
    ap.add_argument("--keys", type=int, default=8, help="keys active at once (fewer: more contention)")
    ap.add_argument(
        "--no-row-level", action="store_true",
        help="skip the runs on a deletion-vector table with row-level concurrency",
    )
    ap.add_argument(
        "--dataframes", action="store_true",
        help="also run the Spark DataFrame workload (appends computed from a read of the target; needs Java)",
    )
    ap.add_argument("--df-threads", type=int, default=4, help="threads of the DataFrame workload (default 4)")
    ap.add_argument("--df-txns", type=int, default=40, help="transactions per DataFrame thread (default 40)")
    ap.add_argument("--df-keys", type=int, default=3, help="keys of the DataFrame workload (default 3)")
    ap.add_argument(
        "--multi-table", action="store_true",
        help="add the multi-table workloads: pairs in order, a derived table, readers at both read levels; "
        "write transactions across two tables (write skew, one GroupTransaction each)",
    )  # fmt: skip
    ap.add_argument(
        "--s3", action="store_true",
        help="put the list-append tables and the crash trials' tables on S3: a moto server started on 127.0.0.1 "
        "for the run (needs the verify extra), or --s3-uri; no row-level, DataFrame or multi-table sections",
    )  # fmt: skip
    ap.add_argument(
        "--s3-uri", default=None, metavar="s3://BUCKET/PREFIX",
        help="with --s3 (implies it): tables under this URI, endpoint and credentials from the AWS_* variables",
    )  # fmt: skip
    ap.add_argument(
        "--delta-spark-python", default=None, metavar="PATH",
        help="run the row-level workload with delta-spark writer processes among serialake's, started with this "
        "Python (delta-spark's environment, e.g. .venv-delta/bin/python); replaces the list-append sections",
    )  # fmt: skip
    ap.add_argument(
        "--delta-spark-jars", default=None, metavar="DIR", help="delta-spark's jars (e.g. .venv-delta/jars)"
    )
    ap.add_argument("--delta-spark-processes", type=int, default=2, help="delta-spark writer processes (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="keep tables and histories here")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    return ap


def _delta_spark_problem(python: str | None, jars: str | None, s3: bool) -> str | None:
    """Why ``--delta-spark-python`` / ``--delta-spark-jars`` cannot be used as given, or None."""
    if python is None or jars is None:
        return "--delta-spark-python and --delta-spark-jars go together"
    if s3:
        return "the runs with delta-spark writers do not run on S3 (--s3)"
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return f"--delta-spark-python {python}: not an executable file (set up delta-spark's environment: make peer)"
    if not any(name.endswith(".jar") for name in (os.listdir(jars) if os.path.isdir(jars) else [])):
        return f"--delta-spark-jars {jars}: no jars there (make peer)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: run, print the report, return 0 when valid else 1."""
    args = build_parser().parse_args(argv)
    try:
        levels = _normalize_levels([s for s in args.levels.split(",") if s.strip()])
    except ValueError as e:
        print(f"serialake verify: {e}", file=sys.stderr)
        return 2
    s3 = args.s3 or args.s3_uri is not None
    if s3 and (args.dataframes or args.multi_table):
        print("serialake verify: --dataframes and --multi-table do not run on S3 (--s3)", file=sys.stderr)
        return 2
    delta_spark = None
    if args.delta_spark_python is not None or args.delta_spark_jars is not None:
        problem = _delta_spark_problem(args.delta_spark_python, args.delta_spark_jars, s3)
        if problem:
            print(f"serialake verify: {problem}", file=sys.stderr)
            return 2
        from serialake.verify.mixed import DeltaSparkConfig

        delta_spark = DeltaSparkConfig(
            args.delta_spark_python, args.delta_spark_jars, processes=max(1, args.delta_spark_processes)
        )
    if args.s3_uri is not None:
        from serialake.exceptions import DeltaIllegalArgumentException
        from serialake.storage.s3 import split_s3_uri

        try:
            split_s3_uri(args.s3_uri)
        except DeltaIllegalArgumentException as e:
            print(f"serialake verify: --s3-uri: {e}", file=sys.stderr)
            return 2
    try:  # before minutes of workload, not when checking the first history
        require("networkx", "serialake verify")
        if s3 and args.s3_uri is None:
            require("moto", "serialake verify --s3 (a local S3 server)")
    except MissingExtraError as e:
        print(f"serialake verify: {e}", file=sys.stderr)
        return 1
    report = run_verify(
        args.processes, args.txns, levels,
        crash_trials=args.crash_trials, faulty_processes=0 if args.no_faults else args.faulty,
        control=args.control, key_count=args.keys, seed=args.seed, workdir=args.workdir,
        out=None if args.json else sys.stderr, row_level=not args.no_row_level,
        dataframes=args.dataframes, dataframe_threads=args.df_threads, dataframe_txns=args.df_txns,
        dataframe_keys=args.df_keys, multi_table=args.multi_table, s3=s3, s3_uri=args.s3_uri,
        delta_spark=delta_spark,
    )  # fmt: skip
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.render())
    return 0 if report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
