"""The conflict matrix against delta-spark and against serialake: each engine alone, cell by cell.

Every cell of conflict-matrix.md sections 1, 3 and 4 is data here (:data:`CELLS`): a base
table (:class:`Layout`), two operations ``T`` and ``W`` written once in delta-spark's API (SQL
on ``delta.`path```, ``df.write.format("delta")``, ``DeltaTable``) with a Python model of
their effect on the rows, and the matrix's expected outcome at each isolation level, in the
matrix's order (W commits first, then T) and, where the pair is not symmetric, swapped (T
first, then W). Each engine builds each base table once per level and runs every cell on a
fresh copy of it, both operations planned from the same version:

- delta-spark (the peer, ``peer/worker.py``): the second committer is started with the
  commit gate (``submit_commit_gated``), the first runs to completion, then the gate opens;
- serialake (this process's session): the second committer runs, and just before its commit
  the first runs and commits (as ``tests/helpers.before_first_commit`` does).

An outcome is ``commits`` or the second committer's exception class, plus the final rows
check: the table's rows, read by the same engine, must be the rows of a serial order of the
committed operations (the Python models). Where the engines differ, the cell's note (data
next to the cell) says why. ``python -m peer.parity --out docs/parity.md`` writes the
document; ``tests/peer/test_parity.py`` checks serialake against the matrix and the
document against a fresh run.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peer.ops import (
    OPTIMIZE,
    Layout,
    Op,
    Row,
    append,
    base_row,
    before_first_commit,
    commit_hooks,
    delete,
    delta_spark_rows,
    first_write,
    insert_select,
    merge_all,
    merge_rows,
    merge_sql,
    merging,
    same,
    serialake_exec,
    serialake_rows,
    small_tables,
    small_tables_session,
    sql,
    update,
    upgrade,
)
from peer.plain import plain_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from peer.client import DeltaSparkPeer

__all__ = [
    "CELLS",
    "COMMITS",
    "CONFLICTS",
    "FAILS",
    "LAYOUTS",
    "LEVELS",
    "MATRIX_ORDER",
    "MAY_CONFLICT",
    "ORDERS",
    "SERIALIZABLE",
    "SWAPPED_ORDER",
    "WRITE_SERIALIZABLE",
    "Cell",
    "DeltaSparkEngine",
    "Expect",
    "Outcome",
    "Result",
    "SerialakeEngine",
    "main",
    "matches",
    "read_document",
    "render",
    "run_parity",
    "serial_outcomes",
]

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
LEVELS = (SERIALIZABLE, WRITE_SERIALIZABLE)

MATRIX_ORDER = "W, then T"  # the matrix's order: W commits between T's start and T's commit
SWAPPED_ORDER = "T, then W"  # the roles swapped: W is the transaction that commits second
ORDERS = (MATRIX_ORDER, SWAPPED_ORDER)

COMMITS = "commits"
FAILS = "fails"  # any conflict exception (R2: "the later one fails")
MAY_CONFLICT = "may conflict"  # commits or any conflict exception (R5)
CONFLICTS = frozenset(
    {
        "ConcurrentAppendException",
        "ConcurrentDeleteReadException",
        "ConcurrentDeleteDeleteException",
        "ConcurrentTransactionException",
        "MetadataChangedException",
        "ProtocolChangedException",
    }
)
CAE, CDRE, CDDE = "ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException"
CTE, MCE, PCE = "ConcurrentTransactionException", "MetadataChangedException", "ProtocolChangedException"


# -- tables ------------------------------------------------------------------------------------


def _add_x(n: int) -> Callable[[Row], Row]:
    return lambda r: r._replace(x=r.x + n)


def _same_key(t: Row, s: Row) -> bool:
    return t.id == s.id and t.p == s.p and t.c == s.c


OPTIMIZE_P1 = sql("OPTIMIZE {t} WHERE p = 1", same)
OPTIMIZE_P2 = sql("OPTIMIZE {t} WHERE p = 2", same)
ZORDER = sql("OPTIMIZE {t} ZORDER BY (x)", same)

U1 = Layout("U1", "unpartitioned, one file (ids 0-11)", (tuple(base_row(i) for i in range(12)),))
U2 = Layout(
    "U2",
    "unpartitioned, two files (ids 0-5, 6-11)",
    (tuple(base_row(i) for i in range(6)), tuple(base_row(i) for i in range(6, 12))),
)
P1 = Layout("P1", "partitioned by p (1, 2, 3), one file per partition", (U1.files[0],), ("p",))
P2 = Layout("P2", "partitioned by p (1, 2, 3), two files per partition", U2.files, ("p",))
PC = Layout("PC", "partitioned by p and c, one file per partition", (U1.files[0],), ("p", "c"))
DV = Layout(
    "DV",
    "unpartitioned, deletion vectors on, file F (ids 0-11) and file G (ids 12-17)",
    (tuple(base_row(i) for i in range(12)), tuple(base_row(i) for i in range(12, 18))),
    deletion_vectors=True,
)
PDV = Layout(
    "PDV",
    "partitioned by p (1, 2, 3), deletion vectors on, two files per partition",
    U2.files,
    ("p",),
    deletion_vectors=True,
)
EMPTY = Layout("EMPTY", "no table yet (an empty path)", ())
LAYOUTS = (U1, U2, P1, P2, PC, DV, PDV, EMPTY)


# -- cells -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """The matrix's outcome; ``derived`` when its row does not say it and section 2's rules do
    (another level, the swapped order, or the exception of a section-1 "can conflict")."""

    outcome: str
    derived: bool = False

    def text(self) -> str:
        return self.outcome + (" †" if self.derived else "")


def _levels(serializable: str, write_serializable: str | None = None, *, derived: str = "") -> dict[str, Expect]:
    """Expected per level; ``derived`` names the levels ("S", "WS", "S WS") not in the matrix's row."""
    ws = serializable if write_serializable is None else write_serializable
    return {
        SERIALIZABLE: Expect(serializable, "S" in derived.split()),
        WRITE_SERIALIZABLE: Expect(ws, "WS" in derived.split()),
    }


@dataclass(frozen=True)
class Cell:
    """One cell: T and W on ``layout``; ``expect`` in the matrix's order, ``swapped`` with the
    roles swapped (None: the pair is symmetric, run once). ``why`` says why delta-spark's
    outcome differs where it does (``why_swapped`` in the swapped order, when it differs
    there for another reason)."""

    section: str
    name: str
    layout: Layout
    t: Op
    w: Op
    expect: dict[str, Expect]
    swapped: dict[str, Expect] | None = None
    why: str = ""
    why_swapped: str | None = None

    def note(self, order: str) -> str:
        """Why delta-spark's outcome differs in ``order`` ("" when the cell has no note)."""
        if order == SWAPPED_ORDER and self.why_swapped is not None:
            return self.why_swapped
        return self.why

    def runs(self) -> Iterator[tuple[str, str]]:
        for level in LEVELS:
            yield level, MATRIX_ORDER
            if self.swapped is not None:
                yield level, SWAPPED_ORDER

    def expected(self, level: str, order: str) -> Expect:
        table = self.expect if order == MATRIX_ORDER else self.swapped
        assert table is not None
        return table[level]

    def first_second(self, order: str) -> tuple[Op, Op]:
        """The operation that commits first and the one that commits second (the checked one)."""
        return (self.w, self.t) if order == MATRIX_ORDER else (self.t, self.w)


WS_REFUSED = "delta-spark (OSS) accepts only `delta.isolationLevel = Serializable`."
OPTIMIZE_READS = (
    "delta-spark records a compaction's inputs as files it read, so OPTIMIZE losing to a commit "
    "that removed an input fails the read check (ConcurrentDeleteReadException) before rule 6's "
    "delete-delete check (ConcurrentDeleteDeleteException)."
)
COMPACTION_APPENDS = (
    "delta-spark counts a compaction's new files (dataChange=false) as appends matching the "
    "loser's read (ConcurrentAppendException); the matrix: compaction adds no rows, so the loser "
    "fails only when it rewrites a compacted file (ConcurrentDeleteDeleteException), and a mere "
    "read of one (15b) commits."
)
NO_ROW_LEVEL = (
    "delta-spark (OSS) has no row-level concurrency: the winner re-adds the file it marked rows "
    "in, and that file matches the loser's read of the unpartitioned table "
    "(ConcurrentAppendException); serialake resolves the two by rows, as section 4 says."
)
SAME_ROW = (
    "Both fail, as the matrix says; delta-spark at file level (the re-added file matches the "
    "read: ConcurrentAppendException), serialake by rows (the same row: "
    "ConcurrentDeleteDeleteException)."
)
DV_COMPACTION = (
    "delta-spark does not carry deletion vectors across a compaction: OPTIMIZE second finds its "
    "input re-added with a new vector (ConcurrentDeleteReadException), the DELETE second finds "
    "the compaction's new file (ConcurrentAppendException). serialake moves the DELETE's marks "
    "to the compacted file and both commit, as the matrix says."
)
PARTITIONED_ROW_LEVEL = (
    "serialake resolves partitioned tables with deletion vectors by rows too (issue #41: the "
    "matrix's closing paragraph kept them at file level; `delta.enableRowLevelConcurrency = false` "
    "still does), so both commit as in R1; delta-spark (OSS) has no row-level concurrency: the file "
    "the winner re-added with a new vector matches the loser's read (ConcurrentAppendException)."
)
ZORDER_CLASSES = (
    "The matrix allows either. delta-spark conflicts as for OPTIMIZE without deletion vectors (a "
    "compaction's inputs are reads and its new files appends); serialake finds the DELETE's row by its "
    "values in the z-ordered file (no row mapping there) and marks it there, so both commit."
)

S_WS = "S WS"

CELLS: tuple[Cell, ...] = (
    # -- section 1: operation pairs (file level, no deletion vectors) -------------------------
    Cell("1", "INSERT × INSERT", P1, append(Row(100, 1, "a", 0)), append(Row(101, 1, "a", 0)),
         _levels(COMMITS)),
    Cell("1", "DELETE × INSERT", U1, delete("x = 3", lambda r: r.x == 3), append(Row(100, 1, "a", 0)),
         _levels(CAE, COMMITS, derived="S"), _levels(COMMITS, derived=S_WS)),
    Cell("1", "MERGE × INSERT", U1,
         merge_rows([Row(4, 2, "a", 40)], "t.id = s.id", lambda t, s: t.id == s.id, insert=True),
         append(Row(100, 1, "a", 0)), _levels(CAE, COMMITS, derived="S"), _levels(COMMITS, derived=S_WS)),
    Cell("1", "UPDATE × INSERT, other partition", P1,
         update("x = x + 100", _add_x(100), "p = 1", lambda r: r.p == 1), append(Row(100, 2, "a", 0)),
         _levels(COMMITS), _levels(COMMITS, derived=S_WS)),
    Cell("1", "UPDATE × DELETE, same file", U1,
         update("x = x + 100", _add_x(100), "id = 1", lambda r: r.id == 1), delete("id = 2", lambda r: r.id == 2),
         _levels(CAE, derived=S_WS), _levels(CAE, derived=S_WS)),
    Cell("1", "MERGE × DELETE, other partitions", P1,
         merge_rows([Row(0, 1, "a", 50)], "t.id = s.id AND t.p = 1", lambda t, s: t.id == s.id and t.p == 1,
                    insert=False),
         delete("p = 2 AND x = 4", lambda r: r.p == 2 and r.x == 4), _levels(COMMITS), _levels(COMMITS, derived=S_WS)),
    Cell("1", "OPTIMIZE × INSERT", P2, OPTIMIZE_P1, append(Row(100, 1, "a", 0)),
         _levels(COMMITS), _levels(COMMITS)),
    Cell("1", "OPTIMIZE × MERGE, same files", U2, OPTIMIZE,
         merge_rows([Row(4, 2, "a", 40)], "t.id = s.id", lambda t, s: t.id == s.id, insert=False),
         _levels(CDDE, derived=S_WS), _levels(CDDE, derived=S_WS), why=OPTIMIZE_READS,
         why_swapped=COMPACTION_APPENDS),
    Cell("1", "OPTIMIZE × UPDATE, other partition", P2, OPTIMIZE_P1,
         update("x = x + 100", _add_x(100), "p = 2", lambda r: r.p == 2), _levels(COMMITS), _levels(COMMITS)),
    Cell("1", "OPTIMIZE × OPTIMIZE, same files", U2, OPTIMIZE, OPTIMIZE, _levels(CDDE, derived=S_WS),
         why=OPTIMIZE_READS),
    Cell("1", "OPTIMIZE × OPTIMIZE, other partitions", P2, OPTIMIZE_P1, OPTIMIZE_P2, _levels(COMMITS)),
    # -- section 3: scenarios -----------------------------------------------------------------
    Cell("3", "1", U1, append(Row(100, 1, "a", 0)), append(Row(101, 1, "a", 0)), _levels(COMMITS)),
    Cell("3", "2", U1, append(Row(100, 1, "a", 0)),
         update("x = x + 100", _add_x(100), "id = 1", lambda r: r.id == 1),
         _levels(COMMITS), _levels(CAE, COMMITS, derived=S_WS)),
    Cell("3", "3", U1,
         insert_select("id + 100, p, c, x", lambda r: r._replace(id=r.id + 100), "id = 0", lambda r: r.id == 0),
         append(Row(200, 1, "a", 0)), _levels(CAE, COMMITS, derived="WS"), _levels(COMMITS, derived=S_WS)),
    Cell("3", "4", U1, update("x = x + 100", _add_x(100), "x = 3", lambda r: r.x == 3), append(Row(100, 1, "a", 0)),
         _levels(CAE, COMMITS, derived="S"), _levels(COMMITS, derived=S_WS)),
    Cell("3", "5", U2, delete("x = 3", lambda r: r.x == 3),
         update("x = x + 100", _add_x(100), "id = 8", lambda r: r.id == 8),
         _levels(CAE, derived="S"), _levels(CAE, derived=S_WS)),
    Cell("3", "6", P1, append(Row(100, 1, "a", 0)),
         sql("ALTER TABLE {t} SET TBLPROPERTIES ('parity.owner' = 'w')", same),
         _levels(MCE), _levels(COMMITS, derived=S_WS)),
    Cell("3", "7", P1, update("p = 2", lambda r: r._replace(p=2), "p = 3", lambda r: r.p == 3),
         insert_select("id + 100, p, c, x", lambda r: r._replace(id=r.id + 100), "p = 1", lambda r: r.p == 1),
         _levels(COMMITS), _levels(COMMITS, derived=S_WS)),
    Cell("3", "8", P1,
         insert_select("id + 100, 2, c, x", lambda r: r._replace(id=r.id + 100, p=2), "p = 1", lambda r: r.p == 1),
         append(Row(200, 1, "a", 0)), _levels(CAE, COMMITS, derived="WS"), _levels(COMMITS, derived=S_WS)),
    Cell("3", "9", P1,
         sql(merge_sql([Row(300, 4, "a", 0)], "t.id = s.id AND t.p >= 4", update_set=None, insert=True),
             merging([Row(300, 4, "a", 0)], lambda t, s: t.id == s.id and t.p >= 4, None, True)),
         append(Row(200, 5, "a", 0)), _levels(CAE, COMMITS, derived="WS"), _levels(COMMITS, derived=S_WS)),
    Cell("3", "10", P1, delete("p = 1 OR x > 100", lambda r: r.p == 1 or r.x > 100), append(Row(200, 2, "a", 0)),
         _levels(CAE, COMMITS, derived="WS"), _levels(COMMITS, derived=S_WS)),
    Cell("3", "11", P1,
         insert_select("id + 100, 2, c, x", lambda r: r._replace(id=r.id + 100, p=2), "p = 1", lambda r: r.p == 1),
         delete("p = 1", lambda r: r.p == 1), _levels(CDRE), _levels(COMMITS, derived=S_WS)),
    Cell("3", "12", P1,
         insert_select("id + 100, 3, c, x", lambda r: r._replace(id=r.id + 100, p=3), "p = 1", lambda r: r.p == 1),
         delete("p = 2", lambda r: r.p == 2), _levels(COMMITS), _levels(COMMITS, derived=S_WS)),
    Cell("3", "13", P1, update("x = x + 100", _add_x(100), "p = 1", lambda r: r.p == 1),
         delete("p = 1", lambda r: r.p == 1), _levels(CDRE), _levels(CAE, derived=S_WS)),
    Cell("3", "14", U2, OPTIMIZE, delete("id = 3", lambda r: r.id == 3), _levels(CDDE), _levels(CDDE, derived=S_WS),
         why=OPTIMIZE_READS, why_swapped=COMPACTION_APPENDS),
    Cell("3", "15", U2, update("x = x + 100", _add_x(100), "id = 1", lambda r: r.id == 1), OPTIMIZE,
         _levels(CDDE), _levels(CDDE, derived=S_WS), why=COMPACTION_APPENDS,
         why_swapped=OPTIMIZE_READS),
    Cell("3", "15b", P2,
         insert_select("id + 100, 3, c, x", lambda r: r._replace(id=r.id + 100, p=3), "p = 1", lambda r: r.p == 1),
         OPTIMIZE_P1, _levels(COMMITS), _levels(COMMITS, derived=S_WS), why=COMPACTION_APPENDS),
    Cell("3", "16", U2, OPTIMIZE, append(Row(100, 1, "a", 0)), _levels(COMMITS), _levels(COMMITS, derived=S_WS)),
    Cell("3", "17", U1, append(Row(100, 1, "a", 0), app=("app1", 5)), append(Row(101, 1, "a", 0), app=("app1", 5)),
         _levels(CTE)),
    Cell("3", "18", U1, append(Row(100, 1, "a", 0), app=("app1", 5)), append(Row(101, 1, "a", 0), app=("app2", 5)),
         _levels(COMMITS)),
    Cell("3", "19", U1, upgrade(1, 4), upgrade(1, 3), _levels(PCE), _levels(PCE, derived=S_WS)),
    Cell("3", "20", EMPTY, first_write(Row(1, 1, "a", 1)), first_write(Row(2, 2, "b", 2)), _levels(PCE)),
    Cell("3", "21", P1, delete("p < 2", lambda r: r.p < 2),
         update("x = x + 100", _add_x(100), "p > 2", lambda r: r.p > 2),
         _levels(COMMITS, derived="WS"), _levels(COMMITS, derived=S_WS)),
    Cell("3", "22", U1, delete("p < 2", lambda r: r.p < 2),
         update("x = x + 100", _add_x(100), "p > 2", lambda r: r.p > 2), _levels(CAE), _levels(CAE, derived=S_WS)),
    Cell("3", "23", PC,
         merge_all([Row(0, 1, "a", 50), Row(500, 1, "a", 5)],
                   "s.id = t.id AND s.p = t.p AND s.c = t.c AND t.p = 1 AND t.c = 'a'", _same_key),
         merge_all([Row(1, 2, "b", 51), Row(501, 2, "b", 5)],
                   "s.id = t.id AND s.p = t.p AND s.c = t.c AND t.p = 2 AND t.c = 'b'", _same_key),
         _levels(COMMITS)),
    Cell("3", "24", PC,
         merge_all([Row(0, 1, "a", 50), Row(500, 1, "a", 5)], "s.id = t.id AND s.p = t.p AND s.c = t.c", _same_key),
         merge_all([Row(1, 2, "b", 51), Row(501, 2, "b", 5)],
                   "s.id = t.id AND s.p = t.p AND s.c = t.c AND t.p = 2 AND t.c = 'b'", _same_key),
         _levels(CAE), _levels(COMMITS, derived=S_WS)),
    # -- section 4: row-level concurrency (deletion vectors, unpartitioned) -------------------
    Cell("4", "R1", DV, delete("id = 5", lambda r: r.id == 5), delete("id = 9", lambda r: r.id == 9),
         _levels(COMMITS), why=NO_ROW_LEVEL),
    Cell("4", "R2", DV, update("x = -1", lambda r: r._replace(x=-1), "id = 5", lambda r: r.id == 5),
         delete("id = 5", lambda r: r.id == 5), _levels(FAILS), _levels(FAILS), why=SAME_ROW),
    Cell("4", "R3", DV, update("x = -1", lambda r: r._replace(x=-1), "id = 5", lambda r: r.id == 5),
         append(Row(100, 1, "a", 0)), _levels(COMMITS, derived="S"), _levels(COMMITS, derived=S_WS),
         why=NO_ROW_LEVEL),
    Cell("4", "R4", DV, OPTIMIZE, delete("id = 7", lambda r: r.id == 7), _levels(COMMITS), _levels(COMMITS),
         why=DV_COMPACTION),
    Cell("4", "R5", DV, ZORDER, delete("id = 7", lambda r: r.id == 7), _levels(MAY_CONFLICT),
         _levels(MAY_CONFLICT), why=ZORDER_CLASSES),
    Cell("4", "R6", DV,
         merge_rows([Row(2, 3, "a", 20), Row(3, 1, "b", 30)], "t.id = s.id", lambda t, s: t.id == s.id, insert=False),
         update("x = -1", lambda r: r._replace(x=-1), "id = 4", lambda r: r.id == 4), _levels(COMMITS),
         _levels(COMMITS), why=NO_ROW_LEVEL),
    # the section's last paragraph said partitioned tables keep file-level rules; since issue #41
    # they get row-level resolution by default (derived: R1's outcome), OPTIMIZE as before
    Cell("4", "R1 (partitioned)", PDV, delete("id = 0", lambda r: r.id == 0), delete("id = 3", lambda r: r.id == 3),
         _levels(COMMITS, derived=S_WS), why=PARTITIONED_ROW_LEVEL),
    Cell("4", "R4 (partitioned)", PDV, OPTIMIZE_P1, delete("id = 3", lambda r: r.id == 3), _levels(COMMITS),
         _levels(COMMITS), why=DV_COMPACTION),
)  # fmt: skip


# -- outcomes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the second committer did (``commits``, an exception class, ``refused: ...``,
    ``error: ...``) and whether the final rows are those of a serial order."""

    result: str
    rows_ok: bool | None  # None: no rows to check (the cell could not run)
    detail: str = ""

    def text(self) -> str:
        if self.rows_ok is None:
            return self.result
        return f"{self.result} · rows {'✓' if self.rows_ok else '✗'}"


@dataclass(frozen=True)
class Result:
    cell: Cell
    level: str
    order: str
    delta_spark: Outcome
    serialake: Outcome

    @property
    def expected(self) -> Expect:
        return self.cell.expected(self.level, self.order)

    @property
    def differ(self) -> bool:
        return self.delta_spark.text() != self.serialake.text()

    def why(self) -> str:
        if not self.differ:
            return ""
        if self.delta_spark.result.startswith("refused"):
            return WS_REFUSED
        return self.cell.note(self.order) or "(no note: an unexplained difference)"


def matches(expected: Expect, outcome: Outcome) -> bool:
    """Whether ``outcome`` is the matrix's ``expected`` (rows a serial outcome included)."""
    if not outcome.rows_ok:
        return False
    if expected.outcome == MAY_CONFLICT:
        return outcome.result == COMMITS or outcome.result in CONFLICTS
    if expected.outcome == FAILS:
        return outcome.result in CONFLICTS
    return outcome.result == expected.outcome


def serial_outcomes(cell: Cell, order: str, second_committed: bool) -> list[list[list[Any]]]:
    """The rows of every serial order of what committed (as ``plain_rows``)."""
    first, second = cell.first_second(order)
    base = cell.layout.rows
    if not second_committed:
        return [plain_rows(first.model(base))]
    return [plain_rows(second.model(first.model(base))), plain_rows(first.model(second.model(base)))]


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- the engines -------------------------------------------------------------------------------


class _Engine:
    """Builds the base tables, runs cells on copies of them."""

    name = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.templates: dict[tuple[str, str], Path | str] = {}  # (layout, level) -> path or refusal
        self._building: dict[tuple[str, str], threading.Lock] = {}
        self._count = itertools.count(1)  # (next() on it is atomic: runs share an engine)

    def template(self, layout: Layout, level: str) -> Path | str:
        key = (layout.name, level)
        with self._building.setdefault(key, threading.Lock()):  # (setdefault is atomic)
            return self._template(layout, level, key)

    def _template(self, layout: Layout, level: str, key: tuple[str, str]) -> Path | str:
        if key not in self.templates:
            path = self.workdir / "templates" / f"{layout.name}-{level}"
            if not layout.files:
                self.templates[key] = path  # an empty path: nothing to build
            else:
                self.templates[key] = self.build(layout, level, path)
        return self.templates[key]

    def fresh(self, cell: Cell, level: str) -> tuple[Path | None, str]:
        """A fresh copy of the cell's base table (its path), or why there is none."""
        template = self.template(cell.layout, level)
        if isinstance(template, str):
            return None, template
        path = self.workdir / "runs" / f"{next(self._count):03d}"
        if cell.layout.files:
            shutil.copytree(template, path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        return path, ""

    def run(self, cell: Cell, level: str, order: str) -> Outcome:
        path, refusal = self.fresh(cell, level)
        if path is None:
            return Outcome(refusal, None)
        first, second = cell.first_second(order)
        args = {"level": level}
        result = self.race(str(path), first, second, args)
        if result.startswith(("error", "refused")):
            return Outcome(result, None)
        try:
            rows = self.rows(str(path))
        except Exception as e:  # noqa: BLE001 - recorded as the cell's outcome
            return Outcome(result, False, f"rows unreadable: {_first_line(str(e))}")
        ok = rows in serial_outcomes(cell, order, result == COMMITS)
        return Outcome(result, ok, "" if ok else f"rows {rows}")

    def build(self, layout: Layout, level: str, path: Path) -> Path | str:
        raise NotImplementedError

    def race(self, path: str, first: Op, second: Op, args: dict[str, Any]) -> str:
        raise NotImplementedError

    def rows(self, path: str) -> list[list[Any]]:
        raise NotImplementedError


def _refusal(type_name: str, message: str) -> str:
    return f"refused: {type_name}: {_first_line(message)}"


class DeltaSparkEngine(_Engine):
    """delta-spark alone, through the peer (its own JVM); the second committer waits at the
    commit gate while the first commits."""

    name = "delta-spark"

    def __init__(self, peer: DeltaSparkPeer, workdir: Path) -> None:
        super().__init__(workdir)
        self.peer = peer

    def build(self, layout: Layout, level: str, path: Path) -> Path | str:
        from peer.client import PeerError

        try:
            self.peer.run(small_tables(layout.build_code(str(path), level)))
        except PeerError as e:
            return _refusal(e.type, _isolation_message(e.message))
        return path

    def race(self, path: str, first: Op, second: Op, args: dict[str, Any]) -> str:
        from peer.client import PeerError

        gate = Path(path + ".gate")
        try:
            pending = self.peer.submit_commit_gated(small_tables(second.code(path), own_session=False), path, gate,
                                                    **args)  # fmt: skip
        except PeerError as e:
            if "isolationLevel" in e.message:
                return _refusal(e.type, _isolation_message(e.message))
            return f"error: {e.type} before its commit: {_first_line(e.message)}"
        except RuntimeError as e:
            return f"error: {_first_line(str(e))}"
        try:
            self.peer.run(small_tables(first.code(path)), timeout=120, **args)
        except Exception as e:  # noqa: BLE001 - recorded as the cell's outcome
            self.peer.release(gate)
            _settle(pending)
            name, message = (e.type, e.message) if isinstance(e, PeerError) else (type(e).__name__, str(e))
            return f"error: the first committer failed: {name}: {_first_line(message)}"
        self.peer.release(gate)
        try:
            pending.result(timeout=120)
        except PeerError as e:
            return e.type
        return COMMITS

    def rows(self, path: str) -> list[list[Any]]:
        return delta_spark_rows(self.peer, path)


def _isolation_message(message: str) -> str:
    """delta-spark's refusal, without the JVM's wrapping (``UNSUPPORTED_TABLE_CHANGE`` ...)."""
    marker = "requirement failed:"
    if marker in message:
        return message[message.index(marker) :].splitlines()[0].split(" SQLSTATE")[0]
    return message


def _settle(pending: Future[Any]) -> None:
    try:
        pending.result(timeout=300)
    except Exception:  # noqa: BLE001 - its outcome no longer matters
        pass


class SerialakeEngine(_Engine):
    """serialake alone, in this process's session; the first committer runs inside the second's
    commit (after it planned and wrote its files)."""

    name = "serialake"

    def __init__(self, spark: SparkSession, workdir: Path) -> None:
        super().__init__(workdir)
        self.spark = spark

    def _exec(self, code: str, args: dict[str, Any] | None = None) -> None:
        serialake_exec(self.spark, code, **(args or {}))

    def build(self, layout: Layout, level: str, path: Path) -> Path | str:
        self._exec(layout.build_code(str(path), level))
        return path

    def race(self, path: str, first: Op, second: Op, args: dict[str, Any]) -> str:
        from serialake.exceptions import DeltaConcurrentModificationException

        failed: list[BaseException] = []

        def run_first() -> None:
            # On a thread of its own: inside an operation, serialake's drop-in leaves this
            # thread's Spark calls to Spark (a nested `spark.sql("DELETE ...")` would not be ours).
            def body() -> None:
                try:
                    self._exec(first.code(path), args)
                except BaseException as e:  # noqa: BLE001 - reported as the cell's error
                    failed.append(e)

            thread = threading.Thread(target=body, name="parity-first-committer")
            thread.start()
            thread.join()
            if failed:
                raise failed[0]

        try:
            with before_first_commit(run_first) as fired:
                self._exec(second.code(path), args)
        except DeltaConcurrentModificationException as e:
            if failed:
                return f"error: the first committer failed: {type(e).__name__}: {_first_line(str(e))}"
            return type(e).__name__
        except Exception as e:  # noqa: BLE001 - recorded as the cell's outcome
            who = "the first committer" if failed else "the second committer"
            return f"error: {who} failed: {type(e).__name__}: {_first_line(str(e))}"
        if not fired:
            return "error: the second committer made no commit"
        return COMMITS

    def rows(self, path: str) -> list[list[Any]]:
        return serialake_rows(self.spark, path)


# -- the run -----------------------------------------------------------------------------------


def run_parity(
    spark: SparkSession,
    peer: DeltaSparkPeer,
    workdir: str | Path,
    cells: Sequence[Cell] = CELLS,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Every run of ``cells`` on both engines (delta-spark's in a thread, at the same time)."""
    workdir = Path(workdir)
    runs = [(cell, level, order) for cell in cells for level, order in cell.runs()]
    delta = DeltaSparkEngine(peer, workdir / "delta-spark")
    ours = SerialakeEngine(spark, workdir / "serialake")
    theirs: dict[int, Outcome] = {}

    def report(engine: str, run: tuple[Cell, str, str], outcome: Outcome, started: float) -> None:
        if progress is not None:
            cell, level, order = run
            progress(f"{time.monotonic() - started:5.1f} s {engine} {cell.section}/{cell.name} {level} {order}: "
                     f"{outcome.text()} {outcome.detail}")  # fmt: skip

    # DELTA_SPARK_JOBS runs at once: the peer answers requests in threads of its own.
    pending = list(enumerate(runs))
    lock = threading.Lock()

    def run_delta_spark() -> None:
        while True:
            with lock:
                if not pending:
                    return
                i, run = pending.pop(0)
            started = time.monotonic()
            try:
                theirs[i] = delta.run(*run)
            except Exception as e:  # noqa: BLE001 - recorded as the cell's outcome
                theirs[i] = Outcome(f"error: {type(e).__name__}: {_first_line(str(e))}", None)
            report("delta-spark", run, theirs[i], started)

    threads = [threading.Thread(target=run_delta_spark, name=f"parity-delta-spark-{n}", daemon=True)
               for n in range(DELTA_SPARK_JOBS)]  # fmt: skip
    for thread in threads:
        thread.start()
    results = []
    try:
        with commit_hooks(), small_tables_session(spark):
            for run in runs:
                started = time.monotonic()
                mine = ours.run(*run)
                report("serialake", run, mine, started)
                results.append((*run, mine))
    except BaseException:
        with lock:
            pending.clear()  # delta-spark's threads take no more runs
        raise
    finally:
        for thread in threads:
            thread.join()
    return [Result(c, lv, o, theirs[i], m) for i, (c, lv, o, m) in enumerate(results)]


#: delta-spark runs at once (its peer runs each request in a thread).
DELTA_SPARK_JOBS = 2

SECTIONS = {
    "1": "1. Operation pairs (file level, no deletion vectors)",
    "3": "3. Scenarios",
    "4": "4. Row-level concurrency (deletion vectors, unpartitioned)",
}


def render(results: Sequence[Result], versions: dict[str, str] | None = None) -> str:
    """docs/parity.md: the header, then per section the cells' definitions and the table."""
    versions = versions or {}
    agree = sum(not r.differ for r in results)
    lines = [
        "# Parity: the conflict matrix on delta-spark and on serialake",
        "",
        "Generated by `python -m peer.parity --out docs/parity.md` (`peer/parity.py`: the cells, their",
        "expected outcomes and the notes are data there); `tests/peer/test_parity.py` fails when this",
        "file no longer matches a fresh run, or when serialake's outcome is not the matrix's.",
        "",
        f"Engines: delta-spark {versions.get('delta', '?')} (Spark {versions.get('spark', '?')}, its own JVM, "
        "`peer/worker.py`) and serialake, each alone on its own tables.",
        "Each cell starts two operations from one version of a fresh small table; one commits first,",
        "then the other (the one whose outcome is shown): `W, then T` is the matrix's order (T is its",
        "loser), `T, then W` the roles swapped. delta-spark's second committer waits at the commit gate",
        "(`peer/java`); serialake's runs the first inside its commit (`before_first_commit`).",
        "",
        "An outcome is `commits` or the second committer's exception, then the rows check: ✓ when the",
        "table's rows, read by the same engine, are those of a serial order of the committed operations",
        "(a Python model of each operation). Expected outcomes marked † are not written in the matrix's",
        "row but follow from its section 2 (another level, the swapped order, or the exception that",
        'a section-1 "can conflict" raises).',
        "",
        f"{agree} of {len(results)} runs agree.",
        "",
    ]
    for section, title in SECTIONS.items():
        rows = [r for r in results if r.cell.section == section]
        if not rows:
            continue
        lines += [f"## {title}", ""]
        seen: list[Cell] = []
        for r in rows:
            if r.cell not in seen:
                seen.append(r.cell)
        for cell in seen:
            lines.append(
                f"- **{cell.name}** on {cell.layout.name} ({cell.layout.description}): "
                f"T = `{cell.t.label}`; W = `{cell.w.label}`"
            )
        lines += [
            "",
            "| cell | level | order | expected (matrix) | delta-spark | serialake | why they differ |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            cells = [
                r.cell.name,
                r.level,
                r.order,
                r.expected.text(),
                r.delta_spark.text(),
                r.serialake.text(),
                r.why(),
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def read_document(text: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    """The outcomes in a document ``render`` wrote: (cell, level, order) -> (delta-spark's
    outcome, serialake's), each without its rows check (``commits``, an exception class, ...)."""
    found = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split(" | ")]
        if len(parts) == 7 and parts[1] in LEVELS and parts[2] in ORDERS:
            found[(parts[0], parts[1], parts[2])] = (parts[4].split(" · ")[0], parts[5].split(" · ")[0])
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m peer.parity", description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the document here (default: standard output)")
    parser.add_argument("--only", nargs="*", help="run only these cells (by name)")
    parser.add_argument("--verbose", action="store_true", help="print each serialake run as it ends")
    options = parser.parse_args(argv)

    import serialake
    from peer.client import DeltaSparkPeer

    started = time.monotonic()
    spark = serialake.spark_session("serialake-parity")
    cells = [c for c in CELLS if not options.only or c.name in options.only]
    with DeltaSparkPeer() as peer, tempfile.TemporaryDirectory(prefix="parity-") as workdir:
        progress = (lambda line: print(line, file=sys.stderr)) if options.verbose else None
        results = run_parity(spark, peer, workdir, cells, progress)
        text = render(results, peer.versions)
    if options.out:
        Path(options.out).write_text(text)
    else:
        sys.stdout.write(text)
    wrong = [r for r in results if not matches(r.expected, r.serialake)]
    print(
        f"{len(results)} runs, {sum(not r.differ for r in results)} agree; serialake off the matrix in "
        f"{len(wrong)}; {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    for r in wrong:
        print(f"  {r.cell.section}/{r.cell.name} {r.level} {r.order}: {r.serialake} (expected "
              f"{r.expected.text()})", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
