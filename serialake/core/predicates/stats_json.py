"""Stats JSON read in bulk with ``pyarrow.json``, and date / timestamp bounds parsed with numpy.

Stats JSON is read by ``pyarrow.json`` in one pass (``_read_json``), with an explicit schema
holding only ``numRecords`` and the referenced columns. Rows whose text the Arrow reader might
read differently from ``json.loads`` are found here, for the caller to do per file: not
``{...}``, line breaks, ``NaN`` / ``Inf`` (``_screen_json``), escapes that could spell a column
name, keys matching a column name only case-insensitively (``_case_variants``), rows the
reader rejects (found by bisection). ``_maybe_empty`` finds rows whose ``numRecords`` may be 0
without parsing. Date and timestamp strings in the shapes Delta writes are parsed with numpy
(``_parse_dates``), others as the per-file code does (``skipping._to_date`` /
``_to_timestamp``). Big reads allocate from the log memory pool (``model.arrow_memory``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from serialake.core.model.arrow_memory import log_pool
from serialake.core.predicates import skipping as S
from serialake.core.predicates.arrow_inputs import _np, _take, _valid

#: Stats strings parsed per ``pyarrow.json`` call.
_JSON_ROWS = 1 << 17


# ---------------------------------------------------------------------------------------------
# Dates and timestamps
# ---------------------------------------------------------------------------------------------


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
