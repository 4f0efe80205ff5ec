"""Immutable table state at one version, built by replaying a log segment.

Replay rules (PROTOCOL.md): the last protocol and metadata win; the last txn version
per app id wins; domains follow their last action (``removed`` hides them); a file is
keyed by ``(path, deletion-vector id)`` and its newest add or remove decides.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from serialake.core.log.checkpoint import LazyAdds
from serialake.core.log.filestate import FileKey, FileState
from serialake.core.log.logfiles import LOG_DIR, LogSegment, commit_name
from serialake.core.model import features
from serialake.core.model import properties as props
from serialake.core.model.actions import (
    ACTION_TYPES,
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_from_dict,
)
from serialake.core.model.validate import ACTION_CHECKS, InvalidActionError, check_action, check_partition_values
from serialake.exceptions import CorruptLogError, InvalidTableError

#: A commit with 20 digits in a row may hold an integer past 64 bits, which orjson reads as a
#: float and json exactly: such a file is read by json. (Digits mapped to "0", then one search.)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 20


def parse_commit(data: bytes, table: str, version: int) -> list[Action]:
    """Actions of one commit file, checked (``serialake.core.model.validate``).

    ``CorruptLogError`` names the version and line of a file that is not JSON lines;
    ``InvalidTableError`` the version, line and field of an action the protocol forbids.
    """
    return [AddFile._from_obj(x) if type(x) is dict else x for x in parse_commit_items(data, table, version)]


def parse_commit_items(data: bytes, table: str, version: int) -> list[Any]:
    """``parse_commit``, with each add left as its checked JSON object (a dict) and no ``AddFile`` built.

    Conflict checks read a winner's adds from these (``log.CommitEntry``); the objects are
    built only when someone asks for the commit's actions.
    """
    out: list[Any] = []
    i = 0
    checks, classes = ACTION_CHECKS, ACTION_TYPES
    try:
        # One decoder call for the whole file is much faster than one per line. A JSON string
        # holds no raw newline, so each one ends an action. Whatever this fast parser refuses
        # (a blank line: two commas in a row; text that is not UTF-8; what only Python's json
        # reads, as NaN or integers past 64 bits) goes to the line-by-line path below, which
        # reads it as before or names the line that is wrong.
        if _LONG_DIGITS not in data.translate(_DIGITS_AS_ZERO):
            objs = orjson.loads(b"[" + data.rstrip().replace(b"\n", b",") + b"]")
        else:
            objs = json.loads("[" + data.rstrip().decode("utf-8").replace("\n", ",") + "]")
        for i, obj in enumerate(objs):  # noqa: B007 - i is read by the InvalidActionError handler below
            # check_action + action_from_dict in one loop: it runs once per action.
            for key, body in obj.items():
                check = checks.get(key)
                if check is not None and body is not None:
                    check(body)
                    out.append(body if key == "add" else classes[key]._from_obj(body))
                    break
        return out
    except InvalidActionError as e:
        raise _invalid(e, table, version, _line_number(data.decode("utf-8"), i)) from None
    except (ValueError, TypeError, AttributeError):
        out = []  # find the bad line below, for a precise error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptLogError(f"Table {table}: commit version {version} is not UTF-8 ({e})") from e
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            check_action(obj)
            action = action_from_dict(obj)
        except InvalidActionError as e:
            raise _invalid(e, table, version, lineno) from None
        except (ValueError, TypeError, AttributeError) as e:
            raise CorruptLogError(
                f"Table {table}: commit file for version {version} is corrupt or truncated at line {lineno}: {e}"
            ) from e
        if action is not None:
            out.append(action)
    return out


def _line_number(text: str, index: int) -> int:
    """The 1-based line number of the ``index``-th non-blank line."""
    seen = -1
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.strip():
            seen += 1
            if seen == index:
                return lineno
    return 0


def _invalid(
    e: InvalidActionError, table: str, version: int | None, line: int | None = None, file: str | None = None
) -> InvalidTableError:
    """The table-level error for an action check that failed in ``file`` (the commit of ``version`` by default)."""
    if file is None and version is not None:
        file = f"{LOG_DIR}/{commit_name(version)}"
    return InvalidTableError(
        e.reason, table=table, field=e.field, version=version, file=file, line=line or None, data_file=e.data_file
    )


def _partitioning(meta: Metadata) -> tuple[Any, ...]:
    return (meta.schema_string, meta.partition_columns)


@dataclass
class TableState:
    """Mutable accumulator used while replaying; frozen into a Snapshot."""

    protocol: Protocol | None = None
    metadata: Metadata | None = None
    file_state: FileState = field(default_factory=FileState)
    txns: dict[str, SetTransaction] = field(default_factory=dict)
    domains: dict[str, DomainMetadata] = field(default_factory=dict)
    # Distinct (key, value) of the partitionValues of adds applied since the partitioning last
    # changed; checked against the metadata when the snapshot is built (``Snapshot.__init__``).
    partition_values: set[tuple[str, str | None]] = field(default_factory=set)
    # Earlier such sets, with the metadata they were written under.
    partition_checks: list[tuple[Metadata, set[tuple[str, str | None]]]] = field(default_factory=list)

    @property
    def files(self) -> dict[FileKey, AddFile]:
        """The live files by key ``(path, dv_id)`` (every ``AddFile`` built)."""
        return self.file_state.keyed()

    @property
    def tombstones(self) -> dict[FileKey, RemoveFile]:
        return self.file_state.tombstones

    @tombstones.setter
    def tombstones(self, value: dict[FileKey, RemoveFile]) -> None:
        self.file_state.tombstones = dict(value)

    def materialize(self) -> None:
        """Build the ``AddFile`` of every file still held columnar (``files`` does it anyway)."""
        self.file_state.files()

    def copy(self) -> TableState:
        return TableState(
            self.protocol,
            self.metadata,
            self.file_state.copy(),
            dict(self.txns),
            dict(self.domains),
            set(self.partition_values),
            list(self.partition_checks),
        )

    def apply(self, actions: Iterable[Any]) -> None:
        """Apply one commit's (or one checkpoint's) actions in order."""
        fs = self.file_state
        meta_before = self.metadata
        pairs: set[tuple[str, str | None]] = set()
        for a in actions:
            t = type(a)
            if t is LazyAdds:
                fs.add_block(a)  # checkpoint adds stay columnar
                pairs.update(a.partition_pairs)
            elif t is AddFile:
                fs.add(a)
                pv = a.partition_values
                if pv:
                    pairs.update(pv.items())
            elif t is RemoveFile:
                fs.remove(a)
            elif t is Metadata:
                self.metadata = a
            elif t is Protocol:
                self.protocol = a
            elif t is SetTransaction:
                self.txns[a.app_id] = a
            elif t is DomainMetadata:
                if a.removed:
                    self.domains.pop(a.domain, None)
                else:
                    self.domains[a.domain] = a
        self.note_partition_values(meta_before, pairs)

    def note_partition_values(self, meta_before: Metadata | None, pairs: set[tuple[str, str | None]]) -> None:
        """Keep the partition values of one commit's adds, to be checked against their metadata.

        A commit that changes the schema or partitioning (e.g. REPLACE TABLE) starts a new set:
        values written before it are checked against the metadata they were written under.
        """
        meta = self.metadata
        if meta is not meta_before and meta_before is not None and meta is not None and (
            _partitioning(meta) != _partitioning(meta_before)
        ):
            if self.partition_values:
                self.partition_checks.append((meta_before, self.partition_values))
            self.partition_values = pairs
        elif pairs:
            self.partition_values |= pairs


#: The file state of a ``TableState`` that holds no files (a snapshot's own, or one
#: ``with_commits`` builds, whose files are kept apart): never changed.
_NO_FILES = FileState()


class Snapshot:
    """The table at one version: protocol, metadata, live files, txns and domains.

    Immutable once built, and safe to share between threads (a background checkpoint and
    transactions read the same snapshot): the file index is computed lazily, under a lock,
    into new dicts that are published whole and never changed afterwards.
    """

    #: Commits applied lazily (``with_commits``) before the file state is published anyway
    #: (more on big tables: see ``with_commits``).
    _MAX_PENDING_COMMITS = 256

    def __init__(
        self,
        table_path: str,
        version: int,
        state: TableState,
        segment: LogSegment | None,
        timestamp: int,
        *,
        commits: Sequence[tuple[int, Sequence[Any], int]] | None = None,
    ) -> None:
        if state.protocol is None:
            raise CorruptLogError(f"Table {table_path} at version {version} has no protocol action")
        if state.metadata is None:
            raise CorruptLogError(f"Table {table_path} at version {version} has no metaData action")
        features.check_readable(state.protocol, table_path)
        self.table_path = table_path
        self.version = version
        # Protocol, metadata, txns and domains; the files live in the published file state only.
        self._state = TableState(state.protocol, state.metadata, _NO_FILES, state.txns, state.domains)
        self.segment = segment
        self.timestamp = timestamp
        self._schema: Any = None
        self._lock = threading.Lock()
        # Published file state (None until computed for a snapshot made by ``with_commits``).
        self._index: FileState | None = state.file_state
        # Where the index comes from until it is published: (an ancestor whose index is published,
        # the file actions of each commit after it). Cleared only after ``_index`` is set, so a
        # reader finding it None finds ``_index`` set.
        self._files_from: tuple[Snapshot, tuple[list[Any], ...]] | None = None
        if state.partition_values or state.partition_checks:
            self._check_partition_values(state, commits)

    def _check_partition_values(self, st: TableState, commits: Sequence[tuple[int, Sequence[Any], int]] | None) -> None:
        """Every partition value replayed parses as its column's type, under the metadata it was written with."""
        for meta, pairs in [*st.partition_checks, (st.metadata, st.partition_values)]:
            try:
                check_partition_values(meta, pairs)  # type: ignore[arg-type]
            except InvalidActionError as e:
                key = e.field.split(".", 2)[2]
                version, file, data_file = self._locate_partition_value(key, e.value, commits)
                e.data_file = data_file
                version = version if version is not None else self.version
                raise _invalid(e, self.table_path, version, file=file) from None

    def _locate_partition_value(
        self, key: str, value: str, commits: Sequence[tuple[int, Sequence[Any], int]] | None
    ) -> tuple[int | None, str | None, str | None]:
        """(version, log file, data file) of the newest add with this partition value (error path only)."""

        def find(actions: Iterable[Any]) -> str | None:
            for a in actions:
                if type(a) is dict:  # an add as its checked JSON object (``with_commits``)
                    if (a.get("partitionValues") or {}).get(key) == value:
                        return str(a["path"])
                elif isinstance(a, AddFile) and (a.partition_values or {}).get(key) == value:
                    return a.path
            return None

        if commits is not None:
            for v, actions, _ in reversed(commits):
                if (path := find(actions)) is not None:
                    return v, f"{LOG_DIR}/{commit_name(v)}", path
            return None, None, None
        seg = self.segment
        if seg is None:
            return None, None, None
        from serialake.storage import store_for

        store = store_for(self.table_path)
        for v, st in reversed(seg.commits):
            try:
                actions = parse_commit(store.read(os.path.join(seg.log_path, st.name)), self.table_path, v)
            except (OSError, CorruptLogError, InvalidTableError):
                continue
            if (path := find(actions)) is not None:
                return v, f"{LOG_DIR}/{st.name}", path
        if seg.checkpoint is None:
            return None, None, None
        files = self._index.files() if self._index is not None else []
        names = ", ".join(f"{LOG_DIR}/{f.name}" for f in seg.checkpoint.files)
        return seg.checkpoint.version, names, find(files)

    def _files_index(self) -> FileState:
        """The live files and tombstones, computed once and never changed afterwards."""
        idx = self._index
        if idx is not None:
            return idx
        with self._lock:
            idx = self._index
            if idx is None:
                idx = self._replay_files()
                self._index = idx
            self._files_from = None  # after publishing: lets the parents be collected
            return idx

    def rows_held(self) -> int:
        """``FileState.rows_held`` of this snapshot's files, without publishing them: the
        published ancestor's rows plus the file actions applied since (an upper bound)."""
        source = self._files_from
        if source is None:
            return self._files_index().rows_held()
        base, chunks = source
        return base.file_state.rows_held() + sum(len(c) for c in chunks)

    def _replay_files(self) -> FileState:
        """This snapshot's files: its published ancestor's state plus the file actions since."""
        source = self._files_from  # read once: another thread may clear it after publishing
        if source is None:
            idx = self._index
            assert idx is not None
            return idx
        base, chunks = source
        base_index = base._index
        assert base_index is not None
        state = base_index.copy()
        for actions in chunks:
            state.apply(actions)
        return state

    # -- state -----------------------------------------------------------------
    @property
    def protocol(self) -> Protocol:
        return self._state.protocol  # type: ignore[return-value]

    @property
    def metadata(self) -> Metadata:
        return self._state.metadata  # type: ignore[return-value]

    @property
    def schema(self) -> Any:
        """The table schema as ``serialake.core.model.schema.StructType``."""
        if self._schema is None:
            if self.metadata.schema_string is None:
                raise CorruptLogError(
                    f"Table {self.table_path} at version {self.version}: its metaData action has no schemaString"
                )
            self._schema = self.metadata.schema
        return self._schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def configuration(self) -> dict[str, str]:
        return self.metadata.configuration

    @property
    def isolation_level(self) -> str:
        return props.isolation_level(self.configuration)

    @property
    def all_files(self) -> list[AddFile]:
        """Live data files (one per path; with a DV, its current vector)."""
        return list(self._files_index().files())

    @property
    def file_state(self) -> FileState:
        """The live files and tombstones (``filestate.FileState``; never changed)."""
        return self._files_index()

    @property
    def num_files(self) -> int:
        return self._files_index().count()

    @property
    def tombstones(self) -> list[RemoveFile]:
        return list(self._files_index().tombstones.values())

    @property
    def set_transactions(self) -> dict[str, SetTransaction]:
        return dict(self._state.txns)

    @property
    def domain_metadata(self) -> dict[str, DomainMetadata]:
        return dict(self._state.domains)

    def txn_version(self, app_id: str) -> int | None:
        t = self._state.txns.get(app_id)
        return t.version if t else None

    def file(self, path: str) -> AddFile | None:
        """The live add for ``path`` (any DV), or None."""
        for add in self._files_index().files():
            if add.path == path:
                return add
        return None

    def files_by_path(self) -> dict[str, AddFile]:
        return {add.path: add for add in self._files_index().files()}

    def size_in_bytes(self) -> int:
        return self._files_index().total_size()

    def checkpoint_actions(self, retention_cutoff_ms: int) -> list[Action]:
        """What a checkpoint of this snapshot holds (removes newer than the cutoff, stats dropped)."""
        idx = self._files_index()
        out: list[Action] = [self.protocol, self.metadata]
        out.extend(self._state.txns.values())
        out.extend(self._state.domains.values())
        out.extend(idx.files())
        out.extend(self._kept_tombstones(retention_cutoff_ms))
        return out

    def _kept_tombstones(self, retention_cutoff_ms: int) -> list[RemoveFile]:
        return [
            RemoveFile(**{**r.__dict__, "stats": None})
            for r in self._files_index().tombstones.values()
            if (r.deletion_timestamp or 0) > retention_cutoff_ms
        ]

    def checkpoint_table(self, retention_cutoff_ms: int) -> pa.Table:
        """``checkpoint_actions`` as the checkpoint's Arrow table, the checkpoint's own rows kept in Arrow.

        Rows loaded from a checkpoint are copied column by column (no ``AddFile`` is built);
        the adds of later commits go to Arrow a column at a time (``FileState.extra_segment``),
        so writing a checkpoint costs a few vectorized passes rather than a row per file.
        """
        from serialake.core.log.checkpoint import actions_table, adds_rows_table

        idx = self._files_index()
        objects: list[Action] = [self.protocol, self.metadata]
        objects += [*self._state.txns.values(), *self._state.domains.values()]
        tables = []
        segments = idx.block_segments()
        try:
            extra = idx.extra_segment()
        except ValueError:  # a value Arrow cannot hold (it names the file): the row path reports it
            objects.extend(idx.extra_files())
        else:
            segments += [extra] if extra is not None else []
        for segment, build in segments:
            rows = adds_rows_table(segment)
            if rows is None:  # types the checkpoint schema cannot take as they are: go through objects
                objects.extend(build(range(segment.num_rows)))
            else:
                tables.append(rows)
        objects.extend(self._kept_tombstones(retention_cutoff_ms))
        return pa.concat_tables([actions_table(objects), *tables])

    def with_metadata(self, metadata: Metadata) -> Snapshot:
        """This snapshot's files under other metadata: the table as a transaction that changes its
        metadata alone (MERGE with schema evolution) reads and writes it. Never a committed state."""
        st = self._state
        state = TableState(st.protocol, metadata, self._files_index(), st.txns, st.domains)
        return Snapshot(self.table_path, self.version, state, self.segment, self.timestamp)

    def with_commits(self, commits: Sequence[tuple[int, Sequence[Any], int]]) -> Snapshot:
        """A new snapshot with commits ``(version, actions, timestamp)`` applied in order.

        A commit's adds may be their checked JSON objects (``log.CommitEntry.items``): like
        the rest of the file actions, they are applied (and become ``AddFile`` objects) only
        when this snapshot's files are first asked for. A writer refreshing before each
        commit builds nothing per file of the other writers' commits.
        """
        st = self._state
        state = TableState(st.protocol, st.metadata, _NO_FILES, st.txns, st.domains)  # (files: kept lazily)
        copied_small = False
        file_actions: list[Any] = []
        version, ts = self.version, self.timestamp
        for v, actions, t in commits:
            if v != version + 1:
                raise CorruptLogError(f"Table {self.table_path}: expected version {version + 1}, found {v}")
            pairs: set[tuple[str, str | None]] = set()
            others: list[Action] = []
            for a in actions:
                kind = type(a)
                if kind is dict or kind is AddFile:
                    file_actions.append(a)
                    values = a.get("partitionValues") if kind is dict else a.partition_values
                    if values:
                        pairs.update(values.items())
                elif kind is RemoveFile:
                    file_actions.append(a)
                elif kind is not CommitInfo:
                    if (kind is SetTransaction or kind is DomainMetadata) and not copied_small:
                        state.txns, state.domains = dict(st.txns), dict(st.domains)
                        copied_small = True
                    others.append(a)
            if others:
                state.apply(others)
            if pairs:
                state.note_partition_values(state.metadata, pairs)
            version, ts = v, t
        snap = Snapshot(self.table_path, version, state, None, ts, commits=commits)
        snap._index = None
        # Point at the nearest published ancestor, not at this snapshot: a writer refreshing commit
        # by commit and never reading files would otherwise keep every snapshot alive in a chain.
        source = self._files_from
        if source is None:  # this snapshot's index is published
            snap._files_from = (self, (file_actions,))
        else:
            base, chunks = source
            snap._files_from = (base, (*chunks, file_actions))
            if len(chunks) >= self._MAX_PENDING_COMMITS and len(chunks) >= base.file_state.rows_held() // 64:
                # Bound the commits held (and the tuple copied per commit): publish, which copies
                # the ancestor's files once per so many commits (at most 1/64 of a copy per commit).
                snap._files_index()
        return snap

    def __repr__(self) -> str:
        return f"Snapshot({self.table_path!r}, version={self.version}, files={self.num_files})"


def commit_timestamp(actions: Sequence[Any], file_mtime: int) -> int:
    """In-commit timestamp if the commit has one, else the commit file's modification time."""
    for a in actions:
        if type(a) is CommitInfo:
            ict = a.values.get("inCommitTimestamp")
            if ict is not None:
                return int(ict)
    return file_mtime
