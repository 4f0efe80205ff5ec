"""Scans of serialake tables inside DataFrames: which table, version and rows a DataFrame reads.

Every DataFrame serialake hands out over a table (``read``, ``DeltaTable.toDF``, the tables
of a SQL query) carries a marker in its plan: a ``SubqueryAlias`` over the rows read, named
``__serialake_scan__<base64 JSON>`` with the table path, the version, the file filter and
whether the read was a time-travel read (``mark``). A DataFrame built from it by any means
(filters, joins, unions, temp views, SQL subqueries) keeps the marker in its analyzed plan.

When a DataFrame feeds a write (an append, an overwrite, a MERGE source), ``record_scans``
finds every marked scan in its plan and records it in the write's transaction:

- a scan of the write's own table at its latest version is a read of that table
  (``txn.record_read``): its predicate is the scan's filter AND every filter Spark applies
  to the scan's rows on their way up the plan (through projections, filters, inner joins,
  the null-extended side of outer joins, unions, sorts, DISTINCT); a filter above
  anything that lets other rows change the result (aggregates, windows, limits,
  deduplication) is not used, so the read only ever gets wider. A scan taken before the
  transaction started is a read at that older version: conflict checks run from there;
- a time-travel scan (``versionAsOf``, ``VERSION AS OF``) and a scan of another table read
  history that cannot change: recorded as the version read (``commitInfo``). Scans of
  other tables at their latest versions, made by separate reads, must have held together
  at one instant (``core.cut.check_together``), else the write is refused.

Reads that leave Spark's plan (``collect()`` then ``createDataFrame``, ``localCheckpoint``,
RDD round trips) carry no marker and cannot be tracked.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from serialake.core.predicates import expressions as P
from serialake.core.tables import cut
from serialake.exceptions import ConsistentReadError
from serialake.spark.backend import ScanConjunct, backend

if TYPE_CHECKING:
    from serialake.core.log.snapshot import Snapshot
    from serialake.core.txn.transaction import OptimisticTransaction

__all__ = ["SCAN_PREFIX", "TableScan", "check_consistent", "mark", "record_scans", "scans_of"]

SCAN_PREFIX = "__serialake_scan__"

@dataclass(frozen=True)
class TableScan:
    """One scan of a table in a DataFrame's plan: the version read and what of it can matter."""

    table: str
    version: int
    predicate: P.Expr  # TRUE when every row can matter
    time_travel: bool

    @property
    def predicate_sql(self) -> str:
        return P.to_sql(self.predicate)


def mark(df: DataFrame, snapshot: Snapshot, *, filter: str | None = None, time_travel: bool = False) -> DataFrame:  # noqa: A002
    """``df`` (the rows of ``snapshot`` matching ``filter``) with its scan marker."""
    info = {"t": snapshot.table_path, "v": snapshot.version, "f": filter, "tt": bool(time_travel)}
    token = base64.urlsafe_b64encode(json.dumps(info, separators=(",", ":")).encode()).decode().rstrip("=")
    return df.alias(SCAN_PREFIX + token)


def _unmark(name: str) -> dict[str, Any] | None:
    token = name[len(SCAN_PREFIX) :]
    try:
        info = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except ValueError:
        return None
    return info if isinstance(info, dict) and "t" in info and "v" in info else None


def scans_of(df: DataFrame) -> list[TableScan]:
    """Every marked scan in ``df``'s analyzed plan, subqueries and views included."""
    found = backend(df.sparkSession).marked_relations(df, SCAN_PREFIX, lambda name: _unmark(name) is not None)
    out: list[TableScan] = []
    for relation in found:
        info = _unmark(relation.name)
        if info is not None:
            out.append(_scan(info, relation.conjuncts))
    return out


def record_scans(txn: OptimisticTransaction, df: DataFrame) -> list[TableScan]:
    """Record in ``txn`` what ``df`` reads (see the module docstring); the scans found.

    The other tables ``df`` reads at their latest versions must have held those versions
    together at one instant (``check_consistent``); the write's own table is checked by
    the transaction's conflict rules from the version read.
    """
    found = scans_of(df)
    check_consistent(found, exclude=txn.table_path, what=f"The DataFrame written to {txn.table_path}")
    for scan in found:
        if scan.table == txn.table_path and not scan.time_travel and txn.snapshot is not None:
            txn.record_read([scan.predicate], version=scan.version)
        else:
            txn.record_table_read(scan.table, scan.version)
    return found


def check_consistent(found: list[TableScan], *, exclude: str | None = None, what: str = "") -> None:
    """Refuse latest-version scans of several tables whose versions never held together.

    Time-travel scans read history on purpose and are left out, as is ``exclude``.
    """
    latest: dict[str, int] = {}
    for scan in found:
        if scan.time_travel or scan.table == exclude:
            continue
        if latest.get(scan.table, scan.version) != scan.version:
            raise ConsistentReadError(
                f"{what or 'This DataFrame'} reads table {scan.table} at two versions ({latest[scan.table]} and "
                f"{scan.version}), from reads made at different moments: read it once and reuse the DataFrame."
            )
        latest[scan.table] = scan.version
    cut.check_together(latest, what=what)


def _scan(info: dict[str, Any], constraints: Sequence[ScanConjunct]) -> TableScan:
    """The scan a marker names, with the constraints (Spark's, over its columns only) on its rows."""
    exprs: list[P.Expr] = []
    if info.get("f"):
        try:
            exprs.append(P.parse_predicate(info["f"]))
        except P.PredicateError:
            pass  # dropping a conjunct only widens the read
    for c in constraints:
        converted = _to_predicate(c)
        if converted is not None:
            exprs.append(converted)
    # A filter pushed into the scan (``read.pushed_filter``) is also in the plan: count it once.
    unique: list[P.Expr] = []
    for part in P.split_conjuncts(P.conjunction(exprs)):
        if part not in unique:
            unique.append(part)
    return TableScan(str(info["t"]), int(info["v"]), P.conjunction(unique), bool(info.get("tt")))


def _to_predicate(conjunct: ScanConjunct) -> P.Expr | None:
    """A conjunct over the scan's columns only, as a predicate on table columns (None: not usable).

    Columns are tied to the scan by Spark (``ScanConjunct.names``), whatever they are called or
    qualified as where the filter is; the text is Spark's SQL of the conjunct.
    """
    from sqlglot import exp, parse_one
    from sqlglot.errors import SqlglotError

    names = conjunct.names
    try:
        tree = parse_one(conjunct.sql, read="spark")
    except SqlglotError:
        return None
    unknown: list[str] = []

    def unqualify(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Column):
            return node
        name = names.get(tuple(p.name.lower() for p in node.parts))
        if name is None:
            unknown.append(node.sql())  # a struct field, or a name we cannot tie to a table column
            return node
        return exp.column(name, quoted=True)

    tree = tree.transform(unqualify)
    if unknown:
        return None
    try:
        return P.from_sqlglot(tree)
    except (P.PredicateError, ValueError, TypeError):
        return None
