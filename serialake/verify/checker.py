"""Elle-style anomaly checker for list-append histories (after Kingsbury & Alvaro, VLDB 2020).

Inference rules, in the order :func:`check` applies them:

* Committed txns are the ``ok`` ones plus every ``info`` txn one of whose appends a
  committed txn read (to a fixpoint).  ``fail`` txns never committed; their values in
  a read are G1a.  Reads of ``fail`` and of unobserved ``info`` txns are ignored.
* A key's version order is its longest read by a committed txn; every other read must
  be a prefix of it (else ``incompatible-order``).  Because every read is a prefix of
  the final list, a committed append that no read contains comes after the whole
  observed order (in unknown order among such appends); that is how a stale read of
  ``[]`` after a completed append is caught.
* Versions are per writer (Adya): consecutive elements by one txn form one version.
  ``ww``: T1's elements precede T2's.  ``wr``: T2's external read ends in an element
  T1 appended.  ``rw``: T1's external read is followed in the order by T2's elements.
  A read made after the txn's own appends to the key must end with them (else
  ``internal``); the part before them is what the txn saw of the outside, and is what
  the inference uses.  The external read of a key is the first such observation.
* ``rt``: an ok txn completed before another committed txn was invoked (transitively
  reduced; info txns get no outgoing rt edges, their commit time being unknown).
  ``process``: the next committed txn of the same process after an ok one.
* Cycles are searched only inside strongly connected components, per class, in a
  product graph of (txn, which required edge kinds seen so far), so a reported cycle is
  guaranteed to have the class's shape (e.g. exactly one rw edge for G-single).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from serialake.extras import require
from serialake.verify.history import History, Txn, format_mop

__all__ = [
    "Anomaly",
    "Edge",
    "INTEGRITY_ANOMALIES",
    "PROCESS_ANOMALIES",
    "REALTIME_ANOMALIES",
    "Report",
    "SERIALIZABLE_FORBIDDEN",
    "STRICT_SERIALIZABLE_FORBIDDEN",
    "WRITE_SERIALIZABLE_FORBIDDEN",
    "check",
]

_CYCLE_CLASSES = ("G0", "G1c", "G-single", "G2-item")
REALTIME_ANOMALIES: frozenset[str] = frozenset(f"{c}-realtime" for c in _CYCLE_CLASSES)
PROCESS_ANOMALIES: frozenset[str] = frozenset(f"{c}-process" for c in _CYCLE_CLASSES)
INTEGRITY_ANOMALIES: frozenset[str] = frozenset(
    {"duplicate-elements", "garbage-read", "incompatible-order", "internal", "duplicate-commit-version"}
)
SERIALIZABLE_FORBIDDEN: frozenset[str] = (
    frozenset({"G0", "G1a", "G1b", "G1c", "G-single", "G2-item", "lost-update"}) | INTEGRITY_ANOMALIES
)
STRICT_SERIALIZABLE_FORBIDDEN: frozenset[str] = (
    SERIALIZABLE_FORBIDDEN | REALTIME_ANOMALIES | PROCESS_ANOMALIES
)
# Delta's WriteSerializable allows write skew and read skew (G-single / G2-item) but
# not dirty writes/reads, cyclic information flow or lost updates.
WRITE_SERIALIZABLE_FORBIDDEN: frozenset[str] = (
    frozenset({"G0", "G1a", "G1b", "G1c", "lost-update"}) | INTEGRITY_ANOMALIES
)

_DESCRIPTIONS = {
    "G0": "write cycle (ww edges only)",
    "G1a": "aborted read: a committed txn read a value appended only by a failed txn",
    "G1b": "intermediate read: a read ends inside another txn's run of appends",
    "G1c": "cyclic information flow (ww/wr edges, at least one wr)",
    "G-single": "cycle with exactly one rw anti-dependency (read skew)",
    "G2-item": "cycle with two or more rw anti-dependencies (write skew)",
    "lost-update": "committed txns read the same version of a key and all appended to it",
    "duplicate-elements": "a read returned a list with a repeated element",
    "garbage-read": "a read returned a value no txn ever appended",
    "incompatible-order": "two reads of a key are not prefixes of one another",
    "internal": "a read disagrees with the txn's own earlier reads and appends",
    "duplicate-commit-version": "two committed txns report the same commit version",
}
_KIND_ORDER = ("ww", "wr", "rw", "rt", "process")
_RT_KINDS = frozenset({"rt", "process"})
_PATH_BUDGET = 200_000  # expansions per (class, SCC) spent looking for simple cycles


def _describe_type(name: str) -> str:
    for suffix, extra in (("-realtime", " + real-time order"), ("-process", " + process order")):
        if name.endswith(suffix):
            return _DESCRIPTIONS[name[: -len(suffix)]] + extra
    return _DESCRIPTIONS.get(name, name)


def _fmt_list(values: Sequence[int]) -> str:
    return format_mop(("r", "", tuple(values)))[3:]


@dataclass(frozen=True)
class Edge:
    """A dependency ``src -> dst`` (txn ids) of kind ww/wr/rw/rt/process, with its reason."""

    src: int
    dst: int
    kind: str
    key: str | None
    why: str

    def label(self) -> str:
        """``-ww[x]->`` or ``-rt->``."""
        return f"-{self.kind}[{self.key}]->" if self.key is not None else f"-{self.kind}->"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"src": self.src, "dst": self.dst, "kind": self.kind, "key": self.key, "why": self.why}


@dataclass(frozen=True)
class Anomaly:
    """One anomaly; ``txns`` are history positions, ``edges`` form the cycle for cycle classes."""

    type: str
    txns: tuple[int, ...]
    message: str
    edges: tuple[Edge, ...] = ()
    cycle: str = ""
    key: str | None = None

    def explain(self) -> str:
        """Multi-line text: the message, the cycle (``T1 (p0: ...) -ww[x]-> T2 (...) -> T1``), each step's reason."""
        lines = [f"{self.type}: {self.message}"]
        if self.cycle:
            lines.append(f"  {self.cycle}")
            lines += [f"    T{e.src} {e.label()} T{e.dst}: {e.why}" for e in self.edges]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "type": self.type,
            "txns": list(self.txns),
            "key": self.key,
            "message": self.message,
            "cycle": self.cycle,
            "edges": [e.to_dict() for e in self.edges],
        }


@dataclass(frozen=True)
class Report:
    """Result of :func:`check`; ``valid`` means no anomaly class in ``forbidden`` was found."""

    valid: bool
    anomalies: dict[str, list[Anomaly]]
    counts: dict[str, int]
    forbidden: frozenset[str]
    realtime: bool
    process: bool
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def anomaly_types(self) -> set[str]:
        """Classes found (forbidden or not)."""
        return set(self.anomalies)

    @property
    def violations(self) -> list[str]:
        """Found classes that are forbidden, sorted."""
        return sorted(self.anomaly_types & self.forbidden)

    def summary(self, limit: int = 3) -> str:
        """Human-readable text; shows at most ``limit`` anomalies per class."""
        status = "VALID" if self.valid else "INVALID (" + ", ".join(self.violations) + ")"
        c = self.counts
        total = c.get("ok", 0) + c.get("fail", 0) + c.get("info", 0)
        s = self.stats
        lines = [
            f"history check: {status}",
            f"txns: {total} (ok {c.get('ok', 0)}, fail {c.get('fail', 0)}, info {c.get('info', 0)};"
            f" {s.get('info_committed', 0)} info txns counted as committed)",
            f"graph: {s.get('nodes', 0)} committed txns; edges "
            + ", ".join(f"{k} {s.get('edges_' + k, 0)}" for k in _KIND_ORDER)
            + f"; realtime {'on' if self.realtime else 'off'}, process {'on' if self.process else 'off'}",
        ]
        if not self.anomalies:
            lines.append("anomalies: none")
        else:
            lines.append("anomalies:")
        for name in sorted(self.anomalies):
            found = self.anomalies[name]
            tag = "forbidden" if name in self.forbidden else "allowed"
            lines.append(f"  {name}: {len(found)} [{tag}] - {_describe_type(name)}")
            for a in found[:limit]:
                lines += ["    " + line for line in a.explain().splitlines()]
            if len(found) > limit:
                lines.append(f"    ... and {len(found) - limit} more")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "valid": self.valid,
            "violations": self.violations,
            "counts": dict(self.counts),
            "stats": dict(self.stats),
            "forbidden": sorted(self.forbidden),
            "realtime": self.realtime,
            "process": self.process,
            "anomalies": {k: [a.to_dict() for a in v] for k, v in sorted(self.anomalies.items())},
        }


@dataclass(frozen=True)
class _Spec:
    """A cycle class: allowed edge kinds, kinds a cycle may be rotated to start with, constraints."""

    name: str
    allowed: frozenset[str]
    start: frozenset[str]
    rw: int  # 0: no rw edge, 1: exactly one, 2: two or more
    need_wr: bool = False
    need_rt: bool = False

    @property
    def accept(self) -> int:
        return self.rw + 3 * self.need_wr + 6 * self.need_rt

    def step(self, mask: int, kind: str) -> int | None:
        """Mask after taking an edge of ``kind``; mask = rw count (0..2) + 3*wr seen + 6*rt seen."""
        if kind not in self.allowed:
            return None
        rwc, rest = mask % 3, mask - mask % 3
        if kind == "rw":
            if self.rw == 0 or (self.rw == 1 and rwc >= 1):
                return None
            return rest + min(rwc + 1, 2)
        if kind == "wr" and self.need_wr:
            return mask + 3 if (mask // 3) % 2 == 0 else mask
        if kind in _RT_KINDS and self.need_rt:
            return mask + 6 if mask < 6 else mask
        return mask


def _specs(rt_kinds: frozenset[str]) -> list[_Spec]:
    data = [
        _Spec("G0", frozenset({"ww"}), frozenset({"ww"}), 0),
        _Spec("G1c", frozenset({"ww", "wr"}), frozenset({"wr"}), 0, need_wr=True),
        _Spec("G-single", frozenset({"ww", "wr", "rw"}), frozenset({"rw"}), 1),
        _Spec("G2-item", frozenset({"ww", "wr", "rw"}), frozenset({"rw"}), 2),
    ]
    if not rt_kinds:
        return data
    timed = [
        _Spec("G0", frozenset({"ww"}) | rt_kinds, rt_kinds, 0, need_rt=True),
        _Spec("G1c", frozenset({"ww", "wr"}) | rt_kinds, frozenset({"wr"}), 0, need_wr=True, need_rt=True),
        _Spec("G-single", frozenset({"ww", "wr", "rw"}) | rt_kinds, frozenset({"rw"}), 1, need_rt=True),
        _Spec("G2-item", frozenset({"ww", "wr", "rw"}) | rt_kinds, frozenset({"rw"}), 2, need_rt=True),
    ]
    return data + timed


_Adj = dict[int, list[tuple[int, tuple[str, ...]]]]
_Step = tuple[int, int, str]  # (src, dst, kind)


class _Checker:
    """One run of the inference; see the module docstring."""

    def __init__(self, txns: list[Txn], realtime: bool, process: bool) -> None:
        self.txns = txns
        self.realtime = realtime
        self.process = process
        self.anoms: dict[str, list[Anomaly]] = defaultdict(list)
        # (src, dst) -> kind -> (key, detail); the first reason per kind is kept
        self.edges: dict[tuple[int, int], dict[str, tuple[str | None, Any]]] = {}

    # -- helpers -----------------------------------------------------------------
    def label(self, i: int) -> str:
        return f"T{i} ({self.txns[i].describe()})"

    def add_edge(self, u: int, v: int, kind: str, key: str | None, detail: Any = None) -> None:
        if u == v:
            return
        kinds = self.edges.get((u, v))
        if kinds is None:
            self.edges[(u, v)] = {kind: (key, detail)}
        elif kind not in kinds:
            kinds[kind] = (key, detail)

    def report(self, type_: str, txns: Iterable[int], message: str, key: str | None = None) -> None:
        self.anoms[type_].append(Anomaly(type_, tuple(txns), message, key=key))

    # -- main --------------------------------------------------------------------
    def run(self) -> dict[str, int]:
        txns = self.txns
        writer: dict[tuple[str, int], int] = {}
        appends: list[dict[str, list[int]]] = [{} for _ in txns]
        appenders: dict[str, list[int]] = defaultdict(list)
        for i, t in enumerate(txns):
            for f, k, v in t.mops:
                if f != "append":
                    continue
                if (k, v) in writer:
                    raise ValueError(
                        f"value {v} appended to {k!r} twice (T{writer[(k, v)]} and T{i});"
                        " appended values must be unique per key"
                    )
                writer[(k, v)] = i
                mine = appends[i].setdefault(k, [])
                if not mine:
                    appenders[k].append(i)
                mine.append(v)
        self.writer, self.appends = writer, appends

        self._analyze_reads()
        committed, observed = self._committed()
        nodes = sorted(committed)
        ext_by_key: dict[str, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
        reads_by_key: dict[str, dict[tuple[int, ...], list[int]]] = defaultdict(dict)
        for i in nodes:
            for k, msg in self.internal[i]:
                self.report("internal", [i], msg, key=k)
            for k, v in self.obs_reads[i]:
                readers = reads_by_key[k].setdefault(v, [])
                if not readers or readers[-1] != i:
                    readers.append(i)
            for k, v in self.ext_reads[i]:
                ext_by_key[k].append((i, v))
        for key, reads in reads_by_key.items():
            self._key(key, reads, ext_by_key.get(key, []), committed, observed[key], appenders[key])
        self._commit_versions(nodes)
        if self.realtime:
            self._realtime_edges(nodes)
        if self.process:
            self._process_edges(nodes)
        self._cycles(nodes)

        stats = {"nodes": len(nodes), "info_committed": sum(txns[i].outcome == "info" for i in nodes)}
        for k in _KIND_ORDER:
            stats["edges_" + k] = 0
        for kinds in self.edges.values():
            for k in kinds:
                stats["edges_" + k] += 1
        return stats

    def _analyze_reads(self) -> None:
        """Per txn: observations (reads minus the txn's own trailing appends), external reads, internal errors.

        A consistent read made after the txn's own appends to that key ends with them;
        what precedes them is the external state it saw, and counts as an observation.
        """
        n = len(self.txns)
        self.obs_reads: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in range(n)]
        self.ext_reads: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in range(n)]
        self.internal: list[list[tuple[str, str]]] = [[] for _ in range(n)]
        for i, t in enumerate(self.txns):
            if t.outcome == "fail":
                continue
            written: dict[str, list[int]] = {}
            state: dict[str, list[int]] = {}
            ext_done: set[str] = set()
            for f, k, v in t.mops:
                if f == "append":
                    written.setdefault(k, []).append(v)
                    if k in state:
                        state[k].append(v)
                    continue
                if v is None:
                    state.pop(k, None)
                    continue
                own = written.get(k, [])
                ok = True
                if k in state and tuple(state[k]) != v:
                    ok = False
                    msg = f"T{i} read {k} = {_fmt_list(v)} but its earlier ops imply {_fmt_list(state[k])}"
                    self.internal[i].append((k, msg))
                elif own and v[-len(own) :] != tuple(own):
                    ok = False
                    msg = f"T{i} read {k} = {_fmt_list(v)}, which does not end with its own appends {own}"
                    self.internal[i].append((k, msg))
                state[k] = list(v)
                if not ok:
                    continue
                base = v[: len(v) - len(own)]
                self.obs_reads[i].append((k, base))
                if k not in ext_done:
                    self.ext_reads[i].append((k, base))
                    ext_done.add(k)

    def _committed(self) -> tuple[set[int], dict[str, set[int]]]:
        """ok txns plus info txns whose appends a committed txn observed (fixpoint); observed values per key."""
        txns = self.txns
        committed = {i for i, t in enumerate(txns) if t.outcome == "ok"}
        observed: dict[str, set[int]] = defaultdict(set)

        def observe(i: int) -> None:
            for k, v in self.obs_reads[i]:
                observed[k].update(v)

        for i in committed:
            observe(i)
        pending = [i for i, t in enumerate(txns) if t.outcome == "info" and self.appends[i]]
        changed = True
        while changed:
            changed = False
            rest = []
            for i in pending:
                if any(v in observed[k] for k, vs in self.appends[i].items() for v in vs):
                    committed.add(i)
                    observe(i)
                    changed = True
                else:
                    rest.append(i)
            pending = rest
        return committed, observed

    def _key(
        self,
        key: str,
        reads: dict[tuple[int, ...], list[int]],
        ext: list[tuple[int, tuple[int, ...]]],
        committed: set[int],
        obs: set[int],
        key_appenders: list[int],
    ) -> None:
        txns, writer, appends = self.txns, self.writer, self.appends
        order = max(reads, key=len)
        n = len(order)
        first_pos: dict[int, int] = {}
        for j, v in enumerate(order):
            first_pos.setdefault(v, j)
        # writer of each element if it is a committed txn, else None (garbage / aborted)
        node_w: list[int | None] = []
        for v in order:
            w = writer.get((key, v))
            node_w.append(w if w is not None and w in committed else None)

        garbage = {v for v in obs if (key, v) not in writer}
        aborted = {v for v in obs if (key, v) in writer and txns[writer[(key, v)]].outcome == "fail"}
        prefix: dict[tuple[int, ...], bool] = {}
        for r, readers in reads.items():
            prefix[r] = order[: len(r)] == r
            if len(set(r)) != len(r):
                dups = sorted(v for v, c in Counter(r).items() if c > 1)
                for i in readers:
                    self.report(
                        "duplicate-elements", [i],
                        f"T{i} read {key} = {_fmt_list(r)} with repeated elements {dups}", key=key,
                    )  # fmt: skip
            if garbage and not garbage.isdisjoint(r):
                bad = sorted(garbage.intersection(r))
                for i in readers:
                    self.report(
                        "garbage-read", [i], f"T{i} read {key} containing {bad}, which no txn appended", key=key
                    )
            if aborted and not aborted.isdisjoint(r):
                bad = sorted(aborted.intersection(r))
                ws = sorted({writer[(key, v)] for v in bad})
                for i in readers:
                    self.report(
                        "G1a", [i, *ws],
                        f"T{i} read {key} containing {bad}, appended by failed "
                        + ", ".join(f"T{w}" for w in ws),
                        key=key,
                    )  # fmt: skip
            if not prefix[r]:
                other = reads[order][0]
                self.report(
                    "incompatible-order", [readers[0], other],
                    f"T{readers[0]} read {key} = {_fmt_list(r)}, not a prefix of T{other}'s read {_fmt_list(order)}",
                    key=key,
                )  # fmt: skip

        # committed appends nobody read: after the whole observed order
        unobs: dict[int, int] = {}
        for w in key_appenders:
            if w in committed:
                for v in appends[w][key]:
                    if v not in obs:
                        unobs[w] = v
                        break

        # ww along the order, then to the unobserved appenders
        prev: int | None = None
        prev_v = 0
        for v, w, j in zip(order, node_w, range(n)):
            if w is None or first_pos[v] != j:
                continue
            if prev is not None and w != prev:
                self.add_edge(prev, w, "ww", key, (prev_v, v, False))
            prev, prev_v = w, v
        if prev is not None:
            for u, uv in unobs.items():
                self.add_edge(prev, u, "ww", key, (prev_v, uv, True))

        # wr, G1b, rw for each external read; lost-update groups
        cache: dict[tuple[int, ...], tuple[int | None, bool, list[tuple[int, Any]]]] = {}
        lost: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, r in ext:
            got = cache.get(r)
            if got is None:
                got = cache[r] = self._ext_read(key, r, prefix[r], order, node_w, first_pos, committed, unobs)
            wr_src, g1b, targets = got
            if wr_src is not None and wr_src != i:
                self.add_edge(wr_src, i, "wr", key, r[-1])
                if g1b:
                    later = appends[wr_src][key][appends[wr_src][key].index(r[-1]) + 1 :]
                    self.report(
                        "G1b", [i, wr_src],
                        f"T{i} read {key} = {_fmt_list(r)}, ending in {r[-1]} from T{wr_src},"
                        f" which went on to append {later} to {key}",
                        key=key,
                    )  # fmt: skip
            for u, detail in targets:
                self.add_edge(i, u, "rw", key, detail)
            if key in appends[i]:
                lost[r].append(i)
        for r, group in lost.items():
            if len(group) > 1:
                who = ", ".join(f"T{i} appended {appends[i][key]}" for i in group)
                self.report(
                    "lost-update", group,
                    f"{len(group)} committed txns read {key} = {_fmt_list(r)} and each appended to it: {who}",
                    key=key,
                )  # fmt: skip

    def _ext_read(
        self,
        key: str,
        r: tuple[int, ...],
        is_prefix: bool,
        order: tuple[int, ...],
        node_w: list[int | None],
        first_pos: dict[int, int],
        committed: set[int],
        unobs: dict[int, int],
    ) -> tuple[int | None, bool, list[tuple[int, Any]]]:
        """(wr source, whether it is an intermediate read, rw targets with details) of a read."""
        last_v = r[-1] if r else None
        last_w = self.writer.get((key, r[-1])) if r else None
        wr_src: int | None = None
        g1b = False
        if last_w is not None and last_w in committed:
            wr_src = last_w
            g1b = self.appends[last_w][key][-1] != last_v
        targets: list[tuple[int, Any]] = []
        if is_prefix:
            for j in range(len(r), len(order)):
                w = node_w[j]
                if w is not None and w != last_w and first_pos[order[j]] == j:
                    targets.append((w, (last_v, order[j], False)))
                    break
            else:
                targets = [(u, (last_v, uv, True)) for u, uv in unobs.items() if u != last_w]
        return wr_src, g1b, targets

    def _commit_versions(self, nodes: list[int]) -> None:
        by_version: dict[int, list[int]] = defaultdict(list)
        for i in nodes:
            t = self.txns[i]
            if t.outcome == "ok" and t.commit_version is not None and self.appends[i]:
                by_version[t.commit_version].append(i)
        for version, group in sorted(by_version.items()):
            if len(group) > 1:
                self.report(
                    "duplicate-commit-version", group,
                    f"{', '.join(f'T{i}' for i in group)} all report commit version {version}",
                )  # fmt: skip

    def _realtime_edges(self, nodes: list[int]) -> None:
        """T1 -rt-> T2 when ok T1 completed before T2's invoke, transitively reduced.

        The frontier holds completed ok txns not yet followed by another completed txn;
        its members overlap pairwise, so it is at most as large as the concurrency.
        """
        events: list[tuple[float, int, int]] = []
        for i in nodes:
            t = self.txns[i]
            events.append((t.invoke_time, 0, i))
            if t.outcome == "ok" and t.complete_time is not None:
                events.append((t.complete_time, 1, i))
        events.sort()
        frontier: set[int] = set()
        preds: dict[int, tuple[int, ...]] = {}
        for _, kind, i in events:
            if kind == 0:
                preds[i] = tuple(frontier)
                for f in preds[i]:
                    self.add_edge(f, i, "rt", None)
            else:
                frontier.difference_update(preds[i])
                frontier.add(i)

    def _process_edges(self, nodes: list[int]) -> None:
        by_proc: dict[int, list[int]] = defaultdict(list)
        for i in nodes:
            by_proc[self.txns[i].process].append(i)
        for ids in by_proc.values():
            ids.sort(key=lambda i: (self.txns[i].invoke_time, i))
            last_ok: int | None = None
            for i in ids:
                if last_ok is not None:
                    self.add_edge(last_ok, i, "process", None)
                if self.txns[i].outcome == "ok":
                    last_ok = i

    # -- cycles ------------------------------------------------------------------
    def _cycles(self, nodes: list[int]) -> None:
        nx = _networkx()
        g = nx.DiGraph()
        g.add_nodes_from(nodes)
        g.add_edges_from(self.edges)
        in_scc: set[int] = set()
        for comp in nx.strongly_connected_components(g):
            if len(comp) > 1:
                in_scc |= comp
        if not in_scc:
            return
        rt_kinds = frozenset(k for k, on in (("rt", self.realtime), ("process", self.process)) if on)
        for spec in _specs(rt_kinds):
            adj: _Adj = defaultdict(list)
            sub = nx.DiGraph()
            for (u, v), kinds in self.edges.items():
                if u in in_scc and v in in_scc:
                    ks = tuple(k for k in _KIND_ORDER if k in kinds and k in spec.allowed)
                    if ks:
                        adj[u].append((v, ks))
                        sub.add_edge(u, v)
            for comp in nx.strongly_connected_components(sub):
                if len(comp) > 1:
                    cyc = self._search(comp, adj, spec)
                    if cyc is not None:
                        self._report_cycle(spec, cyc)

    def _search(self, comp: set[int], adj: _Adj, spec: _Spec) -> list[_Step] | None:
        """Shortest-ish cycle of ``spec``'s shape inside ``comp``, or None.

        States are (txn, mask).  A cycle starting with seed edge a->b exists iff (b, m1)
        reaches (a, accept); adding a closing edge (a, accept) -> (b, m1) for every seed
        turns that into "both ends in one SCC", found with one SCC pass.
        """
        seeds: list[tuple[int, int, str, int]] = []
        for u in comp:
            for v, kinds in adj.get(u, ()):
                if v in comp:
                    for k in kinds:
                        m1 = spec.step(0, k) if k in spec.start else None
                        if m1 is not None:
                            seeds.append((u, v, k, m1))
        if not seeds:
            return None
        acc = spec.accept
        padj: dict[tuple[int, int], list[tuple[tuple[int, int], str]]] = {}
        stack = list({(b, m1) for _, b, _, m1 in seeds})
        seen = set(stack)
        while stack:
            s = stack.pop()
            u, m = s
            out: list[tuple[tuple[int, int], str]] = []
            for v, kinds in adj.get(u, ()):
                if v not in comp:
                    continue
                dests: dict[int, str] = {}
                for k in kinds:
                    m2 = spec.step(m, k)
                    if m2 is not None and m2 not in dests:
                        dests[m2] = k
                for m2, k in dests.items():
                    t = (v, m2)
                    out.append((t, k))
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)
            padj[s] = out
        cands = [sd for sd in seeds if (sd[0], acc) in seen]
        if not cands:
            return None
        nx = _networkx()
        h = nx.DiGraph()
        h.add_nodes_from(seen)
        h.add_edges_from((s, t) for s, out in padj.items() for t, _ in out)
        h.add_edges_from(((a, acc), (b, m1)) for a, b, _, m1 in cands)
        comp_of: dict[tuple[int, int], int] = {}
        for ci, c in enumerate(nx.strongly_connected_components(h)):
            for s in c:
                comp_of[s] = ci
        best: list[_Step] | None = None
        tried = 0
        budget = [_PATH_BUDGET]
        for a, b, k, m1 in cands:
            if comp_of[(a, acc)] != comp_of[(b, m1)]:
                continue
            tried += 1
            # the shortest walk may revisit a txn; then search simple paths only
            path = _bfs(padj, (b, m1), (a, acc))
            if path is None:
                continue
            cyc = [(a, b, k), *path]
            if len({u for u, _, _ in cyc}) != len(cyc):
                simple = _simple_path(padj, (b, m1), (a, acc), budget)
                cyc = [(a, b, k), *simple] if simple is not None else []
            if cyc and (best is None or len(cyc) < len(best)):
                best = cyc
            if tried >= 32 or budget[0] <= 0 or (best is not None and (len(best) <= 2 or tried >= 8)):
                break
        return best

    def _report_cycle(self, spec: _Spec, cyc: list[_Step]) -> None:
        start = min(range(len(cyc)), key=lambda j: cyc[j][0])
        cyc = cyc[start:] + cyc[:start]
        name = spec.name
        if spec.need_rt:
            name += "-realtime" if any(k == "rt" for _, _, k in cyc) else "-process"
        edges = tuple(self._edge(u, v, k) for u, v, k in cyc)
        text = " ".join(f"{self.label(e.src)} {e.label()}" for e in edges) + f" T{cyc[0][0]}"
        ids = tuple(u for u, _, _ in cyc)
        self.anoms[name].append(Anomaly(name, ids, _describe_type(name), edges, text))

    def _edge(self, u: int, v: int, kind: str) -> Edge:
        key, d = self.edges[(u, v)][kind]
        tu, tv = self.txns[u], self.txns[v]
        if kind == "ww":
            a, b, unseen = d
            why = f"T{u} appended {a} to {key}, then T{v} appended {b}" + (
                " (never read, so after every observed element)" if unseen else ""
            )
        elif kind == "wr":
            why = f"T{v} read {key} ending in {d}, which T{u} appended"
        elif kind == "rw":
            last, nxt, unseen = d
            seen_txt = f"ending in {last}" if last is not None else "as empty"
            why = f"T{u} read {key} {seen_txt}; T{v} appended {nxt}, " + (
                "which no read observed, so it comes later" if unseen else "the next version"
            )
        elif kind == "rt":
            why = f"T{u} completed at {tu.complete_time} before T{v} was invoked at {tv.invoke_time}"
        else:
            why = f"T{u} ran before T{v} on process {tu.process}"
        return Edge(u, v, kind, key, why)


def _bfs(
    padj: dict[tuple[int, int], list[tuple[tuple[int, int], str]]],
    src: tuple[int, int],
    dst: tuple[int, int],
) -> list[_Step] | None:
    parent: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {src: None}
    frontier = [src]
    while frontier and dst not in parent:
        nxt: list[tuple[int, int]] = []
        for s in frontier:
            for t, k in padj.get(s, ()):
                if t not in parent:
                    parent[t] = (s, k)
                    nxt.append(t)
        frontier = nxt
    if dst not in parent:
        return None
    path: list[_Step] = []
    cur = dst
    while (p := parent[cur]) is not None:
        prev, k = p
        path.append((prev[0], cur[0], k))
        cur = prev
    path.reverse()
    return path


def _simple_path(
    padj: dict[tuple[int, int], list[tuple[tuple[int, int], str]]],
    src: tuple[int, int],
    dst: tuple[int, int],
    budget: list[int],
) -> list[_Step] | None:
    """Shortest path src -> dst visiting each txn at most once (dst's txn only at the end).

    Breadth-first over simple paths, pruned to states that can still reach ``dst``;
    exponential in the worst case, so it spends from a shared ``budget`` of expansions.
    """
    radj: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for s, out in padj.items():
        for t, _ in out:
            radj[t].append(s)
    live = {dst}
    todo = [dst]
    while todo:
        for s in radj.get(todo.pop(), ()):
            if s not in live:
                live.add(s)
                todo.append(s)
    if src not in live:
        return None
    # entries: (state, parent entry, kind of the edge into it)
    entries: list[tuple[tuple[int, int], int, str]] = [(src, -1, "")]
    queue = deque([0])
    while queue:
        idx = queue.popleft()
        s = entries[idx][0]
        on_path = set()
        j = idx
        while j >= 0:
            on_path.add(entries[j][0][0])
            j = entries[j][1]
        for t, k in padj.get(s, ()):
            if t == dst:
                steps = [(s[0], t[0], k)]
                j = idx
                while entries[j][1] >= 0:
                    st, parent, kind = entries[j]
                    steps.append((entries[parent][0][0], st[0], kind))
                    j = parent
                steps.reverse()
                return steps
            if t not in live or t[0] == dst[0] or t[0] in on_path:
                continue
            budget[0] -= 1
            if budget[0] <= 0:
                return None
            entries.append((t, idx, k))
            queue.append(len(entries) - 1)
    return None


def _networkx() -> Any:
    """networkx, imported when a cycle search needs it (the ``verify`` extra)."""
    return require("networkx", "The anomaly checker (serialake verify)")


def check(
    history: Iterable[Txn],
    *,
    realtime: bool = True,
    process: bool = False,
    forbidden: Iterable[str] | None = None,
) -> Report:
    """Infer dependencies of a list-append history and report anomalies.

    ``forbidden`` (default :data:`SERIALIZABLE_FORBIDDEN`) decides ``valid``; every
    class found is reported either way.  ``realtime``/``process`` add rt/process edges,
    making the ``-realtime``/``-process`` cycle classes detectable.  Txn ids in the
    report are positions in ``history``.  Raises ValueError if an appended value is not
    unique per key.
    """
    txns = list(history)
    checker = _Checker(txns, realtime, process)
    stats = checker.run()
    counts = History(txns).counts()
    forb = SERIALIZABLE_FORBIDDEN if forbidden is None else frozenset(forbidden)
    anomalies = {k: v for k, v in sorted(checker.anoms.items()) if v}
    valid = not (set(anomalies) & forb)
    return Report(valid, anomalies, counts, forb, realtime, process, stats)


_ISOLATION = {
    "serializable": SERIALIZABLE_FORBIDDEN,
    "strict-serializable": STRICT_SERIALIZABLE_FORBIDDEN,
    "write-serializable": WRITE_SERIALIZABLE_FORBIDDEN,
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m serialake.verify.checker FILE...``: merge, check, print; exit 1 if invalid."""
    ap = argparse.ArgumentParser(prog="python -m serialake.verify.checker", description=main.__doc__)
    ap.add_argument("files", nargs="+", help="history / recorder JSON-lines files")
    ap.add_argument("--isolation", choices=sorted(_ISOLATION), default="serializable")
    ap.add_argument("--no-realtime", action="store_true", help="do not add real-time edges")
    ap.add_argument("--process", action="store_true", help="add process-order edges")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    report = check(
        History.merge(args.files),
        realtime=not args.no_realtime,
        process=args.process,
        forbidden=_ISOLATION[args.isolation],
    )
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0 if report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
