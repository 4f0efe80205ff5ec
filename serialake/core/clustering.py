"""Liquid clustering: a table's clustering columns, as the Delta protocol records them.

A clustered table has the writer features ``clustering`` and ``domainMetadata`` and a
``delta.clustering`` domain whose configuration lists the clustering columns (physical
names, each a path: ``{"clusteringColumns": [["a"], ["s", "b"]]}``; the flat form
``["a"]`` is read too). A table is clustered or partitioned, never both. Files that
OPTIMIZE clustered carry ``clusteringProvider: "liquid"``; appends leave it unset, and
the next OPTIMIZE clusters exactly those files (``OPTIMIZE ... FULL``: every file).

Clustering columns need statistics in every file (they drive data skipping): each must be
a column of a comparable type among the columns the table collects statistics for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from serialake.core import properties as props
from serialake.core.actions import DomainMetadata
from serialake.core.schema import DataType, DecimalType, PrimitiveType, StructType, physical_name, split_dotted
from serialake.exceptions import CorruptLogError, DeltaAnalysisException

__all__ = [
    "DOMAIN",
    "FEATURES",
    "PROVIDER",
    "clustering_columns",
    "clustering_domain",
    "validate_clustering_columns",
]

DOMAIN = "delta.clustering"
FEATURES = ("clustering", "domainMetadata")
PROVIDER = "liquid"

_UNCOMPARABLE = frozenset({"binary", "boolean", "variant"})


def clustering_columns(
    domains: Mapping[str, DomainMetadata], schema: StructType, table: str
) -> list[str] | None:
    """The logical (dotted) names of the clustering columns; None when the table is not clustered."""
    d = domains.get(DOMAIN)
    if d is None or d.removed:
        return None
    try:
        value = json.loads(d.configuration or "{}")
        raw = value.get("clusteringColumns", [])
        paths = [[c] if isinstance(c, str) else list(c) for c in raw]
    except (ValueError, TypeError, AttributeError) as e:
        raise CorruptLogError(f"Table {table}: invalid {DOMAIN} domain metadata {d.configuration!r} ({e})") from None
    return [".".join(_quoted(part) for part in _logical_path(schema, p)) for p in paths]


def _quoted(name: str) -> str:
    return f"`{name.replace('`', '``')}`" if "." in name or "`" in name else name


def clustering_domain(schema: StructType, columns: Sequence[str]) -> DomainMetadata:
    """The ``delta.clustering`` domain action for these (logical, dotted) columns."""
    paths = [_physical_path(schema, c) for c in columns]
    return DomainMetadata(DOMAIN, json.dumps({"clusteringColumns": paths}, separators=(",", ":")), False)


def validate_clustering_columns(
    schema: StructType,
    columns: Sequence[str],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    table: str,
) -> list[str]:
    """The clustering columns as the schema spells them; an error naming the table and the column."""
    if partition_columns and columns:
        raise DeltaAnalysisException(
            f"Table {table} cannot be both partitioned (by {', '.join(partition_columns)}) and clustered "
            f"(by {', '.join(columns)}): choose clusterBy or partitionedBy."
        )
    out: list[str] = []
    seen: set[str] = set()
    indexed = _stats_columns(schema, configuration)
    for name in columns:
        path = _field_path(schema, name, table)
        dotted = ".".join(f for f in path)
        if dotted.lower() in seen:
            raise DeltaAnalysisException(f"Clustering column '{dotted}' of table {table} is given more than once.")
        seen.add(dotted.lower())
        leaf = _leaf(schema, path)
        type_name = leaf.simple_string() if isinstance(leaf, (PrimitiveType, DecimalType)) else None
        if type_name is None or type_name.split("(")[0] in _UNCOMPARABLE:
            raise DeltaAnalysisException(
                f"Column '{dotted}' of table {table} cannot be a clustering column: its type "
                f"{leaf.simple_string()} has no min/max statistics for data skipping."
            )
        if tuple(p.lower() for p in path) not in indexed:
            raise DeltaAnalysisException(
                f"Clustering column '{dotted}' of table {table} is not among the columns the table collects "
                "statistics for (the first delta.dataSkippingNumIndexedCols leaf columns). Move it forward or "
                "raise delta.dataSkippingNumIndexedCols."
            )
        out.append(dotted)
    if len(out) > 4:
        raise DeltaAnalysisException(
            f"Table {table}: at most 4 clustering columns are allowed (got {len(out)}: {', '.join(out)})."
        )
    return out


def _field_path(schema: StructType, name: str, table: str) -> list[str]:
    node: StructType | None = schema
    path: list[str] = []
    for part in (p.strip("`") for p in split_dotted(name)):
        f = node.field(part) if node is not None else None
        if f is None:
            raise DeltaAnalysisException(
                f"Clustering column '{name}' does not exist in table {table} (columns: {', '.join(schema.field_names)})"
            )
        path.append(f.name)
        node = f.data_type if isinstance(f.data_type, StructType) else None
    return path


def _leaf(schema: StructType, path: Sequence[str]) -> DataType:
    node: DataType = schema
    for part in path:
        assert isinstance(node, StructType)
        f = node.field(part)
        assert f is not None
        node = f.data_type
    return node


def _stats_columns(schema: StructType, configuration: Mapping[str, str]) -> set[tuple[str, ...]]:
    """Lower-case paths of the leaf columns serialake's writers collect statistics for: the first
    ``delta.dataSkippingNumIndexedCols`` leaves (``serialake.spark.io.stats_columns``)."""
    leaves: list[tuple[str, ...]] = []

    def walk(prefix: tuple[str, ...], st: StructType) -> None:
        for f in st.fields:
            path = (*prefix, f.name.lower())
            if isinstance(f.data_type, StructType):
                walk(path, f.data_type)
            else:
                leaves.append(path)

    walk((), schema)
    limit = props.get(configuration, "delta.dataSkippingNumIndexedCols")
    if isinstance(limit, int) and limit >= 0:
        leaves = leaves[:limit]
    return set(leaves)


def _physical_path(schema: StructType, dotted: str) -> list[str]:
    node: StructType | None = schema
    out: list[str] = []
    for part in (p.strip("`") for p in split_dotted(dotted)):
        f = node.field(part) if node is not None else None
        if f is None:
            raise DeltaAnalysisException(f"Clustering column '{dotted}' does not exist")
        out.append(physical_name(f))
        node = f.data_type if isinstance(f.data_type, StructType) else None
    return out


def _logical_path(schema: StructType, physical: Sequence[str]) -> list[str]:
    """Physical names back to logical ones (unknown names kept, e.g. a dropped column)."""
    node: StructType | None = schema
    out: list[str] = []
    for part in physical:
        match = None
        if node is not None:
            match = next((f for f in node.fields if physical_name(f) == part), None)
        out.append(match.name if match is not None else part)
        node = match.data_type if match is not None and isinstance(match.data_type, StructType) else None
    return out
