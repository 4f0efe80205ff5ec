"""Which columns of a data file carry statistics in its add action (``delta.dataSkippingNumIndexedCols``)."""

from __future__ import annotations

from collections.abc import Mapping

from serialake.core.model import properties as props
from serialake.core.model.schema import DataType, DecimalType, PrimitiveType, StructType

__all__ = ["stats_columns"]


def stats_columns(file_schema: StructType, configuration: Mapping[str, str]) -> list[tuple[tuple[str, ...], DataType]]:
    """Leaf columns (paths of names, type) that get stats: the first ``dataSkippingNumIndexedCols``.

    Arrays and maps count as leaves but get no stats. Writers collect exactly these
    (``serialake.spark.footer_stats``); clustering columns must be among them (``model.clustering``).
    """
    limit = props.get(configuration, "delta.dataSkippingNumIndexedCols")
    leaves: list[tuple[tuple[str, ...], DataType]] = []

    def walk(prefix: tuple[str, ...], schema: StructType) -> None:
        for f in schema.fields:
            path = (*prefix, f.name)
            if isinstance(f.data_type, StructType):
                walk(path, f.data_type)
            else:
                leaves.append((path, f.data_type))

    walk((), file_schema)
    if isinstance(limit, int) and limit >= 0:
        leaves = leaves[:limit]
    return [(p, t) for p, t in leaves if isinstance(t, (PrimitiveType, DecimalType))]
