"""A delta-spark writer process of the row-level list-append workload (run with delta-spark's Python).

``python -m serialake.verify.delta_spark_writer ...`` runs under delta-spark's environment
(``.venv-delta``: delta-spark and its pyspark, serialake installed beside them); nothing in
serialake imports this module, and pyspark and delta are imported inside its functions
only. :mod:`serialake.verify.mixed` starts such processes beside serialake's workers
(:mod:`serialake.verify.workload` with ``row_level``) on one table: the table of
:mod:`serialake.verify.rows` (unpartitioned, deletion vectors, one live row
``(k, list, rv)`` per key). The process builds its own delta-spark session from a jars
directory, then runs its transactions one after the other (one thread: the session-wide
``userMetadata`` setting names one operation at a time), each recorded with a
:class:`~serialake.verify.history.Recorder` like every other worker's:

- **append** to one or two keys as ONE delta-spark ``MERGE`` that reads and writes the
  keys' rows in the same delta-spark transaction: ``UPDATE SET list = list || ' ' || v``
  for the matched rows; an unmatched key (no live row: not created yet, or retired) makes
  the whole MERGE fail through ``raise_error`` in its ``WHEN NOT MATCHED`` clause, so the
  MERGE appends to all its keys or to none (delta-spark creates no key; serialake's
  workers do, as an UPDATE-like first write). The observed lists (the ``r`` micro-ops)
  are what the commit proves: the MERGE's ``userMetadata`` names it, its version is found
  in the log with serialake's reader, and each key's row written by that commit, minus
  its last element, is what the MERGE read. ``rv`` is the version this process saw
  last before the MERGE (a lower bound of the MERGE's read version; readers order a
  key's live rows by it, and a valid history has one live row per key).
- **read-only**: pin the latest version from the log and read keys ``versionAsOf`` it.

Only transactions that are serializable by delta-spark's own rules are used. In
particular there is no "append to x computed from a read of y" as a MERGE whose source
reads the target: delta-spark records the target scan of the MERGE (its join) as the
transaction's read, not the source's read of the same table, so a concurrent change to
``y`` would not fail it, and the checker would rightly flag delta-spark itself (write
skew), which is not what this run is for. On this unpartitioned table delta-spark's
conflict check is coarse: any concurrent commit that adds a file fails the MERGE
(``ConcurrentAppendException``; its ``ConflictChecker`` does not filter added files by
the read predicate of an unpartitioned table), so its transactions are serializable and
conflict often: :mod:`serialake.verify.mixed` paces the run in cycles, and this process
appends only in their quiet parts (serialake's workers commit nothing then) and reads in
their busy parts.

Outcomes: a delta-spark conflict (``delta.exceptions.*``) or the missing-row error is a
definite ``fail``; a commit found under the operation's ``userMetadata`` is ``ok`` whatever
was raised after it (e.g. by a post-commit hook); any other error is ``info``.

With ``--control`` (the negative control) an append is done wrongly on purpose: read the
key at a pinned version with one Spark read, then write the read list plus the value with a
plain ``UPDATE ... SET list = '<literal>' WHERE k = 'x'``, a second transaction that
re-checks nothing; appends committed in between are lost, and the checker must say so. So that
the loss is not left to chance, the writer waits (at most ``STALE_WAIT_S``) between the read
and the UPDATE until another process has appended to the key.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.actions import AddFile
from serialake.verify.history import Mop, Recorder
from serialake.verify.txn import TxnResult, check_window, key_name
from serialake.verify.workload import VALUE_BASE, WorkerStats, WorkloadConfig, is_quiet, retired_below

__all__ = ["MISSING_ROW", "USER_METADATA_PREFIX", "main", "merge_sql", "session_settings", "user_metadata"]

MISSING_ROW = "serialake-verify: no live row of key "  # the MERGE's raise_error message
USER_METADATA_PREFIX = "serialake-verify delta-spark"
READ_ONLY_FRACTION = 0.25  # of this process's transactions
MAX_KEYS = 2  # keys per append MERGE
STALE_WAIT_S = 3.0  # the negative control's longest wait for its read to go stale
_CONFLICTS = (
    "ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException", "ConcurrentWriteException", "MetadataChangedException",
    "ProtocolChangedException", "DeltaConcurrentModificationException",
)  # fmt: skip


def session_settings(jars: Sequence[str], workdir: str) -> dict[str, str]:
    """Spark settings of the writer's delta-spark session (small: two of them share two cores with the rest).

    Time travel is allowed past ``delta.deletedFileRetentionDuration``: the workload's tables
    keep tombstones 1 second (no VACUUM ever runs on them), and delta-spark would otherwise
    refuse ``versionAsOf`` a version more than a second old.
    """
    return {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.warehouse.dir": os.path.join(workdir, "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={workdir} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.driver.memory": "768m",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "1",
        "spark.databricks.delta.snapshotPartitions": "1",
        "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
    }


def _session(jars_dir: str, workdir: str) -> Any:
    from pyspark.sql import SparkSession

    jars = sorted(glob.glob(os.path.join(jars_dir, "*.jar")))
    if not jars:
        raise SystemExit(f"no delta-spark jars in {jars_dir}: run `make peer`")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("serialake-verify-delta-spark").master("local[1]")
    for key, value in session_settings(jars, workdir).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from serialake.spark.backend import backend

    backend(spark).set_log_level("ERROR")
    return spark


def user_metadata(process: int, appends: Sequence[tuple[str, int]]) -> str:
    """The ``commitInfo.userMetadata`` of one append: names its process and its (unique) values."""
    return f"{USER_METADATA_PREFIX} p{process}: " + ", ".join(f"append {k} {v}" for k, v in appends)


def merge_sql(table: str, appends: Sequence[tuple[str, int]], rv: int) -> str:
    """The MERGE that appends ``v`` to each key's list, or fails (nothing written) if a key has no row.

    ``t.k IN (...)`` in the join condition is a target-only predicate: delta-spark scans only
    the files whose stats may hold the keys.
    """
    source = ", ".join(f"('{k}', '{v}')" for k, v in appends)
    keys = ", ".join(f"'{k}'" for k, _ in appends)
    return (
        f"MERGE INTO delta.`{table}` AS t "
        f"USING (SELECT * FROM VALUES {source} AS s(k, v)) AS s "
        f"ON t.k = s.k AND t.k IN ({keys}) "
        "WHEN MATCHED THEN UPDATE SET "
        f"list = CASE WHEN t.list = '' THEN s.v ELSE concat(t.list, ' ', s.v) END, rv = {rv} "
        "WHEN NOT MATCHED THEN INSERT (k, list, rv) "
        f"VALUES (s.k, raise_error(concat('{MISSING_ROW}', s.k)), {rv})"
    )


def _update_sql(table: str, key: str, values: Sequence[int], rv: int) -> str:
    """The negative control's blind overwrite of ``key``'s row with a list computed beforehand."""
    return f"UPDATE delta.`{table}` SET list = '{' '.join(map(str, values))}', rv = {rv} WHERE k = '{key}'"


@dataclass
class _Args:
    table: str
    jars: str
    workdir: str
    process: int
    txns: int
    config: dict[str, Any]
    control: bool
    ready_file: str
    go_file: str
    stop_file: str
    go_timeout_s: float


class Writer:
    """One process's delta-spark session and transactions on the workload's table."""

    def __init__(self, spark: Any, table: str, cfg: WorkloadConfig, process: int) -> None:
        self.spark = spark
        self.table = table
        self.cfg = cfg
        self.process = process
        self.log = DeltaLog(table)
        self.rng = random.Random(cfg.seed * 7919 + process)
        self._values = iter(range(1, VALUE_BASE))

    # -- choosing ----------------------------------------------------------------------------
    def latest(self) -> int:
        return self.log.update().version

    def next_value(self) -> int:
        return self.process * VALUE_BASE + next(self._values)

    def window_keys(self, position: int, n: int) -> list[str]:
        """``n`` distinct keys of the active window at ``position`` (as serialake's workers choose them)."""
        base = position // max(1, self.cfg.rotate_every)
        picks = self.rng.sample(range(self.cfg.key_count), min(n, self.cfg.key_count))
        return [key_name(base + i) for i in picks]

    # -- transactions ------------------------------------------------------------------------
    def read(self, keys: Sequence[str], version: int) -> dict[str, list[int] | None]:
        """Each key's list at ``version`` read by delta-spark: its live rows' lists concatenated in
        rows.py's order (by ``rv``, then file); None for a key without a live row."""
        from pyspark.sql import functions as F

        df = (
            self.spark.read.format("delta").option("versionAsOf", version).load(self.table)
            .where(F.col("k").isin(list(keys)))
            .select("k", "list", "rv", F.col("_metadata.file_name").alias("file"))
        )  # fmt: skip
        found = sorted(df.collect(), key=lambda r: (r["rv"], r["file"]))
        out: dict[str, list[int] | None] = {k: None for k in keys}
        for r in found:
            out[r["k"]] = (out[r["k"]] or []) + [int(x) for x in (r["list"] or "").split()]
        return out

    def read_only(self, keys: Sequence[str]) -> TxnResult:
        """Read ``keys`` at one version: the latest in the log once the txn started (pinned)."""
        mops: tuple[Mop, ...] = tuple(("r", k, None) for k in keys)
        try:
            version = self.latest()
            check_window(version, mops, retired_below(self.cfg, version))
            lists = self.read(keys, version)
        except Exception as e:  # noqa: BLE001 - a read that failed wrote nothing
            return TxnResult("fail", mops, _error(e))
        return TxnResult("ok", tuple(("r", k, tuple(lists[k] or ())) for k in keys), commit_version=version)

    def append_mops(self, position: int) -> list[tuple[str, int]]:
        return [(k, self.next_value()) for k in self.window_keys(position, self.rng.randint(1, MAX_KEYS))]

    def append(self, appends: Sequence[tuple[str, int]], position: int) -> TxnResult:
        """One MERGE appending to every key of ``appends``; observed lists from the commit it made."""
        mops = _append_mops(appends)
        tag = user_metadata(self.process, appends)
        t0 = time.monotonic()
        error: BaseException | None = None
        try:
            self.spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", tag)
            self.spark.sql(merge_sql(self.table, appends, position))
        except Exception as e:  # noqa: BLE001 - classified below, after looking for its commit
            error = e
        finally:
            self.spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
        return self._outcome(mops, appends, tag, position, error, time.monotonic() - t0)

    def blind_append(self, appends: Sequence[tuple[str, int]], position: int) -> TxnResult:
        """The negative control: read the first key at the latest version, then overwrite its row with a
        literal in a second delta-spark transaction (``position``: the version seen before the txn)."""
        key, value = appends[0]
        mops = _append_mops([(key, value)])
        t0 = time.monotonic()
        try:
            position = self.latest()  # the read's version, once the txn started
            rows = self.read([key], position)[key]
        except Exception as e:  # noqa: BLE001
            return TxnResult("fail", mops, _error(e))
        if rows is None:
            missing = f"MissingKeyRow: no live row of {key} at version {position}; nothing written"
            return TxnResult("fail", mops, missing)
        self._wait_until_stale(key, rows, position)
        tag = user_metadata(self.process, [(key, value)])
        error: BaseException | None = None
        try:
            self.spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", tag)
            self.spark.sql(_update_sql(self.table, key, [*rows, value], position))
        except Exception as e:  # noqa: BLE001
            error = e
        finally:
            self.spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
        res = self._outcome(mops, [(key, value)], tag, position, error, time.monotonic() - t0)
        if res.outcome == "ok":  # what it read, not what the commit proves: the broken part
            res = TxnResult("ok", (("r", key, tuple(rows)), ("append", key, value)), None,
                            res.commit_version, res.attempts, res.duration_s)  # fmt: skip
        return res

    def _wait_until_stale(self, key: str, rows: list[int], position: int) -> None:
        """Until a commit after ``position`` has changed ``key``'s list from ``rows`` (or ``STALE_WAIT_S``):
        the blind overwrite that follows then certainly loses that commit's append."""
        deadline = time.monotonic() + STALE_WAIT_S
        seen = position
        while time.monotonic() < deadline:
            latest = self.latest()
            if latest > seen:
                if self.read([key], latest)[key] != rows:
                    return
                seen = latest
            time.sleep(0.05)

    def _outcome(
        self,
        mops: tuple[Mop, ...],
        appends: Sequence[tuple[str, int]],
        tag: str,
        after: int,
        error: BaseException | None,
        duration: float,
    ) -> TxnResult:
        try:
            version = self.find_commit(tag, after)
        except Exception as e:  # noqa: BLE001 - the log could not be read: we cannot tell
            what = _error(error) if error else "returned"
            return TxnResult("info", mops, f"{what}; then finding its commit: {_error(e)}")
        if version is None:
            if error is None:
                return TxnResult("info", mops, "delta-spark returned, but no commit carries its userMetadata")
            definite = _is_conflict(error) or MISSING_ROW in str(error)
            return TxnResult("fail" if definite else "info", mops, _error(error))
        try:
            observed = self.observed(version, appends)
        except Exception as e:  # noqa: BLE001
            return TxnResult("info", mops, f"committed at version {version}, but its rows: {_error(e)}")
        done: list[Mop] = []
        for k, v in appends:
            done += [("r", k, tuple(observed[k])), ("append", k, v)]
        return TxnResult("ok", tuple(done), None, version, 1, duration)

    def find_commit(self, tag: str, after: int) -> int | None:
        """The version of the commit whose ``userMetadata`` is ``tag`` (a version after ``after``), if any."""
        latest = self.log.update().version
        for version in range(after + 1, latest + 1):
            ci = self.log.read_commit(version).commit_info
            if ci is not None and ci.get("userMetadata") == tag:
                return version
        return None

    def observed(self, version: int, appends: Sequence[tuple[str, int]]) -> dict[str, list[int]]:
        """Each key's list before commit ``version`` appended to it: its new rows there, minus the value."""
        want = dict(appends)
        rows: dict[str, list[tuple[int, str, list[int]]]] = {k: [] for k in want}
        for a in self.log.read_commit(version).actions:
            if not isinstance(a, AddFile) or a.deletion_vector is not None:
                continue
            data = pq.ParquetFile(os.path.join(self.table, unquote(a.path))).read(columns=["k", "list", "rv"])
            for k, lst, rv in zip(*(data.column(c).to_pylist() for c in ("k", "list", "rv")), strict=True):
                if k in rows:
                    rows[k].append((rv, a.path, [int(x) for x in (lst or "").split()]))
        out: dict[str, list[int]] = {}
        for k, found in rows.items():
            if not found:
                raise RuntimeError(f"commit {version} wrote no row of {k}")
            out[k] = []
            for _, _, values in sorted(found):
                if not values or values[-1] != want[k]:
                    raise RuntimeError(f"commit {version} wrote a row of {k} not ending with {want[k]}: {values}")
                out[k] += values[:-1]
        return out

    def warm_up(self) -> None:
        """Load the JVM's classes for a read and a MERGE before the run (the first ones take tens of seconds).

        The MERGE is of a key that has no row, so it fails by design: nothing is committed.
        """
        version = self.latest()
        self.read([key_name(0)], version)
        try:
            self.spark.sql(merge_sql(self.table, [("warm-up", 0)], version))
        except Exception as e:  # noqa: BLE001
            if MISSING_ROW not in str(e):
                raise
        else:
            raise RuntimeError("the warm-up MERGE of a key without a row committed")


def _append_mops(appends: Sequence[tuple[str, int]]) -> tuple[Mop, ...]:
    mops: list[Mop] = []
    for k, v in appends:
        mops += [("r", k, None), ("append", k, v)]
    return tuple(mops)


def _is_conflict(e: BaseException) -> bool:
    """A delta-spark conflict: nothing of the operation was committed."""
    if any(cls.__name__ in _CONFLICTS for cls in type(e).__mro__):  # delta.exceptions' classes, as pyspark raises them
        return True
    head = str(e)[:2000]  # a py4j error wrapping the JVM's exception
    return any(f"io.delta.exceptions.{c}" in head for c in _CONFLICTS)


def _error(e: BaseException | None) -> str:
    """``Class: message`` of a delta-spark error, naming the JVM's exception rather than py4j's wrapper."""
    if e is None:
        return "unknown"
    text = str(e)
    if MISSING_ROW in text:
        key = text.split(MISSING_ROW, 1)[1].split()[0].strip("'\".,")
        return f"MissingKeyRow: no live row of {key} at the MERGE's snapshot; nothing written"
    name = type(e).__name__
    for c in _CONFLICTS:
        if c in text[:2000]:
            name = c
            break
    lines = (line.strip().lstrip(": ") for line in text.splitlines())
    first = next((line for line in lines if line and "error occurred" not in line), "")
    return f"{name}: {first[:160]}"


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout_s:.0f}s")
        time.sleep(0.02)


def run(args: _Args) -> WorkerStats:
    """Build the session, warm up, signal ready, wait for go, run the transactions; the process's stats."""
    work = Path(args.workdir)
    stats = WorkerStats(process=args.process)
    errors: Counter[str] = Counter()
    try:
        cfg = WorkloadConfig(**args.config)
        spark = _session(args.jars, str(work / f"delta-spark-{args.process}"))
        writer = Writer(spark, args.table, cfg, args.process)
        writer.warm_up()
        Path(args.ready_file).touch()
        _wait_for(Path(args.go_file), args.go_timeout_s)
        started = float(Path(args.go_file).read_text())  # when serialake's workers were released
        stop = Path(args.stop_file)
        with Recorder(work / f"history-{args.process}.jsonl", process=args.process) as rec:
            for _ in range(args.txns):
                if stop.exists():
                    break
                position = writer.latest()
                # Appends while serialake's workers commit nothing (they would fail), reads meanwhile.
                busy = cfg.quiet_every_s > 0 and not is_quiet(cfg, time.monotonic() - started)
                if busy or writer.rng.random() < READ_ONLY_FRACTION:
                    keys = writer.window_keys(position, writer.rng.randint(1, 3))
                    handle = rec.invoke([("r", k, None) for k in keys])
                    res = writer.read_only(keys)
                else:
                    appends = writer.append_mops(position)[: 1 if args.control else MAX_KEYS]
                    handle = rec.invoke(_append_mops(appends))
                    res = (writer.blind_append if args.control else writer.append)(appends, position)
                rec.complete(handle, res.outcome, res.mops, res.error, res.commit_version, res.attempts)  # type: ignore[arg-type]
                _tally(stats, errors, res)
        spark.stop()
    except BaseException:  # noqa: BLE001 - reported to the parent through the stats file
        stats.crashed = traceback.format_exc()
    stats.errors = dict(errors)
    return stats


def _tally(stats: WorkerStats, errors: Counter[str], res: TxnResult) -> None:
    """Errors and reads only: the run's commit statistics are serialake's commit loop's; what delta-spark's
    operations did is summarised from the history (serialake.verify.mixed.delta_spark_summary)."""
    if res.outcome != "ok":
        errors[f"{res.outcome}:{(res.error or 'unknown').split(':', 1)[0]}"] += 1
    elif res.attempts is None:
        stats.read_only += 1


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry (started by :mod:`serialake.verify.mixed`); writes ``stats-<process>.json``; 0 unless it crashed."""
    ap = argparse.ArgumentParser(
        prog="python -m serialake.verify.delta_spark_writer", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--table", required=True)
    ap.add_argument("--jars", required=True, help="directory of delta-spark's jars")
    ap.add_argument("--workdir", required=True, help="where history-<process>.jsonl and stats-<process>.json go")
    ap.add_argument("--process", type=int, required=True, help="process id in the merged history")
    ap.add_argument("--txns", type=int, required=True, help="transactions at most (fewer if told to stop)")
    ap.add_argument("--config", required=True, help="the workload's WorkloadConfig fields, as JSON")
    ap.add_argument("--control", action="store_true", help="negative control: read, then overwrite blindly")
    ap.add_argument("--ready-file", required=True, help="created once the session is up and warm")
    ap.add_argument("--go-file", required=True, help="the transactions start when it exists")
    ap.add_argument("--stop-file", required=True, help="no new transaction once it exists")
    ap.add_argument("--go-timeout", type=float, default=900.0, help="seconds to wait for the go file")
    ns = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped by pid: unwind, leave the history usable
    args = _Args(
        ns.table, ns.jars, ns.workdir, ns.process, ns.txns, json.loads(ns.config), ns.control,
        ns.ready_file, ns.go_file, ns.stop_file, ns.go_timeout,
    )  # fmt: skip
    stats = run(args)
    (Path(args.workdir) / f"stats-{args.process}.json").write_text(json.dumps(asdict(stats)))
    return 1 if stats.crashed else 0


if __name__ == "__main__":
    sys.exit(main())
