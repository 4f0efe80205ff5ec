"""Table properties (``delta.*`` keys): names, defaults, parsing and validation.

Keys are constants next to their defaults. Unknown ``delta.*`` keys and bad values are
rejected with an error naming the key and the valid values; keys outside ``delta.``
are user properties and pass through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from serialake.exceptions import InvalidPropertyError

ISOLATION_LEVEL = "delta.isolationLevel"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_INTERVAL_DEFAULT = 10
CHECKPOINT_POLICY = "delta.checkpointPolicy"  # "v2" needs the v2Checkpoint feature
ENABLE_DELETION_VECTORS = "delta.enableDeletionVectors"
APPEND_ONLY = "delta.appendOnly"
LOG_RETENTION = "delta.logRetentionDuration"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
DELETED_FILE_RETENTION_DEFAULT = "interval 1 week"
ENABLE_CDF = "delta.enableChangeDataFeed"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
COLUMN_MAPPING_MAX_ID = "delta.columnMapping.maxColumnId"
ENABLE_ICEBERG_COMPAT_V2 = "delta.enableIcebergCompatV2"
UNIVERSAL_FORMATS = "delta.universalFormat.enabledFormats"
ENABLE_ICT = "delta.enableInCommitTimestamps"
# Set by the commit that turns in-commit timestamps on for a table with earlier commits: its version and ICT.
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
ROW_LEVEL_CONCURRENCY = "delta.enableRowLevelConcurrency"
ROW_LEVEL_CONCURRENCY_DEFAULT = True
TARGET_FILE_SIZE = "delta.targetFileSize"
MIN_READER_VERSION = "delta.minReaderVersion"
MIN_WRITER_VERSION = "delta.minWriterVersion"
FEATURE_PREFIX = "delta.feature."
CONSTRAINT_PREFIX = "delta.constraints."  # + name: a CHECK constraint (``core.model.constraints``)
#: Session settings ``<prefix><prop>`` give every new table ``delta.<prop>`` (delta-spark's
#: ``spark.databricks.delta.properties.defaults.*``; ``with_session_defaults``).
SESSION_DEFAULTS_PREFIX = "spark.databricks.delta.properties.defaults."

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"
ISOLATION_LEVELS = (SERIALIZABLE, WRITE_SERIALIZABLE)
DEFAULT_ISOLATION_LEVEL = WRITE_SERIALIZABLE

_INTERVAL = re.compile(
    r"^\s*(?:interval\s+)?(\d+)\s*(nanosecond|microsecond|millisecond|second|minute|hour|day|week)s?\s*$",
    re.IGNORECASE,
)
_UNIT_MS = {
    "nanosecond": 1e-6,
    "microsecond": 1e-3,
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


def parse_interval_ms(text: str) -> int:
    """Milliseconds in a Delta interval such as ``interval 7 days``."""
    m = _INTERVAL.match(text)
    if not m:
        raise ValueError(text)
    return int(int(m.group(1)) * _UNIT_MS[m.group(2).lower()])


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ValueError(text)
    return low == "true"


def _positive_int(text: str) -> int:
    n = int(text)
    if n <= 0:
        raise ValueError(text)
    return n


def _isolation(text: str) -> str:
    for level in ISOLATION_LEVELS:
        if text.strip().lower() == level.lower():
            return level
    raise ValueError(text)


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        low = text.strip().lower()
        for c in choices:
            if low == c.lower():
                return c
        raise ValueError(text)

    return parse


@dataclass(frozen=True)
class PropertySpec:
    """How one ``delta.*`` property is parsed, and what a user is told is valid."""

    key: str
    parse: Callable[[str], Any]
    valid: str
    default: Any = None


_SPECS: dict[str, PropertySpec] = {
    s.key.lower(): s
    for s in (
        PropertySpec(ISOLATION_LEVEL, _isolation, "Serializable, WriteSerializable", DEFAULT_ISOLATION_LEVEL),
        PropertySpec(CHECKPOINT_INTERVAL, _positive_int, "a positive integer", CHECKPOINT_INTERVAL_DEFAULT),
        PropertySpec(ENABLE_DELETION_VECTORS, _bool, "true, false", False),
        PropertySpec(APPEND_ONLY, _bool, "true, false", False),
        PropertySpec(ENABLE_CDF, _bool, "true, false", False),
        PropertySpec(ENABLE_ICT, _bool, "true, false", False),
        PropertySpec(ROW_LEVEL_CONCURRENCY, _bool, "true, false", ROW_LEVEL_CONCURRENCY_DEFAULT),
        PropertySpec(LOG_RETENTION, parse_interval_ms, "an interval such as 'interval 30 days'", 30 * 86_400_000),
        PropertySpec(
            DELETED_FILE_RETENTION,
            parse_interval_ms,
            "an interval such as 'interval 7 days'",
            parse_interval_ms(DELETED_FILE_RETENTION_DEFAULT),
        ),
        PropertySpec(COLUMN_MAPPING_MODE, _one_of("none", "name", "id"), "none, name, id", "none"),
        PropertySpec(TARGET_FILE_SIZE, _positive_int, "a size in bytes", 128 * 1024 * 1024),
        PropertySpec(MIN_READER_VERSION, _positive_int, "1, 2, 3", None),
        PropertySpec(MIN_WRITER_VERSION, _positive_int, "1 to 7", None),
        # Read and kept, not acted on by this library.
        PropertySpec("delta.logRetentionDuration.enabled", _bool, "true, false", True),
        PropertySpec("delta.enableExpiredLogCleanup", _bool, "true, false", True),
        PropertySpec("delta.dataSkippingNumIndexedCols", int, "an integer", 32),
        PropertySpec("delta.dataSkippingStatsColumns", str, "a comma-separated column list", None),
        PropertySpec("delta.checkpoint.writeStatsAsJson", _bool, "true, false", True),
        PropertySpec("delta.checkpoint.writeStatsAsStruct", _bool, "true, false", False),
        PropertySpec(CHECKPOINT_POLICY, _one_of("classic", "v2"), "classic, v2", "classic"),
        PropertySpec(COLUMN_MAPPING_MAX_ID, int, "an integer", None),
        PropertySpec("delta.randomizeFilePrefixes", _bool, "true, false", False),
        PropertySpec("delta.randomPrefixLength", _positive_int, "a positive integer", 2),
        PropertySpec("delta.setTransactionRetentionDuration", parse_interval_ms, "an interval", None),
        PropertySpec("delta.compatibility.symlinkFormatManifest.enabled", _bool, "true, false", False),
        PropertySpec("delta.autoOptimize.optimizeWrite", _bool, "true, false", False),
        PropertySpec("delta.autoOptimize.autoCompact", str, "true, false, auto, legacy", None),
        PropertySpec("delta.tuneFileSizesForRewrites", _bool, "true, false", False),
        PropertySpec("delta.enableTypeWidening", _bool, "true, false", False),
        PropertySpec("delta.enableRowTracking", _bool, "true, false", False),
        PropertySpec(ENABLE_ICEBERG_COMPAT_V2, _bool, "true, false", False),
        PropertySpec("delta.enableIcebergCompatV1", _bool, "true, false", False),
        PropertySpec(UNIVERSAL_FORMATS, str, "iceberg, hudi", None),
        PropertySpec("delta.parquet.compression.codec", str, "snappy, zstd, gzip, lz4, none", None),
        PropertySpec(ICT_ENABLEMENT_VERSION, int, "a version", None),
        PropertySpec(ICT_ENABLEMENT_TIMESTAMP, int, "a timestamp", None),
        PropertySpec("delta.rowTracking.materializedRowIdColumnName", str, "a column name", None),
        PropertySpec("delta.rowTracking.materializedRowCommitVersionColumnName", str, "a column name", None),
    )
}

# Prefixes of delta.* keys that carry user data (constraints) or per-feature switches.
_OPEN_PREFIXES = (CONSTRAINT_PREFIX, FEATURE_PREFIX)


def canonical_key(key: str) -> str:
    """The canonical spelling of a known ``delta.*`` key (keys are case-insensitive)."""
    spec = _SPECS.get(key.lower())
    return spec.key if spec else key


def validate_property(key: str, value: str, *, table: str | None = None) -> tuple[str, str]:
    """The canonical ``(key, value)`` for a property to set, or ``InvalidPropertyError``."""
    where = f" on table {table}" if table else ""
    if not key.lower().startswith("delta."):
        return key, value
    if key.lower().startswith(_OPEN_PREFIXES):
        if key.lower().startswith(FEATURE_PREFIX) and value.lower() not in ("supported", "enabled"):
            raise InvalidPropertyError(
                f"Invalid value '{value}' for table property '{key}'{where}. Valid values: supported"
            )
        return key, value
    spec = _SPECS.get(key.lower())
    if spec is None:
        known = ", ".join(sorted(s.key for s in _SPECS.values()))
        raise InvalidPropertyError(f"Unknown table property '{key}'{where}. Known delta.* properties: {known}")
    try:
        parsed = spec.parse(str(value))
    except (ValueError, TypeError):
        raise InvalidPropertyError(
            f"Invalid value '{value}' for table property '{spec.key}'{where}. Valid values: {spec.valid}"
        ) from None
    if spec.key == ISOLATION_LEVEL:
        value = parsed
    elif isinstance(parsed, bool):
        value = "true" if parsed else "false"
    return spec.key, str(value)


def validate_properties(props: Mapping[str, Any], *, table: str | None = None) -> dict[str, str]:
    """Validate and canonicalize many properties at once."""
    out: dict[str, str] = {}
    for k, v in props.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        ck, cv = validate_property(k, str(v), table=table)
        out[ck] = cv
    return out


_session_defaults: Callable[[], Mapping[str, str]] | None = None


def set_session_defaults_source(source: Callable[[], Mapping[str, str]] | None) -> None:
    """Where ``with_session_defaults`` takes the session's defaults from (``delta.<prop>`` -> value).

    The Spark layer registers the active SparkSession's ``SESSION_DEFAULTS_PREFIX`` settings;
    without a source (the core alone) there are none.
    """
    global _session_defaults
    _session_defaults = source


def with_session_defaults(configuration: Mapping[str, str], *, table: str | None = None) -> dict[str, str]:
    """``configuration`` of a table being created, over the session's defaults for new tables.

    As delta-spark does: each ``spark.databricks.delta.properties.defaults.<prop>`` setting
    gives ``delta.<prop>`` unless the table sets it itself. A default is validated as a table
    property; an invalid one is refused naming the session setting.
    """
    source = _session_defaults
    defaults = source() if source is not None else {}
    if not defaults:
        return dict(configuration)
    given = {k.lower() for k in configuration}
    out: dict[str, str] = {}
    for key, value in defaults.items():
        try:
            ck, cv = validate_property(key, value, table=table)
        except InvalidPropertyError as e:
            setting = SESSION_DEFAULTS_PREFIX + key[len("delta."):]
            raise InvalidPropertyError(f"The session setting {setting}={value} is not a valid default: {e}") from None
        if ck.lower() not in given:
            out[ck] = cv
    out.update(configuration)
    return out


def raw(configuration: Mapping[str, str], key: str) -> str | None:
    """The stored value of ``key``, matched case-insensitively (the first spelling), or None.

    Every commit asks a few of these: no dict or generator is built, and a stored key is
    lowered only when its length could match.
    """
    wanted = key.lower()
    size = len(wanted)
    for k, v in configuration.items():
        if len(k) == size and k.lower() == wanted:
            return v
    return None


def is_true(configuration: Mapping[str, str], key: str) -> bool:
    """Whether the stored value of ``key`` is ``true`` (any case); absent or anything else: False."""
    value = raw(configuration, key)
    return value is not None and value.lower() == "true"


def get(configuration: Mapping[str, str], key: str) -> Any:
    """The parsed value of a property, or its default; a bad stored value falls back to the default."""
    spec = _SPECS[key.lower()]
    value = raw(configuration, key)
    if value is None:
        return spec.default
    try:
        return spec.parse(value)
    except (ValueError, TypeError):
        return spec.default


def isolation_level(configuration: Mapping[str, str]) -> str:
    """The table's isolation level (``Serializable`` or ``WriteSerializable``)."""
    return get(configuration, ISOLATION_LEVEL)
