"""History model and recording for the list-append workload (Elle style).

A key holds a list of unique ints.  A transaction is a tuple of micro-ops:
``("r", key, None)`` (completion fills in the observed list as a tuple of ints)
and ``("append", key, value)``.  Appended values must be unique per key across
the whole history; the checker relies on it to know who wrote what.

Recording: each OS process owns one :class:`Recorder` writing its own JSON-lines
file of raw :class:`Op` records (an ``invoke`` line, then an ``ok``/``fail``/``info``
line); threads of that process may share it.  :meth:`History.merge` pairs the
records of several files into :class:`Txn` objects; an invoke that never got a
completion (the worker died) becomes an ``info`` txn with ``complete_time=None``.
Times default to ``time.monotonic_ns()``, which on Linux is one system-wide clock,
so times from different processes are comparable.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

__all__ = [
    "History",
    "Handle",
    "Mop",
    "Op",
    "Outcome",
    "Recorder",
    "Txn",
    "append",
    "format_mop",
    "normalize_mops",
    "read",
]

Outcome = Literal["ok", "fail", "info"]
OpType = Literal["invoke", "ok", "fail", "info"]
# ("r", key, tuple[int, ...] | None) or ("append", key, int)
Mop = tuple[str, str, Any]

OUTCOMES: frozenset[str] = frozenset({"ok", "fail", "info"})
OP_TYPES: frozenset[str] = OUTCOMES | {"invoke"}


def read(key: str) -> Mop:
    """A read micro-op whose result is not known yet."""
    return ("r", key, None)


def append(key: str, value: int) -> Mop:
    """An append micro-op."""
    return ("append", key, value)


def _normalize_mop(m: Sequence[Any]) -> Mop:
    if len(m) != 3:
        raise ValueError(f"micro-op must be (f, key, value), got {m!r}")
    f, key, value = m
    if not isinstance(key, str):
        raise ValueError(f"micro-op key must be a str, got {key!r}")
    if f == "r":
        if value is None:
            return ("r", key, None)
        vals = tuple(value)
        for v in vals:
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"read of {key!r} holds a non-int element {v!r}")
        return ("r", key, vals)
    if f == "append":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"append to {key!r} needs an int, got {value!r}")
        return ("append", key, value)
    raise ValueError(f"unknown micro-op function {f!r} (expected 'r' or 'append')")


def normalize_mops(mops: Iterable[Sequence[Any]]) -> tuple[Mop, ...]:
    """Validate micro-ops and turn lists (e.g. from JSON) into tuples."""
    return tuple(_normalize_mop(m) for m in mops)


def _mops_to_json(mops: Sequence[Mop]) -> list[list[Any]]:
    return [[f, k, list(v) if isinstance(v, tuple) else v] for f, k, v in mops]


def format_mop(m: Mop, *, max_elems: int = 6) -> str:
    """Short text for a micro-op: ``append x 5``, ``r x [1, 2, 3]``, ``r x ?``."""
    f, key, value = m
    if f == "append":
        return f"append {key} {value}"
    if value is None:
        return f"r {key} ?"
    if len(value) <= max_elems:
        return f"r {key} [{', '.join(map(str, value))}]"
    head = ", ".join(map(str, value[:1]))
    tail = ", ".join(map(str, value[-(max_elems - 2) :]))
    return f"r {key} [{head}, ..., {tail}] (len {len(value)})"


@dataclass(frozen=True)
class Op:
    """A raw Jepsen-style record: one ``invoke`` line or one completion line."""

    process: int
    index: int
    type: OpType
    mops: tuple[Mop, ...]
    invoke_time: float
    complete_time: float | None = None
    error: str | None = None
    attempts: int | None = None
    commit_version: int | None = None

    def __post_init__(self) -> None:
        if self.type not in OP_TYPES:
            raise ValueError(f"op type must be one of {sorted(OP_TYPES)}, got {self.type!r}")
        object.__setattr__(self, "mops", normalize_mops(self.mops))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d: dict[str, Any] = {
            "type": self.type,
            "process": self.process,
            "index": self.index,
            "mops": _mops_to_json(self.mops),
            "invoke_time": self.invoke_time,
        }
        for name in ("complete_time", "error", "attempts", "commit_version"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Op:
        """Inverse of :meth:`to_dict`."""
        return cls(
            process=d["process"],
            index=d["index"],
            type=d["type"],
            mops=d["mops"],
            invoke_time=d["invoke_time"],
            complete_time=d.get("complete_time"),
            error=d.get("error"),
            attempts=d.get("attempts"),
            commit_version=d.get("commit_version"),
        )


@dataclass(frozen=True)
class Txn:
    """One transaction with its outcome; reads carry their results (``None`` = unknown).

    ``complete_time`` is ``None`` only for ``info`` txns whose completion was never seen.
    """

    process: int
    invoke_time: float
    complete_time: float | None
    outcome: Outcome
    mops: tuple[Mop, ...]
    error: str | None = None
    commit_version: int | None = None
    attempts: int | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {self.outcome!r}")
        if self.complete_time is None and self.outcome != "info":
            raise ValueError(f"a {self.outcome!r} txn needs a complete_time")
        if self.complete_time is not None and self.complete_time < self.invoke_time:
            raise ValueError("complete_time is before invoke_time")
        object.__setattr__(self, "mops", normalize_mops(self.mops))

    def describe(self) -> str:
        """``p3: r x [1, 2]; append x 5`` (the outcome is shown unless it is ok)."""
        status = "" if self.outcome == "ok" else f" {self.outcome}"
        body = "; ".join(format_mop(m) for m in self.mops) or "(no mops)"
        return f"p{self.process}{status}: {body}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d: dict[str, Any] = {
            "outcome": self.outcome,
            "process": self.process,
            "mops": _mops_to_json(self.mops),
            "invoke_time": self.invoke_time,
            "complete_time": self.complete_time,
        }
        for name in ("error", "commit_version", "attempts"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Txn:
        """Inverse of :meth:`to_dict`."""
        return cls(
            process=d["process"],
            invoke_time=d["invoke_time"],
            complete_time=d.get("complete_time"),
            outcome=d["outcome"],
            mops=d["mops"],
            error=d.get("error"),
            commit_version=d.get("commit_version"),
            attempts=d.get("attempts"),
        )

    @classmethod
    def from_ops(cls, invoke: Op, completion: Op | None) -> Txn:
        """Pair an invoke with its completion; no completion gives an ``info`` txn."""
        if completion is None:
            return cls(
                process=invoke.process,
                invoke_time=invoke.invoke_time,
                complete_time=None,
                outcome="info",
                mops=invoke.mops,
                error="no completion recorded",
            )
        return cls(
            process=invoke.process,
            invoke_time=invoke.invoke_time,
            complete_time=completion.complete_time,
            outcome=completion.type,  # type: ignore[arg-type]
            mops=completion.mops,
            error=completion.error,
            commit_version=completion.commit_version,
            attempts=completion.attempts,
        )


def _pair_ops(ops: Iterable[Op]) -> list[Txn]:
    invokes: dict[tuple[int, int], Op] = {}
    completions: dict[tuple[int, int], Op] = {}
    for op in ops:
        k = (op.process, op.index)
        target = invokes if op.type == "invoke" else completions
        if k in target:
            raise ValueError(f"duplicate {op.type} record for process {op.process} index {op.index}")
        target[k] = op
    for k in completions:
        if k not in invokes:
            raise ValueError(f"completion without invoke for process {k[0]} index {k[1]}")
    txns = [Txn.from_ops(inv, completions.get(k)) for k, inv in invokes.items()]
    txns.sort(key=lambda t: (t.invoke_time, t.process))
    return txns


def _load_jsonl(path: str | os.PathLike[str]) -> list[Txn]:
    """Txn lines keep file order; raw op lines are paired and follow, by invoke time."""
    txns: list[Txn] = []
    ops: list[Op] = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            if i == last:  # a writer died mid-line; everything before it is intact
                break
            raise ValueError(f"{path}:{i + 1}: malformed JSON line") from None
        if "outcome" in d:
            txns.append(Txn.from_dict(d))
        elif "type" in d:
            ops.append(Op.from_dict(d))
        else:
            raise ValueError(f"{path}:{i + 1}: neither a txn nor an op record")
    return txns + _pair_ops(ops)


class History(list[Txn]):
    """A list of :class:`Txn`; a txn's position is its id (``T12`` is ``history[12]``)."""

    @classmethod
    def from_ops(cls, ops: Iterable[Op]) -> History:
        """Pair raw op records into txns, ordered by invoke time."""
        return cls(_pair_ops(ops))

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> History:
        """Load a file written by :meth:`to_jsonl` or by a :class:`Recorder`."""
        return cls(_load_jsonl(path))

    @classmethod
    def merge(cls, paths: Iterable[str | os.PathLike[str]]) -> History:
        """Load several files (one per worker process) into one history sorted by invoke time."""
        txns: list[Txn] = []
        for p in paths:
            txns.extend(_load_jsonl(p))
        txns.sort(key=lambda t: (t.invoke_time, t.process))
        return cls(txns)

    def to_jsonl(self, path: str | os.PathLike[str]) -> None:
        """Write one txn per line, in order (so ids survive a round trip)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for t in self:
                fh.write(json.dumps(t.to_dict(), separators=(",", ":")) + "\n")

    def counts(self) -> dict[str, int]:
        """Number of txns per outcome."""
        c = {"ok": 0, "fail": 0, "info": 0}
        for t in self:
            c[t.outcome] += 1
        return c


@dataclass(frozen=True)
class Handle:
    """What :meth:`Recorder.invoke` returns; pass it back to :meth:`Recorder.complete`."""

    process: int
    index: int
    invoke_time: float
    mops: tuple[Mop, ...]


class Recorder:
    """Thread-safe recorder of one OS process's txns, optionally streamed to a JSON-lines file.

    Every record is flushed as it is written, so a killed worker leaves a usable file
    (its in-flight txns load as ``info``).  The file is truncated on open.  Create the
    recorder in the process that uses it (using one across ``fork`` raises).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        process: int = 0,
        clock: Callable[[], float] = time.monotonic_ns,
    ) -> None:
        self.path: Path | None = Path(path) if path is not None else None
        self.process = process
        self._clock = clock
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._next_index = 0
        self._pending: dict[int, Handle] = {}
        self._txns: list[Txn] = []
        self._fh: IO[str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w", encoding="utf-8", buffering=1)

    def now(self) -> float:
        """The recorder's clock, for ``invoke(..., at=...)``."""
        return self._clock()

    def invoke(
        self, mops: Iterable[Sequence[Any]], *, process: int | None = None, at: float | None = None
    ) -> Handle:
        """Record the start of a txn (reads may be ``None``); ``process`` defaults to the recorder's.

        ``at`` (from ``now()``): when the txn really started, for a txn whose micro-ops are
        known only after its first reads (a maintainer appends what it found missing).
        """
        norm = normalize_mops(mops)
        with self._lock:
            self._check_pid()
            h = Handle(
                process=self.process if process is None else process,
                index=self._next_index,
                invoke_time=self._clock() if at is None else at,
                mops=norm,
            )
            self._next_index += 1
            self._pending[h.index] = h
            self._write(Op(h.process, h.index, "invoke", h.mops, h.invoke_time))
        return h

    def complete(
        self,
        handle: Handle,
        outcome: Outcome,
        mops: Iterable[Sequence[Any]] | None = None,
        error: str | None = None,
        commit_version: int | None = None,
        attempts: int | None = None,
    ) -> Txn:
        """Record the end of a txn; ``mops`` (with read results) defaults to the invoked ones."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {outcome!r}")
        norm = handle.mops if mops is None else normalize_mops(mops)
        if [(f, k) for f, k, _ in norm] != [(f, k) for f, k, _ in handle.mops]:
            raise ValueError("completed mops must match the invoked mops (same functions and keys)")
        with self._lock:
            self._check_pid()
            if self._pending.pop(handle.index, None) is None:
                raise ValueError(f"handle {handle.index} is not pending (completed twice?)")
            now = self._clock()
            op = Op(
                handle.process, handle.index, outcome, norm, handle.invoke_time, now,
                error, attempts, commit_version,
            )  # fmt: skip
            self._write(op)
            invoke = Op(handle.process, handle.index, "invoke", handle.mops, handle.invoke_time)
            txn = Txn.from_ops(invoke, op)
            self._txns.append(txn)
        return txn

    def pending(self) -> list[Handle]:
        """Txns invoked but not completed yet."""
        with self._lock:
            return list(self._pending.values())

    def history(self) -> History:
        """Everything recorded so far, by invoke time; pending txns appear as ``info``."""
        with self._lock:
            txns = list(self._txns)
            txns += [
                Txn.from_ops(Op(h.process, h.index, "invoke", h.mops, h.invoke_time), None)
                for h in self._pending.values()
            ]
        txns.sort(key=lambda t: (t.invoke_time, t.process))
        return History(txns)

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_pid(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError("Recorder was created in another process; create one per process")

    def _write(self, op: Op) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(op.to_dict(), separators=(",", ":")) + "\n")
