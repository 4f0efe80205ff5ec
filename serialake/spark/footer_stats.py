"""Delta stats (numRecords, minValues, maxValues, nullCount) from Parquet footers, without pyspark.

Every writer (Spark's, the executors' pyarrow one, the driver's) describes its files with
``file_stats``: no second pass over the data.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow.parquet as pq

from serialake.core.model.schema import DataType, PrimitiveType

__all__ = ["STRING_STATS_PREFIX", "file_stats"]

STRING_STATS_PREFIX = 32  # Delta's default: string min/max hold the first 32 characters
_MAX_CHAR = "\U0010ffff"  # appended to a truncated max so it stays an upper bound
_MIN_MAX_TYPES = frozenset({"byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz", "string"})


def file_stats(metadata: pq.FileMetaData, indexed: list[tuple[tuple[str, ...], DataType]]) -> str:
    """Delta stats JSON (numRecords, minValues, maxValues, nullCount) from a Parquet footer.

    Row groups are combined; a column whose footer lacks min/max in any row group gets no
    min/max. Floats get no min/max (footers do not account for NaN, which Spark sorts
    last); booleans and binaries none either, as in Delta. Strings keep 32 characters, the
    max then followed by U+10FFFF; timestamp bounds are widened to whole milliseconds.
    """
    by_path = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for path, data_type in indexed:
        index = by_path.get(".".join(path))
        if index is None:
            continue
        lo, hi, null_count = _column_stats(metadata, index)
        if null_count is not None:
            _put(nulls, path, null_count)
        type_name = data_type.to_json_value() if isinstance(data_type, PrimitiveType) else "decimal"
        if lo is None or hi is None or not (type_name in _MIN_MAX_TYPES or type_name == "decimal"):
            continue
        lo_json, hi_json = _stat_value(lo, type_name, upper=False), _stat_value(hi, type_name, upper=True)
        if lo_json is not None and hi_json is not None:
            _put(mins, path, lo_json)
            _put(maxs, path, hi_json)
    stats = {"numRecords": metadata.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return _json(stats)


def _column_stats(metadata: pq.FileMetaData, index: int) -> tuple[Any, Any, int | None]:
    lo: Any = None
    hi: Any = None
    nulls: int | None = 0
    has_min_max = True
    for r in range(metadata.num_row_groups):
        column = metadata.row_group(r).column(index)
        st = column.statistics
        if st is None:
            return None, None, None
        if st.has_null_count and nulls is not None:
            nulls += st.null_count
        else:
            nulls = None
        if not st.has_min_max:
            if column.num_values > (st.null_count if st.has_null_count else -1):
                has_min_max = False
            continue
        lo = st.min if lo is None or st.min < lo else lo
        hi = st.max if hi is None or st.max > hi else hi
    return (lo, hi, nulls) if has_min_max else (None, None, nulls)


def _stat_value(value: Any, type_name: str, *, upper: bool) -> Any:
    """A footer min/max as Delta writes it in stats JSON (None: leave it out)."""
    if type_name == "string":
        if not isinstance(value, str):
            return None
        if len(value) <= STRING_STATS_PREFIX:
            return value
        prefix = value[:STRING_STATS_PREFIX]
        return prefix + _MAX_CHAR if upper else prefix
    if type_name == "date":
        return value.isoformat() if isinstance(value, dt.date) else None
    if type_name in ("timestamp", "timestamp_ntz"):
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        millis = value.replace(microsecond=value.microsecond - value.microsecond % 1000)
        if upper and millis != value:
            millis += dt.timedelta(milliseconds=1)
        text = millis.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis.microsecond // 1000:03d}"
        return text + "Z" if type_name == "timestamp" else text
    if type_name == "decimal":
        return value if isinstance(value, Decimal) and value.is_finite() else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def _json(value: Any) -> str:
    """Compact JSON that writes decimals as exact numbers."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")
    return json.dumps(value, separators=(",", ":"))
