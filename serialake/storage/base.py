"""The log-store contract every storage backend implements.

Correctness rests on one primitive: ``put_if_absent`` makes a file appear whole or not
at all, and never overwrites one that exists (it raises ``FileAlreadyExistsError``).
Listing is sorted by name; a reader never sees a partially written log file.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import io
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class WriteNotDoneError(OSError):
    """A write that certainly did not happen: it failed before the file could appear.

    Raised by a store for a failure before the atomic step (creating, writing or syncing
    the temporary file, creating the directory) or by the atomic step itself when it
    reports that it did not take place. ``phase`` says which step failed.
    """

    def __init__(self, error: OSError, path: str, phase: str) -> None:
        super().__init__(error.errno, error.strerror or str(error), path)
        self.phase = phase


class WriteNotDurableError(OSError):
    """The file was written and is visible, but syncing its directory failed: a crash may lose it."""

    def __init__(self, error: OSError, path: str) -> None:
        super().__init__(error.errno, error.strerror or str(error), path)
        self.phase = "fsync the log directory"


class WriteOutcomeUnknownError(OSError):
    """The step that names the file failed in a way that hides whether it took place.

    E.g. EIO, ETIMEDOUT or ESTALE from ``link`` (on NFS the server may have made the name
    and the reply was lost). The caller must look for the file's content to know; any
    other ``OSError`` from ``put_if_absent`` means the same.
    """

    def __init__(self, error: OSError, path: str, phase: str) -> None:
        super().__init__(error.errno, error.strerror or str(error), path)
        self.phase = phase


#: errnos after which writing again is safe and may succeed (nothing landed).
TRANSIENT_ERRNOS = frozenset({_errno.EINTR, _errno.EAGAIN, _errno.EIO, _errno.EBUSY})

#: errnos with which ``link``/``linkat``/``rename`` refuse before touching the directory: the
#: new name certainly does not exist. Any other errno (EIO, EINTR, ETIMEDOUT, ESTALE, ...)
#: leaves the outcome unknown.
NAME_NOT_MADE_ERRNOS = frozenset(
    {
        _errno.ENOSPC, _errno.EDQUOT, _errno.EROFS, _errno.EACCES, _errno.EPERM, _errno.EMLINK,
        _errno.ENOENT, _errno.ENOTDIR, _errno.ENAMETOOLONG, _errno.ELOOP, _errno.EXDEV, _errno.EINVAL,
        _errno.EBADF, _errno.ENOMEM, _errno.EFAULT,
    }
)  # fmt: skip


def naming_error(error: OSError, path: str, phase: str) -> OSError:
    """Classify a failed naming step (link, linkat, rename) of ``path`` (EEXIST is the caller's)."""
    if error.errno in NAME_NOT_MADE_ERRNOS:
        return WriteNotDoneError(error, path, phase)
    return WriteOutcomeUnknownError(error, path, phase)


def errno_text(error: OSError) -> str:
    """``errno 28 ENOSPC: No space left on device`` (the error itself when it has no errno)."""
    if not error.errno:
        return str(error)
    return f"errno {error.errno} {_errno.errorcode.get(error.errno, '')}: {error.strerror or error}"


def os_error_advice(err: int | None, directory: str) -> str:
    """What a person can do about an I/O error number when writing in ``directory``."""
    if err in (_errno.ENOSPC, _errno.EDQUOT):
        return f"the file system holding {directory} is full (or over quota): free space, then retry"
    if err == _errno.EROFS:
        return f"the file system holding {directory} is read-only: remount it read-write or use another location"
    if err in (_errno.EACCES, _errno.EPERM):
        return (
            f"the user running this job (uid {os.geteuid()}) may not create files in {directory}: "
            "check the directory's owner and mode"
        )
    if err == _errno.EIO:
        return "the device reported an I/O error: check the disk and the system log"
    if err == _errno.EMLINK or err == _errno.ENAMETOOLONG:
        return f"the file system refused a new name in {directory}"
    return "check the file system holding the table"


@dataclass(frozen=True, order=True)
class FileStatus:
    """A listed file: its name (not path), size in bytes and modification time in ms."""

    name: str
    size: int
    modification_time: int


class PreparedPut:
    """Bytes to create at one of several paths (``LogStore.prepare_put``).

    ``put(path)`` has ``put_if_absent(path, data)``'s outcome and errors, whatever it keeps
    between calls; this default keeps nothing and calls ``put_if_absent``, so stores that
    wrap another, or change how a put behaves, keep their behaviour.
    """

    def __init__(self, store: LogStore, data: bytes) -> None:
        self.store = store
        self.data = data

    def ready(self, path: str) -> bool:
        """Do now the slow work that comes before any name is made (``path``: the first one to try).

        True when it did some (the local store writes and syncs the bytes): commits that landed
        meanwhile are then worth reading before the first put, which would otherwise be refused
        at each of them. This default does nothing: False. Errors are left to ``put``.
        """
        return False

    def put(self, path: str) -> None:
        """Create ``path`` holding the bytes atomically and durably (``LogStore.put_if_absent``)."""
        self.store.put_if_absent(path, self.data)

    def close(self) -> None:
        """Release what was kept between puts (nothing here)."""

    def __enter__(self) -> PreparedPut:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LogStore(ABC):
    """Reads, lists and atomically writes files under a table root (paths are absolute)."""

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The whole content of ``path``; ``FileNotFoundError`` if absent."""

    def open_input(self, path: str) -> Any:
        """``path`` as a seekable binary file, for readers that take only the parts they need.

        A checkpoint's Parquet reader reads the columns it wants from it, so a big checkpoint
        is never held whole in memory. The default reads the file (``read``); a store that can
        give a native file does. ``FileNotFoundError`` if absent.
        """
        return io.BytesIO(self.read(path))

    def modification_time(self, path: str) -> int:
        """When ``path`` was last written, in ms since the epoch (0 when unknown).

        A commit without an in-commit timestamp has its file's modification time as its
        timestamp (history, time travel by timestamp). The default asks the local file system.
        """
        try:
            return int(os.stat(path).st_mtime * 1000)
        except OSError:
            return 0

    def read_timed(self, path: str) -> tuple[bytes, int]:
        """``read(path)`` and ``modification_time(path)`` (a commit's bytes and, for a commit without an
        in-commit timestamp, its time). A store that learns both at once overrides it."""
        return self.read(path), self.modification_time(path)

    def read_timed_if_exists(self, path: str) -> tuple[bytes, int] | None:
        """``read_timed(path)``, or None when ``path`` does not exist: how a writer probes for the next
        commit, which is usually not there yet (no exception raised through the layers above)."""
        try:
            return self.read_timed(path)
        except FileNotFoundError:
            return None

    def status(self, path: str) -> FileStatus | None:
        """``path``'s name, size and modification time, found by name (None when absent).

        Loading the log asks for a commit a listing left out: a directory read concurrent with
        commits can miss version N while showing N+1. The default asks the local file system.
        """
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return FileStatus(os.path.basename(path), st.st_size, int(st.st_mtime * 1000))

    @abstractmethod
    def list_from(self, directory: str, start_name: str = "") -> list[FileStatus]:
        """Files in ``directory`` whose name is >= ``start_name``, sorted by name.

        A missing directory lists as empty.
        """

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` atomically and durably, or raise ``FileAlreadyExistsError``.

        Other failures say what is known: ``WriteNotDoneError`` (the file certainly did not
        appear), ``WriteNotDurableError`` (it appeared; a crash may lose it); any other
        ``OSError`` (``WriteOutcomeUnknownError`` among them) leaves the outcome unknown.
        """

    def prepare_put(self, data: bytes) -> PreparedPut:
        """``data`` ready to be put (``put_if_absent``) at one path, or at the next when that one is taken.

        The commit loop writes one commit body at version after version until one is free:
        a store that can make the bytes durable once, then try names, does so (the local
        store keeps an fsynced unnamed inode and links it). The default puts the bytes anew
        at each path. Close the result (or use it as a context manager) when done.
        """
        return PreparedPut(self, data)

    @abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` atomically (for checkpoints and ``_last_checkpoint``)."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove ``path``; a missing file is not an error."""

    def is_partial_write_visible(self) -> bool:
        """Whether readers can observe half-written files (never for stores we ship)."""
        return False

    @contextlib.contextmanager
    def unless_busy(self, directory: str) -> Iterator[bool]:
        """Whether no other process on this machine does the same optional work on ``directory``
        now (a background checkpoint): while the ``with`` block runs, the others are told so.

        Never waits. A store that cannot tell (an object store, shared by many machines) says True.
        """
        yield True
