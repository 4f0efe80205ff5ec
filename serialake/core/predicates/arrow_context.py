"""The evaluation context: what a plan reads from one table of adds, with one stats source.

``_Ctx`` holds, per table: the partition value codes of each column read (the string the
per-file lookup finds, once per distinct combination; a row whose map holds two keys matching
one column is done per file), the ``_Bounds`` of each stats column read (from the stats JSON,
read by ``stats_json``, or from ``stats_parsed``, cast as the per-file code casts), the rows
whose stats say ``numRecords == 0`` and the rows to be evaluated per file. With a ``SkipCache``
(an immutable table: a checkpoint's rows) codes and bounds are kept for the next predicate.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serialake.core.model.arrow_memory import release_memory
from serialake.core.predicates import skipping as S
from serialake.core.predicates.arrow_columns import _JSON_TYPE, _Bounds, _Fallback, _PartCol, _StatsCol
from serialake.core.predicates.arrow_inputs import _combined, _np, _per_file_inputs, _string_column, _take, _valid
from serialake.core.predicates.stats_json import (
    _case_variants,
    _maybe_empty,
    _parse_dates,
    _read_json,
    _screen_json,
)

if TYPE_CHECKING:
    from serialake.core.predicates.arrow_skipping import ArrowMatcher, SkipCache

_EXACT_FLOAT_INT = 2.0**53  # JSON integers below this survive a trip through float64
_MAX_TS_BEFORE_WIDENING = dt.datetime.max - dt.timedelta(milliseconds=1)
_ONE_MS = dt.timedelta(milliseconds=1)
_STATS_OBJECTS = ("nullCount", "minValues", "maxValues")

#: Blocks of at least this many rows give freed temporaries back once their partition
#: codes are computed (``release_memory``): smaller ones are not worth the call.
_RELEASE_ROWS = 1 << 16


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
