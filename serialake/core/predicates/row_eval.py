"""The row evaluator: a predicate on the rows of one Delta data file, computed with pyarrow (no Spark).

Row-level conflict resolution (``serialake.core.txn.row_level``) and the driver-side DML paths ask
which rows of a file a read predicate or a condition holds for. ``RowReader`` reads only the
columns needed from the file's Parquet, takes partition columns from the file's partition
values (``serialake.core.model.partition_values``) and leaves out the rows its deletion vector
deleted.

Evaluation is three-valued per row (``RowReader.evaluate``): a part of a predicate the driver
does not compute exactly as Spark does (``inexact_reason``: UDFs, ``Unknown`` nodes, floats...)
may be TRUE, FALSE or NULL, and Kleene logic decides the rows where the whole predicate is
certainly TRUE or certainly not TRUE (``id = 5 AND f(x)`` on a row with ``id = 7``). The rest
are undecided: a ``RowEvaluator`` (Spark, supplied by the caller) decides them
(``resolve_rows``), or else the caller keeps its cautious outcome (``CannotEvaluate``).
``evaluate`` is the exact evaluation itself, on an Arrow table, for predicates
``inexact_reason`` accepts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from serialake.core.model.actions import AddFile, decode_path
from serialake.core.model.partition_values import parse_partition_value
from serialake.core.model.schema import physical_name
from serialake.core.model.types import arrow_type, type_family
from serialake.core.predicates import expressions as E
from serialake.core.predicates.values import NotExact
from serialake.storage.datafiles import Access, is_remote

__all__ = [
    "CannotEvaluate",
    "RowEvaluator",
    "RowReader",
    "RowVerdict",
    "evaluate",
    "inexact_reason",
    "resolve_rows",
    "scan_matching_rows",
]


class CannotEvaluate(NotExact):
    """The predicate or the file cannot be evaluated exactly here.

    A ``values.NotExact``: the driver paths then run the step on Spark; conflict checks keep
    their cautious outcome.
    """


RowEvaluator = Callable[[AddFile, Any], Any]
"""``(file, rows or None for all) -> RowIndexSet``: the live rows among ``rows`` where a condition
is TRUE, computed elsewhere (Spark) for rows the driver cannot decide. Errors mean "undecided"."""


@dataclass(frozen=True)
class RowVerdict:
    """A predicate on the live rows of one file: where it is certainly TRUE, and where it may be."""

    true: Any  # RowIndexSet: rows where the predicate is TRUE
    undecided: Any  # RowIndexSet: rows where it may be TRUE but is not known to be (other rows: not TRUE)


@dataclass
class RowReader:
    """Evaluates read predicates on the rows of data files (pyarrow; no Spark)."""

    table_path: str
    snapshot: Any  # the read snapshot: its schema and partition columns

    @property
    def schema(self) -> Any:
        return self.snapshot.schema

    @property
    def partition_columns(self) -> Sequence[str]:
        return self.snapshot.partition_columns

    def _location(self, add: AddFile) -> tuple[str, bool]:
        """``(absolute location, remote)`` of ``add``'s data file; ``CannotEvaluate`` if a local one is missing."""
        path = decode_path(add.path)
        if is_remote(self.table_path) or is_remote(path):
            from serialake.core.model.paths import absolute_path

            return absolute_path(self.table_path, add.path), True
        full = path if os.path.isabs(path) else os.path.join(self.table_path, path)
        if not os.path.exists(full):
            raise CannotEvaluate(f"data file {add.path} is not readable here")
        return full, False

    def parquet_file(self, add: Any) -> Any:
        """``add``'s data file (an add or a remove) as a ``pyarrow.parquet.ParquetFile``, local or remote.

        INT96 timestamps are read as microseconds, the precision Spark reads them with. Raises
        ``CannotEvaluate`` when the file is not readable here.
        """
        import pyarrow.parquet as pq

        full, remote = self._location(add)
        try:
            source = Access().open_parquet(full) if remote else full
            return pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        except OSError as e:
            raise CannotEvaluate(f"data file {add.path} is not readable here ({e})") from None

    def footer_rows(self, f: Any) -> int:
        """The number of rows of ``f``'s data file (an add or a remove), from its Parquet footer.

        Raises ``OSError`` or ``ValueError`` when the footer cannot be read.
        """
        from serialake.core.model.paths import absolute_path, parquet_metadata

        return int(parquet_metadata(absolute_path(self.table_path, f.path), f.size).num_rows)

    def _table(self, add: AddFile, columns: set[str]) -> Any:
        import pyarrow.parquet as pq

        full, remote = self._location(add)
        data_cols = [c for c in columns if c.lower() not in {p.lower() for p in self.partition_columns}]
        names = {f.name.lower(): f.name for f in self.schema.fields}
        wanted: dict[str, str] = {}  # name in the file (physical under column mapping) -> table name
        for c in data_cols:
            real = names.get(c.lower())
            if real is None:
                raise CannotEvaluate(f"unknown column {c}")
            wanted[physical_name(self.schema.field(real))] = real
        if remote:
            try:
                table = pq.ParquetFile(Access().open_parquet(full)).read(columns=list(wanted))
            except OSError as e:
                raise CannotEvaluate(f"data file {add.path} is not readable here ({e})") from None
        else:
            table = pq.read_table(full, columns=list(wanted))
        return table.rename_columns([wanted[c] for c in table.column_names])

    def evaluate(self, add: AddFile, expr: Any, rows: Any = None) -> RowVerdict:
        """Three-valued ``expr`` on the live rows of ``add`` (restricted to ``rows`` if given).

        Only the columns of the parts evaluated exactly are read. Raises ``CannotEvaluate``
        when the file itself cannot be read here.
        """
        import numpy as np

        from serialake.core.dv.deletion_vectors import RowIndexSet, read_deletion_vector

        cols = {name for part in _exact_parts(expr, self.schema) for _, name in E.column_refs(part)}
        table = self._table(add, cols)
        n = add.num_records if table.num_columns == 0 else table.num_rows
        if n is None:
            raise CannotEvaluate("row count unknown")
        if rows is not None:
            idx = rows.to_numpy()
            idx = idx[idx < n]
            table = table.take(idx) if table.num_columns else None
            count = len(idx)
        else:
            idx = None
            count = n
        possible = _possible(expr, table, count, add.partition_values or {}, self.schema, self.partition_columns)
        true = np.nonzero(possible == _T)[0]
        undecided = np.nonzero(((possible & _T) != 0) & (possible != _T))[0]
        if idx is not None:
            true, undecided = idx[true], idx[undecided]
        # Rows already deleted by the file's vector are not part of the table.
        dv = add.deletion_vector
        gone = read_deletion_vector(self.table_path, dv) if dv is not None else None
        out = []
        for hit in (true, undecided):
            found = RowIndexSet.from_iter(hit.astype("uint64"))
            out.append(found - gone if gone is not None else found)
        return RowVerdict(out[0], out[1])

    def matching_rows(self, add: AddFile, expr: Any, rows: Any = None) -> Any:
        """Physical row indexes of ``add`` (restricted to ``rows`` if given) where ``expr`` is TRUE.

        Raises ``CannotEvaluate`` when a live row cannot be decided exactly here.
        """
        verdict = self.evaluate(add, expr, rows)
        if len(verdict.undecided):
            raise CannotEvaluate(f"{add.path}: {inexact_reason(expr, self.schema)}")
        return verdict.true

    def any_match(self, add: AddFile, exprs: Sequence[Any], rows: Any = None) -> bool:
        """Whether some (live) row of ``add`` (within ``rows``) satisfies any of ``exprs``."""
        for e in exprs:
            if len(self.matching_rows(add, e, rows)) > 0:
                return True
        return False


# Type families (``types.type_family``) whose comparisons pyarrow computes exactly as Spark does
# (no NaN ordering, no time zones, no decimal rescaling), and the literal kind each compares with
# without a cast.
_EXACT_FAMILIES = {"integral": "integer", "string": "string", "boolean": "boolean", "date": "date"}
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def inexact_reason(expr: Any, schema: Any) -> str | None:
    """None when ``evaluate`` of ``expr`` keeps exactly the rows Spark's ``filter(expr)`` keeps.

    Otherwise why not. The accepted subset: AND / OR / NOT, comparisons (incl. ``<=>``),
    IN and IS [NOT] NULL between unqualified columns of integer, string, boolean and date
    types and literals of the same kind (or NULL; ISO date strings for dates), and boolean
    columns or TRUE / FALSE / NULL as predicates. Anything else (floats and their NaN order,
    decimals, timestamps, LIKE, functions, implicit casts) is left to Spark.
    """

    def family(e: Any) -> str:
        if isinstance(e, E.Column):
            if e.qualifier:
                raise _Inexact(f"qualified column {e.qualifier}.{e.name}")
            f = schema.field(e.name)
            if f is None:
                raise _Inexact(f"unknown column {e.name}")
            kind = _EXACT_FAMILIES.get(type_family(f.data_type) or "")
            if kind is None:
                raise _Inexact(f"column {e.name} has type {f.data_type.simple_string()}")
            return kind
        raise _Inexact(type(e).__name__)

    def literal_fits(lit: Any, kind: str) -> bool:
        if not isinstance(lit, E.Literal):
            return False
        if lit.value is None:
            return True
        if kind == "date" and lit.type_hint == "string":
            return bool(_ISO_DATE.fullmatch(lit.value))
        if kind == "integer" and isinstance(lit.value, bool):
            return False
        return lit.type_hint == kind

    def operands(a: Any, b: Any) -> None:
        if isinstance(a, E.Column) and isinstance(b, E.Column):
            if family(a) != family(b):
                raise _Inexact(f"{a.name} and {b.name} need a cast to compare")
            return
        col, lit = (a, b) if isinstance(a, E.Column) else (b, a)
        if not isinstance(col, E.Column) or not literal_fits(lit, family(col)):
            raise _Inexact(f"{E.to_sql(a)} vs {E.to_sql(b)} needs a cast or is not a column")

    def check(e: Any) -> None:
        if isinstance(e, (E.And, E.Or)):
            for a in e.args:
                check(a)
        elif isinstance(e, E.Not):
            check(e.arg)
        elif isinstance(e, E.Comparison):
            operands(e.left, e.right)
        elif isinstance(e, E.In):
            kind = family(e.expr)
            if not all(literal_fits(v, kind) for v in e.values):
                raise _Inexact("IN list values need a cast")
        elif isinstance(e, E.IsNull):
            family(e.expr)
        elif isinstance(e, E.Column):
            if family(e) != "boolean":
                raise _Inexact(f"column {e.name} is not boolean")
        elif isinstance(e, E.Literal):
            if e.value not in (True, False, None) or isinstance(e.value, int) and not isinstance(e.value, bool):
                raise _Inexact("non-boolean literal predicate")
        else:
            raise _Inexact(type(e).__name__)

    try:
        check(expr)
    except _Inexact as e:
        return str(e)
    return None


class _Inexact(Exception):
    pass


def scan_matching_rows(
    reader: RowReader, files: Sequence[AddFile], expr: Any, *, threads: int = 4
) -> list[tuple[AddFile, Any]]:
    """``(file, live rows matching expr)`` for each of ``files`` with at least one match.

    Reads only the columns ``expr`` mentions, several files at a time. Raises
    ``CannotEvaluate`` when a file cannot be read here or a value cannot be compared
    exactly; callers then evaluate with Spark.
    """
    import pyarrow as pa

    def one(add: AddFile) -> tuple[AddFile, Any]:
        try:
            return add, reader.matching_rows(add, expr)
        except (pa.ArrowException, OSError, KeyError) as e:
            raise CannotEvaluate(f"{add.path}: {e}") from None

    if len(files) <= 1 or threads <= 1:
        found = [one(f) for f in files]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, len(files))) as pool:
            found = list(pool.map(one, files))
    return [(f, rows) for f, rows in found if len(rows) > 0]


def evaluate(expr: Any, table: Any, n: int, pv: Mapping[str, str | None], schema: Any, parts: Sequence[str]) -> Any:
    """A pyarrow boolean array (or a Python bool/None constant) for ``expr`` over the ``n`` rows of ``table``.

    ``schema`` types the columns; the values of partition columns ``parts`` come from the file's
    partition values ``pv``, the others from ``table``. Spark's result exactly when
    ``inexact_reason(expr, schema)`` is None; raises ``CannotEvaluate`` for what it cannot compute.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    parts_lower = {p.lower() for p in parts}

    def value(e: Any) -> Any:
        if isinstance(e, E.Column):
            f = schema.field(e.name)
            if f is None:
                raise CannotEvaluate(f"unknown column {e.name}")
            if f.name.lower() in parts_lower:
                keys = {f.name.lower(), physical_name(f).lower()}  # physical names under column mapping
                raw = next((v for k, v in pv.items() if k.lower() in keys), None)
                return _typed_scalar(raw, f.data_type)
            return table.column(f.name)
        if isinstance(e, E.Literal):
            return e.value
        raise CannotEvaluate(type(e).__name__)

    def coerce(left: Any, right: Any) -> tuple[Any, Any]:
        # Cast a Python literal to the other side's Arrow type (e.g. '2024-01-01' vs date32).
        for a, b, flip in ((left, right, False), (right, left, True)):
            if isinstance(a, (pa.Array, pa.ChunkedArray, pa.Scalar)) and not isinstance(
                b, (pa.Array, pa.ChunkedArray, pa.Scalar)
            ):
                try:
                    s = pa.scalar(b).cast(a.type) if b is not None else pa.scalar(None, a.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
                    raise CannotEvaluate("literal cast") from None
                return (s, a) if flip else (a, s)
        return left, right

    def go(e: Any) -> Any:
        if isinstance(e, E.And):
            out = go(e.args[0])
            for a in e.args[1:]:
                out = pc.and_kleene(_arr(out, n), _arr(go(a), n))
            return out
        if isinstance(e, E.Or):
            out = go(e.args[0])
            for a in e.args[1:]:
                out = pc.or_kleene(_arr(out, n), _arr(go(a), n))
            return out
        if isinstance(e, E.Not):
            return pc.invert(_arr(go(e.arg), n))
        if isinstance(e, E.Comparison):
            left, right = coerce(value(e.left), value(e.right))
            fn = {"=": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
                  ">": pc.greater, ">=": pc.greater_equal}.get(e.op)
            if e.op == "<=>":
                eq = pc.equal(_arr(left, n), _arr(right, n))
                both_null = pc.and_(pc.is_null(_arr(left, n)), pc.is_null(_arr(right, n)))
                return pc.or_kleene(pc.fill_null(eq, False), both_null)
            if fn is None:
                raise CannotEvaluate(e.op)
            return fn(_arr(left, n), _arr(right, n))
        if isinstance(e, E.In):
            target = _arr(value(e.expr), n)
            vals = [value(v) for v in e.values]
            try:
                vs = pa.array([v for v in vals if v is not None]).cast(target.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
                raise CannotEvaluate("IN list cast") from None
            hit = pc.is_in(target, value_set=vs)
            hit = pc.if_else(pc.is_null(target), pa.scalar(None, pa.bool_()), hit)
            if any(v is None for v in vals):
                hit = pc.if_else(hit, True, pa.scalar(None, pa.bool_()))
            return pc.invert(hit) if e.negated else hit
        if isinstance(e, E.IsNull):
            r = pc.is_null(_arr(value(e.expr), n))
            return pc.invert(r) if e.negated else r
        if isinstance(e, E.Like):
            r = pc.match_like(_arr(value(e.expr), n), e.pattern if isinstance(e.pattern, str) else value(e.pattern))
            return pc.invert(r) if e.negated else r
        if isinstance(e, E.Literal) and (e.value is True or e.value is False or e.value is None):
            return e.value
        if isinstance(e, E.Column):
            v = value(e)
            if getattr(v, "type", None) != pa.bool_():
                raise CannotEvaluate(f"column {e.name} used as a predicate is not boolean")
            return v
        raise CannotEvaluate(type(e).__name__)

    return go(expr)


def _arr(v: Any, n: int) -> Any:
    import pyarrow as pa

    if isinstance(v, pa.ChunkedArray):
        return v.combine_chunks()
    if isinstance(v, pa.Array):
        return v
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n)
    return pa.array([v] * n) if n else pa.array([], type=pa.bool_() if isinstance(v, bool) or v is None else None)


# -- three-valued evaluation: per row, the set of values a predicate may take ------------------
_T, _F, _N = 1, 2, 4  # TRUE, FALSE, NULL as bits; a row's possible values are their union
_ALL = _T | _F | _N


def _kleene_table(op: Callable[[bool | None, bool | None], bool | None]) -> Any:
    """``table[a, b]``: the possible values of ``op(x, y)`` for x in set ``a`` and y in set ``b``."""
    import numpy as np

    bits = {True: _T, False: _F, None: _N}
    table = np.zeros((8, 8), np.uint8)
    for a in range(8):
        for b in range(8):
            for va, ba in bits.items():
                for vb, bb in bits.items():
                    if a & ba and b & bb:
                        table[a, b] |= bits[op(va, vb)]
    return table


@cache
def _kleene(name: str) -> Any:
    """The lookup table of ``and`` / ``or`` (8x8) or ``not`` (8) over sets of values."""
    import numpy as np

    if name == "not":
        return np.array([(m & _N) | (_F if m & _T else 0) | (_T if m & _F else 0) for m in range(8)], np.uint8)
    return _kleene_table(E.and3 if name == "and" else E.or3)


def _exact_parts(expr: Any, schema: Any) -> list[Any]:
    """The largest subexpressions of ``expr`` that ``evaluate`` computes exactly as Spark does."""
    if inexact_reason(expr, schema) is None:
        return [expr]
    if isinstance(expr, (E.And, E.Or)):
        return [part for a in expr.args for part in _exact_parts(a, schema)]
    if isinstance(expr, E.Not):
        return _exact_parts(expr.arg, schema)
    return []


def _possible(expr: Any, table: Any, n: int, pv: Mapping[str, str | None], schema: Any, parts: Sequence[str]) -> Any:
    """Per row, the values ``expr`` may take as bits (a numpy uint8 array of ``n``).

    Exact parts (``inexact_reason`` is None) give their one value; anything else may be TRUE,
    FALSE or NULL; AND / OR / NOT combine the sets with Kleene logic.
    """
    import numpy as np

    if inexact_reason(expr, schema) is None:
        try:
            return _bits(evaluate(expr, table, n, pv, schema, parts), n)
        except CannotEvaluate:
            return np.full(n, _ALL, np.uint8)
    if isinstance(expr, (E.And, E.Or)):
        op = _kleene("and" if isinstance(expr, E.And) else "or")
        out = _possible(expr.args[0], table, n, pv, schema, parts)
        for a in expr.args[1:]:
            out = op[out, _possible(a, table, n, pv, schema, parts)]
        return out
    if isinstance(expr, E.Not):
        return _kleene("not")[_possible(expr.arg, table, n, pv, schema, parts)]
    return np.full(n, _ALL, np.uint8)


def _bits(value: Any, n: int) -> Any:
    """An exact result of ``evaluate`` (Arrow booleans or a Python constant) as one value bit per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if value is True or value is False or value is None:
        return np.full(n, _T if value is True else _F if value is False else _N, np.uint8)
    arr = _arr(value, n)
    if arr.type != pa.bool_() or len(arr) != n:
        raise CannotEvaluate(f"predicate of type {arr.type}")
    out = np.where(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), _T, _F).astype(np.uint8)
    if arr.null_count:
        out[pc.is_null(arr).to_numpy(zero_copy_only=False)] = _N
    return out


def resolve_rows(
    reader: RowReader,
    add: AddFile,
    expr: Any,
    rows: Any = None,
    evaluator: RowEvaluator | None = None,
    *,
    confirm: bool = False,
) -> Any:
    """Live rows of ``add`` (within ``rows``) where ``expr`` is TRUE: decided on the driver, else by ``evaluator``.

    ``evaluator`` gets only the rows the driver left undecided (all of ``rows`` when the file
    cannot be read here) and evaluates the operation's own condition, which may be narrower
    than ``expr`` (TRUE only where ``expr`` is). Without one, undecided rows raise
    ``CannotEvaluate``; the evaluator's errors propagate. ``confirm``: ``expr`` is only a
    necessary condition, so the rows where it is TRUE go to ``evaluator`` as well (the driver
    only rules rows out).
    """
    import pyarrow as pa

    try:
        verdict = reader.evaluate(add, expr, rows)
    except (CannotEvaluate, OSError, ValueError, pa.ArrowException):
        if evaluator is None:
            raise
        found = evaluator(add, rows)
        return found & rows if rows is not None else found
    if confirm and evaluator is not None:
        maybe = verdict.true | verdict.undecided
        return evaluator(add, maybe) & maybe if len(maybe) else maybe
    if not len(verdict.undecided):
        return verdict.true
    if evaluator is None:
        raise CannotEvaluate(f"{add.path}: {inexact_reason(expr, reader.schema)}")
    return verdict.true | (evaluator(add, verdict.undecided) & verdict.undecided)


def _typed_scalar(raw: str | None, data_type: Any) -> Any:
    """A partition value string as a typed Arrow scalar.

    Integral and fractional values are 64-bit, whatever the column's width, so that they
    compare with literals of any size (a ``byte`` partition value against ``1000``).
    """
    import pyarrow as pa

    family = type_family(data_type)
    t = pa.int64() if family == "integral" else pa.float64() if family == "fractional" else arrow_type(data_type)
    try:
        value = parse_partition_value(raw, data_type)
    except ValueError:
        raise CannotEvaluate(f"partition value {raw!r}") from None
    if t is None:
        return pa.scalar(value)
    return pa.scalar(value, t)
