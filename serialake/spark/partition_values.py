"""Partition values of data files: Hive-style directory names and log strings, without pyspark.

``core.model.partition_values`` parses and escapes single values; here are a file's values
from its directories (``hive_partition_values``), the log string as a typed value with an
error naming table and column (``typed_partition_value``), and which names are not data
(``is_hidden``). The driver (pyarrow) paths use these too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from serialake.core.model.partition_values import parse_partition_value
from serialake.core.model.schema import DataType
from serialake.exceptions import CorruptLogError

__all__ = ["HIVE_DEFAULT_PARTITION", "hive_partition_values", "is_hidden", "typed_partition_value"]

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def typed_partition_value(value: str | None, data_type: DataType, *, table: str = "", column: str = "") -> Any:
    """A partition value string from the log as the Python value Spark expects for the type.

    ``core.partition_values.parse_partition_value`` (timestamps without a zone are UTC; an
    empty string is NULL except for strings), with an error naming the table and column.
    """
    try:
        return parse_partition_value(value, data_type)
    except ValueError as e:
        raise CorruptLogError(f"Table {table}: partition column '{column}': {e}") from None


def hive_partition_values(segments: Sequence[str], partition_columns: Sequence[str]) -> dict[str, str | None]:
    """Unescaped values of ``col=value`` directory names, one per partition column in order.

    ``ValueError`` naming the directory that is not its column's partition.
    """
    values: dict[str, str | None] = {}
    for column, segment in zip(partition_columns, segments):
        key, sep, raw = segment.partition("=")
        if not sep or unquote(key).lower() != column.lower():
            raise ValueError(f"Directory '{segment}' is not a partition of column '{column}'")
        values[column] = None if raw == HIVE_DEFAULT_PARTITION else unquote(raw)
    return values


def is_hidden(name: str, partition_columns: Sequence[str]) -> bool:
    """Delta's rule: names starting with '_' or '.' are not data, except '_col=' partitions."""
    if not name.startswith(("_", ".")):
        return False
    return not any(name.startswith(f"{c}=") for c in partition_columns)
