"""What conflict checking sees: the transaction (``TransactionInfo``) and a winning commit (``WinnerSummary``).

Shared by the conflict rules (``conflicts``, ``compaction_rebase``, ``identity_rebase``), the
code that carries out their decisions (``rebasing``) and the transaction (``transaction``):
these types sit below all of them, so none imports another for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from serialake.core.dv.deletion_vectors import RowIndexSet
from serialake.core.model.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from serialake.core.predicates import row_eval
from serialake.core.txn import row_level as RL

__all__ = ["MatchedRows", "ReadPredicate", "TransactionInfo", "WinnerSummary"]


@dataclass(frozen=True)
class WinnerSummary:
    """What conflict checking needs to know about one winning commit.

    Its adds are ``AddFile`` objects, or, for a commit read from the log, their checked JSON
    objects (``log.CommitEntry.items``): rules read paths, partition values and flags through
    ``add_fields`` and build the ``AddFile`` of a file they look at closely with ``add_at``,
    so checking a winner of many files builds no object per file.
    """

    version: int
    commit_info: CommitInfo | None
    protocol: Protocol | None
    metadata: Metadata | None
    add_rows: tuple[Any, ...]  # each add: an AddFile or its checked JSON object (a dict)
    removes: tuple[RemoveFile, ...]
    txns: tuple[SetTransaction, ...]
    domains: tuple[DomainMetadata, ...]

    @classmethod
    def of(cls, version: int, actions: Sequence[Any]) -> WinnerSummary:
        """The summary of a commit's actions (``CommitEntry.items``: adds may be JSON objects)."""
        ci = proto = meta = None
        adds: list[Any] = []
        removes: list[RemoveFile] = []
        txns: list[SetTransaction] = []
        domains: list[DomainMetadata] = []
        for a in actions:
            t = type(a)
            if t is AddFile or t is dict:
                adds.append(a)
            elif t is RemoveFile:
                removes.append(a)
            elif t is CommitInfo:
                ci = a
            elif t is SetTransaction:
                txns.append(a)
            elif t is DomainMetadata:
                domains.append(a)
            elif t is Metadata:
                meta = a
            elif t is Protocol:
                proto = a
        return cls(version, ci, proto, meta, tuple(adds), tuple(removes), tuple(txns), tuple(domains))

    @property
    def operation(self) -> str | None:
        return self.commit_info.operation if self.commit_info else None

    @cached_property
    def adds(self) -> tuple[AddFile, ...]:
        """Every add as an ``AddFile``."""
        return tuple(self.add_at(i) for i in range(len(self.add_rows)))

    @cached_property
    def _built(self) -> dict[int, AddFile]:
        return {}

    def add_at(self, i: int) -> AddFile:
        """The ``AddFile`` of the i-th add (built once)."""
        row = self.add_rows[i]
        if type(row) is not dict:
            return row
        built = self._built.get(i)
        if built is None:
            built = self._built[i] = AddFile._from_obj(row)
        return built

    def add_fields(self) -> Iterator[tuple[int, str, dict[str, str | None] | None, bool]]:
        """``(index, path, partition values, dataChange)`` of each add, no object built."""
        for i, row in enumerate(self.add_rows):
            if type(row) is dict:
                yield i, row["path"], row["partitionValues"], row["dataChange"]
            else:
                yield i, row.path, row.partition_values, row.data_change

    @cached_property
    def removed_paths(self) -> frozenset[str]:
        return frozenset(r.path for r in self.removes)

    @cached_property
    def dv_updates(self) -> dict[str, tuple[RemoveFile, AddFile]]:
        """Files this winner changed through deletion vectors: path -> (old remove, new add)."""
        if not self.removes:
            return {}
        removed = self.removed_paths
        same_path = [self.add_at(i) for i, path, _, _ in self.add_fields() if path in removed]
        return RL.dv_update_pairs({r.path: r for r in self.removes}, same_path)

    @property
    def is_blind_append(self) -> bool:
        """Per Delta, a winner without commitInfo counts as not blind."""
        return bool(self.commit_info and self.commit_info.is_blind_append is True)

    @property
    def txn_id(self) -> str | None:
        return self.commit_info.txn_id if self.commit_info else None


@dataclass(frozen=True)
class ReadPredicate:
    """A predicate a transaction read with: its text and a compiled partition matcher."""

    text: str
    matches: Callable[[Mapping[str, str | None]], bool]
    whole_table: bool = False
    expr: Any = None  # the full predicate (data columns too), for row-level checks
    may_match_stats: Callable[[Mapping[str, str | None], Any], bool] | None = None
    # The operation's own condition on rows the driver leaves undecided (see row_eval.RowEvaluator).
    row_evaluator: row_eval.RowEvaluator | None = None
    # ``expr`` is only a necessary condition of the read (MERGE: its target side): rows the driver
    # finds TRUE are confirmed by ``row_evaluator`` too; the driver only rules rows out.
    confirm_rows: bool = False


@dataclass(frozen=True)
class MatchedRows:
    """The live rows of one file that matched the transaction's reads, declared by the operation.

    Positions are physical rows of the file as read: with ``base``'s deletion vector.
    """

    base: AddFile
    rows: RowIndexSet


@dataclass
class TransactionInfo:
    """The current transaction as conflict checking sees it; rebased between winners."""

    table: str
    read_version: int
    read_metadata: Metadata | None
    read_protocol: Protocol | None
    isolation_level: str
    read_predicates: list[ReadPredicate]
    read_files: dict[str, AddFile]
    read_whole_table: bool
    read_app_ids: set[str]
    actions: list[Action]
    metadata: Metadata | None  # metadata this txn writes
    protocol: Protocol | None  # protocol this txn writes
    is_blind_append: bool
    txn_id: str
    removes: dict[str, RemoveFile] = field(default_factory=dict)
    app_ids_written: dict[str, int] = field(default_factory=dict)
    domains_written: set[str] = field(default_factory=set)
    row_level: bool = False  # deletion vectors on and row-level concurrency applies
    compaction_carry: bool = False  # deletion vectors on: deletes carry over compactions
    reader: Any = None  # row_eval.RowReader, to evaluate predicates on rows
    compaction_bases: dict[str, Any] = field(default_factory=dict)  # our compaction inputs' base vectors
    matched_rows: dict[str, MatchedRows] = field(default_factory=dict)  # path -> rows our reads matched
    rebased_away: bool = False  # a rebase dropped actions whose work a winner had already done
    # Vectors rebasing wrote: deleted when dropped, or when the commit fails (``discard_rebase_dvs``).
    rebase_dvs: list[Any] = field(default_factory=list)
    # Identity values stored past the marks read, per column (lower-case name -> identity.Allocation),
    # and the data files re-basing them wrote (``core.txn.identity_rebase``).
    identity_allocations: dict[str, Any] = field(default_factory=dict)
    rebase_files: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for a in self.actions:
            if isinstance(a, RemoveFile):
                self.removes[a.path] = a
            elif isinstance(a, SetTransaction):
                self.app_ids_written[a.app_id] = a.version
            elif isinstance(a, DomainMetadata):
                self.domains_written.add(a.domain)

    @property
    def adds(self) -> list[AddFile]:
        return [a for a in self.actions if isinstance(a, AddFile)]

    @property
    def nothing_left(self) -> bool:
        """Rebasing dropped every action (not the commitInfo): the winners already did this work."""
        return self.rebased_away and all(isinstance(a, CommitInfo) for a in self.actions)

    def replace_actions(self, drop: set[int], new: list[Action]) -> None:
        """Rebase: drop actions (by identity) and append new ones, keeping ``removes`` in sync."""
        self.actions = [a for a in self.actions if id(a) not in drop] + new
        self.removes = {a.path: a for a in self.actions if isinstance(a, RemoveFile)}
