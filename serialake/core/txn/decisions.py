"""What a conflict rule decides about one transaction and one winning commit.

A rule (``conflicts``, with ``compaction_rebase`` and ``identity_rebase`` for rebases by rows
and by identity values) returns one of:

- ``None``: the winner changes nothing this transaction relies on: commit it as it is;
- ``Conflict``: the transaction fails, with the exception class, the ``ConflictReason``, the
  reason in words and the details the exception carries (``Conflict.error()`` builds it);
- ``Rebase``: go on as ``Rebase.info`` (the transaction rebased onto the winner: its protocol
  or metadata adopted, identity marks moved), after carrying out what the rebase implies:
  ``rows``, the row-level changes (our actions dropped, new ones added, the deletion vectors
  to write for them), and ``identity``, the identity values to shift in our new files.

Rules decide: they write nothing, delete nothing and change no ``TransactionInfo`` (they
read deletion vectors, and data rows and footers through its row reader). ``rebasing.check_winner``
runs them in order and carries out each decision before the next rule sees the transaction: it
raises the conflict, writes the deletion vectors and data files, deletes those a rebase dropped,
and raises ``Rebase.if_fails`` when carrying out a rebase fails (the file-level outcome).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serialake.core.model.actions import Action, AddFile, Metadata

if TYPE_CHECKING:
    from serialake.core.model.identity import IdentityColumn
    from serialake.core.txn.summaries import TransactionInfo
    from serialake.exceptions import ConflictReason, DeltaConcurrentModificationException

__all__ = ["Conflict", "Decision", "IdentityShift", "NewVector", "Rebase", "RowChanges"]


@dataclass(frozen=True)
class Conflict:
    """The transaction conflicts with the winner: ``exception`` (a ``DeltaConcurrentModificationException``)."""

    exception: type[DeltaConcurrentModificationException]
    conflict_reason: ConflictReason
    reason: str
    # The exception's keyword arguments: table, read and winning versions, the winner's operation
    # and commitInfo, and where the rule has them partition, file, detail, help.
    details: Mapping[str, Any]

    def error(self) -> DeltaConcurrentModificationException:
        return self.exception(self.reason, conflict_reason=self.conflict_reason, **self.details)


@dataclass(frozen=True)
class NewVector:
    """``add`` committed with a new deletion vector marking ``rows`` (a ``RowIndexSet``) deleted.

    ``add`` is the action as committed but for its vector, which the file to write replaces.
    """

    add: AddFile
    rows: Any


@dataclass(frozen=True)
class RowChanges:
    """A rebase by rows: our actions ``drop`` (by identity) replaced by ``new``.

    Each ``NewVector`` of ``new`` becomes its add with a deletion vector written for its rows.
    ``rebased_away``: the winners did some of our work (a compaction's), so the commit's file
    metrics are counted again, and a commit left with nothing but its commitInfo writes nothing.
    ``bases``: the deleted rows of our compaction inputs' base vectors, by path, read to make this
    rebase: recorded (``TransactionInfo.compaction_bases``) for later rebases of the same inputs.
    """

    drop: frozenset[int]
    new: tuple[Action | NewVector, ...]
    rebased_away: bool = False
    bases: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IdentityShift:
    """Generated identity values to move past a winner's: in every new file of ours holding them,
    the values of each column at or past ``first`` move by ``shift`` (files rewritten)."""

    read: Metadata  # the metadata the transaction read (its schema names the columns)
    shifts: tuple[tuple[IdentityColumn, int, int], ...]  # (column, first generated value, shift)


@dataclass(frozen=True)
class Rebase:
    """Go on as ``info``, once ``rows`` and ``identity`` are carried out.

    ``if_fails``: the conflict when carrying out ``rows`` fails (a vector that cannot be written).
    An ``identity`` rewrite that fails is a ``MetadataChangedException`` saying why
    (``conflicts.metadata_conflict``).
    """

    info: TransactionInfo
    rows: RowChanges | None = None
    identity: IdentityShift | None = None
    if_fails: Conflict | None = None


#: What a rule returns (see the module docstring).
Decision = Conflict | Rebase | None
