"""What a commit is given and gives back: its retry policy (``CommitOptions``), its result
(``CommitResult``), the limits of the commit loop, and the transaction ids it records.

Nothing here reads or writes the table: ``transaction`` and ``commit_loop`` use these.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

__all__ = [
    "CommitOptions",
    "CommitResult",
    "DEFAULT_OPTIONS",
    "READ_TABLES_KEY",
    "TRANSIENT_WRITE_RETRIES",
    "UNKNOWN_WRITE_RETRIES",
    "VERSION",
    "new_txn_id",
]

VERSION = "serialake"

READ_TABLES_KEY = "serialake.readTables"  # commitInfo: tables (and versions) a write was computed from

COMMIT_MAX_ATTEMPTS = "commit.max-attempts"
COMMIT_MAX_ATTEMPTS_DEFAULT = 10_000
COMMIT_MAX_DURATION_S = "commit.max-duration-s"
COMMIT_MAX_DURATION_S_DEFAULT = 600.0
#: Retries of a commit write that certainly failed with a transient errno (EINTR, EAGAIN, EIO, EBUSY).
TRANSIENT_WRITE_RETRIES = 3
#: Commit writes in a row whose outcome was unknown (each then checked in the log) before giving up.
UNKNOWN_WRITE_RETRIES = 20
COMMIT_BACKOFF_BASE_S = "commit.backoff-base-s"
COMMIT_BACKOFF_BASE_S_DEFAULT = 0.0005
COMMIT_BACKOFF_MAX_S = "commit.backoff-max-s"
COMMIT_BACKOFF_MAX_S_DEFAULT = 0.05


@dataclass(frozen=True)
class CommitOptions:
    """Retry policy of the commit loop."""

    max_attempts: int = COMMIT_MAX_ATTEMPTS_DEFAULT
    max_duration_s: float = COMMIT_MAX_DURATION_S_DEFAULT
    backoff_base_s: float = COMMIT_BACKOFF_BASE_S_DEFAULT
    backoff_max_s: float = COMMIT_BACKOFF_MAX_S_DEFAULT


DEFAULT_OPTIONS = CommitOptions()

#: Transaction ids not handed out yet (``new_txn_id``); emptied in a forked child.
_TXN_IDS: list[str] = []
_TXN_IDS_BATCH = 64
_TXN_IDS_LOCK = threading.Lock()


def new_txn_id() -> str:
    """A random (version 4, RFC 4122 variant) UUID for a transaction's ``commitInfo.txnId``, as text.

    Drawn from a pool filled ``_TXN_IDS_BATCH`` at a time from one ``os.urandom`` call (the
    source ``uuid.uuid4`` reads), so a commit makes one system call fewer. A forked child
    empties the pool it inherited, so two processes never hand out the same id.
    """
    try:
        return _TXN_IDS.pop()  # (atomic: the common path takes no lock)
    except IndexError:
        pass
    with _TXN_IDS_LOCK:
        if not _TXN_IDS:
            _TXN_IDS.extend(_uuid4_texts(os.urandom(16 * _TXN_IDS_BATCH)))
        return _TXN_IDS.pop()


def _uuid4_texts(raw: bytes) -> list[str]:
    """``str(uuid.UUID(bytes=chunk, version=4))`` of each 16-byte chunk of ``raw``, formatted directly."""
    out = []
    h = raw.hex()
    for i in range(0, len(h), 32):
        c = h[i : i + 32]
        variant = "89ab"[int(c[16], 16) & 3]  # the two top bits of byte 8: 10
        out.append(f"{c[:8]}-{c[8:12]}-4{c[13:16]}-{variant}{c[17:20]}-{c[20:]}")
    return out


def _after_fork_in_child() -> None:
    global _TXN_IDS_LOCK
    _TXN_IDS_LOCK = threading.Lock()  # (a thread of the parent may have held it at the fork)
    _TXN_IDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)



@dataclass(frozen=True)
class CommitResult:
    """What a successful commit did: its version, attempts, and the winners it rebased over.

    ``work_already_done``: rebasing over the winners left nothing to write (e.g. a compaction
    whose every output a concurrent compaction already made); no version was written and
    ``version`` is the latest winner checked, the version that already reflects the work.
    """

    version: int
    attempts: int
    winners_checked: int
    duration_s: float
    work_already_done: bool = False
