"""The worker processes of a multi-process workload: each records a history and a tally.

``child`` runs one worker's body in a child process: its history goes to
``<work>/history-<process>.jsonl``, its tally of outcomes and any crash (a traceback) to
``<work>/stats-<process>.json``. ``finish`` joins the processes by a deadline (one still
running is killed: its transaction in flight stays in the history as info) and adds up the
tallies and crashes. Used by the multi-table workloads (``multitable``, ``groupwrites``).
"""

from __future__ import annotations

import json
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from serialake.core.log.deltalog import DeltaLog
from serialake.verify.history import Recorder

__all__ = ["child", "finish", "summary"]


def child(work: str, process: int, start: Any, body: Callable[[Recorder, Counter[str]], None]) -> None:
    """Wait for ``start``, run ``body(recorder, tally)``, write the tally and any crash."""
    DeltaLog.clear_cache()
    tally: Counter[str] = Counter()
    crashed = None
    start.wait()
    try:
        with Recorder(Path(work) / f"history-{process}.jsonl", process=process) as rec:
            body(rec, tally)
    except BaseException:  # noqa: BLE001 - reported to the parent; the history stays usable
        crashed = traceback.format_exc()
    (Path(work) / f"stats-{process}.json").write_text(json.dumps({"tally": tally, "crashed": crashed}))


def finish(
    procs: Sequence[Any], deadline: float, work: Path, labels: Sequence[str]
) -> tuple[dict[str, int], list[str]]:
    """Join ``procs`` (killing any past ``deadline``); their summed tallies and crash reports.

    ``labels[i]`` names process ``i`` in a crash report.
    """
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
        if p.is_alive():  # hung: its in-flight txn is recorded as info
            p.kill()
            p.join()
    counts: Counter[str] = Counter()
    crashed = []
    for i in range(len(procs)):
        stats = work / f"stats-{i}.json"
        if not stats.exists():
            crashed.append(f"process {labels[i]} wrote no stats")
            continue
        data = json.loads(stats.read_text())
        counts.update(data["tally"])
        if data["crashed"]:
            crashed.append(f"process {labels[i]}: {data['crashed']}")
    return dict(counts), crashed


def summary(config: Any, wall_s: float, counts: dict[str, int]) -> dict[str, Any]:
    """What a report shows of a run (JSON-ready)."""
    return {"config": asdict(config), "wall_s": round(wall_s, 2), "counts": counts}
