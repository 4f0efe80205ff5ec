"""The table-name registry: names to table paths, in-process and in a JSON file.

Names are resolved case-insensitively; ``default.`` and ``spark_catalog.default.`` prefixes
are dropped (Spark's current database). The file (``~/.serialake/catalog.json``, or
``$SERIALAKE_CATALOG``: a file path, or a directory holding ``catalog.json``) is shared by
processes: it is rewritten atomically under an advisory lock, so concurrent registrations
never lose each other. In-process registrations (``persist=False``) shadow the file.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from serialake.core.log.deltalog import DeltaLog
from serialake.core.model.schema import split_dotted
from serialake.exceptions import CorruptLogError, DeltaAnalysisException, DeltaIllegalArgumentException
from serialake.storage import normalize_table_path

__all__ = [
    "CATALOG_ENV",
    "DEFAULT_CATALOG",
    "catalog_file",
    "drop_table",
    "is_managed",
    "list_tables",
    "lookup",
    "managed_location",
    "normalize_name",
    "register",
    "rename",
    "table_location",
    "unregister",
    "warehouse_dir",
]

CATALOG_ENV = "SERIALAKE_CATALOG"
DEFAULT_CATALOG = "~/.serialake/catalog.json"
_FORMAT_VERSION = 1

_session: dict[str, str] = {}
_session_managed: set[str] = set()  # in-process names of managed tables
_lock = threading.Lock()


def catalog_file() -> Path:
    """The JSON file of the registry (from ``$SERIALAKE_CATALOG`` or the default)."""
    raw = os.environ.get(CATALOG_ENV) or DEFAULT_CATALOG
    path = Path(raw).expanduser()
    if raw.endswith(os.sep) or path.is_dir():
        path = path / "catalog.json"
    return path.absolute()


def warehouse_dir() -> Path:
    """Where ``CREATE TABLE name`` without ``LOCATION`` puts the table: ``<catalog dir>/warehouse``."""
    return catalog_file().parent / "warehouse"


def managed_location(name: str) -> str:
    """The directory of managed table ``name`` (created by name, without a location)."""
    return str(warehouse_dir() / normalize_name(name))


def table_location(name: str, location: str | None, *, exclusive: bool) -> str:
    """Where a table created as ``name`` lives: ``location``, else where ``name`` is registered, else managed.

    ``exclusive`` (a plain create): a ``location`` other than the one ``name`` is registered
    at is an error, since the name already belongs to another table.
    """
    registered = lookup(name)
    if location is None:
        return registered or managed_location(name)
    location = normalize_table_path(location)
    if exclusive and registered is not None and registered != location:
        raise DeltaAnalysisException(
            f"Table {name} already exists at {registered}, not at {location}. Drop it first (DROP TABLE {name}), "
            "or replace it."
        )
    return location


def normalize_name(name: str) -> str:
    """The registry key of a (possibly qualified, possibly backquoted) table name."""
    parts = [p.strip().strip("`").lower() for p in split_dotted(name)]
    if not parts or any(not p for p in parts):
        raise DeltaIllegalArgumentException(f"Invalid table name {name!r}")
    if len(parts) == 3 and parts[0] == "spark_catalog":
        parts = parts[1:]
    if len(parts) == 2 and parts[0] == "default":
        parts = parts[1:]
    return ".".join(parts)


def register(name: str, path: str, *, persist: bool = True, managed: bool | None = None) -> str:
    """Make ``name`` refer to the Delta table at ``path``; returns the absolute path.

    ``persist=False`` keeps the name in this process only. Re-registering a name replaces it.
    ``managed``: the catalog owns the table's files (created by name, without a location):
    ``drop_table`` deletes them. By default a table is managed when ``path`` is ``name``'s
    managed location (``managed_location``), where only a creation by name puts it.
    """
    key = normalize_name(name)
    location = normalize_table_path(str(path))
    if managed is None:
        managed = location == normalize_table_path(managed_location(name))
    with _lock:
        if persist:
            with _locked_file() as tables:
                tables[key] = {"location": location, **({"managed": True} if managed else {})}
            _session.pop(key, None)
            _session_managed.discard(key)
        else:
            _session[key] = location
            if managed:
                _session_managed.add(key)
            else:
                _session_managed.discard(key)
    return location


def unregister(name: str, *, persist: bool = True) -> bool:
    """Forget ``name`` (in-process, and in the file unless ``persist=False``); whether it was known.

    The table's data is never touched.
    """
    key = normalize_name(name)
    with _lock:
        found = _session.pop(key, None) is not None
        _session_managed.discard(key)
        if persist and catalog_file().exists():
            with _locked_file() as tables:
                found = tables.pop(key, None) is not None or found
    return found


def rename(old: str, new: str) -> str:
    """Give the table registered as ``old`` the name ``new`` (one atomic change of the file); its path.

    The table's files stay where they are. Errors when ``old`` is unknown or ``new`` taken.
    """
    old_key, new_key = normalize_name(old), normalize_name(new)
    with _lock:
        if old_key in _session:
            if new_key in _session or _read_file().get(new_key) is not None:
                raise DeltaAnalysisException(f"Cannot rename table {old} to {new}: table {new} already exists.")
            _session[new_key] = _session.pop(old_key)
            if old_key in _session_managed:
                _session_managed.discard(old_key)
                _session_managed.add(new_key)
            return _session[new_key]
        with _locked_file() as tables:
            entry = tables.get(old_key)
            if entry is None:
                raise DeltaAnalysisException(f"Cannot rename table {old}: it does not exist.")
            if new_key in tables or new_key in _session:
                raise DeltaAnalysisException(f"Cannot rename table {old} to {new}: table {new} already exists.")
            tables[new_key] = tables.pop(old_key)
            return str(tables[new_key]["location"])


def lookup(name: str) -> str | None:
    """The path registered for ``name``, or None."""
    key = normalize_name(name)
    with _lock:
        if key in _session:
            return _session[key]
    entry = _read_file().get(key)
    return entry.get("location") if isinstance(entry, dict) else None


def is_managed(name: str) -> bool:
    """Whether ``name`` is registered as a managed table (``register``)."""
    key = normalize_name(name)
    with _lock:
        if key in _session:
            return key in _session_managed
    entry = _read_file().get(key)
    return isinstance(entry, dict) and entry.get("managed") is True


def drop_table(name: str) -> bool:
    """``DROP TABLE name``: forget the name and, for a managed table, delete its files; whether it was known.

    As Spark's catalog does for delta-spark: a managed table's directory goes with it, so a
    table created again under the name starts empty; an external one (created with a
    location) keeps its files. Either way this process's cached log of the table is
    forgotten (``DeltaLog.invalidate``): every later reader and writer finds it gone. The
    directory is first renamed to a hidden name beside it, then deleted: it disappears at
    once, and an interrupted deletion leaves no half table at the name's location.
    """
    location = lookup(name)
    managed = is_managed(name)
    if not unregister(name):
        return False
    if location is None:
        return True
    DeltaLog.invalidate(location)  # scheduled checkpoints first: none may land in a removed directory
    if managed:
        _remove_directory(location)
        DeltaLog.invalidate(location)
    return True


def _remove_directory(location: str) -> None:
    """Delete a managed table's (local) directory: renamed away first, then removed."""
    path = Path(location)
    if not path.exists():
        return
    doomed = path.with_name(f".{path.name}.dropped-{uuid.uuid4().hex}")
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def list_tables() -> dict[str, str]:
    """Every registered name and its path (in-process names shadow the file's)."""
    out = {k: v["location"] for k, v in _read_file().items() if isinstance(v, dict) and "location" in v}
    with _lock:
        out.update(_session)
    return dict(sorted(out.items()))


def _read_file() -> dict[str, Any]:
    path = catalog_file()
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return {}
    return _parse(raw, path)


def _parse(raw: str, path: Path) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise CorruptLogError(f"Table catalog {path} is not valid JSON ({e}); fix or delete the file") from None
    tables = data.get("tables") if isinstance(data, dict) else None
    if not isinstance(tables, dict):
        raise CorruptLogError(f"Table catalog {path} has no 'tables' object; fix or delete the file")
    return tables


@contextmanager
def _locked_file() -> Iterator[dict[str, Any]]:
    """The file's tables for read-modify-write under an exclusive lock; written back atomically."""
    path = catalog_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a+") as lock_fd:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            try:
                tables = _parse(path.read_text(), path)
            except FileNotFoundError:
                tables = {}
            yield tables
            body = json.dumps({"version": _FORMAT_VERSION, "tables": dict(sorted(tables.items()))}, indent=2)
            fd, tmp = tempfile.mkstemp(prefix=".catalog-", dir=str(path.parent))
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(body + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
                raise
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
