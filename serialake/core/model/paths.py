"""Where a table's data file is: a local file-system path, or an ``s3://`` URI.

``add.path`` is a relative, URI-encoded path under the table directory, or an absolute URI
(the protocol allows both). A relative path that leaves the table directory
(``../x.parquet``, also percent-encoded) is refused: readers must never follow it. The files
of an ``s3://`` table are named by URIs below it (``storage.datafiles`` reads and writes both
kinds).
"""

from __future__ import annotations

import posixpath
import struct
from typing import Any
from urllib.parse import unquote, urlparse

from serialake.core.model.actions import decode_path
from serialake.core.model.validate import escapes_table
from serialake.exceptions import InvalidTableError, UnsupportedFeatureError
from serialake.storage.datafiles import Access, is_remote
from serialake.storage.s3 import S3_SCHEMES

__all__ = ["absolute_path", "file_exists", "parquet_metadata"]

_FOOTER_GUESS = 64 << 10  # bytes read from the end of an S3 object: most footers fit


def absolute_path(table_path: str, add_path: str) -> str:
    """Where an ``add.path`` (relative URI-encoded, or an absolute URI) is: a local file-system path,
    or for a file on S3 (an ``s3://`` URI, or a relative path in an ``s3://`` table) its decoded URI.

    A relative path that leaves the table directory (``../x.parquet``) is refused with
    ``InvalidTableError``; absolute paths and URIs are allowed, as the protocol says.
    """
    if "://" in add_path or add_path.startswith("file:"):
        parsed = urlparse(add_path)
        scheme = parsed.scheme.lower()
        if scheme in S3_SCHEMES and parsed.netloc:
            return f"{scheme}://{parsed.netloc}{posixpath.normpath('/' + unquote(parsed.path).lstrip('/'))}"
        if scheme not in ("", "file"):
            raise UnsupportedFeatureError(
                f"Table {table_path}: data file {add_path} is on '{parsed.scheme}', "
                "only local files and S3 are supported"
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
    if is_remote(table_path):  # an S3 table (normalized: no trailing slash); normpath would fold its '//'
        return f"{table_path}/{posixpath.normpath(decoded)}"
    return posixpath.normpath(posixpath.join(table_path, decoded))


def file_exists(location: str) -> bool:
    """Whether a data or deletion-vector file is there: ``os.path.exists`` locally, a HEAD on S3."""
    import os

    return Access().exists(location) if is_remote(location) else os.path.exists(location)


def parquet_metadata(location: str, size: int | None = None) -> Any:
    """The Parquet footer (``pyarrow.parquet.FileMetaData``) of the data file at ``location``.

    A local file is read by pyarrow; of an S3 object only the footer is fetched, by range
    (``size``, when known, saves a HEAD). ``OSError`` when it cannot be read,
    ``pyarrow.ArrowInvalid`` when it is not Parquet.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not is_remote(location):
        return pq.read_metadata(location)
    files = Access()
    if size is None:
        size = files.status(location)[0]
    take = min(size, _FOOTER_GUESS)
    tail = files.read_range(location, size - take, take)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise pa.ArrowInvalid(f"{location}: not a Parquet file (no footer)")
    length = struct.unpack("<I", tail[-8:-4])[0] + 8
    if length > size:
        raise pa.ArrowInvalid(f"{location}: not a Parquet file (footer of {length} bytes in {size})")
    if length > len(tail):
        tail = files.read_range(location, size - length, length)
    return pq.read_metadata(pa.BufferReader(tail[-length:]))
