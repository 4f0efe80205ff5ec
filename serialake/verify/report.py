"""What ``serialake verify`` reports: one ``LevelReport`` per section (an isolation level, a
workload, a negative control), gathered in a ``VerifyReport``, rendered as text or JSON.

``level_report``, ``check_into``, ``count_outcomes`` and ``merge_stats`` fill a section from a
run: the checker's verdict on its history, its outcomes, and the workers' statistics.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from serialake.verify.checker import STRICT_SERIALIZABLE_FORBIDDEN, Report, check
from serialake.verify.crash import CrashReport
from serialake.verify.history import History
from serialake.verify.txn import error_class
from serialake.verify.workload import WorkloadResult, audit_log

__all__ = ["LevelReport", "VerifyReport", "check_into", "count_outcomes", "level_report", "merge_stats"]


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


def level_report(
    result: WorkloadResult,
    forbidden: frozenset[str],
    expect_invalid: bool,
    audit: Callable[[str, History], list[str]] = audit_log,
) -> LevelReport:
    """Count, check and audit one run (``audit`` checks the log against the history)."""
    cfg = result.config
    rep = LevelReport(cfg.isolation_level, cfg.processes, cfg.txns, cfg.faulty_processes, expect_invalid=expect_invalid)
    count_outcomes(rep, result.history)
    merge_stats(rep, result)
    report = check_into(rep, result.history, forbidden, realtime=True, process=True)
    rep.strict_serializable = not (report.anomaly_types & STRICT_SERIALIZABLE_FORBIDDEN)
    if not expect_invalid:
        t0 = time.monotonic()
        rep.log_problems = audit(result.table_path, result.history)
        rep.audit_s = time.monotonic() - t0
    return rep


def check_into(
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


def count_outcomes(rep: LevelReport, history: History) -> None:
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


def merge_stats(rep: LevelReport, result: WorkloadResult) -> None:
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
