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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from serialake.extras import MissingExtraError, require
from serialake.storage.faulty import FaultPlan
from serialake.verify.checker import (
    SERIALIZABLE_FORBIDDEN,
    STRICT_SERIALIZABLE_FORBIDDEN,
    WRITE_SERIALIZABLE_FORBIDDEN,
    check,
)
from serialake.verify.crash import run_crash_trials
from serialake.verify.report import LevelReport, VerifyReport, check_into, count_outcomes, level_report
from serialake.verify.workload import (
    WorkloadConfig,
    apply_environment,
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
                rep = level_report(result, LEVELS[level], negative)
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
    rep = level_report(result, LEVELS[cfg.isolation_level], negative)
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
        rep = level_report(result, LEVELS[level], negative, audit=audit)
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
        rep = level_report(result, LEVELS[level], negative, audit=dfw.audit_table)
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
    count_outcomes(rep, result.history)
    rep.retries = sum(t.attempts - 1 for t in result.history if t.outcome == "ok" and t.attempts is not None)
    rep.wall_s = result.wall_s
    rep.worker_problems = [c.strip().splitlines()[-1] for c in result.crashed]
    forbidden = STRICT_SERIALIZABLE_FORBIDDEN if strict else SERIALIZABLE_FORBIDDEN
    report = check_into(rep, result.history, forbidden, realtime=strict)
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
        count_outcomes(rep, result.history)
        rep.wall_s = result.wall_s
        rep.worker_problems = [c.strip().splitlines()[-1] for c in result.crashed]
        check_into(rep, result.history, SERIALIZABLE_FORBIDDEN, realtime=False)
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
