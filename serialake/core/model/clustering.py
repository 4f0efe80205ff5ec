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
from dataclasses import replace
from typing import TYPE_CHECKING

from serialake.core.model import features
from serialake.core.model import properties as props
from serialake.core.model.actions import DomainMetadata
from serialake.core.model.schema import (
    DecimalType,
    PrimitiveType,
    SchemaError,
    StructField,
    StructType,
    field_path,
    physical_name,
    split_dotted,
)
from serialake.core.model.stats import stats_columns

if TYPE_CHECKING:
    from serialake.core.log.snapshot import Snapshot
    from serialake.core.txn.transaction import OptimisticTransaction
from serialake.exceptions import CorruptLogError, DeltaAnalysisException

__all__ = [
    "DOMAIN",
    "FEATURES",
    "NEW_TABLE_DEFAULTS",
    "PROVIDER",
    "cluster_table",
    "clustering_columns",
    "clustering_domain",
    "clustering_removed",
    "validate_clustering_columns",
]

DOMAIN = "delta.clustering"
FEATURES = ("clustering", "domainMetadata")
PROVIDER = "liquid"
#: What a table created clustered gets unless it sets them: deletion vectors (row-level concurrency).
NEW_TABLE_DEFAULTS = {props.ENABLE_DELETION_VECTORS: "true"}

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
    paths = [[physical_name(f) for f in _resolve(schema, c, "")] for c in columns]
    return DomainMetadata(DOMAIN, json.dumps({"clusteringColumns": paths}, separators=(",", ":")), False)


def cluster_table(txn: OptimisticTransaction, columns: Sequence[str], table: str) -> tuple[list[str], DomainMetadata]:
    """Make the table ``txn`` commits clustered by ``columns`` (checked against the schema, partitioning
    and properties it will commit): the protocol gains the clustering features if it lacks them;
    returns the column names and the domain action to commit.

    Every path that makes a table clustered comes here (SQL ``CLUSTER BY``, ``DeltaTable.create()
    .clusterBy``, the writers' ``clusterBy``, ``ALTER TABLE ... CLUSTER BY``). A table created (or
    replaced) clustered gets deletion vectors (``NEW_TABLE_DEFAULTS``) unless its properties, or the
    session's defaults for new tables, set ``delta.enableDeletionVectors``: so DML on it marks rows
    and concurrent writers are resolved by rows (``row_level.enabled``), as on Databricks.
    """
    meta = txn.metadata
    assert meta is not None, "the table's metadata is set before its clustering"
    names = validate_clustering_columns(meta.schema, columns, meta.partition_columns, meta.configuration, table)
    if txn.creates_table:
        txn.set_new_table_defaults(NEW_TABLE_DEFAULTS)
        meta = txn.metadata
        assert meta is not None
    protocol = features.required_protocol(meta.configuration, FEATURES, base=txn.protocol)
    if protocol != txn.protocol:
        txn.update_protocol(protocol)
    return names, clustering_domain(meta.schema, names)


def clustering_removed(snapshot: Snapshot | None) -> list[DomainMetadata]:
    """The tombstone that ends ``snapshot``'s clustering (none when it has none): a replaced table keeps
    no clustering unless it is asked for again, as with its partitioning."""
    d = snapshot.domain_metadata.get(DOMAIN) if snapshot is not None else None
    return [replace(d, removed=True)] if d is not None and not d.removed else []


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
    indexed = {tuple(p.lower() for p in path) for path, _ in stats_columns(schema, configuration)}
    for name in columns:
        fields = _resolve(schema, name, table)
        dotted = ".".join(_quoted(f.name) for f in fields)
        if dotted.lower() in (o.lower() for o in out):
            raise DeltaAnalysisException(f"Clustering column '{dotted}' of table {table} is given more than once.")
        leaf = fields[-1].data_type
        if not isinstance(leaf, (PrimitiveType, DecimalType)) or leaf.simple_string() in _UNCOMPARABLE:
            raise DeltaAnalysisException(
                f"Column '{dotted}' of table {table} cannot be a clustering column: its type "
                f"{leaf.simple_string()} has no min/max statistics for data skipping."
            )
        if tuple(f.name.lower() for f in fields) not in indexed:
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


def _resolve(schema: StructType, dotted: str, table: str) -> list[StructField]:
    """The fields a dotted column name (``s.`a.b```) passes through, outermost first."""
    try:
        return field_path(schema, [part.strip("`") for part in split_dotted(dotted)])
    except SchemaError as e:
        raise DeltaAnalysisException(f"Clustering column '{dotted}' of table {table}: {e}") from None


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
