"""Helpers shared by test modules (import from here, never from another test module)."""

from __future__ import annotations

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
