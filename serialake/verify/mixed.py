"""The row-level list-append workload with delta-spark writer processes among serialake's.

serialake's workers (:mod:`serialake.verify.workload`, ``row_level``) and delta-spark writer
processes (:mod:`serialake.verify.delta_spark_writer`, run with delta-spark's own Python and
jars) work on one table of :mod:`serialake.verify.rows`; their histories are merged and
checked as one. This module runs in serialake's environment and never imports pyspark or
the writer module: it starts the writers as ``python -m serialake.verify.delta_spark_writer``
in new process groups, hands them ready / go / stop files, and stops them by process id.

Pacing. On an unpartitioned table delta-spark fails an operation on any concurrent commit
that adds a file, and one MERGE takes 2-10 s here, so under serialake's stream of commits
(tens per second) it would never commit. The run is therefore paced in cycles of
``QUIET_EVERY_S`` seconds, from the moment the workers are released: in the busy part
serialake's workers run the workload (pausing ``PAUSE_S`` on average after each
transaction) and delta-spark's writers only read; in the quiet part (the last ``QUIET_S``
seconds) delta-spark's writers append, serialake's workers commit nothing, and every other
one of them runs one long transaction that reads as the quiet part starts and commits as it
ends, across delta-spark's commits, while the rest read. A MERGE still running when the busy
part starts races serialake's commits.

:class:`MixedAudit` extends :func:`serialake.verify.workload.audit_log` (every commit is
exactly one transaction's) with what a mixed log holds: the commit's engine (its
``commitInfo.engineInfo``) is the engine of the transaction it belongs to, a delta-spark
commit's ``userMetadata`` names exactly the values it appended, every file action is a
plain add of new rows, a removal, or a deletion-vector update (an add with a vector and
the remove of the same path), and every row a commit deleted (through a vector or with its
file) is a row of a key the commit rewrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import serialake
from serialake.core.model.actions import AddFile, CommitInfo, RemoveFile
from serialake.verify import rows
from serialake.verify.history import History
from serialake.verify.txn import error_class, winning_version
from serialake.verify.workload import WorkloadConfig, WorkloadResult, audit_log, run_workload

__all__ = [
    "DeltaSparkConfig",
    "DeltaSparkWriters",
    "MixedAudit",
    "PAUSE_S",
    "QUIET_EVERY_S",
    "QUIET_S",
    "delta_spark_summary",
    "mixed_config",
    "run_mixed",
]

PAUSE_S = 0.05  # serialake workers' mean pause after a transaction
QUIET_EVERY_S = 16.0  # pacing cycle of serialake's workers ...
QUIET_S = 12.0  # ... ending with this many seconds without serialake commits (delta-spark's windows to commit)
DELTA_SPARK_ENGINE = "Delta-Lake/"  # in commitInfo.engineInfo: "Apache-Spark/4.2.0 Delta-Lake/4.4.0"
USER_METADATA_PREFIX = "serialake-verify delta-spark"  # delta_spark_writer.USER_METADATA_PREFIX
STOP_GRACE_S = 15.0  # after SIGTERM, before SIGKILL


@dataclass(frozen=True)
class DeltaSparkConfig:
    """The delta-spark writers of a mixed run: ``processes`` of them, with delta-spark's ``python`` and ``jars``."""

    python: str
    jars: str
    processes: int = 2
    txns: int = 10_000  # at most, per process: they stop when serialake's workers are done
    control: bool = False  # negative control: read, then overwrite the row blindly
    ready_timeout_s: float = 900.0  # JVM start and warm-up, on a loaded machine


def mixed_config(cfg: WorkloadConfig) -> WorkloadConfig:
    """``cfg`` as a mixed run's serialake workers run it: row-level, paced (module docstring)."""
    return replace(cfg, row_level=True, pause_s=PAUSE_S, quiet_every_s=QUIET_EVERY_S, quiet_s=QUIET_S)


class DeltaSparkWriters:
    """The delta-spark writer processes of one run (a :class:`serialake.verify.workload.Alongside`)."""

    def __init__(self, ds: DeltaSparkConfig) -> None:
        self.ds = ds
        self.processes = ds.processes
        self.first_process = 0
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workdir = Path(".")

    def _file(self, name: str) -> Path:
        return self.workdir / name

    def start(self, table: str, cfg: WorkloadConfig, workdir: Path) -> None:
        """Start the writers (process ids from ``cfg.processes`` on); return once all are warm and ready."""
        self.workdir, self.first_process = workdir.absolute(), cfg.processes
        workdir, table = self.workdir, os.path.abspath(table)  # the writers run in the work directory
        conf = {"key_count": cfg.key_count, "rotate_every": cfg.rotate_every, "retire_keys": cfg.retire_keys,
                "seed": cfg.seed, "isolation_level": cfg.isolation_level, "quiet_every_s": cfg.quiet_every_s,
                "quiet_s": cfg.quiet_s}  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "PYTHONPATH"))}
        env["PYTHONPATH"] = str(Path(serialake.__file__).resolve().parent.parent)  # this very serialake
        for i in range(self.processes):
            p = self.first_process + i
            argv = [
                os.path.abspath(self.ds.python), "-m", "serialake.verify.delta_spark_writer", "--table", table,
                "--jars", os.path.abspath(self.ds.jars), "--workdir", str(workdir), "--process", str(p),
                "--txns", str(self.ds.txns),
                "--config", json.dumps(conf), "--ready-file", str(self._file(f"ds-ready-{p}")),
                "--go-file", str(self._file("ds-go")), "--stop-file", str(self._file("ds-stop")),
            ] + (["--control"] if self.ds.control else [])  # fmt: skip
            with open(workdir / f"delta-spark-{p}.log", "wb") as log:
                self.procs.append(
                    subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env,
                                     start_new_session=True)  # fmt: skip
                )
        deadline = time.monotonic() + self.ds.ready_timeout_s
        for i, proc in enumerate(self.procs):
            p = self.first_process + i
            while not self._file(f"ds-ready-{p}").exists():
                if proc.poll() is not None:
                    raise RuntimeError(f"delta-spark writer {p} exited with code {proc.returncode} before it was "
                                       f"ready: {self.log_tail(p)}")  # fmt: skip
                if time.monotonic() > deadline:
                    raise TimeoutError(f"delta-spark writer {p} not ready in {self.ds.ready_timeout_s:.0f}s")
                time.sleep(0.1)

    def go(self) -> None:
        """Release the writers, telling them the run's start on the system-wide monotonic clock (the
        workers' pacing cycle starts then too)."""
        tmp = self._file("ds-go.tmp")
        tmp.write_text(repr(time.monotonic()))
        tmp.replace(self._file("ds-go"))

    def finish(self, deadline: float) -> list[int | None]:
        """Tell the writers to stop after their transaction in flight; SIGTERM, then SIGKILL, by ``deadline``."""
        self._file("ds-stop").touch()
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGTERM)
                try:
                    proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    self._signal(proc, signal.SIGKILL)
                    proc.wait()
        return [proc.returncode for proc in self.procs]

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
        """Signal the writer's process group (it and its JVM), by the writer's pid."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self, process: int, lines: int = 3) -> str:
        path = self.workdir / f"delta-spark-{process}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def run_mixed(table: str, cfg: WorkloadConfig, ds: DeltaSparkConfig, workdir: str | os.PathLike[str]) -> WorkloadResult:
    """The row-level workload of ``cfg`` (paced: :func:`mixed_config`) with ``ds``'s delta-spark writers beside it."""
    return run_workload(table, mixed_config(cfg), workdir, alongside=DeltaSparkWriters(ds))


@dataclass
class MixedAudit:
    """The log audit of a mixed run (module docstring): call it with the table and the history.

    ``commits`` counts the log's commits by engine (``serialake``, ``delta-spark``).
    """

    first_delta_spark: int  # process ids from here on are delta-spark's
    commits: Counter[str] = field(default_factory=Counter)
    table: str = ""
    history: History = field(default_factory=History)

    def __call__(self, table: str, history: History) -> list[str]:
        self.table, self.history = table, history
        self.commits.clear()
        return audit_log(table, history, check_commit=self.check_commit)

    def check_commit(self, version: int, actions: Sequence[Any], owner: int | None) -> list[str]:
        ci = next((a for a in actions if isinstance(a, CommitInfo)), None)
        engine_info = str(ci.get("engineInfo", "")) if ci is not None else ""
        engine = "delta-spark" if DELTA_SPARK_ENGINE in engine_info else "serialake"
        self.commits[engine] += 1
        problems = [f"version {version} ({engine}): {p}" for p in self._problems(actions, owner, engine, ci)]
        return problems

    def _problems(self, actions: Sequence[Any], owner: int | None, engine: str, ci: CommitInfo | None) -> list[str]:
        out: list[str] = []
        if owner is not None:
            txn = self.history[owner]
            txn_engine = "delta-spark" if txn.process >= self.first_delta_spark else "serialake"
            if txn_engine != engine:
                out.append(f"written by {engine} but attributed to T{owner} ({txn_engine}, process {txn.process})")
            if engine == "delta-spark":
                tag = str(ci.get("userMetadata", "")) if ci is not None else ""
                mine = sorted((k, v) for f, k, v in txn.mops if f == "append")
                named = sorted(_named_appends(tag))
                if not tag.startswith(USER_METADATA_PREFIX) or named != mine:
                    out.append(f"userMetadata {tag!r} does not name T{owner}'s appends {mine}")
        elif engine == "delta-spark":
            out.append("a delta-spark commit that belongs to no transaction")
        out += self._row_problems(actions, retirement=owner is None)
        return out

    def _row_problems(self, actions: Sequence[Any], *, retirement: bool) -> list[str]:
        """File actions are new rows, removals or vector updates; deleted rows are of rewritten keys."""
        removes = {a.path: a for a in actions if isinstance(a, RemoveFile)}
        adds = [a for a in actions if isinstance(a, AddFile)]
        out: list[str] = []
        written: set[str] = set()
        deleted: set[str] = set()
        updated: set[str] = set()
        for a in adds:
            keys = rows.row_keys(self.table, a.path)
            if a.deletion_vector is None:
                if a.path in removes:
                    out.append(f"adds and removes {a.path} without a deletion vector")
                written |= set(keys.values())
                continue
            old = removes.get(a.path)
            if old is None:
                out.append(f"adds {a.path} with a deletion vector but does not remove its previous entry")
                continue
            updated.add(a.path)
            gone = rows.deleted_rows(self.table, a.deletion_vector) - rows.deleted_rows(self.table, old.deletion_vector)
            if not gone:
                out.append(f"updates the deletion vector of {a.path} but deletes no row")
            deleted |= {keys[i] for i in gone if i in keys}
        for path, r in removes.items():
            if path not in updated:
                keys = rows.row_keys(self.table, path)
                live = set(keys) - rows.deleted_rows(self.table, r.deletion_vector)
                deleted |= {keys[i] for i in live}
        if not retirement and not deleted <= written:
            out.append(f"deletes rows of {sorted(deleted - written)}, which it did not rewrite")
        return out


def _named_appends(tag: str) -> list[tuple[str, int]]:
    """``[(key, value)]`` named by a delta-spark commit's userMetadata (``... p5: append k000001 5000017, ...``)."""
    _, _, body = tag.partition(": ")
    out: list[tuple[str, int]] = []
    for part in body.split(", "):
        words = part.split()
        if len(words) == 3 and words[0] == "append" and words[2].isdigit():
            out.append((words[1], int(words[2])))
    return out


def delta_spark_summary(
    history: History, first_delta_spark: int, commits: Counter[str] | None = None
) -> dict[str, Any]:
    """What the delta-spark writers did, and how often a delta-spark commit made a serialake txn abort."""
    ds = [t for t in history if t.process >= first_delta_spark]
    writes = [t for t in ds if any(f == "append" for f, _, _ in t.mops)]
    ok_writes = [t for t in writes if t.outcome == "ok"]
    versions = {t.commit_version for t in ok_writes}
    aborted = Counter(error_class(t.error) for t in ds if t.outcome == "fail")
    unknown = Counter(error_class(t.error) for t in ds if t.outcome == "info")
    by_ds = sum(
        1 for t in history
        if t.process < first_delta_spark and t.outcome == "fail" and winning_version(t.error) in versions
    )  # fmt: skip
    times = [(t.complete_time - t.invoke_time) / 1e9 for t in ok_writes if t.complete_time is not None]
    out: dict[str, Any] = {
        "txns": len(ds),
        "committed": len(ok_writes),
        "read_only": sum(1 for t in ds if t.outcome == "ok" and not any(f == "append" for f, _, _ in t.mops)),
        "append_txns": len(writes),
        "aborted": dict(aborted),
        "unknown": dict(unknown),
        "mean_commit_s": round(sum(times) / len(times), 2) if times else None,
        "serialake_aborted_by_delta_spark": by_ds,
    }
    if commits is not None:
        out["log_commits"] = dict(commits)
    return out

