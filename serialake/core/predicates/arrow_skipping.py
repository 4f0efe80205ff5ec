"""Vectorized data skipping: ``skipping.compile_predicate`` over an Arrow table of add actions.

The table has the columns of the checkpoint's ``add`` struct (``path``, ``partitionValues``,
``size``, ``modificationTime``, ``dataChange``, ``stats``, ``tags``, ``deletionVector``, ...):
a checkpoint's ``add`` column flattened (``pa.Table.from_struct_array``), possibly with
``stats_parsed``, or the later commits' adds made into such a table by the log
(``log.files_arrow.files_table``).

``compile_arrow(expr, schema, partition_columns)`` returns an ``ArrowMatcher``; calling it on
such a table gives a ``pa.BooleanArray`` (one value per row, never null) equal, row for row, to
``skipping.compile_predicate(expr, schema, partition_columns)(pv, stats)`` with ``(pv, stats) =
reference_inputs(table)[i]``. For a table from ``files_table`` (or any table without
``stats_parsed``) that is ``(f.partition_values or {}, f.parsed_stats())`` of the i-th file, so
filtering the table selects exactly the files the per-file matcher selects.

How, and where it falls back to the per-file matcher (correctness first):

- Subtrees that read no stats column (partition columns, literals, ``Unknown``) are evaluated by
  the per-file code itself, once per distinct combination of the partition value strings they
  read (pulled out of the ``partitionValues`` map with the same exact-then-case-insensitive
  lookup); a row whose map holds two keys matching one column is done per file.
- AND / OR / NOT combine per-row bit masks of possible results (TRUE / FALSE / NULL) with the
  same Kleene tables.
- A stats column compared with a constant (``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``,
  ``<=>``, IN lists, string literals cast to the column's type, dates against timestamps),
  ``IS [NOT] NULL``, a boolean column as a predicate and ``LIKE`` are computed on Arrow
  arrays of per-file bounds: the constant becomes the least value of the bounds' type that is
  >= it and the least that is > it, so each comparison is one Arrow comparison with exactly
  Python's (mixed int / float / Decimal) semantics.
- Stats JSON is read by ``pyarrow.json`` in one pass, with an explicit schema holding only
  ``numRecords`` and the referenced columns. Rows whose text the Arrow reader might read
  differently from ``json.loads`` are done per file: not ``{...}``, line breaks, ``NaN`` /
  ``Inf``, escapes that could spell a column name, keys matching a column name only
  case-insensitively, numbers out of the exactly handled range, rows the reader rejects (found
  by bisection), timestamps whose widened max would overflow.
- ``stats_parsed`` (a struct, as Delta writes with ``delta.checkpoint.writeStatsAsStruct``) is
  read directly when rows use it (see ``compile_arrow``'s ``stats_parsed``).
- Comparisons between two columns where one is a stats column, and literals of unexpected
  Python types, are evaluated per file for that leaf only. Anything the per-file code raises
  for is redone per file for the whole table, so it raises exactly when the per-file loop
  raises. A NaN constant compares with no bound (Spark orders NaN above every number): both
  evaluators give TRUE or FALSE for a file with values, whatever its bounds.
- A ``SkipCache`` passed with an immutable table (a checkpoint's rows) keeps the partition
  value codes and stats bounds one predicate computed, for the next predicate over the table.

The parts, each in its module: ``arrow_inputs`` (each row's per-file inputs, the reference;
small Arrow helpers), ``stats_json`` (stats JSON read with ``pyarrow.json``, dates parsed with
numpy), ``arrow_columns`` (the columns read, per-row bounds), ``arrow_context`` (what a plan
reads from one table: partition value codes, bounds, rows done per file), ``arrow_plan`` (the
plan nodes), ``arrow_thresholds`` (a constant as bound values: mixed-type arithmetic). This
module compiles a predicate into a plan (``ArrowMatcher``) and holds the public entry points.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from serialake.core.model.schema import StructType, physical_name
from serialake.core.model.types import type_family
from serialake.core.predicates import skipping as S
from serialake.core.predicates.arrow_columns import _Fallback, _PartCol, _StatsCol
from serialake.core.predicates.arrow_context import _Ctx
from serialake.core.predicates.arrow_inputs import STATS_PARSED_MODES, _stats_sources, reference_inputs
from serialake.core.predicates.arrow_plan import (
    _ALL,
    _AND,
    _OR,
    _T,
    _CompareNode,
    _Const,
    _Fold,
    _Group,
    _IsNullNode,
    _LikeNode,
    _Negate,
    _Node,
    _NullCompareNode,
    _PerFile,
    _TruthNode,
    _UnknownConstNode,
)
from serialake.core.predicates.expressions import (
    And,
    Column,
    Comparison,
    Expr,
    In,
    IsNull,
    Like,
    Not,
    Or,
)

__all__ = [
    "STATS_PARSED_MODES",
    "ArrowMatcher",
    "SkipCache",
    "cached_matcher",
    "compile_arrow",
    "reference_inputs",
    "table_may_match",
]

_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!=", "<=>": "<=>"}


# ---------------------------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------------------------


def _plain_constant(col: _StatsCol, value: Any, date_vs_ts: bool) -> bool:
    """Whether the constant has the Python type the vectorized comparison models for the column."""
    kind = col.kind
    if kind == S._NUM:
        if type(value) is Decimal:
            return value.is_finite()
        if type(value) is float and math.isnan(value):
            return col.family != "decimal"  # Decimal against NaN raises in the per-file code
        return type(value) in (int, float)
    if kind == S._STR:
        return type(value) is str
    if kind == S._BOOL:
        return type(value) is bool
    if kind == S._DATE:
        if date_vs_ts:
            return type(value) is dt.datetime and value.tzinfo is None
        return type(value) is dt.date
    if kind == S._TS:
        return (type(value) is dt.datetime and value.tzinfo is None) or type(value) is dt.date
    return False


class SkipCache:
    """What predicates computed over one immutable table of files, for the next predicate over it.

    Kept per entry: the stats source of each ``stats_parsed`` mode, the value codes of a
    partition column, the bounds of a set of stats columns (with the rows they send per file),
    and which rows may have no records. At most ``limit`` column sets are kept (least recently
    used dropped). Safe to share between threads: at worst two threads compute an entry.
    """

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._entries: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Any:
        with self._lock:
            value = self._entries.pop(key, None)
            if value is not None:
                self._entries[key] = value  # most recently used last
            return value

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = value
            while len(self._entries) > self.limit:
                del self._entries[next(iter(self._entries))]

    def sources(self, table: pa.Table, mode: str) -> tuple[np.ndarray, pa.Array | None]:
        key = ("sources", mode)
        got = self.get(key)
        if got is None:
            got = _stats_sources(table, mode)
            self.put(key, got)
        return got

    def __len__(self) -> int:
        return len(self._entries)


class ArrowMatcher:
    """A compiled predicate: ``matcher(table) -> pa.BooleanArray`` (see ``compile_arrow``).

    ``stats_columns`` / ``partition_columns_read`` name the columns whose stats / partition
    values it reads; ``explain()`` shows which parts are vectorized.
    """

    def __init__(self, expr: Expr, schema: StructType, partition_columns: Sequence[str], stats_parsed: str) -> None:
        if stats_parsed not in STATS_PARSED_MODES:
            raise ValueError(f"stats_parsed must be one of {STATS_PARSED_MODES}, got {stats_parsed!r}")
        self.expr = expr
        self.schema = schema
        self.partition_columns = tuple(partition_columns)
        self.stats_parsed = stats_parsed
        self.reference = S.compile_predicate(expr, schema, self.partition_columns)
        self._compiler = S._Compiler(schema, self.partition_columns)
        self._lowered_partitions = {c.lower() for c in self.partition_columns}
        self.stats_columns: dict[str, _StatsCol] = {}
        self.partition_columns_read: dict[str, _PartCol] = {}
        self._per_file_leaves = 0
        self.plan = self._plan(expr)

    # -- building ---------------------------------------------------------------------------

    def _resolve(self, e: Expr) -> _PartCol | _StatsCol | None:
        """The column operand ``e`` reads, as ``skipping._Compiler.operand`` resolves it (None: none)."""
        if not isinstance(e, Column) or e.qualifier is not None:
            return None
        f = self.schema.field(e.name)
        if f is None or S._caster(f.data_type) is None:
            return None
        if e.name.lower() in self._lowered_partitions:
            return _PartCol(f.name, tuple(dict.fromkeys((f.name, physical_name(f)))), f.data_type)
        family = type_family(f.data_type) or ""
        return _StatsCol(f.name, tuple(dict.fromkeys((physical_name(f), f.name))), family, S._KIND_OF_FAMILY[family])

    def _refs(self, e: Expr) -> list[_PartCol | _StatsCol]:
        """The columns the per-file code reads to evaluate ``e`` (operands only: nothing else is read)."""
        if isinstance(e, (And, Or)):
            return [r for a in e.args for r in self._refs(a)]
        if isinstance(e, Not):
            return self._refs(e.arg)
        if isinstance(e, Comparison):
            operands = [e.left, e.right]
        elif isinstance(e, In):
            operands = [e.expr, *e.values]
        elif isinstance(e, (IsNull, Like)):
            operands = [e.expr]
        else:
            operands = [e]
        return [r for r in map(self._resolve, operands) if r is not None]

    def _use(self, col: _StatsCol) -> _StatsCol:
        return self.stats_columns.setdefault(col.name, col)

    def _group(self, node: Callable[[Any, Any], int], refs: Sequence[_PartCol | _StatsCol]) -> _Node:
        cols = {r.name: r for r in refs if isinstance(r, _PartCol)}
        for col in cols.values():
            self.partition_columns_read.setdefault(col.name, col)
        return _Group(node, list(cols.values()))

    def _per_file(self, node: Callable[[Any, Any], int]) -> _Node:
        self._per_file_leaves += 1
        return _PerFile(node)

    def _plan(self, e: Expr) -> _Node:
        refs = self._refs(e)
        if not any(isinstance(r, _StatsCol) for r in refs):
            return self._group(self._compiler.boolean(e), refs)
        if isinstance(e, And):
            return _Fold([self._plan(a) for a in e.args], _AND)
        if isinstance(e, Or):
            return _Fold([self._plan(a) for a in e.args], _OR)
        if isinstance(e, Not):
            return _Negate(self._plan(e.arg))
        if isinstance(e, Comparison):
            return self._comparison(e.op, e.left, e.right)
        if isinstance(e, In):
            options = [self._comparison("=", e.expr, v) for v in e.values]
            node = options[0] if len(options) == 1 else _Fold(options, _OR)
            return _Negate(node) if e.negated else node
        subject = self._resolve(e.expr if isinstance(e, (IsNull, Like)) else e)
        assert isinstance(subject, _StatsCol)
        if isinstance(e, IsNull):
            return _IsNullNode(self._use(subject), e.negated)
        if isinstance(e, Like):
            return _LikeNode(self._use(subject), e.pattern, e.negated) if subject.kind == S._STR else _Const(_ALL)
        return _TruthNode(self._use(subject)) if subject.kind == S._BOOL else _Const(_ALL)  # a column as a predicate

    def _comparison(self, op: str, left_e: Expr, right_e: Expr) -> _Node:
        """The node of ``skipping._Compiler._comparison`` for these operands."""
        compiler = self._compiler
        left, right = compiler.operand(left_e), compiler.operand(right_e)
        lref, rref = self._resolve(left_e), self._resolve(right_e)
        reference = compiler._comparison(op, left, right)
        if not isinstance(lref, _StatsCol) and not isinstance(rref, _StatsCol):
            return self._group(reference, [r for r in (lref, rref) if r is not None])
        col = lref if isinstance(lref, _StatsCol) else rref
        assert isinstance(col, _StatsCol)
        if left is S._NULL_OPERAND or right is S._NULL_OPERAND:
            return _NullCompareNode(self._use(col), op)
        if left.kind is None or right.kind is None:
            return _Const(_ALL)
        if lref is not None and rref is not None:  # two columns
            if left.kind != right.kind and S._coerce(left, right) is None:
                return _Const(_ALL)
            return self._per_file(reference)
        const = right if col is lref else left
        assert const.const is not None
        value = const.const[0]
        date_vs_ts = False
        if const.kind != col.kind:
            if {const.kind, col.kind} == {S._DATE, S._TS}:
                date_vs_ts = col.kind == S._DATE
            elif const.kind == S._STR:
                converted = S._cast_constant(const.const, col.kind)
                if converted is None:
                    return _Const(_ALL)
                value = converted[0]
            else:
                return _Const(_ALL)
        if value is None:  # a constant whose value no bound models (NaN): any result but NULL is possible
            return _UnknownConstNode(self._use(col), op)
        if not _plain_constant(col, value, date_vs_ts):
            return self._per_file(reference)
        return _CompareNode(self._use(col), op if col is lref else _MIRROR[op], value, date_vs_ts)

    # -- evaluating -------------------------------------------------------------------------

    def __call__(self, table: pa.Table, cache: SkipCache | None = None) -> pa.BooleanArray:
        """Per row of ``table``: whether the file may hold a matching row (see ``compile_arrow``).

        ``cache``: a ``SkipCache`` kept with ``table`` (an immutable table: a checkpoint's
        rows), so that the next predicate over it reuses the partition codes and parsed stats
        bounds this one computed.
        """
        if cache is not None:
            use, parsed = cache.sources(table, self.stats_parsed)
        else:
            use, parsed = _stats_sources(table, self.stats_parsed)
        if parsed is None or not use.any():
            return pa.array(self._evaluate(table, None, cache), type=pa.bool_())
        if use.all():
            return pa.array(self._evaluate(table, parsed, cache), type=pa.bool_())
        out = np.zeros(table.num_rows, dtype=bool)
        for rows, source in ((np.nonzero(~use)[0], None), (np.nonzero(use)[0], parsed)):
            index = pa.array(rows, type=pa.int64())
            out[rows] = self._evaluate(table.take(index), None if source is None else source.take(index))
        return pa.array(out, type=pa.bool_())

    def _evaluate(self, table: pa.Table, parsed: pa.Array | None, cache: SkipCache | None = None) -> np.ndarray:
        ctx = _Ctx(self, table, parsed, cache)
        if ctx.n == 0:
            return np.zeros(0, dtype=bool)
        if cache is not None and cache.get(ctx.stats_key(list(self.stats_columns.values()))) is not None:
            return self._evaluate_all(ctx)  # every bound is at hand: nothing to save by narrowing
        narrowed = self._narrow(ctx)
        if narrowed is not None:
            rows, result = narrowed
            index = pa.array(rows, type=pa.int64())
            result[rows] = self._evaluate(table.take(index), None if parsed is None else parsed.take(index))
            return result
        return self._evaluate_all(ctx)

    def _narrow(self, ctx: _Ctx) -> tuple[np.ndarray, np.ndarray] | None:
        """For ``partition conjuncts AND others``: (rows the partition conjuncts leave, result so far).

        A row where some conjunct cannot be TRUE is FALSE whatever the others are, so only the
        rows left need their stats read. Used when the other conjuncts cannot make the per-file
        code raise (it evaluates them on every file): no per-file leaves, no timestamp bounds.
        """
        plan = self.plan
        if not (isinstance(plan, _Fold) and plan.table is _AND) or self._per_file_leaves:
            return None
        groups = [c for c in plan.children if isinstance(c, _Group)]
        if not groups or len(groups) == len(plan.children):
            return None
        if any(col.kind == S._TS for col in self.stats_columns.values()):
            return None
        try:
            alive = np.ones(ctx.n, dtype=bool)
            for group in groups:
                alive &= (group.eval(ctx) & _T) != 0
        except _Fallback:
            return None
        if alive.sum() * 2 > ctx.n:
            return None  # not worth a copy
        result = np.zeros(ctx.n, dtype=bool)
        rows = np.nonzero(ctx.fallback)[0]  # partition values the lookup cannot read vectorized
        if rows.size:
            result[rows] = [self.reference(*args) for args in ctx.inputs_at(rows)]
        return np.nonzero(alive & ~ctx.fallback)[0], result

    def _evaluate_all(self, ctx: _Ctx) -> np.ndarray:
        reads_stats = bool(self.stats_columns) or self._per_file_leaves > 0
        try:
            for col in self.partition_columns_read.values():
                ctx.partition(col)
            if reads_stats:
                ctx.prepare_stats(list(self.stats_columns.values()))
            result = (self.plan.eval(ctx) & _T) != 0
            if not reads_stats:
                ctx.check_empty_files(result & ~ctx.fallback)
            result &= ~ctx.zero
            rows = np.nonzero(ctx.fallback)[0]
            if rows.size:
                result[rows] = [self.reference(*args) for args in ctx.inputs_at(rows)]
        except _Fallback:
            result = np.array([self.reference(pv, st) for pv, st in ctx.inputs()], dtype=bool)
        return result

    def explain(self) -> str:
        """The plan, one node a line: what is vectorized and what runs per file."""
        lines: list[str] = []

        def walk(node: _Node, depth: int) -> None:
            pad = "  " * depth
            if isinstance(node, _Fold):
                lines.append(pad + ("AND" if node.table is _AND else "OR"))
                for child in node.children:
                    walk(child, depth + 1)
            elif isinstance(node, _Negate):
                lines.append(pad + "NOT")
                walk(node.child, depth + 1)
            elif isinstance(node, _Group):
                names = ", ".join(c.name for c in node.cols) or "no column"
                lines.append(pad + f"per distinct partition values ({names})")
            elif isinstance(node, _CompareNode):
                lines.append(pad + f"stats: {node.col.name} {node.op} {node.value!r}")
            elif isinstance(node, _Const):
                lines.append(pad + f"constant mask {node.mask}")
            elif isinstance(node, _PerFile):
                lines.append(pad + "per file (leaf)")
            else:
                col = getattr(node, "col", None)
                lines.append(pad + f"stats: {type(node).__name__.strip('_')} {getattr(col, 'name', '')}")

        walk(self.plan, 0)
        return "\n".join(lines)


def compile_arrow(
    expr: Expr, schema: StructType, partition_columns: Sequence[str], *, stats_parsed: str = "fill"
) -> ArrowMatcher:
    """A vectorized ``skipping.compile_predicate``: ``matcher(table) -> pa.BooleanArray``.

    ``table`` has the columns of the checkpoint's ``add`` struct (``files_table``); read are
    ``partitionValues`` (map<string, string>; null or absent: no values), ``stats`` (string;
    null or absent: no stats) and, when present, ``stats_parsed`` (a struct of ``numRecords``,
    ``minValues``, ``maxValues``, ``nullCount`` keyed by physical column names). The result has
    one non-null boolean per row, exactly ``skipping.compile_predicate(expr, schema,
    partition_columns)(*reference_inputs(table, stats_parsed=stats_parsed)[i])``: for a table
    from ``files_table``, the per-file answer for the i-th file. ``stats_parsed``: ``fill``
    (rows whose ``stats`` is null use ``stats_parsed``), ``prefer`` (rows with a non-null
    ``stats_parsed`` use it) or ``ignore``.
    """
    return ArrowMatcher(expr, schema, partition_columns, stats_parsed)


def table_may_match(
    expr: Expr,
    table: pa.Table,
    schema: StructType,
    *,
    partition_columns: Sequence[str] = (),
    stats_parsed: str = "fill",
) -> pa.BooleanArray:
    """``compile_arrow(...)(table)`` with the compiled matcher cached (like ``skipping.file_may_match``)."""
    return cached_matcher(expr, schema, partition_columns, stats_parsed=stats_parsed)(table)


def cached_matcher(
    expr: Expr, schema: StructType, partition_columns: Sequence[str], *, stats_parsed: str = "fill"
) -> ArrowMatcher:
    """``compile_arrow`` with the compiled matcher kept for the same predicate and schema."""
    columns = tuple(partition_columns)
    try:
        return _compiled_cached(expr, schema, columns, stats_parsed)
    except TypeError:  # unhashable parts (e.g. a literal holding a list)
        return compile_arrow(expr, schema, columns, stats_parsed=stats_parsed)


@lru_cache(maxsize=256)
def _compiled_cached(expr: Expr, schema: StructType, columns: tuple[str, ...], stats_parsed: str) -> ArrowMatcher:
    return compile_arrow(expr, schema, columns, stats_parsed=stats_parsed)
