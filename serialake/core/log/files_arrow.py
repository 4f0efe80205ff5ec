"""Live files in Arrow: ``AddFile`` objects as a table shaped like the checkpoint's ``add`` struct.

``files_table`` gives the commits' adds the columns (names and types) a checkpoint's ``add``
column has when flattened (``pa.Table.from_struct_array``), so file skipping
(``predicates.arrow_skipping``) reads checkpoint rows and later commits' adds alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from serialake.core.log.checkpoint import CHECKPOINT_SCHEMA
from serialake.core.model.actions import AddFile

__all__ = ["files_table"]

_ADD_TYPE: pa.StructType = CHECKPOINT_SCHEMA.field("add").type


def files_table(files: Sequence[AddFile]) -> pa.Table:
    """The files as a table with the columns (names and types) of the checkpoint's ``add`` struct.

    ``partitionValues`` and ``tags`` are ``map<string, string>`` (a None dict is a null map),
    ``stats`` the JSON string as is (null when None), ``deletionVector`` a struct (null when the
    file has none). Partition values must be strings or None, as in the log; a string Arrow
    cannot hold (a lone surrogate) raises ``ValueError`` naming the file.
    """
    by_key = {key: attr for attr, key in AddFile.KEYS.items()}
    columns: dict[str, pa.Array] = {}
    for i in range(_ADD_TYPE.num_fields):
        f = _ADD_TYPE.field(i)
        values = [getattr(a, by_key[f.name], None) for a in files] if f.name in by_key else [None] * len(files)
        if pa.types.is_map(f.type):
            values = [None if v is None else list(v.items()) for v in values]
        elif f.name == "deletionVector":
            values = [
                None
                if dv is None
                else {
                    "storageType": dv.storage_type,
                    "pathOrInlineDv": dv.path_or_inline_dv,
                    "offset": dv.offset,
                    "sizeInBytes": dv.size_in_bytes,
                    "cardinality": dv.cardinality,
                }
                for dv in values
            ]
        try:
            columns[f.name] = pa.array(values, type=f.type)
        except UnicodeEncodeError:  # a lone surrogate (a log's "\ud800"): Arrow strings are UTF-8
            bad = next(a.path for a, v in zip(files, values) if not _utf8_encodable(v))
            raise ValueError(f"add {bad!r}: its {f.name} is not valid Unicode (a lone surrogate)") from None
    return pa.table(columns, schema=pa.schema(list(_ADD_TYPE)))


def _utf8_encodable(value: Any) -> bool:
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
