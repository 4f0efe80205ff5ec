"""The plan of a vectorized predicate: nodes that give every row's possible results as a bit mask.

A mask is a uint8 of TRUE / FALSE / NULL bits (``skipping._T``, ``_F``, ``_N``). ``_Group`` runs
the per-file code on a subtree that reads no stats column, once per distinct combination of its
partition values; ``_Fold`` and ``_Negate`` combine masks with the per-file code's Kleene tables;
``_PerFile`` is a leaf done per file; the other nodes compute a stats column against a constant
(``_CompareNode``, with ``arrow_thresholds``), NULL, ``IS [NOT] NULL``, a boolean column or
``LIKE`` on the ``_Bounds`` of every row. Anything the per-file code raises for becomes
``_Fallback``: the whole table is redone per file, so it raises exactly when that loop raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serialake.core.predicates import skipping as S
from serialake.core.predicates.arrow_columns import _Bounds, _Fallback, _PartCol, _StatsCol
from serialake.core.predicates.arrow_context import _Ctx
from serialake.core.predicates.arrow_inputs import _np, _valid
from serialake.core.predicates.arrow_thresholds import _Inf, _thresholds

_T, _F, _N, _ALL = S._T, S._F, S._N, S._ALL
_AND = np.array(S._AND, dtype=np.uint8)
_OR = np.array(S._OR, dtype=np.uint8)
_NOT = np.array(S._NOT, dtype=np.uint8)

# Exceptions the per-file code may raise while evaluating (it only catches some of them).
_REFERENCE_ERRORS = (ArithmeticError, TypeError, ValueError, AttributeError, LookupError)


class _Node:
    def eval(self, ctx: _Ctx) -> np.ndarray:
        raise NotImplementedError


class _Const(_Node):
    def __init__(self, mask: int) -> None:
        self.mask = mask

    def eval(self, ctx: _Ctx) -> np.ndarray:
        return np.full(ctx.n, self.mask, dtype=np.uint8)


class _Group(_Node):
    """A subtree reading no stats: the per-file code, once per distinct combination of its partition values."""

    def __init__(self, node: Callable[[Any, Any], int], cols: Sequence[_PartCol]) -> None:
        self.node = node
        self.cols = tuple(cols)

    def _call(self, pv: dict[str, Any]) -> int:
        try:
            return self.node(pv, None)
        except _REFERENCE_ERRORS as e:
            raise _Fallback from e

    def eval(self, ctx: _Ctx) -> np.ndarray:
        if not self.cols:
            return np.full(ctx.n, self._call({}), dtype=np.uint8)
        parts = [ctx.partition(c) for c in self.cols]
        combined = parts[0][0]
        for codes, values in parts[1:]:
            _, combined = np.unique(combined * len(values) + codes, return_inverse=True)
            combined = combined.reshape(-1)
        _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
        masks = np.empty(len(first), dtype=np.uint8)
        for k, row in enumerate(first):
            masks[k] = self._call({c.name: values[codes[row]] for c, (codes, values) in zip(self.cols, parts)})
        return masks[inverse.reshape(-1)]


class _Fold(_Node):
    def __init__(self, children: Sequence[_Node], table: np.ndarray) -> None:
        self.children = tuple(children)
        self.table = table

    def eval(self, ctx: _Ctx) -> np.ndarray:
        mask = self.children[0].eval(ctx)
        for child in self.children[1:]:
            mask = self.table[mask, child.eval(ctx)]
        return mask


class _Negate(_Node):
    def __init__(self, child: _Node) -> None:
        self.child = child

    def eval(self, ctx: _Ctx) -> np.ndarray:
        return _NOT[self.child.eval(ctx)]


class _PerFile(_Node):
    """A leaf the vectorized code does not model: the per-file node, on every row the per-file code evaluates."""

    def __init__(self, node: Callable[[Any, Any], int]) -> None:
        self.node = node

    def eval(self, ctx: _Ctx) -> np.ndarray:
        out = np.zeros(ctx.n, dtype=np.uint8)
        rows = np.nonzero(~ctx.fallback & ~ctx.zero)[0]
        try:
            for i, args in zip(rows, ctx.inputs_at(rows), strict=True):
                out[i] = self.node(*args)
        except _REFERENCE_ERRORS as e:
            raise _Fallback from e
        return out


def _flags(bounds: _Bounds, if_null: int, values: np.ndarray | int) -> np.ndarray:
    """``if_null`` where the column may be NULL, ``values`` where it may hold a value."""
    out = np.where(bounds.may_null, np.uint8(if_null), np.uint8(0))
    return out | np.where(bounds.may_value, np.asarray(values, dtype=np.uint8), np.uint8(0))


class _IsNullNode(_Node):
    def __init__(self, col: _StatsCol, negated: bool) -> None:
        self.col = col
        self.yes, self.no = (_F, _T) if negated else (_T, _F)

    def eval(self, ctx: _Ctx) -> np.ndarray:
        return _flags(ctx.bounds[self.col.name], self.yes, self.no)


class _NullCompareNode(_Node):
    """A stats column against the NULL literal (on either side)."""

    def __init__(self, col: _StatsCol, op: str) -> None:
        self.col = col
        self.op = op

    def eval(self, ctx: _Ctx) -> np.ndarray:
        if self.op == "<=>":
            return _flags(ctx.bounds[self.col.name], _T, _F)
        return np.full(ctx.n, _N, dtype=np.uint8)


class _UnknownConstNode(_Node):
    """A stats column against a non-null constant no bound can be compared with (NaN)."""

    def __init__(self, col: _StatsCol, op: str) -> None:
        self.col = col
        self.op = op

    def eval(self, ctx: _Ctx) -> np.ndarray:
        return _flags(ctx.bounds[self.col.name], _F if self.op == "<=>" else _N, _T | _F)


class _TruthNode(_Node):
    """A boolean stats column used as a predicate."""

    def __init__(self, col: _StatsCol) -> None:
        self.col = col

    def eval(self, ctx: _Ctx) -> np.ndarray:
        b = ctx.bounds[self.col.name]
        hi_not_false = _np(pc.fill_null(pc.not_equal(b.hi, False), True))
        lo_not_true = _np(pc.fill_null(pc.not_equal(b.lo, True), True))
        return _flags(b, _N, np.where(hi_not_false, _T, 0) | np.where(lo_not_true, _F, 0))


class _LikeNode(_Node):
    def __init__(self, col: _StatsCol, pattern: str, negated: bool) -> None:
        self.col = col
        self.regex = S._like_regex(pattern)
        self.yes, self.no = (_F, _T) if negated else (_T, _F)

    def eval(self, ctx: _Ctx) -> np.ndarray:
        b = ctx.bounds[self.col.name]
        values = np.full(ctx.n, _T | _F, dtype=np.uint8)
        single = np.nonzero(_np(pc.equal(b.lo, b.hi)))[0]  # min == max: the one value decides
        if single.size:
            encoded = pc.dictionary_encode(b.lo.take(pa.array(single, type=pa.int64())))
            verdicts = np.array(
                [self.yes if self.regex.fullmatch(s) else self.no for s in encoded.dictionary.to_pylist()],
                dtype=np.uint8,
            )
            values[single] = verdicts[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
        return _flags(b, _N, values)


class _CompareNode(_Node):
    """``column op constant`` (column on the left) on the bounds of every row, as ``skipping._compare``."""

    def __init__(self, col: _StatsCol, op: str, value: Any, date_vs_ts: bool) -> None:
        self.col = col
        self.op = op
        self.value = value
        self.date_vs_ts = date_vs_ts  # a date column against a timestamp (compared as timestamps)

    def eval(self, ctx: _Ctx) -> np.ndarray:
        b = ctx.bounds[self.col.name]
        lo_null, hi_null = ~_valid(b.lo), ~_valid(b.hi)
        th = _thresholds(b.rep, b.lo.type, self.value, self.date_vs_ts)
        if th is None:  # NaN: every comparison with it is false; a missing bound is still "true"
            lt_lo = le_lo = lo_null
            gt_hi = ge_hi = hi_null
            eq_lo = np.zeros(ctx.n, dtype=bool)
        else:
            low, high = th
            lt_lo = _below(b.rep, b.lo, lo_null, low)  # lo is None or lo < c
            le_lo = _below(b.rep, b.lo, lo_null, high)  # lo is None or lo <= c
            gt_hi = _at_least(b.rep, b.hi, hi_null, high)  # hi is None or c < hi
            ge_hi = _at_least(b.rep, b.hi, hi_null, low)  # hi is None or c <= hi
            eq_lo = ~lt_lo & le_lo  # lo is not None and lo == c
        op = self.op
        if op in ("=", "!=", "<=>"):
            overlap = le_lo & ge_hi
            single = eq_lo & _np(pc.equal(b.lo, b.hi))
            t_bits, f_bits = (~single, overlap) if op == "!=" else (overlap, ~single)
        else:
            t_bits, f_bits = {
                "<": (lt_lo, ge_hi),
                "<=": (le_lo, gt_hi),
                ">": (gt_hi, le_lo),
                ">=": (ge_hi, lt_lo),
            }[op]
        values = np.where(t_bits, _T, 0) | np.where(f_bits, _F, 0)
        return _flags(b, _F if op == "<=>" else _N, values)


def _comparable(rep: str, x: pa.Array, value: Any) -> tuple[pa.Array, pa.Scalar]:
    if rep == "bool":
        return x.cast(pa.int8()), pa.scalar(value, pa.int8())
    return x, pa.scalar(value, x.type)


def _below(rep: str, x: pa.Array, null: np.ndarray, t: Any) -> np.ndarray:
    """``x is None or x < t`` (t: a value of x's representation, or an infinity)."""
    if isinstance(t, _Inf):
        return np.ones(len(null), dtype=bool) if t.sign > 0 else null
    return null | _np(pc.less(*_comparable(rep, x, t)))


def _at_least(rep: str, x: pa.Array, null: np.ndarray, t: Any) -> np.ndarray:
    """``x is None or x >= t``."""
    if isinstance(t, _Inf):
        return null if t.sign > 0 else np.ones(len(null), dtype=bool)
    return null | _np(pc.greater_equal(*_comparable(rep, x, t)))
