"""Log stores: where commit files live and how they appear atomically."""

from __future__ import annotations

import re

from serialake.exceptions import DeltaIllegalArgumentException
from serialake.storage.base import FileStatus, LogStore
from serialake.storage.local import LocalLogStore

__all__ = [
    "FileStatus",
    "LocalLogStore",
    "LogStore",
    "check_local_uri",
    "is_local_path",
    "normalize_table_path",
    "store_for",
]

# A URI scheme (RFC 3986) followed by ':/' -- 's3a://b/t', 'hdfs:/t', 'file:///t'.
_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):/")


def normalize_table_path(path: str) -> str:
    """An absolute local path for ``path`` (accepts ``file:`` URIs), or a normalized ``s3://`` URI.

    The one door every table path goes through: any other URI scheme (``abfss://``,
    ``gs://``, ...) is refused here, before it could become a local directory.
    """
    import os
    from urllib.parse import unquote, urlparse

    from serialake.storage.s3 import is_s3_uri, normalize_s3_uri

    if is_s3_uri(str(path)):
        return normalize_s3_uri(str(path))
    check_local_uri(path)
    if path[:5].lower() == "file:":
        path = unquote(urlparse(path).path)
    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"


def check_local_uri(path: str) -> None:
    """Raise ``DeltaIllegalArgumentException`` when ``path`` is a URI whose scheme is not ``file``."""
    match = _URI_SCHEME.match(str(path))
    if match is None or match.group(1).lower() == "file":
        return
    if match.group(1).lower() in ("s3", "s3a"):
        return
    raise DeltaIllegalArgumentException(
        f"Table path {path} uses the URI scheme '{match.group(1)}': serialake supports local paths, "
        "file:// URIs and S3 (s3:// or s3a://); other object stores and file systems are not supported yet.\n"
        "Help: put the table on S3, or on a local or mounted file system, and pass its path."
    )


def is_local_path(path: str) -> bool:
    """Whether a (normalized) table path is on the local file system (not an object store)."""
    match = _URI_SCHEME.match(str(path))
    return match is None or match.group(1).lower() == "file"


_S3_STORE: LogStore | None = None


def store_for(path: str) -> LogStore:
    """The log store that serves ``path``: S3's for ``s3://`` / ``s3a://``, else the local one."""
    global _S3_STORE
    from serialake.storage.s3 import is_s3_uri

    if is_s3_uri(path):
        if _S3_STORE is None:
            from serialake.storage.s3 import S3LogStore

            _S3_STORE = S3LogStore()
        return _S3_STORE
    if "://" in path and not path.startswith("file:"):
        check_local_uri(path)
    return LocalLogStore()
