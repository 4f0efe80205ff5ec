"""Steps after a commit: once a version is committed, no later step turns the result into an error.

When ``txn.commit`` has returned a version, the table holds the operation's work and other
readers see it. Everything an operation does afterwards is a post-commit step: the
transaction's own (caching the commit, deleting the files rebasing wrote that the commit
does not use, scheduling a checkpoint or the Iceberg conversion), deleting written files
the commit does not reference, registering a table name in the catalog, noting the write
for the session's reads, releasing cached DataFrames, and building the metrics and the
result handed back. Each runs through ``after_commit``: when it raises an ``Exception``, the
failure is logged (logger ``serialake.core.txn.post_commit``) and warned about
(``AfterCommitWarning``, naming the table, the committed version, the operation and the
step, with the cause), and the operation returns its committed result, or the best one it
can build without the step (``fallback``). ``BaseException``s that are not ``Exception``s
(``KeyboardInterrupt``, ``SystemExit``) still propagate.

Only steps after a commit go through here: a failure before or during the commit raises as
it always did. ``version`` None says that nothing was committed (the operation found nothing
to do, or skipped an already committed write): the step then runs unguarded, and its
failure is the operation's, as before. With warnings turned into errors (``-W error``) the
warning itself raises: that is the caller's choice.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

__all__ = ["AfterCommitWarning", "after_commit"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class AfterCommitWarning(UserWarning):
    """A step after a commit failed; the commit stands and the operation returned its result.

    Attributes name what failed: ``table``, ``version`` (the committed one), ``operation``,
    ``step`` and ``cause`` (the exception).
    """

    def __init__(self, message: str, *, table: str, version: int, operation: str, step: str, cause: Exception):
        super().__init__(message)
        self.table = table
        self.version = version
        self.operation = operation
        self.step = step
        self.cause = cause


@overload
def after_commit(
    step: str, table: str, version: int | None, fn: Callable[..., _T], *args: Any, operation: str, fallback: _T,
    instead: str = ...,
) -> _T: ...


@overload
def after_commit(
    step: str, table: str, version: int | None, fn: Callable[..., _T], *args: Any, operation: str,
    instead: str = ...,
) -> _T | None: ...


def after_commit(
    step: str,
    table: str,
    version: int | None,
    fn: Callable[..., Any],
    *args: Any,
    operation: str,
    fallback: Any = None,
    instead: str = "",
) -> Any:
    """``fn(*args)``, a step ``operation`` runs after committing ``version`` of ``table``.

    On an ``Exception``: log and warn (see the module docstring), then return ``fallback``
    (``instead`` says, for the message, what the caller gets instead of the step's result).
    ``version`` None: nothing was committed, ``fn`` runs unguarded.
    """
    if version is None:
        return fn(*args)
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the commit stands whatever the step raised
        what = f" {instead}" if instead else ""
        message = (
            f"{operation} committed version {version} of table {table}, but a step after the commit failed: "
            f"{step} ({type(e).__name__}: {e}). The commit stands and the operation returns its result{what}."
        )
        log.warning(message, exc_info=e)
        warnings.warn(
            AfterCommitWarning(message, table=table, version=version, operation=operation, step=step, cause=e),
            stacklevel=2,
        )
        return fallback
