"""Tests for the list-append history model and the Elle-style checker."""

from __future__ import annotations

import json
import multiprocessing
import random
import re
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serialake.verify.checker import (
    SERIALIZABLE_FORBIDDEN,
    STRICT_SERIALIZABLE_FORBIDDEN,
    WRITE_SERIALIZABLE_FORBIDDEN,
    Report,
    check,
)
from serialake.verify.history import History, Op, Recorder, Txn, append, read

CYCLE_RE = re.compile(r"^T\d+ \(p\d+[^)]*: .+\) -(ww|wr|rw|rt|process)(\[\w+\])?-> .* T\d+$")


def T(  # noqa: N802 - T(1, ...) reads like the T1, T2 of the anomaly papers
    p: int, *mops: Any, outcome: str = "ok", t: tuple[float, float | None] = (0, 100), **kw: Any
) -> Txn:
    """Txn shorthand; ``r("x", 1, 2)`` / ``a("x", 3)`` build the micro-ops; default times overlap."""
    return Txn(p, t[0], t[1], outcome, mops, **kw)  # type: ignore[arg-type]


def r(key: str, *values: int) -> tuple[str, str, tuple[int, ...]]:
    return ("r", key, values)


def a(key: str, value: int) -> tuple[str, str, int]:
    return ("append", key, value)


def assert_cycle(report: Report, name: str) -> None:
    """The class is reported with a printable cycle that starts and ends at the same txn."""
    assert name in report.anomalies, report.summary()
    an = report.anomalies[name][0]
    assert an.edges, an
    assert CYCLE_RE.match(an.cycle), an.cycle
    assert an.cycle.split(" ", 1)[0] == an.cycle.rsplit(" ", 1)[1]
    assert an.edges[0].src == an.edges[-1].dst
    for e1, e2 in zip(an.edges, an.edges[1:]):
        assert e1.dst == e2.src
    assert len({e.src for e in an.edges}) == len(an.edges), "cycle must be simple"
    assert an.cycle in an.explain()
    assert name in report.summary()


# -- clean histories -------------------------------------------------------------


def test_serial_history_is_valid() -> None:
    h = [
        T(0, a("x", 1), t=(0, 1)),
        T(1, r("x", 1), a("x", 2), a("y", 1), t=(2, 3)),
        T(0, r("x", 1, 2), r("y", 1), t=(4, 5)),
        T(2, a("y", 2), r("y", 1, 2), t=(6, 7)),
        T(1, r("x", 1, 2), r("y", 1, 2), t=(8, 9)),
    ]
    rep = check(h, process=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.valid and rep.anomalies == {}, rep.summary()
    assert rep.counts == {"ok": 5, "fail": 0, "info": 0}
    assert "VALID" in rep.summary() and "anomalies: none" in rep.summary()


def test_concurrent_serializable_history_is_valid() -> None:
    # Invoked in order T0, T1, T2 but serialized as T2 < T0 < T1: fine, they overlap.
    h = [
        T(0, r("x", 5), a("x", 6), t=(0, 50)),
        T(1, r("x", 5, 6), r("y", 1), t=(10, 60)),
        T(2, a("x", 5), a("y", 1), t=(20, 30)),
    ]
    rep = check(h, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.valid and rep.anomalies == {}, rep.summary()


def test_empty_history() -> None:
    rep = check([])
    assert rep.valid and rep.counts == {"ok": 0, "fail": 0, "info": 0}


# -- each anomaly class, exactly --------------------------------------------------


def test_g0_write_cycle() -> None:
    h = [
        T(0, a("x", 1), a("y", 2)),
        T(1, a("x", 3), a("y", 4)),
        T(2, r("x", 1, 3), r("y", 4, 2)),
    ]
    rep = check(h)
    assert rep.anomaly_types == {"G0"}, rep.summary()
    assert_cycle(rep, "G0")
    assert {e.kind for e in rep.anomalies["G0"][0].edges} == {"ww"}
    assert not rep.valid and not check(h, forbidden=WRITE_SERIALIZABLE_FORBIDDEN).valid


def test_g1a_aborted_read() -> None:
    h = [T(0, a("x", 1), outcome="fail"), T(1, r("x", 1))]
    rep = check(h)
    assert rep.anomaly_types == {"G1a"}, rep.summary()
    an = rep.anomalies["G1a"][0]
    assert an.txns == (1, 0) and "failed T0" in an.explain()
    assert not rep.valid and not check(h, forbidden=WRITE_SERIALIZABLE_FORBIDDEN).valid


def test_g1b_intermediate_read() -> None:
    h = [
        T(0, a("x", 1), a("x", 2)),
        T(1, r("x", 1)),
        T(2, r("x", 1, 2)),
    ]
    rep = check(h)
    assert rep.anomaly_types == {"G1b"}, rep.summary()
    assert rep.anomalies["G1b"][0].txns == (1, 0)
    assert not rep.valid


def test_g1c_circular_information_flow() -> None:
    h = [T(0, a("x", 1), r("y", 1)), T(1, a("y", 1), r("x", 1))]
    rep = check(h)
    assert rep.anomaly_types == {"G1c"}, rep.summary()
    assert_cycle(rep, "G1c")
    assert {e.kind for e in rep.anomalies["G1c"][0].edges} == {"wr"}
    assert not check(h, forbidden=WRITE_SERIALIZABLE_FORBIDDEN).valid


def test_g_single_read_skew() -> None:
    h = [
        T(0, a("x", 1), a("y", 1)),
        T(1, r("x"), r("y", 1)),
        T(2, r("x", 1), r("y", 1)),
    ]
    rep = check(h)
    assert rep.anomaly_types == {"G-single"}, rep.summary()
    assert_cycle(rep, "G-single")
    an = rep.anomalies["G-single"][0]
    assert sorted(e.kind for e in an.edges) == ["rw", "wr"]
    assert an.cycle == "T0 (p0: append x 1; append y 1) -wr[y]-> T1 (p1: r x []; r y [1]) -rw[x]-> T0"
    # read skew is allowed under WriteSerializable
    assert not rep.valid and check(h, forbidden=WRITE_SERIALIZABLE_FORBIDDEN).valid


def test_g2_item_write_skew() -> None:
    h = [
        T(0, r("x"), r("y"), a("x", 1)),
        T(1, r("x"), r("y"), a("y", 1)),
        T(2, r("x", 1), r("y", 1), t=(200, 300)),
    ]
    rep = check(h)
    assert rep.anomaly_types == {"G2-item"}, rep.summary()
    assert_cycle(rep, "G2-item")
    assert [e.kind for e in rep.anomalies["G2-item"][0].edges] == ["rw", "rw"]
    assert not rep.valid
    assert check(h, forbidden=WRITE_SERIALIZABLE_FORBIDDEN).valid


def test_stale_read_is_a_realtime_only_violation() -> None:
    # T0 completes its append; T1 starts afterwards yet reads the empty list.
    h = [T(0, a("x", 1), t=(0, 10)), T(1, r("x"), t=(20, 30))]
    rep = check(h)
    assert rep.anomaly_types == {"G-single-realtime"}, rep.summary()
    assert_cycle(rep, "G-single-realtime")
    assert sorted(e.kind for e in rep.anomalies["G-single-realtime"][0].edges) == ["rt", "rw"]
    assert rep.valid  # serializable: T1 may be ordered first
    assert not check(h, forbidden=STRICT_SERIALIZABLE_FORBIDDEN).valid
    assert check(h, realtime=False).anomalies == {}
    # overlapping in time: no violation at all
    assert check([T(0, a("x", 1), t=(0, 25)), T(1, r("x"), t=(20, 30))]).anomalies == {}


def test_process_order_variant() -> None:
    h = [T(0, a("x", 1), t=(0, 10)), T(0, r("x"), t=(20, 30))]
    rep = check(h, realtime=False, process=True)
    assert rep.anomaly_types == {"G-single-process"}, rep.summary()
    assert_cycle(rep, "G-single-process")
    assert not check(h, realtime=False, process=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN).valid
    # with both, real-time edges are preferred in the printed cycle
    assert check(h, realtime=True, process=True).anomaly_types == {"G-single-realtime"}


def test_g0_and_g1c_realtime_variants() -> None:
    # T0 appends x 1 and completes; T1 then appends x 2 but the order says 2 before 1.
    h = [T(0, a("x", 1), t=(0, 10)), T(1, a("x", 2), t=(20, 30)), T(2, r("x", 2, 1), t=(40, 50))]
    rep = check(h)
    assert rep.anomaly_types == {"G0-realtime"}, rep.summary()
    assert_cycle(rep, "G0-realtime")
    # T0 read x = [1] and finished before T1, the txn appending 1, even began.
    h = [T(0, r("x", 1), t=(0, 10)), T(1, a("x", 1), t=(20, 30))]
    rep = check(h)
    assert rep.anomaly_types == {"G1c-realtime"}, rep.summary()
    assert_cycle(rep, "G1c-realtime")


def test_lost_update() -> None:
    h = [
        T(0, r("x"), a("x", 1)),
        T(1, r("x"), a("x", 2)),
        T(2, r("x", 1, 2), t=(200, 300)),
    ]
    rep = check(h, forbidden=WRITE_SERIALIZABLE_FORBIDDEN)
    # a lost update is also (necessarily) a G-single cycle: T0 -ww-> T1 -rw-> T0
    assert rep.anomaly_types == {"lost-update", "G-single"}, rep.summary()
    lu = rep.anomalies["lost-update"][0]
    assert lu.txns == (0, 1) and lu.key == "x"
    assert "read x = []" in lu.explain()
    assert_cycle(rep, "G-single")
    assert not rep.valid and rep.violations == ["lost-update"]


def test_blind_appends_are_not_lost_updates() -> None:
    h = [T(0, a("x", 1)), T(1, a("x", 2)), T(2, r("x", 1, 2), t=(200, 300))]
    rep = check(h, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.valid and rep.anomalies == {}, rep.summary()


def test_duplicate_elements() -> None:
    rep = check([T(0, a("x", 1)), T(1, r("x", 1, 1))])
    assert rep.anomaly_types == {"duplicate-elements"}, rep.summary()
    assert "[1]" in rep.anomalies["duplicate-elements"][0].message
    assert not rep.valid


def test_garbage_read() -> None:
    rep = check([T(0, a("x", 1)), T(1, r("x", 1, 7))])
    assert rep.anomaly_types == {"garbage-read"}, rep.summary()
    assert rep.anomalies["garbage-read"][0].txns == (1,)
    assert not rep.valid


def test_incompatible_order() -> None:
    h = [T(0, a("x", 1)), T(1, a("x", 2)), T(2, r("x", 1)), T(3, r("x", 2))]
    rep = check(h)
    assert rep.anomaly_types == {"incompatible-order"}, rep.summary()
    assert set(rep.anomalies["incompatible-order"][0].txns) == {2, 3}
    assert not rep.valid


def test_internal_inconsistency() -> None:
    rep = check([T(0, a("x", 1)), T(1, r("x", 1), a("x", 2), r("x", 1))])
    assert "internal" in rep.anomaly_types, rep.summary()
    assert not rep.valid
    # reading your own append is fine
    assert check([T(0, a("x", 1), r("x", 1)), T(1, r("x", 1), a("x", 2), r("x", 1, 2))]).anomalies == {}


def test_duplicate_commit_version() -> None:
    h = [T(0, a("x", 1), commit_version=3), T(1, a("x", 2), commit_version=3), T(2, r("x", 1, 2))]
    rep = check(h)
    assert rep.anomaly_types == {"duplicate-commit-version"}
    assert rep.anomalies["duplicate-commit-version"][0].txns == (0, 1)


def test_non_unique_appends_are_rejected() -> None:
    with pytest.raises(ValueError, match="unique"):
        check([T(0, a("x", 1)), T(1, a("x", 1))])


# -- fail / info semantics ---------------------------------------------------------


def test_failed_txn_never_committed() -> None:
    h = [T(0, a("x", 1), outcome="fail", t=(0, 10)), T(1, r("x"), t=(20, 30))]
    assert check(h, forbidden=STRICT_SERIALIZABLE_FORBIDDEN).anomalies == {}


def test_unobserved_info_txn_is_ignored() -> None:
    # Had T0 been ok this would be a stale read; being info, it may never have committed.
    h = [T(0, a("x", 1), outcome="info", t=(0, 10)), T(1, r("x"), t=(20, 30))]
    rep = check(h, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.anomalies == {} and rep.valid
    assert rep.counts == {"ok": 1, "fail": 0, "info": 1} and rep.stats["info_committed"] == 0
    ok = [T(0, a("x", 1), t=(0, 10)), T(1, r("x"), t=(20, 30))]
    assert not check(ok, forbidden=STRICT_SERIALIZABLE_FORBIDDEN).valid


def test_observed_info_txn_counts_as_committed() -> None:
    # y=1 is observed, so T0 committed, so its unread x=1 also exists: read skew.
    h = [T(0, a("x", 1), a("y", 1), outcome="info", t=(0, None)), T(1, r("x"), r("y", 1))]
    rep = check(h)
    assert rep.stats["info_committed"] == 1
    assert rep.anomaly_types == {"G-single"}, rep.summary()
    assert_cycle(rep, "G-single")
    assert "p0 info:" in rep.anomalies["G-single"][0].cycle


def test_info_txn_gets_no_outgoing_realtime_edges() -> None:
    # T0's outcome is unknown, so it may have committed after T1's read.
    h = [
        T(0, a("x", 1), outcome="info", t=(0, 10)),
        T(1, r("x"), t=(20, 30)),
        T(2, r("x", 1), t=(40, 50)),
    ]
    rep = check(h, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.valid and rep.anomalies == {}, rep.summary()
    assert rep.stats["info_committed"] == 1 and rep.stats["edges_rt"] >= 1


def test_info_reads_of_unknown_results_are_skipped() -> None:
    h = [T(0, ("r", "x", None), a("x", 1), outcome="info", t=(0, None)), T(1, r("x", 1))]
    rep = check(h)
    assert rep.valid and rep.anomalies == {}


# -- report output ------------------------------------------------------------------


def test_report_to_dict_is_json_and_summary_readable() -> None:
    h = [T(0, a("x", 1), a("y", 1)), T(1, r("x"), r("y", 1)), T(2, a("z", 1), outcome="fail"), T(3, r("z", 1))]
    rep = check(h)
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["valid"] is False and set(d["violations"]) == {"G-single", "G1a"}
    assert d["counts"] == {"ok": 3, "fail": 1, "info": 0}
    cyc = d["anomalies"]["G-single"][0]
    assert cyc["cycle"].startswith("T0 (p0: append x 1; append y 1) -wr[y]-> T1")
    assert {e["kind"] for e in cyc["edges"]} == {"wr", "rw"}
    text = rep.summary()
    assert text.splitlines()[0] == "history check: INVALID (G-single, G1a)"
    assert "[forbidden]" in text and "T1 -rw[x]-> T0:" in text


def test_long_reads_are_abbreviated() -> None:
    h = [T(0, *[a("x", i) for i in range(50)]), T(1, r("x", *range(49)))]
    rep = check(h)
    assert "G1b" in rep.anomaly_types
    assert "(len 49)" in rep.anomalies["G1b"][0].message


# -- history files and recording ---------------------------------------------------------


def test_history_jsonl_roundtrip(tmp_path: Path) -> None:
    h = History(
        [
            T(0, a("x", 1), t=(0, 10), commit_version=1, attempts=2),
            T(1, r("x", 1), a("y", 2), outcome="fail", error="ConcurrentAppendException", t=(5, 12)),
            T(2, ("r", "x", None), outcome="info", t=(7, None)),
        ]
    )
    path = tmp_path / "h.jsonl"
    h.to_jsonl(path)
    back = History.from_jsonl(path)
    assert back == h and isinstance(back, History)
    assert back[1].error == "ConcurrentAppendException" and back[0].attempts == 2
    assert back.counts() == {"ok": 1, "fail": 1, "info": 1}


def test_recorder_in_memory_and_pending() -> None:
    ticks = iter(range(100))
    rec = Recorder(process=7, clock=lambda: next(ticks))
    h1 = rec.invoke([read("x"), append("x", 1)])
    h2 = rec.invoke([append("y", 1)], process=8)
    t1 = rec.complete(h1, "ok", [("r", "x", [5]), ("append", "x", 1)], commit_version=4)
    assert t1.mops == (("r", "x", (5,)), ("append", "x", 1)) and t1.process == 7
    assert (t1.invoke_time, t1.complete_time, t1.commit_version) == (0, 2, 4)
    assert rec.pending() == [h2]
    hist = rec.history()
    assert [t.outcome for t in hist] == ["ok", "info"] and hist[1].process == 8
    with pytest.raises(ValueError):
        rec.complete(h1, "ok")
    with pytest.raises(ValueError):
        rec.complete(h2, "ok", [("append", "z", 1)])


def test_recorder_file_with_threads(tmp_path: Path) -> None:
    """Threads share a recorder and a lock-protected dict; the history is strict serializable."""
    path = tmp_path / "p0.jsonl"
    db: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    counter = iter(range(1, 10**9))
    with Recorder(path) as rec:

        def worker(p: int) -> None:
            rng = random.Random(p)
            for _ in range(100):
                keys = rng.sample(["a", "b", "c"], 2)
                mops: list[Any] = [read(keys[0]), append(keys[1], 0)]
                with lock:
                    mops[1] = append(keys[1], next(counter))
                h = rec.invoke(mops, process=p)
                with lock:
                    done = [("r", keys[0], list(db[keys[0]])), mops[1]]
                    db[keys[1]].append(mops[1][2])
                rec.complete(h, "ok", done)

        threads = [threading.Thread(target=worker, args=(p,)) for p in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        final = rec.invoke([read(k) for k in "abc"])
        rec.complete(final, "ok", [("r", k, db[k]) for k in "abc"])
    from_file = History.from_jsonl(path)
    assert len(from_file) == 401 and from_file == rec.history()
    rep = check(from_file, process=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.valid, rep.summary()


def _process_worker(path: str, p: int, crash: bool) -> None:
    rec = Recorder(path, process=p)
    for i in range(20):
        h = rec.invoke([read(f"k{p}"), append(f"k{p}", i)])
        rec.complete(h, "ok", [("r", f"k{p}", list(range(i))), ("append", f"k{p}", i)])
    if crash:
        rec.invoke([append(f"k{p}", 999)])  # dies before completing
        rec._fh.write('{"type": "ok", "proc')  # type: ignore[union-attr]  # torn last line
        rec._fh.flush()  # type: ignore[union-attr]
        return
    rec.close()


def test_merge_files_from_worker_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    paths = [str(tmp_path / f"p{p}.jsonl") for p in range(3)]
    procs = [ctx.Process(target=_process_worker, args=(paths[p], p, p == 2)) for p in range(3)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
        assert pr.exitcode == 0
    h = History.merge(paths)
    assert len(h) == 61
    assert h.counts() == {"ok": 60, "fail": 0, "info": 1}
    assert all(x.invoke_time <= y.invoke_time for x, y in zip(h, h[1:]))
    (lost,) = [t for t in h if t.outcome == "info"]
    assert lost.complete_time is None and lost.mops == (("append", "k2", 999),)
    rep = check(h, process=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.valid, rep.summary()


def test_op_records_pair_into_txns() -> None:
    ops = [
        Op(1, 0, "invoke", (read("x"),), 5),
        Op(0, 0, "invoke", (append("x", 1),), 1),
        Op(0, 0, "ok", (append("x", 1),), 1, 3),
        Op(1, 0, "fail", (("r", "x", [1]),), 5, 6, error="ConcurrentAppendException"),
    ]
    h = History.from_ops(ops)
    assert [(t.process, t.outcome) for t in h] == [(0, "ok"), (1, "fail")]
    assert h[1].error == "ConcurrentAppendException"
    assert Op.from_dict(ops[3].to_dict()) == ops[3]


def test_recorder_refuses_use_after_fork(tmp_path: Path) -> None:
    rec = Recorder()
    rec._pid = -1  # pretend we are a forked child
    with pytest.raises(RuntimeError):
        rec.invoke([read("x")])


# -- generated histories -------------------------------------------------------------


def simulate(
    procs: int, per_proc: int, *, keys: int = 10, seed: int = 0, mode: str = "serializable",
    p_fail: float = 0.05, p_info: float = 0.03, rotate: int = 0,
) -> History:  # fmt: skip
    """Random list-append run against an in-memory store.

    Each txn invokes, later executes atomically (its linearization point), later
    completes, so "serializable" mode yields strict serializable histories.  "si" mode
    reads from the snapshot taken at invoke and applies appends without conflict
    detection (lost updates and write skew galore).  With ``rotate`` the ``keys`` in use
    move on by one every ``rotate`` txns (as in the real workload), so lists stay short.
    """
    rng = random.Random(seed)
    db: dict[str, list[int]] = defaultdict(list)
    next_val: dict[str, int] = defaultdict(int)
    left = {p: per_proc for p in range(procs)}
    state: dict[int, dict[str, Any]] = {}
    out: list[Txn] = []
    clock = 0
    while left or state:
        clock += 1
        p = rng.choice(sorted(set(left) | set(state)))
        st_ = state.get(p)
        if st_ is None:
            left[p] -= 1
            if not left[p]:
                del left[p]
            mops: list[Any] = []
            base = len(out) // rotate if rotate else 0
            for _ in range(rng.randint(1, 4)):
                k = f"k{base + rng.randrange(keys)}"
                if rng.random() < 0.5:
                    mops.append(read(k))
                else:
                    next_val[k] += 1
                    mops.append(append(k, next_val[k]))
            snap = {k: list(v) for k, v in db.items()} if mode == "si" else None
            state[p] = {"t0": clock, "mops": mops, "snap": snap, "done": None}
        elif st_["done"] is None:
            outcome = "ok"
            roll = rng.random()
            if roll < p_fail:
                outcome = "fail"
            elif roll < p_fail + p_info:
                outcome = "info"
            applies = outcome == "ok" or (outcome == "info" and rng.random() < 0.5)
            view = st_["snap"] if mode == "si" else db
            local: dict[str, list[int]] = {}
            done: list[Any] = []
            for f, k, v in st_["mops"]:
                cur = local.setdefault(k, list(view.get(k, [])))
                if f == "r":
                    done.append(("r", k, list(cur) if outcome != "fail" else None))
                else:
                    cur.append(v)
                    done.append((f, k, v))
                    if applies:
                        db[k].append(v)
            st_["done"] = (outcome, done)
        else:
            outcome, done = st_["done"]
            out.append(Txn(p, st_["t0"], clock, outcome, done))
            del state[p]
    clock += 1
    out.append(Txn(procs, clock, clock + 1, "ok", [("r", k, v) for k, v in sorted(db.items())]))
    return History(out)


def test_generated_clean_history_4000_txns() -> None:
    h = simulate(8, 500, seed=1)
    assert len(h) == 4001
    n_mops = sum(len(t.mops) for t in h)
    t0 = time.perf_counter()
    rep = check(h, process=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    elapsed = time.perf_counter() - t0
    print(f"\nchecked {len(h)} txns / {n_mops} mops in {elapsed:.2f}s; stats {rep.stats}")
    assert rep.valid and rep.anomalies == {}, rep.summary()
    assert rep.stats["edges_rw"] > 0 and rep.stats["edges_ww"] > 0 and rep.stats["edges_rt"] > 0
    assert elapsed < 30


def test_generated_snapshot_isolation_history_is_caught() -> None:
    h = simulate(8, 100, keys=4, seed=2, mode="si")
    t0 = time.perf_counter()
    rep = check(h)
    elapsed = time.perf_counter() - t0
    print(f"\nSI history: {sorted(rep.anomaly_types)} in {elapsed:.2f}s")
    assert not rep.valid
    assert {"lost-update", "G-single"} <= rep.anomaly_types
    # SI never shows dirty or intermediate reads, nor broken list order
    assert not rep.anomaly_types & {"G0", "G1a", "G1b", "G1c", "incompatible-order", "garbage-read"}
    for name in rep.anomaly_types & {"G-single", "G2-item", "G-single-realtime", "G2-item-realtime"}:
        assert_cycle(rep, name)
    assert elapsed < 30


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), procs=st.integers(1, 5), keys=st.integers(1, 4))
def test_random_serializable_runs_pass(seed: int, procs: int, keys: int) -> None:
    h = simulate(procs, 15, keys=keys, seed=seed, p_fail=0.2, p_info=0.2)
    rep = check(h, process=True, forbidden=STRICT_SERIALIZABLE_FORBIDDEN)
    assert rep.valid and rep.anomalies == {}, rep.summary()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_random_si_runs_report_only_rw_shaped_anomalies(seed: int) -> None:
    h = simulate(3, 10, keys=2, seed=seed, mode="si", p_fail=0.1, p_info=0.1)
    rep = check(h)
    allowed = {"lost-update", "G-single", "G2-item", "G-single-realtime", "G2-item-realtime"}
    assert rep.anomaly_types <= allowed, rep.summary()
    assert check(h, forbidden=WRITE_SERIALIZABLE_FORBIDDEN).valid == ("lost-update" not in rep.anomaly_types)
    assert SERIALIZABLE_FORBIDDEN <= STRICT_SERIALIZABLE_FORBIDDEN


def test_cli_checks_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from serialake.verify.checker import main

    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    History([T(0, a("x", 1), t=(0, 10)), T(1, r("x", 1), t=(20, 30))]).to_jsonl(good)
    History([T(0, a("x", 1), t=(0, 10)), T(1, r("x"), t=(20, 30))]).to_jsonl(bad)
    assert main([str(good), "--isolation", "strict-serializable"]) == 0
    assert main([str(bad)]) == 0  # a stale read is serializable
    assert main([str(bad), "--isolation", "strict-serializable", "--json"]) == 1
    out = capsys.readouterr().out
    assert '"G-single-realtime"' in out
