"""Log stores: where commit files live and how they appear atomically."""

from __future__ import annotations

from serialake.storage.base import FileStatus, LogStore
from serialake.storage.local import LocalLogStore

__all__ = ["FileStatus", "LocalLogStore", "LogStore", "store_for", "normalize_table_path"]


def normalize_table_path(path: str) -> str:
    """An absolute local path for ``path`` (accepts ``file:`` URIs)."""
    import os
    from urllib.parse import unquote, urlparse

    if path.startswith("file:"):
        path = unquote(urlparse(path).path)
    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"


def store_for(path: str) -> LogStore:
    """The log store that serves ``path``."""
    if "://" in path and not path.startswith("file:"):
        scheme = path.split("://", 1)[0]
        raise ValueError(f"no log store for scheme '{scheme}' (table {path}); local paths are supported")
    return LocalLogStore()
