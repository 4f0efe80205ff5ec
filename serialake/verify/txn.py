"""What the list-append workloads share: key names, the retired-key window, one txn's outcome.

The file-level workload (:mod:`serialake.verify.workload`), its row-level variant
(:mod:`serialake.verify.rows`) and the Spark DataFrame workload
(:mod:`serialake.verify.dataframes`) all name keys, refuse retired keys and classify a
commit's outcome the same way; this module is the one place that does it, so each of them
imports it and none imports another for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from serialake.exceptions import CommitFailedError, DeltaConcurrentModificationException
from serialake.verify.history import Mop

__all__ = [
    "RETIRE_WORKLOAD",
    "StaleKeyWindow",
    "TxnResult",
    "check_window",
    "commit_txn",
    "error_class",
    "error_text",
    "key_index",
    "key_name",
    "winning_version",
]

RETIRE_WORKLOAD = "retire-keys"  # operationParameters.workload of the commits that retire keys


@dataclass(frozen=True)
class TxnResult:
    """What one executed transaction returned (before it is recorded)."""

    outcome: str  # ok | fail | info
    mops: tuple[Mop, ...]
    error: str | None = None
    commit_version: int | None = None
    attempts: int | None = None
    duration_s: float | None = None


def key_name(i: int) -> str:
    """Key ``i`` as a partition value; zero-padded so that string order is key order."""
    return f"k{i:06d}"


def key_index(key: str) -> int:
    """Inverse of :func:`key_name`."""
    return int(key[1:])


class StaleKeyWindow(Exception):
    """A txn chose a key that may have been retired by the version it reads: refused before reading."""


def check_window(read_version: int, mops: Sequence[Mop], first_live: int) -> None:
    """Raise :class:`StaleKeyWindow` if ``mops`` use a key below ``first_live``."""
    stale = sorted({k for _, k, _ in mops if key_index(k) < first_live})
    if stale:
        raise StaleKeyWindow(
            f"keys {', '.join(stale)} may be retired at version {read_version} (keys below {key_name(first_live)})"
        )


def commit_txn(txn: Any, actions: list[Any], mops: Sequence[Mop], done: list[Mop], workload: str) -> TxnResult:
    """Commit a workload transaction and classify the outcome: ok, fail (conflict) or info (unknown)."""
    try:
        txn.commit(actions, operation="UPDATE", operation_parameters={"workload": workload})
    except DeltaConcurrentModificationException as e:
        winner = f" [winning version {e.winning_version}]" if e.winning_version is not None else ""
        return TxnResult("fail", tuple(mops), error_text(e) + winner)
    except CommitFailedError as e:  # gave up retrying: a lost response may still have landed
        return TxnResult("info", tuple(mops), error_text(e))
    except Exception as e:  # noqa: BLE001 - e.g. an I/O error: the commit may or may not exist
        return TxnResult("info", tuple(mops), error_text(e))
    res = txn.committed
    assert res is not None
    return TxnResult("ok", tuple(done), None, res.version, res.attempts, res.duration_s)


def error_text(e: BaseException) -> str:
    """How a txn's error is recorded: ``Class: first line of the message`` (cut to 160 characters)."""
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first[:160]}"


def error_class(error: str | None) -> str:
    """The exception class name of a recorded error string."""
    return (error or "unknown").split(":", 1)[0]


def winning_version(error: str | None) -> int | None:
    """The version of the commit a conflict was with, as :func:`commit_txn` records it (None: not said)."""
    head, sep, tail = (error or "").rpartition("[winning version ")
    if not sep or not tail.endswith("]") or not tail[:-1].isdigit():
        return None
    return int(tail[:-1])
