"""Where a table's Iceberg metadata lives, its identity, and which converted version is newest.

Layout, under ``<table>/metadata/``:

- ``v<deltaVersion>.metadata.json``: the table metadata of one Delta version, created with the
  store's put-if-absent, so one writer wins each version and every reader sees a whole file;
- ``version-hint.text``: the newest converted Delta version, as text (Iceberg's file-system
  tables and ``StaticTable.from_metadata(<table>)`` start there);
- ``snap-<snapshotId>-<uuid>.avro``: manifest lists; ``<uuid>-m<N>.avro``: manifests. The uuid is
  new for each conversion, so two converters never write the same Avro file.

Identity: the Iceberg table uuid is the Delta table id (``metaData.id``; a uuid derived from it
when it is not one), and the snapshot of Delta version ``v`` has an id derived from the table
uuid and ``v`` and sequence number ``v + 1``: every writer agrees, whoever converts.

The version hint only moves forward (``_advance_hint``); the metadata a conversion builds on
(``_previous``) is found from the hint, then by name, else by listing the directory.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serialake.core.log.deltalog import DeltaLog
    from serialake.storage.base import LogStore

__all__ = [
    "METADATA_DIR",
    "VERSION_HINT",
    "metadata_dir",
    "metadata_path",
    "read_version_hint",
    "snapshot_id_for",
    "table_uuid",
]

METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
#: Versions probed by name after the version hint before listing the metadata directory.
_PROBE_LIMIT = 8


def metadata_dir(table_path: str) -> str:
    """``<table>/metadata``."""
    return f"{table_path.rstrip('/')}/{METADATA_DIR}"


def metadata_path(table_path: str, version: int) -> str:
    """``<table>/metadata/v<version>.metadata.json``."""
    return f"{metadata_dir(table_path)}/v{version}.metadata.json"


def table_uuid(delta_table_id: str) -> str:
    """The Iceberg table uuid of a Delta table: its id when that is a uuid, else a uuid derived from it."""
    try:
        return str(uuid.UUID(delta_table_id))
    except (ValueError, TypeError, AttributeError):
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"delta-table-id:{delta_table_id}"))


def snapshot_id_for(iceberg_uuid: str, version: int) -> int:
    """The Iceberg snapshot id of Delta version ``version``: positive, 63 bits, the same for every writer."""
    digest = hashlib.sha256(f"{iceberg_uuid}:{version}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)) or 1


def _version_of(name: str) -> int | None:
    """``v12.metadata.json`` -> 12."""
    if name.startswith("v") and name.endswith(".metadata.json"):
        digits = name[1 : -len(".metadata.json")]
        if digits.isdigit():
            return int(digits)
    return None


def read_version_hint(log: DeltaLog) -> int | None:
    """The version in ``metadata/version-hint.text``, or None (absent or unreadable)."""
    return _read_hint(log.store, metadata_dir(log.table_path))


def _read_hint(store: LogStore, directory: str) -> int | None:
    try:
        text = store.read(f"{directory}/{VERSION_HINT}").decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _listed_versions(store: LogStore, directory: str) -> list[int]:
    """Versions of the metadata files in the directory (``v*`` names sort after manifests and lists)."""
    found = (_version_of(st.name) for st in store.list_from(directory, "v"))
    return sorted(v for v in found if v is not None)


def _load_json(store: LogStore, path: str) -> dict[str, Any] | None:
    try:
        data = store.read(path)
    except FileNotFoundError:
        return None
    value = json.loads(data)
    return value if isinstance(value, dict) else None


def _previous(store: LogStore, directory: str, version: int) -> tuple[str, dict[str, Any]] | None:
    """The newest metadata of a version before ``version``: the hint, then names after it, else a listing."""
    hint = _read_hint(store, directory)
    if hint is not None and hint < version and version - 1 - hint <= _PROBE_LIMIT:
        for k in range(version - 1, hint - 1, -1):
            path = f"{directory}/v{k}.metadata.json"
            found = _load_json(store, path)
            if found is not None:
                return path, found
    for k in reversed([v for v in _listed_versions(store, directory) if v < version]):
        path = f"{directory}/v{k}.metadata.json"
        found = _load_json(store, path)
        if found is not None:
            return path, found
    return None


def _advance_hint(store: LogStore, directory: str, version: int) -> None:
    """Move ``version-hint.text`` forward to ``version`` (never back).

    The hint is a plain overwrite, not a compare-and-swap: two converters can interleave so that
    the older version lands last. So each writer reads the hint back after writing and raises
    it again to the newest metadata file listed; the last writer to finish leaves the newest.
    """
    path = f"{directory}/{VERSION_HINT}"
    want = version
    for _ in range(3):
        current = _read_hint(store, directory)
        if current is not None and current >= want:
            return
        store.write(path, str(want).encode())
        newest = max(_listed_versions(store, directory), default=want)
        current = _read_hint(store, directory)
        want = max(want, newest)
        if current is not None and current >= want:
            return
