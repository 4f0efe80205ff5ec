"""Names of the files in ``_delta_log`` and how to find a consistent log segment.

A log segment is what a snapshot at one version is built from: at most one complete
checkpoint (classic, multi-part or v2) and the contiguous commits after it.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field

from serialake.exceptions import CorruptLogError, DeltaIllegalArgumentException, DeltaTableNotFoundError
from serialake.storage.base import FileStatus, LogStore

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC_CP = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTI_CP = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2_CP = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


def checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def version_of(name: str) -> int | None:
    """The commit version a commit file name encodes, else None."""
    m = _COMMIT.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class CheckpointRef:
    """One complete checkpoint: its version and the file names making it up."""

    version: int
    kind: str  # "classic" | "multi" | "v2"
    files: tuple[FileStatus, ...]


@dataclass(frozen=True)
class LogSegment:
    """A checkpoint (optional) plus the commits after it, up to ``version``."""

    log_path: str
    version: int
    checkpoint: CheckpointRef | None
    commits: tuple[tuple[int, FileStatus], ...] = field(default=())

    @property
    def last_commit_time(self) -> int:
        if self.commits:
            return self.commits[-1][1].modification_time
        return self.checkpoint.files[0].modification_time if self.checkpoint else 0


def read_last_checkpoint(store: LogStore, log_path: str) -> dict | None:
    """``_last_checkpoint`` as a dict, or None when absent or unreadable (then we list)."""
    try:
        data = store.read(os.path.join(log_path, LAST_CHECKPOINT))
        obj = json.loads(data)
        if isinstance(obj, dict) and isinstance(obj.get("version"), int):
            return obj
    except (FileNotFoundError, NotADirectoryError, ValueError, UnicodeDecodeError):
        pass
    return None


def _checkpoints(listing: list[FileStatus]) -> dict[int, CheckpointRef]:
    """Every complete checkpoint in a listing, by version (v2 preferred over classic over multi)."""
    classic: dict[int, FileStatus] = {}
    multi: dict[tuple[int, int], dict[int, FileStatus]] = {}
    v2: dict[int, FileStatus] = {}
    for st in listing:
        name = st.name
        if ".checkpoint." not in name:
            continue
        if m := _CLASSIC_CP.match(name):
            classic[int(m.group(1))] = st
        elif m := _MULTI_CP.match(name):
            multi.setdefault((int(m.group(1)), int(m.group(3))), {})[int(m.group(2))] = st
        elif m := _V2_CP.match(name):
            v2[int(m.group(1))] = st
    out: dict[int, CheckpointRef] = {}
    for (v, parts), found in multi.items():
        if len(found) == parts and set(found) == set(range(1, parts + 1)):
            out[v] = CheckpointRef(v, "multi", tuple(found[i] for i in range(1, parts + 1)))
    for v, st in classic.items():
        out[v] = CheckpointRef(v, "classic", (st,))
    for v, st in v2.items():
        out[v] = CheckpointRef(v, "v2", (st,))
    return out


def list_log(store: LogStore, log_path: str, start_version: int = 0) -> list[FileStatus]:
    """The log's files from ``start_version`` on (none when the table path is not a directory)."""
    try:
        return store.list_from(log_path, f"{start_version:020d}" if start_version > 0 else "")
    except NotADirectoryError:
        return []


def build_segment(
    store: LogStore,
    table_path: str,
    log_path: str,
    version: int | None = None,
    listing: list[FileStatus] | None = None,
) -> LogSegment:
    """The log segment for ``version`` (latest when None).

    Uses the newest complete checkpoint at or before the version (``_last_checkpoint``
    is only a hint: listing decides), then requires contiguous commits after it.

    A directory listing is not a snapshot of the directory: one that overlaps concurrent
    commits can miss version N while showing N+1 (measured here on ext4: most listings
    during a burst of commits miss one). Since N+1 is only ever written after N, versions
    a listing left out are probed by name and taken from there; relisting would race the
    next commits the same way. Only a version absent by name is a gap, and it is confirmed
    by one more listing (older commits may have been cleaned up after a checkpoint the
    first listing missed) before it is reported.
    """
    start = 0
    if listing is None:
        start, listing = _initial_listing(store, log_path, version)
    relisted = tail_probed = False
    while True:
        try:
            gap = _find_segment(table_path, log_path, version, listing)
        except DeltaIllegalArgumentException:
            # A version asked for beyond the listing's newest: the listing may have missed it too.
            assert version is not None
            newest = max((v for st in listing if (v := version_of(st.name)) is not None), default=-1)
            found = [] if tail_probed else _probe(store, log_path, list(range(newest + 1, version + 1)))
            if not found:
                raise
            listing, tail_probed = sorted(listing + found), True  # then the error, if any, names the newest
            continue
        if isinstance(gap, LogSegment):
            return gap
        missing, message = gap
        found = _probe(store, log_path, missing)
        if found:
            listing = sorted(listing + found)
            continue
        if relisted:
            raise CorruptLogError(message)
        relisted = True
        time.sleep(0.002)
        listing = list_log(store, log_path, start if missing[0] >= start else 0)


def _probe(store: LogStore, log_path: str, versions: list[int]) -> list[FileStatus]:
    """The commits of ``versions`` (ascending) found by name, up to the first absent one."""
    found = []
    for v in versions:
        st = store.status(os.path.join(log_path, commit_name(v)))
        if st is None:
            break
        found.append(st)
    return found


def _initial_listing(store: LogStore, log_path: str, version: int | None) -> tuple[int, list[FileStatus]]:
    """Where listing starts (the ``_last_checkpoint`` hint when usable) and the listing."""
    hint = read_last_checkpoint(store, log_path)
    start = hint["version"] if hint and (version is None or hint["version"] <= version) else 0
    listing = list_log(store, log_path, start)
    if start and not any(_COMMIT.match(s.name) or ".checkpoint." in s.name for s in listing):
        return 0, list_log(store, log_path, 0)
    if start and start not in _checkpoints(listing):
        # The hint points at a missing or partial checkpoint: list everything.
        return 0, list_log(store, log_path, 0)
    return start, listing


def _find_segment(
    table_path: str, log_path: str, version: int | None, listing: list[FileStatus]
) -> LogSegment | tuple[list[int], str]:
    """The segment the listing gives, or ``(missing versions, error message about the first)``."""
    commits: dict[int, FileStatus] = {}
    for st in listing:
        m = _COMMIT.match(st.name)
        if m:
            commits[int(m.group(1))] = st
    cps = _checkpoints(listing)
    if not commits and not cps:
        if not os.path.isdir(log_path):
            raise DeltaTableNotFoundError(f"{table_path} is not a Delta table: no {LOG_DIR} directory")
        raise DeltaTableNotFoundError(f"{table_path} is not a Delta table: {LOG_DIR} holds no commit")
    latest = max(list(commits) + list(cps))
    if version is None:
        version = latest
    elif version > latest:
        raise DeltaIllegalArgumentException(
            f"Table {table_path} has no version {version}; the latest version is {latest}"
        )
    usable = [v for v in cps if v <= version]
    checkpoint = cps[max(usable)] if usable else None
    first = checkpoint.version + 1 if checkpoint else 0
    wanted = range(first, version + 1)
    missing = [v for v in wanted if v not in commits]
    if missing:
        if checkpoint is None and commits and min(commits) > 0 and missing[0] == 0:
            return missing, (
                f"Cannot reconstruct table {table_path} at version {version}: commits before "
                f"version {min(commits)} are gone and no checkpoint covers them"
            )
        return missing, (
            f"Table {table_path}: the log has a gap, version {missing[0]} is missing "
            f"(versions {first}..{version} are needed; "
            f"{commit_name(missing[0])} is absent from {log_path} after re-checking)"
        )
    return LogSegment(
        log_path=log_path,
        version=version,
        checkpoint=checkpoint,
        commits=tuple((v, commits[v]) for v in wanted),
    )
