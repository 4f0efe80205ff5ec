"""Local file-system log store: put-if-absent by an atomic no-overwrite hard link.

A commit is written to an unnamed file (``O_TMPFILE``) in the log directory, fsynced,
then given its final name with ``linkat``, which fails if the name exists; where
``O_TMPFILE`` is unavailable a uniquely named temporary file and ``link`` do the same.
The directory is then fsynced so the new name survives a crash. Readers see the final
name only once the content is complete and durable, and never an overwritten commit.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
import uuid
from typing import Any

from serialake.exceptions import FileAlreadyExistsError
from serialake.storage.base import FileStatus, LogStore, WriteNotDoneError, WriteNotDurableError

#: errnos of ``open(O_TMPFILE)`` meaning "this file system cannot do it": fall back to a named temp file.
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS})


def fsync_dir(directory: str) -> None:
    """fsync a directory so the names created in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(directory: str, name: str, data: bytes, fsync: bool) -> str:
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    return tmp


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


_AT_FDCWD = -100
_AT_SYMLINK_FOLLOW = 0x400


def _load_linkat() -> Any:
    """libc ``linkat`` (to give an O_TMPFILE inode its name), or None where unavailable."""
    if not hasattr(os, "O_TMPFILE") or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.linkat
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    return fn


_linkat = _load_linkat()


class LocalLogStore(LogStore):
    """Log store for paths on a local (POSIX) file system.

    Args:
        fsync: make every commit durable before ``put_if_absent`` returns (default True;
            tests of logic may turn it off, never production).
    """

    def __init__(self, fsync: bool = True) -> None:
        self.fsync = fsync
        self._dir_fds: dict[str, int] = {}
        self._dir_lock = threading.Lock()
        self._tmpfile_ok = _linkat is not None

    def _fsync_dir(self, directory: str) -> None:
        """fsync a directory through a cached descriptor (one open per directory, not per commit)."""
        with self._dir_lock:
            fd = self._dir_fds.get(directory)
            if fd is None:
                fd = os.open(directory, os.O_RDONLY)
                self._dir_fds[directory] = fd
        os.fsync(fd)

    def _put_tmpfile(self, directory: str, path: str, data: bytes) -> bool:
        """Write an unnamed inode (O_TMPFILE), fsync it, then name it with linkat (no overwrite).

        Nothing is ever visible under a temporary name, so a crash leaves no debris.
        Returns False when the file system does not support O_TMPFILE.
        """
        try:
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o644)
        except OSError as e:
            if e.errno not in _NO_TMPFILE:
                raise WriteNotDoneError(e, path, "create the temporary file") from e
            self._tmpfile_ok = False
            return False
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
            except OSError as e:  # the unnamed inode vanishes when closed: nothing landed
                raise WriteNotDoneError(e, path, "write the temporary file") from e
            if _linkat(_AT_FDCWD, f"/proc/self/fd/{fd}".encode(), _AT_FDCWD, path.encode(), _AT_SYMLINK_FOLLOW) != 0:
                err = ctypes.get_errno()
                if err == errno.EEXIST:
                    raise FileAlreadyExistsError(f"{path} already exists")
                # A local linkat that returns an error did not create the name.
                raise WriteNotDoneError(OSError(err, os.strerror(err)), path, "name the commit file (linkat)")
        finally:
            os.close(fd)
        return True

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def list_from(self, directory: str, start_name: str = "") -> list[FileStatus]:
        out: list[FileStatus] = []
        try:
            it = os.scandir(directory)
        except FileNotFoundError:
            return out
        with it:
            for entry in it:
                name = entry.name
                if name < start_name or name.startswith("."):
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                if not entry.is_file():
                    continue
                out.append(FileStatus(name, st.st_size, int(st.st_mtime * 1000)))
        out.sort()
        return out

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` atomically and durably (see the module docstring).

        Failures are classified: ``WriteNotDoneError`` when the file certainly did not
        appear (anything before the link, or a link that reports failure),
        ``WriteNotDurableError`` when it appeared but the directory sync failed.
        """
        directory, name = os.path.split(path)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise WriteNotDoneError(e, path, "create the log directory") from e
        if os.path.exists(path):
            raise FileAlreadyExistsError(f"{path} already exists")
        if not (self._tmpfile_ok and self._put_tmpfile(directory, path, data)):
            try:
                tmp = _write_temp(directory, name, data, self.fsync)
            except OSError as e:
                raise WriteNotDoneError(e, path, "write the temporary file") from e
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileAlreadyExistsError(f"{path} already exists") from None
            except OSError as e:
                raise WriteNotDoneError(e, path, "name the commit file (link)") from e
            finally:
                _unlink_quietly(tmp)
        if self.fsync:
            try:
                self._fsync_dir(directory)
            except OSError as e:
                raise WriteNotDurableError(e, path) from e

    def write(self, path: str, data: bytes) -> None:
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        tmp = _write_temp(directory, name, data, self.fsync)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        if self.fsync:
            self._fsync_dir(directory)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def delete(self, path: str) -> None:
        _unlink_quietly(path)
