"""Log stores: where commit files live and how they appear atomically."""

from __future__ import annotations

import re

from serialake.exceptions import DeltaIllegalArgumentException
from serialake.storage.base import FileStatus, LogStore
from serialake.storage.local import LocalLogStore

__all__ = ["FileStatus", "LocalLogStore", "LogStore", "check_local_uri", "store_for", "normalize_table_path"]

# A URI scheme (RFC 3986) followed by ':/' -- 's3a://b/t', 'hdfs:/t', 'file:///t'.
_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):/")


def normalize_table_path(path: str) -> str:
    """An absolute local path for ``path`` (accepts ``file:`` URIs).

    The one door every table path goes through: any other URI scheme (``s3a://``,
    ``abfss://``, ...) is refused here, before it could become a local directory.
    """
    import os
    from urllib.parse import unquote, urlparse

    check_local_uri(path)
    if path[:5].lower() == "file:":
        path = unquote(urlparse(path).path)
    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"


def check_local_uri(path: str) -> None:
    """Raise ``DeltaIllegalArgumentException`` when ``path`` is a URI whose scheme is not ``file``."""
    match = _URI_SCHEME.match(str(path))
    if match is None or match.group(1).lower() == "file":
        return
    raise DeltaIllegalArgumentException(
        f"Table path {path} uses the URI scheme '{match.group(1)}': object stores and other file "
        "systems are not supported yet, only local paths and file:// URIs.\n"
        "Help: put the table on a local or mounted file system and pass its path."
    )


def store_for(path: str) -> LogStore:
    """The log store that serves ``path``."""
    if "://" in path and not path.startswith("file:"):
        scheme = path.split("://", 1)[0]
        raise ValueError(f"no log store for scheme '{scheme}' (table {path}); local paths are supported")
    return LocalLogStore()
