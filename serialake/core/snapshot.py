"""Immutable table state at one version, built by replaying a log segment.

Replay rules (PROTOCOL.md): the last protocol and metadata win; the last txn version
per app id wins; domains follow their last action (``removed`` hides them); a file is
keyed by ``(path, deletion-vector id)`` and its newest add or remove decides.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

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
    action_from_dict,
)
from serialake.core.checkpoint import LazyAdds
from serialake.core.logfiles import LogSegment
from serialake.exceptions import CorruptLogError

FileKey = tuple[str, "str | None"]


def parse_commit(data: bytes, table: str, version: int) -> list[Action]:
    """Actions of one commit file, or ``CorruptLogError`` naming the version and line."""
    out: list[Action] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptLogError(f"Table {table}: commit version {version} is not UTF-8 ({e})") from e
    lines = [ln for ln in text.split("\n") if ln.strip()]
    try:
        # One decoder call for the whole file is much faster than one per line.
        objs = json.loads("[" + ",".join(lines) + "]")
        for obj in objs:
            action = action_from_dict(obj)
            if action is not None:
                out.append(action)
        return out
    except (ValueError, TypeError, AttributeError):
        out = []  # find the bad line below, for a precise error
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            action = action_from_dict(obj)
        except (ValueError, TypeError, AttributeError) as e:
            raise CorruptLogError(
                f"Table {table}: commit file for version {version} is corrupt or truncated at line {lineno}: {e}"
            ) from e
        if action is not None:
            out.append(action)
    return out


@dataclass
class TableState:
    """Mutable accumulator used while replaying; frozen into a Snapshot."""

    protocol: Protocol | None = None
    metadata: Metadata | None = None
    files: dict[FileKey, AddFile] = field(default_factory=dict)
    tombstones: dict[FileKey, RemoveFile] = field(default_factory=dict)
    txns: dict[str, SetTransaction] = field(default_factory=dict)
    domains: dict[str, DomainMetadata] = field(default_factory=dict)

    def materialize(self) -> None:
        """Build the ``AddFile`` of every file still held columnar."""
        files = self.files
        for key, value in files.items():
            if type(value) is tuple:
                block, i = value
                files[key] = block.build(i)

    def copy(self) -> TableState:
        return TableState(
            self.protocol,
            self.metadata,
            dict(self.files),
            dict(self.tombstones),
            dict(self.txns),
            dict(self.domains),
        )

    def apply(self, actions: Iterable[Any]) -> None:
        files, tombstones = self.files, self.tombstones
        for a in actions:
            t = type(a)
            if t is LazyAdds:
                # Checkpoint adds stay columnar: the value is (block, row) until materialised.
                for i, key in enumerate(a.keys):
                    files[key] = (a, i)  # type: ignore[assignment]
                    tombstones.pop(key, None)
            elif t is AddFile:
                key = (a.path, a.dv_id)  # type: ignore[attr-defined]
                files[key] = a  # type: ignore[assignment]
                tombstones.pop(key, None)
            elif t is RemoveFile:
                key = (a.path, a.dv_id)  # type: ignore[attr-defined]
                files.pop(key, None)
                tombstones[key] = a  # type: ignore[assignment]
            elif t is Metadata:
                self.metadata = a  # type: ignore[assignment]
            elif t is Protocol:
                self.protocol = a  # type: ignore[assignment]
            elif t is SetTransaction:
                self.txns[a.app_id] = a  # type: ignore[attr-defined]
            elif t is DomainMetadata:
                if a.removed:  # type: ignore[attr-defined]
                    self.domains.pop(a.domain, None)  # type: ignore[attr-defined]
                else:
                    self.domains[a.domain] = a  # type: ignore[attr-defined]


class Snapshot:
    """The table at one version: protocol, metadata, live files, txns and domains."""

    def __init__(
        self,
        table_path: str,
        version: int,
        state: TableState,
        segment: LogSegment | None,
        timestamp: int,
    ) -> None:
        if state.protocol is None:
            raise CorruptLogError(f"Table {table_path} at version {version} has no protocol action")
        if state.metadata is None:
            raise CorruptLogError(f"Table {table_path} at version {version} has no metaData action")
        features.check_readable(state.protocol, table_path)
        self.table_path = table_path
        self.version = version
        self._state = state
        self.segment = segment
        self.timestamp = timestamp
        self._schema: Any = None
        # Lazily materialised file state: (parent snapshot, file actions after it).
        self._files_from: tuple[Snapshot, list[Action]] | None = None

    def _files_state(self, materialize: bool = True) -> TableState:
        """The state with ``files``/``tombstones`` materialised (copying the nearest ancestor's once)."""
        if self._files_from is None:
            if materialize:
                self._state.materialize()
            return self._state
        chain: list[Snapshot] = []
        node: Snapshot | None = self
        while node is not None and node._files_from is not None:
            chain.append(node)
            node = node._files_from[0]
        assert node is not None
        files = dict(node._state.files)
        tombstones = dict(node._state.tombstones)
        acc = TableState(files=files, tombstones=tombstones)
        for snap in reversed(chain):
            acc.apply(snap._files_from[1])  # type: ignore[index]
        self._state.files = acc.files
        self._state.tombstones = acc.tombstones
        self._files_from = None
        if materialize:
            self._state.materialize()
        return self._state

    # -- state -----------------------------------------------------------------
    @property
    def protocol(self) -> Protocol:
        return self._state.protocol  # type: ignore[return-value]

    @property
    def metadata(self) -> Metadata:
        return self._state.metadata  # type: ignore[return-value]

    @property
    def schema(self) -> Any:
        """The table schema as ``serialake.core.schema.StructType``."""
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
        return list(self._files_state().files.values())

    @property
    def num_files(self) -> int:
        return len(self._files_state(materialize=False).files)

    @property
    def tombstones(self) -> list[RemoveFile]:
        return list(self._files_state().tombstones.values())

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
        for (p, _), add in self._files_state().files.items():
            if p == path:
                return add
        return None

    def files_by_path(self) -> dict[str, AddFile]:
        return {add.path: add for add in self._files_state().files.values()}

    def size_in_bytes(self) -> int:
        return sum(a.size or 0 for a in self._files_state().files.values())

    def checkpoint_actions(self, retention_cutoff_ms: int) -> list[Action]:
        """What a checkpoint of this snapshot holds (removes newer than the cutoff, stats dropped)."""
        st = self._files_state()
        out: list[Action] = [self.protocol, self.metadata]
        out.extend(st.txns.values())
        out.extend(st.domains.values())
        out.extend(st.files.values())
        for r in st.tombstones.values():
            if (r.deletion_timestamp or 0) > retention_cutoff_ms:
                out.append(RemoveFile(**{**r.__dict__, "stats": None}))
        return out

    def with_commits(self, commits: list[tuple[int, list[Action], int]]) -> Snapshot:
        """A new snapshot with commits ``(version, actions, timestamp)`` applied in order."""
        st = self._state
        state = TableState(st.protocol, st.metadata, {}, {}, st.txns, st.domains)
        copied_small = False
        file_actions: list[Action] = []
        version, ts = self.version, self.timestamp
        for v, actions, t in commits:
            if v != version + 1:
                raise CorruptLogError(f"Table {self.table_path}: expected version {version + 1}, found {v}")
            for a in actions:
                if isinstance(a, (AddFile, RemoveFile)):
                    file_actions.append(a)
                elif isinstance(a, (SetTransaction, DomainMetadata)) and not copied_small:
                    state.txns, state.domains = dict(st.txns), dict(st.domains)
                    copied_small = True
            state.apply([a for a in actions if not isinstance(a, (AddFile, RemoveFile))])
            version, ts = v, t
        snap = Snapshot(self.table_path, version, state, None, ts)
        snap._files_from = (self, file_actions)
        return snap

    def __repr__(self) -> str:
        return f"Snapshot({self.table_path!r}, version={self.version}, files={self.num_files})"


def commit_timestamp(actions: list[Action], file_mtime: int) -> int:
    """In-commit timestamp if the commit has one, else the commit file's modification time."""
    for a in actions:
        if isinstance(a, CommitInfo):
            ict = a.values.get("inCommitTimestamp")
            if ict is not None:
                return int(ict)
    return file_mtime
