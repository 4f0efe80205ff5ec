"""The per-file inputs of an Arrow table of adds: what the vectorized matcher agrees with, row for row.

A table of adds has the columns of the checkpoint's ``add`` struct (``log.files_arrow.files_table``,
or a checkpoint's ``add`` column flattened, possibly with ``stats_parsed``). ``reference_inputs``
gives each row's ``(partition_values, stats)`` as the per-file matcher
(``skipping.compile_predicate``) is given them; ``_stats_sources`` says which rows take their
stats from ``stats_parsed`` (``STATS_PARSED_MODES``). Also the small Arrow / numpy helpers the
vectorized modules share.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["STATS_PARSED_MODES", "reference_inputs"]

#: How rows use a ``stats_parsed`` column: ``fill`` where ``stats`` is null, ``prefer`` wherever
#: it is not null, ``ignore`` never (then a row is exactly the AddFile serialake's reader builds).
STATS_PARSED_MODES = ("fill", "prefer", "ignore")


# ---------------------------------------------------------------------------------------------
# Small Arrow / numpy helpers
# ---------------------------------------------------------------------------------------------


def _combined(column: Any) -> pa.Array:
    if not isinstance(column, pa.ChunkedArray):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _string_column(table: pa.Table, name: str) -> pa.Array:
    if name not in table.column_names:
        return pa.nulls(table.num_rows, pa.string())
    arr = _combined(table.column(name))
    return arr if arr.type == pa.string() else arr.cast(pa.string())


def _np(arr: Any) -> np.ndarray:
    """A boolean Arrow array (nulls as False) as a numpy bool array."""
    arr = _combined(arr)
    if arr.null_count:
        arr = arr.fill_null(False)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _valid(arr: pa.Array) -> np.ndarray:
    return _np(arr.is_valid())

def _take(arr: pa.Array, index: np.ndarray) -> pa.Array:
    """``arr[index]`` with null where ``index`` is negative."""
    return arr.take(pa.array(index, type=pa.int64(), mask=index < 0))



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
