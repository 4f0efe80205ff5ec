"""Helpers shared by test modules (import from here, never from another test module)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from serialake.core.transaction import OptimisticTransaction


@contextmanager
def before_first_commit(monkeypatch: pytest.MonkeyPatch, action: Callable[[], Any]) -> Iterator[None]:
    """Run ``action`` (another operation, committing normally) just before the next commit.

    The operation under test has planned (snapshot pinned, reads recorded, files written);
    ``action`` then runs to completion and commits first: a deterministic interleaving of two
    real operations planned from the same version.
    """
    original = OptimisticTransaction.commit
    fired: list[bool] = []

    def commit(self: OptimisticTransaction, *args: Any, **kwargs: Any) -> int:
        if not fired:
            fired.append(True)
            action()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OptimisticTransaction, "commit", commit)
    try:
        yield
    finally:
        monkeypatch.setattr(OptimisticTransaction, "commit", original)


@contextmanager
def serialake_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, list[tuple[str, int | None]]]]:
    """Record every serialake commit under the thread that made it: ``(txnId, version)``, the
    version None when nothing was written (the work was already done by a winner).

    The txnId is the one in the commit's ``commitInfo``: a commit file names the transaction
    that wrote it, so a test can tell which of its operations made each version.
    """
    original = OptimisticTransaction.commit
    made: dict[int, list[tuple[str, int | None]]] = {}

    def commit(self: OptimisticTransaction, *args: Any, **kwargs: Any) -> int:
        version = original(self, *args, **kwargs)
        done = self.committed is not None and self.committed.work_already_done
        made.setdefault(threading.get_ident(), []).append((self.txn_id, None if done else version))
        return version

    monkeypatch.setattr(OptimisticTransaction, "commit", commit)
    try:
        yield made
    finally:
        monkeypatch.setattr(OptimisticTransaction, "commit", original)
