"""Log stores: where commit files live and how they appear atomically."""

from __future__ import annotations

import re

from serialake.exceptions import DeltaIllegalArgumentException
from serialake.storage.base import FileStatus, LogStore
from serialake.storage.local import LocalLogStore
from serialake.storage.s3 import S3_SCHEMES, S3LogStore, normalize_s3_uri

__all__ = [
    "FileStatus",
    "LocalLogStore",
    "LogStore",
    "check_supported_uri",
    "is_local_path",
    "normalize_table_path",
    "store_for",
]

# A URI scheme (RFC 3986) followed by ':/' -- 's3a://b/t', 'hdfs:/t', 'file:///t'.
_URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):/")


def _scheme(path: str) -> str | None:
    """The lower-case URI scheme of ``path`` (None for a plain path)."""
    match = _URI_SCHEME.match(str(path))
    return match.group(1).lower() if match else None


def normalize_table_path(path: str) -> str:
    """An absolute local path for ``path`` (accepts ``file:`` URIs), or a normalized ``s3://`` URI.

    The one door every table path goes through: any other URI scheme (``abfss://``,
    ``gs://``, ...) is refused here, before it could become a local directory.
    """
    import os
    from urllib.parse import unquote, urlparse

    scheme = _scheme(path)
    if scheme in S3_SCHEMES:
        return normalize_s3_uri(str(path))
    if scheme not in (None, "file"):
        check_supported_uri(path)  # raises, naming the scheme
    if path[:5].lower() == "file:":
        path = unquote(urlparse(path).path)
    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"


def check_supported_uri(path: str) -> None:
    """Raise ``DeltaIllegalArgumentException`` when ``path`` is a URI of a scheme serialake does not serve."""
    scheme = _scheme(path)
    if scheme is None or scheme == "file" or scheme in S3_SCHEMES:
        return
    raise DeltaIllegalArgumentException(
        f"Table path {path} uses the URI scheme '{str(path).split(':', 1)[0]}': serialake supports "
        "local paths, file:// URIs and S3 (s3:// or s3a://); other object stores and file systems are not "
        "supported yet.\n"
        "Help: put the table on S3, or on a local or mounted file system, and pass its path."
    )


def is_local_path(path: str) -> bool:
    """Whether a (normalized) table path is on the local file system (not an object store)."""
    return _scheme(path) in (None, "file")


_S3_STORE = S3LogStore()  # stateless: its connections are per bucket, inside serialake.storage.s3


def store_for(path: str) -> LogStore:
    """The log store that serves ``path``: S3's for ``s3://`` / ``s3a://``, else the local one."""
    if _scheme(path) in S3_SCHEMES:
        return _S3_STORE
    check_supported_uri(path)
    return LocalLogStore()
