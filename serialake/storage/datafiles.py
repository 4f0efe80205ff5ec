"""A table's data files (Parquet, deletion vectors, manifests) on the local file system or S3.

The log store (``storage.base.LogStore``) serves ``_delta_log``; this module serves everything
else a table holds, with one set of operations for both places, so the code that reads and
writes data (Spark executors, the driver's pyarrow paths, deletion vectors, VACUUM) names a
file by its absolute location and never asks where it lives:

- local paths: plain files; a new file is created exclusively and fsynced (with its
  directory) before it is reported written.
- ``s3://`` / ``s3a://`` URIs: objects. A new object gets a fresh, unique key and is written
  in one PUT (multipart for large files, which is fine for data: only commits must be
  single conditional PUTs); S3 has no rename, so nothing is staged and moved. An object
  is visible whole or not at all once its PUT (or its multipart completion) returns.

Executors are other processes: ``Access.here(uri)`` captures this process's S3 settings
(``s3.worker_access``), and an ``Access`` travels with a Spark job so the executor reaches
the same store without the driver's ``configure(...)`` calls or environment.

Pure Python (pyarrow and obstore, never pyspark): it runs on executors.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

from serialake.storage import s3
from serialake.storage.local import fsync_dir

__all__ = ["Access", "DataFileStatus", "is_remote"]

# Objects up to this size are fetched in one GET; larger ones are read by ranges.
_WHOLE_READ_MAX = 32 << 20
# A new object larger than this is uploaded in parts (object_store's writer buffers this much).
_PART_BYTES = 16 << 20


def is_remote(location: str) -> bool:
    """Whether ``location`` (an absolute path or URI) is an object-store URI."""
    head = location.split("://", 1)[0].lower() if "://" in location else ""
    return head in s3.S3_SCHEMES


@dataclass(frozen=True)
class DataFileStatus:
    """A file found under a table: its path relative to the walked root ('/'-separated)."""

    path: str
    size: int
    modification_time: int  # ms since the epoch


@dataclass(frozen=True)
class Access:
    """How to reach data files: nothing for local files, the resolved S3 settings for S3.

    Picklable; ``Access.here(location)`` on the driver, the same methods on executors.
    """

    s3_settings: dict[str, Any] | None = None

    @staticmethod
    def here(location: str) -> Access:
        """This process's way to reach ``location``, ready to ship to executors."""
        return Access(s3.worker_access()) if is_remote(location) else Access()

    # -- S3 plumbing -----------------------------------------------------------------------

    def _object(self, uri: str) -> tuple[Any, str]:
        bucket, key = s3.split_s3_uri(uri)
        return s3.store_with(bucket, self.s3_settings), key

    # -- reading ---------------------------------------------------------------------------

    def read_bytes(self, location: str) -> bytes:
        """The whole file. ``FileNotFoundError`` when it does not exist; ``OSError`` naming it otherwise."""
        if not is_remote(location):
            with open(location, "rb") as f:
                return f.read()
        import obstore

        store, key = self._object(location)
        try:
            return bytes(obstore.get(store, key).bytes())
        except Exception as e:  # noqa: BLE001 - obstore raises its own classes
            raise _s3_error("GET", location, e) from e

    def read_range(self, location: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer at the end of the file)."""
        if not is_remote(location):
            with open(location, "rb") as f:
                f.seek(offset)
                return f.read(length)
        import obstore

        store, key = self._object(location)
        try:
            return bytes(obstore.get_range(store, key, start=offset, length=length))
        except Exception as e:  # noqa: BLE001
            text = str(e)
            if "416" in text or "not satisfiable" in text.lower():
                return b""
            raise _s3_error("GET", location, e) from e

    def open_parquet(self, location: str) -> Any:
        """A pyarrow-readable source for ``pyarrow.parquet.ParquetFile``: the path itself locally;
        on S3 the object in memory when small, else a seekable reader issuing range GETs."""
        if not is_remote(location):
            return location
        import obstore
        import pyarrow as pa

        store, key = self._object(location)
        try:
            size = int(obstore.head(store, key)["size"])
            if size <= _WHOLE_READ_MAX:
                return pa.py_buffer(obstore.get(store, key).bytes())
            return pa.PythonFile(obstore.open_reader(store, key, size=size), mode="r")
        except Exception as e:  # noqa: BLE001
            raise _s3_error("GET", location, e) from e

    def status(self, location: str) -> tuple[int, int]:
        """``(size, modification time in ms)``; ``FileNotFoundError`` when missing."""
        if not is_remote(location):
            st = os.stat(location)
            return st.st_size, int(st.st_mtime * 1000)
        import obstore

        store, key = self._object(location)
        try:
            meta = obstore.head(store, key)
        except Exception as e:  # noqa: BLE001
            raise _s3_error("HEAD", location, e) from e
        stamp = meta.get("last_modified")
        return int(meta["size"]), int(stamp.timestamp() * 1000) if stamp is not None else 0

    def exists(self, location: str) -> bool:
        try:
            self.status(location)
            return True
        except FileNotFoundError:
            return False

    def walk(self, root: str) -> Iterator[DataFileStatus]:
        """Every file under ``root`` (recursively), paths relative to it, in no set order."""
        if not is_remote(root):
            for current, _dirs, names in os.walk(root):
                rel_dir = os.path.relpath(current, root)
                for name in names:
                    full = os.path.join(current, name)
                    try:
                        st = os.stat(full)
                    except FileNotFoundError:
                        continue
                    rel = name if rel_dir == "." else os.path.join(rel_dir, name).replace(os.sep, "/")
                    yield DataFileStatus(rel, st.st_size, int(st.st_mtime * 1000))
            return
        import obstore

        store, key = self._object(root)
        prefix = key.rstrip("/") + "/" if key else ""
        try:
            for batch in obstore.list(store, prefix):
                for meta in batch:
                    stamp = meta.get("last_modified")
                    yield DataFileStatus(
                        str(meta["path"])[len(prefix) :],
                        int(meta["size"]),
                        int(stamp.timestamp() * 1000) if stamp is not None else 0,
                    )
        except Exception as e:  # noqa: BLE001
            raise _s3_error("LIST", root, e) from e

    # -- writing ---------------------------------------------------------------------------

    def put_new(self, location: str, data: bytes) -> None:
        """Write a file that must not exist yet, durably. ``FileExistsError`` if it does."""
        with self.create(location) as out:
            out.write(data)

    def put(self, location: str, data: bytes) -> None:
        """Write or replace a small file atomically (manifests): readers see the old or the new one."""
        if not is_remote(location):
            os.makedirs(os.path.dirname(location), exist_ok=True)
            temp = f"{location}.{os.getpid()}.{id(data):x}.tmp"
            with open(temp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, location)
            fsync_dir(os.path.dirname(location))
            return
        import obstore

        store, key = self._object(location)
        try:
            obstore.put(store, key, data, mode="overwrite", use_multipart=len(data) > _PART_BYTES)
        except Exception as e:  # noqa: BLE001
            raise _s3_error("PUT", location, e) from e

    @contextmanager
    def create(self, location: str) -> Iterator[BinaryIO]:
        """A new file to write: exclusive and fsynced (with its directory) locally; on S3 one
        object, uploaded in parts when large, visible only once the block ends without error.
        On an error inside the block nothing is left behind."""
        if not is_remote(location):
            directory = os.path.dirname(location)
            if not os.path.isdir(directory):
                os.makedirs(directory, exist_ok=True)
                fsync_dir(os.path.dirname(directory))
            f = open(location, "xb")  # noqa: SIM115 - closed below, removed on error
            try:
                yield f
                f.flush()
                os.fsync(f.fileno())
                f.close()
                fsync_dir(directory)
            except BaseException:
                f.close()
                try:
                    os.unlink(location)
                except OSError:
                    pass
                raise
            return
        import obstore

        store, key = self._object(location)
        try:
            writer = obstore.open_writer(store, key, buffer_size=_PART_BYTES)
        except Exception as e:  # noqa: BLE001
            raise _s3_error("PUT", location, e) from e
        sink = _ObjectSink(writer, location)
        try:
            yield sink  # type: ignore[misc]
        except BaseException:
            sink.abort()
            raise
        sink.close()

    def copy(self, source: str, target: str) -> None:
        """Copy ``source`` to a new file ``target`` (server-side within one S3 bucket)."""
        if is_remote(source) and is_remote(target) and s3.split_s3_uri(source)[0] == s3.split_s3_uri(target)[0]:
            import obstore

            store, skey = self._object(source)
            _, tkey = self._object(target)
            try:
                obstore.copy(store, skey, tkey)  # targets are fresh unique names
            except Exception as e:  # noqa: BLE001
                raise _s3_error("COPY", f"{source} -> {target}", e) from e
            return
        with self.create(target) as out:
            if is_remote(source):
                out.write(self.read_bytes(source))
            else:
                with open(source, "rb") as f:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)

    def delete(self, location: str) -> None:
        """Remove a file; a missing one is not an error."""
        if not is_remote(location):
            try:
                os.remove(location)
            except FileNotFoundError:
                pass
            return
        import obstore

        store, key = self._object(location)
        try:
            obstore.delete(store, key)
        except Exception as e:  # noqa: BLE001
            err = _s3_error("DELETE", location, e)
            if not isinstance(err, FileNotFoundError):
                raise err from e


class _ObjectSink:
    """A binary file-like over obstore's writer (what ``pyarrow.parquet`` writes into).

    Completes the upload on ``close``; ``abort`` abandons it (object_store aborts the
    multipart upload; a single-part object is never created).
    """

    def __init__(self, writer: Any, location: str) -> None:
        self._writer = writer
        self._location = location
        self._position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        n = len(memoryview(data).cast("B"))
        try:
            self._writer.write(data)
        except Exception as e:  # noqa: BLE001
            raise _s3_error("PUT", self._location, e) from e
        self._position += n
        return n

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:  # parts are uploaded as they fill; completion is on close
        pass

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._writer.close()
        except Exception as e:  # noqa: BLE001
            raise _s3_error("PUT", self._location, e) from e

    def abort(self) -> None:
        if self.closed:
            return
        self.closed = True
        abort = getattr(self._writer, "abort", None)
        try:
            if abort is not None:
                abort()
        except Exception:  # noqa: BLE001 - abandoning an upload that failed anyway
            pass


def _s3_error(request: str, location: str, error: BaseException) -> OSError:
    """An obstore failure as an ``OSError`` naming the request and the object."""
    from obstore.exceptions import NotFoundError

    if isinstance(error, (NotFoundError, FileNotFoundError)):
        return FileNotFoundError(errno.ENOENT, f"S3 {request}: no such object", location)
    text = str(error)
    code = errno.EACCES if any(s in text for s in ("403", "Forbidden", "AccessDenied", "401")) else errno.EIO
    return OSError(code, f"S3 {request} failed: {error}", location)
