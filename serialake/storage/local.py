"""Local file-system log store: put-if-absent by an atomic no-overwrite hard link.

A commit is written to a unique temporary file in the same directory, fsynced, then
linked to its final name with ``os.link``, which fails if the name exists. The
directory is fsynced so the new name survives a crash. Readers therefore see the
final name only once the content is complete, and never an overwritten commit.
"""

from __future__ import annotations

import os
import uuid

from serialake.exceptions import FileAlreadyExistsError
from serialake.storage.base import FileStatus, LogStore


def _fsync_dir(directory: str) -> None:
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


class LocalLogStore(LogStore):
    """Log store for paths on a local (POSIX) file system.

    Args:
        fsync: make every commit durable before ``put_if_absent`` returns (default True;
            tests of logic may turn it off, never production).
    """

    def __init__(self, fsync: bool = True) -> None:
        self.fsync = fsync

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
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        if os.path.exists(path):
            raise FileAlreadyExistsError(f"{path} already exists")
        tmp = _write_temp(directory, name, data, self.fsync)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise FileAlreadyExistsError(f"{path} already exists") from None
        finally:
            _unlink_quietly(tmp)
        if self.fsync:
            _fsync_dir(directory)

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
            _fsync_dir(directory)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def delete(self, path: str) -> None:
        _unlink_quietly(path)
