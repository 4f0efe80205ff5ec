"""Table columns as the Spark side names and picks them, without pyspark.

- which fields data files store (``data_fields``), which the caller asked for (``select_fields``);
- the column-mapping mode (``column_mapping_mode``), the write-side column metadata
  (``WRITE_SIDE_METADATA``), the widening casts Delta applies on write (``WIDENING``);
- ``quote_name``: a name as a backquoted Spark identifier.

No pyspark here: the driver (pyarrow) paths use these too (``spark.dml.driver_files``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from serialake.core.model.column_mapping import mapping_mode
from serialake.core.model.constraints import GENERATION_EXPRESSION
from serialake.core.model.schema import ArrayType, DataType, MapType, StructField, StructType
from serialake.exceptions import DeltaAnalysisException

if TYPE_CHECKING:
    from serialake.core.log.snapshot import Snapshot

__all__ = [
    "WIDENING",
    "WRITE_SIDE_METADATA",
    "column_mapping_mode",
    "data_fields",
    "has_struct",
    "quote_name",
    "select_fields",
]

# Column metadata only writers use: a generated column's expression, an identity column's state.
WRITE_SIDE_METADATA = (GENERATION_EXPRESSION, "delta.identity.", "delta.columnMapping.")
# Widening casts Delta applies on write without mergeSchema (data type -> table types).
WIDENING: dict[str, frozenset[str]] = {
    "byte": frozenset({"short", "integer", "long"}),
    "short": frozenset({"integer", "long"}),
    "integer": frozenset({"long"}),
    "float": frozenset({"double"}),
}


def column_mapping_mode(snapshot: Snapshot) -> str:
    """``none``, ``name`` or ``id``: the core's one answer (``model.column_mapping.mapping_mode``,
    which refuses another value naming the table)."""
    return mapping_mode(snapshot.configuration, snapshot.table_path)


def data_fields(schema: StructType, partition_columns: Sequence[str]) -> list[StructField]:
    """The fields stored in data files: the schema without its partition columns."""
    parts = {c.lower() for c in partition_columns}
    return [f for f in schema.fields if f.name.lower() not in parts]


def has_struct(data_type: DataType) -> bool:
    """Whether a Delta type holds a struct (itself, as array element, map key or value)."""
    if isinstance(data_type, StructType):
        return True
    if isinstance(data_type, ArrayType):
        return has_struct(data_type.element_type)
    if isinstance(data_type, MapType):
        return has_struct(data_type.key_type) or has_struct(data_type.value_type)
    return False


def select_fields(schema: StructType, columns: Sequence[str] | None, table: str) -> list[StructField]:
    """The fields named by ``columns`` (case-insensitive; all when None), or an error naming the column."""
    if columns is None:
        return list(schema.fields)
    out = []
    for name in columns:
        f = schema.field(name)
        if f is None:
            raise DeltaAnalysisException(
                f"Column '{name}' does not exist in table {table} (columns: {', '.join(schema.field_names)})"
            )
        out.append(f)
    return out


def quote_name(name: str) -> str:
    """``name`` as a backquoted Spark identifier."""
    return "`" + name.replace("`", "``") + "`"
