"""Locate rows of a compaction's input in its outputs by content, where no in-order mapping exists.

A compaction is a commit whose file actions are all ``dataChange=false`` (bin-packing
OPTIMIZE, ZORDER, the clustering OPTIMIZE of a liquid-clustered table, REORG ... APPLY
(PURGE); ours or delta-spark's, which writes no tags). It moves the live rows of the files it
removes into the files it adds without changing them: within one partition (equal partition
values) its outputs hold exactly the multiset of its inputs' live rows. Bin-packing writes each
output's rows in input order and says so (``row_level.COMPACTED_FROM_TAG``); sorting
compactions reorder rows and cannot. When rows of an input F must be marked deleted in the
outputs of such a compaction (a concurrent DELETE, UPDATE or MERGE of F, in either commit
order, or F's rows compacted twice), ``locate_rows`` finds them by their values.

Why this is exact. Two rows equal in every column of the table are interchangeable: the
table's contents are the multiset of its live rows, and a reader (a scan, a predicate, a
join, the change data feed) cannot tell which physical copy of equal rows is live. So to
delete k rows of F after F was compacted, marking any k not yet deleted rows of the outputs
that are equal to them, one output row per input row, leaves the table exactly as the serial
order would (the DML after the compaction, deleting those very copies). A row matches only
where every column is equal, partition values by construction (only outputs of F's partition
are searched), null equal to null, floats bit for bit (``-0.0`` is not ``0.0``) except that
every NaN equals every NaN: Spark's ``=`` says so, its grouping and joins normalize NaN, and no
SQL function shows a NaN's payload bits, so rows differing only there are as interchangeable as
equal rows. The
assignment is one to one (an output row is used once, never one already deleted, ``taken``)
and deterministic: outputs in path order, lowest row first. The change data feed is
unaffected: the compaction writes none, and the DML's change rows carry the same values
whichever copy is marked.

Where it refuses (``None``; the caller then keeps the file-level conflict): the table has the
``rowTracking`` feature (equal rows differ in their row ids; serialake writes no such table
today, the rule stands for when it does), the bytes to read exceed ``MAX_MATCH_BYTES``, a file
is not readable here or its column types cannot be compared exactly, every data column is
nested (nothing narrows the search before rows become Python values), or some row has no free
equal row left.

pyarrow only (no Spark): outputs are pruned with their stats where those are exact for the
column type (integral and date bounds, null counts), candidates are filtered with
``pyarrow.compute.is_in`` per column, and only the rows left are compared as Python values.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any

from serialake.core.model import features
from serialake.core.model.actions import AddFile, FileAction, Protocol
from serialake.core.model.schema import StructField, physical_name
from serialake.core.model.types import arrow_type, type_family
from serialake.core.predicates.row_eval import CannotEvaluate, RowReader
from serialake.core.txn.row_level import compaction_sources, dv_rows

__all__ = ["MAX_MATCH_BYTES", "candidate_outputs", "locate_rows"]

#: The most bytes of data files (the input and the outputs left after pruning by stats) one search
#: reads. Reading happens while committing, on the driver: beyond this a conflict is cheaper.
MAX_MATCH_BYTES = 512 * 1024 * 1024

# Stats bounds Delta writes exactly for these families (strings are truncated, timestamps cut to
# milliseconds, floats have NaN, so their bounds are left alone).
_EXACT_BOUNDS = {"integral", "date"}

Placement = dict[str, list[int]]
"""Output path -> the row indexes of that output assigned to the rows looked for, ascending."""


def candidate_outputs(adds: Iterable[AddFile], source: FileAction) -> list[AddFile]:
    """The adds that may hold ``source``'s rows without saying where: same partition values, no
    ``compactedFrom`` mapping (a tagged output lists its inputs exactly, and ``source`` is not one)."""
    pv = source.partition_values or {}
    return [a for a in adds if (a.partition_values or {}) == pv and not compaction_sources(a)]


def locate_rows(
    reader: RowReader,
    protocol: Protocol | None,
    source: FileAction,
    rows: Any,
    outputs: Sequence[AddFile],
    taken: Mapping[str, Any],
    *,
    max_bytes: int | None = None,
) -> Placement | None:
    """One free output row equal to each of ``rows`` of ``source``, or None when some cannot be located.

    ``source`` is a compaction input as removed (its deletion vector is the base the rows are
    live in); ``rows`` its physical row indexes to locate (a ``RowIndexSet``; None: every live
    row). ``outputs`` are the compaction's adds that may hold them (``candidate_outputs``);
    ``taken`` maps an output's path to its rows already deleted or assigned (``RowIndexSet``),
    which are never used. At most ``max_bytes`` (default ``MAX_MATCH_BYTES``) of files are read.
    Refusals and unreadable files give None (see the module docstring).
    """
    import pyarrow as pa

    if protocol is not None and features.has_feature(protocol, "rowTracking"):
        return None
    try:
        bound = MAX_MATCH_BYTES if max_bytes is None else max_bytes
        return _Search(reader, source, outputs, taken, bound).run(rows)
    except (CannotEvaluate, OSError, ValueError, pa.ArrowException):
        return None


class _Search:
    """One ``locate_rows`` call: the input's rows, the outputs of its partition in path order."""

    def __init__(
        self, reader: RowReader, source: FileAction, outputs: Sequence[AddFile], taken: Mapping[str, Any],
        max_bytes: int,
    ) -> None:  # fmt: skip
        parts = {c.lower() for c in reader.partition_columns}
        self.reader = reader
        self.source = source
        pv = source.partition_values or {}
        self.outputs = sorted((o for o in outputs if (o.partition_values or {}) == pv), key=lambda o: o.path)
        self.taken = taken
        self.max_bytes = max_bytes
        self.fields: list[StructField] = [f for f in reader.schema.fields if f.name.lower() not in parts]

    def run(self, rows: Any) -> Placement | None:
        import numpy as np

        if (self.source.size or 0) > self.max_bytes:
            return None
        if any(_nested(f) for f in self.fields) and all(_nested(f) for f in self.fields):
            return None  # nothing to filter with: every row of every output would become Python values
        columns, n = self._read(self.source)
        base = dv_rows(self.reader.table_path, self.source.deletion_vector).to_numpy()
        if rows is None:
            idx = np.setdiff1d(np.arange(n, dtype=np.uint64), base, assume_unique=True)
        else:
            idx = rows.to_numpy()
            if len(idx) and (int(idx[-1]) >= n or np.isin(idx, base).any()):
                raise ValueError(
                    f"rows to locate of {self.source.path} are not live rows of it (file of {n} rows)"
                )
        if not len(idx):
            return {}
        target = {f.name: _canonical(columns[f.name], f).take(idx) if columns[f.name] is not None else None
                  for f in self.fields}  # fmt: skip
        keys = _row_keys(target, self.fields, len(idx))
        wanted = Counter(keys)  # how many rows of each value are still to place
        outputs = [o for o in self.outputs if _may_hold(o, target, self.fields, len(idx))]
        if (self.source.size or 0) + sum(o.size or 0 for o in outputs) > self.max_bytes:
            return None
        placed: Placement = {}
        left = len(idx)
        for o in outputs:
            if not left:
                break
            for pos, key in self._candidates(o, target):
                if wanted[key] > 0:
                    wanted[key] -= 1
                    placed.setdefault(o.path, []).append(pos)
                    left -= 1
        return placed if not left else None

    def _read(self, add: FileAction) -> tuple[dict[str, Any], int]:
        """The table's data columns of ``add`` (logical name -> array; None where the file lacks the
        column, e.g. written before it was added) and the file's row count."""
        pf = self.reader.parquet_file(add)
        n = pf.metadata.num_rows
        in_file = {name.lower(): name for name in pf.schema_arrow.names}
        wanted = {f.name: in_file.get(physical_name(f).lower()) for f in self.fields}
        present = [c for c in wanted.values() if c is not None]
        table = pf.read(columns=present) if present else None
        out = {name: table.column(c).combine_chunks() if table is not None and c is not None else None
               for name, c in wanted.items()}  # fmt: skip
        return out, n

    def _candidates(self, o: AddFile, target: Mapping[str, Any]) -> Iterable[tuple[int, tuple[Any, ...]]]:
        """``(row, key)`` of the free rows of output ``o`` whose every primitive column holds a value
        some target row holds there (a vectorised filter), ascending."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        columns, n = self._read(o)
        free = np.ones(n, dtype=bool)
        gone = self.taken.get(o.path)
        if gone is not None and len(gone):
            used = gone.to_numpy()
            free[used[used < n].astype(np.int64)] = False
        cand: dict[str, Any] = {}
        for f in self.fields:
            mine, values = _aligned(columns[f.name], target[f.name], n, f)
            cand[f.name] = mine
            if mine is None or _nested(f):
                continue
            try:
                hit = pc.is_in(_key_array(mine), value_set=pc.unique(_key_array(values)), skip_nulls=False)
            except pa.ArrowNotImplementedError:
                continue  # no hash kernel for the type: the exact comparison alone decides
            free &= hit.to_numpy(zero_copy_only=False)
        rows = np.nonzero(free)[0]
        if not len(rows):
            return []
        picked = {name: col.take(pa.array(rows)) if col is not None else None for name, col in cand.items()}
        return zip(rows.tolist(), _row_keys(picked, self.fields, len(rows)))


def _nested(f: StructField) -> bool:
    return arrow_type(f.data_type) is None


def _canonical(arr: Any, f: StructField) -> Any:
    """``arr`` as the Arrow type of the table column (``types.arrow_type``), by an exact cast only.

    Files of one table may store a column differently (an older narrower integer after type
    widening, ``large_string``, a timestamp written without time zone); a cast that could map two
    values to one, or a type of another family, raises ``CannotEvaluate``. Nested columns are
    compared as read.
    """
    import pyarrow as pa
    import pyarrow.types as t

    want = arrow_type(f.data_type)
    if want is None or arr.type == want:
        return arr
    have = arr.type
    exact = (
        t.is_null(have)
        or (t.is_integer(have) and t.is_integer(want))
        or (t.is_floating(have) and t.is_floating(want) and have.bit_width <= want.bit_width)
        or (t.is_timestamp(have) and t.is_timestamp(want))
        or (t.is_date(have) and t.is_date(want))
        or (t.is_decimal(have) and t.is_decimal(want))
        or ((t.is_string(have) or t.is_large_string(have)) and t.is_string(want))
        or ((t.is_binary(have) or t.is_large_binary(have)) and t.is_binary(want))
    )
    if not exact:
        raise CannotEvaluate(f"column {f.name}: file type {have} is not the table's {want}")
    try:
        return arr.cast(want, safe=True)  # safe: a lossy value (overflow, truncation) raises
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise CannotEvaluate(f"column {f.name}: {have} to {want}: {e}") from None


def _aligned(mine: Any, theirs: Any, n: int, f: StructField) -> tuple[Any, Any]:
    """An output's column (``n`` rows, as read; None if the file lacks it) as the target rows' column,
    and the values the target rows hold there. A column a file lacks (written before the column was
    added) is null in every row of it."""
    import pyarrow as pa

    mine = _canonical(mine, f) if mine is not None else None
    if mine is None and theirs is None:
        return None, None
    if mine is None:
        return pa.nulls(n, theirs.type), theirs
    if theirs is None:
        return mine, pa.nulls(1, mine.type)
    if mine.type != theirs.type:
        raise CannotEvaluate(f"column {f.name}: {mine.type} in one file, {theirs.type} in another")
    return mine, theirs


def _key_array(arr: Any) -> Any:
    """``arr`` with values equal exactly when the column's values are: floats as their bit patterns
    (``-0.0`` differs from ``0.0``; every NaN one pattern), temporal types as integers."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.types as t

    if t.is_floating(arr.type):
        width = arr.type.bit_width
        values = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False))
        bits = values.view(np.uint32 if width == 32 else np.uint64 if width == 64 else np.uint16)
        nan = np.isnan(values)
        if nan.any():
            bits = np.where(nan, np.array([np.nan], dtype=values.dtype).view(bits.dtype)[0], bits)
        return pa.array(bits, mask=arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None)
    if t.is_temporal(arr.type):
        return arr.cast(pa.int64() if arr.type.bit_width == 64 else pa.int32())
    return arr


def _row_keys(columns: Mapping[str, Any], fields: Sequence[StructField], n: int) -> list[tuple[Any, ...]]:
    """One hashable key per row, equal exactly when the rows are equal in every column."""
    parts: list[list[Any]] = []
    for f in fields:
        col = columns[f.name]
        if col is None:
            parts.append([None] * n)  # a column the file lacks: null in every row
            continue
        if _nested(f):
            parts.append([_nested_key(v) for v in col.to_pylist()])
            continue
        parts.append(_key_array(col).to_pylist())
    return list(zip(*parts)) if parts else [()] * n


def _nested_key(v: Any) -> Any:
    """A nested value (struct, array, map) as a hashable key; floats bit for bit, every NaN one key."""
    if isinstance(v, float):
        return ("f", "nan") if v != v else ("f", struct.pack("<d", v))
    if isinstance(v, dict):
        return tuple((k, _nested_key(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(_nested_key(x) for x in v)
    return v


def _may_hold(o: AddFile, target: Mapping[str, Any], fields: Sequence[StructField], k: int) -> bool:
    """Whether some target row may be a row of ``o``, by ``o``'s stats.

    Bounds are used for integral and date columns (exact in Delta's stats; with a deletion
    vector they still bound the live rows, the only rows used); null counts for primitive
    columns only on a file without a deletion vector (a count of physical rows then).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    stats = o.parsed_stats()
    if not stats:
        return True
    lows, highs = stats.get("minValues") or {}, stats.get("maxValues") or {}
    nulls = stats.get("nullCount") or {}
    records = stats.get("numRecords")
    maybe = pa.array([True] * k)
    for f in fields:
        col = target[f.name]
        if col is None or _nested(f):
            continue
        key = physical_name(f)
        exact_counts = o.deletion_vector is None and isinstance(nulls.get(key), int)
        null_ok = not (exact_counts and nulls[key] == 0)
        value_ok: Any = None  # None: any non-null value may be there
        if exact_counts and records is not None and nulls[key] == records:
            value_ok = pa.scalar(False)  # every row null
        elif type_family(f.data_type) in _EXACT_BOUNDS and key in lows and key in highs:
            try:
                lo, hi = _bound(lows[key], f, col.type), _bound(highs[key], f, col.type)
            except (TypeError, ValueError, pa.ArrowException):
                lo = hi = None
            if lo is not None:
                value_ok = pc.and_(pc.greater_equal(col, lo), pc.less_equal(col, hi))
        if value_ok is None and null_ok:
            continue
        ok = pc.if_else(pc.is_null(col), pa.scalar(null_ok), value_ok if value_ok is not None else pa.scalar(True))
        maybe = pc.and_(maybe, pc.fill_null(ok, True))
    return bool(pc.any(maybe).as_py())


def _bound(value: Any, f: StructField, arrow: Any) -> Any:
    import pyarrow as pa

    if type_family(f.data_type) == "date":
        return pa.scalar(date.fromisoformat(str(value)[:10]), arrow)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"bound {value!r} of integral column {f.name}")
    return pa.scalar(value, pa.int64())
