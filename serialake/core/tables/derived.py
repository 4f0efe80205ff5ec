"""Derived tables: tables kept up to date from other tables, and reads that agree with them.

A write computed from other tables records which of their versions it read
(``commitInfo["serialake.readTables"]``, see ``transaction``), so every commit of a
derived table says what it *reflects*. A table whose property ``serialake.maintainedFrom``
names its sources (comma-separated names or paths) is declared continuously maintained,
like a materialized view; derived tables may themselves be sources of others.

``read_cut`` reads several tables at one consistent cut (``cut.consistent_cut``), then:

- ``strict`` (STRICT SERIALIZABLE): the declared sources of every derived table read,
  transitively, join the cut, and each derived table must reflect every source version
  in it (each was committed before the read started). A derived table that has not caught
  up is polled until it has, at most ``wait_s`` (then ``DerivedTableLagError``, naming the
  table, the source, the version needed and the version reflected); a table derived from a
  derived table waits for the version of it that has caught up. After a wait, a new cut
  is taken: the result is always the state of every table at one real instant after the
  read started (so real-time order holds across all tables, derived or not). A read that
  holds a derived table and one of its sources needs an instant at which the derived
  table reflects exactly the source's version (see ``_strict``); cuts are retried until
  one is found, within ``wait_s``.
- not ``strict`` (SERIALIZABLE): nothing waits. A table read together with a table derived
  from it is read at the version the derived table reflects (declared sources; also
  undeclared ones when the derived table's latest commit read them), most derived first,
  and a table computed from a newer version of a source than the one read is moved back
  too, so the result is one consistent, possibly older, state.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

from serialake.core.log.deltalog import DeltaLog
from serialake.core.log.snapshot import Snapshot
from serialake.core.tables import catalog, cut
from serialake.core.txn.transaction import READ_TABLES_KEY
from serialake.exceptions import ConsistentReadError, DerivedTableLagError

__all__ = ["MAINTAINED_FROM", "declared_sources", "read_cut", "reflected_version"]

MAINTAINED_FROM = "serialake.maintainedFrom"  # table property: the sources a derived table is kept from
_REFLECTED_SCAN_COMMITS = 10_000  # how far back a derived table's commits are searched for a source
_MAX_DEPTH = 16  # derived tables of derived tables, at most this deep

# (derived table, version, source) -> the source version reflected; history never changes.
_reflected: OrderedDict[tuple[str, int, str], int] = OrderedDict()
_reflected_lock = threading.Lock()
_REFLECTED_MEMO = 8192


def declared_sources(snap: Snapshot) -> list[str]:
    """The normalized paths a derived table declares in ``serialake.maintainedFrom`` (names or paths)."""
    raw = next((v for k, v in snap.configuration.items() if k.lower() == MAINTAINED_FROM.lower()), None)
    if not raw:
        return []
    out = []
    for item in (i.strip() for i in raw.split(",")):
        if item:
            located = catalog.lookup(item)
            out.append(DeltaLog.for_table(located if located is not None else item).table_path)
    return out


def reflected_version(snap: Snapshot, source: str, *, back: int = _REFLECTED_SCAN_COMMITS) -> int:
    """The newest version of ``source`` that ``snap`` was computed from (its commits' ``readTables``).

    Searches ``snap``'s last ``back`` commits, newest first, and stops at a commit whose
    answer is remembered (the answer for a version never changes); -1 if none read ``source``.
    """
    return reflected_at(snap.table_path, snap.version, source, back=back)


def reflected_at(table: str, version: int, source: str, *, back: int = _REFLECTED_SCAN_COMMITS) -> int:
    """``reflected_version`` of ``table`` (a normalized path) at ``version``."""
    log = DeltaLog.for_table(table)
    found = -1
    scanned: list[int] = []
    for v in range(version, max(-1, version - back), -1):
        with _reflected_lock:
            known = _reflected.get((table, v, source))
        if known is not None and back == _REFLECTED_SCAN_COMMITS:
            found = known
            break
        try:
            info = log.read_commit(v).commit_info
        except FileNotFoundError:
            break
        scanned.append(v)
        reads = info.values.get(READ_TABLES_KEY) if info is not None else None
        versions = [int(r["version"]) for r in reads or () if isinstance(r, dict) and r.get("table") == source]
        if versions:
            found = max(versions)
            break
    if back == _REFLECTED_SCAN_COMMITS:  # a full answer: remember it for every version scanned
        with _reflected_lock:
            for v in scanned:
                _reflected[(table, v, source)] = found
            while len(_reflected) > _REFLECTED_MEMO:
                _reflected.popitem(last=False)
    return found


def read_cut(
    tables: Mapping[str, str | None],
    *,
    strict: bool,
    timeout_s: float,
    wait_s: float,
    cut_advice: str = "",
    wait_advice: str = "",
) -> dict[str, Snapshot]:
    """``tables`` (path -> name or None) at one consistent cut, agreeing with derived tables (see above).

    Keys are the normalized paths of ``tables``.
    """
    names: dict[str, str | None] = {}
    for path, name in tables.items():
        names.setdefault(DeltaLog.for_table(path).table_path, name)
    snaps = cut.consistent_cut(names, timeout_s, advice=cut_advice)
    if strict:
        return _strict(names, snaps, timeout_s, wait_s, cut_advice, wait_advice)
    return _agreeing(names, snaps)


def _strict(
    names: dict[str, str | None],
    snaps: dict[str, Snapshot],
    timeout_s: float,
    wait_s: float,
    cut_advice: str,
    wait_advice: str,
) -> dict[str, Snapshot]:
    """A cut at a real instant, after every derived table caught up with the sources of the first cut.

    The first cut fixes what must be reflected: every source commit acknowledged before the
    read started is in it. Derived tables that lag are waited for, sources first. The
    result is a cut taken after that (reflected versions only grow), so it is the state of
    every table at one real instant. When the read also holds a source of a derived table,
    that instant must be one at which the derived table reflects exactly the source's
    version in it: its maintaining transaction read the source before committing, so a
    read that saw newer source commits but not that transaction would order it both before
    and after them. Cuts are taken until one qualifies, within ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    everything = dict(names)
    declared = {p: declared_sources(s) for p, s in snaps.items()}
    for _ in range(_MAX_DEPTH):
        missing = {s for srcs in declared.values() for s in srcs if s not in everything}
        if not missing:
            break
        everything.update(dict.fromkeys(missing))
        snaps = cut.consistent_cut(everything, timeout_s, advice=cut_advice)
        declared = {p: declared.get(p) or declared_sources(s) for p, s in snaps.items()}
    caught_up = dict(snaps)
    for path in _sources_first(declared):
        needed = {s: caught_up[s].version for s in declared[path] if s in caught_up}
        if needed:
            name = everything.get(path)
            caught_up[path] = _wait_until_reflected(path, name, snaps[path], needed, deadline, wait_s, wait_advice)
    pairs = [(p, s) for p in names for s in names if s != p and _derives(declared, p, s)]
    current = snaps if all(caught_up[p].version == snaps[p].version for p in snaps) else None
    pause = 0.002
    while True:
        if current is None:
            current = cut.consistent_cut(everything, timeout_s, advice=cut_advice)
        off = [(p, s, r) for p, s in pairs if (r := _transitive(declared, current, p, s)) != current[s].version]
        if not off:
            return {p: current[p] for p in names}
        if time.monotonic() >= deadline:
            path, source, r = off[0]
            raise DerivedTableLagError(
                f"{cut.label(path, everything.get(path))} is maintained from {source} ({MAINTAINED_FROM}); "
                f"this read holds both, so it needs an instant at which the derived table reflects exactly the "
                f"source's version, but in {wait_s:g} s it never did (it reflects version {r}, the source is at "
                f"{current[source].version}): the source kept committing faster than it is maintained. Read the "
                f"derived table alone, or without its source." + (f" {wait_advice}" if wait_advice else "")
            )
        time.sleep(pause)
        pause = min(0.05, pause * 1.5)
        current = None


def _derives(declared: Mapping[str, list[str]], path: str, source: str, depth: int = 0) -> bool:
    """Whether ``path`` is maintained, directly or through other derived tables, from ``source``."""
    if depth > _MAX_DEPTH:
        return False
    return any(s == source or _derives(declared, s, source, depth + 1) for s in declared.get(path, ()))


def _transitive(declared: Mapping[str, list[str]], snaps: Mapping[str, Snapshot], path: str, source: str) -> int:
    """The version of ``source`` that ``path`` (at its version in ``snaps``) reflects, through derived tables."""
    table, version = path, snaps[path].version
    for _ in range(_MAX_DEPTH):
        if source in declared.get(table, ()):
            return reflected_at(table, version, source)
        via = next((s for s in declared.get(table, ()) if _derives(declared, s, source)), None)
        if via is None:
            return -1
        version = reflected_at(table, version, via)
        if version < 0:
            return -1
        table = via
    return -1


def _agreeing(names: dict[str, str | None], snaps: dict[str, Snapshot]) -> dict[str, Snapshot]:
    """SERIALIZABLE: sources moved back to the versions derived tables read, and derived tables
    moved back until none reflects a newer version of a source than the one read (no wait).
    """
    declared = {p: declared_sources(s) for p, s in snaps.items()}

    def sources(path: str) -> list[tuple[str, int]]:
        """(source, version reflected) for each other table of the read that ``path`` was computed from."""
        out = []
        for source in names:
            if source == path:
                continue
            if source in declared[path]:
                r = reflected_at(path, versions[path], source)
            else:  # undeclared: derived when its latest commit read the source
                r = reflected_at(path, versions[path], source, back=1)
            if r >= 0:
                out.append((source, r))
        return out

    versions = {p: s.version for p, s in snaps.items()}
    for path in reversed(_sources_first(declared)):  # most derived first
        for source, r in sources(path):
            versions[source] = min(versions[source], r)
    for _ in range(_MAX_DEPTH):  # a table ahead of a source moved back: move it back too
        ahead = [(p, s, r) for p in names for s, r in sources(p) if r > versions[s]]
        if not ahead:
            break
        for path, source, _r in ahead:
            versions[path] = _newest_reflecting_at_most(path, versions[path], source, versions[source], declared)
    return {
        p: snaps[p] if versions[p] == snaps[p].version else DeltaLog.for_table(p).snapshot(version=versions[p])
        for p in names
    }


def _newest_reflecting_at_most(
    path: str, version: int, source: str, limit: int, declared: Mapping[str, list[str]]
) -> int:
    """The newest version of ``path`` before ``version`` computed from ``source`` at ``limit`` or older."""
    back = _REFLECTED_SCAN_COMMITS if source in declared[path] else 1
    for v in range(version - 1, max(-1, version - 1 - _REFLECTED_SCAN_COMMITS), -1):
        if reflected_at(path, v, source, back=back) <= limit:
            return v
    raise ConsistentReadError(
        f"Table {path} reads {source} at versions newer than {limit} in each of its last "
        f"{_REFLECTED_SCAN_COMMITS} commits: no version of it agrees with the rest of this read."
    )


def _sources_first(declared: Mapping[str, list[str]]) -> list[str]:
    """The tables in an order where each comes after the sources it declares (cycles broken)."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(p: str) -> None:
        if state.get(p):
            return  # done, or on the stack (a declared cycle: nothing sensible to wait for)
        state[p] = 1
        for s in declared.get(p, ()):
            if s in declared:
                visit(s)
        state[p] = 2
        order.append(p)

    for p in declared:
        visit(p)
    return order


def _wait_until_reflected(
    path: str, name: str | None, snap: Snapshot, needed: dict[str, int], deadline: float, wait_s: float, advice: str
) -> Snapshot:
    """``snap``, or a newer snapshot of the derived table, that reflects each source at ``needed``."""
    log = DeltaLog.for_table(path)
    pause = 0.01
    while True:
        behind = {s: (v, reflected_version(snap, s)) for s, v in needed.items()}
        behind = {s: vr for s, vr in behind.items() if vr[1] < vr[0]}
        if not behind:
            return snap
        if time.monotonic() >= deadline:
            source, (want, have) = next(iter(behind.items()))
            raise DerivedTableLagError(
                f"{cut.label(path, name)} is maintained from {source} ({MAINTAINED_FROM}) and reflects "
                f"its version {have} (as of its own version {snap.version}), but this read must see version "
                f"{want}, committed before it started; waited {wait_s:g} s. Is its maintaining job running?"
                + (f" {advice}" if advice else "")
            )
        time.sleep(pause)
        pause = min(0.2, pause * 1.5)
        snap = log.update()
