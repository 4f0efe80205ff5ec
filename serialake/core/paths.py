"""Where a table's data file is on the local file system.

``add.path`` is a relative, URI-encoded path under the table directory, or an absolute URI
(the protocol allows both). A relative path that leaves the table directory
(``../x.parquet``, also percent-encoded) is refused: readers must never follow it.
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote, urlparse

from serialake.core.actions import decode_path
from serialake.core.validate import escapes_table
from serialake.exceptions import InvalidTableError, UnsupportedFeatureError

__all__ = ["absolute_path"]


def absolute_path(table_path: str, add_path: str) -> str:
    """The local file-system path of an ``add.path`` (relative URI-encoded, or an absolute URI).

    A relative path that leaves the table directory (``../x.parquet``) is refused with
    ``InvalidTableError``; absolute paths and URIs are allowed, as the protocol says.
    """
    if "://" in add_path or add_path.startswith("file:"):
        parsed = urlparse(add_path)
        if parsed.scheme not in ("", "file"):
            raise UnsupportedFeatureError(
                f"Table {table_path}: data file {add_path} is on '{parsed.scheme}', "
                "only local files are supported"
            )
        if parsed.scheme:
            return posixpath.normpath(unquote(parsed.path))
    decoded = decode_path(add_path)
    if decoded.startswith("/"):
        return posixpath.normpath(decoded)
    if escapes_table(add_path):
        raise InvalidTableError(
            f"relative path {add_path!r} leaves the table directory", table=table_path, field="add.path"
        )
    return posixpath.normpath(posixpath.join(table_path, decoded))
