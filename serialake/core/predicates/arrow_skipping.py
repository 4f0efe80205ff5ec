"""Vectorized data skipping: ``skipping.compile_predicate`` over an Arrow table of add actions.

``files_table`` turns ``AddFile`` objects into an Arrow table whose columns are the fields of
the checkpoint's ``add`` struct (``path``, ``partitionValues``, ``size``, ``modificationTime``,
``dataChange``, ``stats``, ``tags``, ``deletionVector``, ...); a checkpoint's ``add`` column
flattened (``pa.Table.from_struct_array``) has the same shape, possibly with ``stats_parsed``.

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
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from serialake.core.log.arrow_memory import log_pool, release_memory
from serialake.core.log.checkpoint import CHECKPOINT_SCHEMA
from serialake.core.model.actions import AddFile
from serialake.core.model.schema import StructType, physical_name
from serialake.core.model.types import type_family
from serialake.core.predicates import skipping as S
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
    "files_table",
    "reference_inputs",
    "table_may_match",
]

#: How rows use a ``stats_parsed`` column: ``fill`` where ``stats`` is null, ``prefer`` wherever
#: it is not null, ``ignore`` never (then a row is exactly the AddFile serialake's reader builds).
STATS_PARSED_MODES = ("fill", "prefer", "ignore")

_T, _F, _N, _ALL = S._T, S._F, S._N, S._ALL
_AND = np.array(S._AND, dtype=np.uint8)
_OR = np.array(S._OR, dtype=np.uint8)
_NOT = np.array(S._NOT, dtype=np.uint8)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EXACT_FLOAT_INT = 2.0**53  # JSON integers below this survive a trip through float64
_MAX_TS_BEFORE_WIDENING = dt.datetime.max - dt.timedelta(milliseconds=1)
_ONE_MS = dt.timedelta(milliseconds=1)
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!=", "<=>": "<=>"}
# Exceptions the per-file code may raise while evaluating (it only catches some of them).
_REFERENCE_ERRORS = (ArithmeticError, TypeError, ValueError, AttributeError, LookupError)
_ADD_TYPE: pa.StructType = CHECKPOINT_SCHEMA.field("add").type
_STATS_OBJECTS = ("nullCount", "minValues", "maxValues")


# ---------------------------------------------------------------------------------------------
# AddFiles as a table
# ---------------------------------------------------------------------------------------------


def files_table(files: Sequence[AddFile]) -> pa.Table:
    """The files as a table with the columns (names and types) of the checkpoint's ``add`` struct.

    ``partitionValues`` and ``tags`` are ``map<string, string>`` (a None dict is a null map),
    ``stats`` the JSON string as is (null when None), ``deletionVector`` a struct (null when the
    file has none). Partition values must be strings or None, as in the log; a string Arrow
    cannot hold (a lone surrogate) raises ``ValueError`` naming the file.
    """
    by_key = {key: attr for attr, key in AddFile.KEYS.items()}
    columns: dict[str, pa.Array] = {}
    for i in range(_ADD_TYPE.num_fields):
        f = _ADD_TYPE.field(i)
        values = [getattr(a, by_key[f.name], None) for a in files] if f.name in by_key else [None] * len(files)
        if pa.types.is_map(f.type):
            values = [None if v is None else list(v.items()) for v in values]
        elif f.name == "deletionVector":
            values = [
                None
                if dv is None
                else {
                    "storageType": dv.storage_type,
                    "pathOrInlineDv": dv.path_or_inline_dv,
                    "offset": dv.offset,
                    "sizeInBytes": dv.size_in_bytes,
                    "cardinality": dv.cardinality,
                }
                for dv in values
            ]
        try:
            columns[f.name] = pa.array(values, type=f.type)
        except UnicodeEncodeError:  # a lone surrogate (a log's "\ud800"): Arrow strings are UTF-8
            bad = next(a.path for a, v in zip(files, values) if not _utf8_encodable(v))
            raise ValueError(f"add {bad!r}: its {f.name} is not valid Unicode (a lone surrogate)") from None
    return pa.table(columns, schema=pa.schema(list(_ADD_TYPE)))


def _utf8_encodable(value: Any) -> bool:
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Per-file inputs of a table (the reference the vectorized matcher agrees with)
# ---------------------------------------------------------------------------------------------


def _parsed_stats(text: str | None) -> dict[str, Any] | None:
    """``AddFile.parsed_stats`` of a stats string."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _naive_utc(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _naive_utc(v) for k, v in value.items()}
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _combined(column: Any) -> pa.Array:
    if not isinstance(column, pa.ChunkedArray):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _string_column(table: pa.Table, name: str) -> pa.Array:
    if name not in table.column_names:
        return pa.nulls(table.num_rows, pa.string())
    arr = _combined(table.column(name))
    return arr if arr.type == pa.string() else arr.cast(pa.string())


def _normalized_stats_parsed(arr: pa.Array) -> pa.Array:
    """``stats_parsed`` with timestamps in microseconds (how both evaluators read it)."""
    if pa.types.is_timestamp(arr.type):
        return arr if arr.type.unit == "us" else arr.cast(pa.timestamp("us", arr.type.tz), safe=False)
    if not pa.types.is_struct(arr.type):
        return arr
    children = [_normalized_stats_parsed(c) for c in arr.flatten()]
    fields = [pa.field(arr.type.field(i).name, c.type) for i, c in enumerate(children)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=arr.is_null())


def _stats_sources(table: pa.Table, mode: str) -> tuple[np.ndarray, pa.Array | None]:
    """(rows that take their stats from ``stats_parsed``, the normalized ``stats_parsed``)."""
    n = table.num_rows
    if mode not in STATS_PARSED_MODES:
        raise ValueError(f"stats_parsed must be one of {STATS_PARSED_MODES}, got {mode!r}")
    if mode == "ignore" or "stats_parsed" not in table.column_names:
        return np.zeros(n, dtype=bool), None
    parsed = _combined(table.column("stats_parsed"))
    if not pa.types.is_struct(parsed.type):
        return np.zeros(n, dtype=bool), None
    use = _np(parsed.is_valid())
    if mode == "fill":
        use &= _np(_string_column(table, "stats").is_null())
    return use, _normalized_stats_parsed(parsed)


def _per_file_inputs(
    table: pa.Table, *, parsed: pa.Array | None = None, stats: pa.Array | None = None
) -> list[tuple[dict[str, Any], Any]]:
    """``(partition values, stats)`` per row: stats from ``parsed`` (stats_parsed) or the ``stats`` strings."""
    pvs = _partition_dicts(table)
    if parsed is not None:
        return list(zip(pvs, (_naive_utc(v) for v in parsed.to_pylist())))
    assert stats is not None
    return list(zip(pvs, (_parsed_stats(s) for s in stats.to_pylist())))


def _partition_dicts(table: pa.Table) -> list[dict[str, Any]]:
    if "partitionValues" not in table.column_names:
        return [{} for _ in range(table.num_rows)]
    return [dict(v) if v else {} for v in _combined(table.column("partitionValues")).to_pylist()]


def reference_inputs(table: pa.Table, *, stats_parsed: str = "fill") -> list[tuple[dict[str, Any], Any]]:
    """Per row, the ``(partition_values, stats)`` the per-file matcher is given for it.

    ``partition_values`` is the ``partitionValues`` map as a dict (``{}`` when null or absent),
    ``stats`` is ``AddFile.parsed_stats()`` of the ``stats`` string, or, for rows that use
    ``stats_parsed`` (see ``compile_arrow``), that struct as a dict (timestamps as naive UTC
    datetimes, as the per-file code compares them). For a table from ``files_table`` this is
    ``(f.partition_values or {}, f.parsed_stats())`` of each file.
    """
    use, parsed = _stats_sources(table, stats_parsed)
    pvs = _partition_dicts(table)
    texts = _string_column(table, "stats").to_pylist()
    parsed_values = parsed.to_pylist() if parsed is not None and use.any() else None
    out: list[tuple[dict[str, Any], Any]] = []
    for i, pv in enumerate(pvs):
        if parsed_values is not None and use[i]:
            out.append((pv, _naive_utc(parsed_values[i])))
        else:
            out.append((pv, _parsed_stats(texts[i])))
    return out


# ---------------------------------------------------------------------------------------------
# Small Arrow / numpy helpers
# ---------------------------------------------------------------------------------------------


def _np(arr: Any) -> np.ndarray:
    """A boolean Arrow array (nulls as False) as a numpy bool array."""
    arr = _combined(arr)
    if arr.null_count:
        arr = arr.fill_null(False)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _valid(arr: pa.Array) -> np.ndarray:
    return _np(arr.is_valid())


def _struct_fields(arr: pa.Array) -> dict[str, pa.Array]:
    """A struct array's children by name (parent nulls applied); duplicate names go per file."""
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    if len(set(names)) != len(names):
        raise _Fallback
    return dict(zip(names, arr.flatten()))


def _cast(arr: pa.Array, target: pa.DataType) -> pa.Array:
    try:
        return arr.cast(target)
    except pa.ArrowInvalid:  # e.g. a uint64 past int64: the per-file code compares Python ints
        raise _Fallback from None


def _take(arr: pa.Array, index: np.ndarray) -> pa.Array:
    """``arr[index]`` with null where ``index`` is negative."""
    return arr.take(pa.array(index, type=pa.int64(), mask=index < 0))


class _Fallback(Exception):
    """Evaluate every row of this table per file (the per-file code raised, or the input is odd)."""


class _Inf:
    __slots__ = ("sign",)

    def __init__(self, sign: int) -> None:
        self.sign = sign


_POS, _NEG = _Inf(1), _Inf(-1)


# ---------------------------------------------------------------------------------------------
# Columns and bounds
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PartCol:
    name: str  # the schema field's name
    names: tuple[str, ...]  # looked up in partitionValues in this order, then case-insensitively
    data_type: Any


@dataclass(frozen=True)
class _StatsCol:
    name: str
    names: tuple[str, ...]  # physical name first, as stats are keyed
    family: str
    kind: str


# JSON type of a stats bound per column family.
_JSON_TYPE = {
    "integral": pa.int64(),
    "fractional": pa.float64(),
    "decimal": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "date": pa.string(),
    "timestamp": pa.string(),
}


@dataclass
class _Bounds:
    """Per-row domain of one stats column: bounds in one representation, and the two flags.

    ``rep``: int64, float64, decjson (float64 read as ``Decimal(repr(f))``, how the per-file
    code reads a JSON float of a decimal column), decimal (decimal128/256), string, bool,
    date32, ts (timestamp[us], naive UTC).
    """

    rep: str
    lo: pa.Array
    hi: pa.Array
    may_null: np.ndarray
    may_value: np.ndarray


def _parse_distinct(arr: pa.Array, cast: Callable[[Any], Any], out_type: pa.DataType) -> pa.Array:
    """``cast`` applied once per distinct string (None where it fails, as the per-file code does)."""
    encoded = pc.dictionary_encode(arr)
    values = []
    for text in encoded.dictionary.to_pylist():
        try:
            values.append(cast(text))
        except S._CAST_ERRORS:
            values.append(None)
    return pa.array(values, type=out_type).take(encoded.indices)


# The shapes Delta writes date and timestamp stats in: read with numpy, other strings by Python.
_DATE_SHAPE = "dddd-dd-dd"
_TS_SHAPES = ("dddd-dd-ddTdd:dd:dd.ddd", "dddd-dd-ddTdd:dd:dd.dddZ")
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def _number(digits: np.ndarray, first: int, last: int) -> np.ndarray:
    """The decimal number in columns ``first:last`` of a (rows, characters) array of digit values."""
    powers = 10 ** np.arange(last - first - 1, -1, -1, dtype=np.int64)
    return digits[:, first:last].astype(np.int64) @ powers


def _fixed_width(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each start, as a (rows, width) array (a view when they lie back to back)."""
    if starts.size and np.array_equal(starts, starts[0] + width * np.arange(starts.size)):
        return data[starts[0] : starts[0] + width * starts.size].reshape(starts.size, width)
    return data[starts[:, None] + np.arange(width)]


def _parse_dates(arr: pa.Array, *, timestamps: bool) -> pa.Array:
    """``skipping._to_date`` / ``_to_timestamp`` of every string, as date32 / timestamp[us] (null: fails)."""
    n = len(arr)
    data, offsets = _utf8(arr)
    starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
    valid = _valid(arr)
    out = np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    for shape in _TS_SHAPES if timestamps else (_DATE_SHAPE,):
        rows = np.nonzero(valid & (lengths == len(shape)))[0]
        if not rows.size:
            continue
        chars = _fixed_width(data, starts[rows], len(shape))
        is_digit = np.array([ch == "d" for ch in shape])
        literal = np.array([0 if ch == "d" else ord(ch) for ch in shape], dtype=np.uint8)
        digits = chars - np.uint8(48)  # wraps below '0': not <= 9
        ok = np.where(is_digit, digits <= 9, chars == literal).all(axis=1)
        year, month, day = _number(digits, 0, 4), _number(digits, 5, 7), _number(digits, 8, 10)
        leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
        month_days = _DAYS_IN_MONTH[np.clip(month, 0, 12)] + ((month == 2) & leap)
        ok &= (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= month_days)
        # Days since 1970-01-01 (proleptic Gregorian, as Python's date).
        y = year - (month <= 2)
        era, yoe = y // 400, y % 400
        doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
        days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
        if timestamps:
            hour, minute, second = _number(digits, 11, 13), _number(digits, 14, 16), _number(digits, 17, 19)
            ok &= (hour < 24) & (minute < 60) & (second < 60)
            days = (((days * 24 + hour) * 60 + minute) * 60 + second) * 1_000_000 + _number(digits, 20, 23) * 1000
        out[rows[ok]] = days[ok]
        done[rows[ok]] = True
    target = pa.timestamp("us") if timestamps else pa.date32()
    fast = pa.array(out, type=pa.int64(), mask=~done).cast(pa.int64() if timestamps else pa.int32()).view(target)
    rest = valid & ~done
    if not rest.any():
        return fast
    index = np.nonzero(rest)[0]
    slow = _parse_distinct(arr.take(pa.array(index)), S._to_timestamp if timestamps else S._to_date, target)
    where = np.full(n, -1, dtype=np.int64)
    where[index] = np.arange(index.size)
    return pc.if_else(pa.array(done), fast, _take(slow, where))


# ---------------------------------------------------------------------------------------------
# Reading stats JSON with pyarrow.json
# ---------------------------------------------------------------------------------------------

_ASCII_ESCAPE = r"\\u(00[0-7][0-9a-fA-F]|212[aA])"  # escapes that spell ASCII (or the Kelvin sign)
_JSON_SPACE = np.zeros(256, dtype=bool)
_JSON_SPACE[[0x20, 0x09, 0x0A, 0x0D]] = True


def _utf8(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(the bytes of a string array's values, the n + 1 offsets of its rows in them)."""
    buffers = strings.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(strings) + 1, offset=strings.offset * 4)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, dtype=np.uint8)
    return data, offsets.astype(np.int64)


def _scan(data: np.ndarray, values: bytes) -> dict[int, np.ndarray]:
    """Positions of each byte of ``values`` in ``data`` (in slices: no full-size temporaries)."""
    step = 1 << 18
    found: list[np.ndarray] = []
    for start in range(0, len(data), step):
        part = data[start : start + step]
        hit = part == values[0]
        for v in values[1:]:
            hit |= part == v
        where = np.flatnonzero(hit)
        if where.size:
            found.append(where + start)
    positions = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    at = data[positions]
    return {v: positions[at == v] for v in values}


def _find(data: np.ndarray, pattern: bytes, anchor: int, anchors: np.ndarray) -> np.ndarray:
    """Start positions of ``pattern`` in ``data``, given the positions of its byte at ``anchor``."""
    found = anchors - anchor
    found = found[(found >= 0) & (found <= len(data) - len(pattern))]
    if not found.size:
        return found
    window = data[found[:, None] + np.arange(len(pattern))]
    return found[(window == np.frombuffer(pattern, dtype=np.uint8)).all(axis=1)]


def _rows_at(offsets: np.ndarray, positions: np.ndarray, n: int) -> np.ndarray:
    """Whether each of the n rows holds one of the byte ``positions``."""
    out = np.zeros(n, dtype=bool)
    if positions.size:
        rows = np.searchsorted(offsets, positions, side="right") - 1
        out[rows[(rows >= 0) & (rows < n)]] = True
    return out


def _screen_json(stats: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(rows with a stats string, rows whose text ``pyarrow.json`` may not read as ``json.loads`` does).

    The second: anything but ``{...}`` (a bare ``null`` even crashes the reader), line breaks
    (they split rows), ``NaN`` / ``Inf`` (the reader takes more spellings than ``json.loads``).
    """
    n = len(stats)
    data, offsets = _utf8(stats)
    starts, ends = offsets[:-1], offsets[1:]
    present = _valid(stats) & (ends > starts)
    bad = np.zeros(n, dtype=bool)
    rows = np.nonzero(present)[0]
    bad[rows] = (data[starts[rows]] != ord("{")) | (data[ends[rows] - 1] != ord("}"))
    at = _scan(data, b"\n\rIN")
    bad |= _rows_at(offsets, np.concatenate([at[0x0A], at[0x0D]]), n)
    bad |= _rows_at(offsets, _find(data, b"Inf", 0, at[ord("I")]), n)
    bad |= _rows_at(offsets, _find(data, b"NaN", 0, at[ord("N")]), n)
    return present, bad & present


def _case_variants(texts: pa.Array, names: Sequence[str]) -> np.ndarray:
    """Rows that may hold a key the per-file lookup matches to one of ``names`` only case-insensitively.

    Conservative: also rows whose text cannot rule it out (escapes that spell ASCII; for names
    with quotes, slashes or non-ASCII characters, any escape or any non-ASCII character).
    """
    n = len(texts)
    bad = np.zeros(n, dtype=bool)
    data, offsets = _utf8(texts)
    has_escape = _rows_at(offsets, _scan(data, b"\\")[ord("\\")], n)
    if has_escape.any():
        rows = np.nonzero(has_escape)[0]
        bad[rows[_np(pc.match_substring_regex(texts.take(pa.array(rows)), _ASCII_ESCAPE))]] = True
    if any(not name.isascii() or any(ch in '"\\/' or ch < " " for ch in name) for name in names):
        bad |= has_escape
    if any(not name.isascii() for name in names):
        bad |= ~_np(pc.string_is_ascii(texts))
    lowered: pa.Array | None = None
    for name in sorted(set(names)):
        low = name.lower()
        if not low.isascii():
            continue  # in the ASCII rows left, no key can match it
        if lowered is None:
            lowered = pc.utf8_lower(texts)  # maps the Kelvin sign to k, as str.lower does
        bad |= _np(pc.greater(pc.count_substring(lowered, f'"{low}"'), pc.count_substring(texts, f'"{name}"')))
    return bad


def _maybe_empty(stats: pa.Array) -> np.ndarray:
    """Rows whose stats may hold a ``numRecords`` equal to 0 in Python (0, -0, 0.0, 0e1, false).

    Also rows with escapes (a key could spell numRecords). Other rows hold no such value.
    """
    n = len(stats)
    data, offsets = _utf8(stats)
    found = _scan(data, b"\\R")
    maybe = _rows_at(offsets, found[ord("\\")], n)
    at = _find(data, b'"numRecords"', 4, found[ord("R")]) + 12
    if not at.size:
        return maybe
    ends = offsets[np.searchsorted(offsets, at - 1, side="right")]  # the end of each match's row
    last = len(data) - 1
    seen_colon = False
    for _ in range(1 << 12):
        inside = at < ends
        byte = np.where(inside, data[np.minimum(at, last)], 0)
        space = inside & _JSON_SPACE[byte]
        if space.any():
            at = at + space
            continue
        if seen_colon:
            zero_like = ~inside | (byte == ord("-")) | (byte == ord("0")) | (byte == ord("f"))
            return maybe | _rows_at(offsets, at[zero_like], n)
        colon = inside & (byte == ord(":"))  # a key, then its value; elsewhere it is a value: no match
        at, ends = at[colon] + 1, ends[colon]
        seen_colon = True
    return np.ones(n, dtype=bool)  # absurdly long blank runs: let the per-file code decide


def _read_lines(strings: pa.Array, schema: pa.Schema) -> pa.Table:
    pool = log_pool()
    joined = pc.binary_join_element_wise(strings, "", "\n", memory_pool=pool)
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32, count=len(joined) + 1, offset=joined.offset * 4)
    data = joined.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return pa_json.read_json(
        pa.BufferReader(data),
        read_options=pa_json.ReadOptions(block_size=1 << 20),
        parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        memory_pool=pool,
    )


def _read_json(strings: pa.Array, schema: pa.Schema) -> tuple[pa.Table, np.ndarray]:
    """Each string (a screened JSON object) parsed; rows the reader rejects come back null and flagged."""
    n = len(strings)
    failed = np.zeros(n, dtype=bool)
    pieces: list[pa.Table] = []

    def attempt(start: int, stop: int) -> None:
        try:
            t = _read_lines(strings.slice(start, stop - start), schema)
            if t.num_rows == stop - start:
                pieces.append(t.cast(schema))
                return
        except pa.ArrowException:
            pass
        if stop - start == 1:
            failed[start] = True
            pieces.append(pa.table({f.name: pa.nulls(1, f.type) for f in schema}, schema=schema))
            return
        mid = (start + stop) // 2
        attempt(start, mid)
        attempt(mid, stop)

    for start in range(0, n, _JSON_ROWS):  # in slices: the joined text of all rows is never held at once
        attempt(start, min(n, start + _JSON_ROWS))
    table = pa.concat_tables(pieces) if pieces else schema.empty_table()
    return table, failed


#: Blocks of at least this many rows give freed temporaries back once their partition
#: codes are computed (``release_memory``): smaller ones are not worth the call.
_RELEASE_ROWS = 1 << 16

#: Stats strings parsed per ``pyarrow.json`` call.
_JSON_ROWS = 1 << 17


# ---------------------------------------------------------------------------------------------
# Evaluation context: one table, one stats source
# ---------------------------------------------------------------------------------------------


class _Ctx:
    """What a plan reads from one table: partition value codes, stats bounds, rows done per file."""

    def __init__(
        self, matcher: ArrowMatcher, table: pa.Table, parsed: pa.Array | None, cache: SkipCache | None = None
    ) -> None:
        self.m = matcher
        self.table = table
        self.parsed = parsed  # normalized stats_parsed when this table's rows use it, else None
        self.cache = cache
        self.n = table.num_rows
        self.fallback = np.zeros(self.n, dtype=bool)  # rows evaluated entirely per file
        self.zero = np.zeros(self.n, dtype=bool)  # rows whose stats say numRecords == 0
        self.parts: dict[str, tuple[np.ndarray, list[str | None]]] = {}
        self.bounds: dict[str, _Bounds] = {}
        self._inputs: list[tuple[dict[str, Any], Any]] | None = None
        self._stats: pa.Array | None = None

    # -- per-file inputs ------------------------------------------------------------------

    def inputs_at(self, rows: np.ndarray) -> list[tuple[dict[str, Any], Any]]:
        """``inputs()`` of the given rows (a few rows are converted alone)."""
        if self._inputs is not None or rows.size * 8 >= self.n:
            inputs = self.inputs()
            return [inputs[i] for i in rows]
        index = pa.array(rows, type=pa.int64())
        names = [c for c in ("partitionValues",) if c in self.table.column_names]
        if self.parsed is not None:
            return _per_file_inputs(self.table.select(names).take(index), parsed=self.parsed.take(index))
        return _per_file_inputs(self.table.select(names).take(index), stats=self.stats().take(index))

    def inputs(self) -> list[tuple[dict[str, Any], Any]]:
        if self._inputs is None:
            if self.parsed is not None:
                self._inputs = _per_file_inputs(self.table, parsed=self.parsed)
            else:
                self._inputs = _per_file_inputs(self.table, stats=self.stats())
        return self._inputs

    def stats(self) -> pa.Array:
        if self._stats is None:
            self._stats = _string_column(self.table, "stats")
        return self._stats

    # -- partition values -------------------------------------------------------------------

    def partition(self, col: _PartCol) -> tuple[np.ndarray, list[str | None]]:
        """(code per row, value per code): the string the per-file lookup finds (None: missing or null)."""
        got = self.parts.get(col.name)
        if got is not None:
            return got
        key = ("partition", col.name, col.names)
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None:
            if cached[2] is not None:
                self.fallback |= cached[2]
            got = (cached[0], cached[1])
            self.parts[col.name] = got
            return got
        n = self.n
        if "partitionValues" not in self.table.column_names or n == 0:
            got = (np.zeros(n, dtype=np.int64), [None])
            self.parts[col.name] = got
            return got
        maps = _combined(self.table.column("partitionValues"))
        offsets = np.asarray(maps.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        start, stop = int(offsets[0]), int(offsets[-1])
        keys = maps.keys.slice(start, stop - start)
        items = maps.items.slice(start, stop - start)
        parents = np.repeat(np.arange(n), np.diff(offsets))
        row_valid = _valid(maps)
        lowered = {name.lower() for name in col.names}
        encoded = pc.dictionary_encode(keys if keys.type == pa.string() else keys.cast(pa.string()))
        hit_key = np.array([k.lower() in lowered for k in encoded.dictionary.to_pylist()], dtype=bool)
        key_index = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        hit = hit_key[key_index] & row_valid[parents] if len(hit_key) else np.zeros(len(keys), dtype=bool)
        entries = np.nonzero(hit)[0]
        owners = parents[entries]
        counts = np.bincount(owners, minlength=n)
        doubled = counts > 1  # two keys match the column: the per-file lookup's order decides
        self.fallback |= doubled
        row_entry = np.full(n, -1, dtype=np.int64)
        row_entry[owners] = entries
        raw = _take(items if items.type == pa.string() else items.cast(pa.string()), row_entry)
        enc = pc.dictionary_encode(raw)
        values: list[str | None] = [*enc.dictionary.to_pylist(), None]
        codes = np.asarray(enc.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False), dtype=np.int64)
        got = (codes, values)
        self.parts[col.name] = got
        if n >= _RELEASE_ROWS:
            release_memory()  # a few MB of temporaries per block, kept by the allocators unless asked
        if self.cache is not None:
            self.cache.put(key, (codes, values, doubled if doubled.any() else None))
        return got

    # -- stats ------------------------------------------------------------------------------

    def stats_key(self, cols: Sequence[_StatsCol]) -> tuple[Any, ...]:
        source = "stats_parsed" if self.parsed is not None else "stats"
        return ("stats", source, tuple(sorted((c.name, c.names, c.family) for c in cols)))

    def prepare_stats(self, cols: Sequence[_StatsCol]) -> None:
        """Bounds of ``cols`` for every row (kept in the cache, with the rows they send per file)."""
        key = self.stats_key(cols)
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is None:
            outer_fallback, outer_zero = self.fallback, self.zero
            self.fallback, self.zero = np.zeros(self.n, dtype=bool), np.zeros(self.n, dtype=bool)
            try:
                if self.parsed is not None:
                    self._parsed_bounds(cols)
                else:
                    self._json_bounds(cols)
                cached = ({c.name: self.bounds[c.name] for c in cols}, self.fallback, self.zero)
            finally:
                self.fallback, self.zero = outer_fallback, outer_zero
            release_memory()  # the stats text parsed: much freed, little kept
            if self.cache is not None:
                self.cache.put(key, cached)
        bounds, fallback, zero = cached
        self.bounds.update(bounds)
        self.fallback |= fallback
        self.zero |= zero

    def _json_bounds(self, cols: Sequence[_StatsCol]) -> None:
        n = self.n
        stats = self.stats()
        present, bad = _screen_json(stats)
        types: dict[str, pa.DataType] = {}
        for col in cols:
            for name in col.names:
                if types.setdefault(name, _JSON_TYPE[col.family]) != _JSON_TYPE[col.family]:
                    raise _Fallback  # one stats key read as two types (a corrupt schema)
        fields: list[tuple[str, pa.DataType]] = [("numRecords", pa.int64())]
        if types:
            fields += [
                (obj, pa.struct([(k, pa.int64() if obj == "nullCount" else t) for k, t in types.items()]))
                for obj in _STATS_OBJECTS
            ]
        schema = pa.schema(fields)
        good = present & ~bad
        rows = np.nonzero(good)[0]
        texts = stats if rows.size == n else stats.take(pa.array(rows, type=pa.int64()))
        parsed, failed = _read_json(texts, schema)
        self.fallback |= present & bad
        self.fallback[rows[failed]] = True
        where: np.ndarray | None = None  # row -> its row in `parsed` (-1: none); None: the same rows
        if rows.size != n or failed.any():
            where = np.full(n, -1, dtype=np.int64)
            where[rows[~failed]] = np.nonzero(~failed)[0]

        def full(arr: pa.Array) -> pa.Array:
            return arr if where is None else _take(arr, where)

        records = full(parsed.column("numRecords").combine_chunks())
        self.zero |= _np(pc.equal(records, 0))
        if not types:
            return
        children = {
            obj: dict(zip(types, full(parsed.column(obj).combine_chunks()).flatten())) for obj in _STATS_OBJECTS
        }
        picked = {col.name: {obj: self._pick(children[obj], col.names) for obj in _STATS_OBJECTS} for col in cols}
        # A key matching a column only case-insensitively counts when no exact key is there: check
        # the rows with stats where a value the evaluation reads came out null.
        gaps = np.zeros(n, dtype=bool)
        for values in picked.values():
            for arr in values.values():
                gaps |= ~_valid(arr)
        gaps &= good & ~self.fallback
        if gaps.any():
            rows = np.nonzero(gaps)[0]
            names = [name for col in cols for name in col.names]
            self.fallback[rows[_case_variants(stats.take(pa.array(rows, type=pa.int64())), names)]] = True
        for col in cols:
            self.bounds[col.name] = self._bounds_from(col, records, picked[col.name], json=True)

    def _pick(self, children: dict[str, pa.Array], names: tuple[str, ...]) -> pa.Array:
        """The first of ``names`` present in the object, as the per-file lookup picks it."""
        value = children[names[0]]
        for other in names[1:]:
            alt = children[other]
            # A null first name may be a key present with null (the lookup stops there) or absent:
            # only the text tells; such rows are done per file.
            unsure = _np(pc.and_(value.is_null(), alt.is_valid()))
            if unsure.any():
                self.fallback |= unsure & _np(pc.match_substring(self.stats(), json.dumps(names[0])))
            value = pc.coalesce(value, alt)
        return value

    def _parsed_bounds(self, cols: Sequence[_StatsCol]) -> None:
        parsed = self.parsed
        assert parsed is not None
        n = self.n
        top = _struct_fields(parsed)
        records = top.get("numRecords")
        if records is None:
            records = pa.nulls(n, pa.int64())
        elif not pa.types.is_integer(records.type):
            raise _Fallback  # a numRecords that is not an integer: compare as the per-file code does
        else:
            records = _cast(records, pa.int64())
        self.zero |= _np(pc.equal(records, 0))
        for col in cols:
            picked: dict[str, pa.Array] = {}
            for obj in _STATS_OBJECTS:
                sub = top.get(obj)
                child = None
                if sub is not None and pa.types.is_struct(sub.type):
                    child = self._parsed_field(sub, col.names)
                picked[obj] = pa.nulls(n) if child is None else child
            nulls = picked["nullCount"]
            if pa.types.is_integer(nulls.type):
                picked["nullCount"] = _cast(nulls, pa.int64())
            else:
                picked["nullCount"] = pa.nulls(n, pa.int64())  # not an int: the per-file code ignores it
            self.bounds[col.name] = self._bounds_from(col, records, picked, json=False)

    @staticmethod
    def _parsed_field(sub: pa.Array, names: tuple[str, ...]) -> pa.Array | None:
        """The field ``skipping._lookup`` picks in the struct (as a dict: a field may be null)."""
        fields = _struct_fields(sub)
        for name in names:
            if name in fields:
                return fields[name]
        lowered = {name.lower() for name in names}
        for key, child in fields.items():
            if key.lower() in lowered:
                return child
        return None

    def _bounds_from(self, col: _StatsCol, records: pa.Array, picked: dict[str, pa.Array], *, json: bool) -> _Bounds:
        n = self.n
        nulls = picked["nullCount"]
        nulls_valid = _valid(nulls)
        all_null = nulls_valid & _valid(records) & _np(pc.greater_equal(nulls, records))
        may_null = ~(nulls_valid & _np(pc.equal(nulls, 0)))
        may_null |= all_null
        may_value = ~all_null
        rep, lo, hi = self._convert(col, picked["minValues"], picked["maxValues"], json=json)
        if col.kind == S._TS:
            # The max is widened by a millisecond; the per-file code overflows past datetime.max.
            self.fallback |= ~all_null & _np(pc.greater(hi, pa.scalar(_MAX_TS_BEFORE_WIDENING, pa.timestamp("us"))))
            hi = pc.add(hi, pa.scalar(_ONE_MS))
        if col.kind == S._STR:
            hi = pc.if_else(pc.greater_equal(pc.utf8_length(hi), S._STRING_STATS_PREFIX), pa.scalar(None, hi.type), hi)
        assert len(lo) == n and len(hi) == n
        return _Bounds(rep, lo, hi, may_null, may_value)

    def _convert(self, col: _StatsCol, lo: pa.Array, hi: pa.Array, *, json: bool) -> tuple[str, pa.Array, pa.Array]:
        """Bounds as the per-file code casts them, in one Arrow representation."""
        family = col.family
        if json:
            if family == "integral":
                return "int64", lo, hi
            if family in ("fractional", "decimal"):
                for arr in (lo, hi):
                    finite = _np(pc.is_finite(arr))
                    self.fallback |= _valid(arr) & ~finite  # NaN / infinities: screened, but be sure
                    if family == "decimal":
                        self.fallback |= finite & _np(pc.greater_equal(pc.abs(arr), _EXACT_FLOAT_INT))
                return ("float64" if family == "fractional" else "decjson"), lo, hi
            if family in ("string", "boolean"):
                return ("string" if family == "string" else "bool"), lo, hi
            if family == "date":
                return "date32", _parse_dates(lo, timestamps=False), _parse_dates(hi, timestamps=False)
            return "ts", _parse_dates(lo, timestamps=True), _parse_dates(hi, timestamps=True)
        # stats_parsed: typed values; types the per-file casts do not take as they are go per file.
        rep = None
        if pa.types.is_null(lo.type) and pa.types.is_null(hi.type):
            return self._null_bounds(col)
        types = {a.type for a in (lo, hi) if not pa.types.is_null(a.type)}
        if len(types) != 1:
            raise _Fallback
        (t,) = types
        if family == "integral" and pa.types.is_integer(t):
            rep, target = "int64", pa.int64()
        elif family == "fractional" and pa.types.is_floating(t):
            rep, target = "float64", pa.float64()
        elif family == "decimal" and pa.types.is_decimal(t):
            rep, target = "decimal", t
        elif family == "decimal" and pa.types.is_integer(t):
            rep, target = "int64", pa.int64()
        elif family == "decimal" and pa.types.is_floating(t):
            rep, target = "decjson", pa.float64()
        elif family == "string" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            rep, target = "string", pa.string()
        elif family == "boolean" and pa.types.is_boolean(t):
            rep, target = "bool", pa.bool_()
        elif family == "date" and pa.types.is_date32(t):
            rep, target = "date32", pa.date32()
        elif family == "timestamp" and pa.types.is_timestamp(t):
            rep, target = "ts", pa.timestamp("us")
        if rep is None:
            raise _Fallback
        out = []
        for arr in (lo, hi):
            arr = pa.nulls(self.n, target) if pa.types.is_null(arr.type) else _cast(arr, target)
            if rep in ("float64", "decjson"):
                # NaN (and, for decimals, infinities) do not cast: the per-file code drops the bound.
                keep = pc.is_finite(arr) if rep == "decjson" else pc.invert(pc.is_nan(arr))
                arr = pc.if_else(keep, arr, pa.scalar(None, pa.float64()))
            if rep in ("date32", "ts"):
                low, high = (dt.date.min, dt.date.max) if rep == "date32" else (dt.datetime.min, dt.datetime.max)
                outside = pc.or_(pc.less(arr, pa.scalar(low, target)), pc.greater(arr, pa.scalar(high, target)))
                self.fallback |= _np(outside)  # Python cannot hold it: the per-file code raises
            out.append(arr)
        return rep, out[0], out[1]

    def _null_bounds(self, col: _StatsCol) -> tuple[str, pa.Array, pa.Array]:
        rep, target = {
            "integral": ("int64", pa.int64()),
            "fractional": ("float64", pa.float64()),
            "decimal": ("int64", pa.int64()),
            "string": ("string", pa.string()),
            "boolean": ("bool", pa.bool_()),
            "date": ("date32", pa.date32()),
            "timestamp": ("ts", pa.timestamp("us")),
        }[col.family]
        empty = pa.nulls(self.n, target)
        return rep, empty, empty

    # -- numRecords == 0 when no stats column is read -----------------------------------------

    def check_empty_files(self, candidates: np.ndarray) -> None:
        """Mark ``candidates`` whose stats may say ``numRecords == 0`` (the per-file code skips those files)."""
        rows = np.nonzero(candidates)[0]
        if not rows.size:
            return
        if self.parsed is not None:
            records = _struct_fields(self.parsed).get("numRecords")
            if records is None:
                return
            if not pa.types.is_integer(records.type):
                self.fallback[rows] = True
                return
            self.zero |= _np(pc.equal(records, 0))
            return
        stats = self.stats()
        whole = self.cache.get(("maybe_empty",)) if self.cache is not None else None
        if whole is None and rows.size * 4 < self.n:  # few candidates: scan only their text
            self.fallback[rows[_maybe_empty(stats.take(pa.array(rows, type=pa.int64())))]] = True
            return
        if whole is None:
            whole = _maybe_empty(stats)
            if self.cache is not None:
                self.cache.put(("maybe_empty",), whole)
        self.fallback |= candidates & whole


# ---------------------------------------------------------------------------------------------
# Plan nodes: each gives every row's set of possible results as a bit mask (uint8, 0..7)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Thresholds. For a constant c: A = the least bound value >= c, B = the least bound value > c
# (or an infinity when there is none), so that, with Python's comparison of the values the
# per-file code holds:  x < c <=> x < A,  x <= c <=> x < B,  c < x <=> x >= B,  c <= x <=> x >= A,
# and x == c <=> A <= x < B.
# ---------------------------------------------------------------------------------------------


def _thresholds(rep: str, arrow_type: pa.DataType, c: Any, date_vs_ts: bool) -> tuple[Any, Any] | None:
    """(A, B) in representation ``rep``; None for NaN (no value compares with it)."""
    if isinstance(c, float) and math.isnan(c):
        return None
    if isinstance(c, float) and math.isinf(c) and rep != "float64":
        return (_POS, _POS) if c > 0 else (_NEG, _NEG)
    if rep == "int64":
        return _int_thresholds(c)
    if rep == "float64":
        return _float_thresholds(c)
    if rep == "decjson":
        return _decjson_thresholds(c, strict=False), _decjson_thresholds(c, strict=True)
    if rep == "decimal":
        return _decimal_thresholds(c, arrow_type.precision, arrow_type.scale)
    if rep == "string":
        return c, c + "\x00"
    if rep == "bool":
        return int(c), int(c) + 1
    if rep == "date32":
        if date_vs_ts:  # datetime(d) against a timestamp c
            day = c.date()
            next_day = _add(day, dt.timedelta(days=1))
            return (day if c == dt.datetime.combine(day, dt.time()) else next_day), next_day
        return c, _add(c, dt.timedelta(days=1))
    # ts
    if not isinstance(c, dt.datetime):
        c = dt.datetime.combine(c, dt.time())
    return c, _add(c, dt.timedelta(microseconds=1))


def _add(value: Any, delta: dt.timedelta) -> Any:
    try:
        return value + delta
    except OverflowError:
        return _POS


def _int_thresholds(c: Any) -> tuple[Any, Any]:
    if c > _INT64_MAX:
        return _POS, _POS
    if c < _INT64_MIN:
        return _NEG, _NEG
    if isinstance(c, int):
        ceil, floor = c, c
    elif isinstance(c, float):
        ceil, floor = math.ceil(c), math.floor(c)
    else:
        ceil, floor = int(c.to_integral_value(ROUND_CEILING)), int(c.to_integral_value(ROUND_FLOOR))
    return ceil, (floor + 1 if floor < _INT64_MAX else _POS)


def _float_thresholds(c: Any) -> tuple[Any, Any]:
    """Over all floats, infinities included (a float column's bounds)."""
    if isinstance(c, float):
        return c, (_POS if c == math.inf else math.nextafter(c, math.inf))
    try:
        g = float(c)  # the nearest float
    except OverflowError:
        g = math.inf if c > 0 else -math.inf
    if g < c:
        g = math.nextafter(g, math.inf)
    if g > c:
        return g, g
    return g, (_POS if g == math.inf else math.nextafter(g, math.inf))


def _decjson_thresholds(c: Any, *, strict: bool) -> Any:
    """The least finite float f with ``Decimal(repr(f)) >= c`` (> c if strict); that map is increasing."""

    def ok(f: float) -> bool:
        d = Decimal(repr(f))
        return d > c if strict else d >= c

    try:
        g = float(c)
    except OverflowError:
        g = math.inf if c > 0 else -math.inf
    g = min(max(g, -_FLOAT_MAX), _FLOAT_MAX)
    while not ok(g):
        if g == _FLOAT_MAX:
            return _POS
        g = math.nextafter(g, math.inf)
    while g > -_FLOAT_MAX and ok(math.nextafter(g, -math.inf)):
        g = math.nextafter(g, -math.inf)
    return g


_FLOAT_MAX = sys.float_info.max
_WIDE = Context(prec=200, Emax=10**6, Emin=-(10**6))


def _decimal_thresholds(c: Any, precision: int, scale: int) -> tuple[Any, Any]:
    with localcontext(_WIDE):
        value = Decimal(c)
        quantum = Decimal(1).scaleb(-scale)
        largest = Decimal(10) ** (precision - scale) - quantum
        if value > largest:
            return _POS, _POS
        if value < -largest:
            return _NEG, _NEG
        ceil = value.quantize(quantum, rounding=ROUND_CEILING)
        above = value.quantize(quantum, rounding=ROUND_FLOOR) + quantum
        return ceil, (above if above <= largest else _POS)


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
