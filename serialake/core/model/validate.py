"""What a log action must look like before it may enter a snapshot.

Every action is checked as it is parsed (commit replay and checkpoint read): required
fields present, every field of the type the protocol gives it, relative data paths inside
the table directory, metadata whose schema parses and whose partition columns exist and can
be partitioned on. Partition values need the table's schema, so they are checked when a
snapshot is built, each distinct ``(column, value)`` once.

Checks raise ``InvalidActionError`` (the field and the reason); the reader that knows the
table, the version and the log file turns it into ``serialake.exceptions.InvalidTableError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from serialake.core.model.partition_values import parse_partition_value
from serialake.core.model.schema import (
    DataType,
    DecimalType,
    PrimitiveType,
    SchemaError,
    StructType,
    physical_name,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from serialake.core.model.actions import Metadata

__all__ = [
    "ACTION_CHECKS",
    "InvalidActionError",
    "add_column_partition_values",
    "check_action",
    "check_add_column",
    "check_partition_values",
    "escapes_table",
    "is_absolute_path",
]


class InvalidActionError(Exception):
    """An action breaks the protocol; ``field`` names it as ``action.field`` (e.g. ``add.size``)."""

    def __init__(self, field: str, reason: str, *, value: Any = None, data_file: str | None = None) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        self.value = value
        self.data_file = data_file


# -- data paths -------------------------------------------------------------------------------

# An absolute URI with a hierarchical path ('file:/t/x', 's3://b/x'), as storage.normalize_table_path.
_ABSOLUTE_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/")


def is_absolute_path(path: str) -> bool:
    """Whether an ``add.path`` is absolute: an absolute URI or an absolute path (the protocol allows both)."""
    return path.startswith("/") or _ABSOLUTE_URI.match(path) is not None


def escapes_table(path: str) -> bool:
    """Whether a relative ``add.path`` leaves the table directory (``..`` segments, after URI-decoding)."""
    if (".." not in path and "%2" not in path) or is_absolute_path(path):
        return False  # no '..' even once decoded ('%2E' is '.'): the common case, two substring tests
    depth = 0
    for segment in unquote(path).split("/"):
        if segment == "..":
            depth -= 1
            if depth < 0:
                return True
        elif segment and segment != ".":
            depth += 1
    return False


def _check_path(action: str, path: Any) -> None:
    if type(path) is not str or not path:
        raise InvalidActionError(f"{action}.path", _wanted("a non-empty string", path))
    if escapes_table(path):
        raise InvalidActionError(
            f"{action}.path",
            f"relative path {path!r} leaves the table directory (absolute paths and URIs are allowed, "
            "relative ones must stay inside the table)",
        )


# -- field checks ------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "an object",
            list: "an array"}.get(type(value), type(value).__name__)  # fmt: skip


def _wanted(what: str, value: Any) -> str:
    if value is None:
        return f"must be {what}, but it is missing"
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return f"must be {what}, got {shown} ({_kind(value)})"


def _typed(
    body: Mapping[str, Any], action: str, key: str, what: str, types: tuple[type, ...], required: bool
) -> Any:
    """``body[key]`` when present and of exactly one of ``types`` (bool is not an int here); None when absent."""
    v = body.get(key)
    if v is None:
        if required:
            raise InvalidActionError(f"{action}.{key}", _wanted(what, v))
        return None
    if type(v) not in types:
        raise InvalidActionError(f"{action}.{key}", _wanted(what, v))
    return v


def _int(
    body: Mapping[str, Any], action: str, key: str, *, required: bool = False, min_value: int | None = None
) -> None:
    v = _typed(body, action, key, "an integer", (int,), required)
    if v is not None and min_value is not None and v < min_value:
        raise InvalidActionError(f"{action}.{key}", f"must be at least {min_value}, got {v}")


def _str(body: Mapping[str, Any], action: str, key: str, *, required: bool = False) -> None:
    _typed(body, action, key, "a string", (str,), required)


def _bool(body: Mapping[str, Any], action: str, key: str, *, required: bool = False) -> None:
    _typed(body, action, key, "a boolean", (bool,), required)


def _str_map(body: Mapping[str, Any], action: str, key: str, *, required: bool = False) -> None:
    """A map of string to string-or-null (partitionValues, tags, configuration)."""
    v = _typed(body, action, key, "a map of strings", (dict,), required)
    for k, item in (v or {}).items():
        if item is not None and type(item) is not str:
            raise InvalidActionError(f"{action}.{key}.{k}", _wanted("a string or null", item))


def _str_list(body: Mapping[str, Any], action: str, key: str, *, required: bool = False) -> None:
    v = _typed(body, action, key, "an array of strings", (list, tuple), required)
    if v is not None and any(type(item) is not str for item in v):
        raise InvalidActionError(f"{action}.{key}", _wanted("an array of strings", v))


def _object(body: Any, action: str) -> Mapping[str, Any]:
    if type(body) is not dict:
        raise InvalidActionError(action, _wanted("an object", body))
    return body


_DV_STORAGE_TYPES = ("u", "i", "p")
_Z85_UUID_LEN = 20


def _check_dv(body: Mapping[str, Any], action: str) -> None:
    dv = body.get("deletionVector")
    if dv is None:
        return
    name = f"{action}.deletionVector"
    dv = _object(dv, name)
    kind = dv.get("storageType")
    if kind not in _DV_STORAGE_TYPES:
        raise InvalidActionError(f"{name}.storageType", _wanted("one of 'u', 'i', 'p'", kind))
    _str(dv, name, "pathOrInlineDv", required=True)
    _int(dv, name, "offset", min_value=0)
    _int(dv, name, "sizeInBytes", required=True, min_value=0)
    _int(dv, name, "cardinality", required=True, min_value=0)
    text = dv["pathOrInlineDv"]
    if kind == "u":
        if len(text) < _Z85_UUID_LEN:
            raise InvalidActionError(
                f"{name}.pathOrInlineDv", f"a 'u' vector needs a 20-character Z85 UUID, got {text!r}"
            )
        prefix = text[:-_Z85_UUID_LEN]
        if prefix and escapes_table(prefix + "/x"):
            raise InvalidActionError(f"{name}.pathOrInlineDv", f"prefix {prefix!r} leaves the table directory")
    elif kind == "p" and not text:
        raise InvalidActionError(f"{name}.pathOrInlineDv", "a 'p' vector needs an absolute path")


def _check_file_common(b: Mapping[str, Any], action: str) -> None:
    _str(b, action, "stats")
    _str_map(b, action, "tags")
    _check_dv(b, action)
    _int(b, action, "baseRowId", min_value=0)
    _int(b, action, "defaultRowCommitVersion", min_value=0)


# Fields of add/remove the fast path knows; any other field with a value gets the full check.
_ADD_KEYS = frozenset({"path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags",
                       "deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider"})  # fmt: skip
_REMOVE_KEYS = frozenset({"path", "partitionValues", "size", "dataChange", "deletionTimestamp", "extendedFileMetadata",
                          "stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"})  # fmt: skip


def _fast_optional(b: dict[str, Any], known: frozenset[str]) -> bool:
    """Whether the optional fields of an add/remove are surely valid (plain types, no tags or DV, no other field)."""
    g = b.get
    stats, provider, row_id, row_version = g("stats"), g("clusteringProvider"), g("baseRowId"), g(
        "defaultRowCommitVersion"
    )
    return (
        (stats is None or type(stats) is str)
        and (provider is None or type(provider) is str)
        and (row_id is None or (type(row_id) is int and row_id >= 0))
        and (row_version is None or (type(row_version) is int and row_version >= 0))
        and g("tags") is None
        and g("deletionVector") is None
        and known.issuperset(b)
    )


def _check_add(body: Any) -> None:
    # Fast path for the common add (a few dict lookups); anything unusual gets the full check,
    # which finds and names the offending field.
    if type(body) is dict:
        g = body.get
        p, pv, size = g("path"), g("partitionValues"), g("size")
        if (
            type(p) is str
            and type(pv) is dict
            and type(size) is int
            and size >= 0
            and type(g("modificationTime")) is int
            and type(g("dataChange")) is bool
            and p
            and ((n := len(body)) == 5 or (n == 6 and type(g("stats")) is str) or _fast_optional(body, _ADD_KEYS))
            and (".." not in p and "%2" not in p or not escapes_table(p))
        ):
            for v in pv.values():
                if v is not None and type(v) is not str:
                    break
            else:
                return
    _check_add_full(body)


def _check_remove(body: Any) -> None:
    if type(body) is dict:
        g = body.get
        p, pv, size, ts, efm = g("path"), g("partitionValues"), g("size"), g("deletionTimestamp"), g(
            "extendedFileMetadata"
        )
        if (
            type(p) is str
            and type(g("dataChange")) is bool
            and (ts is None or type(ts) is int)
            and (efm is None or type(efm) is bool)
            and (size is None or (type(size) is int and size >= 0))
            and (pv is None or type(pv) is dict)
            and p
            and _fast_optional(body, _REMOVE_KEYS)
            and (".." not in p and "%2" not in p or not escapes_table(p))
        ):
            for v in (pv or {}).values():
                if v is not None and type(v) is not str:
                    break
            else:
                return
    _check_remove_full(body)


def _check_add_full(body: Any) -> None:
    b = _object(body, "add")
    _check_path("add", b.get("path"))
    _str_map(b, "add", "partitionValues", required=True)
    _int(b, "add", "size", required=True, min_value=0)
    _int(b, "add", "modificationTime", required=True)
    _bool(b, "add", "dataChange", required=True)
    _check_file_common(b, "add")
    _str(b, "add", "clusteringProvider")


def _check_remove_full(body: Any) -> None:
    b = _object(body, "remove")
    _check_path("remove", b.get("path"))
    _bool(b, "remove", "dataChange", required=True)
    _int(b, "remove", "deletionTimestamp")
    _bool(b, "remove", "extendedFileMetadata")
    _str_map(b, "remove", "partitionValues")
    _int(b, "remove", "size", min_value=0)
    _check_file_common(b, "remove")


def _check_cdc(body: Any) -> None:
    b = _object(body, "cdc")
    _check_path("cdc", b.get("path"))
    _str_map(b, "cdc", "partitionValues", required=True)
    _int(b, "cdc", "size", required=True, min_value=0)
    _bool(b, "cdc", "dataChange", required=True)
    _str_map(b, "cdc", "tags")


def _check_protocol(body: Any) -> None:
    b = _object(body, "protocol")
    _int(b, "protocol", "minReaderVersion", required=True, min_value=1)
    _int(b, "protocol", "minWriterVersion", required=True, min_value=1)
    _str_list(b, "protocol", "readerFeatures")
    _str_list(b, "protocol", "writerFeatures")


def _check_txn(body: Any) -> None:
    b = _object(body, "txn")
    _str(b, "txn", "appId", required=True)
    _int(b, "txn", "version", required=True)
    _int(b, "txn", "lastUpdated")


def _check_domain(body: Any) -> None:
    b = _object(body, "domainMetadata")
    _str(b, "domainMetadata", "domain", required=True)
    _str(b, "domainMetadata", "configuration", required=True)
    _bool(b, "domainMetadata", "removed", required=True)


def _check_commit_info(body: Any) -> None:
    b = _object(body, "commitInfo")
    _int(b, "commitInfo", "inCommitTimestamp")


def _check_metadata(body: Any) -> None:
    b = _object(body, "metaData")
    _str(b, "metaData", "id", required=True)
    _str(b, "metaData", "name")
    _str(b, "metaData", "description")
    fmt = b.get("format")
    if fmt is not None:
        fmt = _object(fmt, "metaData.format")
        _str(fmt, "metaData.format", "provider", required=True)
        _str_map(fmt, "metaData.format", "options")
    _str(b, "metaData", "schemaString")
    _str_list(b, "metaData", "partitionColumns", required=True)
    _str_map(b, "metaData", "configuration")
    _int(b, "metaData", "createdTime")
    schema_string = b.get("schemaString")
    if schema_string is not None:  # a missing schemaString fails where the schema is needed
        _check_schema(schema_string, tuple(b["partitionColumns"]))


ACTION_CHECKS: dict[str, Callable[[Any], None]] = {
    "add": _check_add,
    "remove": _check_remove,
    "metaData": _check_metadata,
    "protocol": _check_protocol,
    "txn": _check_txn,
    "commitInfo": _check_commit_info,
    "domainMetadata": _check_domain,
    "cdc": _check_cdc,
}


def check_action(obj: Mapping[str, Any]) -> None:
    """Check one parsed log line ``{"add": {...}}`` (unknown action keys are ignored, as readers must)."""
    for key, body in obj.items():
        check = ACTION_CHECKS.get(key)
        if check is not None and body is not None:
            check(body)


# -- metadata -------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _check_schema(schema_string: str, partition_columns: tuple[str, ...]) -> None:
    """The schema parses (known types, decimal bounds, no duplicate names) and the partition columns fit it."""
    try:
        schema = StructType.from_json(schema_string)
    except SchemaError as e:
        raise InvalidActionError("metaData.schemaString", str(e)) from None
    seen: set[str] = set()
    for col in partition_columns:
        f = schema.field(col)
        if f is None:
            raise InvalidActionError(
                "metaData.partitionColumns",
                f"partition column {col!r} is not in the schema (columns: {', '.join(schema.field_names)})",
            )
        if col.lower() in seen:
            raise InvalidActionError("metaData.partitionColumns", f"partition column {col!r} is listed twice")
        seen.add(col.lower())
        if not _partitionable(f.data_type):
            raise InvalidActionError(
                "metaData.partitionColumns",
                f"partition column {col!r} has type {f.data_type.simple_string()}, which cannot be partitioned on",
            )


def _partitionable(data_type: DataType) -> bool:
    if isinstance(data_type, DecimalType):
        return True
    return isinstance(data_type, PrimitiveType) and data_type.name != "variant"


# -- partition values -------------------------------------------------------------------------

@lru_cache(maxsize=65536)
def _value_ok(type_name: str, value: str) -> bool:
    """Whether a partition value string parses as ``type_name`` (PROTOCOL.md, Partition Value Serialization)."""
    try:
        parse_partition_value(value, type_name)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=64)
def _partition_types(schema_string: str, partition_columns: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """``partitionValues`` key -> (column name, type name); logical and physical names both map."""
    try:
        schema = StructType.from_json(schema_string)
    except SchemaError:
        return {}
    out: dict[str, tuple[str, str]] = {}
    for col in partition_columns:
        f = schema.field(col)
        if f is None:
            continue
        type_name = f.data_type.to_json_value() if isinstance(f.data_type, (PrimitiveType, DecimalType)) else ""
        if type_name in ("", "string", "binary"):
            continue
        for key in (f.name, physical_name(f)):
            out[key] = (f.name, type_name)
    return out


def check_partition_values(metadata: Metadata, pairs: Iterable[tuple[str, str | None]]) -> None:
    """Every ``(key, value)`` of ``add.partitionValues`` parses as its column's type.

    Keys that are not partition columns are left alone (readers ignore them).
    """
    if metadata.schema_string is None or not metadata.partition_columns:
        return
    types = _partition_types(metadata.schema_string, tuple(metadata.partition_columns))
    if not types:
        return
    for key, value in pairs:
        if value is None:
            continue
        t = types.get(key)
        if t is not None and not _value_ok(t[1], value):
            raise InvalidActionError(
                f"add.partitionValues.{key}",
                f"partition value {value!r} of column {t[0]!r} is not a valid {t[1]}",
                value=value,
            )


# -- checkpoint add rows (columnar) -------------------------------------------------------------


def check_add_column(arr: pa.StructArray) -> None:
    """The checkpoint's ``add`` rows (non-null ones only) as the protocol requires, checked per column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    types = {f.name: f.type for f in arr.type}

    def column(name: str, ok: Callable[[Any], bool], what: str, *, required: bool) -> Any:
        t = types.get(name)
        if t is None:
            if required:
                raise InvalidActionError(f"add.{name}", "is missing (the checkpoint has no such column)")
            return None
        if not ok(t) and not pa.types.is_null(t):
            raise InvalidActionError(f"add.{name}", f"must be {what}, but the checkpoint column is {t}")
        col = arr.field(name)
        if required and col.null_count:
            raise InvalidActionError(f"add.{name}", f"is missing in {col.null_count} add row(s)")
        return col

    is_str, is_int = _is_string, pa.types.is_integer
    path = column("path", is_str, "a string", required=True)
    column("partitionValues", _is_string_map, "a map of strings", required=True)
    column("size", is_int, "an integer", required=True)
    column("modificationTime", is_int, "an integer", required=True)
    column("dataChange", pa.types.is_boolean, "a boolean", required=True)
    column("stats", is_str, "a string", required=False)
    column("tags", _is_string_map, "a map of strings", required=False)
    column("baseRowId", is_int, "an integer", required=False)
    column("defaultRowCommitVersion", is_int, "an integer", required=False)
    column("clusteringProvider", is_str, "a string", required=False)
    if len(arr) and pc.any(pc.equal(path, "")).as_py():
        raise InvalidActionError("add.path", _wanted("a non-empty string", ""))
    data = path.buffers()[2]
    if data is not None and _may_hold_dot_dot(data):  # only then look at paths one by one
        for p in path.to_pylist():
            _check_path("add", p)
    dv = column("deletionVector", pa.types.is_struct, "a struct", required=False)
    if dv is not None and dv.null_count < len(dv):
        for row in dv.filter(pc.is_valid(dv)).to_pylist():
            _check_dv({"deletionVector": {k: v for k, v in row.items() if v is not None}}, "add")


def _may_hold_dot_dot(raw: Any) -> bool:
    """Whether the bytes of many paths hold ``..`` or an encoded dot (``%2E``), scanned in a few vector passes.

    ``raw``: bytes or a buffer (an Arrow buffer is read in place, not copied). (``b".." in
    raw`` is ten times slower: every path has a dot.)
    """
    import numpy as np

    codes = np.frombuffer(raw, np.uint8)
    n = len(codes)
    if n < 2:
        return False
    dot_dot = 0x2E2E
    even = np.frombuffer(raw, np.uint16, count=n // 2)
    odd = np.frombuffer(raw, np.uint16, count=(n - 1) // 2, offset=1)
    if bool((even == dot_dot).any() or (odd == dot_dot).any()):
        return True
    at = np.flatnonzero(codes[:-2] == 0x25)  # '%', then '2', then 'E' or 'e'
    return bool(((codes[at + 1] == 0x32) & ((codes[at + 2] | 0x20) == 0x65)).any())


def _is_string(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _is_string_map(t: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_map(t) and _is_string(t.key_type) and (_is_string(t.item_type) or pa.types.is_null(t.item_type))
    )


def add_column_partition_values(arr: pa.StructArray) -> set[tuple[str, str]]:
    """The distinct non-null ``(key, value)`` pairs of the ``partitionValues`` of checkpoint add rows."""
    import pyarrow.compute as pc

    if "partitionValues" not in {f.name for f in arr.type}:
        return set()
    pv = arr.field("partitionValues")
    keys, items = pv.keys, pv.items
    if len(keys) == 0:
        return set()
    out: set[tuple[str, str]] = set()
    distinct_keys = pc.unique(keys).to_pylist()
    for key in distinct_keys:
        values = items if len(distinct_keys) == 1 else items.filter(pc.equal(keys, key))
        out.update((key, v) for v in pc.unique(values).to_pylist() if v is not None)
    return out
