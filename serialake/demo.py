"""``serialake demo``: concurrent jobs of a small pipeline at both isolation levels, explained.

For each level a fresh table ``events`` (partitioned by ``date``) is written by rounds of
concurrent SQL jobs: blind appends, MERGE upserts per partition with explicit and with
implicit conditions, a DELETE, an UPDATE, an OPTIMIZE and an ALTER TABLE. Every job of a
round runs in its own thread on one SparkSession, all planning from the same table version;
each is held at its commit until all are ready, then they commit one at a time in a fixed
order. So which job commits and which conflicts (and why) is deterministic and the same
on every run. The demo ends with the table history, a read-isolation example, reads over
several tables (a torn read prevented, a derived table waited for: ``demo_reads``), and a
timeline (text, and a PNG written with matplotlib: the ``demo`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from serialake.core import DeltaLog
from serialake.demo_reads import copy_rows_from_another_process, show_consistent_reads
from serialake.exceptions import DeltaConcurrentModificationException
from serialake.extras import MissingExtraError, require
from serialake.storage.base import LogStore
from serialake.storage.faulty import LogStoreWrapper
from serialake.tableinfo import history_rows
from serialake.timeline import Span, render_png, render_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

__all__ = ["CommitGate", "DemoReport", "Job", "Outcome", "ROUNDS", "Round", "build_parser", "main", "run_demo"]

LEVELS = ("WriteSerializable", "Serializable")
COMMIT = "commit"
JOB_TIMEOUT_S = 600.0

D1, D2, D3 = "2024-01-01", "2024-01-02", "2024-01-03"


# ---------------------------------------------------------------------------------------------
# The pipeline: rounds of concurrent jobs, with what each level should do and why
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One SQL job; ``expect``/``why`` per level (key ``*`` for both)."""

    name: str
    statement: str
    expect: dict[str, str]
    why: dict[str, str]

    def expected(self, level: str) -> str:
        return self.expect.get(level, self.expect.get("*", COMMIT))

    def reason(self, level: str) -> str:
        return self.why.get(level, self.why.get("*", ""))


@dataclass(frozen=True)
class Round:
    """Jobs that plan from the same version, then commit in the listed order."""

    title: str
    jobs: tuple[Job, ...]


def _values(rows: Sequence[tuple[int, str, str, float]]) -> str:
    return ", ".join(f"({u}, '{d}', '{c}', {a:.1f})" for u, d, c, a in rows)


def _merge(source: str, on: str) -> str:
    return (
        f"MERGE INTO events t USING {source} s\n  ON {on}\n"
        "  WHEN MATCHED THEN UPDATE SET *\n  WHEN NOT MATCHED THEN INSERT *"
    )


ROUNDS: tuple[Round, ...] = (
    Round(
        "Round 1: blind appends next to partition-explicit MERGEs",
        (
            Job(
                "append 01-01",
                f"INSERT INTO events VALUES {_values([(101, D1, 'us', 12.0), (102, D1, 'fr', 48.0)])}",
                {"*": COMMIT},
                {"*": "A blind INSERT reads nothing, so no concurrent commit can invalidate it."},
            ),
            Job(
                "append 01-02",
                f"INSERT INTO events VALUES {_values([(103, D2, 'de', 7.5)])}",
                {"*": COMMIT},
                {"*": "Blind appends never conflict with each other."},
            ),
            Job(
                "merge 01-01 explicit",
                _merge("updates_0101", f"t.user_id = s.user_id AND t.date = '{D1}'"),
                {"WriteSerializable": COMMIT, "Serializable": "ConcurrentAppendException"},
                {
                    "WriteSerializable": f"'append 01-01' added rows to date={D1}, which this MERGE read; "
                    "WriteSerializable ignores blind appends.",
                    "Serializable": f"'append 01-01' added rows to date={D1}, which this MERGE read; "
                    "Serializable counts blind appends too.",
                },
            ),
            Job(
                "merge 01-03 explicit",
                _merge("updates_0103", f"t.user_id = s.user_id AND t.date = '{D3}'"),
                {"*": COMMIT},
                {"*": f"Its condition names date='{D3}': no concurrent job wrote that partition."},
            ),
        ),
    ),
    Round(
        "Round 2: MERGE per partition, explicit vs implicit condition",
        (
            Job(
                "merge 01-02 explicit",
                _merge("updates_0102", f"t.user_id = s.user_id AND t.date = '{D2}'"),
                {"*": COMMIT},
                {"*": f"Reads only date={D2}."},
            ),
            Job(
                "merge 01-03 implicit",
                _merge("updates_0103b", "t.user_id = s.user_id AND t.date = s.date"),
                {"*": "ConcurrentAppendException"},
                {
                    "*": "'t.date = s.date' names no partition, so this MERGE read the whole table; "
                    "'merge 01-02 explicit' rewrote files in it."
                },
            ),
        ),
    ),
    Round(
        "Round 3: DELETE, UPDATE and OPTIMIZE",
        (
            Job(
                "delete 01-01",
                f"DELETE FROM events WHERE date = '{D1}' AND amount < 20",
                {"*": COMMIT},
                {"*": f"Rewrites files of date={D1}."},
            ),
            Job(
                "update 01-02",
                f"UPDATE events SET amount = amount + 1 WHERE date = '{D2}'",
                {"*": COMMIT},
                {"*": f"Reads date={D2}; the DELETE changed only date={D1}."},
            ),
            Job(
                "optimize 01-01",
                f"OPTIMIZE events WHERE date = '{D1}'",
                {"*": "ConcurrentDeleteDeleteException"},
                {"*": "The DELETE already removed a file this compaction removes."},
            ),
        ),
    ),
    Round(
        "Round 4: schema change vs a blind append",
        (
            Job(
                "add column",
                "ALTER TABLE events ADD COLUMNS (channel STRING)",
                {"*": COMMIT},
                {"*": "A metadata-only commit."},
            ),
            Job(
                "append 01-03",
                f"INSERT INTO events VALUES {_values([(104, D3, 'es', 30.0)])}",
                {"*": "MetadataChangedException"},
                {"*": "A metadata change (ADD COLUMNS) fails every concurrent write, even a blind append."},
            ),
        ),
    ),
)

SEED_ROWS = [
    [(u, d, c, a) for u, (d, c, a) in enumerate(
        [(D1, "us", 10.0), (D1, "fr", 55.0), (D2, "de", 70.0), (D2, "us", 15.0), (D3, "fr", 90.0), (D3, "it", 25.0)],
        start=1)],  # fmt: skip
    [(u, d, c, a) for u, (d, c, a) in enumerate(
        [(D1, "it", 65.0), (D1, "us", 18.0), (D2, "fr", 40.0), (D2, "de", 80.0), (D3, "us", 35.0), (D3, "de", 95.0)],
        start=7)],  # fmt: skip
]

SOURCES = {
    "updates_0101": [(1, D1, "us", 11.0), (8, D1, "us", 19.0), (201, D1, "fr", 60.0)],
    "updates_0102": [(3, D2, "de", 71.0), (202, D2, "it", 22.0)],
    "updates_0103": [(5, D3, "fr", 91.0), (203, D3, "us", 45.0)],
    "updates_0103b": [(6, D3, "it", 26.0), (204, D3, "de", 33.0)],
}


# ---------------------------------------------------------------------------------------------
# Holding commits: a log store that stops each job at its first commit attempt
# ---------------------------------------------------------------------------------------------


class _Ticket:
    """A job's place in the commit order, seen by its worker thread and by the conductor."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.passed = False
        self.version: int | None = None


class CommitGate(LogStoreWrapper):
    """Wraps a table's log store: a job's first commit attempt waits until it is released.

    Planning (reading, writing data files) runs concurrently; only the moment of commit
    is ordered, which makes the conflicts of a round deterministic. Threads without a
    ticket (setup, reads) pass through; every other call goes straight to ``inner``.
    """

    def __init__(self, inner: LogStore) -> None:
        super().__init__(inner)
        self._local = threading.local()

    def attach(self, ticket: _Ticket) -> None:
        self._local.ticket = ticket

    def detach(self) -> None:
        self._local.ticket = None

    def put_if_absent(self, path: str, data: bytes) -> None:
        ticket: _Ticket | None = getattr(self._local, "ticket", None)
        is_commit = ticket is not None and os.path.basename(path).endswith(".json")
        if is_commit and not ticket.passed:  # type: ignore[union-attr]
            ticket.arrived.set()  # type: ignore[union-attr]
            if not ticket.release.wait(JOB_TIMEOUT_S):  # type: ignore[union-attr]
                raise TimeoutError(f"demo job {ticket.name!r} was never released")  # type: ignore[union-attr]
            ticket.passed = True  # type: ignore[union-attr]
        self.inner.put_if_absent(path, data)
        if is_commit:
            ticket.version = int(os.path.basename(path).split(".")[0])  # type: ignore[union-attr]


@contextmanager
def gated_commits(path: str) -> Iterator[CommitGate]:
    """Route every commit to the table at ``path`` made in this process through a ``CommitGate``."""
    log = DeltaLog.for_table(path)
    original = log.store
    gate = CommitGate(original)
    log.store = gate
    try:
        yield gate
    finally:
        log.store = original


# ---------------------------------------------------------------------------------------------
# Running the rounds
# ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What happened to one job at one level."""

    level: str
    round: str
    job: str
    statement: str
    status: str = "pending"  # committed | conflicted | failed | no-op
    version: int | None = None
    read_version: int | None = None
    exception: str | None = None
    message: str | None = None
    help: str | None = None
    winning_version: int | None = None
    winning_operation: str | None = None
    operation: str | None = None  # the committed commit's operation
    expected: str = COMMIT
    why: str = ""
    started_s: float = 0.0
    ready_s: float | None = None
    ended_s: float = 0.0

    @property
    def result(self) -> str:
        return COMMIT if self.status in ("committed", "no-op") else (self.exception or self.status)

    @property
    def as_expected(self) -> bool:
        return self.result == self.expected


@dataclass
class DemoReport:
    """Everything the demo did, for the terminal or ``--json``."""

    directory: str
    outcomes: list[Outcome] = field(default_factory=list)
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    tables: dict[str, str] = field(default_factory=dict)
    reads: list[dict[str, Any]] = field(default_factory=list)
    multi_table: list[dict[str, Any]] = field(default_factory=list)  # torn read prevented, derived table
    timeline_png: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.as_expected for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "tables": self.tables,
            "outcomes": [{**asdict(o), "result": o.result, "asExpected": o.as_expected} for o in self.outcomes],
            "history": self.history,
            "reads": self.reads,
            "multiTable": self.multi_table,
            "timelinePng": self.timeline_png,
            "durationS": round(self.duration_s, 1),
            "ok": self.ok,
        }


class _Demo:
    """One demo run: a console (or none, for --json), the Spark session, the report."""

    def __init__(self, spark: SparkSession, directory: str, console: Console | None) -> None:
        self.spark = spark
        self.dir = directory
        self.console = console
        self.t0 = time.monotonic()
        self.report = DemoReport(directory)

    def say(self, text: str = "", **kw: Any) -> None:
        if self.console is not None:
            self.console.print(text, **kw)

    def sql(self, statement: str) -> Any:
        from serialake.sql import sql

        return sql(self.spark, statement)

    @contextmanager
    def status(self, text: str) -> Iterator[None]:
        if self.console is None:
            yield
            return
        with self.console.status(text, spinner="dots"):
            yield

    # -- one level ------------------------------------------------------------------
    def run_level(self, level: str) -> None:
        from serialake.core.tables.catalog import register

        path = os.path.join(self.dir, level.lower(), "events")
        if os.path.exists(path):
            raise FileExistsError(f"{path} already exists: give serialake demo an empty --dir")
        self.report.tables[level] = path
        self.say()
        self.say(f"[bold reverse] {level} [/bold reverse]  table events at {path}")
        register("events", path, persist=False)  # this process only: the user's catalog is untouched
        with self.status(f"Creating and loading events ({level})..."):
            self.sql(
                f"CREATE TABLE delta.`{path}` (user_id BIGINT, date STRING, country STRING, amount DOUBLE)\n"
                f"USING DELTA PARTITIONED BY (date) TBLPROPERTIES ('delta.isolationLevel' = '{level}')"
            )
            for rows in SEED_ROWS:
                self.sql(f"INSERT INTO events VALUES {_values(rows)}")
            for name, rows in SOURCES.items():
                self.sql(
                    f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM VALUES {_values(rows)} "
                    "AS s(user_id, date, country, amount)"
                )
        log = DeltaLog.for_table(path)
        version = log.update().version
        loaded = sum(len(rows) for rows in SEED_ROWS)
        self.say(f"  created with delta.isolationLevel = '{level}'; {loaded} rows loaded in {len(SEED_ROWS)} commits "
                 f"(version {version})")  # fmt: skip
        for rnd in ROUNDS:
            self.run_round(level, rnd, path)
        self.report.history[level] = _history(log)
        self.show_history(level)

    def run_round(self, level: str, rnd: Round, path: str) -> None:
        log = DeltaLog.for_table(path)
        start_version = log.update().version
        self.say()
        self.say(f"[bold]{rnd.title}[/bold]  (all {len(rnd.jobs)} jobs plan from version {start_version}, "
                 "then commit in this order)")  # fmt: skip
        outcomes = [
            Outcome(level, rnd.title, j.name, j.statement, expected=j.expected(level), why=j.reason(level))
            for j in rnd.jobs
        ]
        with gated_commits(path) as gate:
            tickets = [_Ticket(j.name) for j in rnd.jobs]
            done = [threading.Event() for _ in rnd.jobs]
            threads = [
                threading.Thread(target=self._work, args=(gate, path, t, j, o, d), name=f"demo-{j.name}", daemon=True)
                for t, j, o, d in zip(tickets, rnd.jobs, outcomes, done)
            ]
            for t in threads:
                t.start()
            try:
                with self.status(f"Planning {len(threads)} transactions concurrently (reading, writing files)..."):
                    self._await_planning(tickets, done)
                self.say(f"  committing in order: {', '.join(j.name for j in rnd.jobs)}")
                for ticket, finished, outcome in zip(tickets, done, outcomes):
                    ticket.release.set()
                    finished.wait(JOB_TIMEOUT_S)
                    self.show_outcome(outcome)
            finally:
                for ticket in tickets:  # never leave a job held, whatever happened
                    ticket.release.set()
                for t in threads:
                    t.join(JOB_TIMEOUT_S)
        for o in outcomes:
            if o.read_version is None:
                o.read_version = start_version
        self.report.outcomes.extend(outcomes)

    def _await_planning(self, tickets: list[_Ticket], done: list[threading.Event]) -> None:
        """Wait until every job holds at its commit (or finished early), reporting each as it gets there."""
        deadline = time.monotonic() + JOB_TIMEOUT_S
        pending = list(range(len(tickets)))
        while pending:
            for i in list(pending):
                if tickets[i].arrived.is_set():
                    self.say(f"  [dim]⏸ {tickets[i].name}: planned, held at its commit[/dim]")
                    pending.remove(i)
                elif done[i].is_set():
                    self.say(f"  [dim]■ {tickets[i].name}: finished without reaching a commit[/dim]")
                    pending.remove(i)
            if time.monotonic() > deadline:
                raise TimeoutError(f"demo jobs {[tickets[i].name for i in pending]} neither planned nor finished")
            time.sleep(0.05)

    def _work(
        self, gate: CommitGate, path: str, ticket: _Ticket, job: Job, out: Outcome, done: threading.Event
    ) -> None:
        gate.attach(ticket)
        out.started_s = time.monotonic() - self.t0
        try:
            self.sql(job.statement)
            out.version = ticket.version
            out.status = "committed" if ticket.version is not None else "no-op"
            if out.version is not None:
                info = DeltaLog.for_table(path).read_commit(out.version).commit_info
                rv = info.values.get("readVersion") if info is not None else None
                out.read_version = int(rv) if rv is not None else None
                out.operation = info.values.get("operation") if info is not None else None
        except DeltaConcurrentModificationException as e:
            out.status = "conflicted"
            out.exception = type(e).__name__
            out.message = e.reason
            out.help = e.help
            out.read_version = e.read_version
            out.winning_version = e.winning_version
            out.winning_operation = e.winning_operation
        except Exception as e:  # noqa: BLE001 - reported as a failed job, the demo goes on
            out.status = "failed"
            out.exception = type(e).__name__
            out.message = str(e).splitlines()[0] if str(e) else repr(e)
        finally:
            out.ready_s = (time.monotonic() - self.t0) if ticket.arrived.is_set() else None
            out.ended_s = time.monotonic() - self.t0
            gate.detach()
            done.set()

    # -- output -----------------------------------------------------------------------
    def show_outcome(self, o: Outcome) -> None:
        if self.console is None:
            return
        flag = "" if o.as_expected else f"  [yellow](expected {o.expected})[/yellow]"
        if o.status == "committed":
            self.say(f"  [green]✔ {o.job}[/green] committed version {o.version} (read {o.read_version}){flag}")
        elif o.status == "no-op":
            self.say(f"  [green]✔ {o.job}[/green] had nothing to commit{flag}")
        elif o.status == "conflicted":
            winner = ""
            if o.winning_version is not None:
                winner = f" with version {o.winning_version} ({o.winning_operation})"
            self.say(f"  [red]✘ {o.job}[/red] [bold red]{o.exception}[/bold red]: conflicts{winner}{flag}")
            self.say(f"      {o.message}", markup=False)
            self.say(f"      Help: {o.help}", markup=False, style="dim")
        else:
            self.say(f"  [red]✘ {o.job} failed[/red]: {o.exception}: {o.message}{flag}", markup=False)
        if o.why:
            self.say(f"      why: {o.why}", style="italic", markup=False)

    def show_history(self, level: str) -> None:
        if self.console is None:
            return
        from rich.table import Table

        table = Table(title=f"DESCRIBE HISTORY events ({level})", title_justify="left", header_style="bold")
        for col in ("version", "operation", "read", "isolationLevel", "blind"):
            table.add_column(col, no_wrap=True)
        table.add_column("predicate / parameters", no_wrap=True, overflow="ellipsis", max_width=64)
        for r in reversed(self.report.history[level]):
            params = r["operationParameters"] or {}
            shown = params.get("predicate") or ", ".join(f"{k}={v}" for k, v in params.items())
            read = "" if r["readVersion"] is None else str(r["readVersion"])
            blind = str(bool(r["isBlindAppend"])).lower()
            table.add_row(str(r["version"]), r["operation"] or "", read, r["isolationLevel"] or "", blind, str(shown))
        self.say()
        self.console.print(table)

    # -- read isolation ---------------------------------------------------------------
    def show_reads(self, level: str) -> None:
        """SERIALIZABLE may serve a cached snapshot; STRICT SERIALIZABLE always sees the latest commit."""
        from serialake.core.tables.catalog import register

        path = self.report.tables[level]
        register("events", path, persist=False)
        self.say()
        self.say("[bold]Session read isolation[/bold] (SET TRANSACTION_ISOLATION)")
        self.sql("SET TRANSACTION_ISOLATION TO 'SERIALIZABLE'")
        before = self._count()
        _, version = copy_rows_from_another_process(path)  # another application appends
        stale = self._count()
        self.sql("SET TRANSACTION_ISOLATION TO 'STRICT SERIALIZABLE'")
        fresh = self._count()
        self.report.reads = [
            {"isolation": "SERIALIZABLE", "when": "before the append", "count": before},
            {"isolation": "SERIALIZABLE", "when": f"after another writer committed version {version}", "count": stale},
            {"isolation": "STRICT SERIALIZABLE", "when": "after that commit", "count": fresh},
        ]
        for r in self.report.reads:
            self.say(f"  {r['isolation']:<19} {r['when']:<45} SELECT count(*) = {r['count']}")
        self.say("  SERIALIZABLE served the session's cached snapshot (consistent, not the latest); "
                 "STRICT SERIALIZABLE refreshed to the latest commit first.", style="italic")  # fmt: skip

    def _count(self) -> int:
        row = self.sql("SELECT count(*) AS n FROM events").first()
        return int(row["n"]) if row is not None else 0

    # -- summary ----------------------------------------------------------------------
    def show_summary(self, levels: Sequence[str]) -> None:
        if self.console is None:
            return
        from rich.table import Table

        table = Table(title="Who committed, who conflicted", title_justify="left", header_style="bold")
        table.add_column("round")
        table.add_column("job")
        for level in levels:
            table.add_column(level)
        for rnd in ROUNDS:
            for job in rnd.jobs:
                cells = []
                for level in levels:
                    o = next((x for x in self.report.outcomes if x.level == level and x.job == job.name), None)
                    if o is None:
                        cells.append("")
                    elif o.status in ("committed", "no-op"):
                        cells.append(f"[green]✔ {_v(o.version)}[/green]")
                    else:
                        cells.append(f"[red]✘ {o.exception}[/red]")
                table.add_row(rnd.title.split(":")[0], job.name, *cells)
        self.say()
        self.console.print(table)


def _v(version: int | None) -> str:
    return "" if version is None else f"v{version}"


def _history(log: DeltaLog) -> list[dict[str, Any]]:
    return list(reversed(history_rows(log)))


def _spans(outcomes: Sequence[Outcome]) -> list[Span]:
    spans = []
    for o in outcomes:
        read = o.read_version if o.read_version is not None else 0
        if o.status == "committed" and o.version is not None:
            end, label = o.version, f"v{o.version} {o.operation or ''}".strip()
        elif o.status == "conflicted":
            end = o.winning_version if o.winning_version is not None else read + 1
            label = f"{o.exception} (with v{o.winning_version})"
        else:
            end, label = read, o.exception or o.status
        spans.append(Span(o.level, o.round.split(":")[0], o.job, read, end, o.status, label))
    return spans


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def run_demo(
    spark: SparkSession,
    directory: str,
    *,
    levels: Sequence[str] = LEVELS,
    console: Console | None = None,
    png: str | None = None,
    reads: bool = True,
) -> DemoReport:
    """Run the demo on tables under ``directory``; returns the report (printing when ``console``)."""
    from serialake.core.tables.catalog import unregister

    demo = _Demo(spark, directory, console)
    try:
        for level in levels:
            demo.run_level(level)
        if reads:
            demo.show_reads(levels[-1])
            demo.report.multi_table = show_consistent_reads(spark, directory, demo.say)
    finally:
        unregister("events", persist=False)
    demo.show_summary(levels)
    spans = _spans(demo.report.outcomes)
    if console is not None:
        console.print()
        console.print("[bold]Timeline[/bold] (each line: the version a transaction read → its commit, "
                      "or ✘ at the commit it conflicted with)")  # fmt: skip
        for line in render_text(spans):
            console.print(line, markup=False, highlight=False)
    png_path = png or os.path.join(directory, "timeline.png")
    title = "serialake demo: concurrent transactions per isolation level"
    demo.report.timeline_png = render_png(spans, png_path, title=title)
    demo.report.duration_s = time.monotonic() - demo.t0
    if console is not None:
        console.print(f"Timeline picture: {demo.report.timeline_png}")
        for level, path in demo.report.tables.items():
            console.print(f"Inspect the {level} table: serialake history {path}")
        verdict = "every outcome as expected"
        if not demo.report.ok:
            verdict = "[yellow]some outcomes differ from the expected ones[/yellow]"
        console.print(f"Done in {demo.report.duration_s:.0f}s: {verdict}.")
    return demo.report


def build_parser() -> argparse.ArgumentParser:
    """Options of ``serialake demo``."""
    p = argparse.ArgumentParser(prog="serialake demo", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--dir", default=None, help="where to create the tables (default: a new temporary directory)")
    p.add_argument("--levels", default=",".join(LEVELS),
                   help="isolation levels, comma-separated (default: WriteSerializable,Serializable)")  # fmt: skip
    p.add_argument("--png", default=None, help="where to write the timeline picture (default: <dir>/timeline.png)")
    p.add_argument("--no-reads", action="store_true", help="skip the session read-isolation example")
    p.add_argument("--json", action="store_true", help="print the report as JSON (no progress output)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``serialake demo``; exit code 0 when every outcome was the expected one."""
    args = build_parser().parse_args(argv)
    try:  # before Spark starts, not after the whole demo ran
        require("matplotlib", "serialake demo (the timeline picture)")
    except MissingExtraError as e:
        print(f"serialake demo: {e}", file=sys.stderr)
        return 1
    levels = []
    for name in (s.strip() for s in args.levels.split(",") if s.strip()):
        match = next((lv for lv in LEVELS if lv.lower() == name.lower()), None)
        if match is None:
            print(f"serialake demo: unknown level {name!r}; use {', '.join(LEVELS)}", file=sys.stderr)
            return 2
        levels.append(match)
    directory = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="serialake-demo-")
    os.makedirs(directory, exist_ok=True)
    console = None
    if not args.json:
        from rich.console import Console

        console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 120)
        console.print("[bold]serialake demo[/bold]: concurrent jobs on one Delta table, at each isolation level")
    from serialake.spark.session import spark_session

    if console is not None:
        with console.status("Starting Spark (local, 2 threads)...", spinner="dots"):
            spark = spark_session("serialake-demo")
    else:
        spark = spark_session("serialake-demo")
    report = run_demo(spark, directory, levels=levels, console=console, png=args.png, reads=not args.no_reads)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    return 0 if report.ok else 1
