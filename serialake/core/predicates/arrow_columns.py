"""The columns a vectorized predicate reads, and the per-row bounds of a stats column.

``_PartCol`` is a partition column (its values looked up in ``partitionValues``), ``_StatsCol`` a
column with stats; ``_Bounds`` holds, for one stats column, every row's min and max in one Arrow
representation and whether the column may be NULL / hold a value there. ``_Fallback`` is raised
anywhere the vectorized code gives a whole table back to the per-file code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


class _Fallback(Exception):
    """Evaluate every row of this table per file (the per-file code raised, or the input is odd)."""



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
