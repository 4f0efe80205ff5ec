"""Delta log actions as frozen dataclasses with exact JSON round trip.

Each action knows its JSON key (``add``, ``remove``, ...) and its field names in the
Delta protocol. ``from_json(to_json(a)) == a`` for every action, and fields this
library does not model are kept in ``extra`` so a rewrite never drops them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote, unquote

import orjson

_T = TypeVar("_T")

__all__ = [
    "ACTION_TYPES",
    "Action",
    "AddCDCFile",
    "AddFile",
    "CommitInfo",
    "DeletionVectorDescriptor",
    "DomainMetadata",
    "FileAction",
    "Format",
    "Metadata",
    "Protocol",
    "RemoveFile",
    "SetTransaction",
    "action_from_dict",
    "action_from_json",
    "actions_to_jsonl",
    "decode_path",
    "encode_path",
    "now_ms",
]


def now_ms() -> int:
    """Milliseconds since the epoch, the Delta log's time unit."""
    return int(time.time() * 1000)


def encode_path(relative_path: str) -> str:
    """URI-encode a relative data-file path for ``add.path`` (keeps ``/`` and ``=``)."""
    return quote(relative_path, safe="/=:@!$&'()*+,;-._~")


def decode_path(path: str) -> str:
    """Decode an ``add.path`` into a file-system path fragment."""
    return unquote(path)


class _Codec:
    """Field-name mapping between snake_case attributes and the protocol's camelCase keys."""

    # attribute -> JSON key; set per class.
    KEYS: ClassVar[dict[str, str]] = {}
    # Per-class caches set by _codec_info() / _defaults(); declared here without a value (for the type
    # checker) and read through cls.__dict__, so a subclass never uses its parent's.
    _CODEC_INFO: ClassVar[tuple[dict[str, str], bool]]
    _DEFAULTS: ClassVar[tuple[dict[str, Any], tuple[tuple[str, Any], ...]]]

    @classmethod
    def _codec_info(cls) -> tuple[dict[str, str], bool]:
        """(JSON key -> attribute, whether the class keeps unknown keys), computed once per class."""
        info = cls.__dict__.get("_CODEC_INFO")
        if info is None:
            by_key = {v: k for k, v in cls.KEYS.items()}
            has_extra = "extra" in {f.name for f in fields(cls)}  # type: ignore[arg-type]
            info = (by_key, has_extra)
            cls._CODEC_INFO = info
        return info

    @classmethod
    def _defaults(cls) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
        """Per-class field defaults: (plain defaults, (name, factory) pairs), computed once."""
        d = cls.__dict__.get("_DEFAULTS")
        if d is None:
            plain: dict[str, Any] = {}
            factories: list[tuple[str, Any]] = []
            for f in fields(cls):  # type: ignore[arg-type]
                if f.default is not MISSING:
                    plain[f.name] = f.default
                elif f.default_factory is not MISSING:
                    factories.append((f.name, f.default_factory))
            d = (plain, tuple(factories))
            cls._DEFAULTS = d
        return d

    @classmethod
    def _from_obj(cls, obj: Mapping[str, Any]) -> Any:
        by_key, has_extra = cls.__dict__.get("_CODEC_INFO") or cls._codec_info()
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in obj.items():
            attr = by_key.get(key)
            if attr is None:
                extra[key] = value
            else:
                kwargs[attr] = value
        if has_extra:
            kwargs["extra"] = extra
        return cls._from_attrs(kwargs)

    @classmethod
    def _from_attrs(cls, attrs: dict[str, Any]) -> Any:
        """An instance with these attribute values and the defaults for the rest.

        Built without the frozen __init__ (one object.__setattr__ per field is the
        bottleneck when replaying 100k-file logs); __post_init__ still normalises.
        """
        plain, factories = cls.__dict__.get("_DEFAULTS") or cls._defaults()
        state = dict(plain)
        for name, factory in factories:
            if name not in attrs:
                state[name] = factory()
        state.update(attrs)
        inst = object.__new__(cls)
        inst.__dict__.update(state)
        post = getattr(inst, "__post_init__", None)
        if post is not None:
            post()
        return inst

    def _to_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, key in self.KEYS.items():
            value = getattr(self, attr)
            if value is None:
                continue
            if isinstance(value, _Codec):
                value = value._to_obj()
            elif isinstance(value, tuple):
                value = list(value)
            out[key] = value
        extra = getattr(self, "extra", None)
        if extra:
            for k, v in extra.items():
                out.setdefault(k, v)
        return out


def dv_unique_id(obj: Mapping[str, Any]) -> str:
    """``DeletionVectorDescriptor.unique_id`` of a descriptor's checked JSON object (no object built)."""
    base = f"{obj['storageType']}{obj['pathOrInlineDv']}"
    offset = obj.get("offset")
    return f"{base}@{offset}" if offset is not None else base


@dataclass(frozen=True)
class DeletionVectorDescriptor(_Codec):
    """Where a file's deleted-row bitmap is stored ('u' file, 'i' inline, 'p' absolute path)."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEYS: ClassVar[dict[str, str]] = {
        "storage_type": "storageType",
        "path_or_inline_dv": "pathOrInlineDv",
        "offset": "offset",
        "size_in_bytes": "sizeInBytes",
        "cardinality": "cardinality",
    }

    @property
    def unique_id(self) -> str:
        """``storageType + pathOrInlineDv [+ '@' + offset]``: the DV's identity in log replay."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return f"{base}@{self.offset}" if self.offset is not None else base

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any] | None) -> DeletionVectorDescriptor | None:
        return None if obj is None else cls._from_obj(obj)


def _compact_encoder() -> Any:
    """``json.dumps(obj, separators=(",", ":"))`` as a function, with the C encoder made once.

    ``json.dumps`` builds an encoder per call (~1 us, twice per commit written). Log actions
    are trees of dicts, lists and scalars: the circular-reference check is left out.
    """
    from json import encoder

    compact = json.JSONEncoder(separators=(",", ":"))
    make = getattr(encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return compact.encode
    encode_c = make(None, compact.default, encoder.encode_basestring_ascii, None, ":", ",", False, False, True)

    def encode(obj: Any) -> str:
        return "".join(encode_c(obj, 0))

    return encode


_compact_json = _compact_encoder()

#: orjson writes what json writes, except that it writes text as UTF-8 (json escapes it), refuses
#: integers past 64 bits and keys that are not strings (json writes those: they take its path), and
#: writes a float that is not finite as null (json writes NaN, which no Delta reader reads).
#: Dataclasses and dates are refused as json refuses them, not turned into objects and strings.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _dumps(obj: Any) -> bytes:
    """One action as compact JSON in UTF-8: orjson (~6x faster), json for what orjson refuses."""
    try:
        return orjson.dumps(obj, option=_ORJSON_OPTIONS)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return _compact_json(obj).encode("utf-8")


@dataclass(frozen=True)
class Action(_Codec):
    """Base of all actions; ``KEY`` is the action's top-level JSON key."""

    KEY: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """The action as ``{KEY: {...}}``, ready for ``json.dumps``."""
        return {self.KEY: self._to_obj()}

    def to_json(self) -> str:
        """One line of a commit file."""
        return _dumps(self.to_dict()).decode("utf-8")


@dataclass(frozen=True)
class Format(_Codec):
    """The data-file format of a table (always parquet)."""

    provider: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)

    KEYS: ClassVar[dict[str, str]] = {"provider": "provider", "options": "options"}


@dataclass(frozen=True)
class Protocol(Action):
    """Reader/writer protocol versions and, from reader 3 / writer 7, named features."""

    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEY: ClassVar[str] = "protocol"
    KEYS: ClassVar[dict[str, str]] = {
        "min_reader_version": "minReaderVersion",
        "min_writer_version": "minWriterVersion",
        "reader_features": "readerFeatures",
        "writer_features": "writerFeatures",
    }

    def __post_init__(self) -> None:
        for name in ("reader_features", "writer_features"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))


@dataclass(frozen=True)
class Metadata(Action):
    """Table identity, schema, partitioning and properties."""

    schema_string: str | None = '{"type":"struct","fields":[]}'
    partition_columns: tuple[str, ...] = ()
    configuration: dict[str, str] = field(default_factory=dict)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    name: str | None = None
    description: str | None = None
    format: Format = field(default_factory=Format)
    created_time: int | None = field(default_factory=now_ms)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEY: ClassVar[str] = "metaData"
    KEYS: ClassVar[dict[str, str]] = {
        "id": "id",
        "name": "name",
        "description": "description",
        "format": "format",
        "schema_string": "schemaString",
        "partition_columns": "partitionColumns",
        "configuration": "configuration",
        "created_time": "createdTime",
    }

    @classmethod
    def _from_obj(cls, obj: Mapping[str, Any]) -> Metadata:
        # Absent optional keys stay absent: no fresh id or createdTime on read.
        out = super()._from_obj({"createdTime": None, "schemaString": None, **obj})
        return out

    def __post_init__(self) -> None:
        if self.partition_columns is None:
            object.__setattr__(self, "partition_columns", ())
        if not isinstance(self.partition_columns, tuple):
            object.__setattr__(self, "partition_columns", tuple(self.partition_columns))
        if isinstance(self.format, Mapping):
            object.__setattr__(self, "format", Format._from_obj(self.format))
        if self.configuration is None:
            object.__setattr__(self, "configuration", {})

    @property
    def schema(self) -> Any:
        """The parsed schema (``serialake.core.model.schema.StructType``)."""
        from serialake.core.model.schema import StructType
        from serialake.exceptions import CorruptLogError

        if self.schema_string is None:
            raise CorruptLogError(f"Table metadata {self.id} has no schemaString")
        return StructType.from_json(self.schema_string)

    def derived(self, fn: Callable[[Metadata], _T]) -> _T:
        """``fn(self)``, computed once for this object and then kept.

        For what every commit derives from the properties and schema (isolation level, append-only,
        change data feed, row-level resolution, ...): each costs microseconds to work out from the
        properties, matched case-insensitively, and a commit asks about ten. Metadata never changes (a
        change is a new object), so ``fn`` must read nothing but it. Kept beside the object (by its
        identity, holding it), not in it: ``vars()``, copies and pickles of it are unchanged.
        """
        held = _DERIVED.get(id(self))
        if held is None or held[0] is not self:
            if len(_DERIVED) >= _DERIVED_MAX:
                _DERIVED.clear()
            held = _DERIVED[id(self)] = (self, {})
        memo = held[1]
        try:
            return memo[fn]
        except KeyError:
            value = memo[fn] = fn(self)
            return value

    def with_configuration(self, **changes: str | None) -> Metadata:
        """A copy with properties set (value) or unset (None)."""
        conf = dict(self.configuration)
        for k, v in changes.items():
            if v is None:
                conf.pop(k, None)
            else:
                conf[k] = v
        return replace(self, configuration=conf)


#: ``Metadata.derived``'s memos: id -> (the metadata, its memo). Metadata objects live long (one per
#: table version that changed it), so a few hundred cover every table a process writes.
_DERIVED: dict[int, tuple[Metadata, dict[Any, Any]]] = {}
_DERIVED_MAX = 256


@dataclass(frozen=True)
class FileAction(Action):
    """Common shape of add and remove."""

    path: str = ""
    data_change: bool = True
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None

    def __post_init__(self) -> None:
        dv = self.deletion_vector
        if dv is not None and isinstance(dv, dict):
            object.__setattr__(self, "deletion_vector", DeletionVectorDescriptor._from_obj(dv))

    @property
    def dv_id(self) -> str | None:
        """The deletion vector's unique id, or None."""
        return self.deletion_vector.unique_id if self.deletion_vector else None

    @property
    def key(self) -> tuple[str, str | None]:
        """Log-replay identity: ``(path, dv unique id)``."""
        return (self.path, self.dv_id)

    def parsed_stats(self) -> dict[str, Any] | None:
        """``stats`` as a dict, or None when absent or not valid JSON."""
        if not self.stats:
            return None
        try:
            value = json.loads(self.stats)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def num_records(self) -> int | None:
        """``stats.numRecords`` when present."""
        n = (self.parsed_stats() or {}).get("numRecords")
        return int(n) if n is not None else None


_FILE_KEYS = {
    "path": "path",
    "partition_values": "partitionValues",
    "size": "size",
    "data_change": "dataChange",
    "stats": "stats",
    "tags": "tags",
    "deletion_vector": "deletionVector",
    "base_row_id": "baseRowId",
    "default_row_commit_version": "defaultRowCommitVersion",
}


@dataclass(frozen=True)
class AddFile(FileAction):
    """A data file that is part of the table from this version on."""

    modification_time: int = 0
    clustering_provider: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEY: ClassVar[str] = "add"
    KEYS: ClassVar[dict[str, str]] = {
        **_FILE_KEYS,
        "modification_time": "modificationTime",
        "clustering_provider": "clusteringProvider",
    }

    def remove(
        self, *, data_change: bool = True, timestamp: int | None = None
    ) -> RemoveFile:
        """The tombstone that removes this file (carrying its stats and DV)."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=now_ms() if timestamp is None else timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=self.partition_values,
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(frozen=True)
class RemoveFile(FileAction):
    """A tombstone: the file (with this DV) leaves the table at this version."""

    deletion_timestamp: int | None = None
    extended_file_metadata: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEY: ClassVar[str] = "remove"
    KEYS: ClassVar[dict[str, str]] = {
        **_FILE_KEYS,
        "deletion_timestamp": "deletionTimestamp",
        "extended_file_metadata": "extendedFileMetadata",
    }


@dataclass(frozen=True)
class AddCDCFile(Action):
    """A change-data file (not part of the table's data)."""

    path: str = ""
    partition_values: dict[str, str | None] = field(default_factory=dict)
    size: int = 0
    data_change: bool = False
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEY: ClassVar[str] = "cdc"
    KEYS: ClassVar[dict[str, str]] = {
        "path": "path",
        "partition_values": "partitionValues",
        "size": "size",
        "data_change": "dataChange",
        "tags": "tags",
    }


@dataclass(frozen=True)
class SetTransaction(Action):
    """Idempotency marker: application ``app_id`` has committed its ``version``."""

    app_id: str = ""
    version: int = 0
    last_updated: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEY: ClassVar[str] = "txn"
    KEYS: ClassVar[dict[str, str]] = {
        "app_id": "appId",
        "version": "version",
        "last_updated": "lastUpdated",
    }


@dataclass(frozen=True)
class DomainMetadata(Action):
    """Named configuration owned by a feature or the user; ``removed`` is a tombstone."""

    domain: str = ""
    configuration: str = ""
    removed: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    KEY: ClassVar[str] = "domainMetadata"
    KEYS: ClassVar[dict[str, str]] = {
        "domain": "domain",
        "configuration": "configuration",
        "removed": "removed",
    }


@dataclass(frozen=True)
class CommitInfo(Action):
    """Free-form provenance of a commit; known keys are exposed as properties."""

    values: dict[str, Any] = field(default_factory=dict)

    KEY: ClassVar[str] = "commitInfo"

    def _to_obj(self) -> dict[str, Any]:
        return dict(self.values)

    @classmethod
    def _from_obj(cls, obj: Mapping[str, Any]) -> CommitInfo:
        inst = object.__new__(cls)  # (the frozen __init__, without its setattr; one per commit read)
        inst.__dict__["values"] = dict(obj)
        return inst

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def operation(self) -> str | None:
        return self.values.get("operation")

    @property
    def txn_id(self) -> str | None:
        return self.values.get("txnId")

    @property
    def is_blind_append(self) -> bool | None:
        return self.values.get("isBlindAppend")

    @property
    def timestamp(self) -> int | None:
        ts = self.values.get("inCommitTimestamp", self.values.get("timestamp"))
        return int(ts) if ts is not None else None


ACTION_TYPES: dict[str, type[Action]] = {
    cls.KEY: cls
    for cls in (Protocol, Metadata, AddFile, RemoveFile, AddCDCFile, SetTransaction, DomainMetadata, CommitInfo)
}
"""The action class of each top-level JSON key of a log line."""
_ACTION_TYPES = ACTION_TYPES

# Keys of actions the protocol defines that we read but do not model (kept as opaque).
_IGNORED_KEYS = {"checkpointMetadata", "sidecar"}


def action_from_dict(obj: Mapping[str, Any]) -> Action | None:
    """Build the action in a one-key dict; unknown action keys give None (readers must ignore them)."""
    for key, body in obj.items():
        cls = _ACTION_TYPES.get(key)
        if cls is not None and body is not None:
            return cls._from_obj(body)
    return None


def action_from_json(line: str) -> Action | None:
    """Parse one line of a commit file."""
    return action_from_dict(json.loads(line))


def actions_to_jsonl(actions: list[Action]) -> bytes:
    """Serialize actions as a commit file body: one line of compact JSON (UTF-8) per action."""
    return b"\n".join([_dumps(a.to_dict()) for a in actions]) + b"\n"
