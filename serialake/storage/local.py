"""Local file-system log store: put-if-absent by an atomic no-overwrite hard link.

A commit is written to an unnamed file (``O_TMPFILE``) in the log directory, fsynced,
then given its final name with ``linkat``, which fails if the name exists; where
``O_TMPFILE`` is unavailable a uniquely named temporary file and ``link`` do the same.
The directory is then fsynced so the new name survives a crash. Readers see the final
name only once the content is complete and durable, and never an overwritten commit.

Failures are classified by step, since only the store knows which step failed: anything
before the naming step (directory, temporary file, its write or fsync) certainly left no
file (``WriteNotDoneError``); the naming step either refused before touching the directory
(``NAME_NOT_MADE_ERRNOS``: not done), or failed in a way that hides its result (EIO,
EINTR, ETIMEDOUT, ...: ``WriteOutcomeUnknownError``); a failed fsync of the directory after
the name appeared leaves the file visible but maybe not durable (``WriteNotDurableError``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from serialake.exceptions import FileAlreadyExistsError
from serialake.storage.base import (
    FileStatus,
    LogStore,
    PreparedPut,
    WriteNotDoneError,
    WriteNotDurableError,
    naming_error,
)

#: ``fault_hook(step, path)``: called before each step of a write (see ``LocalLogStore.fault_hook``).
FaultHook = Callable[[str, str], None]

#: errnos of ``open(O_TMPFILE)`` meaning "this file system cannot do it": fall back to a named temp file.
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS})


def fsync_dir(directory: str) -> None:
    """fsync a directory so the names created in it survive a crash (or a file, its bytes)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: Flags of ``LocalLogStore.read`` (plus ``O_NOATIME`` while allowed: see there).
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_NOATIME = getattr(os, "O_NOATIME", 0)

#: Bytes of a big file written between two flushes (see ``_write_temp``): a 10 MB checkpoint
#: flushed at once delayed concurrent commits' fsyncs by 3-6 ms; in 256 KiB slices, not at all.
_FLUSH_BYTES = 256 << 10


def _write_temp(directory: str, name: str, data: bytes, fsync: bool, hook: FaultHook | None = None) -> str:
    """A hidden temporary file in ``directory`` holding ``data``; ``WriteNotDoneError`` (none left) on failure."""
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        if hook is not None:
            hook("create", final)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as e:
        raise WriteNotDoneError(e, final, "create the temporary file") from e
    step = "write"
    try:
        if hook is not None:
            hook(step, final)
        view = memoryview(data)
        slices = fsync and len(data) > _FLUSH_BYTES
        while view:
            written = os.write(fd, view[:_FLUSH_BYTES] if slices else view)
            view = view[written:]
            if slices and view:
                # A big file (a checkpoint) goes to disk a slice at a time: an fsync of a commit
                # on the same file system then waits for a slice at most, never megabytes.
                os.fdatasync(fd)
        if fsync:
            step = "fsync"
            if hook is not None:
                hook(step, final)
            os.fsync(fd)
    except BaseException as e:
        os.close(fd)
        _unlink_quietly(tmp)
        if isinstance(e, OSError):
            raise WriteNotDoneError(e, final, f"{step} the temporary file") from e
        raise
    os.close(fd)
    return tmp


def _unlink_quietly(path: str) -> None:
    """Remove ``path`` if possible: a leftover hidden temporary file is invisible to readers."""
    try:
        os.unlink(path)
    except OSError:
        pass


_AT_FDCWD = -100
_AT_SYMLINK_FOLLOW = 0x400
_AT_EMPTY_PATH = 0x1000


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


def _link_proc(fd: int, dir_fd: int, name: bytes) -> int:
    """linkat of the unnamed inode ``fd`` through ``/proc/self/fd``, as ``name`` in ``dir_fd``: 0 or the errno."""
    if _linkat(_AT_FDCWD, f"/proc/self/fd/{fd}".encode(), dir_fd, name, _AT_SYMLINK_FOLLOW) == 0:
        return 0
    return ctypes.get_errno()


class _DirHandle:
    """An open descriptor of a log directory and how many puts are using it now."""

    __slots__ = ("cached", "fd", "users")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.cached = True  # still the cache's entry for its directory


class _DirHandles:
    """Descriptors of log directories, one per directory, at most ``limit`` kept open.

    A put names its file through the directory's descriptor and then fsyncs that same
    descriptor, so a descriptor is held from the link to the fsync (``acquire`` /
    ``release``). A directory not used lately is dropped from the cache when a new one
    comes in (least recently used first), and its descriptor is closed once no put holds
    it: never while a put may still name or sync through it, since a closed number can be
    reused by any file the process opens next. A process that writes thousands of tables
    (a long job, a test run) so keeps a bounded number open, far below the limits where
    ``select()`` (``FD_SETSIZE``, 1024) or ``RLIMIT_NOFILE`` start failing elsewhere.
    """

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._cache: dict[str, _DirHandle] = {}  # insertion order = use order (moved to the end on use)

    def acquire(self, directory: str, stale: _DirHandle | None = None) -> _DirHandle:
        """The directory's descriptor, held until ``release``; ``stale``: a handle found to be of a
        directory no longer at that path (the table deleted and created again) is replaced."""
        with self._lock:
            h = self._cache.pop(directory, None)
            if h is not None and h is stale:
                h.cached = False
                self._close_if_unused(h)
                h = None
            if h is None:
                h = _DirHandle(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            self._cache[directory] = h  # (re)inserted last: the most recently used
            h.users += 1
            while len(self._cache) > self.limit:
                old = self._cache.pop(next(iter(self._cache)))
                old.cached = False
                self._close_if_unused(old)
            return h

    def release(self, h: _DirHandle) -> None:
        with self._lock:
            h.users -= 1
            self._close_if_unused(h)

    def open_count(self) -> int:
        """Descriptors open now (cached or still held): for tests and diagnostics."""
        with self._lock:
            return len(self._cache)

    @staticmethod
    def _close_if_unused(h: _DirHandle) -> None:
        if not h.cached and h.users == 0 and h.fd >= 0:
            fd, h.fd = h.fd, -1
            os.close(fd)


#: The process's directory descriptors, shared by every ``LocalLogStore`` (a store is made per table).
_DIRS = _DirHandles()


class LocalLogStore(LogStore):
    """Log store for paths on a local (POSIX) file system.

    Args:
        fsync: make every commit durable before ``put_if_absent`` returns (default True;
            tests of logic may turn it off, never production).

    Attributes:
        fault_hook: for fault injection (``storage.faulty``): called with ``(step, path)``
            before each step of a write: ``mkdir``, ``create``, ``write``, ``fsync`` (the
            temporary file), ``link`` (``replace`` in ``write``), ``linked`` (after a link
            that succeeded: an error there is a lost result), ``fsync-dir``. An ``OSError``
            it raises is handled as that step's failure.
    """

    def __init__(self, fsync: bool = True) -> None:
        self.fsync = fsync
        self.fault_hook: FaultHook | None = None
        self._dirs = _DIRS
        self._tmpfile_ok = _linkat is not None
        # linkat(fd, "", ..., AT_EMPTY_PATH) names an unnamed inode without resolving
        # /proc/self/fd/N (~2 us less per attempt, lost races included). Linux allows it to the
        # file's opener since 6.10, before only with CAP_DAC_READ_SEARCH: ENOENT, then the /proc way.
        self._empty_path_ok = True
        self._read_flags = _READ_FLAGS | _NOATIME

    def _fsync_dir(self, directory: str, held: _DirHandle | None = None) -> None:
        """fsync ``directory``: through ``held`` when a name was just made through it, else its cached
        descriptor, replaced first if the directory was deleted since (maybe created again): fsyncing
        that one would leave the names made in the directory now at that path unsynced."""
        if held is not None:
            os.fsync(held.fd)
            return
        h = self._dirs.acquire(directory)
        try:
            if self._is_stale(directory, h.fd):
                fresh = self._dirs.acquire(directory, stale=h)
                self._dirs.release(h)
                h = fresh
            os.fsync(h.fd)
        finally:
            self._dirs.release(h)

    def _is_stale(self, directory: str, fd: int) -> bool:
        """Whether ``fd`` is not the directory now at ``directory`` (deleted, maybe created again)."""
        try:
            now = os.stat(directory)
        except OSError:
            return False  # no directory there at all: the caller's error stands
        held = os.fstat(fd)
        return (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino)

    def _hook(self, step: str, path: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step, path)

    def _temp(self, directory: str, name: str, data: bytes) -> str:
        if self.fault_hook is None:
            return _write_temp(directory, name, data, self.fsync)  # (verify.crash wraps this call)
        return _write_temp(directory, name, data, self.fsync, self.fault_hook)

    def _name(self, path: str, step: str, make_name: Callable[[], None]) -> None:
        """Run the naming step ``make_name`` of ``path``, classifying its failure (``naming_error``)."""
        try:
            self._hook(step, path)
            make_name()
        except FileExistsError:
            raise FileAlreadyExistsError(f"{path} already exists") from None
        except OSError as e:
            raise naming_error(e, path, f"name the file ({step})") from e
        try:
            self._hook("linked", path)
        except OSError as e:  # the name exists, but the caller cannot know it: a lost result
            raise naming_error(e, path, f"name the file ({step})") from e

    def _tmpfile(self, directory: str, path: str, data: bytes) -> int | None:
        """An unnamed inode (O_TMPFILE) in ``directory`` holding ``data``, fsynced: its descriptor.

        Nothing is ever visible under a temporary name, so a crash leaves no debris. None
        when the file system does not support O_TMPFILE.
        """
        try:
            self._hook("create", path)
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o644)
        except OSError as e:
            if e.errno not in _NO_TMPFILE:
                raise WriteNotDoneError(e, path, "create the temporary file") from e
            self._tmpfile_ok = False
            return None
        step = "write"
        try:
            self._hook(step, path)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.fsync:
                step = "fsync"
                self._hook(step, path)
                os.fsync(fd)
        except BaseException as e:  # the unnamed inode vanishes when closed: nothing landed
            os.close(fd)
            if isinstance(e, OSError):
                raise WriteNotDoneError(e, path, f"{step} the temporary file") from e
            raise
        return fd

    def _link_tmpfile(self, fd: int, path: str) -> _DirHandle:
        """Name the unnamed inode ``fd`` ``path`` with linkat, which never overwrites.

        The name is made relative to the directory's cached descriptor, which is returned held:
        the one to fsync, the directory the name was made in (``_sync_name`` releases it).
        """
        directory, _, name = path.rpartition(os.sep)
        target = name.encode()
        h = self._dirs.acquire(directory)

        def link() -> int:
            nonlocal h
            err = self._link_once(fd, h.fd, target)
            if err == errno.ENOENT and self._is_stale(directory, h.fd):  # the directory was re-created
                fresh = self._dirs.acquire(directory, stale=h)
                self._dirs.release(h)
                h = fresh
                err = self._link_once(fd, h.fd, target)
            return err

        try:
            if self.fault_hook is None:  # ``_name``'s classification without its hooks: a lost race costs little
                err = link()
                if err == errno.EEXIST:
                    raise FileAlreadyExistsError(f"{path} already exists")
                if err:
                    raise naming_error(OSError(err, os.strerror(err), path), path, "name the file (link)")
                return h

            def link_or_raise() -> None:
                if err := link():
                    raise OSError(err, os.strerror(err), path)

            self._name(path, "link", link_or_raise)
            return h
        except BaseException:
            self._dirs.release(h)
            raise

    def _link_once(self, fd: int, dir_fd: int, target: bytes) -> int:
        """One linkat of the unnamed inode ``fd`` as ``target`` in ``dir_fd``: 0 or the errno."""
        if not self._empty_path_ok:
            return _link_proc(fd, dir_fd, target)
        if _linkat(fd, b"", dir_fd, target, _AT_EMPTY_PATH) == 0:
            return 0
        err = ctypes.get_errno()
        if err == errno.ENOENT:  # AT_EMPTY_PATH refused here, or no such directory: ask the /proc way
            err = _link_proc(fd, dir_fd, target)
            if err != errno.ENOENT:
                self._empty_path_ok = False  # refused: this kernel wants the /proc way
        return err

    def prepare_put(self, data: bytes) -> PreparedPut:
        """The bytes as one fsynced unnamed inode, linked at each path tried (``_PreparedTmpfile``).

        A subclass that changes ``put_if_absent`` gets the default (a put per path).
        """
        if self._tmpfile_ok and type(self).put_if_absent is LocalLogStore.put_if_absent:
            return _PreparedTmpfile(self, data)
        return PreparedPut(self, data)

    def read(self, path: str) -> bytes:
        """The file's bytes, read without updating its access time where allowed (``O_NOATIME``).

        Reading a commit just written would otherwise change its inode (relatime updates the
        access time on the first read after a write): a journal update per commit read, which
        concurrent committers' fsyncs then wait for.
        """
        return self.read_timed(path)[0]

    def read_timed(self, path: str) -> tuple[bytes, int]:
        """``read`` and the file's modification time (ms) from the one ``fstat`` the read makes anyway."""
        got = self.read_timed_if_exists(path)
        if got is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return got

    def read_timed_if_exists(self, path: str) -> tuple[bytes, int] | None:
        try:
            fd = os.open(path, self._read_flags)
        except FileNotFoundError:
            return None
        except PermissionError as e:
            if e.errno != errno.EPERM or self._read_flags == _READ_FLAGS:
                raise
            self._read_flags = _READ_FLAGS  # O_NOATIME is for the file's owner: read as others do
            try:
                fd = os.open(path, _READ_FLAGS)
            except FileNotFoundError:
                return None
        try:
            st = os.fstat(fd)
            size, mtime = st.st_size, int(st.st_mtime * 1000)
            data = os.read(fd, size + 1)  # one call when the size holds (short of size + 1: the end)
            if len(data) == size:
                return data, mtime
            chunks = [data]
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks), mtime
        finally:
            os.close(fd)

    def open_input(self, path: str) -> Any:
        import pyarrow as pa

        return pa.OSFile(path)  # read by Arrow without the interpreter lock

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
        appear (anything before the link, or a link refused with ``NAME_NOT_MADE_ERRNOS``),
        ``WriteOutcomeUnknownError`` when the link's result is lost, ``WriteNotDurableError``
        when it appeared but the directory sync failed.
        """
        directory, name = os.path.split(path)
        self._make_dir(directory, path)
        if os.path.exists(path):
            raise FileAlreadyExistsError(f"{path} already exists")
        fd = self._tmpfile(directory, path, data) if self._tmpfile_ok else None
        held = None
        if fd is not None:
            try:
                held = self._link_tmpfile(fd, path)
            finally:
                os.close(fd)
        else:
            tmp = self._temp(directory, name, data)
            try:
                self._name(path, "link", lambda: os.link(tmp, path))
            finally:
                _unlink_quietly(tmp)
        self._sync_name(directory, path, held)

    def write(self, path: str, data: bytes) -> None:
        """Create or replace ``path``; failures are classified as in ``put_if_absent``."""
        directory, name = os.path.split(path)
        self._make_dir(directory, path)
        tmp = self._temp(directory, name, data)
        try:
            self._name(path, "replace", lambda: os.replace(tmp, path))
        except BaseException:
            _unlink_quietly(tmp)
            raise
        self._sync_name(directory, path)

    def _make_dir(self, directory: str, path: str) -> None:
        try:
            self._hook("mkdir", path)
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise WriteNotDoneError(e, path, "create the log directory") from e

    def _sync_name(self, directory: str, path: str, held: _DirHandle | None = None) -> None:
        """fsync ``directory`` (``held``: the descriptor the name was made through, released here)
        after ``path`` got its name: a failure leaves it visible but maybe not durable."""
        try:
            if not self.fsync:
                return
            try:
                self._hook("fsync-dir", path)
                self._fsync_dir(directory, held)
            except OSError as e:
                raise WriteNotDurableError(e, path) from e
        finally:
            if held is not None:
                self._dirs.release(held)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    @contextlib.contextmanager
    def unless_busy(self, directory: str) -> Iterator[bool]:
        """``LogStore.unless_busy`` by an advisory lock (``flock``) on ``directory`` itself, taken
        without waiting and released when the block ends or the process dies. No file is made.
        Where the lock cannot be taken for another reason (no such directory, no ``flock``): True.
        """
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            yield True
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free = True
            except BlockingIOError:
                free = False
            except OSError:
                free = True  # a file system without flock: nothing to coordinate with
            yield free
        finally:
            os.close(fd)  # (releases the lock)

    def delete(self, path: str) -> None:
        _unlink_quietly(path)


def _parent(path: str) -> str:
    """``os.path.dirname(path)``'s answer, cheaper (once per commit attempt)."""
    return path.rpartition(os.sep)[0] or os.path.dirname(path)


class _PreparedTmpfile(PreparedPut):
    """A commit body written and fsynced once as an unnamed inode, then linked at each path tried.

    A put whose name is taken (``FileAlreadyExistsError``) keeps the inode, so the next
    version costs one ``linkat``, not another write and fsync: what a writer that lost a
    race does. Each put still has ``put_if_absent``'s steps and guarantees: the bytes are
    fsynced before any name exists, and the directory is fsynced after the name appears,
    before ``put`` returns. After any other failure the inode is dropped (the link's outcome
    may be unknown: it is never named twice); the next put writes it anew.
    """

    store: LocalLogStore

    def __init__(self, store: LocalLogStore, data: bytes) -> None:
        super().__init__(store, data)
        self._fd: int | None = None
        self._directory = ""

    def ready(self, path: str) -> bool:
        """Write and fsync the unnamed inode now (``PreparedPut.ready``); False where there is none to make,
        and with a fault hook (its tests expect each put to take every step)."""
        if self._fd is not None or self.store.fault_hook is not None:
            return False
        try:
            return self._inode(path, _parent(path)) is not None
        except WriteNotDoneError:
            return False  # nothing made: ``put`` tries again and reports it

    def _inode(self, path: str, directory: str) -> int | None:
        """The fsynced unnamed inode holding the bytes, made in ``directory`` unless kept from an earlier
        put there; None where this file system has no unnamed inodes (a named temporary file per put)."""
        if self._fd is not None and directory != self._directory:
            self.close()
        fd = self._fd
        if fd is None:
            store = self.store
            if not store._tmpfile_ok:
                return None
            if store.fault_hook is not None:
                store._make_dir(directory, path)  # the step the hook expects first
            try:
                fd = store._tmpfile(directory, path, self.data)
            except WriteNotDoneError as e:
                if e.errno != errno.ENOENT or store.fault_hook is not None:
                    raise
                store._make_dir(directory, path)  # the table's first commit: no log directory yet
                fd = store._tmpfile(directory, path, self.data)
            if fd is None:  # found out just now: no O_TMPFILE here
                return None
            self._fd, self._directory = fd, directory
        return fd

    def put(self, path: str) -> None:
        store = self.store
        directory = _parent(path)
        fd = self._inode(path, directory)
        if fd is None:  # no O_TMPFILE here: a named temporary file per put
            store.put_if_absent(path, self.data)
            return
        try:
            held = store._link_tmpfile(fd, path)
        except FileAlreadyExistsError:
            raise  # the same durable bytes may take the next name
        except BaseException:
            self.close()
            raise
        self.close()
        store._sync_name(directory, path, held)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
