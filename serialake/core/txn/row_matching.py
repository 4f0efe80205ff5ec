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
and deterministic: outputs in path order, their row groups in file order, lowest row first.
The change data feed is unaffected: the compaction writes none, and the DML's change rows
carry the same values whichever copy is marked.

Where it refuses (``None``; the caller then keeps the file-level conflict): the table has the
``rowTracking`` feature (equal rows differ in their row ids; serialake writes no such table
today, the rule stands for when it does), the row groups it has to read exceed
``MAX_MATCH_BYTES`` (counted as below), a file is not readable here or its column types cannot
be compared exactly, every data column is nested (nothing narrows the search before rows
become Python values), or some row has no free equal row left.

pyarrow only (no Spark), reading Parquet row groups, only the table's data columns of them:
of the input, the row groups holding the rows to locate (every row group when all live rows
are); of the outputs, one row group at a time, in order, and only until every row is placed.
An output is skipped when its Delta stats exclude every target row (integral and date bounds,
null counts), a row group when its Parquet footer statistics do (integral, date and boolean
bounds, timestamps compared at their stored unit, null counts), row by row: a target row is
admitted only by bounds it lies within in every column. Floats (NaN, ``-0.0``), strings and
binaries (bounds may be truncated) and decimals are not pruned on; missing statistics prune
nothing. The bytes counted against ``MAX_MATCH_BYTES`` are the compressed sizes of the
column chunks read (what is fetched from storage; pruned row groups and the files' other
columns cost nothing), checked before each read. Candidate rows of a row group are filtered
with ``pyarrow.compute.is_in`` per column, and only the rows left are compared as Python
values.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from serialake.core.model import features
from serialake.core.model.actions import AddFile, FileAction, Protocol
from serialake.core.model.schema import StructField, physical_name
from serialake.core.model.types import arrow_type, integral_bounds, type_family
from serialake.core.predicates.row_eval import CannotEvaluate, RowReader
from serialake.core.txn.row_level import compaction_sources, dv_rows

__all__ = ["MAX_MATCH_BYTES", "candidate_outputs", "locate_rows"]

#: The most bytes of Parquet column chunks one search reads (compressed, as stored: the input's row
#: groups holding the rows looked for and the output row groups left after pruning). Reading happens
#: while committing, on the driver: beyond this a conflict is cheaper.
MAX_MATCH_BYTES = 512 * 1024 * 1024

# Stats bounds Delta writes exactly for these families (strings are truncated, timestamps cut to
# milliseconds, floats have NaN, so their bounds are left alone).
_EXACT_BOUNDS = {"integral", "date"}
# Parquet footer statistics are exact for these families (timestamps as the stored integers, at the
# unit the column's logical type names).
_EXACT_FOOTER_BOUNDS = {"integral", "date", "boolean", "timestamp"}
# Microseconds (the table's timestamp unit) per unit of a Parquet timestamp.
_TIMESTAMP_UNITS = {"milliseconds": 1000, "microseconds": 1}

Placement = dict[str, list[int]]
"""Output path -> the row indexes of that output assigned to the rows looked for, ascending."""

_Bounds = tuple[bool, Any]
"""What one column of a file or row group may hold: ``(null possible, values)``, values None for any
non-null value, False for none, or ``(low, high)``, Arrow scalars bounding them (both inclusive)."""


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
    which are never used. The row indexes placed are the outputs' physical row indexes (file
    level, across row groups). At most ``max_bytes`` (default ``MAX_MATCH_BYTES``) of column
    chunks are read. Refusals and unreadable files give None (see the module docstring).
    """
    import pyarrow as pa

    if protocol is not None and features.has_feature(protocol, "rowTracking"):
        return None
    try:
        bound = MAX_MATCH_BYTES if max_bytes is None else max_bytes
        return _Search(reader, source, outputs, taken, bound).run(rows)
    except (CannotEvaluate, OSError, ValueError, pa.ArrowException):
        return None


@dataclass(frozen=True)
class _Layout:
    """Where the table's data columns are in one Parquet file.

    ``names``: table column name -> the file's top-level column holding it (None where the file
    lacks it, e.g. written before it was added). ``chunks``: the indexes of the column chunks
    (Parquet leaf columns) of those file columns, what reading them fetches. ``chunk``: table
    column name -> the index of its one column chunk, for the primitive columns the file has.
    """

    names: dict[str, str | None]
    chunks: tuple[int, ...]
    chunk: dict[str, int]

    @classmethod
    def of(cls, pf: Any, fields: Sequence[StructField]) -> _Layout:
        schema = pf.schema_arrow
        first: dict[str, tuple[str, int, int]] = {}  # lower-case name -> (name, first leaf, leaf count)
        at = 0
        for field in schema:
            count = _leaf_count(field.type)
            first[field.name.lower()] = (field.name, at, count)
            at += count
        if at != pf.metadata.num_columns:
            raise CannotEvaluate(f"{at} leaf columns in the schema of a file with {pf.metadata.num_columns}")
        names: dict[str, str | None] = {}
        chunks: list[int] = []
        chunk: dict[str, int] = {}
        for f in fields:
            found = first.get(physical_name(f).lower())
            names[f.name] = found[0] if found is not None else None
            if found is None:
                continue
            chunks.extend(range(found[1], found[1] + found[2]))
            if found[2] == 1 and not _nested(f):
                chunk[f.name] = found[1]
        return cls(names, tuple(chunks), chunk)

    def bytes(self, row_group: Any) -> int:
        """The compressed size of this layout's column chunks in ``row_group`` (its metadata)."""
        return sum(row_group.column(j).total_compressed_size for j in self.chunks)


def _leaf_count(t: Any) -> int:
    """How many Parquet leaf columns (column chunks per row group) a column of Arrow type ``t`` has."""
    import pyarrow.types as pt

    if pt.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pt.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    return 1


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
        self.read = 0  # bytes of column chunks read so far
        self.fields: list[StructField] = [f for f in reader.schema.fields if f.name.lower() not in parts]

    def run(self, rows: Any) -> Placement | None:
        if any(_nested(f) for f in self.fields) and all(_nested(f) for f in self.fields):
            return None  # nothing to filter with: every row of every output would become Python values
        target, k = self._targets(rows)
        if not k:
            return {}
        wanted = Counter(_row_keys(target, self.fields, k))  # how many rows of each value are still to place
        sets = self._value_sets(target)
        placed: Placement = {}
        left = k
        for o in self.outputs:
            if not left:
                break
            if not _may_hold(o, target, self.fields):
                continue
            for pos, key in self._candidates(o, target, sets):
                if wanted[key] > 0:
                    wanted[key] -= 1
                    placed.setdefault(o.path, []).append(pos)
                    left -= 1
                    if not left:
                        break  # the generator reads no further row group
        return placed if not left else None

    def _targets(self, rows: Any) -> tuple[dict[str, Any], int]:
        """The rows to locate (``rows`` of the input, None: its live rows) as columns of the table's
        types (None where the input lacks the column), and how many there are.

        Only the input's row groups holding them are read; their row indexes are re-based onto
        the rows of those row groups.
        """
        import numpy as np

        pf = self.reader.parquet_file(self.source)
        meta = pf.metadata
        n = meta.num_rows
        base = dv_rows(self.reader.table_path, self.source.deletion_vector).to_numpy()
        if rows is None:
            idx = np.setdiff1d(np.arange(n, dtype=np.uint64), base, assume_unique=True)
        else:
            idx = rows.to_numpy()
            if len(idx) and (int(idx[-1]) >= n or np.isin(idx, base).any()):
                raise ValueError(f"rows to locate of {self.source.path} are not live rows of it (file of {n} rows)")
        if not len(idx):
            return {}, 0
        idx = idx.astype(np.int64)
        sizes = np.array([meta.row_group(r).num_rows for r in range(meta.num_row_groups)], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(sizes)))
        group = np.searchsorted(starts, idx, side="right") - 1  # the row group of each row (empty ones skipped)
        groups = np.unique(group)
        read_starts = np.concatenate(([0], np.cumsum(sizes[groups])))  # where each lands in what is read
        local = idx - starts[group] + read_starts[np.searchsorted(groups, group)]
        columns = self._read(pf, _Layout.of(pf, self.fields), groups.tolist())
        target = {f.name: _canonical(columns[f.name], f).take(local) if columns[f.name] is not None else None
                  for f in self.fields}  # fmt: skip
        return target, len(idx)

    def _read(self, pf: Any, layout: _Layout, groups: Sequence[int]) -> dict[str, Any]:
        """The table's data columns of row groups ``groups`` of ``pf`` (logical name -> array; None
        where the file lacks the column), counted against the bound before they are read."""
        self.read += sum(layout.bytes(pf.metadata.row_group(r)) for r in groups)
        if self.read > self.max_bytes:
            raise CannotEvaluate(f"the search would read more than {self.max_bytes} bytes of column chunks")
        present = [c for c in layout.names.values() if c is not None]
        table = pf.read_row_groups(groups, columns=present) if present else None
        return {name: table.column(c).combine_chunks() if table is not None and c is not None else None
                for name, c in layout.names.items()}  # fmt: skip

    def _value_sets(self, target: Mapping[str, Any]) -> dict[str, Any]:
        """Per primitive column, the distinct values the target rows hold there (as ``_key_array``);
        absent where no hash kernel serves the type (the exact comparison alone decides)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        sets: dict[str, Any] = {}
        for f in self.fields:
            if _nested(f):
                continue
            values = target[f.name] if target[f.name] is not None else pa.nulls(1, arrow_type(f.data_type))
            try:
                sets[f.name] = pc.unique(_key_array(values))
            except pa.ArrowNotImplementedError:
                continue
        return sets

    def _candidates(
        self, o: AddFile, target: Mapping[str, Any], sets: Mapping[str, Any]
    ) -> Iterator[tuple[int, tuple[Any, ...]]]:
        """``(row, key)`` of the free rows of output ``o`` whose every primitive column holds a value
        some target row holds there (a vectorised filter), ascending; ``row`` is the file's physical
        row index. Row groups are read one at a time, as the caller asks for more rows, and only
        those whose footer statistics admit one of the target rows and that have a free row."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        pf = self.reader.parquet_file(o)
        layout = _Layout.of(pf, self.fields)
        gone = self.taken.get(o.path)
        used = gone.to_numpy().astype(np.int64) if gone is not None and len(gone) else np.zeros(0, np.int64)
        end = 0
        for r in range(pf.metadata.num_row_groups):
            meta = pf.metadata.row_group(r)
            first, end = end, end + meta.num_rows
            free = np.ones(meta.num_rows, dtype=bool)
            free[used[(used >= first) & (used < end)] - first] = False
            if not free.any():
                continue
            if not _some_row_within(target, self.fields, _footer_bounds(meta, layout, self.fields)):
                continue
            columns = self._read(pf, layout, [r])
            cand: dict[str, Any] = {}
            for f in self.fields:
                mine = _aligned(columns[f.name], target[f.name], meta.num_rows, f)
                cand[f.name] = mine
                if mine is not None and f.name in sets:
                    hit = pc.is_in(_key_array(mine), value_set=sets[f.name], skip_nulls=False)
                    free &= hit.to_numpy(zero_copy_only=False)
            rows = np.nonzero(free)[0]
            if not len(rows):
                continue
            picked = {name: col.take(pa.array(rows)) if col is not None else None for name, col in cand.items()}
            yield from zip((rows + first).tolist(), _row_keys(picked, self.fields, len(rows)))


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


def _aligned(mine: Any, theirs: Any, n: int, f: StructField) -> Any:
    """An output's column (``n`` rows, as read; None if the file lacks it) as the target rows' column
    ``theirs`` (None if the input lacks it): of the table's type, null in every row where the output
    lacks the column (written before the column was added); None where neither file has it."""
    import pyarrow as pa

    mine = _canonical(mine, f) if mine is not None else None
    if mine is None:
        return pa.nulls(n, theirs.type) if theirs is not None else None
    if theirs is not None and mine.type != theirs.type:
        raise CannotEvaluate(f"column {f.name}: {mine.type} in one file, {theirs.type} in another")
    return mine


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


def _some_row_within(target: Mapping[str, Any], fields: Sequence[StructField], bounds: Mapping[str, _Bounds]) -> bool:
    """Whether one of the target rows lies within ``bounds`` in every column they bound (row by
    row, not column by column; a column without bounds, or one the input lacks, bounds nothing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    maybe: Any = None  # per target row: within the bounds of every column so far
    for f in fields:
        col, bound = target[f.name], bounds.get(f.name)
        if col is None or bound is None:
            continue
        null_ok, values = bound
        if values is None and null_ok:
            continue
        if values is None or values is False:
            value_ok: Any = pa.scalar(values is None)
        else:
            value_ok = pc.and_(pc.greater_equal(col, values[0]), pc.less_equal(col, values[1]))
        ok = pc.if_else(pc.is_null(col), pa.scalar(null_ok), value_ok)
        maybe = ok if maybe is None else pc.and_(maybe, ok)
    return maybe is None or bool(pc.any(maybe).as_py())


def _may_hold(o: AddFile, target: Mapping[str, Any], fields: Sequence[StructField]) -> bool:
    """Whether some target row may be a row of ``o``, by ``o``'s Delta stats.

    Bounds are used for integral and date columns (exact in Delta's stats; with a deletion
    vector they still bound the live rows, the only rows used); null counts for primitive
    columns only on a file without a deletion vector (a count of physical rows then).
    """
    import pyarrow as pa

    stats = o.parsed_stats()
    if not stats:
        return True
    lows, highs = stats.get("minValues") or {}, stats.get("maxValues") or {}
    nulls = stats.get("nullCount") or {}
    records = stats.get("numRecords")
    bounds: dict[str, _Bounds] = {}
    for f in fields:
        col = target[f.name]
        if col is None or _nested(f):
            continue
        key = physical_name(f)
        exact_counts = o.deletion_vector is None and isinstance(nulls.get(key), int)
        values: Any = None
        if exact_counts and records is not None and nulls[key] == records:
            values = False  # every row null
        elif type_family(f.data_type) in _EXACT_BOUNDS and key in lows and key in highs:
            try:
                values = (_bound(lows[key], f, col.type), _bound(highs[key], f, col.type))
            except (TypeError, ValueError, pa.ArrowException):
                values = None
        bounds[f.name] = (not (exact_counts and nulls[key] == 0), values)
    return _some_row_within(target, fields, bounds)


def _bound(value: Any, f: StructField, arrow: Any) -> Any:
    import pyarrow as pa

    if type_family(f.data_type) == "date":
        return pa.scalar(date.fromisoformat(str(value)[:10]), arrow)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"bound {value!r} of integral column {f.name}")
    return pa.scalar(value, pa.int64())


def _footer_bounds(meta: Any, layout: _Layout, fields: Sequence[StructField]) -> dict[str, _Bounds]:
    """What each column may hold in one row group (``meta``, its metadata), by its column chunk's
    Parquet statistics: exact for every row of it (a deletion vector or taken rows only leave
    fewer). A column the file lacks holds only nulls; missing statistics bound nothing."""
    bounds: dict[str, _Bounds] = {}
    for f in fields:
        j = layout.chunk.get(f.name)
        if layout.names[f.name] is None:
            bounds[f.name] = (True, False)
        elif j is not None and type_family(f.data_type) in _EXACT_FOOTER_BOUNDS:
            stats = meta.column(j).statistics
            if stats is None:
                continue
            counted = stats.has_null_count
            if counted and stats.null_count == meta.num_rows:
                bounds[f.name] = (True, False)  # every row null
            else:
                values = _footer_range(stats, f) if stats.has_min_max else None
                bounds[f.name] = (not (counted and stats.null_count == 0), values)
    return bounds


def _footer_range(stats: Any, f: StructField) -> Any:
    """The values a column chunk's statistics bound, as ``_Bounds`` values (``(low, high)``, False when
    no value of the table column's type is within them), or None where the statistics are not
    exact for the column (another stored type, a timestamp not stored as INT64 at ms, us or ns).

    Integers compare by value (a narrower stored type, type widening); dates by their day
    numbers; timestamps by the stored integers brought to microseconds, rounding the range inward
    from nanoseconds (a value equals a microsecond one only when a multiple of 1000)."""
    import pyarrow as pa

    family = type_family(f.data_type)
    arrow = arrow_type(f.data_type)
    kind = stats.logical_type.type
    if family == "boolean":
        lo, hi = stats.min, stats.max
        ok = stats.physical_type == "BOOLEAN" and isinstance(lo, bool) and isinstance(hi, bool)
        return (pa.scalar(lo, arrow), pa.scalar(hi, arrow)) if ok else None
    if family == "integral" and stats.physical_type in ("INT32", "INT64") and kind in ("INT", "NONE"):
        lo, hi = stats.min, stats.max
        limits = integral_bounds(f.data_type) or (-(1 << 63), (1 << 63) - 1)
    elif family == "date" and stats.physical_type == "INT32" and kind == "DATE":
        lo, hi = stats.min_raw, stats.max_raw
        limits = (-(1 << 31), (1 << 31) - 1)
    elif family == "timestamp" and stats.physical_type == "INT64" and kind == "TIMESTAMP":
        unit = json.loads(stats.logical_type.to_json()).get("timeUnit")
        lo, hi = stats.min_raw, stats.max_raw
        if unit == "nanoseconds":
            lo, hi = -(-lo // 1000), hi // 1000
        elif unit in _TIMESTAMP_UNITS:
            lo, hi = lo * _TIMESTAMP_UNITS[unit], hi * _TIMESTAMP_UNITS[unit]
        else:
            return None
        limits = (-(1 << 63), (1 << 63) - 1)
    else:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
        return None
    lo, hi = max(lo, limits[0]), min(hi, limits[1])  # the table column's values lie within the limits
    return (pa.scalar(lo, arrow), pa.scalar(hi, arrow)) if lo <= hi else False
