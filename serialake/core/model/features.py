"""Table features and protocol versions: what a table needs and what we support.

Legacy protocols (reader < 3, writer < 7) imply features by version number; newer ones
list them. A table that needs a reader feature we cannot read, or (for writes) a writer
feature we cannot honour, fails with an error naming the feature.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from serialake.core.model import properties as props
from serialake.core.model.actions import Metadata, Protocol
from serialake.core.model.column_mapping import mapping_mode
from serialake.core.model.constraints import generated_columns
from serialake.core.model.identity import identity_columns
from serialake.core.model.schema import StructType
from serialake.exceptions import UnsupportedFeatureError

READER_WRITER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding-preview",
        "catalogManaged",
        "catalogOwned-preview",
    }
)

# Features whose presence does not change how we read (or that we implement on read): every
# reader-writer feature but shredded variants and catalog-managed tables (a catalog owns their commits).
SUPPORTED_READER_FEATURES = READER_WRITER_FEATURES - {
    "variantShredding-preview",
    "catalogManaged",
    "catalogOwned-preview",
}

# Writer features we honour on every write.
SUPPORTED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "clustering",
        "deletionVectors",
        "timestampNtz",
        "domainMetadata",
        "vacuumProtocolCheck",
        "v2Checkpoint",
        "columnMapping",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "icebergCompatV2",
        "inCommitTimestamp",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
    }
)

_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("appendOnly", "invariants", "checkConstraints"),
    4: ("appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"),
    5: ("appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping"),
    6: (
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    ),
}

# Reader features reader version 2 implies (``reader_features``).
_LEGACY_READER = frozenset({"columnMapping"})

# Table property that turns a feature on, when the table has it.
FEATURE_PROPERTY = {
    "deletionVectors": props.ENABLE_DELETION_VECTORS,
    "appendOnly": props.APPEND_ONLY,
    "changeDataFeed": props.ENABLE_CDF,
    "inCommitTimestamp": props.ENABLE_ICT,
    "icebergCompatV2": props.ENABLE_ICEBERG_COMPAT_V2,
}


def reader_features(protocol: Protocol) -> frozenset[str]:
    """Reader features a protocol requires (legacy reader 2 means columnMapping)."""
    if protocol.min_reader_version >= 3:
        return frozenset(protocol.reader_features or ())
    return _LEGACY_READER if protocol.min_reader_version == 2 else frozenset()


def writer_features(protocol: Protocol) -> frozenset[str]:
    """Writer features a protocol lists or implies."""
    if protocol.min_writer_version >= 7:
        return frozenset(protocol.writer_features or ())
    return frozenset(_LEGACY_WRITER.get(protocol.min_writer_version, ()))


def table_features(protocol: Protocol) -> frozenset[str]:
    """Every feature a protocol lists or implies, reader and writer (``DESCRIBE DETAIL``'s ``tableFeatures``)."""
    return reader_features(protocol) | writer_features(protocol)


def has_feature(protocol: Protocol, feature: str) -> bool:
    return feature in writer_features(protocol) or feature in reader_features(protocol)


#: Protocols found readable / writable, by identity (held, so an id is never reused while here):
#: every snapshot refresh and every commit asks again about the same protocol object.
_READABLE: dict[int, Protocol] = {}
_WRITABLE: dict[int, Protocol] = {}
_CHECKED_MAX = 256


def _remember(checked: dict[int, Protocol], protocol: Protocol) -> None:
    if len(checked) >= _CHECKED_MAX:
        checked.clear()
    checked[id(protocol)] = protocol


def check_readable(protocol: Protocol, table: str) -> None:
    """Fail, naming the features, if we cannot read a table with this protocol."""
    if _READABLE.get(id(protocol)) is protocol:
        return
    _check_readable(protocol, table)
    _remember(_READABLE, protocol)


def _check_readable(protocol: Protocol, table: str) -> None:
    if protocol.min_reader_version > 3:
        raise UnsupportedFeatureError(
            f"Table {table} requires reader version {protocol.min_reader_version}; "
            "this library reads protocol versions up to 3. Upgrade serialake."
        )
    missing = sorted(reader_features(protocol) - SUPPORTED_READER_FEATURES)
    if missing:
        raise UnsupportedFeatureError(
            f"Table {table} requires reader feature(s) {', '.join(missing)}, which serialake does not support."
        )


def check_writable(protocol: Protocol, metadata: Metadata | None, table: str) -> None:
    """Fail, naming the features, if we cannot write a table with this protocol and metadata."""
    if _WRITABLE.get(id(protocol)) is protocol:
        return
    check_readable(protocol, table)
    if protocol.min_writer_version > 7:
        raise UnsupportedFeatureError(
            f"Table {table} requires writer version {protocol.min_writer_version}; "
            "this library writes protocol versions up to 7."
        )
    missing = sorted(writer_features(protocol) - SUPPORTED_WRITER_FEATURES)
    if missing:
        raise UnsupportedFeatureError(
            f"Table {table} requires writer feature(s) {', '.join(missing)}, which serialake does not support "
            "for writing. Reading the table works."
        )
    _remember(_WRITABLE, protocol)


def required_protocol(
    configuration: Mapping[str, str],
    features: Iterable[str] = (),
    base: Protocol | None = None,
) -> Protocol:
    """The smallest protocol that supports ``base`` plus the features the properties turn on.

    Without features beyond the legacy set the protocol stays at (1, 2); any named
    feature moves the table to writer version 7 with an explicit writer feature list, and to
    reader version 3 with a reader feature list, or to 2 (none) when column mapping is the
    only reader feature, as delta-spark does.
    """
    wanted: set[str] = set(features)
    conf_lower = {k.lower(): v for k, v in configuration.items()}
    for feature, key in FEATURE_PROPERTY.items():
        if conf_lower.get(key.lower(), "").lower() == "true":
            wanted.add(feature)
    for key, value in configuration.items():
        if key.lower().startswith(props.FEATURE_PREFIX) and value.lower() in ("supported", "enabled"):
            wanted.add(key[len(props.FEATURE_PREFIX):])
    if any(k.lower().startswith(props.CONSTRAINT_PREFIX) for k in configuration):
        wanted.add("checkConstraints")
    if mapping_mode(configuration) != "none":
        wanted.add("columnMapping")
    if conf_lower.get(props.CHECKPOINT_POLICY.lower(), "classic").lower() == "v2":
        wanted.add("v2Checkpoint")  # readers must know v2 (UUID-named) checkpoints may be there

    base = base or Protocol(1, 2)
    base_readers = reader_features(base)
    base_writers = writer_features(base)
    if wanted <= base_writers:
        return base
    all_writers = sorted(base_writers | wanted)
    rw = sorted(base_readers | {f for f in wanted if f in READER_WRITER_FEATURES})
    if base.min_reader_version < 3 and set(rw) <= _LEGACY_READER:
        # Reader features that reader version 2 implies need no list, as delta-spark writes them:
        # readers without table features can still read the table.
        return Protocol(
            min_reader_version=max(base.min_reader_version, 2 if rw else 1),
            min_writer_version=7,
            reader_features=None,
            writer_features=tuple(all_writers),
        )
    needs_reader_features = bool(rw)
    return Protocol(
        min_reader_version=3 if needs_reader_features else max(1, base.min_reader_version),
        min_writer_version=7,
        reader_features=tuple(rw) if needs_reader_features else None,
        writer_features=tuple(all_writers),
    )


def schema_features(schema: StructType) -> list[str]:
    """Table features a schema needs: ``timestampNtz`` for TIMESTAMP_NTZ fields, ``generatedColumns``,
    ``identityColumns``."""
    out = []
    if '"timestamp_ntz"' in schema.to_json():
        out.append("timestampNtz")
    if generated_columns(schema):
        out.append("generatedColumns")
    if identity_columns(schema):
        out.append("identityColumns")
    return out


def active_unsupported_write_properties(metadata: Metadata) -> list[str]:
    """Properties of a table we can write only partly (e.g. CDF on DML); named in errors."""
    out = []
    if props.get(metadata.configuration, props.ENABLE_CDF):
        out.append(props.ENABLE_CDF)
    return out
