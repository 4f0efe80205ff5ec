"""UniForm: Delta tables that Iceberg readers read too (IcebergCompatV2 and its rules).

``delta.universalFormat.enabledFormats = 'iceberg'`` asks for Iceberg metadata beside the
Delta log after every commit (``core.iceberg``); it needs ``delta.enableIcebergCompatV2``,
whose writer rules (Delta protocol, "Iceberg Compatibility V2") make every data file
readable as an Iceberg data file:

- column mapping (``name`` or ``id``), with ids for array elements and map keys and values
  (``core.model.column_mapping``); a new table gets ``name`` mode on its own;
- no deletion vectors (``delta.enableDeletionVectors`` false, and no file with a vector);
- partition values materialized in the data files, timestamps as int64, ``numRecords`` in
  every file's stats; the writers do this and tag each file ``ICEBERG_COMPAT_VERSION=2``
  (as Delta does), and a commit adding an untagged file is refused (``check_adds``);
- only the allowed types; a partitioned table is not replaced by one partitioned by
  other columns.

An existing table is upgraded with ``REORG TABLE t APPLY (UPGRADE UNIFORM
(ICEBERG_COMPAT_VERSION=2))``, which rewrites the files that are not tagged in the same
commit as the metadata change (``prepare_metadata(..., upgrading=True)``); setting the
properties on a table holding such files is refused with that advice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from serialake.core.model import properties as props
from serialake.core.model.actions import Action, AddFile, Metadata
from serialake.core.model.column_mapping import mapping_mode
from serialake.core.model.schema import ArrayType, DataType, DecimalType, MapType, PrimitiveType, StructType
from serialake.exceptions import DeltaAnalysisException, UnsupportedFeatureError

__all__ = [
    "COMPAT_TAG",
    "ICEBERG",
    "IcebergCompatError",
    "check_adds",
    "compat_v2",
    "iceberg_enabled",
    "prepare_metadata",
    "tagged",
]

ICEBERG = "iceberg"
#: Where UniForm's Iceberg metadata lives, under the table root (``core.iceberg``).
METADATA_DIR = "metadata"
#: The AddFile tag Delta's writers set on files written under IcebergCompat (the version).
COMPAT_TAG = "ICEBERG_COMPAT_VERSION"
COMPAT_VERSION = "2"
ENABLE_COMPAT_V1 = "delta.enableIcebergCompatV1"
UPGRADE_ADVICE = "REORG TABLE {table} APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))"
_ALLOWED_PRIMITIVES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean", "timestamp",
     "timestamp_ntz", "date"}
)  # fmt: skip


class IcebergCompatError(DeltaAnalysisException):
    """A write or a setting would break IcebergCompatV2 (UniForm); nothing was committed."""


def enabled_formats(configuration: Mapping[str, str]) -> list[str]:
    """``delta.universalFormat.enabledFormats`` as a list of lower-case names."""
    raw = props.raw(configuration, props.UNIVERSAL_FORMATS) or ""
    return [f.strip().lower() for f in raw.split(",") if f.strip()]


def iceberg_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether the table asks for Iceberg metadata (UniForm Iceberg)."""
    return ICEBERG in enabled_formats(configuration)


def compat_v2(configuration: Mapping[str, str]) -> bool:
    """Whether IcebergCompatV2 is active (``delta.enableIcebergCompatV2``)."""
    return bool(props.get(configuration, props.ENABLE_ICEBERG_COMPAT_V2))


def tagged(add: AddFile) -> bool:
    """Whether ``add`` was written under IcebergCompatV2 (its ``ICEBERG_COMPAT_VERSION`` tag)."""
    return (add.tags or {}).get(COMPAT_TAG) == COMPAT_VERSION and add.deletion_vector is None


def prepare_metadata(
    metadata: Metadata,
    previous: Metadata | None,
    *,
    table: str,
    replacing: bool = False,
    live_files: Callable[[], Iterable[AddFile]] = tuple,
    upgrading: bool = False,
) -> Metadata:
    """``metadata`` with what UniForm implies filled in, or ``IcebergCompatError`` naming the rule broken.

    A new (or replaced, or empty) table asking for UniForm Iceberg gets IcebergCompatV2 and
    column mapping ``name``. Turning IcebergCompatV2 on for a table holding files needs every
    live file (``live_files()``, asked only then) tagged, unless ``upgrading`` (REORG ...
    UPGRADE UNIFORM, which rewrites them in the same commit).
    """
    conf = dict(metadata.configuration)
    formats = enabled_formats(conf)
    unknown = [f for f in formats if f != ICEBERG]
    if unknown:
        raise UnsupportedFeatureError(
            f"Table {table}: {props.UNIVERSAL_FORMATS} = {', '.join(unknown)} is not supported; serialake writes "
            "Iceberg metadata only ('iceberg')."
        )
    if props.is_true(conf, ENABLE_COMPAT_V1):
        raise UnsupportedFeatureError(
            f"Table {table}: IcebergCompatV1 ({ENABLE_COMPAT_V1}) is not supported by serialake; use "
            f"IcebergCompatV2: {UPGRADE_ADVICE.format(table=table)}"
        )
    before = dict(previous.configuration) if previous is not None else {}
    new_table = previous is None or replacing
    was_on = compat_v2(before) and not replacing
    live: list[AddFile] = []
    if not (new_table or upgrading or was_on) and (ICEBERG in formats or compat_v2(conf)):
        live = list(live_files())  # the table's files matter only when it is being turned on
    # Nothing to rewrite: settings alone make the table comply (a new, replaced or empty table, or the upgrade).
    settable = new_table or upgrading or not live
    if ICEBERG in formats and not compat_v2(conf):
        if not settable and not was_on:
            raise IcebergCompatError(
                f"Table {table}: UniForm Iceberg ({props.UNIVERSAL_FORMATS} = 'iceberg') needs "
                f"{props.ENABLE_ICEBERG_COMPAT_V2} = true, and its files rewritten to comply: run "
                f"{UPGRADE_ADVICE.format(table=table)}"
            )
        conf[props.ENABLE_ICEBERG_COMPAT_V2] = "true"
    if not compat_v2(conf):
        return replace(metadata, configuration=conf)
    if mapping_mode(conf, table) == "none":
        if not settable:
            raise IcebergCompatError(
                f"Table {table}: IcebergCompatV2 needs column mapping; run {UPGRADE_ADVICE.format(table=table)}, "
                "which turns it on and rewrites the files."
            )
        conf[props.COLUMN_MAPPING_MODE] = "name"
    if props.get(conf, props.ENABLE_DELETION_VECTORS):
        if not upgrading:
            raise IcebergCompatError(
                f"Table {table}: IcebergCompatV2 (UniForm) does not allow deletion vectors; set "
                f"{props.ENABLE_DELETION_VECTORS} = false (REORG ... UPGRADE UNIFORM does, and purges them)."
            )
        conf[props.ENABLE_DELETION_VECTORS] = "false"
    _check_types(StructType.from_json(metadata.schema_string or ""), table)
    if not was_on and not settable:
        untagged = [f.path for f in live if not tagged(f)]
        if untagged:
            raise IcebergCompatError(
                f"Table {table}: IcebergCompatV2 cannot be turned on by a property alone: {len(untagged)} data "
                f"file(s) (e.g. {untagged[0]}) were not written for it. Run {UPGRADE_ADVICE.format(table=table)}, "
                "which rewrites them in the same commit."
            )
    if replacing and previous is not None and compat_v2(before) and previous.partition_columns:
        if [c.lower() for c in metadata.partition_columns] != [c.lower() for c in previous.partition_columns]:
            raise IcebergCompatError(
                f"Table {table}: IcebergCompatV2 blocks replacing a table partitioned by "
                f"[{', '.join(previous.partition_columns)}] with one partitioned by "
                f"[{', '.join(metadata.partition_columns)}]."
            )
    return replace(metadata, configuration=conf)


def _check_types(schema: StructType, table: str) -> None:
    def check(t: DataType, where: str) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                check(f.data_type, f"{where}.{f.name}" if where else f.name)
        elif isinstance(t, ArrayType):
            check(t.element_type, where)
        elif isinstance(t, MapType):
            check(t.key_type, where)
            check(t.value_type, where)
        elif isinstance(t, PrimitiveType) and t.name not in _ALLOWED_PRIMITIVES:
            raise IcebergCompatError(
                f"Table {table}: column '{where}' has type {t.simple_string()}, which IcebergCompatV2 (UniForm) "
                f"does not allow (allowed: {', '.join(sorted(_ALLOWED_PRIMITIVES))}, decimal, struct, array, map)."
            )
        elif not isinstance(t, (PrimitiveType, DecimalType)):
            raise IcebergCompatError(f"Table {table}: column '{where}' has a type IcebergCompatV2 does not allow.")

    check(schema, "")


def check_adds(actions: Iterable[Action], configuration: Mapping[str, str], table: str) -> None:
    """Refuse a commit (its ``actions``) to an IcebergCompatV2 table that adds a file not written for it."""
    if not compat_v2(configuration):
        return
    for add in actions:
        if not isinstance(add, AddFile):
            continue
        if add.deletion_vector is not None:
            raise IcebergCompatError(
                f"Table {table}: file {add.path} has a deletion vector, which IcebergCompatV2 (UniForm) does not "
                "allow; nothing was committed."
            )
        if not tagged(add):
            raise IcebergCompatError(
                f"Table {table}: file {add.path} was not written for IcebergCompatV2 (no {COMPAT_TAG}="
                f"{COMPAT_VERSION} tag: field ids and partition values in the file are not guaranteed); nothing "
                f"was committed. Files of this table must be written by a writer that honours IcebergCompatV2, or "
                f"rewritten by {UPGRADE_ADVICE.format(table=table)}."
            )
