"""Conflict rules: check one transaction against one winning commit.

The checks run in Delta's order and the first failing one decides the exception:
protocol, metadata, domain metadata, app transactions, appends, delete-vs-read,
delete-vs-delete. Passing a winner may *rebase* the transaction (adopt the winner's
protocol or allow-listed metadata); the caller then checks the next winner.

Where we go further than OSS Delta (by design, see conflict-matrix.md):
- a winner's ``dataChange=false`` adds and removes (compaction) rearrange rows without
  changing them, so they never count as new rows or as deleted-while-read;
- an add whose path the same winner also removes (a deletion-vector update of a file
  that existed) brings no new rows, so it is not an append candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from serialake.core import features
from serialake.core import properties as props
from serialake.core.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from serialake.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
    UnsupportedFeatureError,
)

# Metadata keys a winner may turn on without failing concurrent writers that change no
# metadata: enabling them changes nothing a concurrent writer relies on.
FEATURE_ENABLEMENT_KEYS = {
    props.ENABLE_DELETION_VECTORS.lower(): "true",
    props.ENABLE_ICT.lower(): "true",
    "delta.enablerowtracking": "true",
    "delta.checkpointpolicy": "v2",
}


@dataclass(frozen=True)
class WinnerSummary:
    """What conflict checking needs to know about one winning commit."""

    version: int
    commit_info: CommitInfo | None
    protocol: Protocol | None
    metadata: Metadata | None
    adds: tuple[AddFile, ...]
    removes: tuple[RemoveFile, ...]
    txns: tuple[SetTransaction, ...]
    domains: tuple[DomainMetadata, ...]

    @classmethod
    def of(cls, version: int, actions: tuple[Action, ...] | list[Action]) -> WinnerSummary:
        ci = proto = meta = None
        adds: list[AddFile] = []
        removes: list[RemoveFile] = []
        txns: list[SetTransaction] = []
        domains: list[DomainMetadata] = []
        for a in actions:
            t = type(a)
            if t is AddFile:
                adds.append(a)  # type: ignore[arg-type]
            elif t is RemoveFile:
                removes.append(a)  # type: ignore[arg-type]
            elif t is CommitInfo:
                ci = a
            elif t is SetTransaction:
                txns.append(a)  # type: ignore[arg-type]
            elif t is DomainMetadata:
                domains.append(a)  # type: ignore[arg-type]
            elif t is Metadata:
                meta = a
            elif t is Protocol:
                proto = a
        return cls(version, ci, proto, meta, tuple(adds), tuple(removes), tuple(txns), tuple(domains))  # type: ignore[arg-type]

    @property
    def operation(self) -> str | None:
        return self.commit_info.operation if self.commit_info else None

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
    # Hook for row-level resolution: (info, winner, winner_remove, our_remove) -> rebased info or None.
    resolve_delete_delete: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        for a in self.actions:
            if isinstance(a, RemoveFile):
                self.removes[a.path] = a
            elif isinstance(a, SetTransaction):
                self.app_ids_written[a.app_id] = a.version
            elif isinstance(a, DomainMetadata):
                self.domains_written.add(a.domain)


def _fail(
    exc: type[DeltaConcurrentModificationException],
    reason: str,
    info: TransactionInfo,
    winner: WinnerSummary,
    **kw: Any,
) -> DeltaConcurrentModificationException:
    return exc(
        reason,
        table=info.table,
        read_version=info.read_version,
        winning_version=winner.version,
        winning_operation=winner.operation,
        winning_commit_info=dict(winner.commit_info.values) if winner.commit_info else None,
        **kw,
    )


def check_winner(info: TransactionInfo, winner: WinnerSummary) -> TransactionInfo:
    """Raise the first conflict between ``info`` and ``winner``, else return the rebased info."""
    info = _check_protocol(info, winner)
    info = _check_metadata(info, winner)
    _check_domains(info, winner)
    _check_app_ids(info, winner)
    _check_appends(info, winner)
    _check_delete_read(info, winner)
    return _check_delete_delete(info, winner)


def _check_protocol(info: TransactionInfo, w: WinnerSummary) -> TransactionInfo:
    if w.protocol is None:
        return info
    if info.read_version < 0:
        return _raise(
            _fail(
                ProtocolChangedException,
                "The table was created concurrently: another writer committed the first version "
                "of this path first.",
                info,
                w,
                help="Another job created this table at the same time. Reload it and retry the write "
                "(as an append, or with createIfNotExists).",
            )
        )
    if info.protocol is not None:
        return _raise(
            _fail(
                ProtocolChangedException,
                "The protocol was changed concurrently, and this transaction changes it too.",
                info,
                w,
            )
        )
    before = info.read_protocol or Protocol()
    dropped = (features.writer_features(before) | features.reader_features(before)) - (
        features.writer_features(w.protocol) | features.reader_features(w.protocol)
    )
    if dropped:
        return _raise(
            _fail(
                ProtocolChangedException,
                f"A concurrent commit dropped table feature(s) {', '.join(sorted(dropped))}.",
                info,
                w,
            )
        )
    try:
        features.check_writable(w.protocol, None, info.table)
    except UnsupportedFeatureError as e:
        return _raise(_fail(ProtocolChangedException, f"The table was upgraded concurrently: {e}", info, w))
    return replace(info, read_protocol=w.protocol)


def _allowed_metadata_change(before: Metadata | None, after: Metadata) -> bool:
    if before is None:
        return False
    if (
        before.id != after.id
        or before.schema_string != after.schema_string
        or tuple(before.partition_columns) != tuple(after.partition_columns)
    ):
        return False
    old = {k.lower(): v for k, v in before.configuration.items()}
    new = {k.lower(): v for k, v in after.configuration.items()}
    for key in set(old) | set(new):
        if old.get(key) == new.get(key):
            continue
        if FEATURE_ENABLEMENT_KEYS.get(key) != (new.get(key) or "").lower():
            return False
    return True


def _check_metadata(info: TransactionInfo, w: WinnerSummary) -> TransactionInfo:
    if w.metadata is None:
        return info
    if info.metadata is None and _allowed_metadata_change(info.read_metadata, w.metadata):
        return replace(info, read_metadata=w.metadata)
    what = _describe_metadata_change(info.read_metadata, w.metadata)
    return _raise(
        _fail(
            MetadataChangedException,
            f"The table metadata was changed by a concurrent commit ({what})."
            + (" This transaction changes the metadata too." if info.metadata is not None else ""),
            info,
            w,
        )
    )


def _describe_metadata_change(before: Metadata | None, after: Metadata) -> str:
    if before is None:
        return "table created"
    parts = []
    if before.schema_string != after.schema_string:
        parts.append("schema")
    if tuple(before.partition_columns) != tuple(after.partition_columns):
        parts.append("partitioning")
    changed = sorted(
        k
        for k in set(before.configuration) | set(after.configuration)
        if before.configuration.get(k) != after.configuration.get(k)
    )
    if changed:
        parts.append("properties " + ", ".join(f"{k}={after.configuration.get(k, '<unset>')}" for k in changed))
    if before.id != after.id:
        parts.append("table replaced")
    return "; ".join(parts) or "metadata rewritten"


def _check_domains(info: TransactionInfo, w: WinnerSummary) -> None:
    for d in w.domains:
        if d.domain in info.domains_written:
            _raise(
                _fail(
                    ConcurrentTransactionException,
                    f"Domain metadata '{d.domain}' was written concurrently.",
                    info,
                    w,
                    detail=f"domain {d.domain}",
                )
            )


def _check_app_ids(info: TransactionInfo, w: WinnerSummary) -> None:
    for t in w.txns:
        ours = info.app_ids_written.get(t.app_id)
        if t.app_id in info.read_app_ids or (ours is not None and t.version >= ours):
            _raise(
                _fail(
                    ConcurrentTransactionException,
                    f"Application '{t.app_id}' committed version {t.version} concurrently.",
                    info,
                    w,
                    detail=f"appId={t.app_id} version={t.version}",
                )
            )


def append_candidates(info: TransactionInfo, w: WinnerSummary) -> list[AddFile]:
    """The winner's adds that count as new rows for this transaction's isolation level."""
    level = info.isolation_level
    if level == props.SNAPSHOT_ISOLATION:
        return []
    if level == props.WRITE_SERIALIZABLE and w.is_blind_append and info.metadata is None:
        return []
    removed = {r.path for r in w.removes} if w.removes else ()
    return [a for a in w.adds if a.data_change and a.path not in removed]


def _check_appends(info: TransactionInfo, w: WinnerSummary) -> None:
    if info.is_blind_append or not info.read_predicates:
        return
    candidates = append_candidates(info, w)
    if not candidates:
        return
    for pred in info.read_predicates:
        seen: dict[tuple[tuple[str, str | None], ...], bool] = {}
        for add in candidates:
            pv = add.partition_values or {}
            if pred.whole_table:
                hit = True
            else:
                # Files of one commit mostly share partitions: evaluate each partition once.
                key = tuple(pv.items())
                hit = seen.get(key)  # type: ignore[assignment]
                if hit is None:
                    hit = seen[key] = pred.matches(pv)
            if hit:
                partition = dict(add.partition_values) if add.partition_values else None
                read = "the whole table" if pred.whole_table else f"'{pred.text}'"
                _raise(
                    _fail(
                        ConcurrentAppendException,
                        f"Files were added to {_where(partition)} by a concurrent "
                        f"{w.operation or 'commit'}, and this transaction read {read}.",
                        info,
                        w,
                        partition=partition,
                        file=add.path,
                        detail=f"read predicate: {read}",
                        help=_append_help(info, w, pred),
                    )
                )


def _where(partition: dict[str, str | None] | None) -> str:
    if not partition:
        return "the table"
    return "partition " + ", ".join(f"{k}={v if v is not None else 'NULL'}" for k, v in partition.items())


def _append_help(info: TransactionInfo, w: WinnerSummary, pred: ReadPredicate) -> str:
    parts = (info.read_metadata.partition_columns if info.read_metadata else ()) or ()
    if pred.whole_table or pred.text in ("", "true", "TRUE"):
        if parts:
            cols = ", ".join(parts)
            hint = (
                f"This operation read the whole table. Make the partitions it touches explicit in its "
                f"condition (e.g. add t.{parts[0]} = '<value>' to the MERGE/UPDATE/DELETE condition) so it "
                f"only reads the partitions of {cols} it needs."
            )
        else:
            hint = (
                "The table is not partitioned, so every operation reads the whole table. Partition it by "
                "the columns of your conditions, or enable deletion vectors for row-level concurrency."
            )
    else:
        hint = "Narrow the condition so the partitions this operation reads exclude the ones written concurrently."
    if info.isolation_level == props.SERIALIZABLE and w.is_blind_append:
        hint += " The winner was a blind append: under WriteSerializable it would not conflict."
    return hint


def _check_delete_read(info: TransactionInfo, w: WinnerSummary) -> None:
    for r in w.removes:
        if not r.data_change:
            continue  # compaction: the rows still exist, in another file
        if r.path in info.read_files or info.read_whole_table:
            read = info.read_files.get(r.path)
            _raise(
                _fail(
                    ConcurrentDeleteReadException,
                    f"A file this transaction read was removed by a concurrent {w.operation or 'commit'}.",
                    info,
                    w,
                    partition=dict(read.partition_values) if read and read.partition_values else None,
                    file=r.path,
                )
            )


def _check_delete_delete(info: TransactionInfo, w: WinnerSummary) -> TransactionInfo:
    for r in w.removes:
        ours = info.removes.get(r.path)
        if ours is None:
            continue
        if info.resolve_delete_delete is not None:
            rebased = info.resolve_delete_delete(info, w, r, ours)
            if rebased is not None:
                info = rebased
                continue
        _raise(
            _fail(
                ConcurrentDeleteDeleteException,
                f"A file this transaction removes was also removed by a concurrent {w.operation or 'commit'}.",
                info,
                w,
                partition=dict(r.partition_values) if r.partition_values else None,
                file=r.path,
            )
        )
    return info


def _raise(exc: BaseException) -> Any:
    raise exc
